"""The audit journal: append-only, hash-chained JSON Lines of keyed references (contract 07 §11).

This is a shell module (it writes files and reads the clock). The journal never holds a raw
identifier, reason, input, output, token or contact: every identifying member is a keyed
reference, and `AuditEntry` refuses any record that is not one of the shapes of the 07 §11 table.

Public API
----------

`AuditReferences(audit_key, database_id)`
    Keyed references `hmac-sha256:<hex>` (07 §11 "Keyed references"): `reference(class, value)`
    and one helper per class (`actor`, `run`, `step`, `reason`, `event`, `source`, `request`,
    `connection`, `restore_evidence`, `admission_recovery`). The audit key is at least 32 bytes
    (05 §2.2, else `coordinator.secret.invalid`).

`AuditEntry(phase, correlation, record)` and its builders
    `api_request`, `event_request`, `review_completion_request`, `migrate_request`,
    `apply_request`, `response`, `ctl_applied`, `worker_record`; `new_correlation()` and
    `worker_correlation(uuid, action, step_ref)` build the `correlation` member. A record outside
    the 07 §11 table (an unknown member, a raw value where a reference belongs, …) raises ValueError
    with a fixed message that never quotes the value.

`AuditWriter.open(directory, role, clock=…, rotate_bytes=100 MiB)`
    One process's journal: creates `<role>-<YYYYMMDDTHHMMSSZ>-<8 hex>.jsonl` (owner-only, in an
    owner-only directory it creates if absent), continuing in `…-<n>.jsonl` at 100 MiB.
    `append(entry)` returns only once the line is written and fsynced (concurrent appends share
    one fsync: group commit). Any write failure raises `coordinator.command.audit-unavailable` and
    every later append is refused until the process restarts (`ready` turns false). `head` is the
    `sha256:` hash of the last durable line (06 §7.1 `auditHead`).

`verify_directory(directory) -> VerifyResult`
    `coordinatorctl audit verify` (09 §2): every file group is checked line by line; the first
    broken line raises `coordinator.audit.chain-broken` (exit 1) naming the file and the line; a
    directory or file that cannot be read raises `coordinator.audit.unreadable` (exit 3).
    `VerifyResult.to_json()` is `{files, entries, groups: [{prefix, files, entries, head}]}`.

Line format (07 §11): the RFC 8785 bytes of
`{schema, sequence, eventId, time, phase, correlation, record, previous}` followed by one line
feed, where `previous` is `sha256:` + hex(SHA-256(previous line without its line feed)), and
`sha256:` + 64 zeros for sequence 1; sequences run 1, 2, 3, … across a process's files.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import stat
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Final, Literal, get_args

from coordinator_core.errors import CoordinatorError, Diagnostic, catalogue
from coordinator_core.values import canonical_json, parse_strict_json, sha256_label

__all__ = [
    "AUDIT_SCHEMA",
    "FILE_ROTATE_BYTES",
    "MAX_ENTRY_BYTES",
    "ZERO_HASH",
    "ApiAction",
    "AuditEntry",
    "AuditReferences",
    "AuditWriter",
    "GroupResult",
    "Phase",
    "ReferenceClass",
    "ResponseOutcome",
    "Role",
    "VerifyResult",
    "WorkerAction",
    "WorkerOutcome",
    "api_request",
    "apply_request",
    "ctl_applied",
    "event_request",
    "migrate_request",
    "new_correlation",
    "response",
    "review_completion_request",
    "verify_directory",
    "worker_correlation",
    "worker_record",
]

AUDIT_SCHEMA: Final = "registry-coordinator/audit/v1"
ZERO_HASH: Final = "sha256:" + "0" * 64
MAX_ENTRY_BYTES: Final = 1_048_576  # "An entry is at most 1 MiB"
FILE_ROTATE_BYTES: Final = 100 * 1_048_576  # "when a file reaches 100 MiB"
MIN_AUDIT_KEY_BYTES: Final = 32  # 05 §2.2

Role = Literal["serve", "worker", "ctl"]
Phase = Literal["request", "response", "record"]
ApiAction = Literal[
    "admit",
    "workflow-read",
    "list",
    "status",
    "inspect",
    "cancel",
    "retry-same",
    "reconcile",
    "doctor",
    "restore-hold",
    "release-restore-hold",
    "release-admission-hold",
    "retention",
]
WorkerAction = Literal["attempt", "dispatch", "observation", "transition"]
WorkerOutcome = Literal[
    "intent",
    "delivered",
    "retry",
    "dead-lettered",
    "unknown",
    "expired",
    "cancelled",
    "pending",
    "timed-out",
    "lease-lapsed",
]
ResponseOutcome = Literal["accepted", "refused", "unknown"]
ReferenceClass = Literal[
    "actor-v1",
    "run-v1",
    "step-v1",
    "reason-v1",
    "event-v1",
    "source-v1",
    "request-v1",
    "connection-v1",
    "restore-evidence-v1",
    "admission-recovery-v1",
]

_API_ACTIONS: Final[frozenset[str]] = frozenset(get_args(ApiAction))
_WORKER_ACTIONS: Final[frozenset[str]] = frozenset(get_args(WorkerAction))
_WORKER_OUTCOMES: Final[frozenset[str]] = frozenset(get_args(WorkerOutcome))
_RESPONSE_OUTCOMES: Final[frozenset[str]] = frozenset(get_args(ResponseOutcome))
_REFERENCE_CLASSES: Final[frozenset[str]] = frozenset(get_args(ReferenceClass))
_ROLES: Final[frozenset[str]] = frozenset(get_args(Role))
_PHASES: Final[frozenset[str]] = frozenset(get_args(Phase))

# --------------------------------------------------------------------------------------------
# Keyed references
# --------------------------------------------------------------------------------------------

_ID_KEY_INFO: Final = b"registry-platform-audit/identifier-key/v1"
_REFERENCE_CONTEXT: Final = "registry-platform:audit-reference:v1"


_RECENT_REFERENCES: Final = 4096


def _utf8(text: str) -> bytes:
    encoded: bytes | None
    try:
        encoded = text.encode("utf-8")
    except UnicodeEncodeError:
        encoded = None
    if encoded is None:
        raise ValueError("A referenced value is not valid Unicode.")
    return encoded


class AuditReferences:
    """Keyed references for one database: `reference(class, value)` hides `value` behind the
    audit key, so equal values can be matched across entries without being revealed."""

    __slots__ = ("_id_key", "_recent", "_scope")

    def __init__(self, audit_key: bytes, database_id: str) -> None:
        if not isinstance(audit_key, bytes | bytearray) or len(audit_key) < MIN_AUDIT_KEY_BYTES:
            raise CoordinatorError(
                Diagnostic(
                    code="coordinator.secret.invalid",
                    path="/deployment/auditKeyRef",
                    message="The audit key is shorter than 32 bytes.",
                )
            )
        # idKey = HMAC-SHA256(auditKey, label ‖ 0x01): HKDF-Expand of one block (RFC 5869 §2.3).
        self._id_key = hmac.digest(bytes(audit_key), _ID_KEY_INFO + b"\x01", hashlib.sha256)
        self._scope = database_id
        _utf8(database_id)
        # A run's and its steps' references are asked for again by every entry of the run:
        # the recent ones are kept (a bounded cache, emptied when full).
        self._recent: dict[tuple[str, str], str] = {}

    def __repr__(self) -> str:  # never the key
        return "AuditReferences(<redacted>)"

    def reference(self, reference_class: ReferenceClass, value: str) -> str:
        """`"hmac-sha256:" + hex(HMAC-SHA256(idKey, context \\0 len \\0 class \\0 len \\0 scope
        \\0 len \\0 value))` with decimal UTF-8 byte lengths and `scope = databaseId`."""
        key = (reference_class, value)
        known = self._recent.get(key)
        if known is not None:
            return known
        if reference_class not in _REFERENCE_CLASSES:
            raise ValueError("The reference class is not one of 07 §11.")
        parts = [_utf8(reference_class), _utf8(self._scope), _utf8(value)]
        message = _REFERENCE_CONTEXT.encode("ascii") + b"".join(
            b"\0" + str(len(part)).encode("ascii") + b"\0" + part for part in parts
        )
        reference = "hmac-sha256:" + hmac.digest(self._id_key, message, hashlib.sha256).hex()
        if len(self._recent) >= _RECENT_REFERENCES:
            self._recent.clear()
        self._recent[key] = reference
        return reference

    def actor(self, owner_commitment: str) -> str:
        return self.reference("actor-v1", owner_commitment)

    def run(self, run_id: str) -> str:
        return self.reference("run-v1", run_id)

    def step(self, run_id: str, step: str) -> str:
        return self.reference("step-v1", f"{run_id}/{step}")

    def reason(self, reason: str) -> str:
        return self.reference("reason-v1", reason)

    def event(self, ce_id: str) -> str:
        return self.reference("event-v1", ce_id)

    def source(self, source_name: str) -> str:
        return self.reference("source-v1", source_name)

    def request(self, request_id: str) -> str:
        return self.reference("request-v1", request_id)

    def connection(self, connection_name: str) -> str:
        return self.reference("connection-v1", connection_name)

    def restore_evidence(self, evidence: str) -> str:
        return self.reference("restore-evidence-v1", evidence)

    def admission_recovery(self, evidence: str) -> str:
        return self.reference("admission-recovery-v1", evidence)


# --------------------------------------------------------------------------------------------
# Entries
# --------------------------------------------------------------------------------------------

_UUID: Final = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_REF: Final = r"hmac-sha256:[0-9a-f]{64}"
_REFERENCE_RE: Final = re.compile(_REF)
_UUID_RE: Final = re.compile(_UUID)
_WORKER_CORRELATION_RE: Final = re.compile(
    rf"{_UUID}:(?:attempt|dispatch|observation|transition):{_REF}"
)
_DIGEST_RE: Final = re.compile(r"sha256:[0-9a-f]{64}")
_ACTIVATION_ID_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_TIME_RE: Final = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")
_MAX_COUNTER: Final = 2**53 - 1

_REFERENCE_MEMBERS: Final = frozenset(
    {
        "actorRef",
        "runRef",
        "stepRef",
        "reasonRef",
        "eventRef",
        "sourceRef",
        "requestRef",
        "connectionRef",
    }
)
_COUNTER_MEMBERS: Final = frozenset({"generation", "attempt", "fromVersion", "toVersion"})

# 07 §11 "Records", request/record column: action → (required members, optional members).
_API_REQUEST: Final = (frozenset({"action", "actorRef"}), frozenset({"runRef", "reasonRef"}))
_REQUEST_SHAPES: Final[dict[str, tuple[frozenset[str], frozenset[str]]]] = {
    **dict.fromkeys(_API_ACTIONS, _API_REQUEST),
    "event-admit": (frozenset({"action", "sourceRef", "eventRef"}), frozenset()),
    "review-completion": (frozenset({"action", "connectionRef", "requestRef"}), frozenset()),
    "store.migrate": (frozenset({"action", "fromVersion", "toVersion"}), frozenset()),
    # `apply --reference REF` is journaled as a keyed reference (09 §3); it uses `reasonRef`.
    "activation.apply": (frozenset({"action", "packageDigest"}), frozenset({"reasonRef"})),
}
_WORKER_MEMBERS: Final = frozenset(
    {"action", "runRef", "stepRef", "generation", "attempt", "outcome"}
)
_RESPONSE_REQUIRED: Final = frozenset({"action", "outcome"})
_RESPONSE_OPTIONAL: Final = frozenset({"code", "runRef"})
_CTL_APPLIED_OPTIONAL: Final = frozenset({"activationId"})


def _member_ok(name: str, value: object) -> bool:
    """The value rule of each member a record may hold; unknown members are refused."""
    if name in _REFERENCE_MEMBERS:
        return isinstance(value, str) and _REFERENCE_RE.fullmatch(value) is not None
    if name in _COUNTER_MEMBERS:
        return type(value) is int and 0 <= value <= _MAX_COUNTER
    if name in {"action", "outcome"}:
        return isinstance(value, str)  # the shape decides which names are allowed
    if name == "code":  # only a catalogue code: a free-form string could carry a raw value
        return isinstance(value, str) and value in catalogue()
    if name == "packageDigest":
        return isinstance(value, str) and _DIGEST_RE.fullmatch(value) is not None
    if name == "activationId":
        if type(value) is int:
            return 0 <= value <= _MAX_COUNTER
        return isinstance(value, str) and _ACTIVATION_ID_RE.fullmatch(value) is not None
    return False


def _record_ok(phase: str, record: Mapping[str, object]) -> bool:
    members = set(record)
    if not all(isinstance(name, str) and _member_ok(name, record[name]) for name in members):
        return False
    action = record.get("action")
    outcome = record.get("outcome")
    if phase == "request":
        if not isinstance(action, str) or action not in _REQUEST_SHAPES:
            return False
        required, optional = _REQUEST_SHAPES[action]
        return required <= members <= required | optional
    if phase == "response":
        if outcome == "applied":  # ctl: {outcome: "applied", activationId?}
            return members - {"outcome"} <= _CTL_APPLIED_OPTIONAL
        return (
            action in _REQUEST_SHAPES
            and outcome in _RESPONSE_OUTCOMES
            and _RESPONSE_REQUIRED <= members <= _RESPONSE_REQUIRED | _RESPONSE_OPTIONAL
        )
    # phase "record": the worker
    return members == _WORKER_MEMBERS and action in _WORKER_ACTIONS and outcome in _WORKER_OUTCOMES


def _correlation_ok(phase: str, correlation: object) -> bool:
    if not isinstance(correlation, str):
        return False
    if phase == "record":
        return _WORKER_CORRELATION_RE.fullmatch(correlation) is not None
    return _UUID_RE.fullmatch(correlation) is not None


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """What a caller journals: the writer adds schema, sequence, eventId, time and previous.

    Construction refuses (ValueError, fixed message) a phase, correlation or record outside the
    07 §11 table, so a raw value can never reach the journal through a member."""

    phase: Phase
    correlation: str
    record: Mapping[str, object]

    def __post_init__(self) -> None:
        object.__setattr__(self, "record", dict(self.record))  # a private copy
        _check_entry(self.phase, self.correlation, self.record)


def _check_entry(phase: object, correlation: object, record: object) -> None:
    if not isinstance(phase, str) or phase not in _PHASES:
        raise ValueError("The audit phase is not request, response or record.")
    if not _correlation_ok(phase, correlation):
        raise ValueError("The audit correlation is not a UUID (or UUID:action:stepRef).")
    if not isinstance(record, Mapping) or not _record_ok(phase, record):
        raise ValueError("The audit record is not one of the shapes of 07 §11.")


def new_correlation() -> str:
    """A fresh correlation id pairing a request entry with its response entry."""
    return str(uuid.uuid4())


def worker_correlation(correlation: str, action: WorkerAction, step_ref: str) -> str:
    """`<uuid>:<action>:<stepRef>` for worker entries."""
    return f"{correlation}:{action}:{step_ref}"


def api_request(
    correlation: str,
    action: ApiAction,
    actor_ref: str,
    *,
    run_ref: str | None = None,
    reason_ref: str | None = None,
) -> AuditEntry:
    record: dict[str, object] = {"action": action, "actorRef": actor_ref}
    if run_ref is not None:
        record["runRef"] = run_ref
    if reason_ref is not None:
        record["reasonRef"] = reason_ref
    return AuditEntry("request", correlation, record)


def event_request(correlation: str, source_ref: str, event_ref: str) -> AuditEntry:
    return AuditEntry(
        "request",
        correlation,
        {"action": "event-admit", "sourceRef": source_ref, "eventRef": event_ref},
    )


def review_completion_request(
    correlation: str, connection_ref: str, request_ref: str
) -> AuditEntry:
    return AuditEntry(
        "request",
        correlation,
        {"action": "review-completion", "connectionRef": connection_ref, "requestRef": request_ref},
    )


def migrate_request(correlation: str, from_version: int, to_version: int) -> AuditEntry:
    return AuditEntry(
        "request",
        correlation,
        {"action": "store.migrate", "fromVersion": from_version, "toVersion": to_version},
    )


def apply_request(
    correlation: str, package_digest: str, *, reason_ref: str | None = None
) -> AuditEntry:
    record: dict[str, object] = {"action": "activation.apply", "packageDigest": package_digest}
    if reason_ref is not None:
        record["reasonRef"] = reason_ref
    return AuditEntry("request", correlation, record)


def response(
    correlation: str,
    action: str,
    outcome: ResponseOutcome,
    *,
    code: str | None = None,
    run_ref: str | None = None,
) -> AuditEntry:
    """The response entry of any request action: `{action, outcome, code?, runRef?}`."""
    record: dict[str, object] = {"action": action, "outcome": outcome}
    if code is not None:
        record["code"] = code
    if run_ref is not None:
        record["runRef"] = run_ref
    return AuditEntry("response", correlation, record)


def ctl_applied(correlation: str, *, activation_id: str | int | None = None) -> AuditEntry:
    """The response of a successful `migrate` or `apply`: `{outcome: "applied", activationId?}`."""
    record: dict[str, object] = {"outcome": "applied"}
    if activation_id is not None:
        record["activationId"] = activation_id
    return AuditEntry("response", correlation, record)


def worker_record(
    correlation: str,
    action: WorkerAction,
    run_ref: str,
    step_ref: str,
    generation: int,
    attempt: int,
    outcome: WorkerOutcome,
) -> AuditEntry:
    return AuditEntry(
        "record",
        correlation,
        {
            "action": action,
            "runRef": run_ref,
            "stepRef": step_ref,
            "generation": generation,
            "attempt": attempt,
            "outcome": outcome,
        },
    )


# --------------------------------------------------------------------------------------------
# Writer
# --------------------------------------------------------------------------------------------

_FILE_NAME_RE: Final = re.compile(
    r"(?P<prefix>(?:serve|worker|ctl)-\d{8}T\d{6}Z-[0-9a-f]{8})(?:-(?P<n>[2-9]|[1-9]\d+))?\.jsonl"
)
_OPEN_FLAGS: Final = (
    os.O_WRONLY
    | os.O_CREAT
    | os.O_EXCL
    | os.O_APPEND
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_NOFOLLOW", 0)
)


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

    Only checked entries get here (`_check_entry`): member names are ASCII, values are
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
    ) -> None:
        self._directory = directory
        self._prefix = prefix
        self._clock = clock
        self._rotate_bytes = rotate_bytes
        self._cond = threading.Condition(threading.Lock())
        self._queue: list[bytes] = []
        self._next_sequence = 1
        self._previous = ZERO_HASH  # hash of the last line queued
        self._durable_sequence = 0
        self._head = ZERO_HASH  # hash of the last line made durable
        self._flushing = False
        self._failed = False
        self._closed = False
        self._background: threading.Thread | None = None
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
    ) -> AuditWriter:
        """Create this process's first journal file; failure is `audit-unavailable` (exit 3).

        The directory is created owner-only when absent; an existing one must be a directory
        without group or other permissions."""
        if role not in _ROLES:
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
        return cls(path, prefix, clock=clock, rotate_bytes=rotate_bytes)

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
    def ready(self) -> bool:
        """False after a write failure or close: every later append is refused."""
        with self._cond:
            return not (self._failed or self._closed)

    def append(self, entry: AuditEntry, *, wait: bool = True) -> None:
        """Journal `entry`; returns only after its line is written and fsynced.

        `wait=False` (API read actions, 07 §7.7 item 5) queues the line in sequence order and
        returns at once; the next durable append, or `close`, makes it durable.

        Raises `coordinator.command.audit-unavailable` when the line may not be durable, and for
        every later call: the protected action must then not proceed."""
        self.append_all((entry,), wait=wait)

    def append_all(self, entries: Sequence[AuditEntry], *, wait: bool = True) -> None:
        """Journal `entries` in order, covered by one fsync (the entries of one transaction,
        07 §7.7 item 5); returns only after all of them are on stable storage."""
        for entry in entries:
            _check_entry(entry.phase, entry.correlation, entry.record)
        if not entries:
            return
        with self._cond:
            if self._failed or self._closed:
                raise _unavailable("The audit journal refuses entries after a write failure.")
            lines = []
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
                        "record": entry.record,
                        "previous": previous,
                    }
                )
                if len(line) > MAX_ENTRY_BYTES:
                    raise ValueError("The audit entry is larger than 1 MiB.")
                previous = sha256_label(line)
                lines.append(line)
            self._next_sequence = sequence + 1
            self._previous = previous
            self._queue.extend(lines)
            if not wait:
                self._start_background()
                self._cond.notify_all()
                return
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
        with self._cond:
            while not (self._closed or self._failed):
                if self._queue and not self._flushing:
                    self._flush_queue()
                else:
                    self._cond.wait()

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
        _fsync_directory(self._directory)

    def _flush_queue(self) -> None:
        """Called with the lock held by the thread that becomes the flusher: writes and fsyncs
        everything queued, with the lock released so that others can queue meanwhile."""
        batch, self._queue = self._queue, []
        self._flushing = True
        written = False
        self._cond.release()
        try:
            written = self._write_batch(batch)
        finally:
            self._cond.acquire()
            self._flushing = False
            if written:
                self._durable_sequence += len(batch)
                self._head = sha256_label(batch[-1])
            else:
                self._failed = True
            self._cond.notify_all()

    def _write_batch(self, batch: list[bytes]) -> bool:
        """Write the batch (one `write` per file it goes to) and fsync it."""
        try:
            pending: list[bytes] = []
            for line in batch:
                data = line + b"\n"
                if self._size and self._size + len(data) > self._rotate_bytes:
                    _write_all(self._fd, b"".join(pending))
                    pending = []
                    os.fsync(self._fd)
                    os.close(self._fd)
                    self._fd = -1
                    self._file_number += 1
                    self._create_file()
                pending.append(data)
                self._size += len(data)
            _write_all(self._fd, b"".join(pending))
            os.fsync(self._fd)
        except OSError:
            return False
        return True


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
class VerifyResult:
    """The `audit verify` result (09 §2): totals and one item per group, sorted by prefix."""

    files: int
    entries: int
    groups: tuple[GroupResult, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "files": self.files,
            "entries": self.entries,
            "groups": [group.to_json() for group in self.groups],
        }


def _unreadable(file: str | None) -> CoordinatorError:
    return CoordinatorError(Diagnostic(code="coordinator.audit.unreadable", file=file))


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
    number, is broken at its line 1. Files not ending in `.jsonl` are ignored. A change to a
    group's last line keeps the chain valid but changes `head`: compare heads with a copy kept
    elsewhere.
    """
    root = Path(directory)
    try:
        with os.scandir(root) as listing:
            names = sorted(item.name for item in listing if item.name.endswith(".jsonl"))
    except OSError:
        names = None
    if names is None:
        raise _unreadable(None)

    groups: dict[str, list[str]] = {}
    for name in names:
        match = _FILE_NAME_RE.fullmatch(name)
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
            if not _can_read(root / name):
                raise _unreadable(name)

    results: list[GroupResult] = []
    for prefix, files in ordered:
        sequence, head = 0, ZERO_HASH
        for name in files:
            sequence, head = _verify_file(root / name, name, sequence, head)
        results.append(GroupResult(prefix, len(files), sequence, head))
    return VerifyResult(
        files=sum(group.files for group in results),
        entries=sum(group.entries for group in results),
        groups=tuple(results),
    )


