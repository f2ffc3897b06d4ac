"""`Transactor`: what every part of the store stands on — the connections, the deployment the
store must belong to, one transaction with its bounded retries, the observers told after a
commit, and the journal head a write transaction saves.

Only transient driver errors (dialect.is_transient) are retried; a lost connection is
`coordinator.command.store-unavailable`. Sync, not async: transactions are short and bounded,
the decide callbacks are plain functions that must run while the locks are held, and a sync
pool serves the worker's loops from threads; the HTTP layer calls the store from a thread pool.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Final, TypeVar

from sqlalchemy import exc as sa_exc
from sqlalchemy import select, text
from sqlalchemy.engine import Connection, Engine

from coordinator_core.engine.instants import Instant
from coordinator_core.shell.audit.writer import JournalPosition
from coordinator_core.shell.observe import metrics, tracing
from coordinator_core.shell.store.dialect import (
    Prepared,
    StoreLocation,
    is_transient,
    is_unavailable,
    read_alone,
    read_engine,
    read_in_one_trip,
    read_together,
    store_unavailable,
    upsert_advancing,
)
from coordinator_core.shell.store.guards import ProcessLock, check_identity
from coordinator_core.shell.store.identity import DatabaseWatch, StoreIdentity
from coordinator_core.shell.store.records import (
    ControlRow,
    DeploymentIdentity,
    StatusChange,
    StepOutcome,
)
from coordinator_core.shell.store.schema import CONTROL, CONTROL_COLUMNS, JOURNAL_HEADS, control_of

__all__ = ["Committed", "Transactor", "commits_after"]

T = TypeVar("T")

logger = logging.getLogger("coordinator.store")

_ATTEMPTS: Final = 4
_BACKOFF_SECONDS: Final = (0.01, 0.05, 0.2)
_HEAD_SECONDS: Final = 1.0
"""How often a write transaction saves the journal head at most."""
_OBSERVER_FAILED: Final = "coordinator.service.event"

Committed = StatusChange | StepOutcome
"""What the observer is told after a commit."""

_HEAD_COLUMNS: Final = (
    "group_name",
    "sequence",
    "line_hash",
    "file_number",
    "line_offset",
    "updated_at",
    "store_identity",
)
_SAVE_HEAD: Final = {
    kind: Prepared(
        upsert_advancing(JOURNAL_HEADS, kind, ("group_name",), "sequence", _HEAD_COLUMNS[1:]),
        column_keys=_HEAD_COLUMNS,
    )
    for kind in ("postgresql", "sqlite")
}
"""A journal group's head, moved forward only (07 §12.1)."""
_CONTROL_READ: Final = Prepared(select(CONTROL))
_NOTIFY: Final = Prepared(text("SELECT pg_notify(:channel, :payload)"))


_standing = threading.local()  # `.barrier`: what every write this thread commits waits for


@contextmanager
def commits_after(barrier: Callable[[], None]) -> Iterator[None]:
    """Inside the block, every write transaction the calling thread asks for (`transact`,
    batched or not) calls `barrier` after its work and before its commit, as a barrier of its
    own (`before_commit`): what it raises rolls that transaction back. An API command's
    request entry is queued when the command starts and made durable by the first commit's
    barrier, so that it shares that transaction's fsync and still precedes every change the
    command makes (07 §11: the journal never lacks an entry for something that committed)."""
    previous = getattr(_standing, "barrier", None)
    _standing.barrier = barrier
    try:
        yield
    finally:
        _standing.barrier = previous


