"""Batching across runs (07 §7.7 item 8): the finish fences of several runs that are ready at
the same moment share one commit, each fenced by its own lease, and a stale fence of one run
leaves the other runs' writes intact; alone, a run's transaction commits at once."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Connection
from store_support import SECOND, T0, admit, claim, deliver_and_finish

from coordinator_core.shell.store import Claim, StaleLease, Store


def _count_commits(store: Store) -> list[int]:
    """How many database commits the store's engine has made since (a one-item list)."""
    commits = [0]

    def counted(_connection: Connection) -> None:
        commits[0] += 1

    event.listen(store.transactor.engine, "commit", counted)
    return commits


def _holding_the_batch(store: Store) -> tuple[threading.Event, threading.Thread]:
    """A thread whose batched transaction does not commit until the event is set: the work
    that arrives meanwhile waits and forms the next batch."""
    release = threading.Event()
    started = threading.Event()

    def hold(_conn: Connection) -> None:
        started.set()
        assert release.wait(30)

    thread = threading.Thread(
        target=store.transactor.transact, args=("hold", hold), kwargs={"batch": True}
    )
    thread.start()
    assert started.wait(30)
    return release, thread


def _queued(store: Store, count: int) -> None:
    """Wait until `count` works wait behind the held batch."""
    batches: Any = store.transactor._batches
    for _ in range(3000):
        if len(batches._waiting) >= count:
            return
        time.sleep(0.01)
    raise AssertionError("the works never queued")


def _release(
    release: threading.Event, holder: threading.Thread, threads: list[threading.Thread]
) -> None:
    """Let the held batch commit, then wait for it and for the works queued behind it."""
    release.set()
    holder.join(30)
    for thread in threads:
        thread.join(30)


def _in_threads(calls: list[Callable[[], Any]]) -> tuple[list[threading.Thread], list[Any]]:
    """Run `calls` each in its own thread; answers what each returned or raised."""
    results: list[Any] = [None] * len(calls)

    def run(index: int) -> None:
        try:
            results[index] = calls[index]()
        except Exception as error:
            results[index] = error

    threads = [threading.Thread(target=run, args=(index,)) for index in range(len(calls))]
    for thread in threads:
        thread.start()
    return threads, results


def test_the_finishes_of_runs_ready_together_share_one_commit_and_a_stale_one_drops_out(
    store: Store,
) -> None:
    runs = [admit(store, f"k{n}") for n in range(4)]
    claims: list[Claim] = []
    for _ in runs:
        leased = claim(store, T0)
        assert leased is not None
        claims.append(leased)
    later = T0 + SECOND
    # The last run was finished already: its claim is stale when its finish comes again.
    stale = claims[3]
    store.writes.complete_step(stale, later, deliver_and_finish(later))
    before = store.reads.get_run_snapshot(stale.run_id)

    commits = _count_commits(store)
    release, holder = _holding_the_batch(store)
    threads, results = _in_threads(
        [
            lambda leased=leased: store.writes.complete_step(
                leased, later, deliver_and_finish(later)
            )
            for leased in claims
        ]
    )
    _queued(store, 4)
    _release(release, holder, threads)

    assert commits[0] == 2, "the held transaction, then one commit for the four runs' finishes"
    assert isinstance(results[3], StaleLease)
    for leased, written in zip(claims[:3], results[:3], strict=True):
        assert not isinstance(written, BaseException), written
        assert written.snapshot.run.state.status == "finished"
        stored = store.reads.get_run_snapshot(leased.run_id)
        assert stored is not None and stored.run.state.status == "finished"
    assert store.reads.get_run_snapshot(stale.run_id) == before


def _statements(store: Store) -> list[str]:
    """The SQL statements the store's engine sends from now on."""
    statements: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        statements.append(statement)

    event.listen(store.transactor.engine, "before_cursor_execute", seen)
    return statements


def test_a_batch_whose_fences_all_hold_shares_one_transaction_without_savepoints(
    store: Store,
) -> None:
    """The common case pays no savepoint per run (on PostgreSQL each written savepoint takes
    a transaction id of its own): the runs' works share the batch's transaction as it is."""
    runs = [admit(store, f"k{n}") for n in range(3)]
    claims = [claim(store, T0) for _ in runs]
    commits = _count_commits(store)
    release, holder = _holding_the_batch(store)
    statements = _statements(store)
    threads, results = _in_threads(
        [
            lambda leased=leased: store.writes.complete_step(leased, T0, deliver_and_finish(T0))
            for leased in claims
        ]
    )
    _queued(store, 3)
    _release(release, holder, threads)
    assert all(not isinstance(result, BaseException) for result in results), results
    assert commits[0] == 2, "the held transaction, then one commit for the three finishes"
    assert not [text for text in statements if "SAVEPOINT" in text.upper()]


def test_alone_a_run_transaction_commits_at_once_without_a_savepoint(store: Store) -> None:
    admit(store, "k1")
    leased = claim(store, T0)
    assert leased is not None
    statements = _statements(store)
    commits = _count_commits(store)
    store.writes.complete_step(leased, T0, deliver_and_finish(T0))
    assert commits[0] == 1
    assert not [text for text in statements if "SAVEPOINT" in text.upper()]


def test_a_driver_error_in_one_work_of_a_batch_reruns_the_others_alone(store: Store) -> None:
    """A work that fails in the database (not a refusal) fails the batch before its commit:
    nothing of it happened, and each work is run again in a transaction of its own, so the
    other runs still finish and only the failing one sees its error."""
    runs = [admit(store, f"k{n}") for n in range(3)]
    claims = [claim(store, T0) for _ in runs]
    assert all(leased is not None for leased in claims)

    def broken(conn: Connection) -> None:
        conn.exec_driver_sql("SELECT * FROM no_such_table_" + uuid.uuid4().hex)

    release, holder = _holding_the_batch(store)
    threads, results = _in_threads(
        [
            *[
                lambda leased=leased: store.writes.complete_step(leased, T0, deliver_and_finish(T0))
                for leased in claims
            ],
            lambda: store.transactor.transact("broken", broken, batch=True),
        ]
    )
    _queued(store, 4)
    _release(release, holder, threads)
    assert isinstance(results[3], Exception) and not isinstance(results[3], StaleLease)
    for leased, written in zip(claims, results[:3], strict=True):
        assert not isinstance(written, BaseException), written
        stored = store.reads.get_run_snapshot(leased.run_id)  # type: ignore[union-attr]
        assert stored is not None and stored.run.state.status == "finished"


@pytest.mark.parametrize("size", [2, 8])
def test_admissions_ready_together_share_commits(store: Store, size: int) -> None:
    commits = _count_commits(store)
    release, holder = _holding_the_batch(store)
    threads, results = _in_threads(
        [lambda n=n: admit(store, f"batch-{size}-{n}") for n in range(size)]
    )
    _queued(store, size)
    _release(release, holder, threads)
    assert all(not isinstance(result, BaseException) for result in results), results
    assert commits[0] == 2
    assert len({result.run_id for result in results}) == size
