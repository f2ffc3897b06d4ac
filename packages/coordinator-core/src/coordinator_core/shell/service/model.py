"""The run service's vocabulary: `RunService` (one method per action of 06 §4), the values it
takes and the result shapes it returns (06 §11), and `ServiceRefusal`.

The HTTP API owns authentication, the order of checks (06 §1 item 6), media type, size, strict
bodies, problem+json and serialisation; everything that needs the store, the engine, the keys or
the products is behind `RunService`, whose methods take already validated values and return the
shapes below (snake_case, typed: the HTTP API renders them as 06 §11 JSON). Domain
refusals are raised as `ServiceRefusal(code, reason)` with a code of 06 §3.1.

Visibility (06 §2): every run-scoped method takes the verified `Caller`. A run the caller may not
see (neither its owner `(iss, sub)` nor an operator, or not of a workflow of its policy) is
reported exactly like an absent run: `None` from the readers, `ServiceRefusal(run-absent)` from
the commands.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, Protocol, get_args, runtime_checkable
from uuid import UUID

from coordinator_core.engine.detail import FailureDetail
from coordinator_core.engine.instants import Instant
from coordinator_core.engine.state import RunStatusValue, StepRecord, StepRoute
from coordinator_core.errors import CoordinatorError, Diagnostic
from coordinator_core.jsonschema.violations import Violation
from coordinator_core.operations import OperationDescriptor
from coordinator_core.shell.service.changes import RunChanges
from coordinator_core.shell.store.records import HoldState, StepAttempt, StoredRun, WatchedRun

__all__ = [
    "INTERNAL_ERROR",
    "RUN_STATUSES",
    "Action",
    "AdmissionRequest",
    "AfterAnswer",
    "AttemptPage",
    "BlockReason",
    "Caller",
    "Doctor",
    "DoctorState",
    "EffectStatus",
    "EventAdmitted",
    "EventDelivery",
    "HoldState",
    "ReconcileResult",
    "Recovery",
    "RunAdmitted",
    "RunInspection",
    "RunList",
    "RunQuery",
    "RunService",
    "RunStatus",
    "RunStatusValue",
    "ServiceRefusal",
    "StepAttempt",
    "StepRoute",
    "StepStatus",
    "WaitResult",
]

INTERNAL_ERROR: Final = "coordinator.request.internal-error"
"""An unexpected failure inside the service. Not a contract code (06 has no 500); it is kept
out of the catalogue's 06 §3.1 table (the API renders it from fixed texts, the audit journal
records it for any code the catalogue does not hold)."""

JsonValue = object
"""Any JSON value as `json.loads` returns it (dict, list, str, int, float, bool or None)."""

RUN_STATUSES: tuple[RunStatusValue, ...] = get_args(RunStatusValue)
BlockReason = Literal[
    "terminal",
    "not-recoverable",
    "deadline-reached",
    "receipt-expired",
    "binding-changed",
    "snapshot-incompatible",
    "cancelled",
    "payload-erased",
    "evaluation-uncertain",
    "lease-active",
    "no-receipt",
    "not-uncertain",
]
Action = Literal[
    "start",
    "status",
    "inspect",
    "retry-same",
    "cancel",
    "reconcile",
    "doctor",
    "restore-hold",
    "release-restore-hold",
    "release-admission-hold",
    "retain",
]


AfterAnswer = Callable[[Callable[[], None]], None]
"""Takes an action for the caller to run once its answer is sent (`RunService.admit`)."""


# ---------------------------------------------------------------------------------------------
# The caller


_MAPPING_FAILURES: Final = frozenset({"mapping-invalid", "choice-invalid", "outcome-invalid"})


@dataclass(frozen=True, slots=True)
class Caller:
    """A verified bearer caller and the one policy that applies to it (06 §2).

    Ownership is `(issuer, subject)`; the client id is not part of it. `workflows` and `actions`
    are the policy's lists; `operator` lets the caller see and act on every run of its workflows.
    """

    issuer: str
    subject: str
    client_id: str
    operator: bool
    workflows: frozenset[str]
    actions: frozenset[str]

    def may(self, action: str, workflow: str | None = None) -> bool:
        """The policy allows `action` (on `workflow`, or on some workflow when None)."""
        if action not in self.actions:
            return False
        return workflow is None or workflow in self.workflows


# ---------------------------------------------------------------------------------------------
# Result shapes (06 §11)


@dataclass(frozen=True, slots=True)
class RunStatus:
    """06 §11.1 of one stored run: the run itself (its engine state and admission facts), the
    due instant of its current record when pending, whether some effect is unknown, and the
    finish step's declared output (opened; None while there is none or it was erased)."""

    run: StoredRun
    next_due_at: Instant | None = None
    uncertain: bool = False
    output: JsonValue = None

    @property
    def run_id(self) -> UUID:
        return self.run.run_id

    @property
    def status(self) -> RunStatusValue:
        """The reported status (a non-terminal run under restore review reads `attention`)."""
        return self.run.state.reported_status

    @property
    def fingerprint(self) -> str:
        """What a follower watches, as the waiting read compares it (06 §5.3 `ETag`)."""
        state = self.run.state
        watched = WatchedRun(
            status=self.status,
            current_step=state.current_step,
            cancel_requested=state.cancel_requested,
            uncertain=self.uncertain,
            failure_code=state.failure_code,
        )
        return watched.fingerprint(self.run.run_id)


