"""`Store.observe` and `Store.note` (06 §14): the observer hears what a transaction wrote and
noted only once it committed, in order; a rolled-back transaction tells it nothing, and an
observer that fails never fails the commit."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import pytest
from store_support import SECOND, T0, admit, claim, deliver_and_finish, fail_run

from coordinator_core.shell.store import (
    RunSnapshot,
    RunWrite,
    StaleLease,
    StatusChange,
    StepOutcome,
    Store,
)


class _Refused(Exception):
    pass


def test_the_observer_hears_a_committed_status_change_and_the_notes_in_order(
    store: Store,
) -> None:
    heard: list[Sequence[StatusChange | StepOutcome]] = []
    store.observe(heard.append)
    run = admit(store, "observed", T0)
    assert heard == []  # an admission changes no status (it is logged by the run service)
    leased = claim(store, T0 + SECOND)
    assert leased is not None
    assert heard == []  # a lease changes no status and noted nothing
    now = T0 + 2 * SECOND
    finish = deliver_and_finish(now)
    outcome = StepOutcome(run.run_id, leased.step, "call", "delivered")

    def decide(snapshot: RunSnapshot) -> RunWrite:
        store.note(outcome)
        return finish(snapshot)

    store.writes.complete_step(leased, now, decide)
    assert heard == [
        [
            outcome,
            StatusChange(
                run.run_id, run.workflow_id, "running", "finished", run.state.admitted_at, now
            ),
        ]
    ]


def test_a_rolled_back_transaction_tells_the_observer_nothing(store: Store) -> None:
    heard: list[Sequence[StatusChange | StepOutcome]] = []
    store.observe(heard.append)
    run = admit(store, "rolled-back", T0)
    leased = claim(store, T0 + SECOND)
    assert leased is not None
    now = T0 + 2 * SECOND
    failing = fail_run(now)

    def decide(snapshot: RunSnapshot) -> RunWrite:
        store.note(StepOutcome(run.run_id, leased.step, "call", "dead-lettered"))
        failing(snapshot)
        raise _Refused

    with pytest.raises(_Refused):
        store.writes.complete_step(leased, now, decide)
    assert heard == []
    store.note(StepOutcome(uuid.uuid4(), "outside", "call", "delivered"))  # no transaction
    store.writes.complete_step(leased, now, failing)
    changes = [
        [(item.before, item.after) for item in items if isinstance(item, StatusChange)]
        for items in heard
    ]
    assert changes == [[("running", "failed")]]
    assert all(isinstance(item, StatusChange) for items in heard for item in items)


def test_an_observer_that_fails_does_not_fail_the_commit(store: Store) -> None:
    def failing(_items: Sequence[StatusChange | StepOutcome]) -> None:
        raise RuntimeError("observer broke")

    store.observe(failing)
    run = admit(store, "observer-fails", T0)
    leased = claim(store, T0 + SECOND)
    assert leased is not None
    store.writes.complete_step(leased, T0 + 2 * SECOND, deliver_and_finish(T0 + 2 * SECOND))
    snapshot = store.reads.get_run_snapshot(run.run_id)
    assert snapshot is not None and snapshot.run.state.status == "finished"
    with pytest.raises(StaleLease):  # committed: the lease is gone
        store.writes.complete_step(leased, T0 + 3 * SECOND, deliver_and_finish(T0 + 3 * SECOND))