def _file_number(name: str) -> int:
    match = _FILE_NAME_RE.fullmatch(name)
    number = match["n"] if match is not None else None
    return int(number) if number else 1


def _can_read(path: Path) -> bool:
    try:
        with path.open("rb"):
            return True
    except OSError:
        return False


def _verify_file(path: Path, name: str, sequence: int, head: str) -> tuple[int, str]:
    """Check each line of one file, continuing the group's sequence and chain."""
    line_number = 0
    try:
        with path.open("rb") as handle:
            while raw := handle.readline(MAX_ENTRY_BYTES + 2):
                line_number += 1
                if not raw.endswith(b"\n"):
                    raise _broken(
                        name, line_number, "", "The line is incomplete or longer than 1 MiB."
                    )
                line = raw[:-1]
                _verify_line(line, name, line_number, sequence + 1, head)
                sequence, head = sequence + 1, sha256_label(line)
    except OSError:
        raise _unreadable(name) from None
    return sequence, head


def _verify_line(line: bytes, name: str, line_number: int, sequence: int, previous: str) -> None:
    if len(line) > MAX_ENTRY_BYTES:
        raise _broken(name, line_number, "", "The line is longer than 1 MiB.")
    entry = _canonical_object(line)
    if entry is None:
        raise _broken(name, line_number, "", "The line is not canonical JSON of one object.")
    if set(entry) != _ENTRY_MEMBERS:
        raise _broken(name, line_number, "", "The entry does not have exactly the journal members.")
    if entry["schema"] != AUDIT_SCHEMA:
        raise _broken(name, line_number, "/schema", "The entry's schema is not the journal schema.")
    if type(entry["sequence"]) is not int or entry["sequence"] != sequence:
        raise _broken(
            name, line_number, "/sequence", "The sequence does not continue the file group."
        )
    if entry["previous"] != previous:
        raise _broken(
            name, line_number, "/previous", "The previous hash does not match the line before."
        )
    event_id = entry["eventId"]
    if not isinstance(event_id, str) or _UUID_RE.fullmatch(event_id) is None:
        raise _broken(name, line_number, "/eventId", "The event id is not a UUID.")
    if not _time_ok(entry["time"]):
        raise _broken(name, line_number, "/time", "The time is not a UTC time with milliseconds.")
    phase = entry["phase"]
    if not isinstance(phase, str) or phase not in _PHASES:
        raise _broken(name, line_number, "/phase", "The phase is not request, response or record.")
    if not isinstance(entry["correlation"], str) or not entry["correlation"]:
        raise _broken(name, line_number, "/correlation", "The correlation is not a string.")
    if not isinstance(entry["record"], dict):
        raise _broken(name, line_number, "/record", "The record is not an object.")


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
    if not isinstance(value, str) or _TIME_RE.fullmatch(value) is None:
        return False
    try:
        datetime.strptime(value[:19], "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return False
    return True
