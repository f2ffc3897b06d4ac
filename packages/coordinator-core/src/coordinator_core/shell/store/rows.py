"""Immutable values the store hands out and accepts: rows, snapshots, writes, claims.

A row mirrors its table column for column (same names as `tables.py`). Rows are read inside a
store transaction and stay valid after it; a caller changes a row with `dataclasses.replace`
and hands it back in a `RunWrite`. Sealed columns are opaque `bytes` (sealing is the shell's
sealer, not the store). Instants are timezone-aware UTC datetimes truncated to milliseconds;
`to_epoch_ms`/`from_epoch_ms` convert to and from the engine's `Instant`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from coordinator_core.engine.state import (
    TERMINAL_STATUSES,
    CancelMode,
    EffectState,
    RouteKind,
    RunStatus,
    SettledBy,
    StepState,
    StepType,
)

__all__ = [
    "ActivationRequest",
    "ActivationRow",
    "AdmissionResult",
    "Claim",
    "ControlRow",
    "Decide",
    "DecideEach",
    "DeploymentIdentity",
    "HoldState",
    "NewRun",
    "NextInstants",
    "Recover",
    "Recovery",
    "RunPage",
    "RunPosition",
    "RunRow",
    "RunSnapshot",
    "RunWrite",
    "StatusChange",
    "StepOutcome",
    "StepRow",
    "StoreSummary",
    "Written",
]

Origin = Literal["api", "event"]
EffectKind = Literal["read", "mutation", "evaluation"]
_TERMINAL: frozenset[str] = frozenset(
    {"finished", "cancelled", "cancelled-after-effect", "expired"}
)


@dataclass(frozen=True, slots=True)
class DeploymentIdentity:
    """What this process expects of the store (07 §6.1 step 1, §15); checked in every
    verifying transaction.

    `state_key_commitments` holds the custody marker of every *configured* state-key version
    (07 §10); `package_digest` is the package this process serves (None: not checked, e.g.
    `migrate`); `runtime_role` is `deployment.runtimeRole` (PostgreSQL: `current_user` and the
    role split are checked when set).
    """

    database_id: str
    admission_key_commitment: str
    state_key_commitments: Mapping[int, str]
    active_state_key: int
    package_digest: str | None = None
    runtime_role: str | None = None


@dataclass(frozen=True, slots=True)
class ControlRow:
    """The control row (07 §14.1)."""

    database_id: str
    schema_version: int
    restore_hold: bool
    admissions_hold: bool
    restore_evidence_ref: str | None
    admission_recovery_ref: str | None
    active_package_digest: str | None
    active_revision: str | None
    admission_key_commitment: str
    state_key_commitments: Mapping[int, str]
    created_at: datetime


@dataclass(frozen=True, slots=True)
class ActivationRow:
    """One entry of the activation ledger."""

    activation_id: uuid.UUID
    apply_order: int
    package_digest: str
    workflow_id: str
    revision: str
    definition_digest: str
    predecessor_package_digest: str | None
    database_id: str
    applied_at: datetime
    runtime_role: str | None
    role_mode: str


@dataclass(frozen=True, slots=True)
class ActivationRequest:
    """The package `apply` activates (09 §3)."""

    package_digest: str
    workflow_id: str
    revision: str
    definition_digest: str


@dataclass(frozen=True, slots=True)
class RunRow:
    """A run (07 §2, §14.1). `status` is what the transitions wrote; see `reported_status`."""

    run_id: uuid.UUID
    start_identity: str
    input_digest: str
    owner: str
    origin: Origin
    trigger: str | None
    workflow_id: str
    workflow_version: str
    revision: str
    definition_digest: str
    binding_digest: str
    snapshot: bytes | None
    input: bytes | None
    policy: dict[str, Any]
    current_step: str
    status: RunStatus
    cancel_mode: CancelMode
    cancel_requested: bool
    restore_review: bool
    outcome: str | None
    terminal_output: bytes | None
    failure_code: str | None
    admitted_at: datetime
    deadline_at: datetime
    completed_at: datetime | None
    payload_erased_at: datetime | None
    updated_at: datetime

    @property
    def reported_status(self) -> RunStatus:
        """07 §5 overriding rule: a non-terminal run under restore review reports `attention`."""
        if self.restore_review and self.status not in TERMINAL_STATUSES:
            return "attention"
        return self.status

    @property
    def payload_erased(self) -> bool:
        return self.payload_erased_at is not None


@dataclass(frozen=True, slots=True)
class StepRow:
    """A step record (07 §2.1, §14.1). Lease columns belong to the store: a write never sets
    them (the store keeps the lease of a record that stays `leased` and clears it otherwise).

    `command` is the sealed `{"request", "preparation"}` value of 07 §10; it is stored once and
    replaced at most once more, when the preparation is frozen next to the request
    (`preparation_frozen` false → true). `claims` and `awaiting` carry the engine's fields of
    the same names.
    """

    run_id: uuid.UUID
    step: str
    type: StepType
    pure: bool
    generation: int
    state: StepState
    attempt: int
    claims: int
    awaiting: str | None
    due_at: datetime | None
    attempt_started_at: datetime | None
    lease_owner: str | None
    lease_token: str | None
    lease_expires_at: datetime | None
    entered_at: datetime
    finished_at: datetime | None
    operation: str | None
    effect_kind: EffectKind | None
    command: bytes | None
    command_prepared: bool
    preparation_frozen: bool
    dispatched: bool
    sent: bool
    uncertain: bool
    receipt_expired: bool
    settled_by: SettledBy | None
    output: bytes | None
    route_kind: RouteKind | None
    route_label: str | None
    failure_code: str | None
    detail: str | None
    wait_until: datetime | None
    wait_started_at: datetime | None
    timeout_at: datetime | None
    interval_seconds: int | None
    observations: int
    last_observed_at: datetime | None
    completion_ref: str | None
    updated_at: datetime

    @classmethod
    def new(
        cls,
        run_id: uuid.UUID,
        step: str,
        type: StepType,
        *,
        entered_at: datetime,
        due_at: datetime,
        pure: bool = False,
        operation: str | None = None,
        effect_kind: EffectKind | None = None,
        wait_started_at: datetime | None = None,
        timeout_at: datetime | None = None,
        interval_seconds: int | None = None,
        completion_ref: str | None = None,
    ) -> StepRow:
        """A fresh `pending` record (07 §5.1): generation 1, attempt 0, nothing recorded."""
        return cls(
            run_id=run_id,
            step=step,
            type=type,
            pure=pure,
            generation=1,
            state="pending",
            attempt=0,
            claims=0,
            awaiting=None,
            due_at=due_at,
            attempt_started_at=None,
            lease_owner=None,
            lease_token=None,
            lease_expires_at=None,
            entered_at=entered_at,
            finished_at=None,
            operation=operation,
            effect_kind=effect_kind,
            command=None,
            command_prepared=False,
            preparation_frozen=False,
            dispatched=False,
            sent=False,
            uncertain=False,
            receipt_expired=False,
            settled_by=None,
            output=None,
            route_kind=None,
            route_label=None,
            failure_code=None,
            detail=None,
            wait_until=None,
            wait_started_at=wait_started_at,
            timeout_at=timeout_at,
            interval_seconds=interval_seconds,
            observations=0,
            last_observed_at=None,
            completion_ref=completion_ref,
            updated_at=entered_at,
        )

    @property
    def effect_state(self) -> EffectState | None:
        """The effect of a prepared mutation or evaluation (06 §11.4), as the engine defines it."""
        if self.effect_kind not in ("mutation", "evaluation") or not self.command_prepared:
            return None
        if self.settled_by is not None:
            return "accepted"
        if self.uncertain or self.dispatched:
            return "unknown"
        return "refused" if self.sent else "not-sent"


@dataclass(frozen=True, slots=True)
class RunSnapshot:
    """A run with every step record it entered (ordered by `entered_at`, then step id) and the
    control row, all read in one transaction."""

    control: ControlRow
    run: RunRow
    steps: tuple[StepRow, ...]

    def step(self, step: str) -> StepRow | None:
        for record in self.steps:
            if record.step == step:
                return record
        return None

    @property
    def current(self) -> StepRow:
        record = self.step(self.run.current_step)
        if record is None:  # pragma: no cover - admission inserts the start record
            raise LookupError("The run has no record of its current step.")
        return record


@dataclass(frozen=True, slots=True)
class RunWrite:
    """The result of a transition: the run's new row and every step record it changed or
    created (a record whose (run, step) is not stored yet is inserted, 07 §5.1)."""

    run: RunRow
    steps: tuple[StepRow, ...] = ()


Decide = Callable[[RunSnapshot], RunWrite | None]
"""Computes a transition from the locked snapshot, inside the store transaction.

