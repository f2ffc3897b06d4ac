"""`RunWrites`: every transaction that changes a run — admission, the worker's claim, due waits,
sweeps, fences and finish, and the API's cancel, retry-same, reconcile and review completions.

Transitions are never computed here: the engine computes them, inside the transaction, through
a `Decide` callback that receives the locked `RunSnapshot` and returns a `RunWrite`. The store
adds what only the store can do: verifying the deployment, taking locks in the contract's order
(admission lock → control → step record → run, 07 §6.1), fencing leases, checking the write's
invariants (`invariants.check_write`) and writing it (`apply_txn`).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import (
    Integer,
    Table,
    and_,
    bindparam,
    cast,
    exists,
    insert,
    not_,
    select,
    true,
    tuple_,
    union_all,
    update,
)
from sqlalchemy.engine import Connection

from coordinator_core.engine.instants import Instant
from coordinator_core.engine.state import TERMINAL_STATUSES, StepRecord
from coordinator_core.evolve import evolve
from coordinator_core.shell.store.dialect import (
    Prepared,
    PreparedShapes,
    StoreKind,
    UTCDateTime,
    insert_ignoring,
    lock_one,
    lock_rows,
    pipelined,
    read_together,
    store_unavailable,
)
from coordinator_core.shell.store.guards import refuse
from coordinator_core.shell.store.invariants import (
    StaleLease,
    StoreInvariantError,
    check_write,
    new_token,
)
from coordinator_core.shell.store.queries import among, claimable, fixed
from coordinator_core.shell.store.reads import STEPS_OF, locked_snapshot_txn, unsettled_txn
from coordinator_core.shell.store.records import (
    AdmissionResult,
    Claim,
    ControlRow,
    Decide,
    DecideEach,
    Lease,
    NewRun,
    OperatorAction,
    Recover,
    RunSnapshot,
    RunWrite,
    StatusChange,
    StoredRun,
    StoredStep,
    SweepKind,
    Written,
)
from coordinator_core.shell.store.schema import (
    CONTROL,
    DEFINITIONS,
    LIVE_BINDINGS,
    RUN_IMMUTABLE,
    RUNS,
    STEP_ATTEMPTS,
    STEPS,
    run_of,
    run_values,
    step_of,
    step_values,
)
from coordinator_core.shell.store.transactor import Transactor

__all__ = [
    "FIRE_BATCH",
    "LEASE_SECONDS",
    "RunWrites",
    "admission_control_txn",
    "apply_txn",
    "decide_txn",
    "hot_statements",
    "lock_run_txn",
]

LEASE_SECONDS: Final = 15
"""07 §16: attempt budget (10 s) + 5 s."""
FIRE_BATCH: Final = 64
"""How many due waits `fire_due_waits` takes in one transaction at most."""
_SWEEPABLE: Final = ("running", "attention", "cancel-requested")
_LOCK_ATTEMPTS: Final = 4


@dataclass(frozen=True, slots=True)
class _Grant:
    """The lease a write may give the record it leases: its owner and expiry."""

    owner: str
    expires_at: Instant


class RunWrites:
    """The store's run transactions (see the module documentation). Every method is one
    transaction, takes the caller's `now` (the store never reads a clock, so the same instants
    reach the engine and the rows) and states the rule it keeps."""

    def __init__(self, transactor: Transactor) -> None:
        self._tx = transactor

    @property
    def kind(self) -> StoreKind:
        return self._tx.location.kind

    def before_commit(self, barrier: Callable[[], None]) -> None:
        """Inside one of these transactions: `barrier` runs after its work, before its commit
        (the journal's durability, `Transactor.before_commit`)."""
        self._tx.before_commit(barrier)

    # -- admission (07 §6.1; 06 §5.1 step 10) ----------------------------------------------------

    def admit(self, admission: NewRun, now: Instant, *, announce: bool = True) -> AdmissionResult:
        """The admission transaction, in this order: admission lock; store identity and
        custody; the active package is the one this process serves
        (`command.activation-changed`); admission hold (`restore-admissions-held`), restore hold
        (`restore-hold`); an existing start identity answers that run when the input digest is
        the same (a replay, tombstones included) and `idempotency.key-reused` otherwise; the
        expected revision is the active one (`admission.revision-mismatch`); the caller's input
        problem; the live-binding check (`command.live-binding-conflict`); then the run's
        records are inserted. The run's own row is inserted with the lock's read (one round
        trip), which is how an existing start identity is found; a check that refuses rolls it
        back. Concurrent admissions of one start identity resolve to one run. Without
        `announce` the other processes are not notified (an idle loop of this one takes the
        run)."""
        run, steps = admission.run, admission.steps
        names = {stored.step for stored in steps}
        leased = [stored for stored in steps if stored.record.state == "leased"]
        if (
            any(stored.run_id != run.run_id for stored in steps)
            or len(names) != len(steps)
            or run.state.current_step not in names
            or len(leased) > 1
            or (leased and admission.lease_owner is None)
        ):
            raise StoreInvariantError(
                "A run is admitted with its own records, its current step's among them, and at"
                " most one leased for the admitting process."
            )
        state = run.state
        if (
            (state.cancel_mode, state.cancel_requested, state.restore_review)
            != ("none", False, False)
            or state.status not in ("running", "finished", "failed")
            or run.payload_erased_at is not None
        ):
            raise StoreInvariantError("A new run is running, with nothing requested of it.")
        tx = self._tx
        stored = evolve(run, snapshot=None, payload_erased_at=None, updated_at=now)

        def work(conn: Connection) -> AdmissionResult:
            expires = now + admission.lease_seconds * 1000
            inserted_steps = tuple(
                evolve(
                    step,
                    lease=(
                        Lease(admission.lease_owner, new_token(), expires)
                        if step.record.state == "leased" and admission.lease_owner is not None
                        else None
                    ),
                    updated_at=now,
                )
                for step in steps
            )

            def records_and_news() -> None:
                _insert_steps_of_new_run(
                    conn, tx.location.kind, [step_values(step) for step in inserted_steps]
                )
                if announce:
                    tx.notify_txn(conn)

            # The admission lock, the live pairs, the run's own row and its records: one round
            # trip on PostgreSQL. The rows are inserted before the checks below have read the
            # lock's row, in the order the statements run (the lock first); a check that
            # refuses rolls them back with the rest of the transaction. An existing start
            # identity inserts nothing (ON CONFLICT DO NOTHING answers no row), and so no
            # record either (they are inserted only into a run's row that has none); the other
            # processes may then be told of a run they find nothing new of.
            control_rows, pair_rows, inserted_rows = read_together(
                conn,
                (_CONTROL_SHARED, {}),
                (_LIVE_PAIRS, {}),
                (_INSERT_RUN[tx.location.kind], run_values(stored)),
                then=records_and_news,
            )
            control = tx.verified(control_rows[0] if control_rows else None)
            if not tx.serves_active_package(control):
                raise refuse("coordinator.command.activation-changed")
            if control.admissions_hold:
                raise refuse("coordinator.command.restore-admissions-held")
            if control.restore_hold:
                raise refuse("coordinator.command.restore-hold")
            # An existing start identity is answered before every check below: the run
            # inserted nothing, and that run is read.
            if not inserted_rows:
                replay = _replay_txn(conn, admission)
                assert replay is not None
                return replay
            refusal: Exception | None = None
            if (
                admission.expected_revision is not None
                and admission.expected_revision != control.active_revision
            ):
                refusal = refuse("admission.revision-mismatch")
            elif run.revision != control.active_revision:
                refusal = refuse("coordinator.command.activation-changed")
            elif admission.input_problem is not None:
                refusal = admission.input_problem
            pairs = frozenset(
                (str(row["definition_digest"]), str(row["binding_digest"])) for row in pair_rows
            )
            if (
                refusal is None
                and not admission.bindings_ok(pairs)
                and not admission.bindings_ok(unsettled_txn(conn, now))
            ):
                refusal = refuse("coordinator.command.live-binding-conflict")
            if refusal is not None:
                raise refusal  # the run's rows go with the rolled-back transaction
            # What the first admissions of a binding or a definition add, and an admission that
            # ends an attempt: on PostgreSQL one more round trip, when any.
            with pipelined(conn):
                pair = (run.definition_digest, run.binding_digest)
                if pair not in pairs:
                    _INSERT_LIVE_PAIR[tx.location.kind].run(
                        conn,
                        {
                            "definition_digest": pair[0],
                            "binding_digest": pair[1],
                            "first_admitted_at": now,
                        },
                    )
                if run.snapshot is not None:
                    _INSERT_DEFINITION[tx.location.kind].run(
                        conn,
                        {
                            "definition_digest": run.definition_digest,
                            "run_id": run.run_id,
                            "snapshot": run.snapshot,
                            "stored_at": now,
                        },
                    )
                ended = [
                    _ended_attempt(run.run_id, step.record, now)
                    for step in inserted_steps
                    if _ends_an_attempt(None, step)
                ]
                if ended:
                    _insert_attempts(conn, tx.location.kind, ended)
            if admission.journal is not None:
                admission.journal()
            ordered = tuple(
                sorted(inserted_steps, key=lambda step: (step.record.entered_at, step.step))
            )
            snapshot = RunSnapshot(control, stored, ordered)
            held = next((step for step in ordered if step.lease is not None), None)
            return AdmissionResult(
                stored,
                created=True,
                steps=ordered,
                control=control,
                claim=None if held is None else Claim(held, snapshot),
            )

        return tx.transact("admit", work, batch=True)

    # -- the worker's claim, due waits and sweeps (07 §7.2) --------------------------------------

    def claim_due_step(
        self,
        worker_id: str,
        now: Instant,
        lease_seconds: int = LEASE_SECONDS,
        *,
        decide: Decide,
    ) -> Written | None:
        """One claim transaction (07 §7.2), answering what it wrote, or None (idle):

        1. select the first claimable record by (dueAt, runId, step) — `pending`, due, run
           `running`/`cancel-requested`, not under restore review, payload not erased, cancel
           mode not `stopping` (except an `uncertain` call re-armed by `retry-same`), not
           overdue unless pure — locking it and its run `FOR UPDATE SKIP LOCKED` (SQLite: the
           writer lock of `BEGIN IMMEDIATE`) and reading the run whole and the control row in
           the same statement; none → idle, and the transaction wrote nothing;
        2. verify the store; claim nothing while the active package is not the one this process
           serves or a restore hold is set; read the run's records;
        3. `decide(snapshot)` is the engine: `StepDue` leases the record (T2) or expires it
           (T26), and may carry on as 07 §7.7 allows (the call's request frozen with the claim,
           pure records applied), journaling inside; None claims nothing;
        4. the store writes what the engine decided and gives the record it leased a new
           random token and `lease_seconds` of lease.
        """
        grant = _Grant(worker_id, now + lease_seconds * 1000)
        return self._tx.transact(
            "claim-due-step",
            lambda conn: self._claim_txn(conn, now, grant, decide),
            batch=True,
        )

    def _claim_txn(
        self, conn: Connection, now: Instant, grant: _Grant, decide: Decide
    ) -> Written | None:
        """Steps 1–4 of `claim_due_step` inside the calling transaction."""
        tx = self._tx
        due = _DUE.first(conn, {"now": now})
        if due is None:
            return None  # nothing claimed, so no gate applies (an idle poll is one query)
        control = tx.verified(due, prefix="c_")
        if not tx.may_claim(control):
            return None
        run = run_of(due)
        steps = STEPS_OF.rows(conn, {"run_id": run.run_id})
        snapshot = RunSnapshot(control, run, tuple(step_of(step) for step in steps))
        write = decide(snapshot)
        if write is None:
            return None
        return apply_txn(tx, conn, snapshot, write, now, grant=grant)

    def fire_due_waits(
        self, now: Instant, decide: DecideEach, *, limit: int = FIRE_BATCH
    ) -> tuple[int, tuple[RunSnapshot, ...]]:
        """Due waits in one transaction (a thousand runs due at one instant): up to `limit`
        claimable `wait-until` records due at `now`, in claim order, locked with their runs
        `FOR UPDATE SKIP LOCKED` as a claim locks its record; verify the store, claim nothing
        while the active package is not this process's or a restore hold is set; read each
        run's records; `decide` is the engine, once for them all (a claim of pure work only:
        T18 and what follows it up to the first record that needs I/O, left pending and due),
        and the store writes each decision. No record is leased here (a write that leases one
        is refused), so what follows each wait is claimed as usual. Answers how many records
        were taken and the runs as written."""
        tx = self._tx

        def work(conn: Connection) -> tuple[int, tuple[RunSnapshot, ...]]:
            control = tx.verify_txn(conn)
            if not tx.may_claim(control):
                return 0, ()
            runs = [run_of(due) for due in _WAITS_DUE.rows(conn, {"now": now, "limit": limit})]
            if not runs:
                return 0, ()
            records = STEPS_OF.rows_of_each(conn, [{"run_id": run.run_id} for run in runs])
            snapshots = [
                RunSnapshot(control, run, tuple(step_of(row) for row in rows))
                for run, rows in zip(runs, records, strict=True)
            ]
            writes = decide(snapshots)
            with pipelined(conn):  # the batch's writes in one round trip on PostgreSQL
                written = tuple(
                    apply_txn(tx, conn, snapshot, write, now).snapshot
                    for snapshot, write in zip(snapshots, writes, strict=True)
                    if write is not None
                )
            return len(snapshots), written

        return tx.transact("fire-due-waits", work)

    def sweep(
        self,
        worker_id: str,
        now: Instant,
        recover: Recover,
        lease_seconds: int = LEASE_SECONDS,
        *,
        limit: int = 16,
    ) -> int:
        """07 §7.2 steps 2–3, off the claim path (a worker runs it at most once a second):
        recover up to `limit` lapsed leases (`leased`, `leaseExpiresAt ≤ now`: the record is
        taken over under a new token so the stale holder can no longer commit, then
        `recover(snapshot, "lease-lapsed")` writes T28/T29) and expire up to `limit` overdue
        records (the current record of an active run, `pending`, not pure, `deadlineAt ≤ now`:
        T26/T27), each in its own short transaction. Both selections use partial indexes, so
        a sweep that finds nothing costs two index probes whatever the number of runs.
        Answers the number of records handled. `recover` must not raise for a run's data
        problems (it would stall the sweep)."""
        expires = now + lease_seconds * 1000
        handled = 0
        kinds: tuple[SweepKind, ...] = ("lease-lapsed", "deadline-passed")
        for kind in kinds:
            for _ in range(limit):
                found = self._tx.transact(
                    "sweep",
                    lambda conn, kind=kind: self._sweep_one_txn(  # type: ignore[misc]
                        conn, kind, worker_id, now, expires, recover
                    ),
                )
                if not found:
                    break
                handled += 1
        return handled

    def _sweep_one_txn(
        self,
        conn: Connection,
        kind: SweepKind,
        worker_id: str,
        now: Instant,
        expires: Instant,
        recover: Recover,
    ) -> bool:
        tx = self._tx
        control = tx.verify_txn(conn)
        if not tx.serves_active_package(control) or control.restore_hold:
            return False
        if kind == "lease-lapsed":
            taken = _TAKE_LAPSED.first(
                conn, {"now": now, "expires": expires, "owner": worker_id, "token": new_token()}
            )
        else:
            taken = _TOUCH_OVERDUE.first(conn, {"now": now})
        if taken is None:
            return False
        snapshot = locked_snapshot_txn(conn, control, taken["run_id"])
        if snapshot is None:  # pragma: no cover - records belong to runs (foreign key)
            return False
        # A lapsed record the engine does not recover stays taken over until its new lease
        # lapses, so it is retried once per lease period instead of on every sweep.
        decide_txn(tx, conn, snapshot, lambda s: recover(s, kind), now)
        return True

    # -- fences and the finish (07 §7.2) ----------------------------------------------------------

    def record_step_progress(self, claim: Claim, now: Instant, decide: Decide) -> Written:
        """A mid-attempt fence (07 §7.2 freeze, pre-send): commits `decide`'s write only while
        the claim holds a live lease (`leaseExpiresAt > now`), no restore hold is set and the
        active package is still served; otherwise raises `StaleLease` and writes nothing.
        The frozen command is never replaced (only completed once with its preparation).
        Answers the run as written and the claim as it now stands (the same fence), or no
        claim when the write ended the attempt (a pre-send refusal)."""
        tx = self._tx

        def work(conn: Connection) -> Written:
            snapshot = self._fence_txn(conn, claim, now, live=True)
            write = decide(snapshot)
            if write is None:
                return Written(snapshot, evolve(claim, snapshot=snapshot))
            return apply_txn(tx, conn, snapshot, write, now, held=claim)

        return tx.transact("record-step-progress", work, batch=True)

    def complete_step(
        self,
        claim: Claim,
        now: Instant,
        decide: Decide,
        lease_seconds: int = LEASE_SECONDS,
        *,
        then: Decide | None = None,
    ) -> Written:
        """The finish transaction (07 §7.2): commits `decide`'s write (record outcome, run
        status, next record of §5.1) only if (run, step, generation, attempt, lease token)
        still match a `leased` record; otherwise raises `StaleLease` and nothing (audit
        included) commits. An expired lease that nobody took over still finishes.

        The write may carry the run on (07 §7.7 item 1): when it leaves the run's next record
        leased, that record gets a fresh lease for the same owner and `Written.claim` is the
        claim the loop goes on with, without a claim transaction.

        When it carries nothing on and `then` is given, the same transaction also makes the
        loop's next claim (07 §7.7 item 8: two runs' transactions in one commit, each fenced
        by its own locks): the first claimable record of any run, exactly as
        `claim_due_step` selects, locks and writes it with `then` as its decision, answered
        as `Written.then`. What that claim raises before it writes (a run whose data does not
        read, an invariant) drops the claim alone, never the finish: the record stays
        pending for a claim transaction of its own."""
        tx = self._tx
        grant = _Grant(claim.lease.owner, now + lease_seconds * 1000)

        def work(conn: Connection) -> Written:
            snapshot = self._fence_txn(conn, claim, now, live=False)
            write = decide(snapshot)
            if write is None:
                return Written(snapshot, None)
            written = apply_txn(
                tx,
                conn,
                snapshot,
                write,
                now,
                grant=grant if tx.may_claim(snapshot.control) else None,
            )
            if then is None or written.claim is not None:
                return written
            follow = tx.unless_raised(
                lambda: self._claim_txn(conn, now, grant, then), "finish-claim"
            )
            return written if follow is None else Written(written.snapshot, None, follow)

        return tx.transact("complete-step", work, batch=True)

    def _fence_txn(
        self, conn: Connection, claim: Claim, now: Instant, *, live: bool
    ) -> RunSnapshot:
        """Lock the claimed record only if the claim still holds it (reading it whole) and the
        run, with the control row, in one statement (PostgreSQL locks the rows in the order of
        the FROM list: the record, then the run, 07 §6.1); the snapshot is the claim's own
        with the leased record and the run's columns that others may change (a cancel, a
        restore review) read fresh, so the store's invariants are checked against what is
        stored even for a caller holding an older copy of its claim."""
        held = claim.held.record
        fence = {
            "k_run": claim.run_id,
            "k_step": held.step,
            "generation": held.generation,
            "attempt": held.attempt,
            "token": claim.lease.token,
        }
        row = _FENCE_LIVE.first(conn, fence | {"now": now}) if live else _FENCE.first(conn, fence)
        if row is None:
            raise StaleLease("The claim no longer holds its record.")
        control = self._tx.verified(row, prefix="c_")
        if live and (control.restore_hold or not self._tx.serves_active_package(control)):
            raise StaleLease("The store refuses mid-attempt fences now.")
        cached = claim.snapshot
        stored = step_of(row)
        state = evolve(cached.run.state, **{name: row[f"r_{name}"] for name in _FRESH_STATE})
        run = evolve(cached.run, state=state, **{name: row[f"r_{name}"] for name in _FRESH_OWN})
        steps = tuple(stored if step.step == stored.step else step for step in cached.steps)
        return RunSnapshot(control, run, steps)

    # -- the API's run transitions (07 §8, §9) and review completions (07 §7.6) -------------------

    def request_cancel(
        self, run_id: uuid.UUID, now: Instant, decide: Decide, *, reason_ref: str | None = None
    ) -> RunSnapshot | None:
        """07 §8 (locks: step record, then run). A run that is `finished`, `cancelled`,
        `cancelled-after-effect` or `expired`, or already has `cancelRequested`, is answered
        unchanged without calling `decide`; otherwise `decide` applies the cancel table and its
        write must record `cancelRequested`; the run then records the cancel as its last
        operator action, with `reason_ref` (the keyed reference of the operator's reason).
        None when the run does not exist."""
        tx = self._tx

        def work(conn: Connection) -> RunSnapshot | None:
            control = tx.verify_txn(conn)
            snapshot = lock_run_txn(conn, control, run_id)
            if snapshot is None:
                return None
            state = snapshot.run.state
            if state.status in TERMINAL_STATUSES or state.cancel_requested:
                return snapshot
            write = decide(snapshot)
            if write is None:
                return snapshot
            if not write.run.state.cancel_requested or write.run.state.cancel_mode == "none":
                raise StoreInvariantError("A cancel must record cancelRequested.")
            tx.notify_txn(conn)
            write = _by_operator(write, "cancel", now, reason_ref)
            return apply_txn(tx, conn, snapshot, write, now).snapshot

        return tx.transact("request-cancel", work)

    def update_run(
        self,
        run_id: uuid.UUID,
        now: Instant,
        decide: Decide,
        *,
        admission_lock: bool = False,
        action: OperatorAction | None = None,
        reason_ref: str | None = None,
    ) -> RunSnapshot | None:
        """Any other run transition of the API, in one transaction with the run locked
        (current step record, then run): `retry-same` (07 §9.1, `admission_lock=True`) and the
        `reconcile` commit (§9.2, whose decide re-checks generation, step, command and lease
        and raises `reconcile-raced`). With `action`, a write records it as the run's last
        operator action, with `reason_ref`. None when the run does not exist."""
        tx = self._tx

        def stamped(snapshot: RunSnapshot) -> RunWrite | None:
            write = decide(snapshot)
            if write is None or action is None:
                return write
            return _by_operator(write, action, now, reason_ref)

        def work(conn: Connection) -> RunSnapshot | None:
            control = admission_control_txn(tx, conn) if admission_lock else tx.verify_txn(conn)
            snapshot = lock_run_txn(conn, control, run_id)
            if snapshot is None:
                return None
            after = decide_txn(tx, conn, snapshot, stamped, now)
            if after is not snapshot:
                tx.notify_txn(conn)
            return after

        return tx.transact("update-run", work)

    def advance_completion_waits(
        self, completion_ref: str, now: Instant, floor_seconds: int
    ) -> int:
        """07 §7.6: every `pending` `wait-for` record with this completion reference is made due
        at `max(now, lastObservedAt + floor)` (`now` if never observed) when that is earlier
        than its current `dueAt` and its `timeoutAt`. Leased records are left alone; nothing
        else changes. Answers the number of records moved."""
        tx = self._tx
        floor = floor_seconds * 1000

        def work(conn: Connection) -> int:
            tx.verify_txn(conn)
            waiting = lock_rows(
                select(
                    STEPS.c.run_id,
                    STEPS.c.step,
                    STEPS.c.due_at,
                    STEPS.c.last_observed_at,
                    STEPS.c.timeout_at,
                ).where(
                    STEPS.c.completion_ref == completion_ref,
                    STEPS.c.type == "wait-for",
                    STEPS.c.state == "pending",
                )
            )
            moved = 0
            for run_id, step, due_at, last_observed_at, timeout_at in conn.execute(waiting).all():
                target = now if last_observed_at is None else max(now, last_observed_at + floor)
                if target >= due_at or (timeout_at is not None and target >= timeout_at):
                    continue
                conn.execute(
                    update(STEPS)
                    .where(
                        STEPS.c.run_id == run_id, STEPS.c.step == step, STEPS.c.state == "pending"
                    )
                    .values(due_at=target, updated_at=now)
                )
                moved += 1
            if moved:
                tx.notify_txn(conn)
            return moved

        return tx.transact("advance-completion-waits", work)


# -- the parts every run transaction is made of (the operator actions use them too) ---------------


def admission_control_txn(tx: Transactor, conn: Connection) -> ControlRow:
    """The admission lock and the store check in one statement: the control row read
    `FOR SHARE` (PostgreSQL), so admissions run side by side while every writer of the
    control row (holds, activation) waits for them and excludes them; on SQLite the
    transaction's `BEGIN IMMEDIATE` already is the lock."""
    if tx.location.kind == "postgresql":
        return tx.verified(_CONTROL_SHARED.first(conn))
    return tx.verify_txn(conn)


def lock_run_txn(conn: Connection, control: ControlRow, run_id: uuid.UUID) -> RunSnapshot | None:
    """Lock the run's current step record, then the run (07 §6.1 lock order), and read it."""
    for _ in range(_LOCK_ATTEMPTS):
        current = conn.execute(select(RUNS.c.current_step).where(RUNS.c.run_id == run_id)).scalar()
        if current is None:
            return None
        conn.execute(
            lock_rows(select(STEPS.c.step).where(STEPS.c.run_id == run_id, STEPS.c.step == current))
        )
        snapshot = locked_snapshot_txn(conn, control, run_id)
        if snapshot is None or snapshot.run.state.current_step == current:
            return snapshot
    raise store_unavailable()  # pragma: no cover - the current step moved on repeatedly


def decide_txn(
    tx: Transactor, conn: Connection, snapshot: RunSnapshot, decide: Decide, now: Instant
) -> RunSnapshot:
    """`decide` on a locked snapshot, and its write (if any) applied: the run as it now stands."""
    write = decide(snapshot)
    if write is None:
        return snapshot
    return apply_txn(tx, conn, snapshot, write, now).snapshot


def apply_txn(
    tx: Transactor,
    conn: Connection,
    before: RunSnapshot,
    write: RunWrite,
    now: Instant,
    *,
    grant: _Grant | None = None,
    held: Claim | None = None,
) -> Written:
    """Write a transition after checking its invariants; answer the snapshot as written
    (computed, not read back) and the claim on the record the write leaves leased.

    The engine decides which record is leased; the store owns the lease: a record that becomes
    `leased` gets a new random token and `grant` (owner and expiry) and a claim; the record
    `held` by the caller keeps its lease; every other record has none."""
    check_write(before, write, may_lease=grant is not None, held=held)
    # The writes answer nothing: on PostgreSQL they go in one round trip.
    with pipelined(conn):
        tx.save_head_txn(conn, now)
        run = before.run
        if write.run != before.run:
            run = evolve(write.run, updated_at=now)
            if run.state.status != before.run.state.status:
                tx.note(
                    StatusChange(
                        run.run_id, run.workflow_id, before.run.state.status, run.state.status,
                        run.state.admitted_at, now,
                    )
                )  # fmt: skip
            _update_changed(
                conn, RUNS, run_values(before.run), run_values(run), {"k_run": run.run_id}
            )
        steps = {stored.step: stored for stored in before.steps}
        leased: str | None = None
        inserts: list[dict[str, Any]] = []
        ended: list[dict[str, Any]] = []
        for written in write.steps:
            old = before.step(written.step)
            if _ends_an_attempt(old, written):
                ended.append(_ended_attempt(run.run_id, written.record, now))
            if written.record.state == "leased" and (old is None or old.record.state != "leased"):
                assert grant is not None
                stored = evolve(
                    written, lease=Lease(grant.owner, new_token(), grant.expires_at), updated_at=now
                )
                leased = stored.step
            elif written.record.state == "leased":
                assert old is not None
                stored = evolve(written, lease=old.lease, updated_at=now)
            else:
                stored = evolve(written, lease=None, updated_at=now)
            steps[stored.step] = stored
            values = step_values(stored)
            if old is None:
                inserts.append(values)
            else:
                _update_changed(
                    conn,
                    STEPS,
                    step_values(old),
                    values,
                    {"k_run": run.run_id, "k_step": stored.step},
                )
        if inserts:
            _insert_steps(conn, inserts)
        if ended:
            _insert_attempts(conn, tx.location.kind, ended)
    ordered = tuple(
        sorted(steps.values(), key=lambda stored: (stored.record.entered_at, stored.step))
    )
    after = RunSnapshot(before.control, run, ordered)
    if leased is not None:
        found = after.step(leased)
        assert found is not None
        return Written(after, Claim(found, after))
    if held is not None:
        kept = after.step(held.step)
        if kept is not None and kept.record.state == "leased" and kept.lease == held.lease:
            return Written(after, Claim(kept, after))
    return Written(after, None)


def _by_operator(
    write: RunWrite, action: OperatorAction, now: Instant, reason_ref: str | None
) -> RunWrite:
    """`write` with the run recording `action` as its last operator action."""
    run = evolve(
        write.run, operator_action=action, operator_action_at=now, operator_reason_ref=reason_ref
    )
    return RunWrite(run, write.steps)


def _ended_attempt(run_id: uuid.UUID, record: StepRecord, now: Instant) -> dict[str, Any]:
    """The `step_attempts` row of the attempt that left `record` as it is, ended at `now`."""
    return {
        "run_id": run_id,
        "step": record.step,
        "generation": record.generation,
        "attempt": record.attempt,
        "started_at": record.attempt_started_at,
        "ended_at": now,
        "outcome": record.ending,
        "failure_code": record.failure_code,
    }


def _ends_an_attempt(old: StoredStep | None, new: StoredStep) -> bool:
    """Whether the write of `new` (over `old`) ends an attempt of the record: it leaves it not
    leased after a claim of this generation and attempt — the record was leased before, or was
    claimed and worked within this very write (a continuation's pure step)."""
    record = new.record
    if record.state == "leased" or record.attempt == 0:
        return False
    if old is None or old.record.state == "leased":
        return True
    was = old.record
    return (was.generation, was.attempt) != (record.generation, record.attempt)


def _replay_txn(conn: Connection, admission: NewRun) -> AdmissionResult | None:
    """The run admitted under the admission's start identity (a replay, tombstones
    included, when the input digest is the same; `idempotency.key-reused` otherwise), or
    None when there is none."""
    existing = _RUN_BY_START.first(conn, {"start_identity": admission.run.start_identity})
    if existing is None:
        return None
    run: StoredRun = run_of(existing)
    if run.input_digest != admission.run.input_digest:
        raise refuse("idempotency.key-reused")
    return AdmissionResult(run, created=False)


def _insert_steps(conn: Connection, rows: list[dict[str, Any]]) -> None:
    """Insert records in one statement (a continuation inserts a few at once: one multi-row
    `INSERT` costs less than the driver's batch protocol)."""
    _insert_rows(conn, _INSERT_STEPS, _STEP_FIELDS, rows)


def _insert_steps_of_new_run(conn: Connection, kind: StoreKind, rows: list[dict[str, Any]]) -> None:
    """Insert an admitted run's records in one statement, only if the run's row is there and
    has none yet: an admission sends them with the run's `INSERT … ON CONFLICT DO NOTHING`,
    which inserts nothing for an existing start identity."""
    _insert_rows(conn, lambda count: _INSERT_NEW_RUN_STEPS((kind, count)), _STEP_FIELDS, rows)


def _insert_attempts(conn: Connection, kind: StoreKind, rows: list[dict[str, Any]]) -> None:
    """Insert ended attempts in one statement, a repeat kept out (one per (run, step,
    generation, attempt)): a finish ends two at once, the call's and the next record's."""
    _insert_rows(conn, _INSERT_ATTEMPTS[kind], _ATTEMPT_FIELDS, rows)


def _insert_rows(
    conn: Connection,
    statements: Callable[[int], Prepared],
    fields: Sequence[str],
    rows: list[dict[str, Any]],
) -> None:
    """Insert `rows` (each with exactly `fields`) with one `INSERT` of as many rows."""
    statements(len(rows)).run(
        conn,
        {f"{name}_{index}": row[name] for index, row in enumerate(rows) for name in fields},
    )


def _rows_of(base: Callable[[], Any], table: Table, fields: Sequence[str]) -> PreparedShapes[int]:
    """The multi-row `INSERT`s of `base()` into `table`, by row count."""

    def build(count: int) -> Any:
        values = [
            {name: bindparam(f"{name}_{index}", type_=table.c[name].type) for name in fields}
            for index in range(count)
        ]
        return base().values(values if count > 1 else values[0])

    return PreparedShapes(build)


# -- statements, built once (SQLAlchemy's compiled form is kept per backend by `Prepared`) ---------

_NOW: Final = bindparam("now", type_=UTCDateTime())
_RUN_FIELDS: Final = tuple(column.name for column in RUNS.c)
_STEP_FIELDS: Final = tuple(column.name for column in STEPS.c)
_RUN_MUTABLE: Final = tuple(name for name in _RUN_FIELDS if name not in RUN_IMMUTABLE)
_STEP_MUTABLE: Final = tuple(name for name in _STEP_FIELDS if name not in ("run_id", "step"))
_FRESH_STATE: Final = (
    "status",
    "current_step",
    "cancel_mode",
    "cancel_requested",
    "restore_review",
    "outcome",
    "failure_code",
    "completed_at",
)
_FRESH_OWN: Final = (
    "terminal_output",
    "payload_erased_at",
    "updated_at",
    "operator_action",
    "operator_action_at",
    "operator_reason_ref",
)
"""The run columns that another transaction may change while a worker holds a lease (a
cancel, a restore review, and the operator action that recorded it): every fence reads them
fresh; the rest of the run is the claim's. (A write built on the claim's copy of a column left
out here would put the old value back: the worker's finish used to erase the operator action of
a cancel made during its attempt.)"""

_CONTROL_SHARED: Final = Prepared(select(CONTROL).with_for_update(read=True))
_RUN_BY_START: Final = Prepared(
    select(RUNS).where(RUNS.c.start_identity == bindparam("start_identity"))
)
_INSERT_RUN: Final = {
    kind: Prepared(
        insert_ignoring(RUNS, kind, on=("start_identity",)).returning(RUNS.c.run_id),
        column_keys=_RUN_FIELDS,
    )
    for kind in ("postgresql", "sqlite")
}
"""A run's row; none is inserted (and no row answered) when its start identity exists."""
_INSERT_STEPS: Final = _rows_of(lambda: insert(STEPS), STEPS, _STEP_FIELDS)
"""The multi-row `INSERT`s of records, by row count (`_insert_steps`)."""


def _new_run_steps(shape: tuple[StoreKind, int]) -> Any:
    """`INSERT INTO steps SELECT …` of `count` records of one run (the parameters named as
    `_insert_rows` names them), selected only if that run's row exists and has no records
    yet. On PostgreSQL each value is cast to its column's type: a selected parameter has no
    column to take its type from (a null would be text)."""
    kind, count = shape
    run_id = bindparam("run_id_0", type_=STEPS.c.run_id.type)
    there = and_(
        exists().where(RUNS.c.run_id == run_id),
        not_(exists().where(STEPS.c.run_id == run_id)),
    )

    def value(name: str, index: int) -> Any:
        column = STEPS.c[name]
        parameter = run_id if name == "run_id" else bindparam(f"{name}_{index}", type_=column.type)
        return cast(parameter, column.type) if kind == "postgresql" else parameter

    rows = [
        select(*(value(name, index).label(name) for name in _STEP_FIELDS)).where(there)
        for index in range(count)
    ]
    return insert(STEPS).from_select(_STEP_FIELDS, rows[0] if count == 1 else union_all(*rows))


_INSERT_NEW_RUN_STEPS: Final = PreparedShapes(_new_run_steps)
"""The `INSERT`s of an admitted run's records, by row count (`_insert_steps_of_new_run`)."""
_ATTEMPT_FIELDS: Final = tuple(column.name for column in STEP_ATTEMPTS.c)
_INSERT_ATTEMPTS: Final[dict[StoreKind, PreparedShapes[int]]] = {
    kind: _rows_of(
        functools.partial(insert_ignoring, STEP_ATTEMPTS, kind), STEP_ATTEMPTS, _ATTEMPT_FIELDS
    )
    for kind in ("postgresql", "sqlite")
}
"""The multi-row `INSERT`s of ended attempts, by backend and row count (`_insert_attempts`)."""
_INSERT_LIVE_PAIR: Final = {
    kind: Prepared(
        insert_ignoring(LIVE_BINDINGS, kind),
        column_keys=("definition_digest", "binding_digest", "first_admitted_at"),
    )
    for kind in ("postgresql", "sqlite")
}
_INSERT_DEFINITION: Final = {
    kind: Prepared(
        insert_ignoring(DEFINITIONS, kind),
        column_keys=("definition_digest", "run_id", "snapshot", "stored_at"),
    )
    for kind in ("postgresql", "sqlite")
}
_LIVE_PAIRS: Final = Prepared(
    select(LIVE_BINDINGS.c.definition_digest, LIVE_BINDINGS.c.binding_digest)
)


def _updates_of(table: Table) -> PreparedShapes[tuple[str, ...]]:
    """The `UPDATE`s of a run's row (`k_run`) or a record's (`k_run`, `k_step`), by the set of
    columns they set (`_update_changed`)."""
    where = [table.c.run_id == bindparam("k_run")]
    if "step" in table.c:
        where.append(table.c.step == bindparam("k_step"))

    def build(changed: tuple[str, ...]) -> Any:
        return (
            update(table)
            .where(*where)
            .values({name: bindparam(f"v_{name}", type_=table.c[name].type) for name in changed})
        )

    return PreparedShapes(build)


_UPDATES: Final = {
    RUNS.name: (_RUN_MUTABLE, _updates_of(RUNS)),
    STEPS.name: (_STEP_MUTABLE, _updates_of(STEPS)),
}


def _update_changed(
    conn: Connection,
    table: Table,
    old: dict[str, Any],
    new: dict[str, Any],
    keys: dict[str, Any],
) -> None:
    """Update a run's or a record's row (`keys`: `k_run`, and `k_step` for a record) with
    the columns whose value the write changes, and those alone: a transition changes a few
    of a record's thirty-odd columns, and the sealed command and output it leaves as they
    are are not sent again."""
    mutable, statements = _UPDATES[table.name]
    changed = tuple(name for name in mutable if new[name] != old[name])
    if changed:
        statements(changed).run(conn, {f"v_{name}": new[name] for name in changed} | keys)


_FENCE_SELECT: Final = (
    select(
        *STEPS.c,
        *(column.label(f"c_{column.name}") for column in CONTROL.c),
        *(RUNS.c[name].label(f"r_{name}") for name in _FRESH_STATE + _FRESH_OWN),
    )
    .select_from(STEPS.join(RUNS, RUNS.c.run_id == STEPS.c.run_id).join(CONTROL, true()))
    .where(
        STEPS.c.run_id == bindparam("k_run"),
        STEPS.c.step == bindparam("k_step"),
        STEPS.c.generation == bindparam("generation"),
        STEPS.c.attempt == bindparam("attempt"),
        STEPS.c.lease_token == bindparam("token"),
        STEPS.c.state == "leased",
    )
)
_FENCE: Final = Prepared(lock_rows(_FENCE_SELECT, of=(STEPS, RUNS)))
_FENCE_LIVE: Final = Prepared(
    lock_rows(_FENCE_SELECT.where(STEPS.c.lease_expires_at > _NOW), of=(STEPS, RUNS))
)
"""The fence: the claimed record (whole) only while the claim holds it, the run's columns
that others change, and the control row; the record and the run are locked."""
_DUE: Final = Prepared(
    select(*RUNS.c, *(column.label(f"c_{column.name}") for column in CONTROL.c))
    .select_from(STEPS.join(RUNS, RUNS.c.run_id == STEPS.c.run_id).join(CONTROL, true()))
    .where(*claimable(_NOW))
    .order_by(STEPS.c.due_at, STEPS.c.run_id, STEPS.c.step)
    .limit(1)
    .with_for_update(skip_locked=True, of=(STEPS, RUNS)),
    planned_each_time=True,
)
"""07 §7.2 step 4: the first claimable record, locked with its run (in that order, 07 §6.1),
answering the run whole and the control row, so a claim reads what it decides on in two
statements (this one and the run's records). A bare `SELECT … FOR UPDATE SKIP LOCKED` is safe
here on both backends: PostgreSQL skips records (or runs) another transaction holds, and on
SQLite every write transaction is `BEGIN IMMEDIATE`, so one claim runs at a time (the clause
is dropped there). Planned at each execution (`Prepared`): the ordered scan of `ix_steps_due`
then the run by its key is then the plan whatever statistics the tables have, where a generic
plan kept since the tables were empty scanned or sorted every due record per claim."""
_WAITS_DUE: Final = Prepared(
    select(*RUNS.c)
    .select_from(STEPS.join(RUNS, RUNS.c.run_id == STEPS.c.run_id))
    .where(*claimable(_NOW), STEPS.c.type == fixed("wait-until"))
    .order_by(STEPS.c.due_at, STEPS.c.run_id, STEPS.c.step)
    .limit(bindparam("limit", type_=Integer))
    .with_for_update(skip_locked=True, of=(STEPS, RUNS)),
    planned_each_time=True,
)
"""The claimable `wait-until` records due now, in claim order (`fire_due_waits`), locked like
the claim's record."""
_TAKE_LAPSED: Final = Prepared(
    update(STEPS)
    .where(
        tuple_(STEPS.c.run_id, STEPS.c.step).in_(
            lock_one(
                select(STEPS.c.run_id, STEPS.c.step)
                .where(STEPS.c.state == fixed("leased"), STEPS.c.lease_expires_at <= _NOW)
                .order_by(STEPS.c.lease_expires_at, STEPS.c.run_id, STEPS.c.step)
                .limit(1),
                of=STEPS,
            )
        )
    )
    .values(
        lease_token=bindparam("token"),
        lease_owner=bindparam("owner"),
        lease_expires_at=bindparam("expires", type_=UTCDateTime()),
        updated_at=_NOW,
    )
    .returning(STEPS.c.run_id, STEPS.c.step)
)
_TOUCH_OVERDUE: Final = Prepared(
    update(STEPS)
    .where(
        tuple_(STEPS.c.run_id, STEPS.c.step).in_(
            lock_one(
                select(STEPS.c.run_id, STEPS.c.step)
                .join(
                    RUNS,
                    and_(RUNS.c.run_id == STEPS.c.run_id, RUNS.c.current_step == STEPS.c.step),
                )
                .where(
                    STEPS.c.state == fixed("pending"),
                    not_(STEPS.c.pure),
                    RUNS.c.deadline_at <= _NOW,
                    among(RUNS.c.status, _SWEEPABLE),
                )
                .order_by(RUNS.c.deadline_at, STEPS.c.run_id, STEPS.c.step)
                .limit(1),
                of=STEPS,
            )
        )
    )
    .values(updated_at=_NOW)
    .returning(STEPS.c.run_id, STEPS.c.step)
)


def hot_statements() -> dict[str, Any]:
    """The statements whose plans decide what an idle or parked store costs — the claim and the
    two sweeps — as SQLAlchemy statements, for `EXPLAIN` (the parked-runs benchmark, the plan
    tests of the store suite)."""
    return {
        "claim": _DUE.statement,
        "lapsed_sweep": _TAKE_LAPSED.statement,
        "overdue_sweep": _TOUCH_OVERDUE.statement,
    }
