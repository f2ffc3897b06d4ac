"""The values the store hands out and accepts: a stored run and its stored step records, each
composing the engine's own value, plus the snapshots, writes, claims and summaries around them.

One record shape per concept: a stored step *is* the engine's `StepRecord` plus what only the
store keeps next to it (the sealed payload and the lease); a stored run is the engine's
`RunState` (without its records) plus the admission facts and the sealed payload. Instants are
the engine's, integer milliseconds since the epoch, in rows as everywhere else. The records a
store hands out carry no plaintext: the payload fields of the engine's values (`input`,
`output`, `command`, `preparation`) are None there, and the sealed bytes sit beside them (the
shell's codec opens them, `shell.execution.codec`). Callers change a value with
`dataclasses.replace` and hand it back in a `RunWrite`.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from coordinator_core.engine.instants import Instant
from coordinator_core.engine.state import AttemptEnding, RunState, StepRecord

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
    "Lease",
    "NewRun",
    "NextInstants",
    "OperatorAction",
    "Origin",
    "Recover",
    "RunPage",
    "RunPosition",
    "RunSnapshot",
    "RunWrite",
    "StatusChange",
    "StepAttempt",
    "StepOutcome",
    "StoreSummary",
    "StoredRun",
    "StoredStep",
    "SweepKind",
    "WatchedRun",
    "Written",
]

Origin = Literal["api", "event"]
OperatorAction = Literal["cancel", "retry-same", "reconcile"]


# -- the deployment -------------------------------------------------------------------------------


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
    created_at: Instant
    restore_hold_reason_ref: str | None = None


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
    applied_at: Instant
    runtime_role: str | None
    role_mode: str


@dataclass(frozen=True, slots=True)
class ActivationRequest:
    """The package `apply` activates (09 §3)."""

    package_digest: str
    workflow_id: str
    revision: str
    definition_digest: str


# -- runs and their records ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoredRun:
    """A run as the store keeps it (07 §2, §14.1): what admission fixed for good, the engine's
    `RunState` as the transitions wrote it (its `records` empty, its `input` and `output` None:
    they are `input` and `terminal_output` here, sealed), the sealed snapshot, and the store's
    own instants."""

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
    state: RunState
    snapshot: bytes | None = None
    input: bytes | None = None
    terminal_output: bytes | None = None
    payload_erased_at: Instant | None = None
    updated_at: Instant = 0
    operator_action: OperatorAction | None = None
    """The last operator command that changed the run, when (`operator_action_at`), and the
    keyed reference of its reason (07 §11 `reasonRef`, never the reason itself)."""
    operator_action_at: Instant | None = None
    operator_reason_ref: str | None = None

    @property
    def payload_erased(self) -> bool:
        return self.payload_erased_at is not None


@dataclass(frozen=True, slots=True)
class Lease:
    """The fence of a leased record (07 §7.2): a write for its attempt commits only while the
    record still carries this token. The store alone sets it."""

    owner: str
    token: str
    expires_at: Instant


@dataclass(frozen=True, slots=True)
class StoredStep:
    """A step record as the store keeps it (07 §2.1, §14.1): the engine's `StepRecord` (its
    `command`, `preparation` and `output` None), the sealed `{"request", "preparation"}` of 07
    §10 (`command`: stored once, replaced at most once more, when the preparation is frozen
    next to the request — `preparation_frozen` false → true), the sealed output, and the lease,
    which a write never sets (the store keeps the lease of a record that stays `leased` and
    clears it otherwise)."""

    run_id: uuid.UUID
    record: StepRecord
    command: bytes | None = None
    preparation_frozen: bool = False
    output: bytes | None = None
    lease: Lease | None = None
    updated_at: Instant = 0

    @property
    def step(self) -> str:
        return self.record.step


@dataclass(frozen=True, slots=True)
class RunSnapshot:
    """A run with every step record it entered (ordered by `entered_at`, then step id) and the
    control row, all read in one transaction."""

    control: ControlRow
    run: StoredRun
    steps: tuple[StoredStep, ...]

    def step(self, step: str) -> StoredStep | None:
        for stored in self.steps:
            if stored.record.step == step:
                return stored
        return None

    @property
    def current(self) -> StoredStep:
        stored = self.step(self.run.state.current_step)
        if stored is None:  # pragma: no cover - admission inserts the start record
            raise LookupError("The run has no record of its current step.")
        return stored

    @property
    def records(self) -> tuple[StepRecord, ...]:
        return tuple(stored.record for stored in self.steps)


@dataclass(frozen=True, slots=True)
class RunWrite:
    """The result of a transition: the run's new value and every step record it changed or
    created (a record whose (run, step) is not stored yet is inserted, 07 §5.1)."""

    run: StoredRun
    steps: tuple[StoredStep, ...] = ()


Decide = Callable[[RunSnapshot], RunWrite | None]
"""Computes a transition from the locked snapshot, inside the store transaction.

