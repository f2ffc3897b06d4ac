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

import hashlib
import secrets
import select as select_module
import threading
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any, Final, TypeVar

from sqlalchemy import (
    Integer,
    and_,
    bindparam,
    func,
    insert,
    literal_column,
    not_,
    or_,
    select,
    text,
    true,
    tuple_,
    update,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection, Engine

from coordinator_core.evolve import evolve
from coordinator_core.shell.store.dialect import (
    Prepared,
    StoreKind,
    StoreLocation,
    UTCDateTime,
    create_store_engine,
    from_epoch_ms,
    insert_ignoring,
    is_transient,
    is_unavailable,
    locate,
    lock_one,
    lock_rows,
    pipelined,
    read_engine,
    store_unavailable,
    to_epoch_ms,
    truncate_ms,
)
from coordinator_core.shell.store.guards import (
    ProcessLock,
    check_identity,
    check_ledger,
    check_runtime_role,
    control_from,
    namespace_state,
    read_ledger,
    refuse,
)
from coordinator_core.shell.store.queries import (
    reported_status,
    settled,
    unknown_effect,
)
from coordinator_core.shell.store.rows import (
    AdmissionResult,
    Claim,
    ControlRow,
    Decide,
    DecideEach,
    DeploymentIdentity,
    HoldState,
    NewRun,
    NextInstants,
    Recover,
    Recovery,
    RunPage,
    RunPosition,
    RunRow,
    RunSnapshot,
    RunWrite,
    StepRow,
    StoreSummary,
    Written,
)
from coordinator_core.shell.store.tables import (
    CONTROL,
    DEFINITIONS,
    LIVE_BINDINGS,
    RUN_STATUSES,
    RUNS,
    STEPS,
    TERMINAL_STATUSES,
)

__all__ = ["FIRE_BATCH", "LEASE_SECONDS", "StaleLease", "Store", "StoreInvariantError"]

T = TypeVar("T")

LEASE_SECONDS: Final = 15
"""07 §16: attempt budget (10 s) + 5 s."""
FIRE_BATCH: Final = 64
"""How many due waits `fire_due_waits` takes in one transaction at most."""

_ATTEMPTS: Final = 4
_LISTEN_TIMEOUT: Final = 60.0
"""How often the listener looks at its stop flag when nothing arrives (it is a daemon thread:
the process does not wait for it)."""
_LISTEN_RETRY_SECONDS: Final = 2.0
_BACKOFF_SECONDS: Final = (0.01, 0.05, 0.2)

_RUN_FIELDS: Final = tuple(field.name for field in fields(RunRow))
_CONTROL_COLUMNS: Final = tuple(column.name for column in CONTROL.c)
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


def _run_from(row: Mapping[Any, Any]) -> RunRow:
    values = {name: row[name] for name in _RUN_FIELDS}
    values["policy"] = dict(values["policy"] or {})
    return RunRow(**values)


def _step_from(row: Mapping[Any, Any]) -> StepRow:
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
        self._seen_control: tuple[tuple[Any, ...], ControlRow] | None = None
        self._sender = "from:" + secrets.token_hex(8)  # this store's own notifications

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
        """Run `work` in one transaction; retry only what is safe to retry, a bounded number of
        times: a transient driver error (the server rolled back), and a connection found dead
        before the commit was sent (nothing of the transaction can have committed; this is
        what replaces a pre-ping per transaction). A connection lost during the commit leaves
        its outcome unknown: `store-unavailable`, never a retry."""
        engine = self._reader if read_only else self._engine
        attempt = 0
        while True:
            attempt += 1
            committing = False
            try:
                with engine.connect() as conn:
                    transaction = conn.begin()
                    try:
                        result = work(conn)
                    except BaseException:
                        transaction.rollback()
                        raise
                    committing = True
                    transaction.commit()
                    return result
            except sa_exc.DBAPIError as error:
                if attempt < _ATTEMPTS and (
                    is_transient(error) or (error.connection_invalidated and not committing)
                ):
                    if not error.connection_invalidated:
                        time.sleep(_BACKOFF_SECONDS[attempt - 1])
                    continue
                if is_unavailable(error):
                    raise store_unavailable() from error
                raise

    def _verify_txn(self, conn: Connection) -> ControlRow:
        """07 §6.1 step 1 / §7.1: databaseId, schema version and key custody, checked in every
        verifying transaction (the PostgreSQL database name is checked on every connection,
        see dialect.create_store_engine)."""
        row = _CONTROL.first(conn)
        return self._verified(row)

    def _verified(self, row: Mapping[str, Any] | None, *, prefix: str = "") -> ControlRow:
        """The control row of `row` (its columns named `prefix` + name), checked to belong to
        this deployment (`check_identity`). Every transaction reads it; the last one checked
        is kept with the values it was built from, so an unchanged row is not checked again."""
        if row is None:
            return check_identity(None, self._identity)
        values = tuple(row[prefix + name] for name in _CONTROL_COLUMNS)
        seen = self._seen_control
        if seen is not None and seen[0] == values:
            return seen[1]
        control = check_identity(
            control_from(dict(zip(_CONTROL_COLUMNS, values, strict=True))), self._identity
        )
        self._seen_control = (values, control)
        return control

    def may_claim(self, control: ControlRow) -> bool:
        """Whether a worker may lease records now: the active package is the one this process
        serves and no restore hold is set (a claim, and a continuation, check it)."""
        return self._serves_active_package(control) and not control.restore_hold

    def _serves_active_package(self, control: ControlRow) -> bool:
        expected = self._identity.package_digest
        return expected is None or control.active_package_digest == expected

    def _admission_control_txn(self, conn: Connection) -> ControlRow:
        """The admission lock and the store check in one statement: the control row read
        `FOR SHARE` (PostgreSQL), so admissions run side by side while every writer of the
        control row (holds, activation) waits for them and excludes them; on SQLite the
        transaction's `BEGIN IMMEDIATE` already is the lock."""
        statement = _CONTROL_SHARED if self._location.kind == "postgresql" else _CONTROL
        return self._verified(statement.first(conn))

    def _control_lock_txn(self, conn: Connection) -> None:
        """The exclusive side of the admission lock: the holds and releases take the control
        row `FOR UPDATE` (PostgreSQL), after every admission in flight has committed."""
        if self._location.kind == "postgresql":
            _CONTROL_EXCLUSIVE.run(conn, {})

    def _snapshot_txn(
        self, conn: Connection, control: ControlRow, run_id: uuid.UUID, *, lock_run: bool
    ) -> RunSnapshot | None:
        run = (_RUN_LOCKED if lock_run else _RUN_READ).first(conn, {"run_id": run_id})
        if run is None:
            return None
        steps = _STEPS_OF.rows(conn, {"run_id": run_id})
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
        self,
        conn: Connection,
        before: RunSnapshot,
        write: RunWrite,
        now: datetime,
        *,
        lease: _Lease | None = None,
        held: Claim | None = None,
    ) -> Written:
        """Write a transition after checking its invariants; answer the snapshot as written
        (computed, not read back) and the claim on the record the write leaves leased.

        The engine decides which record is leased; the store owns the fence columns: a record
        that becomes `leased` gets a new random token, `lease` (owner and expiry) and a claim;
        the record `held` by the caller keeps its token; every other record has none."""
        _check_write(before, write, may_lease=lease is not None, held=held)
        run = before.run
        if write.run != before.run:
            run = evolve(write.run, updated_at=now)
            values = {f"v_{name}": getattr(run, name) for name in _RUN_MUTABLE}
            _UPDATE_RUN.run(conn, values | {"k_run": run.run_id})
        steps = {record.step: record for record in before.steps}
        leased: str | None = None
        inserts: list[dict[str, Any]] = []
        for written in write.steps:
            old = before.step(written.step)
            if written.state == "leased" and (old is None or old.state != "leased"):
                assert lease is not None
                record = evolve(
                    written,
                    lease_token=_new_token(),
                    lease_owner=lease.owner,
                    lease_expires_at=lease.expires,
                    updated_at=now,
                )
                leased = record.step
            elif written.state == "leased":
                assert old is not None
                record = evolve(
                    written,
                    lease_token=old.lease_token,
                    lease_owner=old.lease_owner,
                    lease_expires_at=old.lease_expires_at,
                    updated_at=now,
                )
            else:
                record = evolve(
                    written,
                    lease_token=None,
                    lease_owner=None,
                    lease_expires_at=None,
                    updated_at=now,
                )
            steps[record.step] = record
            if old is None:
                inserts.append({name: getattr(record, name) for name in _STEP_FIELDS})
            else:
                values = {f"v_{name}": getattr(record, name) for name in _STEP_MUTABLE}
                _UPDATE_STEP.run(conn, values | {"k_run": run.run_id, "k_step": record.step})
        if inserts:
            _insert_steps(conn, inserts)
        ordered = tuple(sorted(steps.values(), key=lambda row: (row.entered_at, row.step)))
        after = RunSnapshot(before.control, run, ordered)
        if leased is not None:
            row = after.step(leased)
            assert row is not None
            return Written(after, _claim_of(row, after))
        if held is not None:
            kept = after.step(held.step)
            if kept is not None and kept.state == "leased" and kept.lease_token == held.lease_token:
                return Written(after, evolve(held, snapshot=after))
        return Written(after, None)

    def _decide_txn(
        self, conn: Connection, snapshot: RunSnapshot, decide: Decide, now: datetime
    ) -> RunSnapshot:
        write = decide(snapshot)
        if write is None:
            return snapshot
        return self._apply_txn(conn, snapshot, write, now).snapshot

    # -- wake-ups across processes (07 §7.7 item 4) --------------------------------------------

    @property
    def wake_channel(self) -> str | None:
        """The PostgreSQL notification channel of this store (named by its namespace), or None
        on SQLite, where one process holds the store."""
        namespace = self._location.namespace
        if self._location.kind != "postgresql" or namespace is None:
            return None
        return "coordinator_due_" + hashlib.sha256(namespace.encode()).hexdigest()[:24]

    def _notify_txn(self, conn: Connection) -> None:
        """`NOTIFY` the store's channel; delivered when (and only if) the transaction commits,
        to the other processes (this store's own listener ignores it: every change made here
        also rings this process's loops)."""
        channel = self.wake_channel
        if channel is not None:
            _NOTIFY_AT.run(conn, {"channel": channel, "payload": self._sender})

    def announce(self, instant: datetime) -> None:
        """PostgreSQL: tell the other processes that a record this one wrote falls due at
        `instant`, so that their idle loops wake then rather than at the instant they knew
        (07 §7.7 item 4). One short transaction, sent only for an instant earlier than the one
        this process knew (`Wakeup.schedule`): never on the path of a parked run. Nothing on
        SQLite."""
        channel = self.wake_channel
        if channel is None:
            return
        payload = {"channel": channel, "payload": str(to_epoch_ms(instant))}
        self._transact(lambda conn: _NOTIFY_AT.run(conn, payload))

    def listen(
        self,
        ring: Callable[[], None],
        stop: threading.Event,
        schedule: Callable[[datetime], object] | None = None,
    ) -> threading.Thread | None:
        """PostgreSQL: a daemon thread that `LISTEN`s on the store's channel on a connection of
        its own and calls `ring` for every notification of a record claimable now (another
        process admitted or re-armed a run) and `schedule(instant)` for one of a record due
        later (`announce`; `ring` without `schedule`), reconnecting after a failure. It waits
        on the connection's socket, so an idle listener does not wake; it ends within
        `_LISTEN_TIMEOUT` after `stop` is set. None on SQLite."""
        channel = self.wake_channel
        if channel is None:
            return None
        thread = threading.Thread(
            target=self._listen_loop,
            args=(channel, ring, schedule, stop),
            name="store-listen",
            daemon=True,
        )
        thread.start()
        return thread

    def _listen_loop(
        self,
        channel: str,
        ring: Callable[[], None],
        schedule: Callable[[datetime], object] | None,
        stop: threading.Event,
    ) -> None:
        own = self._sender.encode()
        while not stop.is_set():
            try:
                pooled = self._engine.raw_connection()
                driver: Any = pooled.driver_connection
                pooled.detach()  # this connection is the listener's own from now on
                try:
                    driver.rollback()
                    driver.autocommit = True
                    driver.execute(f'LISTEN "{channel}"')
                    ring()  # whatever was announced before the LISTEN is looked for now
                    # libpq directly: psycopg's `notifies()` wakes every 0.1 s to look for
                    # interrupts, which an idle service would pay for all day.
                    pgconn = driver.pgconn
                    while not stop.is_set():
                        readable, _, _ = select_module.select(
                            [pgconn.socket], [], [], _LISTEN_TIMEOUT
                        )
                        if not readable:
                            continue
                        pgconn.consume_input()  # raises once the connection is gone
                        while (notice := pgconn.notifies()) is not None:
                            payload = bytes(notice.extra)
                            if payload != own:
                                _announced(payload, ring, schedule)
                finally:
                    pooled.close()
            except Exception:  # the store went away: try again shortly (polling covers it)
                stop.wait(_LISTEN_RETRY_SECONDS)

    def next_instants(self, now: datetime) -> NextInstants:
        """07 §7.7 item 4: when an idle worker must look again, from one read (three index
        probes: `ix_steps_due`, `ix_steps_lease`, `ix_runs_deadline_live`); nothing while the
        active package is not this process's or a restore hold is set (a hold's release, like
        every change that makes a record claimable now, rings)."""
        moment = truncate_ms(now)

        def work(conn: Connection) -> NextInstants:
            row = _NEXT.first(conn, {"now": moment})
            control = self._verified(row, prefix="c_")
            if row is None or not self.may_claim(control):
                return NextInstants()
            return NextInstants(row["due_at"], row["lapses_at"], row["overdue_at"])

        return self._transact(work, read_only=True)

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
        """The sealed snapshot stored for `definition_digest` and the run whose scope seals it
        (07 §10): the copy stored once per digest, else (runs admitted before schema version
        2) some run's own copy whose payload is not erased; None when there is none."""

        def work(conn: Connection) -> tuple[uuid.UUID, bytes] | None:
            found = _DEFINITION.first(conn, {"digest": definition_digest})
            row = None if found is None else (found["run_id"], found["snapshot"])
            if row is None:
                row = conn.execute(
                    select(RUNS.c.run_id, RUNS.c.snapshot)
                    .where(
                        RUNS.c.definition_digest == definition_digest,
                        RUNS.c.snapshot.is_not(None),
                    )
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

    def admit(self, admission: NewRun, now: datetime, *, announce: bool = True) -> AdmissionResult:
        """The admission transaction (07 §6.1; 06 §5.1 step 10), in this order:

        admission lock; store identity and custody; the active package is the one this process
        serves (`command.activation-changed`); admission hold (`restore-admissions-held`),
        restore hold (`restore-hold`); an existing start identity answers that run when the
        input digest is the same (a replay, tombstones included) and
        `idempotency.key-reused` otherwise; the expected revision is the active one
        (`admission.revision-mismatch`); the caller's input problem; the live-binding check
        (`command.live-binding-conflict`); then the run (status `running`, cancel mode `none`,
        `deadlineAt = now + deadlineSeconds`) and its start record are inserted together.
        Concurrent admissions of one start identity resolve to one run. Without `announce`
        the other processes are not notified (an idle loop of this one takes the run).
        """
        moment = truncate_ms(now)
        first = admission.first_step
        if first.run_id != admission.run_id or first.state != "pending":
            raise StoreInvariantError("The start record must be a pending record of the run.")

        def work(conn: Connection) -> AdmissionResult:
            control = self._admission_control_txn(conn)
            if not self._serves_active_package(control):
                raise refuse("coordinator.command.activation-changed")
            if control.admissions_hold:
                raise refuse("coordinator.command.restore-admissions-held")
            if control.restore_hold:
                raise refuse("coordinator.command.restore-hold")
            # An existing start identity is answered before every check below. The common
            # case has none, so it is looked up first only when a check would refuse; then
            # the run's own INSERT finds it (ON CONFLICT DO NOTHING answers no row).
            refusal: Exception | None = None
            if (
                admission.expected_revision is not None
                and admission.expected_revision != control.active_revision
            ):
                refusal = refuse("admission.revision-mismatch")
            elif admission.revision != control.active_revision:
                refusal = refuse("coordinator.command.activation-changed")
            elif admission.input_problem is not None:
                refusal = admission.input_problem
            pairs: frozenset[tuple[str, str]] = frozenset()
            if refusal is None:
                pairs = frozenset(
                    (str(row["definition_digest"]), str(row["binding_digest"]))
                    for row in _LIVE_PAIRS.rows(conn)
                )
                if not admission.bindings_ok(pairs) and not admission.bindings_ok(
                    _unsettled_txn(conn, moment)
                ):
                    refusal = refuse("coordinator.command.live-binding-conflict")
            if refusal is not None:
                replay = self._replay_txn(conn, admission)
                if replay is not None:
                    return replay
                raise refusal
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
                snapshot=None,
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
            inserted = _INSERT_RUN[self._location.kind].first(
                conn, {name: getattr(run, name) for name in _RUN_FIELDS}
            )
            if inserted is None:  # the start identity exists: answer that run
                replay = self._replay_txn(conn, admission)
                assert replay is not None
                return replay
            pair = (admission.definition_digest, admission.binding_digest)
            if pair not in pairs:
                _INSERT_LIVE_PAIR[self._location.kind].run(
                    conn,
                    {
                        "definition_digest": pair[0],
                        "binding_digest": pair[1],
                        "first_admitted_at": moment,
                    },
                )
            if admission.snapshot is not None:
                _INSERT_DEFINITION[self._location.kind].run(
                    conn,
                    {
                        "definition_digest": admission.definition_digest,
                        "run_id": admission.run_id,
                        "snapshot": admission.snapshot,
                        "stored_at": moment,
                    },
                )
            step = evolve(first, lease_token=None, lease_owner=None, lease_expires_at=None)
            _INSERT_STEP.run(conn, {name: getattr(step, name) for name in _STEP_FIELDS})
            if announce:
                self._notify_txn(conn)
            return AdmissionResult(run, created=True, steps=(step,), control=control)

        return self._transact(work)

    def _replay_txn(self, conn: Connection, admission: NewRun) -> AdmissionResult | None:
        """The run admitted under the admission's start identity (a replay, tombstones
        included, when the input digest is the same; `idempotency.key-reused` otherwise), or
        None when there is none."""
        existing = _RUN_BY_START.first(conn, {"start_identity": admission.start_identity})
        if existing is None:
            return None
        run = _run_from(existing)
        if run.input_digest != admission.input_digest:
            raise refuse("idempotency.key-reused")
        return AdmissionResult(run, created=False)

    # -- worker: claim, sweep, fences, finish -----------------------------------------------

    def claim_due_step(
        self,
        worker_id: str,
        now: datetime,
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

        The sweeps (lapsed leases, overdue records) are not part of the claim: see `sweep`.
        """
        moment = truncate_ms(now)
        lease = _Lease(worker_id, moment + timedelta(seconds=lease_seconds))

        def work(conn: Connection) -> Written | None:
            due = _DUE.first(conn, {"now": moment})
            if due is None:
                return None  # nothing claimed, so no gate applies (an idle poll is one query)
            control = self._verified(due, prefix="c_")
            if not self.may_claim(control):
                return None
            run = _run_from(due)
            steps = _STEPS_OF.rows(conn, {"run_id": run.run_id})
            snapshot = RunSnapshot(control, run, tuple(_step_from(step) for step in steps))
            write = decide(snapshot)
            if write is None:
                return None
            return self._apply_txn(conn, snapshot, write, moment, lease=lease)

        return self._transact(work)

    def fire_due_waits(
        self, now: datetime, decide: DecideEach, *, limit: int = FIRE_BATCH
    ) -> tuple[int, tuple[RunSnapshot, ...]]:
        """Due waits in one transaction (issue 9: a thousand runs due at one instant): up to
        `limit` claimable `wait-until` records due at `now`, in claim order, locked with their
        runs `FOR UPDATE SKIP LOCKED` as a claim locks its record; verify the store, claim
        nothing while the active package is not this process's or a restore hold is set; read
        each run's records; `decide` is the engine, once for them all (a claim of pure work
        only, `claim_record(..., pure_only=True)`: T18 and what follows it up to the first
        record that needs I/O, left pending and due), and the store writes each decision. No
        record is leased here (a write that leases one is refused), so what follows each wait
        is claimed as usual. Answers how many records were taken and the runs as written."""
        moment = truncate_ms(now)

        def work(conn: Connection) -> tuple[int, tuple[RunSnapshot, ...]]:
            control = self._verify_txn(conn)
            if not self.may_claim(control):
                return 0, ()
            runs = [
                _run_from(due) for due in _WAITS_DUE.rows(conn, {"now": moment, "limit": limit})
            ]
            if not runs:
                return 0, ()
            records = _STEPS_OF.rows_of_each(conn, [{"run_id": run.run_id} for run in runs])
            snapshots = [
                RunSnapshot(control, run, tuple(_step_from(row) for row in rows))
                for run, rows in zip(runs, records, strict=True)
            ]
            writes = decide(snapshots)
            with pipelined(conn):  # the batch's writes in one round trip on PostgreSQL
                written = tuple(
                    self._apply_txn(conn, snapshot, write, moment).snapshot
                    for snapshot, write in zip(snapshots, writes, strict=True)
                    if write is not None
                )
            return len(snapshots), written

        return self._transact(work)

    def sweep(
        self,
        worker_id: str,
        now: datetime,
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
        moment = truncate_ms(now)
        expires = moment + timedelta(seconds=lease_seconds)
        handled = 0
        for kind in ("lease-lapsed", "deadline-passed"):
            for _ in range(limit):
                found = self._transact(
                    lambda conn, kind=kind: self._sweep_one_txn(  # type: ignore[misc]
                        conn, kind, worker_id, moment, expires, recover
                    )
                )
                if not found:
                    break
                handled += 1
        return handled

    def _sweep_one_txn(
        self,
        conn: Connection,
        kind: Recovery,
        worker_id: str,
        now: datetime,
        expires: datetime,
        recover: Recover,
    ) -> bool:
        control = self._verify_txn(conn)
        if not self._serves_active_package(control) or control.restore_hold:
            return False
        if kind == "lease-lapsed":
            taken = _TAKE_LAPSED.first(
                conn, {"now": now, "expires": expires, "owner": worker_id, "token": _new_token()}
            )
        else:
            taken = _TOUCH_OVERDUE.first(conn, {"now": now})
        if taken is None:
            return False
        snapshot = self._snapshot_txn(conn, control, taken["run_id"], lock_run=True)
        if snapshot is None:  # pragma: no cover - records belong to runs (foreign key)
            return False
        # A lapsed record the engine does not recover stays taken over until its new lease
        # lapses, so it is retried once per lease period instead of on every sweep.
        self._decide_txn(conn, snapshot, lambda s: recover(s, kind), now)
        return True

    def _fence_txn(
        self, conn: Connection, claim: Claim, now: datetime, *, live: bool
    ) -> RunSnapshot:
        """Lock the claimed record only if the claim still holds it (reading it whole) and the
        run, with the control row, in one statement (PostgreSQL locks the rows in the order of
        the FROM list: the record, then the run, 07 §6.1); the snapshot is the claim's own
        with the leased record and the run's columns that others may change (a cancel, a
        restore review) read fresh, so the store's invariants are checked against what is
        stored even for a caller holding an older copy of its claim."""
        fence = {
            "k_run": claim.run_id,
            "k_step": claim.step,
            "generation": claim.generation,
            "attempt": claim.attempt,
            "token": claim.lease_token,
        }
        row = _FENCE_LIVE.first(conn, fence | {"now": now}) if live else _FENCE.first(conn, fence)
        if row is None:
            raise StaleLease("The claim no longer holds its record.")
        control = self._verified(row, prefix="c_")
        if live and (control.restore_hold or not self._serves_active_package(control)):
            raise StaleLease("The store refuses mid-attempt fences now.")
        cached = claim.snapshot
        fresh = {name: row[f"r_{name}"] for name in _RUN_FRESH}
        record = _step_from(row)
        steps = tuple(record if step.step == record.step else step for step in cached.steps)
        return RunSnapshot(control, evolve(cached.run, **fresh), steps)

    def record_step_progress(self, claim: Claim, now: datetime, decide: Decide) -> Written:
        """A mid-attempt fence (07 §7.2 freeze, pre-send): commits `decide`'s write only while
        the claim holds a live lease (`leaseExpiresAt > now`), no restore hold is set and the
        active package is still served; otherwise raises `StaleLease` and writes nothing.
        The frozen command is never replaced (only completed once with its preparation).
        Answers the run as written and the claim as it now stands (the same fence), or no
        claim when the write ended the attempt (a pre-send refusal)."""
        moment = truncate_ms(now)

        def work(conn: Connection) -> Written:
            snapshot = self._fence_txn(conn, claim, moment, live=True)
            write = decide(snapshot)
            if write is None:
                return Written(snapshot, evolve(claim, snapshot=snapshot))
            return self._apply_txn(conn, snapshot, write, moment, held=claim)

        return self._transact(work)

    def complete_step(
        self,
        claim: Claim,
        now: datetime,
        decide: Decide,
        lease_seconds: int = LEASE_SECONDS,
    ) -> Written:
        """The finish transaction (07 §7.2): commits `decide`'s write (record outcome, run
        status, next record of §5.1) only if (run, step, generation, attempt, lease token)
        still match a `leased` record; otherwise raises `StaleLease` and nothing (audit
        included) commits. An expired lease that nobody took over still finishes.

        The write may carry the run on (07 §7.7 item 1): when it leaves the run's next record
        leased, that record gets a fresh lease for the same owner and `Written.claim` is the
        claim the loop goes on with, without a claim transaction."""
        moment = truncate_ms(now)
        lease = _Lease(claim.lease_owner, moment + timedelta(seconds=lease_seconds))

        def work(conn: Connection) -> Written:
            snapshot = self._fence_txn(conn, claim, moment, live=False)
            write = decide(snapshot)
            if write is None:
                return Written(snapshot, None)
            return self._apply_txn(
                conn,
                snapshot,
                write,
                moment,
                lease=lease if self.may_claim(snapshot.control) else None,
            )

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
            self._notify_txn(conn)
            return self._apply_txn(conn, snapshot, write, moment).snapshot

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
            control = (
                self._admission_control_txn(conn) if admission_lock else self._verify_txn(conn)
            )
            snapshot = self._lock_run_txn(conn, control, run_id)
            if snapshot is None:
                return None
            after = self._decide_txn(conn, snapshot, decide, moment)
            if after is not snapshot:
                self._notify_txn(conn)
            return after

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
            if moved:
                self._notify_txn(conn)
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
            self._control_lock_txn(conn)
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
            self._notify_txn(conn)
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
            self._control_lock_txn(conn)
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


# -- statements built once (the compiled cache serves every later use) ------------------------

_NOW = bindparam("now", type_=UTCDateTime())
_RUN_MUTABLE: Final = tuple(name for name in _RUN_FIELDS if name not in _RUN_IMMUTABLE)
_STEP_MUTABLE: Final = tuple(name for name in _STEP_FIELDS if name not in ("run_id", "step"))
_RUN_FRESH: Final = (
    "status",
    "current_step",
    "cancel_mode",
    "cancel_requested",
    "restore_review",
    "outcome",
    "terminal_output",
    "failure_code",
    "completed_at",
    "payload_erased_at",
    "updated_at",
)
"""The run columns that another transaction may change while a worker holds a lease (a
cancel, a restore review): every fence reads them fresh; the rest of the run is the claim's."""

