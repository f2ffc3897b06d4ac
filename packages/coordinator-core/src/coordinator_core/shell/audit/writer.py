"""One process's journal file group: append, group commit, rotation (07 §11)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import stat
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Final, Protocol

from coordinator_core.errors import CoordinatorError, Diagnostic
from coordinator_core.shell.audit.entries import (
    AUDIT_SCHEMA,
    FILE_ROTATE_BYTES,
    MAX_ENTRY_BYTES,
    ROLES,
    ZERO_HASH,
    AuditEntry,
    Role,
)
from coordinator_core.values import sha256_label


@dataclass(frozen=True, slots=True)
class JournalPosition:
    """Where one durable line of a file group is (07 §12.1): the group's prefix, the line's
    sequence and `sha256:` hash, the number of the group's file that holds it (1, 2, …) and
    the byte offset at which the line starts in that file."""

    group: str
    sequence: int
    line_hash: str
    file_number: int
    line_offset: int


# --------------------------------------------------------------------------------------------
# Writer
# --------------------------------------------------------------------------------------------

_OPEN_FLAGS: Final = (
    os.O_WRONLY
    | os.O_CREAT
    | os.O_EXCL
    | os.O_APPEND
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_NOFOLLOW", 0)
)


BACKGROUND_LINGER_SECONDS: Final = 0.005
"""How long the background flusher lets lines that no one waits for (API reads, 07 §7.7
item 5) gather before it writes and fsyncs them together. A durable append meanwhile takes
them with its own lines at once."""


def _unavailable(message: str) -> CoordinatorError:
    return CoordinatorError(
        Diagnostic(code="coordinator.command.audit-unavailable", message=message)
    )


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_ENTRY_ENCODER: Final = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")
)


def _entry_line(line: dict[str, object]) -> bytes:
    """The canonical bytes (RFC 8785, as `canonical_json`) of one journal line, the fast way.

    Only checked entries get here (`check_entry`): member names are ASCII, values are
    strings of fixed sets or patterns, references, catalogue codes, UUIDs and instants, or
    integers in [0, 2**53), and the line adds the same kinds. For such values the standard
    encoder with sorted keys, no whitespace and no ASCII escaping writes exactly the RFC 8785
    form: code-point order is UTF-16 order for these names, integers print alike, and both
    escape only `"`, `\\` and control characters, the same way. `audit verify` checks every
    line against `canonical_json`, so a difference could not go unnoticed."""
    return _ENTRY_ENCODER.encode(line).encode("utf-8")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _is_proof(entry: AuditEntry) -> bool:
    """A proof of commit (07 §12.1 item 1): the `dispatch`/`committed` record of a worker."""
    record = entry.record
    return record.get("action") == "dispatch" and record.get("outcome") == "committed"


class JournalObserver(Protocol):
    """What `AuditWriter.observe` reports to: lines queued, and how long a durable write took."""

    def appended(self, count: int) -> None: ...

    def flushed(self, seconds: float) -> None: ...


class AuditWriter:
    """One process's journal. Appends are serialised in sequence order; each returns only after
    its line is on stable storage, and a single fsync covers every line queued meanwhile."""

    def __init__(
        self,
        directory: Path,
        prefix: str,
        *,
        clock: Callable[[], datetime],
        rotate_bytes: int,
        proofs: Callable[[JournalPosition], None] | None = None,
    ) -> None:
        self._directory = directory
        self._proofs = proofs
        self._prefix = prefix
        self._clock = clock
        self._rotate_bytes = rotate_bytes
        self._cond = threading.Condition(threading.Lock())
        self._queue: list[bytes] = []
        self._proof_at: set[int] = set()  # sequences of queued proofs of commit
        self._next_sequence = 1
        self._previous = ZERO_HASH  # hash of the last line queued
        self._durable_sequence = 0
        self._head = ZERO_HASH  # hash of the last line made durable
        self._head_at = (1, 0)  # its file number and start offset
        self._flushing = False
        self._failed = False
        self._closed = False
        self._background: threading.Thread | None = None
        self._linger_until: float | None = None  # when the background flusher writes
        self._observer: JournalObserver | None = None
        # Owned by the thread that flushes (at most one at a time) and by open/close.
        self._file_number = 1
        self._fd = -1
        self._size = 0
        try:
            self._create_file()
        except OSError:
            self._failed = True
        if self._failed:
            self.close()
            raise _unavailable("The audit journal file cannot be created.")

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        role: Role,
        *,
        clock: Callable[[], datetime] = _utc_now,
        rotate_bytes: int = FILE_ROTATE_BYTES,
        proofs: Callable[[JournalPosition], None] | None = None,
    ) -> AuditWriter:
        """Create this process's first journal file; failure is `audit-unavailable` (exit 3).

        The directory is created owner-only when absent; an existing one must be a directory
        without group or other permissions. `proofs` (the restore witness, 07 §12.1 item 5) is
        called after each durable write that carried a `dispatch`/`committed` entry, with the
        position of the last one, before the appends it covers return; what it raises is a
        failed write. Each file of the group is held under an exclusive `flock` while it is
        written, so that another process can tell a live group from a dead one."""
        if role not in ROLES:
            raise ValueError("The audit role is not serve, worker or ctl.")
        path = Path(directory)
        try:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
            info = os.stat(path)
        except OSError:
            info = None
        if info is None:
            raise _unavailable("The audit directory cannot be created or read.")
        if not stat.S_ISDIR(info.st_mode) or info.st_mode & 0o077:
            raise _unavailable(
                "The audit directory is not a directory that only its owner can use."
            )
        stamp = clock().astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
        prefix = f"{role}-{stamp}-{secrets.token_hex(4)}"
        return cls(path, prefix, clock=clock, rotate_bytes=rotate_bytes, proofs=proofs)

    def __enter__(self) -> AuditWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def prefix(self) -> str:
        """The file group's name: `<role>-<YYYYMMDDTHHMMSSZ>-<8 hex>`."""
        return self._prefix

    def observe(self, observer: JournalObserver) -> None:
        """Tell `observer` of every line queued and every write made durable (the service's
        metrics; the journal itself depends on no metrics library)."""
        self._observer = observer

    @property
    def directory(self) -> Path:
        """The audit directory this journal writes in."""
        return self._directory

    @property
    def path(self) -> Path:
        """The file currently written."""
        return self._directory / self._file_name(self._file_number)

    @property
    def head(self) -> str:
        """`sha256:<hex>` of the last line on stable storage (`ZERO_HASH` before the first)."""
        with self._cond:
            return self._head

    @property
    def sequence(self) -> int:
        """The sequence of the last line on stable storage (0 before the first)."""
        with self._cond:
            return self._durable_sequence

    @property
    def position(self) -> JournalPosition | None:
        """The last line on stable storage, with where it is (None before the first)."""
        with self._cond:
            if self._durable_sequence == 0:
                return None
            return JournalPosition(self._prefix, self._durable_sequence, self._head, *self._head_at)

    @property
    def ready(self) -> bool:
        """False after a write failure or close: every later append is refused."""
        with self._cond:
            return not (self._failed or self._closed)

    def append(self, entry: AuditEntry, *, wait: bool = True) -> None:
        """Journal `entry`; returns only after its line is written and fsynced.

        `wait=False` (API read actions, 07 §7.7 item 5) queues the line in sequence order and
        returns at once; the background flusher makes it durable within
        `BACKGROUND_LINGER_SECONDS` (and the fsync's time), or sooner a durable append or `close`.

        Raises `coordinator.command.audit-unavailable` when the line may not be durable, and for
        every later call: the protected action must then not proceed."""
        self.append_all((entry,), wait=wait)

    def append_all(self, entries: Sequence[AuditEntry], *, wait: bool = True) -> None:
        """Journal `entries` in order, covered by one fsync (the entries of one transaction,
        07 §7.7 item 5); returns only after all of them are on stable storage (`wait=False`:
        at once, the background flusher makes them durable soon after)."""
        sequence = self.queue_all(entries)
        if sequence is None:
            return
        if wait:
            self.durable(sequence)
            return
        with self._cond:
            self._start_background()
            if self._linger_until is None:
                self._linger_until = time.monotonic() + BACKGROUND_LINGER_SECONDS
                self._cond.notify_all()

    def queue_all(self, entries: Sequence[AuditEntry]) -> int | None:
        """Queue `entries` in sequence order and answer the last one's sequence (None for no
        entries); `durable(sequence)` makes them durable. A transaction queues its entries as
        it goes and makes them durable once, before it commits, so that the entries of a
        batch of transactions share one fsync (07 §7.7 item 8). Each entry was checked when it
        was made (`AuditEntry`), and its record cannot change since."""
        if not entries:
            return None
        with self._cond:
            if self._failed or self._closed:
                raise _unavailable("The audit journal refuses entries after a write failure.")
            lines = []
            proofs: list[int] = []
            previous = self._previous
            sequence = self._next_sequence - 1
            for entry in entries:
                sequence += 1
                line = _entry_line(
                    {
                        "schema": AUDIT_SCHEMA,
                        "sequence": sequence,
                        "eventId": str(uuid.uuid4()),
                        "time": self._time(),
                        "phase": entry.phase,
                        "correlation": entry.correlation,
                        "record": dict(entry.record),
                        "previous": previous,
                    }
                )
                if len(line) > MAX_ENTRY_BYTES:
                    raise ValueError("The audit entry is larger than 1 MiB.")
                previous = sha256_label(line)
                lines.append(line)
                if _is_proof(entry):
                    proofs.append(sequence)
            self._next_sequence = sequence + 1
            self._previous = previous
            self._proof_at.update(proofs)
            self._queue.extend(lines)
            if self._observer is not None:
                self._observer.appended(len(lines))
            return sequence

    def durable(self, sequence: int) -> None:
        """Return once every line up to `sequence` is on stable storage, flushing what is
        queued if no one else is; raises `audit-unavailable` when it may not be."""
        with self._cond:
            while self._durable_sequence < sequence:
                if self._failed:
                    raise _unavailable("The audit journal could not be written.")
                if self._flushing:
                    self._cond.wait()
                else:
                    self._flush_queue()

    def _start_background(self) -> None:
        """The flusher of lines queued without waiting (lock held): one daemon thread that
        makes them durable soon after they were queued."""
        if self._background is not None:
            return
        self._background = threading.Thread(
            target=self._flush_in_background, name="audit-flush", daemon=True
        )
        self._background.start()

    def _flush_in_background(self) -> None:
        """Make what is queued durable `BACKGROUND_LINGER_SECONDS` after the first line that no
        one waits for, unless a durable append took it first: the lines of the reads answered
        meanwhile share one write and one fsync."""
        with self._cond:
            while not (self._closed or self._failed):
                if not self._queue or self._flushing:
                    self._cond.wait()
                    continue
                if self._linger_until is None:  # left by a transaction that did not commit
                    self._linger_until = time.monotonic() + BACKGROUND_LINGER_SECONDS
                left = self._linger_until - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                else:
                    self._flush_queue()

    def close(self) -> None:
        """Close the current file (every queued line is made durable first); later appends
        are refused."""
        with self._cond:
            while self._flushing:
                self._cond.wait()
            if self._queue and not self._failed and self._fd >= 0:
                self._flush_queue()
            self._closed = True
            self._cond.notify_all()
            if self._fd >= 0:
                fd, self._fd = self._fd, -1
                try:
                    os.close(fd)
                except OSError:
                    self._failed = True

    # ---------------------------------------------------------------------------------------

    def _time(self) -> str:
        return self._clock().astimezone(UTC).isoformat(timespec="milliseconds")[:-6] + "Z"

    def _file_name(self, number: int) -> str:
        suffix = "" if number == 1 else f"-{number}"
        return f"{self._prefix}{suffix}.jsonl"

    def _create_file(self) -> None:
        """Create the current file of the group (never an existing one: O_EXCL) owner-only,
        and make its directory entry durable."""
        path = self._directory / self._file_name(self._file_number)
        self._fd = os.open(path, _OPEN_FLAGS, 0o600)
        self._size = 0
        with contextlib.suppress(OSError):  # a file system without locks: its tails are kept
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        _fsync_directory(self._directory)

    def _flush_queue(self) -> None:
        """Called with the lock held by the thread that becomes the flusher: writes and fsyncs
        everything queued, with the lock released so that others can queue meanwhile."""
        batch, self._queue = self._queue, []
        self._linger_until = None
        first = self._durable_sequence + 1
        proofs = [sequence - first for sequence in sorted(self._proof_at)]
        self._proof_at.clear()
        self._flushing = True
        written: tuple[int, int] | None = None
        self._cond.release()
        try:
            written = self._write_batch(batch, first, proofs)
        finally:
            self._cond.acquire()
            self._flushing = False
            if written is not None:
                self._durable_sequence += len(batch)
                self._head = sha256_label(batch[-1])
                self._head_at = written
            else:
                self._failed = True
            self._cond.notify_all()

    def _write_batch(
        self, batch: list[bytes], first: int, proofs: list[int]
    ) -> tuple[int, int] | None:
        """Write the batch (one `write` per file it goes to) and fsync it; answers the file
        number and start offset of its last line, None on failure. `first` is the sequence of
        its first line and `proofs` the indexes of its proofs of commit: the last one's
        position goes to `self._proofs` once the batch is durable."""
        last = (self._file_number, self._size)
        proof: JournalPosition | None = None
        try:
            pending: list[bytes] = []
            for index, line in enumerate(batch):
                data = line + b"\n"
                if self._size and self._size + len(data) > self._rotate_bytes:
                    _write_all(self._fd, b"".join(pending))
                    pending = []
                    os.fsync(self._fd)
                    os.close(self._fd)
                    self._fd = -1
                    self._file_number += 1
                    self._create_file()
                last = (self._file_number, self._size)
                if proofs and index == proofs[-1]:
                    proof = JournalPosition(self._prefix, first + index, sha256_label(line), *last)
                pending.append(data)
                self._size += len(data)
            began = time.perf_counter()
            _write_all(self._fd, b"".join(pending))
            os.fsync(self._fd)
            if self._observer is not None:
                self._observer.flushed(time.perf_counter() - began)
            if proof is not None and self._proofs is not None:
                self._proofs(proof)
        except OSError:
            return None
        return last
