"""The journal's entry shapes (07 §11 table): the types, the checks and the builders."""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Literal, get_args

from coordinator_core.errors import catalogue

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
    "attempts",
    "cancel",
    "retry-same",
    "reconcile",
    "doctor",
    "restore-hold",
    "release-restore-hold",
    "release-admission-hold",
    "retention",
]
READ_ACTIONS: Final[frozenset[str]] = frozenset(
    {"workflow-read", "list", "status", "inspect", "attempts", "doctor"}
)
"""The API read actions: journaled, but their answers need not wait for the fsync (07 §7.7
item 5)."""
WorkerAction = Literal["attempt", "dispatch", "observation", "transition"]
JournalAction = Literal["store.identity", "journal.torn-tail"]
"""The records a process keeps about its journal and store (07 §12.1 items 5–6), phase
`record`, correlation a plain UUID: `{action: "store.identity", storeIdentity}` (the identity
of the database the process works, as a digest) and `{action: "journal.torn-tail", journalFile,
line, bytes}` (a torn last line of a dead process's file, set aside to `<journalFile>.torn`)."""
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
    "committed",
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
_JOURNAL_RECORDS: Final[dict[str, frozenset[str]]] = {
    "store.identity": frozenset({"action", "storeIdentity"}),
    "journal.torn-tail": frozenset({"action", "journalFile", "line", "bytes"}),
}
_WORKER_OUTCOMES: Final[frozenset[str]] = frozenset(get_args(WorkerOutcome))
_RESPONSE_OUTCOMES: Final[frozenset[str]] = frozenset(get_args(ResponseOutcome))
REFERENCE_CLASSES: Final[frozenset[str]] = frozenset(get_args(ReferenceClass))
ROLES: Final[frozenset[str]] = frozenset(get_args(Role))
PHASES: Final[frozenset[str]] = frozenset(get_args(Phase))

# --------------------------------------------------------------------------------------------
# Entries
# --------------------------------------------------------------------------------------------

_UUID: Final = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_REF: Final = r"hmac-sha256:[0-9a-f]{64}"
_REFERENCE_RE: Final = re.compile(_REF)
UUID_PATTERN: Final = re.compile(_UUID)
_WORKER_CORRELATION_RE: Final = re.compile(
    rf"{_UUID}:(?:attempt|dispatch|observation|transition):{_REF}"
)
_DIGEST_RE: Final = re.compile(r"sha256:[0-9a-f]{64}")
_ACTIVATION_ID_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
TIME_PATTERN: Final = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")
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
_COUNTER_MEMBERS: Final = frozenset(
    {"generation", "attempt", "fromVersion", "toVersion", "line", "bytes"}
)
JOURNAL_FILE_RE: Final = re.compile(
    r"(?P<prefix>(?:serve|worker|ctl)-\d{8}T\d{6}Z-[0-9a-f]{8})(?:-(?P<n>[2-9]|[1-9]\d+))?\.jsonl"
)
"""A journal file's name (07 §11): `<role>-<YYYYMMDDTHHMMSSZ>-<8 hex>[-<n>].jsonl`."""

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
    if name in ("packageDigest", "storeIdentity"):
        return isinstance(value, str) and _DIGEST_RE.fullmatch(value) is not None
    if name == "journalFile":
        return isinstance(value, str) and JOURNAL_FILE_RE.fullmatch(value) is not None
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
    # phase "record": the worker, or the process about its journal and store
    if isinstance(action, str) and action in _JOURNAL_RECORDS:
        return members == _JOURNAL_RECORDS[action]
    return members == _WORKER_MEMBERS and action in _WORKER_ACTIONS and outcome in _WORKER_OUTCOMES


def _correlation_ok(phase: str, correlation: object, record: Mapping[str, object]) -> bool:
    if not isinstance(correlation, str):
        return False
    if phase == "record" and record.get("action") not in _JOURNAL_RECORDS:
        return _WORKER_CORRELATION_RE.fullmatch(correlation) is not None
    return UUID_PATTERN.fullmatch(correlation) is not None


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """What a caller journals: the writer adds schema, sequence, eventId, time and previous.

    Construction refuses (ValueError, fixed message) a phase, correlation or record outside the
    07 §11 table, so a raw value can never reach the journal through a member. The entry keeps
    a private copy of the record behind a read-only view, so what was checked is what the
    writer journals: it does not check again."""

    phase: Phase
    correlation: str
    record: Mapping[str, object]

    def __post_init__(self) -> None:
        record = dict(self.record)  # a private copy, checked once, never changed after
        check_entry(self.phase, self.correlation, record)
        object.__setattr__(self, "record", MappingProxyType(record))


def check_entry(phase: object, correlation: object, record: object) -> None:
    if not isinstance(phase, str) or phase not in PHASES:
        raise ValueError("The audit phase is not request, response or record.")
    if not isinstance(record, Mapping):
        raise ValueError("The audit record is not one of the shapes of 07 §11.")
    if not _correlation_ok(phase, correlation, record):
        raise ValueError("The audit correlation is not a UUID (or UUID:action:stepRef).")
    if not _record_ok(phase, record):
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


def store_identity_record(correlation: str, identity_digest: str) -> AuditEntry:
    """`{action: "store.identity", storeIdentity}`: the database this process works (07 §12.1
    item 5), as the `sha256:` digest of its identity."""
    return AuditEntry(
        "record", correlation, {"action": "store.identity", "storeIdentity": identity_digest}
    )


def torn_tail_record(correlation: str, journal_file: str, line: int, size: int) -> AuditEntry:
    """`{action: "journal.torn-tail", journalFile, line, bytes}`: the torn last line of a
    journal file (from `line` on, `size` bytes) was set aside to `<journalFile>.torn`."""
    return AuditEntry(
        "record",
        correlation,
        {"action": "journal.torn-tail", "journalFile": journal_file, "line": line, "bytes": size},
    )