class Transactor:
    """The connections of one store and the transaction every store method runs in."""

    def __init__(
        self,
        location: StoreLocation,
        engine: Engine,
        identity: DeploymentIdentity,
        lock: ProcessLock | None,
    ) -> None:
        self.location = location
        self.engine = engine
        self.identity = identity
        self._reader = read_engine(engine)
        self._lock = lock
        self._seen_control: tuple[tuple[Any, ...], ControlRow] | None = None
        self.sender = "from:" + secrets.token_hex(8)  # this store's own notifications
        self._journal: Callable[[], JournalPosition | None] | None = None
        self.database: DatabaseWatch | None = None
        """The identity of the database the store was opened in, checked on every new
        connection (07 §12.1 item 5); set by `Store.open`."""
        self._head_due = 0.0  # monotonic instant from which a write saves the journal head
        self._observer: Callable[[Sequence[Committed]], None] | None = None
        self._notes = threading.local()  # `.items`: what this thread's transaction will tell
        # `.barriers`: what must hold before it commits
        self._batches = _Batches(self)

    def close(self) -> None:
        """Release the connections and, if held, the SQLite process lock."""
        self.engine.dispose()
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    # -- the transaction ------------------------------------------------------------------------

    def transact(
        self,
        purpose: str,
        work: Callable[[Connection], T],
        *,
        read_only: bool = False,
        batch: bool = False,
    ) -> T:
        """Run `work` in one transaction; retry only what is safe to retry, a bounded number of
        times: a transient driver error (the server rolled back), and a connection found dead
        before the commit was sent (nothing of the transaction can have committed; this is
        what replaces a pre-ping per transaction). A connection lost during the commit leaves
        its outcome unknown: `store-unavailable`, never a retry. `purpose` is the fixed name
        of the transaction in its span (`shell.observe.tracing`; none while tracing is off).

        `batch=True` (a run's transaction, 07 §7.7 item 8): `work` may share one commit with
        the batched work of other threads that is ready at the same moment, each in its own
        savepoint, so that what one raises (a stale fence) undoes only its own writes. Alone,
        it commits at once, exactly as without `batch`."""
        standing: Callable[[], None] | None = getattr(_standing, "barrier", None)
        if standing is not None and not read_only:
            work = functools.partial(_after, standing, self, work)
        if batch:
            return self._batches.run(purpose, work)
        return self._transact(purpose, work, read_only)

    def read_at_once(
        self, purpose: str, *reads: tuple[Prepared, Mapping[str, Any]]
    ) -> list[list[dict[str, Any]]]:
        """Every row of each of `reads` (statement and parameters), in order, from one
        read-only transaction: one snapshot. PostgreSQL: one round trip, the transaction's
        BEGIN and COMMIT sent with the statements (`dialect.read_in_one_trip`), where a
        `transact(read_only=True)` of the same reads takes three; SQLite: as that does."""
        if self.location.kind != "postgresql":
            return self.transact(purpose, lambda conn: read_together(conn, *reads), read_only=True)
        return self._transact(purpose, lambda conn: read_in_one_trip(conn, reads), True, True)

    def read_alone(
        self, purpose: str, read: tuple[Prepared, Mapping[str, Any]]
    ) -> list[dict[str, Any]]:
        """Every row of one statement, which reads one snapshot by itself. PostgreSQL: sent
        alone, outside any transaction (`dialect.read_alone`: no BEGIN, no COMMIT, no
        pipeline); SQLite: in a read transaction, as `read_at_once` reads."""
        if self.location.kind != "postgresql":
            return self.read_at_once(purpose, read)[0]
        return self._transact(purpose, lambda conn: read_alone(conn, read), True, True)

    def _transact(
        self, purpose: str, work: Callable[[Connection], T], read_only: bool, own: bool = False
    ) -> T:
        if not tracing.enabled():
            return self._retrying(work, read_only, own)
        with tracing.store_transaction(self.location.kind, purpose, read_only=read_only):
            return self._retrying(work, read_only, own)

    def before_commit(self, barrier: Callable[[], None]) -> None:
        """Inside a write transaction: call `barrier` after the work, before the commit (what
        it raises rolls the transaction back); outside one, call it now. The journal's entries
        are queued by the work and made durable by their barrier, so that every entry of a
        batch shares one fsync (07 §7.7 items 5 and 8)."""
        barriers: list[Callable[[], None]] | None = getattr(self._notes, "barriers", None)
        if barriers is None:
            barrier()
        else:
            barriers.append(barrier)

    def _retrying(self, work: Callable[[Connection], T], read_only: bool, own: bool) -> T:
        """`own`: the work begins and ends its transaction itself (`read_at_once`), on a
        connection without the read engine's per-checkout isolation settings."""
        engine = self._reader if read_only and not own else self.engine
        attempt = 0
        while True:
            attempt += 1
            committing = False
            try:
                with engine.connect() as conn:
                    began = time.perf_counter()
                    notes = self._notes
                    outer = getattr(notes, "items", None), getattr(notes, "barriers", None)
                    items: list[Committed] | None = None
                    if self._observer is not None and not read_only:
                        items = notes.items = []
                    barriers: list[Callable[[], None]] = []
                    if not read_only:
                        notes.barriers = barriers
                    transaction = conn.begin()
                    try:
                        result = work(conn)
                        for barrier in barriers:
                            barrier()
                    except BaseException:
                        transaction.rollback()
                        raise
                    finally:
                        notes.items, notes.barriers = outer
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

    def _savepoint(self, conn: Connection, work: Callable[[Connection], Any]) -> _Done:
        """One batched work in its own savepoint: what it raises (other than a driver error,
        which fails the batch) rolls back its writes and its notes alone."""
        items: list[Committed] | None = getattr(self._notes, "items", None)
        kept = len(items) if items is not None else 0
        savepoint = conn.begin_nested()
        try:
            result = work(conn)
        except sa_exc.DBAPIError:
            raise
        except Exception as error:
            savepoint.rollback()
            if items is not None:
                del items[kept:]
            return _Done(error=error)
        savepoint.commit()
        return _Done(result=result)

    def unless_raised(self, work: Callable[[], T], purpose: str) -> T | None:
        """Inside a transaction, a part of it that may fail alone: `work`'s result, or None
        when it raised anything but a driver error (which fails the transaction) — its notes
        are then dropped, and the failure logged by type. Only for work that raises before
        it writes (its decisions and invariant checks come first), so that nothing of it
        remains to roll back."""
        items: list[Committed] | None = getattr(self._notes, "items", None)
        kept = len(items) if items is not None else 0
        try:
            return work()
        except sa_exc.DBAPIError:
            raise
        except Exception as error:
            if items is not None:
                del items[kept:]
            logger.warning("store %s dropped: %s", purpose, type(error).__name__)
            return None

    # -- observers ------------------------------------------------------------------------------

    def observe(self, observer: Callable[[Sequence[Committed]], None] | None) -> None:
        """Tell `observer`, after each commit, the run status changes the transaction wrote and
        the step outcomes noted in it (`note`), in order (06 §14: the metrics and log lines of
        a run's life); never what a rolled-back or retried attempt wrote or noted. It runs on
        the committing thread; what it raises is logged, never the caller's."""
        self._observer = observer

    def note(self, item: Committed) -> None:
        """Inside a transaction: tell the observer `item` if the transaction commits."""
        items: list[Committed] | None = getattr(self._notes, "items", None)
        if items is not None:
            items.append(item)

    def _tell(self, items: Sequence[Committed]) -> None:
        """The observer after a commit: what it fails at never undoes or fails the commit."""
        assert self._observer is not None
        try:
            self._observer(items)
        except Exception:
            logger.warning("status change not observed", extra={"code": _OBSERVER_FAILED})

    # -- the deployment check of every verifying transaction ------------------------------------

    def verify_txn(self, conn: Connection) -> ControlRow:
        """07 §6.1 step 1 / §7.1: databaseId, schema version and key custody, checked in every
        verifying transaction (the PostgreSQL database name is checked on every connection,
        see dialect.create_store_engine)."""
        return self.verified(_CONTROL_READ.first(conn))

    def verified(self, row: Mapping[str, Any] | None, *, prefix: str = "") -> ControlRow:
        """The control row of `row` (its columns named `prefix` + name), checked to belong to
        this deployment (`check_identity`). Every transaction reads it; the last one checked
        is kept with the values it was built from, so an unchanged row is not checked again."""
        if row is None:
            return check_identity(None, self.identity)
        values = tuple(row[prefix + name] for name in CONTROL_COLUMNS)
        seen = self._seen_control
        if seen is not None and seen[0] == values:
            return seen[1]
        control = check_identity(
            control_of(dict(zip(CONTROL_COLUMNS, values, strict=True))), self.identity
        )
        self._seen_control = (values, control)
        return control

    def may_claim(self, control: ControlRow) -> bool:
        """Whether a worker may lease records now: the active package is the one this process
        serves and no restore hold is set (a claim, and a continuation, check it)."""
        return self.serves_active_package(control) and not control.restore_hold

    def serves_active_package(self, control: ControlRow) -> bool:
        expected = self.identity.package_digest
        return expected is None or control.active_package_digest == expected

    # -- the journal head (07 §12.1) --------------------------------------------------------------

    def follow_journal(self, position: Callable[[], JournalPosition | None]) -> None:
        """Keep this process's journal head in the store: `position` answers the last line of
        the process's journal on stable storage; a write transaction saves it at most once a
        second (`save_head_txn`), and `save_journal_head` at once."""
        self._journal = position

    def save_journal_head(self, now: Instant) -> None:
        """Save the journal head now (at a clean stop: the last line the process wrote)."""
        if self._journal is not None and (position := self._journal()) is not None:
            self.transact(
                "save-journal-head", lambda conn: self.write_head_txn(conn, position, now)
            )

    def save_head_txn(self, conn: Connection, now: Instant) -> None:
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
            self.write_head_txn(conn, position, now)

    def write_head_txn(self, conn: Connection, position: JournalPosition, now: Instant) -> None:
        _SAVE_HEAD[self.location.kind].run(
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
        assert self.database is not None
        return self.database.identity

    # -- notifications across processes (07 §7.7 item 4) ---------------------------------------

    @property
    def wake_channel(self) -> str | None:
        """The PostgreSQL notification channel of this store (named by its namespace), or None
        on SQLite, where one process holds the store."""
        namespace = self.location.namespace
        if self.location.kind != "postgresql" or namespace is None:
            return None
        return "coordinator_due_" + hashlib.sha256(namespace.encode()).hexdigest()[:24]

    def notify_txn(self, conn: Connection, payload: str | None = None) -> None:
        """`NOTIFY` the store's channel; delivered when (and only if) the transaction commits,
        to the other processes (this store's own listener ignores its `sender` payload: every
        change made here also rings this process's loops)."""
        channel = self.wake_channel
        if channel is not None:
            _NOTIFY.run(conn, {"channel": channel, "payload": payload or self.sender})


# -- batching across runs (07 §7.7 item 8) ------------------------------------------------------

_BATCH_LIMIT: Final = 32
"""The most runs' transactions one commit carries."""


class _Done:
    """What one batched work came to: its result, or what it raised."""

    __slots__ = ("error", "result")

    def __init__(self, result: Any = None, error: BaseException | None = None) -> None:
        self.result = result
        self.error = error


class _Refused(Exception):
    """A batched work refused in the shared attempt of its batch (which then rolls back)."""


class _Waiting:
    __slots__ = ("done", "purpose", "work")

    def __init__(self, purpose: str, work: Callable[[Connection], Any]) -> None:
        self.purpose = purpose
        self.work = work
        self.done: _Done | None = None


def _after(
    barrier: Callable[[], None], tx: Transactor, work: Callable[[Connection], T], conn: Connection
) -> T:
    """`work` with `barrier` (`commits_after`) among the barriers of the transaction it runs
    in: registered on the thread that runs it, which for a batch is the batch's leader."""
    tx.before_commit(barrier)
    return work(conn)


class _Batches:
    """Group commit of the run transactions of one process's threads: the thread that finds
    no batch committing leads one at once with all the work waiting (alone, it commits its own
    work as an ordinary transaction: no added latency); the others wait for its commit, and
    work that arrives meanwhile forms the next batch. The works share the batch's transaction;
    when one refuses (a stale fence), the batch runs again with each work in its own savepoint,
    so that the refusal drops only that run; the batch's journal barriers run once
    after all its work; a driver error before the commit re-runs each work alone, and one
    during the commit is every work's unknown outcome, as for a single transaction."""

    def __init__(self, tx: Transactor) -> None:
        self._tx = tx
        self._cond = threading.Condition(threading.Lock())
        self._waiting: list[_Waiting] = []
        self._leading = False

    def run(self, purpose: str, work: Callable[[Connection], T]) -> T:
        mine = _Waiting(purpose, work)
        with self._cond:
            self._waiting.append(mine)
            while mine.done is None:
                if self._leading:
                    self._cond.wait()
                    continue
                self._leading = True
                batch = self._waiting[:_BATCH_LIMIT]
                del self._waiting[:_BATCH_LIMIT]
                self._cond.release()
                try:
                    self._commit(batch)
                finally:
                    self._cond.acquire()
                    self._leading = False
                    self._cond.notify_all()
        if mine.done.error is not None:
            raise mine.done.error
        return mine.done.result  # type: ignore[no-any-return]

    def _commit(self, batch: list[_Waiting]) -> None:
        """One commit for the batch. Each run's work first shares the transaction as it is
        (a stale fence is found by the work's first statement, before it writes): one
        transaction id and no savepoint round trips for the batch. When one of them refuses,
        nothing of that attempt commits, and the batch runs again with each work in its own
        savepoint, so that the refusal drops that run alone (07 §7.7 item 8)."""
        tx = self._tx
        if len(batch) == 1:
            self._alone(batch[0])
            return
        worked = False

        def work_shared(conn: Connection) -> list[_Done]:
            nonlocal worked
            worked = False
            done: list[_Done] = []
            for waiting in batch:
                try:
                    done.append(_Done(result=waiting.work(conn)))
                except sa_exc.DBAPIError:
                    raise
                except Exception as error:
                    raise _Refused from error
            worked = True
            return done

        def work_apart(conn: Connection) -> list[_Done]:
            nonlocal worked
            worked = False
            done = [tx._savepoint(conn, waiting.work) for waiting in batch]
            worked = True
            return done

        try:
            try:
                results = tx._transact("batch", work_shared, False)
            except _Refused:
                results = tx._transact("batch", work_apart, False)
        except Exception as error:
            if not worked:  # a driver error before the commit: nothing of it happened
                for waiting in batch:
                    self._alone(waiting)
                return
            results = [_Done(error=error)] * len(batch)  # the commit's (or a barrier's) fate
        except BaseException as error:
            results = [_Done(error=error)] * len(batch)
        for waiting, done in zip(batch, results, strict=True):
            waiting.done = done

    def _alone(self, waiting: _Waiting) -> None:
        try:
            waiting.done = _Done(result=self._tx._transact(waiting.purpose, waiting.work, False))
        except BaseException as error:
            waiting.done = _Done(error=error)
