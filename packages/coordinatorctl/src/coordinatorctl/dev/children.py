"""The processes `coordinatorctl dev` starts, and the promise that none outlives it.

Every child is a real program run by this Python (`python -m coordinator_sandbox …`,
`python -m coordinator_api.serve serve …`, `python -m coordinatorctl console …`), in a session of
its own so that a Ctrl-C at the terminal reaches `dev` alone and `dev` stops them in order:
SIGTERM to the child's process group, SIGKILL after a grace. On Linux each child also asks the
kernel for SIGTERM when `dev` dies (PR_SET_PDEATHSIG), so even a SIGKILLed `dev` leaves nothing
running. Children are started from the main thread only (the death signal follows the thread
that forked). A child's stdout and stderr go to its log file under `.coordinator/dev/logs/`,
except where `dev` reads a readiness line from stdout.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Final

__all__ = ["Child", "ChildFailed", "Children", "run_once"]

GRACE_SECONDS: Final = 10.0
_PR_SET_PDEATHSIG: Final = 1


class ChildFailed(Exception):
    """A child could not start, exited early or did not become ready; the message says which
    and where its log is."""


def _death_signal() -> Callable[[], None] | None:
    """A pre-exec hook that makes the child receive SIGTERM when its parent dies (Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name, use_errno=True)
    except OSError:
        return None
    prctl = libc.prctl

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)

    return hook


@dataclass
class Child:
    """One running child: its name (which names its log), the process and its log path."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path
    lines: queue.Queue[str] = field(default_factory=queue.Queue)

    def alive(self) -> bool:
        return self.process.poll() is None

    def wait_line(self, prefix: str, timeout: float) -> str:
        """The first stdout line that starts with `prefix` (the rest of it), within `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChildFailed(f"{self.name} did not report ready in time (log: {self.log})")
            try:
                line = self.lines.get(timeout=min(left, 0.2))
            except queue.Empty:
                if not self.alive():
                    raise ChildFailed(
                        f"{self.name} exited with code {self.process.returncode} (log: {self.log})"
                    ) from None
                continue
            if line.startswith(prefix):
                return line[len(prefix) :].strip()


class Children:
    """Every process `dev` started, stopped newest first."""

    def __init__(self, logs: Path, environment: Mapping[str, str]) -> None:
        self.logs = logs
        self.environment = dict(environment)
        self.running: dict[str, Child] = {}
        self._hook = _death_signal()

    def start(self, name: str, arguments: Sequence[str], *, read_stdout: bool = False) -> Child:
        """`python -m …arguments`; with `read_stdout`, its stdout lines are kept for
        `wait_line` (and copied to its log)."""
        self.logs.mkdir(parents=True, exist_ok=True)
        log = self.logs / f"{name}.log"
        handle = log.open("ab")
        process = subprocess.Popen(
            [sys.executable, *arguments],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if read_stdout else handle,
            stderr=handle,
            env=self.environment,
            start_new_session=True,
            preexec_fn=self._hook,  # noqa: PLW1509 - only prctl(2), async-signal-safe
        )
        handle.close()
        child = Child(name, process, log)
        if read_stdout:
            assert process.stdout is not None
            _pump(process.stdout, child.lines, log)
        self.running[name] = child
        return child

    def stop(self, name: str) -> int | None:
        """SIGTERM the child's group, SIGKILL after the grace; its exit code. The child counts
        as running until it has ended (`kill_all` meanwhile ends it at once)."""
        child = self.running.get(name)
        if child is None:
            return None
        try:
            return _stop(child.process)
        finally:
            self.running.pop(name, None)

    def stop_all(self) -> None:
        for name in reversed(list(self.running)):
            self.stop(name)

    def kill_all(self) -> None:
        """SIGKILL the group of every child still running, the one being stopped included
        (called from a signal handler: it only sends signals)."""
        for child in list(self.running.values()):
            _signal_group(child.process, signal.SIGKILL)


def _pump(stream: IO[bytes], lines: queue.Queue[str], log: Path) -> None:
    """Copy a child's stdout into its log, line by line, keeping each line for `wait_line`."""

    def pump() -> None:
        with log.open("ab") as copy:
            for raw in iter(stream.readline, b""):
                copy.write(raw)
                copy.flush()
                lines.put(raw.decode("utf-8", "replace"))

    threading.Thread(target=pump, name="dev-child-stdout", daemon=True).start()


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)


def _stop(process: subprocess.Popen[bytes]) -> int:
    if process.poll() is None:
        _signal_group(process, signal.SIGTERM)
    try:
        return process.wait(GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        _signal_group(process, signal.SIGKILL)
        return process.wait(GRACE_SECONDS)


def run_once(
    arguments: Sequence[str], environment: Mapping[str, str], *, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """`python -m …arguments` to its end (a short command: keys, bind, caller-token), in its
    own session, stopped with `dev` if `dev` is interrupted meanwhile."""
    process = subprocess.Popen(
        [sys.executable, *arguments],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(environment),
        start_new_session=True,
        preexec_fn=_death_signal(),  # noqa: PLW1509 - only prctl(2), async-signal-safe
    )
    try:
        out, err = process.communicate(timeout=timeout)
    except BaseException:
        _stop(process)
        raise
    return subprocess.CompletedProcess(
        process.args,
        process.returncode,
        out.decode("utf-8", "replace"),
        err.decode("utf-8", "replace"),
    )
