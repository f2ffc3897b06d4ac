"""`coordinatorctl audit verify` (09 §2): every file group checked line by line."""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import BinaryIO, Final

from coordinator_core.errors import CoordinatorError, Diagnostic
from coordinator_core.shell.audit.entries import (
    AUDIT_SCHEMA,
    JOURNAL_FILE_RE,
    MAX_ENTRY_BYTES,
    PHASES,
    TIME_PATTERN,
    UUID_PATTERN,
    ZERO_HASH,
    check_entry,
)
from coordinator_core.values import canonical_json, parse_strict_json, sha256_label

# --------------------------------------------------------------------------------------------
# Verification
# --------------------------------------------------------------------------------------------

_ENTRY_MEMBERS: Final = frozenset(
    {"schema", "sequence", "eventId", "time", "phase", "correlation", "record", "previous"}
)


@dataclass(frozen=True, slots=True)
class GroupResult:
    """One process's file group: its prefix, file and entry counts and the last line's hash."""

    prefix: str
    files: int
    entries: int
    head: str

    def to_json(self) -> dict[str, object]:
        return {
            "prefix": self.prefix,
            "files": self.files,
            "entries": self.entries,
            "head": self.head,
        }


@dataclass(frozen=True, slots=True)
class TornTail:
    """A torn last line (07 §12.1 item 6): the tail of a group's last file, from `line` on
    (byte `offset`), has no line feed or is not JSON, and nothing follows it; a write that
    failed (a full disk) or a process killed while writing left it. `moved_aside` when a start
    has set it aside to `<file>.torn` (the file then ends before it)."""

    file: str
    line: int
    offset: int
    moved_aside: bool = False

    def to_json(self) -> dict[str, object]:
        return {"file": self.file, "line": self.line, "movedAside": self.moved_aside}


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """The `audit verify` result (09 §2): totals, one item per group sorted by prefix, and the
    torn tails found (left in place, or set aside at a start)."""

    files: int
    entries: int
    groups: tuple[GroupResult, ...]
    torn: tuple[TornTail, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "files": self.files,
            "entries": self.entries,
            "groups": [group.to_json() for group in self.groups],
            "tornTails": [torn.to_json() for torn in self.torn],
        }


TORN_SUFFIX: Final = ".torn"
"""A torn tail set aside at a start is kept in `<journal file>.torn`."""


def is_torn(raw: bytes) -> bool:
    """Whether `raw`, the last line of a group's last file with nothing after it, is a torn
    tail: it has no line feed, or is not JSON at all (a line the writer completed is always
    JSON; one that is JSON but does not chain is altered, not torn)."""
    if not raw.endswith(b"\n"):
        return True
    try:
        json.loads(raw[:-1])
    except ValueError:
        return True
    return False


def _unreadable(
    file: str | None, message: str | None = None, hint: str | None = None
) -> CoordinatorError:
    return CoordinatorError(
        Diagnostic(code="coordinator.audit.unreadable", file=file, message=message, hint=hint)
    )


def _broken(file: str, line: int, path: str, message: str) -> CoordinatorError:
    return CoordinatorError(
        Diagnostic(
            code="coordinator.audit.chain-broken", file=file, line=line, path=path, message=message
        )
    )


