"""`Store`: the one store the service and the worker use, on PostgreSQL and SQLite alike.

Each public method is one transaction and states the rule it keeps. Transitions are never
computed here: the engine computes them, inside the transaction, through a `Decide` callback
that receives the locked `RunSnapshot` and returns a `RunWrite`. The store adds what only the
store can do: verifying the deployment, taking locks in the contract's order (admission lock →
control → step record → run, 07 §6.1), fencing leases, checking the write's invariants and
writing it. Only transient driver errors (dialect.is_transient) are retried; a lost connection
is `coordinator.command.store-unavailable`.

Sync, not async: transactions are short and bounded, the decide callbacks are plain functions
that must run while the locks are held, and a sync pool serves the worker's loops from
threads; the async API layer calls the store from a thread pool.
"""

from __future__ import annotations

import secrets
import time
import uuid
from collections.abc import Callable, Collection
from dataclasses import asdict, fields
from datetime import datetime, timedelta
from typing import Any, Final, TypeVar

from sqlalchemy import and_, func, insert, not_, or_, select, tuple_, update
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection, Engine, RowMapping

from coordinator_core.store.dialect import (
    StoreKind,
    StoreLocation,
    create_store_engine,
    is_transient,
    is_unavailable,
    locate,
    lock_one,
    lock_rows,
    read_engine,
    store_unavailable,
    truncate_ms,
)
from coordinator_core.store.guards import (
    ProcessLock,
    check_identity,
    check_ledger,
    check_runtime_role,
    control_from,
    namespace_state,
    read_ledger,
    refuse,
)
from coordinator_core.store.queries import (
    reported_status,
    settled,
    unknown_effect,
)
from coordinator_core.store.rows import (
    Admission,
    AdmissionResult,
    Claim,
    ControlRow,
    Decide,
    DeploymentIdentity,
    HoldState,
    Journal,
    Recover,
    RunPage,
    RunPosition,
    RunRow,
    RunSnapshot,
    RunWrite,
    StepRow,
    StoreSummary,
)
from coordinator_core.store.tables import (
    ADMISSION_LOCK,
    CONTROL,
    RUN_STATUSES,
    RUNS,
    STEPS,
    TERMINAL_STATUSES,
)

__all__ = ["LEASE_SECONDS", "StaleLease", "Store", "StoreInvariantError"]

T = TypeVar("T")

LEASE_SECONDS: Final = 15
"""07 §16: attempt budget (10 s) + 5 s."""

_ATTEMPTS: Final = 4
_BACKOFF_SECONDS: Final = (0.01, 0.05, 0.2)

_RUN_FIELDS: Final = tuple(field.name for field in fields(RunRow))
_STEP_FIELDS: Final = tuple(field.name for field in fields(StepRow))
_RUN_IMMUTABLE: Final = (
    "run_id",
    "start_identity",
    "input_digest",
    "owner",
    "origin",
    "trigger",
    "workflow_id",
    "workflow_version",
    "revision",
    "definition_digest",
    "binding_digest",
    "snapshot",
    "input",
    "policy",
    "admitted_at",
    "deadline_at",
    "payload_erased_at",
)
_STEP_IMMUTABLE: Final = (
    "run_id",
    "step",
    "type",
    "pure",
    "entered_at",
    "operation",
    "effect_kind",
)
_LEASE_COLUMNS: Final = ("lease_owner", "lease_token", "lease_expires_at")
_CLAIMABLE_STATUSES: Final = ("running", "cancel-requested")
_SWEEPABLE_STATUSES: Final = ("running", "attention", "cancel-requested")


class StaleLease(Exception):
    """The claim no longer holds its record (lease taken over, record moved on, or — for a
    mid-attempt fence — the lease expired or a restore hold is set). Nothing was written: the
    attempt's result is discarded (`lease-stale`, 07 §7.2)."""


class StoreInvariantError(RuntimeError):
    """A write broke a rule the store guarantees (a command replaced, a `sent` flag cleared, an
    immutable run column changed, a record created twice…). Nothing was written."""


class _Retract(Exception):
    pass


def _run_from(row: RowMapping) -> RunRow:
    values = {name: row[name] for name in _RUN_FIELDS}
    values["policy"] = dict(values["policy"] or {})
    return RunRow(**values)


def _step_from(row: RowMapping) -> StepRow:
    return StepRow(**{name: row[name] for name in _STEP_FIELDS})


def _new_token() -> str:
    return secrets.token_hex(16)


