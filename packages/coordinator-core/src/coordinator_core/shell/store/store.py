"""`Store`: the one store the service and the worker use, on PostgreSQL and SQLite alike — a
transactor and the narrow interfaces its consumers use, each in one file with its SQL:

    store.writes     admit, claim, due waits, sweeps, fences, finish, cancel, retry, reconcile
    store.reads      a run and its records, pages, holds, summary, gauges, heads, next instants
    store.operator   the restore hold and its releases, retention
    store.channel    PostgreSQL notifications across processes

Opening it verifies the deployment (`Store.open`); every method of the interfaces is one
transaction and takes the caller's `now` (epoch milliseconds): the store never reads a clock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Self

from sqlalchemy.engine import Connection

from coordinator_core.engine.instants import Instant
from coordinator_core.shell.audit.writer import JournalPosition
from coordinator_core.shell.store.channel import Channel
from coordinator_core.shell.store.dialect import (
    StoreKind,
    StoreLocation,
    create_store_engine,
    locate,
)
from coordinator_core.shell.store.guards import (
    ProcessLock,
    check_active_package,
    check_ledger,
    check_runtime_role,
    namespace_state,
    read_ledger,
    refuse,
)
from coordinator_core.shell.store.identity import DatabaseWatch, StoreIdentity, read_identity
from coordinator_core.shell.store.operator import OperatorActions
from coordinator_core.shell.store.reads import RunReads
from coordinator_core.shell.store.records import ControlRow, DeploymentIdentity, StepOutcome
from coordinator_core.shell.store.transactor import Committed, Transactor
from coordinator_core.shell.store.writes import RunWrites

__all__ = ["Store"]


class Store:
    """The store of one deployment, opened by the service or a worker process (see the module
    documentation). Open it with `Store.open`, which refuses a store that is not at this
    build's schema version or does not belong to the deployment (07 §14.4, §15)."""

    def __init__(self, transactor: Transactor) -> None:
        self.transactor = transactor
        self.writes = RunWrites(transactor)
        self.reads = RunReads(transactor)
        self.operator = OperatorActions(transactor)
        self.channel = Channel(transactor)

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
        store = cls(Transactor(location, engine, identity, lock))
        try:
            store.verify()
            found = store.transactor.transact(
                "identity", lambda conn: read_identity(conn, location), read_only=True
            )
            store.transactor.database = DatabaseWatch(engine, location, found)
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
        tx = self.transactor
        location = tx.location

        def work(conn: Connection) -> ControlRow:
            if location.kind == "postgresql":
                assert location.namespace is not None
                state = namespace_state(conn, location.namespace)
                if state == "foreign":
                    raise refuse("coordinator.command.namespace-occupied")
                if state == "absent":
                    raise refuse(
                        "coordinator.deployment.schema-mismatch",
                        f"The namespace {location.namespace} does not exist.",
                        "Run `coordinatorctl migrate` with the same runtime file first.",
                    )
            check_ledger(
                read_ledger(conn, location), pending_code="coordinator.deployment.schema-mismatch"
            )
            control = tx.verify_txn(conn)
            check_active_package(control, tx.identity.package_digest)
            if location.kind == "postgresql" and tx.identity.runtime_role is not None:
                assert location.namespace is not None
                check_runtime_role(conn, location.namespace, tx.identity.runtime_role)
            return control

        return tx.transact("verify", work, read_only=True)

    def close(self) -> None:
        """Release the connections and, if held, the SQLite process lock."""
        self.transactor.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def store_identity(self) -> StoreIdentity:
        """The identity of the database this store was opened in (07 §12.1 item 5)."""
        return self.transactor.store_identity

    @property
    def kind(self) -> StoreKind:
        return self.transactor.location.kind

    @property
    def location(self) -> StoreLocation:
        return self.transactor.location

    def may_claim(self, control: ControlRow) -> bool:
        """Whether a worker may lease records now (`Transactor.may_claim`)."""
        return self.transactor.may_claim(control)

    def observe(self, observer: Callable[[Sequence[Committed]], None] | None) -> None:
        """Tell `observer` what each commit wrote and noted (`Transactor.observe`)."""
        self.transactor.observe(observer)

    def note(self, outcome: StepOutcome) -> None:
        """Inside a transaction (a `Decide`): tell the observer `outcome` if it commits."""
        self.transactor.note(outcome)

    def follow_journal(self, position: Callable[[], JournalPosition | None]) -> None:
        """Keep this process's journal head in the store (07 §12.1, `Transactor`)."""
        self.transactor.follow_journal(position)

    def save_journal_head(self, now: Instant) -> None:
        """Save the journal head now (at a clean stop: the last line the process wrote)."""
        self.transactor.save_journal_head(now)
