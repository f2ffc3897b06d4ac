"""The run state the engine advances: the run row and its step records (file 07 §2, §14.1).

Everything here is an immutable value with a JSON form. JSON payloads (the run input, step
outputs, the frozen command, the finish output) are held as RFC 8785 canonical JSON text, which
is exactly what the store seals (07 §10): a mapping therefore sees the same values whether or
not the process restarted in between (an integral `2.0` reads back as `2` either way).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal

from coordinator_core.definition.graph import RouteKind
from coordinator_core.engine.instants import Instant
from coordinator_core.engine.serial import decode, encode
from coordinator_core.operations import Effect

__all__ = [
    "ACTIVE_STATUSES",
    "TERMINAL_STATUSES",
    "AttemptEnding",
    "CancelMode",
    "EffectState",
    "RouteKind",
    "RunState",
    "RunStatusValue",
    "SettledBy",
    "StepRecord",
    "StepRoute",
    "StepState",
    "StepType",
    "TimingPolicy",
]

RunStatusValue = Literal[
    "running",
    "attention",
    "cancel-requested",
    "finished",
    "failed",
    "cancelled",
    "cancelled-after-effect",
    "expired",
]
StepState = Literal[
    "pending", "leased", "delivered", "dead-lettered", "unknown", "expired", "cancelled"
]
StepType = Literal["call", "choose", "wait-until", "wait-for", "finish"]
CancelMode = Literal["none", "stopping", "on-cancel-path"]
EffectState = Literal["accepted", "unknown", "refused", "not-sent"]
SettledBy = Literal["response", "reconcile", "retry-same"]
Awaiting = Literal["work", "preparation", "credential", "answer", "observation"]
AttemptEnding = Literal[
    "delivered", "retry", "dead-lettered", "unknown", "expired", "cancelled", "pending", "timed-out"
]
"""How an attempt of a record ended, in the words of the journal's worker entries (07 §11)."""

TERMINAL_STATUSES: Final[frozenset[str]] = frozenset(
    {"finished", "cancelled", "cancelled-after-effect", "expired"}
)
"""Statuses a run never leaves (`failed` may still be left through `retry-same`)."""
ACTIVE_STATUSES: Final[frozenset[str]] = frozenset({"running", "cancel-requested"})


@dataclass(frozen=True, slots=True)
class TimingPolicy:
    """Timing rules captured at admission and never changed for the run (07 §7.4, §16).

    `retry_delays_ms[i]` is the delay after attempt i+1; a generation has one attempt more
    than there are delays. The scenario runner uses zero delays: there calls take no virtual
    time (04 §4.5), which is the only difference between the two drivers.
    """

    retry_delays_ms: tuple[int, ...] = (100, 500)
    observation_floor_seconds: int = 30

    @property
    def max_attempts(self) -> int:
        return len(self.retry_delays_ms) + 1

    def to_json(self) -> dict[str, Any]:
        result: dict[str, Any] = encode(self)
        return result

    @classmethod
    def from_json(cls, data: Any) -> TimingPolicy:
        return decode(cls, data)


