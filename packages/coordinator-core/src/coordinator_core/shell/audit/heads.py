"""The journal read against the heads a store keeps (07 §12.1): is every group the store knows
of still there and at least as long, is every line after the heads a line of its chain, and
which `dispatch`/`committed` and `store.identity` entries follow the heads.

A head (`JournalPosition`) names a line by its file and byte offset, so a check seeks straight
to it and reads only what follows: a long journal costs nothing more. Every line read after a
head is checked as `audit verify` checks it (canonical, contiguous sequence, `previous` the hash
of the line before); one that is not is `coordinator.audit.journal-altered`, never skipped
(item 6). The one exception is a torn tail: the last line of a group's last file without its
line feed, or not JSON at all, with nothing after it (a write that failed, a process killed
while writing). In a group whose process still runs (its file is held under `flock`, see
`AuditWriter`) that is a line being written, not there yet; in a dead group `torn_tails` finds
it and `set_aside` moves it to `<file>.torn`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from coordinator_core.errors import CoordinatorError, Diagnostic
from coordinator_core.shell.audit.entries import JOURNAL_FILE_RE, MAX_ENTRY_BYTES, ZERO_HASH
from coordinator_core.shell.audit.verify import (
    TORN_SUFFIX,
    BrokenLine,
    TornTail,
    chained_entry,
    is_torn,
)
from coordinator_core.shell.audit.writer import JournalPosition
from coordinator_core.values import sha256_label

__all__ = [
    "CommittedDispatch",
    "IdentityMark",
    "JournalTail",
    "check_heads",
    "journal_ends",
    "journal_groups",
    "line_number",
    "read_after_heads",
    "set_aside",
    "torn_tails",
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


@dataclass(frozen=True, slots=True)
class IdentityMark:
    """A `store.identity` entry: the process of its group worked the database whose identity
    has this digest (07 §12.1 item 5). `file` and `offset` say where the line is."""

    digest: str
    file: str
    offset: int


@dataclass(frozen=True, slots=True)
class JournalTail:
    """What follows the heads: the proofs of commit and identity marks, in group and file
    order, and where each group's verified lines end (its last complete line, as a head)."""

    dispatches: tuple[CommittedDispatch, ...]
    identities: tuple[IdentityMark, ...]
    ends: Mapping[str, JournalPosition]


def _file_name(group: str, number: int) -> str:
    return f"{group}.jsonl" if number == 1 else f"{group}-{number}.jsonl"


def journal_groups(directory: Path) -> dict[str, int]:
    """Every file group of the directory and its number of files (the highest file number; a
    gap is `audit verify`'s to report). Only regular files named by the journal rule count."""
    groups: dict[str, int] = {}
    try:
        with os.scandir(directory) as listing:
            for item in listing:
                match = JOURNAL_FILE_RE.fullmatch(item.name)
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


