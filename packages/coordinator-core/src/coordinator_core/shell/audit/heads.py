"""The journal read against the heads a store keeps (07 §12.1): is every group the store knows
of still there and at least as long, and which `dispatch`/`committed` entries follow the heads.

A head (`JournalPosition`) names a line by its file and byte offset, so a check seeks straight
to it and reads only what follows: a long journal costs nothing more. Lines are not verified
here (that is `audit verify`): an incomplete last line (a process killed mid-write) is simply
not there yet, and a line that does not parse is skipped.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from coordinator_core.errors import CoordinatorError, Diagnostic
from coordinator_core.shell.audit.entries import MAX_ENTRY_BYTES
from coordinator_core.shell.audit.writer import _FILE_NAME_RE, JournalPosition
from coordinator_core.values import sha256_label

__all__ = [
    "CommittedDispatch",
    "check_heads",
    "committed_dispatches",
    "journal_ends",
    "journal_groups",
]

_TAIL_BYTES: Final = MAX_ENTRY_BYTES + 2


@dataclass(frozen=True, slots=True)
class CommittedDispatch:
    """A `dispatch`/`committed` entry: the store held the record's `dispatched` mark for this
    generation and attempt. `file` and `offset` say where the line is."""

    run_ref: str
    step_ref: str
    generation: int
    attempt: int
    file: str
    offset: int


def _file_name(group: str, number: int) -> str:
    return f"{group}.jsonl" if number == 1 else f"{group}-{number}.jsonl"


def journal_groups(directory: Path) -> dict[str, int]:
    """Every file group of the directory and its number of files (the highest file number; a
    gap is `audit verify`'s to report). Only regular files named by the journal rule count."""
    groups: dict[str, int] = {}
    try:
        with os.scandir(directory) as listing:
            for item in listing:
                match = _FILE_NAME_RE.fullmatch(item.name)
                if match is None or not item.is_file(follow_symlinks=False):
                    continue
                number = int(match["n"]) if match["n"] else 1
                groups[match["prefix"]] = max(groups.get(match["prefix"], 0), number)
    except OSError:
        raise _unreadable(None) from None
    return groups


def _unreadable(file: str | None) -> CoordinatorError:
    return CoordinatorError(Diagnostic(code="coordinator.audit.unreadable", file=file))


def _truncated(file: str, line: int | None, message: str) -> CoordinatorError:
    return CoordinatorError(
        Diagnostic(
            code="coordinator.audit.journal-truncated", file=file, line=line, message=message
        )
    )


def line_number(path: Path, offset: int) -> int:
    """The 1-based number of the line that starts at `offset` (or would: the line after the
    file's last complete line when the file is shorter)."""
    count = 1
    with path.open("rb") as handle:
        remaining = offset
        while remaining > 0 and (chunk := handle.read(min(remaining, 1 << 20))):
            count += chunk.count(b"\n")
            remaining -= len(chunk)
    return count


def _open_regular(path: Path) -> int | None:
    """A read descriptor of `path` if it is a regular file (never blocks on a FIFO), else None
    when it does not exist; any other kind of file is unreadable."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return None
    except OSError:
        raise _unreadable(path.name) from None
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise _unreadable(path.name)
    return descriptor


def check_heads(directory: Path, heads: Mapping[str, JournalPosition]) -> None:
    """Each group the store has a head for is in the directory, holds a complete line at the
    head's position, and that line hashes as the head says: otherwise
    `coordinator.audit.journal-truncated` naming the file and the line where the journal
    should continue."""
    for group in sorted(heads):
        head = heads[group]
        name = _file_name(group, head.file_number)
        path = directory / name
        descriptor = _open_regular(path)
        if descriptor is None:
            raise _truncated(name, None, "A journal file the store recorded is missing.")
        with os.fdopen(descriptor, "rb") as handle:
            handle.seek(head.line_offset)
            raw = handle.readline(_TAIL_BYTES)
        if not raw.endswith(b"\n"):
            line = line_number(path, head.line_offset)
            raise _truncated(name, line, "The journal ends before the line the store recorded.")
        if sha256_label(raw[:-1]) != head.line_hash or _sequence_of(raw) != head.sequence:
            line = line_number(path, head.line_offset)
            raise _truncated(
                name, line, "The journal line differs from the one the store recorded."
            )


def _sequence_of(raw: bytes) -> int | None:
    entry = _parsed(raw)
    value = entry.get("sequence") if entry is not None else None
    return value if type(value) is int else None


def _parsed(raw: bytes) -> dict[str, object] | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _lines_from(path: Path, offset: int) -> Iterator[tuple[int, bytes]]:
    """The complete lines of a file from `offset` on, with their start offsets."""
    descriptor = _open_regular(path)
    if descriptor is None:
        return
    with os.fdopen(descriptor, "rb") as handle:
        handle.seek(offset)
        position = offset
        while raw := handle.readline(_TAIL_BYTES):
            if not raw.endswith(b"\n"):
                return  # incomplete: not written yet, or torn by a crash mid-write
            yield position, raw
            position += len(raw)


def committed_dispatches(
    directory: Path, heads: Mapping[str, JournalPosition]
) -> list[CommittedDispatch]:
    """The `dispatch`/`committed` entries after the heads (a group without a head is read
    from its start), in group and file order."""
    found: list[CommittedDispatch] = []
    for group, files in sorted(journal_groups(directory).items()):
        head = heads.get(group)
        first = head.file_number if head is not None else 1
        for number in range(first, files + 1):
            name = _file_name(group, number)
            start = 0
            skip_first = False
            if head is not None and number == head.file_number:
                start, skip_first = head.line_offset, True
            for offset, raw in _lines_from(directory / name, start):
                if skip_first:
                    skip_first = False
                    continue
                if b'"committed"' not in raw:
                    continue  # cheap: only these lines are parsed
                dispatch = _dispatch_of(raw, name, offset)
                if dispatch is not None:
                    found.append(dispatch)
    return found


def _dispatch_of(raw: bytes, name: str, offset: int) -> CommittedDispatch | None:
    entry = _parsed(raw)
    record = entry.get("record") if entry is not None else None
    if entry is None or entry.get("phase") != "record" or not isinstance(record, dict):
        return None
    if record.get("action") != "dispatch" or record.get("outcome") != "committed":
        return None
    run_ref, step_ref = record.get("runRef"), record.get("stepRef")
    generation, attempt = record.get("generation"), record.get("attempt")
    if not (isinstance(run_ref, str) and isinstance(step_ref, str)):
        return None
    if type(generation) is not int or type(attempt) is not int:
        return None
    return CommittedDispatch(run_ref, step_ref, generation, attempt, name, offset)


def journal_ends(directory: Path) -> list[JournalPosition]:
    """The last complete line of every group, as heads (what `restore-hold` records: the
    journal as it is now is the one the reviewed store goes on from)."""
    ends: list[JournalPosition] = []
    for group, files in sorted(journal_groups(directory).items()):
        for number in range(files, 0, -1):
            end = _last_line(directory / _file_name(group, number))
            if end is not None:
                offset, raw = end
                sequence = _sequence_of(raw)
                if sequence is not None:
                    ends.append(
                        JournalPosition(group, sequence, sha256_label(raw[:-1]), number, offset)
                    )
                break
    return ends


def _last_line(path: Path) -> tuple[int, bytes] | None:
    """The last complete line of a file and its start offset, reading only its tail."""
    descriptor = _open_regular(path)
    if descriptor is None:
        return None
    with os.fdopen(descriptor, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        start = max(0, size - _TAIL_BYTES)
        handle.seek(start)
        tail = handle.read()
    end = tail.rfind(b"\n")
    if end < 0:
        return None
    before = tail.rfind(b"\n", 0, end)
    if before < 0 and start > 0:
        return None  # pragma: no cover - a line is at most 1 MiB, the tail holds one whole
    return start + before + 1, tail[before + 1 : end + 1]
