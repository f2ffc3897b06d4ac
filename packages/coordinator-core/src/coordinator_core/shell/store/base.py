"""The part of `Store` every other part stands on: opening and closing, the start-time
deployment check, one transaction with its bounded retries, the store check of every verifying
transaction, the locks in the contract's order, and the checked write of a transition.

Only transient driver errors (dialect.is_transient) are retried; a lost connection is
`coordinator.command.store-unavailable`. Sync, not async: transactions are short and bounded,
the decide callbacks are plain functions that must run while the locks are held, and a sync
pool serves the worker's loops from threads; the async API layer calls the store from a
thread pool.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final, Self, TypeVar

from sqlalchemy import exc as sa_exc
from sqlalchemy import func, select
from sqlalchemy.engine import Connection, Engine

from coordinator_core.evolve import evolve
from coordinator_core.shell.audit.writer import JournalPosition
from coordinator_core.shell.observe import metrics, tracing
from coordinator_core.shell.store.dialect import (
    StoreKind,
    StoreLocation,
    create_store_engine,
    is_transient,
    is_unavailable,
    locate,
    lock_rows,
    read_engine,
    store_unavailable,
    truncate_ms,
)
from coordinator_core.shell.store.guards import (
    ProcessLock,
    check_active_package,
    check_identity,
    check_ledger,
    check_runtime_role,
    control_from,
    namespace_state,
    read_ledger,
    refuse,
)
from coordinator_core.shell.store.identity import DatabaseWatch, StoreIdentity, read_identity
from coordinator_core.shell.store.invariants import Lease, check_write, claim_of, new_token
from coordinator_core.shell.store.rows import (
    Claim,
    ControlRow,
    Decide,
    DeploymentIdentity,
    HoldState,
    RunSnapshot,
    RunWrite,
    StatusChange,
    StepOutcome,
    Written,
)
from coordinator_core.shell.store.statements import (
    CONTROL_COLUMNS,
    CONTROL_EXCLUSIVE,
    CONTROL_READ,
    CONTROL_SHARED,
    NOTIFY_AT,
    RUN_LOCKED,
    RUN_MUTABLE,
    RUN_READ,
    SAVE_HEAD,
    STEP_FIELDS,
    STEP_MUTABLE,
    STEPS_OF,
    UPDATE_RUN,
    UPDATE_STEP,
    insert_steps,
    run_from,
    step_from,
)
from coordinator_core.shell.store.tables import CONTROL, RUNS, STEPS

T = TypeVar("T")

logger = logging.getLogger("coordinator.store")

_ATTEMPTS: Final = 4
_BACKOFF_SECONDS: Final = (0.01, 0.05, 0.2)
_HEAD_SECONDS: Final = 1.0
"""How often a write transaction saves the journal head at most."""
_OBSERVER_FAILED: Final = "coordinator.service.event"

Committed = StatusChange | StepOutcome
"""What `StoreBase.observe`'s observer is told after a commit."""