class Store:
    """The store of one deployment, opened by the service or a worker process.

    Open it with `Store.open`, which refuses a store that is not at this build's schema version
    or does not belong to the deployment (07 §14.4, §15). Every method takes the caller's `now`
    (an aware datetime; stored truncated to milliseconds): the store never reads a clock, so
    the same instants reach the engine and the rows.
    """

    def __init__(
        self,
        location: StoreLocation,
        engine: Engine,
        identity: DeploymentIdentity,
        lock: ProcessLock | None,
    ) -> None:
        self._location = location
        self._engine = engine
        self._reader = read_engine(engine)
        self._identity = identity
        self._lock = lock

    # -- lifecycle ------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        url: str,
        identity: DeploymentIdentity,
        *,
        namespace: str | None = None,
        exclusive: bool = False,
        pool_size: int = 10,
    ) -> Store:
        """Connect and run the start-time deployment check (`verify`).

        `exclusive` (SQLite, `coordinator serve`) holds `<path>.lock` until `close`
        (`coordinator.command.store-busy` if another process holds it). A SQLite file that does
        not exist is never created here (`schema-mismatch`: run `migrate`).
        """
        location = locate(url, namespace=namespace)
        if location.kind == "sqlite":
            assert location.path is not None
            if not location.path.exists():
                raise refuse("coordinator.deployment.schema-mismatch")
        lock = (
            ProcessLock(location.lock_path).acquire()
            if exclusive and location.kind == "sqlite"
            else None
        )
        try:
            engine = create_store_engine(location, pool_size=pool_size)
        except BaseException:
            if lock is not None:
                lock.release()
            raise
        store = cls(location, engine, identity, lock)
        try:
            store.verify()
        except BaseException:
            store.close()
            raise
        return store

    def close(self) -> None:
        """Release the connections and, if held, the SQLite process lock."""
        self._engine.dispose()
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def kind(self) -> StoreKind:
        return self._location.kind

    @property
    def location(self) -> StoreLocation:
        return self._location

    # -- transactions ---------------------------------------------------------------------------

    def _transact(self, work: Callable[[Connection], T], *, read_only: bool = False) -> T:
        """Run `work` in one transaction; retry only transient driver errors (the server rolled
        back), a bounded number of times; map an unreachable store to `store-unavailable`."""
        engine = self._reader if read_only else self._engine
        attempt = 0
        while True:
            attempt += 1
            try:
                with engine.begin() as conn:
                    return work(conn)
            except sa_exc.DBAPIError as error:
                if is_transient(error) and attempt < _ATTEMPTS:
                    time.sleep(_BACKOFF_SECONDS[attempt - 1])
                    continue
                if is_unavailable(error):
                    raise store_unavailable() from error
                raise

    def _verify_txn(self, conn: Connection) -> ControlRow:
        """07 §6.1 step 1 / §7.1: databaseId, schema version and key custody, checked in every
        verifying transaction (the PostgreSQL database name is checked on every connection,
        see dialect.create_store_engine)."""
        row = conn.execute(select(CONTROL)).mappings().first()
        return check_identity(None if row is None else control_from(row), self._identity)

    def _serves_active_package(self, control: ControlRow) -> bool:
        expected = self._identity.package_digest
        return expected is None or control.active_package_digest == expected

    def _admission_lock_txn(self, conn: Connection) -> None:
        """The admission lock (07 §6.1 step 2): PostgreSQL `SELECT … FOR UPDATE` on the one-row
        table; SQLite: the transaction's `BEGIN IMMEDIATE` already is the lock."""
        if self._location.kind == "postgresql":
            conn.execute(lock_rows(select(ADMISSION_LOCK.c.id)))

    def _snapshot_txn(
        self, conn: Connection, control: ControlRow, run_id: uuid.UUID, *, lock_run: bool
    ) -> RunSnapshot | None:
        statement = select(RUNS).where(RUNS.c.run_id == run_id)
        if lock_run:
            statement = lock_rows(statement)
        run = conn.execute(statement).mappings().first()
        if run is None:
            return None
        steps = conn.execute(
            select(STEPS).where(STEPS.c.run_id == run_id).order_by(STEPS.c.entered_at, STEPS.c.step)
        ).mappings()
        return RunSnapshot(control, _run_from(run), tuple(_step_from(step) for step in steps))

    def _lock_run_txn(
        self, conn: Connection, control: ControlRow, run_id: uuid.UUID
    ) -> RunSnapshot | None:
        """Lock the run's current step record, then the run (07 §6.1 lock order)."""
        for _ in range(_ATTEMPTS):
            current = conn.execute(
                select(RUNS.c.current_step).where(RUNS.c.run_id == run_id)
            ).scalar()
            if current is None:
                return None
            conn.execute(
                lock_rows(
                    select(STEPS.c.step).where(STEPS.c.run_id == run_id, STEPS.c.step == current)
                )
            )
            snapshot = self._snapshot_txn(conn, control, run_id, lock_run=True)
            if snapshot is None or snapshot.run.current_step == current:
                return snapshot
        raise store_unavailable()  # pragma: no cover - the current step moved on repeatedly

    def _apply_txn(
        self, conn: Connection, before: RunSnapshot, write: RunWrite, now: datetime
    ) -> RunSnapshot:
        """Write a transition after checking its invariants; answer the snapshot as written."""
        _check_write(before, write)
        run_values = {
            name: getattr(write.run, name) for name in _RUN_FIELDS if name not in _RUN_IMMUTABLE
        }
        run_values["updated_at"] = now
        conn.execute(update(RUNS).where(RUNS.c.run_id == before.run.run_id).values(**run_values))
        for record in write.steps:
            values = {name: getattr(record, name) for name in _STEP_FIELDS}
            values["updated_at"] = now
            for column in _LEASE_COLUMNS:
                values.pop(column)
            if before.step(record.step) is None:
                conn.execute(insert(STEPS).values(**values))
                continue
            if record.state != "leased":
                values |= dict.fromkeys(_LEASE_COLUMNS)
            for column in ("run_id", "step"):
                values.pop(column)
            conn.execute(
                update(STEPS)
                .where(STEPS.c.run_id == record.run_id, STEPS.c.step == record.step)
                .values(**values)
            )
        after = self._snapshot_txn(conn, before.control, before.run.run_id, lock_run=False)
        assert after is not None
        return after

    def _decide_txn(
        self, conn: Connection, snapshot: RunSnapshot, decide: Decide, now: datetime
    ) -> RunSnapshot:
        write = decide(snapshot)
        if write is None:
            return snapshot
        return self._apply_txn(conn, snapshot, write, now)

    # -- deployment check and reads -------------------------------------------------------------

    def verify(self) -> ControlRow:
        """07 §15, at start and every 30 s: the store is this build's schema version with
        matching ledger checksums (`deployment.schema-mismatch`), belongs to this databaseId
        (`deployment.database-id-mismatch`) and keys (`command.admission-key-custody`,
        `command.state-key-custody`), its active package is the pinned one
        (`deployment.refused`), and on PostgreSQL the connection runs as the runtime role with
        exactly its grants (`deployment.refused`)."""

        def work(conn: Connection) -> ControlRow:
            if self._location.kind == "postgresql":
                assert self._location.namespace is not None
                state = namespace_state(conn, self._location.namespace)
                if state == "foreign":
                    raise refuse("coordinator.command.namespace-occupied")
                if state == "absent":
                    raise refuse("coordinator.deployment.schema-mismatch")
            check_ledger(
                read_ledger(conn, self._location),
                pending_code="coordinator.deployment.schema-mismatch",
            )
            control = self._verify_txn(conn)
            if not self._serves_active_package(control):
                raise refuse("coordinator.deployment.refused")
            if self._location.kind == "postgresql" and self._identity.runtime_role is not None:
                assert self._location.namespace is not None
                check_runtime_role(conn, self._location.namespace, self._identity.runtime_role)
            return control

        return self._transact(work, read_only=True)

    def control(self) -> ControlRow:
        """The control row as it is now (no identity check)."""

        def work(conn: Connection) -> ControlRow:
            row = conn.execute(select(CONTROL)).mappings().first()
            if row is None:
                raise refuse("coordinator.deployment.schema-mismatch")
            return control_from(row)

        return self._transact(work, read_only=True)

    def get_run(self, run_id: uuid.UUID) -> RunRow | None:
        """The run row (tombstones included), or None."""

        def work(conn: Connection) -> RunRow | None:
            row = conn.execute(select(RUNS).where(RUNS.c.run_id == run_id)).mappings().first()
            return None if row is None else _run_from(row)

        return self._transact(work, read_only=True)

    def find_run(self, start_identity: str) -> RunRow | None:
        """The run admitted under a start identity (the event path's lookup-first, 06 §8)."""

        def work(conn: Connection) -> RunRow | None:
            row = (
                conn.execute(select(RUNS).where(RUNS.c.start_identity == start_identity))
                .mappings()
                .first()
            )
            return None if row is None else _run_from(row)

        return self._transact(work, read_only=True)

    def get_run_snapshot(self, run_id: uuid.UUID) -> RunSnapshot | None:
        """The run, all its records and the control row from one consistent read (06 §5.4:
        repeatable-read read-only on PostgreSQL, one read transaction on SQLite)."""

        def work(conn: Connection) -> RunSnapshot | None:
            row = conn.execute(select(CONTROL)).mappings().first()
            if row is None:
                raise refuse("coordinator.deployment.schema-mismatch")
            return self._snapshot_txn(conn, control_from(row), run_id, lock_run=False)

        return self._transact(work, read_only=True)

    def list_runs(
        self,
        *,
        owner: str | None,
        workflows: Collection[str] | None = None,
        status: str | None = None,
        workflow: str | None = None,
        after: RunPosition | None = None,
        limit: int = 20,
    ) -> RunPage:
        """06 §5.2: runs newest first by (admittedAt DESC, runId DESC), keyset-paginated.

        `owner` None lists every owner (operator); `workflows` restricts to the caller's
        policy; `status` filters by the *reported* status (restore review reads `attention`)
        and is evaluated on each page as it is read. A page never repeats a run, never skips
        one that still matches, and never shows runs positioned before `after` (admitted
        later). The cursor's MAC and encoding are the API's; the store sees positions.
        """
        if not 1 <= limit <= 1000:
            raise ValueError("The page limit is out of range.")

        def work(conn: Connection) -> RunPage:
            statement = select(RUNS)
            if owner is not None:
                statement = statement.where(RUNS.c.owner == owner)
            if workflows is not None:
                statement = statement.where(RUNS.c.workflow_id.in_(sorted(workflows)))
            if workflow is not None:
                statement = statement.where(RUNS.c.workflow_id == workflow)
            if status is not None:
                statement = statement.where(reported_status() == status)
            if after is not None:
                statement = statement.where(
                    or_(
                        RUNS.c.admitted_at < after.admitted_at,
                        and_(RUNS.c.admitted_at == after.admitted_at, RUNS.c.run_id < after.run_id),
                    )
                )
            statement = statement.order_by(RUNS.c.admitted_at.desc(), RUNS.c.run_id.desc())
            rows = [_run_from(row) for row in conn.execute(statement.limit(limit + 1)).mappings()]
            page = tuple(rows[:limit])
            more = len(rows) > limit
            last = page[-1] if page else None
            position = RunPosition(last.admitted_at, last.run_id) if more and last else None
            return RunPage(page, position)

        return self._transact(work, read_only=True)

    def hold_state(self) -> HoldState:
        """06 §11.8: the holds and the number of runs under restore review."""
        return self._transact(self._hold_state_txn, read_only=True)

    def _hold_state_txn(self, conn: Connection) -> HoldState:
        row = conn.execute(select(CONTROL.c.restore_hold, CONTROL.c.admissions_hold)).first()
        if row is None:
            raise refuse("coordinator.deployment.schema-mismatch")
        review = conn.execute(
            select(func.count()).select_from(RUNS).where(RUNS.c.restore_review)
        ).scalar()
        return HoldState(bool(row[0]), bool(row[1]), int(review or 0))

    def unsettled_bindings(self, now: datetime) -> frozenset[tuple[str, str]]:
        """Every distinct (definition digest, binding digest) of the runs not settled at `now`
        (07 §13): the input of the live-binding check (05 §10)."""
        moment = truncate_ms(now)
        return self._transact(lambda conn: _unsettled_txn(conn, moment), read_only=True)

    def definition_snapshot(self, definition_digest: str) -> tuple[uuid.UUID, bytes] | None:
        """A (run id, sealed snapshot) of some run pinned to `definition_digest` whose payload
        is not erased, so a caller can restore a definition it does not serve (live-binding
        check of older runs)."""

        def work(conn: Connection) -> tuple[uuid.UUID, bytes] | None:
            row = conn.execute(
                select(RUNS.c.run_id, RUNS.c.snapshot)
                .where(RUNS.c.definition_digest == definition_digest, RUNS.c.snapshot.is_not(None))
                .limit(1)
            ).first()
            return None if row is None else (row[0], row[1])

        return self._transact(work, read_only=True)

    def summary(self, now: datetime) -> StoreSummary:
        """The store part of `GET /v1/doctor` (06 §7.1), from one read transaction."""
        moment = truncate_ms(now)

        def work(conn: Connection) -> StoreSummary:
            row = conn.execute(select(CONTROL)).mappings().first()
            if row is None:
                raise refuse("coordinator.deployment.schema-mismatch")
            control = control_from(row)
            reported = reported_status().label("reported")
            counts = dict.fromkeys(RUN_STATUSES, 0)
            for status, count in conn.execute(
                select(reported, func.count()).select_from(RUNS).group_by(reported)
            ):
                counts[str(status)] = int(count)
            holds = self._hold_state_txn(conn)
            unknown = conn.execute(
                select(func.count()).select_from(STEPS).where(unknown_effect(STEPS))
            ).scalar()
            waits = conn.execute(
                select(func.count())
                .select_from(STEPS)
                .where(
                    STEPS.c.type.in_(("wait-until", "wait-for")),
                    STEPS.c.state.in_(("pending", "leased")),
                )
            ).scalar()
            oldest_due = conn.execute(
                select(func.min(STEPS.c.due_at)).where(STEPS.c.state == "pending")
            ).scalar()
            payloads = conn.execute(
                select(func.count(), func.min(RUNS.c.completed_at)).where(
                    settled(moment), RUNS.c.payload_erased_at.is_(None)
                )
            ).first()
            assert payloads is not None
            return StoreSummary(
                store=self.kind,
                database_id=control.database_id,
                schema_version=control.schema_version,
                active_package_digest=control.active_package_digest,
                active_revision=control.active_revision,
                restore_hold=control.restore_hold,
                admissions_hold=control.admissions_hold,
                restore_review=holds.restore_review,
                statuses=counts,
                unknown_effects=int(unknown or 0),
                waits=int(waits or 0),
                oldest_due_at=oldest_due,
                terminal_payloads=int(payloads[0] or 0),
                oldest_terminal_payload_at=payloads[1],
            )

        return self._transact(work, read_only=True)

    # -- admission ------------------------------------------------------------------------------

    def admit(self, admission: Admission, now: datetime) -> AdmissionResult:
        """The admission transaction (07 §6.1; 06 §5.1 step 10), in this order:

        admission lock; store identity and custody; the active package is the one this process
        serves (`command.activation-changed`); admission hold (`restore-admissions-held`),
        restore hold (`restore-hold`); an existing start identity answers that run when the
        input digest is the same (a replay, tombstones included) and
        `idempotency.key-reused` otherwise; the expected revision is the active one
        (`admission.revision-mismatch`); the caller's input problem; the live-binding check
        (`command.live-binding-conflict`); then the run (status `running`, cancel mode `none`,
        `deadlineAt = now + deadlineSeconds`) and its start record are inserted together.
        Concurrent admissions of one start identity resolve to one run.
        """
        moment = truncate_ms(now)
        first = admission.first_step
        if first.run_id != admission.run_id or first.state != "pending":
            raise StoreInvariantError("The start record must be a pending record of the run.")

        def work(conn: Connection) -> AdmissionResult:
            self._admission_lock_txn(conn)
            control = self._verify_txn(conn)
            if not self._serves_active_package(control):
                raise refuse("coordinator.command.activation-changed")
            if control.admissions_hold:
                raise refuse("coordinator.command.restore-admissions-held")
            if control.restore_hold:
                raise refuse("coordinator.command.restore-hold")
            existing = (
                conn.execute(select(RUNS).where(RUNS.c.start_identity == admission.start_identity))
                .mappings()
                .first()
            )
            if existing is not None:
                run = _run_from(existing)
                if run.input_digest != admission.input_digest:
                    raise refuse("idempotency.key-reused")
                return AdmissionResult(run, created=False)
            if (
                admission.expected_revision is not None
                and admission.expected_revision != control.active_revision
            ):
                raise refuse("admission.revision-mismatch")
            if admission.revision != control.active_revision:
                raise refuse("coordinator.command.activation-changed")
            if admission.input_problem is not None:
                raise admission.input_problem
            if not admission.bindings_ok(_unsettled_txn(conn, moment)):
                raise refuse("coordinator.command.live-binding-conflict")
            run = RunRow(
                run_id=admission.run_id,
                start_identity=admission.start_identity,
                input_digest=admission.input_digest,
                owner=admission.owner,
                origin=admission.origin,
                trigger=admission.trigger,
                workflow_id=admission.workflow_id,
                workflow_version=admission.workflow_version,
                revision=admission.revision,
                definition_digest=admission.definition_digest,
                binding_digest=admission.binding_digest,
                snapshot=admission.snapshot,
                input=admission.input,
                policy=dict(admission.policy),
                current_step=first.step,
                status="running",
                cancel_mode="none",
                cancel_requested=False,
                restore_review=False,
                outcome=None,
                terminal_output=None,
                failure_code=None,
                admitted_at=moment,
                deadline_at=moment + timedelta(seconds=admission.deadline_seconds),
                completed_at=None,
                payload_erased_at=None,
                updated_at=moment,
            )
            conn.execute(insert(RUNS).values(**asdict(run)))
            step_values = asdict(first) | dict.fromkeys(_LEASE_COLUMNS)
            conn.execute(insert(STEPS).values(**step_values))
            return AdmissionResult(run, created=True)

        try:
            return self._transact(work)
        except sa_exc.IntegrityError:
            # Only a concurrent admission of the same start identity can get here (the lock
            # serialises admissions); the retry finds and answers that run.
            return self._transact(work)

    # -- worker: claim, fences, finish ----------------------------------------------------------

    def claim_due_step(
        self,
        worker_id: str,
        now: datetime,
        lease_seconds: int = LEASE_SECONDS,
        *,
        recover: Recover,
        journal: Journal | None = None,
    ) -> Claim | None:
        """One claim transaction (07 §7.2), answering the leased record or None (idle):

        1. verify the store; claim nothing while the active package is not the one this process
           serves or a restore hold is set;
        2. recover at most one lapsed lease (`leased`, `leaseExpiresAt ≤ now`): the record is
           taken over under a new lease token (so the stale holder can no longer commit) and
           `recover(snapshot, "lease-lapsed")` writes T28/T29;
        3. expire at most one overdue record (the current record of an active run, `pending`,
           not pure, `deadlineAt ≤ now`): `recover(snapshot, "deadline-passed")` writes T26/T27;
        4. lease the first claimable record by (dueAt, runId, step): `pending`, due, run
           `running`/`cancel-requested`, not under restore review, payload not erased, cancel
           mode not `stopping` (except an `uncertain` call re-armed by `retry-same`), and not
           overdue unless pure (overdue ones are step 3's). Leasing sets `attempt += 1`,
           `claims += 1`, `state = leased`, `attemptStartedAt = now`, a new random lease token,
           `leaseExpiresAt = now + lease_seconds`, `dueAt = null`, `dispatched = false`,
           `awaiting = work` — exactly the engine's T2;
        5. `journal(claim)` (the attempt intent) runs before commit.

        The lease is taken with `UPDATE … WHERE key IN (SELECT … FOR UPDATE SKIP LOCKED LIMIT 1)
        RETURNING`, then the run is locked and re-checked, so two workers never hold one
        record. `recover` must not raise for a run's data problems (it would stall the sweep).
        """
        moment = truncate_ms(now)
        expires = moment + timedelta(seconds=lease_seconds)

        def work(conn: Connection) -> Claim | None:
            control = self._verify_txn(conn)
            if not self._serves_active_package(control) or control.restore_hold:
                return None
            self._recover_lapsed_txn(conn, control, worker_id, moment, expires, recover)
            self._expire_overdue_txn(conn, control, moment, recover)
            try:
                with conn.begin_nested():
                    claim = self._lease_due_txn(conn, worker_id, moment, expires)
            except _Retract:
                return None  # the recoveries above still commit
            if claim is not None and journal is not None:
                journal(claim)
            return claim

        return self._transact(work)

    def _recover_lapsed_txn(
        self,
        conn: Connection,
        control: ControlRow,
        worker_id: str,
        now: datetime,
        expires: datetime,
        recover: Recover,
    ) -> None:
        lapsed = lock_one(
            select(STEPS.c.run_id, STEPS.c.step)
            .where(STEPS.c.state == "leased", STEPS.c.lease_expires_at <= now)
            .order_by(STEPS.c.lease_expires_at, STEPS.c.run_id, STEPS.c.step)
            .limit(1),
            of=STEPS,
        )
        taken = conn.execute(
            update(STEPS)
            .where(tuple_(STEPS.c.run_id, STEPS.c.step).in_(lapsed))
            .values(
                lease_token=_new_token(),
                lease_owner=worker_id,
                lease_expires_at=expires,
                updated_at=now,
            )
            .returning(STEPS.c.run_id, STEPS.c.step)
        ).first()
        if taken is None:
            return
        snapshot = self._snapshot_txn(conn, control, taken[0], lock_run=True)
        if snapshot is None:  # pragma: no cover - records belong to runs (foreign key)
            return
        # A record the engine does not recover stays taken over until its new lease lapses,
        # so it is retried once per lease period instead of on every tick.
        self._decide_txn(conn, snapshot, lambda s: recover(s, "lease-lapsed"), now)

    def _expire_overdue_txn(
        self, conn: Connection, control: ControlRow, now: datetime, recover: Recover
    ) -> None:
        overdue = lock_one(
            select(STEPS.c.run_id, STEPS.c.step)
            .join(
                RUNS,
                and_(RUNS.c.run_id == STEPS.c.run_id, RUNS.c.current_step == STEPS.c.step),
            )
            .where(
                STEPS.c.state == "pending",
                not_(STEPS.c.pure),
                RUNS.c.deadline_at <= now,
                RUNS.c.status.in_(_SWEEPABLE_STATUSES),
            )
            .order_by(RUNS.c.deadline_at, STEPS.c.run_id, STEPS.c.step)
            .limit(1),
            of=STEPS,
        )
        found = conn.execute(
            update(STEPS)
            .where(tuple_(STEPS.c.run_id, STEPS.c.step).in_(overdue))
            .values(updated_at=now)
            .returning(STEPS.c.run_id, STEPS.c.step)
        ).first()
        if found is None:
            return
        snapshot = self._snapshot_txn(conn, control, found[0], lock_run=True)
        assert snapshot is not None
        self._decide_txn(conn, snapshot, lambda s: recover(s, "deadline-passed"), now)

    def _lease_due_txn(
        self, conn: Connection, worker_id: str, now: datetime, expires: datetime
    ) -> Claim | None:
        due = lock_one(
            select(STEPS.c.run_id, STEPS.c.step)
            .join(RUNS, RUNS.c.run_id == STEPS.c.run_id)
            .where(*_claimable(now))
            .order_by(STEPS.c.due_at, STEPS.c.run_id, STEPS.c.step)
            .limit(1),
            of=STEPS,
        )
        token = _new_token()
        leased = conn.execute(
            update(STEPS)
            .where(tuple_(STEPS.c.run_id, STEPS.c.step).in_(due))
            .values(
                state="leased",
                attempt=STEPS.c.attempt + 1,
                claims=STEPS.c.claims + 1,
                attempt_started_at=now,
                lease_expires_at=expires,
                lease_token=token,
                lease_owner=worker_id,
                due_at=None,
                dispatched=False,
                awaiting="work",
                updated_at=now,
            )
            .returning(STEPS.c.run_id, STEPS.c.step, STEPS.c.generation, STEPS.c.attempt)
        ).first()
        if leased is None:
            return None
        run_id, step, generation, attempt = leased
        # Lock the run (step → run order) and re-check with fresh reads: a cancel, restore hold
        # or review committed while the UPDATE ran must win (the claim is rolled back).
        control_row = conn.execute(select(CONTROL)).mappings().first()
        assert control_row is not None
        control = control_from(control_row)
        snapshot = self._snapshot_txn(conn, control, run_id, lock_run=True)
        assert snapshot is not None
        record = snapshot.step(step)
        run = snapshot.run
        if (
            control.restore_hold
            or record is None
            or run.current_step != step
            or run.restore_review
            or run.status not in _CLAIMABLE_STATUSES
            or run.payload_erased_at is not None
            or (run.cancel_mode == "stopping" and not (record.type == "call" and record.uncertain))
        ):
            raise _Retract
        return Claim(
            run_id=run_id,
            step=step,
            generation=generation,
            attempt=attempt,
            lease_token=token,
            lease_owner=worker_id,
            attempt_started_at=now,
            lease_expires_at=expires,
            snapshot=snapshot,
        )

    def _fence_txn(
        self, conn: Connection, claim: Claim, now: datetime, *, live: bool
    ) -> RunSnapshot:
        """Lock the claimed record only if the claim still holds it, then the run."""
        control = self._verify_txn(conn)
        if live and (control.restore_hold or not self._serves_active_package(control)):
            raise StaleLease("The store refuses mid-attempt fences now.")
        fence = [
            STEPS.c.run_id == claim.run_id,
            STEPS.c.step == claim.step,
            STEPS.c.generation == claim.generation,
            STEPS.c.attempt == claim.attempt,
            STEPS.c.lease_token == claim.lease_token,
            STEPS.c.state == "leased",
        ]
        if live:
            fence.append(STEPS.c.lease_expires_at > now)
        held = conn.execute(
            update(STEPS).where(*fence).values(updated_at=now).returning(STEPS.c.step)
        ).first()
        if held is None:
            raise StaleLease("The claim no longer holds its record.")
        snapshot = self._snapshot_txn(conn, control, claim.run_id, lock_run=True)
        assert snapshot is not None
        return snapshot

    def record_step_progress(self, claim: Claim, now: datetime, decide: Decide) -> RunSnapshot:
        """A mid-attempt fence (07 §7.2 freeze, pre-send): commits `decide`'s write only while
        the claim holds a live lease (`leaseExpiresAt > now`), no restore hold is set and the
        active package is still served; otherwise raises `StaleLease` and writes nothing.
        The frozen command is never replaced (only completed once with its preparation)."""
        moment = truncate_ms(now)

        def work(conn: Connection) -> RunSnapshot:
            snapshot = self._fence_txn(conn, claim, moment, live=True)
            return self._decide_txn(conn, snapshot, decide, moment)

        return self._transact(work)

    def complete_step(self, claim: Claim, now: datetime, decide: Decide) -> RunSnapshot:
        """The finish transaction (07 §7.2): commits `decide`'s write (record outcome, run
        status, next record of §5.1) only if (run, step, generation, attempt, lease token)
        still match a `leased` record; otherwise raises `StaleLease` and nothing (audit
        included) commits. An expired lease that nobody took over still finishes."""
        moment = truncate_ms(now)

        def work(conn: Connection) -> RunSnapshot:
            snapshot = self._fence_txn(conn, claim, moment, live=False)
            return self._decide_txn(conn, snapshot, decide, moment)

        return self._transact(work)

    # -- operator and API transitions -----------------------------------------------------------

    def request_cancel(
        self, run_id: uuid.UUID, now: datetime, decide: Decide
    ) -> RunSnapshot | None:
        """07 §8 (locks: step record, then run). A run that is `finished`, `cancelled`,
        `cancelled-after-effect` or `expired`, or already has `cancelRequested`, is answered
        unchanged without calling `decide`; otherwise `decide` applies the cancel table and its
        write must record `cancelRequested`. None when the run does not exist."""
        moment = truncate_ms(now)

        def work(conn: Connection) -> RunSnapshot | None:
            control = self._verify_txn(conn)
            snapshot = self._lock_run_txn(conn, control, run_id)
            if snapshot is None:
                return None
            if snapshot.run.status in TERMINAL_STATUSES or snapshot.run.cancel_requested:
                return snapshot
            write = decide(snapshot)
            if write is None:
                return snapshot
            if not write.run.cancel_requested or write.run.cancel_mode == "none":
                raise StoreInvariantError("A cancel must record cancelRequested.")
            return self._apply_txn(conn, snapshot, write, moment)

        return self._transact(work)

    def update_run(
        self,
        run_id: uuid.UUID,
        now: datetime,
        decide: Decide,
        *,
        admission_lock: bool = False,
    ) -> RunSnapshot | None:
        """Any other run transition of the API, in one transaction with the run locked
        (current step record, then run): `retry-same` (07 §9.1, `admission_lock=True`) and the
        `reconcile` commit (§9.2, whose decide re-checks generation, step, command and lease
        and raises `reconcile-raced`). None when the run does not exist."""
        moment = truncate_ms(now)

        def work(conn: Connection) -> RunSnapshot | None:
            if admission_lock:
                self._admission_lock_txn(conn)
            control = self._verify_txn(conn)
            snapshot = self._lock_run_txn(conn, control, run_id)
            if snapshot is None:
                return None
            return self._decide_txn(conn, snapshot, decide, moment)

        return self._transact(work)

    def advance_completion_waits(
        self, completion_ref: str, now: datetime, floor_seconds: int
    ) -> int:
        """07 §7.6: every `pending` `wait-for` record with this completion reference is made due
        at `max(now, lastObservedAt + floor)` (`now` if never observed) when that is earlier
        than its current `dueAt` and its `timeoutAt`. Leased records are left alone; nothing
        else changes. Answers the number of records moved."""
        moment = truncate_ms(now)
        floor = timedelta(seconds=floor_seconds)

        def work(conn: Connection) -> int:
            self._verify_txn(conn)
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
                target = (
                    moment if last_observed_at is None else max(moment, last_observed_at + floor)
                )
                if target >= due_at or (timeout_at is not None and target >= timeout_at):
                    continue
                conn.execute(
                    update(STEPS)
                    .where(
                        STEPS.c.run_id == run_id, STEPS.c.step == step, STEPS.c.state == "pending"
                    )
                    .values(due_at=target, updated_at=moment)
                )
                moved += 1
            return moved

        return self._transact(work)

    # -- holds (07 §12) -------------------------------------------------------------------------

    def set_restore_hold(self, now: datetime, review: Decide) -> HoldState:
        """07 §12 step 3, in one transaction (admission lock → control → records → runs):
        `restoreHold := true`, `admissionsHold := true`, evidence references cleared; then
        `review` (the engine's T33) runs for every run that is not settled or has a leased
        record, each locked in turn. Idempotent."""
        moment = truncate_ms(now)

        def work(conn: Connection) -> HoldState:
            self._admission_lock_txn(conn)
            self._verify_txn(conn)
            conn.execute(
                update(CONTROL).values(
                    restore_hold=True,
                    admissions_hold=True,
                    restore_evidence_ref=None,
                    admission_recovery_ref=None,
                )
            )
            control = self._verify_txn(conn)
            leased = (
                select(STEPS.c.step)
                .where(STEPS.c.run_id == RUNS.c.run_id, STEPS.c.state == "leased")
                .exists()
            )
            candidates = conn.execute(
                select(RUNS.c.run_id)
                .where(or_(not_(settled(moment)), leased))
                .order_by(RUNS.c.run_id)
            ).scalars()
            for run_id in list(candidates):
                snapshot = self._lock_run_txn(conn, control, run_id)
                if snapshot is not None:
                    self._decide_txn(conn, snapshot, review, moment)
            return self._hold_state_txn(conn)

        return self._transact(work)

    def release_restore_hold(self, evidence_ref: str) -> HoldState:
        """07 §12 step 6: clears `restoreHold` and records the (keyed) fencing-evidence
        reference; admissions and runs under review stay held. Idempotent."""

        def work(conn: Connection) -> HoldState:
            self._verify_txn(conn)
            conn.execute(
                update(CONTROL).values(restore_hold=False, restore_evidence_ref=evidence_ref)
            )
            return self._hold_state_txn(conn)

        return self._transact(work)

    def release_admission_hold(
        self,
        recovery_ref: str,
        *,
        admission_history_complete: bool,
        prior_deployment_fenced: bool,
    ) -> HoldState:
        """07 §12 step 7 / 06 §7.4: both attestations (`attestation-required`), the restore hold
        already released (`restore-hold`); then clears `admissionsHold` and records the (keyed)
        reference."""

        def work(conn: Connection) -> HoldState:
            self._admission_lock_txn(conn)
            control = self._verify_txn(conn)
            if not (admission_history_complete and prior_deployment_fenced):
                raise refuse("coordinator.command.attestation-required")
            if control.restore_hold:
                raise refuse("coordinator.command.restore-hold")
            conn.execute(
                update(CONTROL).values(admissions_hold=False, admission_recovery_ref=recovery_ref)
            )
            return self._hold_state_txn(conn)

        return self._transact(work)

    # -- retention (07 §13) ---------------------------------------------------------------------

    def erase_settled_before(self, before: datetime, limit: int, now: datetime) -> int:
        """07 §13: erase the payloads of at most `limit` settled runs with `completedAt <
        before`, oldest first by (completedAt, runId). Each run's records and the run are locked
        and eligibility re-checked; then snapshot, input, terminal output, commands and outputs
        become NULL and `payloadErasedAt := now`. The tombstone keeps everything else. Runs
        with an unknown effect, under review, or recoverable are never erased."""
        moment = truncate_ms(now)
        cutoff = truncate_ms(before)
        if limit < 1:
            raise ValueError("The retention limit must be positive.")

        def eligible(*only: Any) -> Any:
            return (
                select(RUNS.c.run_id)
                .where(
                    *only,
                    settled(moment),
                    RUNS.c.completed_at < cutoff,
                    RUNS.c.payload_erased_at.is_(None),
                )
                .order_by(RUNS.c.completed_at, RUNS.c.run_id)
            )

        def work(conn: Connection) -> int:
            self._verify_txn(conn)
            chosen = list(conn.execute(eligible().limit(limit)).scalars())
            erased = 0
            for run_id in chosen:
                conn.execute(lock_rows(select(STEPS.c.step).where(STEPS.c.run_id == run_id)))
                conn.execute(lock_rows(select(RUNS.c.run_id).where(RUNS.c.run_id == run_id)))
                if conn.execute(eligible(RUNS.c.run_id == run_id)).first() is None:
                    continue
                conn.execute(
                    update(STEPS)
                    .where(STEPS.c.run_id == run_id)
                    .values(command=None, output=None, updated_at=moment)
                )
                conn.execute(
                    update(RUNS)
                    .where(RUNS.c.run_id == run_id)
                    .values(
                        snapshot=None,
                        input=None,
                        terminal_output=None,
                        payload_erased_at=moment,
                        updated_at=moment,
                    )
                )
                erased += 1
            return erased

        return self._transact(work)


