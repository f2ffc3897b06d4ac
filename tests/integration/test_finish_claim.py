"""A finish that carries nothing on makes the loop's next claim in its own transaction (07 §7.7
item 8: the transactions of two runs in one commit, each fenced by its own locks), on each
backend.

The integration project's run (wait-until due at once → read BReg → choose → send Messaging →
finish) takes three worker transactions: the claim, the read's finish carried on to the notice,
the notice's finish. With two runs waiting, the loop's first run's last finish also claims the
second run's first record, so the second needs no claim transaction: five transactions for the
two runs, not six. The crash at that folded transaction — the process dies just before its
commit, or just after it — sends nothing twice and nothing without its mark: before the commit
neither the first run's finish nor the second's claim happened; after it, the second run's
claim lapses like any claim's and another worker finishes it.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
from integration_support import CALLER, Deployed, run_input
from test_admission_lease import admit_taken, count_writes
from test_worker_fused_crashes import (
    READ,
    Boundary,
    Crash,
    Moment,
    ProcessDied,
    arm,
    assert_journal_agrees,
    finished_once,
    journaled_by_the_crashed_transaction,
    record,
    states,
    stored,
    take_over,
)

from coordinator_core.shell.execution import attempt as attempt_module
from coordinator_core.shell.runtime.process import Shutdown, worker_loop
from coordinator_core.shell.runtime.service_log import ServiceLog
from coordinator_core.shell.service import RunAdmitted

NOTIFY = "notify"
FOLDED = Boundary("notice-finish with the next claim", "complete_step", 2)


def _two(deployed: Deployed) -> list[RunAdmitted]:
    """Two runs admitted with no idle loop to take them: both wait to be claimed."""
    return [deployed.admit(run_input()), deployed.admit(run_input())]


def _split(deployed: Deployed, runs: list[RunAdmitted]) -> tuple[RunAdmitted, RunAdmitted]:
    """(the run the loop claimed first, the other), told by which one got to its notice."""
    first = [admitted for admitted in runs if stored(deployed, admitted).step(NOTIFY) is not None]
    assert len(first) == 1, [states(stored(deployed, admitted)) for admitted in runs]
    return first[0], next(admitted for admitted in runs if admitted is not first[0])


def _crashed(
    deployed: Deployed, monkeypatch: pytest.MonkeyPatch, moment: Moment
) -> tuple[list[RunAdmitted], Crash, RunAdmitted, RunAdmitted]:
    """Two runs waiting; a worker that dies at the folded finish, `moment`: the runs, what
    the crash saw, the run it claimed first and the other."""
    runs = _two(deployed)
    crash = arm(monkeypatch, deployed, FOLDED, moment)
    with pytest.raises(ProcessDied):
        deployed.worker("crashed").tick()
    monkeypatch.undo()
    first, second = _split(deployed, runs)
    return runs, crash, first, second


_CLAIMED_WITH_IT = [
    ("due", "attempt", "intent"),
    ("due", "transition", "pending"),
    ("due", "attempt", "intent"),
    ("due", "transition", "delivered"),
]
"""The second run's entries of the folded transaction, up to its read's intent: its wait
claimed, due at once, and delivered."""


def test_a_finish_claims_the_next_run_so_two_runs_take_five_transactions(
    deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = _two(deployed)
    seen = count_writes(deployed, monkeypatch)
    worker = deployed.worker("folding")
    assert worker.tick()
    first, second = _split(deployed, runs)
    assert stored(deployed, first).run.state.status == "finished"
    # The second run's claim committed with the first run's last finish: its read is leased
    # to this loop and its request frozen, nothing of it sent yet.
    read = record(stored(deployed, second), READ)
    assert read.record.state == "leased" and read.record.command_prepared
    assert read.lease is not None and read.lease.owner == "folding"
    assert worker.holding and not worker.rests(worker.wakeup.generation)
    assert seen == ["claim_due_step", "complete_step", "complete_step"]
    assert deployed.products.submissions(deployed.command_key(second)) == []

    assert worker.tick()  # works the claim it holds: no claim transaction of its own
    monkeypatch.undo()
    assert seen == ["claim_due_step"] + ["complete_step"] * 4
    finished_once(deployed, first)
    finished_once(deployed, second)
    assert not worker.holding  # the last finish looked for another claim and found none
    assert not worker.tick()


def test_a_loop_that_holds_a_claim_claims_no_other_until_it_worked_it(
    deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run an admission hands the loop goes first; its finish claims nothing more while
    the loop still holds the claim an earlier finish made (which would otherwise be lost to
    its lease)."""
    runs = _two(deployed)
    worker = deployed.worker("holding")
    assert worker.tick() and worker.holding
    first, second = _split(deployed, runs)
    third = deployed.admit(run_input())  # pending: waits for a claim
    handed = admit_taken(deployed, monkeypatch)
    monkeypatch.undo()
    assert worker.tick()  # the handed run, whose finish claims nothing
    finished_once(deployed, handed)
    assert worker.holding
    assert states(stored(deployed, third)) == {"due": ("pending", 1, 0)}
    assert worker.tick()  # the claim it held, whose finish claims the third run
    finished_once(deployed, second)
    assert worker.holding and worker.tick()
    for admitted in (first, third):
        finished_once(deployed, admitted)


