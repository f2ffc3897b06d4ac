"""`commits_after`: every write transaction a thread asks for inside the block calls the
barrier after its work and before its commit, batched or not; reads never call it; a barrier
that raises rolls that transaction back. It is how an API command's request entry, queued at
the command's start, is made durable before anything the command does can commit (07 §11)."""

from __future__ import annotations

import threading
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection
from store_support import T0, admit, claim, deliver_and_finish
from test_store_batches import _holding_the_batch, _in_threads, _queued, _release

from coordinator_core.errors import CoordinatorError, Diagnostic
from coordinator_core.shell.store import Store, commits_after


def _events(store: Store) -> list[str]:
    """The commits of the store's engine, in order, in one list the barriers append to."""
    seen: list[str] = []

    def committed(_connection: Connection) -> None:
        seen.append("commit")

    event.listen(store.transactor.engine, "commit", committed)
    return seen


def test_a_write_inside_the_block_calls_the_barrier_before_its_commit(store: Store) -> None:
    seen = _events(store)
    with commits_after(lambda: seen.append("barrier")):
        run = admit(store, "k1")
        assert seen == ["barrier", "commit"]
        assert store.reads.get_run_snapshot(run.run_id) is not None  # a read: no barrier
    admit(store, "k2")  # outside the block: no barrier
    assert seen.count("barrier") == 1
    assert seen[-1] == "commit"


def test_a_barrier_that_raises_rolls_the_write_back(store: Store) -> None:
    def refused() -> None:
        raise CoordinatorError(
            Diagnostic(code="coordinator.command.audit-unavailable", message="The fsync failed.")
        )

    try:
        with commits_after(refused):
            admit(store, "k1")
    except CoordinatorError as error:
        assert error.code == "coordinator.command.audit-unavailable"
    else:
        raise AssertionError("the admission committed past a failed barrier")
    assert store.reads.list_runs(owner=None).listed == ()


def test_a_batched_write_calls_its_thread_s_barrier_whichever_thread_commits_it(
    store: Store,
) -> None:
    """A batch is committed by its leader, which may be another thread than the one inside
    the block: the barrier goes with the work, not with the committing thread. Whoever leads,
    the batch that carries the guarded finish commits after the barrier ran."""
    for round_number in range(5):
        runs = [admit(store, f"r{round_number}k{n}") for n in range(4)]
        claims = [claim(store, T0) for _ in runs]
        assert all(leased is not None for leased in claims)
        seen = _events(store)
        guarded = threading.get_ident()

        def barrier(seen: list[str] = seen) -> None:
            seen.append("barrier")

        def finish(index: int, leased: Any) -> Any:
            nonlocal guarded
            if index == 0:
                guarded = threading.get_ident()
                with commits_after(barrier):
                    return store.writes.complete_step(leased, T0, deliver_and_finish(T0))
            return store.writes.complete_step(leased, T0, deliver_and_finish(T0))

        release, holder = _holding_the_batch(store)
        threads, results = _in_threads(
            [lambda index=index, leased=leased: finish(index, leased) for index, leased in
             enumerate(claims)]
        )  # fmt: skip
        _queued(store, 4)
        _release(release, holder, threads)
        assert all(not isinstance(result, BaseException) for result in results), results
        assert seen == ["commit", "barrier", "commit"], (
            "the held batch's commit, then the barrier before the one commit of the four"
        )
        assert guarded != threading.get_ident()