def _altered(file: str, line: int | None, path: str, message: str) -> CoordinatorError:
    return CoordinatorError(
        Diagnostic(
            code="coordinator.audit.journal-altered",
            file=file,
            line=line,
            path=path,
            message=message,
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


def _open_regular(path: Path, flags: int = os.O_RDONLY) -> int | None:
    """A descriptor of `path` if it is a regular file (never blocks on a FIFO), else None
    when it does not exist; any other kind of file is unreadable."""
    try:
        descriptor = os.open(path, flags | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
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


def _lines_with_next(path: Path, offset: int) -> Iterator[tuple[int, bytes, bool]]:
    """The lines of a file from `offset` on, complete or not, with their start offsets and
    whether another line follows."""
    descriptor = _open_regular(path)
    if descriptor is None:
        return
    with os.fdopen(descriptor, "rb") as handle:
        handle.seek(offset)
        position = offset
        raw = handle.readline(_TAIL_BYTES)
        while raw:
            following = handle.readline(_TAIL_BYTES)
            yield position, raw, bool(following)
            position += len(raw)
            raw = following


def read_after_heads(directory: Path, heads: Mapping[str, JournalPosition]) -> JournalTail:
    """Every line after the heads (a group without a head is read from its start), each
    checked against the chain (07 §12.1 item 6): a missing file of a group, a line that is
    not canonical, out of sequence or does not chain, or an incomplete line that is not the
    last, is `coordinator.audit.journal-altered` naming the file and line. The heads must hold
    (`check_heads` first). A group's incomplete last line is not read: a live process is
    writing it (a dead process's torn tail is set aside first, `torn_tails`)."""
    dispatches: list[CommittedDispatch] = []
    identities: list[IdentityMark] = []
    ends: dict[str, JournalPosition] = {}
    for group, files in sorted(journal_groups(directory).items()):
        head = heads.get(group)
        if head is None:
            first, start, sequence, previous = 1, 0, 0, ZERO_HASH
        else:
            first, start = head.file_number, head.line_offset
            sequence, previous = head.sequence, head.line_hash
            ends[group] = head
        for number in range(first, files + 1):
            name = _file_name(group, number)
            path = directory / name
            if not path.exists():
                raise _altered(name, None, "", "A file of this journal group is missing.")
            skip = head is not None and number == head.file_number
            for offset, raw, more in _lines_with_next(path, start if number == first else 0):
                if skip:
                    skip = False  # the head's own line, which `check_heads` compared
                    continue
                if number == files and not more and not raw.endswith(b"\n"):
                    break  # being written by a live process (a dead one's `torn_tails` took)
                if not raw.endswith(b"\n"):
                    raise _altered(name, line_number(path, offset), "", "The line is incomplete.")
                line = raw[:-1]
                try:
                    entry = chained_entry(line, sequence + 1, previous)
                except BrokenLine as broken:
                    raise _altered(
                        name, line_number(path, offset), broken.path, broken.message
                    ) from None
                sequence, previous = sequence + 1, sha256_label(line)
                ends[group] = JournalPosition(group, sequence, previous, number, offset)
                _note(entry, name, offset, dispatches, identities)
    return JournalTail(tuple(dispatches), tuple(identities), ends)


def _note(
    entry: dict[str, object],
    name: str,
    offset: int,
    dispatches: list[CommittedDispatch],
    identities: list[IdentityMark],
) -> None:
    record = entry["record"]
    if entry["phase"] != "record" or not isinstance(record, dict):
        return
    action = record.get("action")
    if action == "store.identity":
        digest = record.get("storeIdentity")
        if isinstance(digest, str):
            identities.append(IdentityMark(digest, name, offset))
        return
    if action != "dispatch" or record.get("outcome") != "committed":
        return
    run_ref, step_ref = record.get("runRef"), record.get("stepRef")
    generation, attempt = record.get("generation"), record.get("attempt")
    if not (isinstance(run_ref, str) and isinstance(step_ref, str)):
        raise _altered(name, None, "/record", "A proof of commit lacks its references.")
    if type(generation) is not int or type(attempt) is not int:
        raise _altered(name, None, "/record", "A proof of commit lacks its counters.")
    dispatches.append(CommittedDispatch(run_ref, step_ref, generation, attempt, name, offset))


def _live(descriptor: int) -> bool:
    """Whether a process holds the file's `flock` (its writer is alive). A file system that
    cannot say is taken as live: its tail is never touched."""
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    return False


def torn_tails(directory: Path, *, own: str | None = None) -> list[TornTail]:
    """The torn tail of each dead group (not `own`): the part of its last file after the last
    line feed, or its last line when that is not JSON, with nothing after it. Reads only the
    last MiB of each group's last file."""
    found: list[TornTail] = []
    for group, files in sorted(journal_groups(directory).items()):
        if group == own:
            continue
        name = _file_name(group, files)
        descriptor = _open_regular(directory / name)
        if descriptor is None:
            continue
        with os.fdopen(descriptor, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            start = max(0, size - 2 * _TAIL_BYTES)
            handle.seek(start)
            tail = handle.read()
            end = tail.rfind(b"\n")
            if end + 1 < len(tail):
                offset = start + end + 1  # bytes after the last line feed
            else:
                before = tail.rfind(b"\n", 0, max(end, 0))
                if end < 0 or (before < 0 and start > 0):
                    continue
                offset = start + before + 1
                if not is_torn(tail[before + 1 :]):
                    continue
            if offset == size or (start > 0 and offset == start) or _live(handle.fileno()):
                continue
        found.append(TornTail(name, line_number(directory / name, offset), offset))
    return found


def set_aside(directory: Path, torn: TornTail) -> int | None:
    """Move the torn tail to `<file>.torn` (written and fsynced first) and cut the file before
    it (fsynced, with the directory): the file ends with its last complete line again. Answers
    the number of bytes set aside, or None when the group turned out live. OSError when it
    could not be done (nothing is cut then)."""
    path = directory / torn.file
    descriptor = _open_regular(path, os.O_RDWR)
    if descriptor is None:
        return None
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return None
        size = os.fstat(descriptor).st_size
        os.lseek(descriptor, torn.offset, os.SEEK_SET)
        data = os.read(descriptor, max(0, size - torn.offset))
        aside = directory / (torn.file + TORN_SUFFIX)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
        written = os.open(aside, flags | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(written, view) :]
            os.fsync(written)
        finally:
            os.close(written)
        os.ftruncate(descriptor, torn.offset)
        os.fsync(descriptor)
        directory_descriptor = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(directory_descriptor)
        finally:
            os.close(directory_descriptor)
        return len(data)
    finally:
        with contextlib.suppress(OSError):
            os.close(descriptor)


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
