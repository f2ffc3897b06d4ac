"""The restore witness (07 §12.1 item 5): a file on storage outside the backup set that names
the journal line of every proof of commit, so that a store and journal put back together on
the same database (a volume or machine snapshot rolled back, a file copied over itself) are
still seen to be older than what was sent.

One line per journal write that carried a `dispatch`/`committed` entry: the position of the
last such line of the write (`JournalPosition`: group, sequence, line hash, file number and
offset), as canonical JSON. The line is appended and fsynced after the journal line is on
stable storage and before the request leaves (`AuditWriter`), so a crash can leave the witness
behind the journal but never ahead of it. Appends of several processes share the file: each
takes an exclusive `flock` on it for its write and checks that it still writes the file the
path names (a `replace` may have put a new one there).

At start the process reads the last position of each group (`positions`) and refuses when the
journal does not hold that line (`restore_detection`); a restore hold rewrites the witness with
the journal's ends (`replace`), as it does the store's heads.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from coordinator_core.errors import CoordinatorError, Diagnostic
from coordinator_core.shell.audit.entries import JOURNAL_FILE_RE
from coordinator_core.shell.audit.writer import JournalPosition

__all__ = ["RestoreWitness"]

_MEMBERS: Final = frozenset({"group", "sequence", "lineHash", "fileNumber", "lineOffset"})
_FLAGS: Final = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
_MAX_LINE: Final = 1024


def _altered(message: str) -> CoordinatorError:
    return CoordinatorError(
        Diagnostic(code="coordinator.audit.journal-altered", file="restoreWitness", message=message)
    )


def _line(position: JournalPosition) -> bytes:
    return (
        json.dumps(
            {
                "fileNumber": position.file_number,
                "group": position.group,
                "lineHash": position.line_hash,
                "lineOffset": position.line_offset,
                "sequence": position.sequence,
            },
            sort_keys=True,
            separators=(",", ":"),
        ).encode("ascii")
        + b"\n"
    )


def _position(raw: bytes) -> JournalPosition | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(value, dict) or set(value) != _MEMBERS:
        return None
    group, line_hash = value["group"], value["lineHash"]
    numbers = (value["sequence"], value["fileNumber"], value["lineOffset"])
    if not isinstance(group, str) or JOURNAL_FILE_RE.fullmatch(group + ".jsonl") is None:
        return None
    if not isinstance(line_hash, str) or not line_hash.startswith("sha256:"):
        return None
    if not all(type(number) is int and number >= 0 for number in numbers):
        return None
    return JournalPosition(group, numbers[0], line_hash, numbers[1], numbers[2])


def _fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


class RestoreWitness:
    """The witness file at `path` (absolute; its directory must exist)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _open_locked(self) -> int:
        """A descriptor of the file the path names now, created owner-only when absent, held
        under an exclusive `flock`."""
        while True:
            try:
                descriptor = os.open(self.path, _FLAGS)
            except FileNotFoundError:
                try:
                    descriptor = os.open(self.path, _FLAGS | os.O_CREAT | os.O_EXCL, 0o600)
                except FileExistsError:
                    continue
                _fsync_directory(self.path.parent)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX)
                if os.fstat(descriptor).st_ino == os.stat(self.path).st_ino:
                    return descriptor
            except FileNotFoundError:
                pass  # replaced and not there yet: open again
            except BaseException:
                os.close(descriptor)
                raise
            os.close(descriptor)

    def create(self) -> None:
        """Make sure the file exists and can be written (at start; OSError otherwise)."""
        os.close(self._open_locked())

    def append(self, position: JournalPosition) -> None:
        """Append `position` and fsync it; OSError when it may not be on stable storage."""
        descriptor = self._open_locked()
        try:
            data = _line(position)
            view = memoryview(data)
            while view:
                view = view[os.write(descriptor, view) :]
            os.fsync(descriptor)
        finally:
            os.close(descriptor)

    def positions(self) -> dict[str, JournalPosition]:
        """The last position the witness names for each group (none when the file does not
        exist yet). A last line without its line feed (an append cut by a crash, never
        acknowledged) is left out; any other line that is not a position is
        `coordinator.audit.journal-altered`; a file that cannot be read is
        `coordinator.audit.unreadable`."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError:
            raise CoordinatorError(
                Diagnostic(code="coordinator.audit.unreadable", file="restoreWitness")
            ) from None
        lines = data.split(b"\n")
        found: dict[str, JournalPosition] = {}
        for raw in lines[:-1]:  # the part after the last line feed is an unacknowledged append
            position = _position(raw) if len(raw) <= _MAX_LINE else None
            if position is None:
                raise _altered("The restore witness holds a line that is not a journal position.")
            known = found.get(position.group)
            if known is None or position.sequence > known.sequence:
                found[position.group] = position
        return found

    def replace(self, positions: Iterable[JournalPosition]) -> None:
        """Rewrite the witness to name exactly `positions` (a restore hold adopts the journal as
        it is now), atomically: a new file renamed over the old one, under the lock appenders
        take, so no append is lost to the old file."""
        descriptor = self._open_locked()
        try:
            temporary = self.path.with_name(self.path.name + ".new")
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
            written = os.open(temporary, flags | getattr(os, "O_NOFOLLOW", 0), 0o600)
            try:
                data = b"".join(_line(position) for position in positions)
                view = memoryview(data)
                while view:
                    view = view[os.write(written, view) :]
                os.fsync(written)
            finally:
                os.close(written)
            os.replace(temporary, self.path)
            _fsync_directory(self.path.parent)
        finally:
            os.close(descriptor)