It must be pure computation plus, where the contract asks for it, the audit append (07 §11:
worker entries are appended inside the transaction before it commits). Returning None changes
nothing; raising rolls the whole transaction back and the exception propagates. After a
transient database error the store retries the whole transaction, so `decide` may run more
than once for one call (an audit intent without a commit is allowed, 07 §11).
"""

DecideEach = Callable[[Sequence[RunSnapshot]], Sequence[RunWrite | None]]
"""A batch's decision (`Store.fire_due_waits`): given the locked snapshots, one write (or None)
per snapshot, in order, computed at once so that their audit entries share one append. The
rules of `Decide` apply."""

Recovery = Literal["lease-lapsed", "deadline-passed"]
Recover = Callable[[RunSnapshot, Recovery], RunWrite | None]
"""The claim transaction's recovery (07 §7.2 steps 2–3): given the locked snapshot whose current
record lapsed (`lease-lapsed`: T28/T29) or is overdue (`deadline-passed`: T26/T27), the write
the engine computes for `LeaseLapsed` / `DeadlinePassed`."""


@dataclass(frozen=True, slots=True)
class NextInstants:
    """What an idle worker may sleep until (07 §7.7 item 4), as the store stands: the earliest
    `dueAt` of a pending record a claim could take then, the earliest lease that lapses and the
    earliest deadline of a live run whose current record is pending and not pure (what the
    sweeps handle); None where there is none (all None while claims are held)."""

    due_at: datetime | None = None
    lapses_at: datetime | None = None
    overdue_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Claim:
    """A fenced lease on one step record (07 §7.2). Every later write for this attempt names
    the claim and commits only while (run, step, generation, attempt, lease token) still match
    a `leased` record."""

    run_id: uuid.UUID
    step: str
    generation: int
    attempt: int
    lease_token: str
    lease_owner: str
    attempt_started_at: datetime
    lease_expires_at: datetime
    snapshot: RunSnapshot
    """The run as leased, read under the claim's locks (the worker's input for `Work`)."""


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """A step record's outcome (07 §11 worker outcome) noted by the worker inside a transaction
    (`Store.note`); `Store.observe`'s observer is told it once the transaction commits."""

    run_id: uuid.UUID
    step: str
    step_type: str
    outcome: str


