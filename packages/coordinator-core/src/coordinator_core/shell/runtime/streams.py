"""A command's stdout and stderr: a closed or full one ends it with exit 3, never a traceback."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import sys
from collections.abc import Callable
from typing import Any, Final, TextIO, cast

from coordinator_core.errors import Diagnostic

__all__ = ["EXIT_OUTPUT_UNAVAILABLE", "OutputUnavailable", "guard_output", "output_unavailable"]

EXIT_OUTPUT_UNAVAILABLE: Final = 3
_CODE: Final = "coordinator.command.output-unavailable"


class OutputUnavailable(OSError):
    """Writing or flushing the standard output or error failed (EPIPE, ENOSPC, EBADF, …)."""


def output_unavailable() -> Diagnostic:
    """The diagnostic of an output that cannot be written: it names the streams, not a value."""
    return Diagnostic(
        _CODE,
        path="",
        message="The standard output or error cannot be written: the reader closed the pipe,"
        " the stream is closed, or the device is full.",
        hint="Keep the reader of the output open, or write to a device with free space; a"
        " command that changes state may have taken effect, so check it with a read-only"
        " command before repeating it.",
    )


class _Guarded(io.TextIOBase):
    """A standard stream whose write and flush failures raise `OutputUnavailable`; everything
    else is the stream's own. Stands for a stream the process started without (fd closed)."""

    def __init__(self, stream: TextIO | None) -> None:
        super().__init__()
        self._stream = stream
        self.failed = False

    def _failed(self, error: BaseException | None) -> OutputUnavailable:
        self.failed = True
        number = error.errno if isinstance(error, OSError) and error.errno else errno.EBADF
        return OutputUnavailable(number, os.strerror(number))

    def write(self, text: str) -> int:
        if self._stream is None:
            raise self._failed(None)
        try:
            return self._stream.write(text)
        except (OSError, ValueError) as error:  # ValueError: the stream was closed
            raise self._failed(error) from None

    def flush(self) -> None:
        if self._stream is None:
            return
        try:
            self._stream.flush()
        except (OSError, ValueError) as error:
            raise self._failed(error) from None

    def isatty(self) -> bool:
        try:
            return self._stream is not None and self._stream.isatty()
        except (OSError, ValueError):
            return False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        if self._stream is None:
            raise OutputUnavailable(errno.EBADF, os.strerror(errno.EBADF))
        return self._stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._stream, "encoding", None) or "utf-8"

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self._stream, "errors", None)

    def close(self) -> None:
        """Closing the guard never closes the process's stream."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _silence(stream: TextIO | None) -> None:
    """Point a failed stream's descriptor at /dev/null, so that nothing left in its buffer can
    fail again when the interpreter flushes it at exit."""
    if stream is None:
        return
    with contextlib.suppress(OSError, ValueError):
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, stream.fileno())
        finally:
            os.close(null)


def guard_output(main: Callable[[], int], report: Callable[[Diagnostic], None]) -> int:
    """Run `main` with guarded standard streams and return its exit code; if writing or
    flushing either stream failed, even where a library swallowed the error (argparse's help
    does), return 3 after `report` has been given `output_unavailable()` to write on stderr (a
    failure to write it is ignored: stderr may be the stream that failed). `SystemExit`
    (argparse's help) passes once its output is flushed.

    The code is `coordinator.command.output-unavailable` (spec/errors.yaml, exit 3)."""
    stdout, stderr = sys.stdout, sys.stderr
    guarded_out, guarded_err = _Guarded(stdout), _Guarded(stderr)
    sys.stdout, sys.stderr = cast(TextIO, guarded_out), cast(TextIO, guarded_err)
    try:
        code = EXIT_OUTPUT_UNAVAILABLE
        exit_request: SystemExit | None = None
        try:
            try:
                code = main()
            except SystemExit as request:
                exit_request = request
            guarded_out.flush()
            guarded_err.flush()
        except OutputUnavailable:
            pass
        if not (guarded_out.failed or guarded_err.failed):
            if exit_request is not None:
                raise exit_request
            return code
        with contextlib.suppress(OutputUnavailable):
            guarded_out.flush()  # what stdout still holds, when stderr was the one that failed
        if guarded_out.failed:
            _silence(stdout)
        with contextlib.suppress(OutputUnavailable):
            report(output_unavailable())
            guarded_err.flush()
        if guarded_err.failed:
            _silence(stderr)
        return EXIT_OUTPUT_UNAVAILABLE
    finally:
        sys.stdout, sys.stderr = stdout, stderr