@dataclass(frozen=True, slots=True)
class StepRoute:
    """How the run left a step: the route kind and, for a case or a refusal, its label."""

    kind: RouteKind
    label: str | None = None


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One step record (07 §2.1, §14.1). Lease token and expiry belong to the store.

    `claims` counts every claim of the record over its life (never reset); `attempt` counts
    call attempts in the current generation. `awaiting` names what a leased record waits for.

    `command` (canonical JSON of the frozen request), `preparation` (the frozen preparation's
    bytes) and `output` (canonical JSON) are the record's payload: the store keeps them sealed
    and the shell opens them before `advance` runs, so a record read for a view has them None.
    `command_prepared` says a command was frozen, whether or not its text is at hand (it stays
    true after retention erased it).
    """

    step: str
    type: StepType
    state: StepState
    entered_at: Instant
    pure: bool = False
    generation: int = 1
    attempt: int = 0
    claims: int = 0
    due_at: Instant | None = None
    attempt_started_at: Instant | None = None
    finished_at: Instant | None = None
    awaiting: Awaiting | None = None
    route: StepRoute | None = None
    failure_code: str | None = None
    detail: str | None = None
    # calls
    operation: str | None = None
    effect: Effect | None = None
    command: str | None = None
    command_prepared: bool = False
    preparation: bytes | None = None
    dispatched: bool = False
    sent: bool = False
    uncertain: bool = False
    receipt_expired: bool = False
    settled_by: SettledBy | None = None
    # calls and wait-for: canonical JSON of the recorded output, None when there is none
    output: str | None = None
    # waits
    wait_until: Instant | None = None
    wait_started_at: Instant | None = None
    timeout_at: Instant | None = None
    interval_seconds: int | None = None
    observations: int = 0
    last_observed_at: Instant | None = None
    completion_ref: str | None = None

    @property
    def ending(self) -> AttemptEnding:
        """How the attempt that left the record as it is ended (07 §11 worker outcome):
        delivered (or timed out through a route), put back pending (a retry of a call), failed,
        unknown, expired or cancelled."""
        state = self.state
        if state == "delivered":
            timed_out = self.route is not None and self.route.kind == "timeout"
            return "timed-out" if timed_out else "delivered"
        if state == "pending":
            return "retry" if self.type == "call" else "pending"
        if state == "dead-lettered":
            return "timed-out" if self.failure_code == "wait-timed-out" else "dead-lettered"
        if state in ("unknown", "expired", "cancelled"):
            return state
        return "pending"

    @property
    def dispatch_risk(self) -> bool:
        """Mutations and evaluations are marked before sending and report effects."""
        return self.effect in ("mutation", "evaluation")

    @property
    def effect_state(self) -> EffectState | None:
        """The effect of a prepared mutation or evaluation (06 §11.4); None otherwise.

        Accepted only on a proven success; unknown while some attempt may have executed
        without a definite answer (including one in flight); refused when the command left the
        process and every answer was definite; not-sent when it never left.
        """
        if not self.dispatch_risk or not self.command_prepared:
            return None
        if self.settled_by is not None:
            return "accepted"
        if self.uncertain or self.dispatched:
            return "unknown"
        return "refused" if self.sent else "not-sent"


@dataclass(frozen=True, slots=True)
class RunState:
    """A run (07 §2, §14.1) with every step record it entered, in order of entry.

    `status` is what the transitions of 07 §5 wrote; `reported_status` applies the overriding
    restore-review rule. `input` and `output` are canonical JSON text; `input` is None only
    where the payload is not at hand (a run as the store keeps it, sealed).
    """

    status: RunStatusValue
    current_step: str
    admitted_at: Instant
    deadline_at: Instant
    input: str | None
    policy: TimingPolicy = field(default_factory=TimingPolicy)
    cancel_mode: CancelMode = "none"
    cancel_requested: bool = False
    restore_review: bool = False
    completed_at: Instant | None = None
    outcome: str | None = None
    output: str | None = None
    failure_code: str | None = None
    records: tuple[StepRecord, ...] = ()

    @property
    def reported_status(self) -> RunStatusValue:
        if self.restore_review and self.status not in TERMINAL_STATUSES:
            return "attention"
        return self.status

    @property
    def current(self) -> StepRecord:
        record = self.record(self.current_step)
        if record is None:  # pragma: no cover - every transition enters the step it names
            raise ValueError("The run has no record of its current step.")
        return record

    def record(self, step: str) -> StepRecord | None:
        for record in self.records:
            if record.step == step:
                return record
        return None

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def effects(self) -> tuple[tuple[str, str, EffectState, SettledBy | None], ...]:
        """`(step, operation, state, settledBy)` of every prepared mutation or evaluation, in
        order of first attempt (06 §11.4)."""
        found: list[tuple[str, str, EffectState, SettledBy | None]] = []
        for record in self.records:
            effect = record.effect_state
            if effect is not None and record.operation is not None:
                found.append((record.step, record.operation, effect, record.settled_by))
        return tuple(found)

    def to_json(self) -> dict[str, Any]:
        result: dict[str, Any] = encode(self)
        return result

    @classmethod
    def from_json(cls, data: Any) -> RunState:
        return decode(cls, data)