def _claimable(now: datetime) -> tuple[Any, ...]:
    """07 §7.2 step 4 (and step 5: an overdue non-pure record is expired, never leased)."""
    return (
        STEPS.c.state == "pending",
        STEPS.c.due_at <= now,
        RUNS.c.current_step == STEPS.c.step,
        RUNS.c.status.in_(_CLAIMABLE_STATUSES),
        not_(RUNS.c.restore_review),
        RUNS.c.payload_erased_at.is_(None),
        or_(RUNS.c.cancel_mode != "stopping", and_(STEPS.c.type == "call", STEPS.c.uncertain)),
        or_(STEPS.c.pure, RUNS.c.deadline_at > now),
    )


def _unsettled_txn(conn: Connection, now: datetime) -> frozenset[tuple[str, str]]:
    rows = conn.execute(
        select(RUNS.c.definition_digest, RUNS.c.binding_digest).where(not_(settled(now))).distinct()
    )
    return frozenset((str(row[0]), str(row[1])) for row in rows)


def _check_write(before: RunSnapshot, write: RunWrite) -> None:
    """The invariants every write keeps, whatever the transition (07 §1, §2.1, §5)."""
    old_run, new_run = before.run, write.run
    for name in _RUN_IMMUTABLE:
        if getattr(old_run, name) != getattr(new_run, name):
            raise StoreInvariantError(f"The run column {name} cannot change.")
    if old_run.cancel_requested and not new_run.cancel_requested:
        raise StoreInvariantError("cancelRequested is never cleared.")
    names = [record.step for record in write.steps]
    if len(set(names)) != len(names):
        raise StoreInvariantError("A write names a step record twice.")
    known = {record.step for record in before.steps} | set(names)
    if new_run.current_step not in known:
        raise StoreInvariantError("The run's current step has no record.")
    for record in write.steps:
        if record.run_id != old_run.run_id:
            raise StoreInvariantError("A step record belongs to another run.")
        old = before.step(record.step)
        if old is None:
            if record.state == "leased":
                raise StoreInvariantError("A new step record cannot be leased.")
            continue
        _check_record(old, record)


def _check_record(old: StepRow, new: StepRow) -> None:
    for name in _STEP_IMMUTABLE:
        if getattr(old, name) != getattr(new, name):
            raise StoreInvariantError(f"The step column {name} cannot change.")
    if new.state == "leased" and old.state != "leased":
        raise StoreInvariantError("Only a claim leases a record.")
    if new.generation < old.generation:
        raise StoreInvariantError("A record's generation never decreases.")
    if (old.sent and not new.sent) or (old.command_prepared and not new.command_prepared):
        raise StoreInvariantError("sent and commandPrepared are never cleared.")
    if old.command is not None and new.command != old.command:
        completing = not old.preparation_frozen and new.preparation_frozen and new.command
        if not completing:
            raise StoreInvariantError("A frozen command is never replaced.")
    if old.preparation_frozen and not new.preparation_frozen:
        raise StoreInvariantError("A frozen preparation is never removed.")