class StoreBase:
    """What every part of `Store` shares: the connection, the deployment it belongs to, the
    transaction with its retries, the store check, the locks in the contract's order and the
    checked write of a transition (`_apply_txn`)."""

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
        self._journal: Callable[[], JournalPosition | None] | None = None
        self._database: DatabaseWatch | None = None  # set by `open` (07 §12.1 item 5)
        self._head_due = 0.0  # monotonic instant from which a write saves the journal head
        self._observer: Callable[[Sequence[Committed]], None] | None = None
        self._notes = threading.local()  # `.items`: the notes of this thread's transaction

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
    ) -> Self:
        """Connect and run the start-time deployment check (`verify`).

        `exclusive` (SQLite, `coordinator serve`) holds `<path>.lock` until `close`
        (`coordinator.command.store-busy` if another process holds it). A SQLite file that does
        not exist is never created here (`schema-mismatch`: run `migrate`).
        """
        location = locate(url, namespace=namespace)
        if location.kind == "sqlite":
            assert location.path is not None
            if not location.path.exists():
                raise refuse(
                    "coordinator.deployment.schema-mismatch",
                    "The store file does not exist.",
                    "Run `coordinatorctl migrate` with the same runtime file first.",
                )
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
            found = store._transact(
                "identity", lambda c: read_identity(c, location), read_only=True
            )
            store._database = DatabaseWatch(engine, location, found)
        except BaseException:
            store.close()
            raise
        return store

    def verify(self) -> ControlRow:
        """07 §15, at start and every 30 s: the store is this build's schema version with
        matching ledger checksums (`deployment.schema-mismatch`), belongs to this databaseId
        (`deployment.database-id-mismatch`) and keys (`command.admission-key-custody`,
        `command.state-key-custody`), its active package is the pinned one
        (`deployment.refused`), and on PostgreSQL the connection runs as the runtime role with
        exactly its grants (`deployment.refused`). Each refusal's message names what differs
        (versions, short digests, the role and grant, the key version), never a secret; the
        periodic check logs that message."""

        def work(conn: Connection) -> ControlRow:
            if self._location.kind == "postgresql":
                assert self._location.namespace is not None
                state = namespace_state(conn, self._location.namespace)
                if state == "foreign":
                    raise refuse("coordinator.command.namespace-occupied")
                if state == "absent":
                    raise refuse(
                        "coordinator.deployment.schema-mismatch",
                        f"The namespace {self._location.namespace} does not exist.",
                        "Run `coordinatorctl migrate` with the same runtime file first.",
                    )
            check_ledger(
                read_ledger(conn, self._location),
                pending_code="coordinator.deployment.schema-mismatch",
            )
            control = self._verify_txn(conn)
            check_active_package(control, self._identity.package_digest)
            if self._location.kind == "postgresql" and self._identity.runtime_role is not None:
                assert self._location.namespace is not None
                check_runtime_role(conn, self._location.namespace, self._identity.runtime_role)
            return control

        return self._transact("verify", work, read_only=True)

    def close(self) -> None:
        """Release the connections and, if held, the SQLite process lock."""
        self._engine.dispose()
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def follow_journal(self, position: Callable[[], JournalPosition | None]) -> None:
        """Keep this process's journal head in the store (07 §12.1): `position` answers the
        last line of the process's journal on stable storage; a write transaction saves it at
        most once a second (`_save_head_txn`), and `save_journal_head` at once."""
        self._journal = position

    def save_journal_head(self, now: datetime) -> None:
        """Save the journal head now (at a clean stop: the last line the process wrote)."""
        if self._journal is not None and (position := self._journal()) is not None:
            moment = truncate_ms(now)
            self._transact(
                "save-journal-head", lambda conn: self._write_head_txn(conn, position, moment)
            )

    def _save_head_txn(self, conn: Connection, now: datetime) -> None:
        """Inside a write transaction: the journal's current durable line becomes the group's
        head when it commits, at most once per `_HEAD_SECONDS` (every line is on stable storage
        before the transaction that journaled it commits, so any durable line is a head the
        store may hold; the start-up check reads what follows it)."""
        if self._journal is None:
            return
        moment = time.monotonic()
        if moment < self._head_due:
            return
        position = self._journal()
        if position is not None:
            self._head_due = moment + _HEAD_SECONDS
            self._write_head_txn(conn, position, now)

    def _write_head_txn(self, conn: Connection, position: JournalPosition, now: datetime) -> None:
        SAVE_HEAD[self._location.kind].run(
            conn,
            {
                "group_name": position.group,
                "sequence": position.sequence,
                "line_hash": position.line_hash,
                "file_number": position.file_number,
                "line_offset": position.line_offset,
                "updated_at": now,
                "store_identity": self.store_identity.text,
            },
        )

    @property
    def store_identity(self) -> StoreIdentity:
        """The identity of the database this store was opened in (07 §12.1 item 5)."""
        assert self._database is not None
        return self._database.identity

    @property
    def kind(self) -> StoreKind:
        return self._location.kind

    @property
    def location(self) -> StoreLocation:
        return self._location

    def observe(self, observer: Callable[[Sequence[Committed]], None] | None) -> None:
        """Tell `observer`, after each commit, the run status changes the transaction wrote and
        the step outcomes noted in it (`note`), in order (06 §14: the metrics and log lines of
        a run's life); never what a rolled-back or retried attempt wrote or noted. It runs on
        the committing thread; what it raises is logged, never the caller's."""
        self._observer = observer

    def note(self, outcome: StepOutcome) -> None:
        """Inside a transaction (a `Decide`): tell the observer `outcome` if it commits."""
        items: list[Committed] | None = getattr(self._notes, "items", None)
        if items is not None:
            items.append(outcome)

    # -- transactions ---------------------------------------------------------------------------

    def _transact(
        self, purpose: str, work: Callable[[Connection], T], *, read_only: bool = False
    ) -> T:
        """Run `work` in one transaction; retry only what is safe to retry, a bounded number of
        times: a transient driver error (the server rolled back), and a connection found dead
        before the commit was sent (nothing of the transaction can have committed; this is
        what replaces a pre-ping per transaction). A connection lost during the commit leaves
        its outcome unknown: `store-unavailable`, never a retry. `purpose` is the fixed name
        of the transaction in its span (`shell.observe.tracing`; none while tracing is off)."""
        if not tracing.enabled():
            return self._transact_retrying(work, read_only)
        with tracing.store_transaction(self._location.kind, purpose, read_only=read_only):
            return self._transact_retrying(work, read_only)

    def _transact_retrying(self, work: Callable[[Connection], T], read_only: bool) -> T:
        engine = self._reader if read_only else self._engine
        attempt = 0
        while True:
            attempt += 1
            committing = False
            try:
                with engine.connect() as conn:
                    began = time.perf_counter()
                    outer = getattr(self._notes, "items", None)
                    items: list[Committed] | None = None
                    if self._observer is not None and not read_only:
                        items = self._notes.items = []
                    transaction = conn.begin()
                    try:
                        result = work(conn)
                    except BaseException:
                        transaction.rollback()
                        raise
                    finally:
                        self._notes.items = outer
                    committing = True
                    transaction.commit()
                    metrics.store_transaction(time.perf_counter() - began, read_only=read_only)
                    if items:
                        self._tell(items)
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

    def _tell(self, items: Sequence[Committed]) -> None:
        """The observer after a commit: what it fails at never undoes or fails the commit."""
        assert self._observer is not None
        try:
            self._observer(items)
        except Exception:
            logger.warning("status change not observed", extra={"code": _OBSERVER_FAILED})

    def _verify_txn(self, conn: Connection) -> ControlRow:
        """07 §6.1 step 1 / §7.1: databaseId, schema version and key custody, checked in every
        verifying transaction (the PostgreSQL database name is checked on every connection,
        see dialect.create_store_engine)."""
        row = CONTROL_READ.first(conn)
        return self._verified(row)

    def _verified(self, row: Mapping[str, Any] | None, *, prefix: str = "") -> ControlRow:
        """The control row of `row` (its columns named `prefix` + name), checked to belong to
        this deployment (`check_identity`). Every transaction reads it; the last one checked
        is kept with the values it was built from, so an unchanged row is not checked again."""
        if row is None:
            return check_identity(None, self._identity)
        values = tuple(row[prefix + name] for name in CONTROL_COLUMNS)
        seen = self._seen_control
        if seen is not None and seen[0] == values:
            return seen[1]
        control = check_identity(
            control_from(dict(zip(CONTROL_COLUMNS, values, strict=True))), self._identity
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
        statement = CONTROL_SHARED if self._location.kind == "postgresql" else CONTROL_READ
        return self._verified(statement.first(conn))

    def _control_lock_txn(self, conn: Connection) -> None:
        """The exclusive side of the admission lock: the holds and releases take the control
        row `FOR UPDATE` (PostgreSQL), after every admission in flight has committed."""
        if self._location.kind == "postgresql":
            CONTROL_EXCLUSIVE.run(conn, {})

    def _snapshot_txn(
        self, conn: Connection, control: ControlRow, run_id: uuid.UUID, *, lock_run: bool
    ) -> RunSnapshot | None:
        run = (RUN_LOCKED if lock_run else RUN_READ).first(conn, {"run_id": run_id})
        if run is None:
            return None
        steps = STEPS_OF.rows(conn, {"run_id": run_id})
        return RunSnapshot(control, run_from(run), tuple(step_from(step) for step in steps))

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
        lease: Lease | None = None,
        held: Claim | None = None,
    ) -> Written:
        """Write a transition after checking its invariants; answer the snapshot as written
        (computed, not read back) and the claim on the record the write leaves leased.

        The engine decides which record is leased; the store owns the fence columns: a record
        that becomes `leased` gets a new random token, `lease` (owner and expiry) and a claim;
        the record `held` by the caller keeps its token; every other record has none."""
        check_write(before, write, may_lease=lease is not None, held=held)
        self._save_head_txn(conn, now)
        run = before.run
        if write.run != before.run:
            run = evolve(write.run, updated_at=now)
            if run.status != before.run.status:
                items: list[Committed] | None = getattr(self._notes, "items", None)
                if items is not None:
                    items.append(
                        StatusChange(
                            run.run_id, run.workflow_id, before.run.status, run.status,
                            run.admitted_at, now,
                        )
                    )  # fmt: skip
            values = {f"v_{name}": getattr(run, name) for name in RUN_MUTABLE}
            UPDATE_RUN.run(conn, values | {"k_run": run.run_id})
        steps = {record.step: record for record in before.steps}
        leased: str | None = None
        inserts: list[dict[str, Any]] = []
        for written in write.steps:
            old = before.step(written.step)
            if written.state == "leased" and (old is None or old.state != "leased"):
                assert lease is not None
                record = evolve(
                    written,
                    lease_token=new_token(),
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
                inserts.append({name: getattr(record, name) for name in STEP_FIELDS})
            else:
                values = {f"v_{name}": getattr(record, name) for name in STEP_MUTABLE}
                UPDATE_STEP.run(conn, values | {"k_run": run.run_id, "k_step": record.step})
        if inserts:
            insert_steps(conn, inserts)
        ordered = tuple(sorted(steps.values(), key=lambda row: (row.entered_at, row.step)))
        after = RunSnapshot(before.control, run, ordered)
        if leased is not None:
            row = after.step(leased)
            assert row is not None
            return Written(after, claim_of(row, after))
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
            NOTIFY_AT.run(conn, {"channel": channel, "payload": self._sender})

    def _hold_state_txn(self, conn: Connection) -> HoldState:
        row = conn.execute(select(CONTROL.c.restore_hold, CONTROL.c.admissions_hold)).first()
        if row is None:
            raise refuse("coordinator.deployment.schema-mismatch")
        review = conn.execute(
            select(func.count()).select_from(RUNS).where(RUNS.c.restore_review)
        ).scalar()
        return HoldState(bool(row[0]), bool(row[1]), int(review or 0))
