"""The engine's inputs: the events fed to `advance`, what happened to a run (admission, claims, product answers, time,
cancel and operator recovery). Each is a frozen value with a JSON form.

JSON payloads travel as canonical JSON text (see `state`); the `of`/`success`/`complete`/
`confirmed` constructors canonicalise a plain JSON value. The answers to the shell's I/O commands
are also the adapters' closed outcome set (architecture rule 6): a payload they carry (a step
output, a receipt, a preparation) never appears in their `repr`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from coordinator_core.engine.serial import FormatError, Tagged, decode
from coordinator_core.engine.state import TimingPolicy
from coordinator_core.values import canonical_json

__all__ = [
    "Admitted",
    "AttemptRefused",
    "CallOutcome",
    "CancelRequested",
    "CompletionNotified",
    "DeadlinePassed",
    "Event",
    "LeaseLapsed",
    "ObservationOutcome",
    "PreparationDone",
    "ReadyToSend",
    "ReceiptAnswer",
    "ReconcileRequested",
    "RestoreHold",
    "RetrySame",
    "StepDue",
    "Work",
    "event_from_json",
    "to_canonical",
]

CallOutcomeKind = Literal[
    "success", "declared-refusal", "refused", "retryable", "uncertain", "receipt-expired"
]
ObservationKind = Literal["pending", "complete", "refused", "retryable"]
ReceiptKind = Literal["confirmed", "unresolved", "expired", "unavailable", "key-reused"]


def to_canonical(value: Any) -> str:
    """The canonical JSON text of a JSON value (RFC 8785)."""
    return canonical_json(value).decode("utf-8")


@dataclass(frozen=True, slots=True)
class Admitted(Tagged):
    """T1: the admission transaction accepted the run with this (validated) input."""

    kind: ClassVar[str] = "admitted"
    input: str
    policy: TimingPolicy = field(default_factory=TimingPolicy)

    @classmethod
    def of(cls, run_input: Any, policy: TimingPolicy | None = None) -> Admitted:
        return cls(to_canonical(run_input), policy or TimingPolicy())


@dataclass(frozen=True, slots=True)
class StepDue(Tagged):
    """A claim (07 §7.2): the pending record of `step` is due; lease it (answered by `Work`).

    Covers first attempts, retries, timers, observations and the wait timeout (a `wait-for`
    claimed at or after its `timeoutAt` takes its timeout route, 07 §7.3 step 2).
    """

    kind: ClassVar[str] = "step-due"
    step: str


@dataclass(frozen=True, slots=True)
class Work(Tagged):
    """The claim of `step` is committed; do the step's work (07 §7.2 "then the work happens
    outside any transaction"), beginning with the claim-time `step-invalid` check."""

    kind: ClassVar[str] = "work"
    step: str


@dataclass(frozen=True, slots=True)
class PreparationDone(Tagged):
    """The operation's preparation succeeded; `preparation` is its evidence, as the product
    gave it."""

    kind: ClassVar[str] = "preparation-done"
    step: str
    preparation: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class ReadyToSend(Tagged):
    """The shell obtained a fresh credential and stands at the pre-send fence (07 §7.4 step 6)."""

    kind: ClassVar[str] = "ready-to-send"
    step: str


@dataclass(frozen=True, slots=True)
class CallOutcome(Tagged):
    """The classified outcome of one call attempt (08 §9), or of its preparation or credential
    before anything was sent (then only `retryable` or `refused`)."""

    kind: ClassVar[str] = "call-outcome"
    step: str
    outcome: CallOutcomeKind
    code: str | None = None
    value: str | None = field(default=None, repr=False)
    refusal_code: str | None = None

    @classmethod
    def success(cls, step: str, value: Any) -> CallOutcome:
        return cls(step, "success", value=to_canonical(value))


@dataclass(frozen=True, slots=True)
class ObservationOutcome(Tagged):
    """The result of one read of an awaited completion (07 §7.3 step 3)."""

    kind: ClassVar[str] = "observation-outcome"
    step: str
    outcome: ObservationKind
    code: str | None = None
    value: str | None = field(default=None, repr=False)

    @classmethod
    def complete(cls, step: str, value: Any) -> ObservationOutcome:
        return cls(step, "complete", value=to_canonical(value))