_CONTROL: Final = Prepared(select(CONTROL))
_CONTROL_SHARED: Final = Prepared(select(CONTROL).with_for_update(read=True))
_RUN_BY_START: Final = Prepared(
    select(RUNS).where(RUNS.c.start_identity == bindparam("start_identity"))
)
_DEFINITION: Final = Prepared(
    select(DEFINITIONS.c.run_id, DEFINITIONS.c.snapshot).where(
        DEFINITIONS.c.definition_digest == bindparam("digest")
    )
)
_INSERT_RUN: Final = {
    kind: Prepared(
        insert_ignoring(RUNS, kind, on=("start_identity",)).returning(RUNS.c.run_id),
        column_keys=_RUN_FIELDS,
    )
    for kind in ("postgresql", "sqlite")
}
"""A run's row; none is inserted (and no row answered) when its start identity exists."""
_INSERT_STEP: Final = Prepared(insert(STEPS), column_keys=_STEP_FIELDS)
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
_CONTROL_EXCLUSIVE: Final = Prepared(select(CONTROL.c.id).with_for_update())
_RUN_SELECT: Final = select(RUNS).where(RUNS.c.run_id == bindparam("run_id"))
_RUN_READ: Final = Prepared(_RUN_SELECT)
_RUN_LOCKED: Final = Prepared(lock_rows(_RUN_SELECT))
_STEPS_OF: Final = Prepared(
    select(STEPS)
    .where(STEPS.c.run_id == bindparam("run_id"))
    .order_by(STEPS.c.entered_at, STEPS.c.step)
)
_UPDATE_RUN: Final = Prepared(
    update(RUNS)
    .where(RUNS.c.run_id == bindparam("k_run"))
    .values({name: bindparam(f"v_{name}", type_=RUNS.c[name].type) for name in _RUN_MUTABLE})
)
_UPDATE_STEP: Final = Prepared(
    update(STEPS)
    .where(STEPS.c.run_id == bindparam("k_run"), STEPS.c.step == bindparam("k_step"))
    .values({name: bindparam(f"v_{name}", type_=STEPS.c[name].type) for name in _STEP_MUTABLE})
)
_FENCE_WHERE: Final = (
    STEPS.c.run_id == bindparam("k_run"),
    STEPS.c.step == bindparam("k_step"),
    STEPS.c.generation == bindparam("generation"),
    STEPS.c.attempt == bindparam("attempt"),
    STEPS.c.lease_token == bindparam("token"),
    STEPS.c.state == "leased",
)
_FENCE_SELECT: Final = (
    select(
        *STEPS.c,
        *(column.label(f"c_{column.name}") for column in CONTROL.c),
        *(RUNS.c[name].label(f"r_{name}") for name in _RUN_FRESH),
    )
    .select_from(STEPS.join(RUNS, RUNS.c.run_id == STEPS.c.run_id).join(CONTROL, true()))
    .where(*_FENCE_WHERE)
)
_FENCE: Final = Prepared(lock_rows(_FENCE_SELECT, of=(STEPS, RUNS)))
_FENCE_LIVE: Final = Prepared(
    lock_rows(_FENCE_SELECT.where(STEPS.c.lease_expires_at > _NOW), of=(STEPS, RUNS))
)
"""The fence: the claimed record (whole) only while the claim holds it, the run's columns
that others change, and the control row; the record and the run are locked."""