def test_a_claim_the_finish_cannot_make_is_dropped_without_the_finish(
    deployed: Deployed, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    runs = _two(deployed)
    real = attempt_module.TickRun.claim
    calls = 0

    def claim(self: attempt_module.TickRun, *arguments: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:  # the finish's claim of the second run
            raise ValueError("a run whose data does not read")
        return real(self, *arguments)

    monkeypatch.setattr(attempt_module.TickRun, "claim", claim)
    worker = deployed.worker("folding")
    with caplog.at_level(logging.WARNING, logger="coordinator.store"):
        assert worker.tick()
    monkeypatch.undo()
    first, second = _split(deployed, runs)
    finished_once(deployed, first)  # the finish committed
    assert states(stored(deployed, second)) == {"due": ("pending", 1, 0)}  # claimed nothing
    assert record(stored(deployed, second), "due").lease is None
    assert not worker.holding
    assert "store finish-claim dropped: ValueError" in caplog.text
    assert "a run whose data" not in caplog.text
    assert worker.tick()  # an ordinary claim takes it
    finished_once(deployed, second)


def test_a_loop_that_holds_a_claim_works_it_before_it_stops(
    deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = _two(deployed)
    worker = deployed.worker("stopping")
    shutdown = Shutdown(ServiceLog())
    real = worker.tick
    ticks: list[bool] = []

    def tick(**options: Any) -> bool:
        worked = real(**options)
        ticks.append(worker.holding)
        shutdown.request()  # the process stops after the first tick
        return worked

    monkeypatch.setattr(worker, "tick", tick)
    loop = threading.Thread(target=worker_loop, args=(worker, 10, shutdown, shutdown.log))
    loop.start()
    loop.join(timeout=30)
    assert not loop.is_alive()
    assert ticks == [True, False]  # held a claim after the first: one more tick, then stopped
    for admitted in runs:
        finished_once(deployed, admitted)


def test_a_folded_finish_that_dies_before_its_commit_finishes_neither_and_claims_nothing(
    deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs, crash, first, second = _crashed(deployed, monkeypatch, "before-commit")
    # The first run's message was accepted, its outcome not committed (its mark did); the
    # second run's claim rolled back with it: as admitted, unleased.
    notify = record(stored(deployed, first), NOTIFY)
    assert (notify.record.state, notify.record.dispatched, notify.record.sent) == (
        "leased",
        True,
        True,
    )
    assert states(stored(deployed, second)) == {"due": ("pending", 1, 0)}
    assert record(stored(deployed, second), "due").lease is None
    # What the dead transaction journaled for the second run are intents and transitions of
    # records the store does not hold (restated by the later claim).
    assert journaled_by_the_crashed_transaction(deployed, second, crash) == [
        *_CLAIMED_WITH_IT,
        ("?", "attempt", "intent"),
    ]
    assert take_over(deployed, first, lambda status: status != "running") == "attention"
    take_over(deployed, second, lambda status: status != "running", name="second")
    finished_once(deployed, second)
    key = deployed.command_key(first)
    assert len(deployed.products.submissions(key)) == 1  # never resent automatically
    assert deployed.service.reconcile(CALLER, first.run.run_id, "case-92").result == "settled"
    take_over(deployed, first, lambda status: status != "running", name="after-reconcile")
    finished_once(deployed, first)
    for admitted in runs:
        assert_journal_agrees(deployed, admitted, crash, "before-commit")


def test_a_folded_finish_that_dies_after_its_commit_leaves_the_claim_to_lapse_and_sends_once(
    deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs, crash, first, second = _crashed(deployed, monkeypatch, "after-commit")
    finished_once(deployed, first)
    # The second run's read is leased to the dead loop with its request frozen; its notice
    # does not exist yet, so nothing of it can have been sent.
    read = record(stored(deployed, second), READ)
    assert (read.record.state, read.record.command_prepared) == ("leased", True)
    assert read.lease is not None and read.lease.owner == "crashed"
    assert journaled_by_the_crashed_transaction(deployed, second, crash) == [
        *_CLAIMED_WITH_IT,
        (READ, "attempt", "intent"),
    ]
    assert deployed.products.submissions(deployed.command_key(second)) == []
    take_over(deployed, second, lambda status: status != "running")
    finished_once(deployed, second)
    for admitted in runs:
        assert_journal_agrees(deployed, admitted, crash, "after-commit")