It must be pure computation plus, where the contract asks for it, the audit append (07 §11:
worker entries are appended inside the transaction before it commits). Returning None changes
nothing; raising rolls the whole transaction back and the exception propagates. After a
transient database error the store retries the whole transaction, so `decide` may run more
than once for one call (an audit intent without a commit is allowed, 07 §11).
"""

DecideEach = Callable[[Sequence[RunSnapshot]], Sequence[RunWrite | None]]
"""A batch's decision (`fire_due_waits`): given the locked snapshots, one write (or None) per
snapshot, in order, computed at once so that their audit entries share one append. The rules
of `Decide` apply."""

SweepKind = Literal["lease-lapsed", "deadline-passed"]
Recover = Callable[[RunSnapshot, SweepKind], RunWrite | None]
"""A sweep's recovery (07 §7.2 steps 2–3): given the locked snapshot whose current record lapsed
(`lease-lapsed`: T28/T29) or is overdue (`deadline-passed`: T26/T27), the write the engine
computes for `LeaseLapsed` / `DeadlinePassed`."""


@dataclass(frozen=True, slots=True)
class Claim:
    """A fenced lease on one step record (07 §7.2): `held` as the store leased it (its lease set)
    and the run as leased, read under the claim's locks. Every later write for this attempt
    names the claim and commits only while (run, step, generation, attempt, lease token) still
    match a `leased` record."""

    held: StoredStep
    snapshot: RunSnapshot

    def __post_init__(self) -> None:
        if self.held.lease is None:
            raise ValueError("A claim holds a leased record.")

    @property
    def run_id(self) -> uuid.UUID:
        return self.held.run_id

    @property
    def step(self) -> str:
        return self.held.record.step

    @property
    def lease(self) -> Lease:
        assert self.held.lease is not None
        return self.held.lease


@dataclass(frozen=True, slots=True)
class Written:
    """What a worker transaction wrote: the run as it now stands (computed from what was
    written, not read back) and the claim on the record the write leaves leased for the
    caller (the same fence after a mid-attempt fence, a new one after a claim or a
    continuation), or None when the attempt ended and the run was not carried on. `then` is
    what a finish transaction that carried nothing on also claimed of another run for the
    same loop (`RunWrites.complete_step`, 07 §7.7 item 8), as a claim transaction answers it."""

    snapshot: RunSnapshot
    claim: Claim | None
    then: Written | None = None


@dataclass(frozen=True, slots=True)
class NewRun:
    """One admission (07 §6.1) prepared by the caller outside the transaction.

    `run` is the run to insert (its state as the engine admitted it at the transaction's
    instant, its sealed input and — once per definition digest, else None — its sealed
    snapshot); `steps` its records: the start record of 07 §5.1, pending — or, when an idle
    loop of the admitting process takes the run at once (07 §7.7 item 6), the records the
    engine's claim at admission went through, one of them leased, which the store then leases
    to `lease_owner` for `lease_seconds`. `journal` appends the worker entries of that claim
    inside the transaction (07 §11). `expected_revision` is the API caller's revision (None
    for an event admission, which uses the active revision). `input_problem` is the
    input-schema refusal found before the transaction, raised at its place in the order of
    06 §5.1 step 10. `bindings_ok` is the live-binding check (05 §10): it receives every
    distinct (definition digest, binding digest) of the unsettled runs and answers whether
    they all still match.
    """

    run: StoredRun
    steps: tuple[StoredStep, ...]
    bindings_ok: Callable[[frozenset[tuple[str, str]]], bool]
    expected_revision: str | None = None
    input_problem: Exception | None = None
    lease_owner: str | None = None
    lease_seconds: int = 15
    journal: Callable[[], None] | None = None


@dataclass(frozen=True, slots=True)
class AdmissionResult:
    """The admitted run; `created` is False for a replay (same start identity and input).
    `steps` are the records the admission inserted (none for a replay) and `control` the
    control row it read, so a new run's status needs no read back; `claim` the lease the
    admission took on the record it leased (07 §7.7 item 6), if any."""

    run: StoredRun
    created: bool
    steps: tuple[StoredStep, ...] = ()
    control: ControlRow | None = None
    claim: Claim | None = None


# -- what the worker notes, and what it is told ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class NextInstants:
    """What an idle worker may sleep until (07 §7.7 item 4), as the store stands: the earliest
    `dueAt` of a pending record a claim could take then, the earliest lease that lapses and the
    earliest deadline of a live run whose current record is pending and not pure (what the
    sweeps handle); None where there is none (all None while claims are held)."""

    due_at: Instant | None = None
    lapses_at: Instant | None = None
    overdue_at: Instant | None = None


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """A step record's outcome (07 §11 worker outcome) noted by the worker inside a transaction
    (`Store.note`); the store's observer is told it once the transaction commits."""

    run_id: uuid.UUID
    step: str
    step_type: str
    outcome: str