@dataclass(frozen=True, slots=True)
class StatusChange:
    """A committed change of a run's written status (what `Store.observe` is told after the
    commit): the run, its workflow, the status before and after, when it was admitted and the
    instant of the transaction."""

    run_id: uuid.UUID
    workflow_id: str
    before: str
    after: str
    admitted_at: datetime
    at: datetime


@dataclass(frozen=True, slots=True)
class Written:
    """What a worker transaction wrote: the run as it now stands (computed from what was
    written, not read back) and the claim on the record the write leaves leased for the
    caller (the same fence after a mid-attempt fence, a new one after a claim or a
    continuation), or None when the attempt ended and the run was not carried on."""

    snapshot: RunSnapshot
    claim: Claim | None


@dataclass(frozen=True, slots=True)
class NewRun:
    """One admission (07 §6.1) prepared by the caller outside the transaction.

    `snapshot` and `input` are sealed for `run_id`; `snapshot` is stored once per definition
    digest (the first admission that carries it; None when the caller knows it is stored);
    `first_step` is the start record of 07 §5.1 (built for `run_id` with `entered_at = now`).
    `expected_revision` is the API caller's revision (None for an event admission, which uses the
    active revision). `input_problem` is the input-schema refusal found before the transaction,
    raised at its place in the order of 06 §5.1 step 10. `bindings_ok` is the live-binding check
    (05 §10): it receives every distinct (definition digest, binding digest) of the unsettled
    runs and answers whether they all still match.
    """

    run_id: uuid.UUID
    start_identity: str
    input_digest: str
    owner: str
    origin: Origin
    trigger: str | None
    workflow_id: str
    workflow_version: str
    revision: str
    definition_digest: str
    binding_digest: str
    snapshot: bytes | None
    input: bytes
    policy: dict[str, Any]
    deadline_seconds: int
    first_step: StepRow
    bindings_ok: Callable[[frozenset[tuple[str, str]]], bool]
    expected_revision: str | None = None
    input_problem: Exception | None = None


@dataclass(frozen=True, slots=True)
class AdmissionResult:
    """The admitted run; `created` is False for a replay (same start identity and input).
    `steps` are the records the admission inserted (its start record; none for a replay) and
    `control` the control row it read, so a new run's status needs no read back."""

    run: RunRow
    created: bool
    steps: tuple[StepRow, ...] = ()
    control: ControlRow | None = None


@dataclass(frozen=True, slots=True)
class RunPosition:
    """A keyset position in the run list, ordered by (admittedAt DESC, runId DESC)."""

    admitted_at: datetime
    run_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class RunPage:
    """One page of runs and the position after its last run (None on the last page)."""

    runs: tuple[RunRow, ...]
    next: RunPosition | None


@dataclass(frozen=True, slots=True)
class HoldState:
    """06 §11.8."""

    restore_hold: bool
    admissions_hold: bool
    restore_review: int


@dataclass(frozen=True, slots=True)
class StoreSummary:
    """The store members of `GET /v1/doctor` (06 §7.1)."""

    store: str
    database_id: str
    schema_version: int
    active_package_digest: str | None
    active_revision: str | None
    restore_hold: bool
    admissions_hold: bool
    restore_review: int
    statuses: Mapping[str, int]
    unknown_effects: int
    waits: int
    oldest_due_at: datetime | None
    terminal_payloads: int
    oldest_terminal_payload_at: datetime | None