WaitResult = Literal["waiting", "completed", "timed-out", "cancelled", "failed", "expired"]


@dataclass(frozen=True, slots=True)
class StepStatus:
    """06 §11.3 of one stored step: the engine's record, when its lease expires (leased
    records only) and, for a `wait-for` step, the (waited call, completion name) it awaits."""

    record: StepRecord
    lease_expires_at: Instant | None = None
    awaits: tuple[str, str] | None = None
    attempts: tuple[StepAttempt, ...] = ()
    """The step's latest ended attempts, newest first (at most `ATTEMPTS_PER_STEP`): a call's
    attempts, a wait's observations, a pure step's work."""
    attempt_count: int = 0
    """How many ended attempts the step has in all (`RunService.step_attempts` pages them)."""

    @property
    def next_due_at(self) -> Instant | None:
        return self.record.due_at if self.record.state == "pending" else None

    @property
    def mapping_failure(self) -> FailureDetail | None:
        """Why a mapping stopped this step (04 §4.1): the detailed code and its cause,
        function and position, or a choose's labels; None for any other step."""
        record = self.record
        if record.detail is None or record.failure_code not in _MAPPING_FAILURES:
            return None
        return FailureDetail.parse(record.detail)

    @property
    def wait_result(self) -> WaitResult:
        """A wait's result word: waiting while pending or leased, else how it ended."""
        record = self.record
        if record.state in ("pending", "leased"):
            return "waiting"
        if record.state == "delivered":
            kind = None if record.route is None else record.route.kind
            if kind == "timeout":
                return "timed-out"
            if kind == "cancel":
                return "cancelled"
            return "completed"
        if record.state == "dead-lettered":
            return "timed-out" if record.failure_code == "wait-timed-out" else "failed"
        if record.state in ("cancelled", "expired"):
            return "cancelled" if record.state == "cancelled" else "expired"
        return "failed"


@dataclass(frozen=True, slots=True)
class EffectStatus:
    """06 §11.4 `Effect`."""

    step: str
    operation: str
    state: Literal["accepted", "unknown", "refused", "not-sent"]
    settled_by: Literal["response", "reconcile", "retry-same"] | None


@dataclass(frozen=True, slots=True)
class Recovery:
    """06 §11.4. `operation` only when the current step is a call and the snapshot restores."""

    retry_allowed: bool
    retry_blocked_by: BlockReason | None
    reconcile_allowed: bool
    reconcile_blocked_by: BlockReason | None
    operation: OperationDescriptor | None = None


@dataclass(frozen=True, slots=True)
class RunInspection:
    """06 §11.2: steps ordered by `entered_at`, then step id; effects in order of first attempt."""

    run: RunStatus
    steps: Sequence[StepStatus]
    effects: Sequence[EffectStatus]
    recovery: Recovery

    @property
    def operator_action(self) -> tuple[str, Instant, str | None] | None:
        """The last operator command that changed the run: (action, instant, the keyed
        reference of its reason — the `reasonRef` of its journal entry), or None."""
        stored = self.run.run
        if stored.operator_action is None or stored.operator_action_at is None:
            return None
        return stored.operator_action, stored.operator_action_at, stored.operator_reason_ref