@dataclass(frozen=True, slots=True)
class StatusChange:
    """A committed change of a run's written status (what the store's observer is told after
    the commit): the run, its workflow, the status before and after, when it was admitted and
    the instant of the transaction."""

    run_id: uuid.UUID
    workflow_id: str
    before: str
    after: str
    admitted_at: Instant
    at: Instant


@dataclass(frozen=True, slots=True)
class WatchedRun:
    """What a follower of a run watches (06 §5.3, the waiting read and its `ETag`): the
    reported status, the current step, whether a cancel was requested or an effect is
    unknown, and the failure code. Read cheaply for many runs at once
    (`RunReads.watched_runs`) and computed from a full status alike, so both give one
    fingerprint."""

    status: str
    current_step: str
    cancel_requested: bool
    uncertain: bool
    failure_code: str | None

    def fingerprint(self, run_id: uuid.UUID) -> str:
        """16 lowercase hex digits, the same for the same run and members (never secret: every
        member is in the run's status body)."""
        text = "\x1f".join(
            (
                str(run_id),
                self.status,
                self.current_step,
                "c" if self.cancel_requested else "-",
                "u" if self.uncertain else "-",
                self.failure_code or "",
            )
        )
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


# -- reads ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunPosition:
    """A keyset position in the run list, ordered by (admittedAt DESC, runId DESC)."""

    admitted_at: Instant
    run_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class ListedRun:
    """A run of a list page with what its status needs of its records (06 §11.1), read with
    the run row: the due instant of its current record while that is pending, and whether
    some record's effect is unknown. Its run's sealed `snapshot` and `input` are not read: both
    are None, whatever the store keeps."""

    run: StoredRun
    next_due_at: Instant | None
    uncertain: bool


@dataclass(frozen=True, slots=True)
class RunPage:
    """One page of runs and the position after its last run (None on the last page), each
    run with what its status needs of its records, from the same statement."""

    listed: tuple[ListedRun, ...]
    next: RunPosition | None

    @property
    def runs(self) -> tuple[StoredRun, ...]:
        return tuple(listed.run for listed in self.listed)


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
    oldest_due_at: Instant | None
    terminal_payloads: int
    oldest_terminal_payload_at: Instant | None


@dataclass(frozen=True, slots=True)
class StepAttempt:
    """One ended attempt of a step record (`step_attempts`): a call's attempt, a wait's
    observation or a pure step's work — when it started and ended, how it ended (the journal's
    outcome word, the engine's `StepRecord.ending`) and the failure code it left."""

    run_id: uuid.UUID
    step: str
    generation: int
    attempt: int
    started_at: Instant | None
    ended_at: Instant
    outcome: AttemptEnding
    failure_code: str | None = None