_INSERT_STEPS: dict[int, Prepared] = {1: _INSERT_STEP}


def _insert_steps(conn: Connection, rows: list[dict[str, Any]]) -> None:
    """Insert records in one statement (a continuation inserts a few at once: one multi-row
    `INSERT` costs less than the driver's batch protocol)."""
    count = len(rows)
    statement = _INSERT_STEPS.get(count)
    if statement is None:
        statement = Prepared(
            insert(STEPS).values(
                [
                    {
                        name: bindparam(f"{name}_{index}", type_=STEPS.c[name].type)
                        for name in _STEP_FIELDS
                    }
                    for index in range(count)
                ]
            )
        )
        _INSERT_STEPS[count] = statement
    if count == 1:
        statement.run(conn, rows[0])
        return
    statement.run(
        conn,
        {f"{name}_{index}": value for index, row in enumerate(rows) for name, value in row.items()},
    )


def _fixed(text_value: str) -> Any:
    """A constant rendered into the statement text (never a parameter), so that the planner
    matches the partial indexes (`state = 'pending'`, …) even under a generic plan of a
    prepared statement."""
    return literal_column("'" + text_value.replace("'", "''") + "'")


def _among(column: Any, values: tuple[str, ...]) -> Any:
    return column.in_([_fixed(value) for value in values])