@dataclass(frozen=True, slots=True)
class AttemptPage:
    """One page of a step's ended attempts, newest first, and the cursor of the next page."""

    attempts: Sequence[StepAttempt]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class ReconcileResult:
    result: Literal["settled", "unresolved", "receipt-expired", "unavailable"]
    inspection: RunInspection


@dataclass(frozen=True, slots=True)
class RunQuery:
    """`GET /v1/runs` (06 §5.2), with the query parameters already validated."""

    limit: int = 20
    cursor: str | None = None
    status: RunStatusValue | None = None
    workflow: str | None = None


@dataclass(frozen=True, slots=True)
class RunList:
    runs: Sequence[RunStatus]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    """`POST /v1/runs` after API checks 1–7 of 06 §5.1: the caller may start `workflow`, the
    service is not recovery-only, `workflow` is the active workflow id, `idempotency_key` is
    well formed and `input` is within the JSON value bounds."""

    caller: Caller
    workflow: str
    revision: str
    input: JsonValue
    idempotency_key: str


@dataclass(frozen=True, slots=True)
class RunAdmitted:
    """`created` is True for a new run (201), False for an idempotent replay (200)."""

    run: RunStatus
    created: bool


@dataclass(frozen=True, slots=True)
class EventDelivery:
    """`POST /v1/events/{workflow}/{trigger}` after API checks 1–7 of 06 §8: the signature,
    source, delivery time and event type are verified and `body` is strict bounded JSON."""

    workflow: str
    trigger: str
    source_name: str
    event_id: str
    body: JsonValue


@dataclass(frozen=True, slots=True)
class EventAdmitted:
    run_id: UUID
    created: bool


@dataclass(frozen=True, slots=True)
class DoctorState:
    database_id: str
    store: Literal["postgresql", "sqlite"]
    schema_version: int
    active_package_digest: str
    active_revision: str
    restore_hold: bool
    admissions_hold: bool
    audit_ready: bool
    restore_review: int
    statuses: Mapping[RunStatusValue, int]
    unknown_effects: int
    waits: int
    oldest_due_at: Instant | None
    terminal_payloads: int
    oldest_terminal_payload_at: Instant | None
    audit_head: str


@dataclass(frozen=True, slots=True)
class Doctor:
    activation_ready: bool
    state: DoctorState


class ServiceRefusal(CoordinatorError):
    """A domain refusal with a code of 06 §3.1 (`reason` only for retry/reconcile refusals): the
    one error type, its diagnostic the bare code (no position: a request has no file)."""

    def __init__(
        self,
        code: str,
        reason: BlockReason | None = None,
        *,
        violations: tuple[Violation, ...] = (),
    ) -> None:
        super().__init__(Diagnostic(code))
        self.reason = reason
        # `coordinator.definition.input`: where the input fails its schema, never a value.
        self.violations = violations


# ---------------------------------------------------------------------------------------------
# The run service