@dataclass(frozen=True, slots=True)
class DeadlinePassed(Tagged):
    """The deadline sweep (07 §7.2 step 3) found the run's pending record overdue."""

    kind: ClassVar[str] = "deadline-passed"


@dataclass(frozen=True, slots=True)
class LeaseLapsed(Tagged):
    """The lease of the record of `step` expired before its attempt finished (T28/T29)."""

    kind: ClassVar[str] = "lease-lapsed"
    step: str


@dataclass(frozen=True, slots=True)
class CompletionNotified(Tagged):
    """A completion event matched the run's pending `wait-for` (07 §7.6): bring its next
    observation forward, never closer than the floor to the last read."""

    kind: ClassVar[str] = "completion-notified"


@dataclass(frozen=True, slots=True)
class CancelRequested(Tagged):
    """`POST /v1/runs/{run}/cancel` (07 §8)."""

    kind: ClassVar[str] = "cancel-requested"


@dataclass(frozen=True, slots=True)
class RetrySame(Tagged):
    """The operator's `retry-same` (07 §9.1). The flags carry the checks only the shell can
    make (binding digest, snapshot restore, erasure, store lease); the engine applies every
    condition in the contract's order."""

    kind: ClassVar[str] = "retry-same"
    binding_unchanged: bool = True
    snapshot_restores: bool = True
    payload_erased: bool = False
    lease_active: bool = False


@dataclass(frozen=True, slots=True)
class ReconcileRequested(Tagged):
    """The operator's `reconcile` (07 §9.2), before the receipt lookup."""

    kind: ClassVar[str] = "reconcile-requested"
    binding_unchanged: bool = True
    payload_erased: bool = False
    lease_active: bool = False


@dataclass(frozen=True, slots=True)
class ReceiptAnswer(Tagged):
    """The product's answer to the receipt lookup of a reconcile (07 §9.2 table)."""

    kind: ClassVar[str] = "receipt-answer"
    step: str
    generation: int
    answer: ReceiptKind
    value: str | None = field(default=None, repr=False)

    @classmethod
    def confirmed(cls, step: str, generation: int, receipt: Any) -> ReceiptAnswer:
        return cls(step, generation, "confirmed", to_canonical(receipt))


@dataclass(frozen=True, slots=True)
class RestoreHold(Tagged):
    """`restore-hold` (07 §12 step 3, T33) reaching this run."""

    kind: ClassVar[str] = "restore-hold"


@dataclass(frozen=True, slots=True)
class AttemptRefused(Tagged):
    """A claim-time or pre-send check only the shell can make failed (07 §7.2, §7.4 step 4):
    `snapshot-incompatible` (T34/T35), `binding-conflict` or `protected-state-invalid`."""

    kind: ClassVar[str] = "attempt-refused"
    step: str
    code: Literal["snapshot-incompatible", "binding-conflict", "protected-state-invalid"]


Event = (
    Admitted
    | StepDue
    | Work
    | PreparationDone
    | ReadyToSend
    | CallOutcome
    | ObservationOutcome
    | DeadlinePassed
    | LeaseLapsed
    | CompletionNotified
    | CancelRequested
    | RetrySame
    | ReconcileRequested
    | ReceiptAnswer
    | RestoreHold
    | AttemptRefused
)

_EVENT_TYPES: dict[str, type[Any]] = {
    cls.kind: cls
    for cls in (
        Admitted,
        StepDue,
        Work,
        PreparationDone,
        ReadyToSend,
        CallOutcome,
        ObservationOutcome,
        DeadlinePassed,
        LeaseLapsed,
        CompletionNotified,
        CancelRequested,
        RetrySame,
        ReconcileRequested,
        ReceiptAnswer,
        RestoreHold,
        AttemptRefused,
    )
}


def event_from_json(data: Any) -> Event:
    """The event whose JSON form (with its `kind`) is `data`."""
    if not isinstance(data, dict) or data.get("kind") not in _EVENT_TYPES:
        raise FormatError("Not an engine event.")
    event: Event = decode(_EVENT_TYPES[data["kind"]], data)
    return event