def verify_directory(directory: str | os.PathLike[str]) -> VerifyResult:
    """Verify every journal file group in `directory` (07 §11 "Verification").

    Files are grouped by prefix (`<role>-<stamp>-<hex>`) and read in order (the base file, then
    `-2`, `-3`, …). Each line must be canonical JSON with exactly the eight members, `sequence`
    must run 1, 2, 3, … across the group, and `previous` must be the hash of the line before.
    The first broken line, in prefix order, raises `coordinator.audit.chain-broken` with the file
    name and 1-based line; a `.jsonl` file whose name breaks the naming rule, or a missing file
    number, is broken at its line 1. A torn last line of a group's last file (`is_torn`) is
    no break: it is reported in `torn`, as is each `<file>.torn` a start set aside; other files
    not ending in `.jsonl` are ignored. A change to a group's last line keeps the chain valid
    but changes `head`: compare heads with a copy kept elsewhere.
    """
    root = Path(directory)
    try:
        with os.scandir(root) as listing:
            every = sorted(item.name for item in listing)
    except OSError:
        every = None
    if every is None:
        raise _unreadable(None)
    names = [name for name in every if name.endswith(".jsonl")]
    set_aside = [
        name[: -len(TORN_SUFFIX)]
        for name in every
        if name.endswith(".jsonl" + TORN_SUFFIX)
        and JOURNAL_FILE_RE.fullmatch(name[: -len(TORN_SUFFIX)]) is not None
    ]

    groups: dict[str, list[str]] = {}
    for name in names:
        match = JOURNAL_FILE_RE.fullmatch(name)
        if match is None:
            raise _broken(name, 1, "", "The file name does not follow the journal naming rule.")
        groups.setdefault(match["prefix"], []).append(name)

    ordered: list[tuple[str, list[str]]] = []
    for prefix in sorted(groups):
        files = sorted(groups[prefix], key=_file_number)
        for expected, name in enumerate(files, start=1):
            if _file_number(name) != expected:
                raise _broken(name, 1, "", "An earlier file of this journal is missing.")
        ordered.append((prefix, files))

    # Every file must be readable before any verdict, so exit 3 never hides behind exit 1.
    for _, files in ordered:
        for name in files:
            _open_regular(root / name, name).close()

    results: list[GroupResult] = []
    torn: list[TornTail] = []
    for prefix, files in ordered:
        sequence, head = 0, ZERO_HASH
        for index, name in enumerate(files):
            last = index == len(files) - 1
            sequence, head, tail = _verify_file(root / name, name, sequence, head, last=last)
            if tail is not None:
                torn.append(tail)
        results.append(GroupResult(prefix, len(files), sequence, head))
    for name in set_aside:
        if (root / name).is_file():
            lines = _count_lines(root / name, name)
            torn.append(TornTail(name, lines + 1, (root / name).stat().st_size, moved_aside=True))
    return VerifyResult(
        files=sum(group.files for group in results),
        entries=sum(group.entries for group in results),
        groups=tuple(results),
        torn=tuple(sorted(torn, key=lambda item: (item.file, item.moved_aside))),
    )


def _count_lines(path: Path, name: str) -> int:
    count = 0
    with _open_regular(path, name) as handle:
        while chunk := handle.read(1 << 20):
            count += chunk.count(b"\n")
    return count


def _file_number(name: str) -> int:
    match = JOURNAL_FILE_RE.fullmatch(name)
    number = match["n"] if match is not None else None
    return int(number) if number else 1


def _open_regular(path: Path, name: str) -> BinaryIO:
    """Open a journal file for reading, refusing anything that is not a regular file (a FIFO,
    socket, device or directory named like a journal file, or a symlink to one) with
    `coordinator.audit.unreadable` and the file name, without ever blocking on it: the kind is
    checked before opening (a device is never opened) and again on the descriptor, which is
    opened non-blocking (a FIFO without a writer would otherwise wait forever)."""
    try:
        if stat.S_ISREG(path.stat().st_mode):
            descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            if stat.S_ISREG(os.fstat(descriptor).st_mode):
                os.set_blocking(descriptor, True)
                return os.fdopen(descriptor, "rb")
            os.close(descriptor)
    except OSError:
        raise _unreadable(name) from None
    raise _unreadable(
        name,
        "The journal file is not a regular file (a FIFO, socket, device or directory).",
        "Move what is not a journal file out of the audit directory; journal files are regular"
        " files written by the coordinator.",
    )