@runtime_checkable
class RunService(Protocol):
    """Store and engine operations behind the HTTP API; one method per action of 06 §4. The
    methods are synchronous (store transactions and product calls): the HTTP edge runs them
    in a thread.

    Every method may raise `ServiceRefusal`. Codes by method (besides
    `coordinator.command.store-unavailable`, which any method may raise):

    * `admit`: `idempotency.key-reused`, `admission.revision-mismatch`,
      `coordinator.command.activation-changed`, `coordinator.command.restore-hold`,
      `coordinator.command.restore-admissions-held`, `coordinator.definition.input`,
      `coordinator.command.live-binding-conflict`.
    * `list_runs`: `coordinator.request.cursor-invalid` (a cursor that does not verify, or whose
      filters differ from `query`).
    * `cancel`, `retry_same`, `reconcile`: `coordinator.command.run-absent`;
      `retry_same`: `coordinator.command.retry-refused` + reason; `reconcile`:
      `coordinator.command.reconciliation-unavailable`, `coordinator.command.reconcile-refused`
      + reason, `coordinator.command.reconcile-raced`.
    * `release_admission_hold`: `coordinator.command.restore-hold` (the API has already checked
      both attestations).
    * `admit_event`: `coordinator.event.admissions-held` (holds), `idempotency.key-reused`,
      `coordinator.event.mapping-invalid`, `coordinator.event.input-invalid`,
      `coordinator.command.activation-changed`, `coordinator.command.live-binding-conflict`.
    """

    def ready(self) -> str | None:
        """06 §10 readiness, except recovery-only mode (which the API knows): None when ready,
        else the code of what is not (`coordinator.command.store-unavailable` while the store
        is away, 09 §5 step 7)."""
        ...

    def admit(
        self, admission: AdmissionRequest, *, after_answer: AfterAnswer | None = None
    ) -> RunAdmitted:
        """06 §5.1 steps 8–10: identity, one admission transaction, the new or replayed run.

        The admission wakes this process's worker loops (07 §7.7 item 4): at once, or, with
        `after_answer`, by the wake-up it hands to `after_answer` for the caller to call once
        its answer is sent, so that the loop starting the run's first call does not compete
        with the answer for the interpreter. The caller must call it whatever happens."""
        ...

    def get_run(self, caller: Caller, run_id: UUID) -> RunStatus | None:
        """06 §5.3; None when absent or not visible to `caller`."""
        ...

    @property
    def changes(self) -> RunChanges:
        """Who waits for a run's change in this process (the waiting read of 06 §5.3)."""
        ...

    def fingerprints(self, run_ids: Collection[UUID]) -> Mapping[UUID, str]:
        """The `RunStatus.fingerprint` of each of `run_ids` in one cheap read, no visibility
        check (the waiting read compares them only with what the caller already saw); a run
        absent from the answer is absent from the store."""
        ...

    def list_runs(self, caller: Caller, query: RunQuery) -> RunList:
        """06 §5.2: runs visible to `caller`, newest first, keyset-paginated."""
        ...

    def inspect_run(self, caller: Caller, run_id: UUID) -> RunInspection | None:
        """06 §5.4, in one consistent store snapshot; None when absent or not visible."""
        ...

    def step_attempts(
        self, caller: Caller, run_id: UUID, step: str, cursor: str | None, limit: int
    ) -> AttemptPage | None:
        """A step's ended attempts, newest first, a page at a time; None when the run is
        absent or not visible. `coordinator.command.step-absent` for a step the run's definition
        does not have; `coordinator.request.cursor-invalid` for a cursor that does not verify for
        this caller, run and step."""
        ...

    def cancel(self, caller: Caller, run_id: UUID, reason: str) -> RunStatus:
        """06 §5.5 / 07 §8; idempotent on runs already settled or with `cancelRequested`."""
        ...

    def retry_same(self, caller: Caller, run_id: UUID, reason: str) -> RunStatus:
        """06 §5.6 / 07 §9.1."""
        ...

    def reconcile(self, caller: Caller, run_id: UUID, reason: str) -> ReconcileResult:
        """06 §5.7 / 07 §9.2."""
        ...

    def doctor(self) -> Doctor:
        """06 §7.1."""
        ...

    def restore_hold(self, reason: str) -> HoldState:
        """06 §7.2 / 07 §12 step 3; idempotent."""
        ...

    def release_restore_hold(self, reason: str) -> HoldState:
        """06 §7.3; idempotent."""
        ...

    def release_admission_hold(self, reason: str) -> HoldState:
        """06 §7.4, after the API checked both attestations."""
        ...

    def retain(self, before: Instant, limit: int) -> int:
        """06 §7.5 / 07 §13: erase up to `limit` eligible payloads; the number erased."""
        ...

    def admit_event(
        self, delivery: EventDelivery, *, after_answer: AfterAnswer | None = None
    ) -> EventAdmitted:
        """06 §8 steps 8–11 (holds, identity, mapping, admission transaction). The worker
        loops are woken as by `admit`, `after_answer` included."""
        ...

    def complete_review(self, connection: str, request_id: UUID) -> None:
        """06 §9: move the next observation of matching waits forward; idempotent."""
        ...