def _claimable(now: Any, *, due: bool = True) -> tuple[Any, ...]:
    """07 §7.2 step 4 (and step 5: an overdue non-pure record is expired, never leased);
    without `due`, whatever its due instant (what may become claimable later)."""
    return (
        STEPS.c.state == _fixed("pending"),
        *((STEPS.c.due_at <= now,) if due else ()),
        RUNS.c.current_step == STEPS.c.step,
        _among(RUNS.c.status, _CLAIMABLE_STATUSES),
        not_(RUNS.c.restore_review),
        RUNS.c.payload_erased_at.is_(None),
        or_(RUNS.c.cancel_mode != "stopping", and_(STEPS.c.type == "call", STEPS.c.uncertain)),
        or_(STEPS.c.pure, RUNS.c.deadline_at > now),
    )


_DUE: Final = Prepared(
    select(*RUNS.c, *(column.label(f"c_{column.name}") for column in CONTROL.c))
    .select_from(STEPS.join(RUNS, RUNS.c.run_id == STEPS.c.run_id).join(CONTROL, true()))
    .where(*_claimable(_NOW))
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
    .where(*_claimable(_NOW), STEPS.c.type == _fixed("wait-until"))
    .order_by(STEPS.c.due_at, STEPS.c.run_id, STEPS.c.step)
    .limit(bindparam("limit", type_=Integer))
    .with_for_update(skip_locked=True, of=(STEPS, RUNS)),
    planned_each_time=True,
)
"""The claimable `wait-until` records due now, in claim order (`fire_due_waits`), locked like
the claim's record."""
_NEXT: Final = Prepared(
    select(
        select(STEPS.c.due_at)
        .select_from(STEPS.join(RUNS, RUNS.c.run_id == STEPS.c.run_id))
        .where(*_claimable(_NOW, due=False))
        .order_by(STEPS.c.due_at, STEPS.c.run_id, STEPS.c.step)
        .limit(1)
        .scalar_subquery()
        .label("due_at"),
        select(STEPS.c.lease_expires_at)
        .where(STEPS.c.state == _fixed("leased"))
        .order_by(STEPS.c.lease_expires_at, STEPS.c.run_id, STEPS.c.step)
        .limit(1)
        .scalar_subquery()
        .label("lapses_at"),
        select(RUNS.c.deadline_at)
        .select_from(
            STEPS.join(
                RUNS, and_(RUNS.c.run_id == STEPS.c.run_id, RUNS.c.current_step == STEPS.c.step)
            )
        )
        .where(
            STEPS.c.state == _fixed("pending"),
            not_(STEPS.c.pure),
            _among(RUNS.c.status, _SWEEPABLE_STATUSES),
        )
        .order_by(RUNS.c.deadline_at, STEPS.c.run_id, STEPS.c.step)
        .limit(1)
        .scalar_subquery()
        .label("overdue_at"),
        *(column.label(f"c_{column.name}") for column in CONTROL.c),
    ).select_from(CONTROL),
    planned_each_time=True,
)
"""`next_instants`: the claim's, the lapsed-lease sweep's and the overdue sweep's first
candidates, whatever their instant (each the first entry of its ordered index), with the
control row."""
_NOTIFY_AT: Final = Prepared(text("SELECT pg_notify(:channel, :payload)"))
_TAKE_LAPSED: Final = Prepared(
    update(STEPS)
    .where(
        tuple_(STEPS.c.run_id, STEPS.c.step).in_(
            lock_one(
                select(STEPS.c.run_id, STEPS.c.step)
                .where(STEPS.c.state == _fixed("leased"), STEPS.c.lease_expires_at <= _NOW)
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
                    STEPS.c.state == _fixed("pending"),
                    not_(STEPS.c.pure),
                    RUNS.c.deadline_at <= _NOW,
                    _among(RUNS.c.status, _SWEEPABLE_STATUSES),
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


@dataclass(frozen=True, slots=True)
class _Lease:
    owner: str
    expires: datetime


def _claim_of(record: StepRow, snapshot: RunSnapshot) -> Claim:
    assert record.lease_token is not None and record.lease_owner is not None
    assert record.attempt_started_at is not None and record.lease_expires_at is not None
    return Claim(
        run_id=record.run_id,
        step=record.step,
        generation=record.generation,
        attempt=record.attempt,
        lease_token=record.lease_token,
        lease_owner=record.lease_owner,
        attempt_started_at=record.attempt_started_at,
        lease_expires_at=record.lease_expires_at,
        snapshot=snapshot,
    )


def _unsettled_txn(conn: Connection, now: datetime) -> frozenset[tuple[str, str]]:
    """The (definition digest, binding digest) pairs some run not settled at `now` still has:
    the recorded pairs (a handful), each kept when one such run exists (an index probe)."""
    pairs = select(LIVE_BINDINGS.c.definition_digest, LIVE_BINDINGS.c.binding_digest).where(
        select(RUNS.c.run_id)
        .where(
            RUNS.c.definition_digest == LIVE_BINDINGS.c.definition_digest,
            RUNS.c.binding_digest == LIVE_BINDINGS.c.binding_digest,
            not_(settled(now)),
        )
        .exists()
    )
    return frozenset((str(row[0]), str(row[1])) for row in conn.execute(pairs))


def _check_write(
    before: RunSnapshot, write: RunWrite, *, may_lease: bool = False, held: Claim | None = None
) -> None:
    """The invariants every write keeps, whatever the transition (07 §1, §2.1, §5). Only a
    claim, or a finish that carries the run on (07 §7.7), may lease a record (`may_lease`),
    and then one at most; the run never has two leased records."""
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
    newly_leased = 0
    for record in write.steps:
        if record.run_id != old_run.run_id:
            raise StoreInvariantError("A step record belongs to another run.")
        old = before.step(record.step)
        if record.state == "leased" and (old is None or old.state != "leased"):
            if not may_lease:
                raise StoreInvariantError("Only a claim or a continuation leases a record.")
            newly_leased += 1
        if old is not None:
            _check_record(old, record)
    written = {record.step: record for record in write.steps}
    leased = [
        step
        for step in known
        if (written.get(step) or before.step(step)) is not None
        and (written.get(step) or before.step(step)).state == "leased"  # type: ignore[union-attr]
    ]
    if newly_leased > 1 or len(leased) > 1:
        raise StoreInvariantError("A run has at most one leased record.")


def _check_record(old: StepRow, new: StepRow) -> None:
    for name in _STEP_IMMUTABLE:
        if getattr(old, name) != getattr(new, name):
            raise StoreInvariantError(f"The step column {name} cannot change.")
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


def _announced(payload: bytes, ring: Callable[[], None], schedule: Any) -> None:
    """Another process's notification on the store's channel: an instant (`Store.announce`)
    is scheduled; anything else (an admission, a re-arm, a hold released…) rings."""
    if schedule is not None and payload.isdigit():
        schedule(from_epoch_ms(int(payload)))
    else:
        ring()