def _verify_file(
    path: Path, name: str, sequence: int, head: str, *, last: bool
) -> tuple[int, str, TornTail | None]:
    """Check each line of one file, continuing the group's sequence and chain; in the group's
    last file (`last`) a torn last line ends the file and is answered."""
    line_number = 0
    offset = 0
    try:
        with _open_regular(path, name) as handle:
            raw = handle.readline(MAX_ENTRY_BYTES + 2)
            while raw:
                line_number += 1
                following = handle.readline(MAX_ENTRY_BYTES + 2)
                if last and not following and is_torn(raw):
                    return sequence, head, TornTail(name, line_number, offset)
                if not raw.endswith(b"\n"):
                    raise _broken(
                        name, line_number, "", "The line is incomplete or longer than 1 MiB."
                    )
                line = raw[:-1]
                _verify_line(line, name, line_number, sequence + 1, head)
                sequence, head = sequence + 1, sha256_label(line)
                offset += len(raw)
                raw = following
    except OSError:
        raise _unreadable(name) from None
    return sequence, head, None


def _verify_line(line: bytes, name: str, line_number: int, sequence: int, previous: str) -> None:
    try:
        chained_entry(line, sequence, previous)
    except BrokenLine as broken:
        raise _broken(name, line_number, broken.path, broken.message) from None


class BrokenLine(Exception):
    """A line that does not continue its group: the JSON pointer of the member at fault and a
    fixed sentence (`chained_entry`)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message


def chained_entry(line: bytes, sequence: int, previous: str) -> dict[str, object]:
    """The entry of `line` (without its line feed) if it is the journal line that continues a
    group after the line hashed `previous`, with sequence `sequence`; else `BrokenLine`."""
    if len(line) > MAX_ENTRY_BYTES:
        raise BrokenLine("", "The line is longer than 1 MiB.")
    entry = _canonical_object(line)
    if entry is None:
        raise BrokenLine("", "The line is not canonical JSON of one object.")
    if set(entry) != _ENTRY_MEMBERS:
        raise BrokenLine("", "The entry does not have exactly the journal members.")
    if entry["schema"] != AUDIT_SCHEMA:
        raise BrokenLine("/schema", "The entry's schema is not the journal schema.")
    if type(entry["sequence"]) is not int or entry["sequence"] != sequence:
        raise BrokenLine("/sequence", "The sequence does not continue the file group.")
    if entry["previous"] != previous:
        raise BrokenLine("/previous", "The previous hash does not match the line before.")
    event_id = entry["eventId"]
    if not isinstance(event_id, str) or UUID_PATTERN.fullmatch(event_id) is None:
        raise BrokenLine("/eventId", "The event id is not a UUID.")
    if not _time_ok(entry["time"]):
        raise BrokenLine("/time", "The time is not a UTC time with milliseconds.")
    phase = entry["phase"]
    if not isinstance(phase, str) or phase not in PHASES:
        raise BrokenLine("/phase", "The phase is not request, response or record.")
    if not isinstance(entry["correlation"], str) or not entry["correlation"]:
        raise BrokenLine("/correlation", "The correlation is not a string.")
    if not isinstance(entry["record"], dict):
        raise BrokenLine("/record", "The record is not an object.")
    try:
        check_entry(phase, entry["correlation"], entry["record"])
    except ValueError:
        raise BrokenLine("/record", "The record is not one of the shapes of 07 §11.") from None
    return entry


def _canonical_object(line: bytes) -> dict[str, object] | None:
    """The object `line` holds if it is the RFC 8785 form of one JSON object, else None."""
    try:
        value = parse_strict_json(line)
        if isinstance(value, dict) and canonical_json(value) == line:
            return value
    except ValueError:  # StrictJsonError, CanonicalJsonError
        pass
    return None


def _time_ok(value: object) -> bool:
    if not isinstance(value, str) or TIME_PATTERN.fullmatch(value) is None:
        return False
    try:
        datetime.strptime(value[:19], "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return False
    return True
