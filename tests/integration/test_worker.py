"""The worker end to end (07 §7): admitted through the `RunService`, ticked through the engine,
sent to the sandbox products over HTTP, recorded in the store."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from integration_support import (
    APPLICATION_ID,
    CALLER,
    SKIPPED_APPLICATION_ID,
    SUBMIT,
    Deployed,
    run_input,
)
from support.instants import ms

from coordinator_core.engine import Dispatch, format_instant
from coordinator_core.shell.audit import verify_directory
from coordinator_core.shell.clock import wall_clock
from coordinator_core.shell.runtime.process import Shutdown, worker_loop
from coordinator_core.shell.runtime.service_log import ServiceLog
from coordinator_core.shell.store import LEASE_SECONDS


def test_a_due_follow_up_is_sent_once_and_the_run_finishes(deployed: Deployed) -> None:
    admitted = deployed.admit(run_input())
    assert admitted.created and admitted.run.status == "running"
    status, ticks = deployed.drive(admitted.run.run_id)
    assert status.status == "finished", status
    # One tick: the claim of `due` carries the run on (07 §7.7) through its due instant to the
    # read; the read's finish to the choice and the notice; the notice's finish to the end.
    assert ticks == 1
    assert status.run.state.outcome == "message-accepted"
    assert isinstance(status.output, dict) and set(status.output) == {"messageId"}
    inspection = deployed.inspect(admitted.run.run_id)
    assert inspection is not None
    assert [(e.step, e.state, e.settled_by) for e in inspection.effects] == [
        ("notify", "accepted", "response")
    ]
    assert len(deployed.products.submissions(deployed.command_key(admitted))) == 1


def test_each_durable_event_is_advanced_once_when_nobody_changed_the_run(
    deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The advance made before a fenced transaction is its decision when the run as committed
    is the state it was made from: no event of an uncontended run is advanced twice, and no
    finish's continuation is carried twice (the one previewed to learn its credential, as
    07 §7.7 item 7 allows, is the one the transaction writes)."""
    import coordinator_core.shell.execution.attempt as attempt_module

    calls: list[str] = []
    original = attempt_module.advance
    carried: list[str | None] = []
    original_carry_on = attempt_module.carry_on

    def counted(definition: Any, state: Any, event: Any, now: Any, keys: Any) -> Any:
        calls.append(type(event).__name__)
        return original(definition, state, event, now, keys)

    def counted_carry_on(*args: Any, **options: Any) -> Any:
        result = original_carry_on(*args, **options)
        carried.append(result.holding)
        return result

    monkeypatch.setattr(attempt_module, "advance", counted)
    monkeypatch.setattr(attempt_module, "carry_on", counted_carry_on)
    admitted = deployed.admit(run_input())
    status, _ = deployed.drive(admitted.run.run_id)
    assert status.status == "finished", status
    # The read: ready to send (in memory), its outcome (the finish, whose continuation also
    # passes the notice's pre-send checks with the credential obtained beforehand, 07 §7.7
    # item 7 — inside the engine's chain); the notice: its outcome (the finish). Each event
    # the attempt feeds is advanced once.
    assert calls == ["ReadyToSend", "CallOutcome", "CallOutcome"], calls
    # Two finishes, one continuation each: the read's (holding the notice) and the notice's.
    assert carried == ["notify", None], carried


def test_a_record_without_the_flag_takes_the_skip_route_and_sends_nothing(
    sqlite_deployed: Deployed,
) -> None:
    deployed = sqlite_deployed
    admitted = deployed.admit(run_input(SKIPPED_APPLICATION_ID))
    status, _ = deployed.drive(admitted.run.run_id)
    assert (status.status, status.run.state.outcome, status.output) == (
        "finished",
        "no-current-permission",
        None,
    )
    inspection = deployed.inspect(admitted.run.run_id)
    assert inspection is not None
    assert [step.record.step for step in inspection.steps] == [
        "due",
        "read-application",
        "permission",
        "skipped",
    ]
    assert inspection.effects == []
    assert deployed.products.submissions(deployed.command_key(admitted)) == []


def test_a_503_is_retried_with_the_same_command_and_key(deployed: Deployed) -> None:
    deployed.products.inject("messaging", operation=SUBMIT, kind="fail", status=503)
    admitted = deployed.admit(run_input())
    status, _ = deployed.drive(admitted.run.run_id)
    assert status.status == "finished", status
    submissions = deployed.products.submissions(deployed.command_key(admitted))
    assert [entry["status"] for entry in submissions] == [503, 202]
    assert submissions[0]["body"] == submissions[1]["body"]
    inspection = deployed.inspect(admitted.run.run_id)
    assert inspection is not None
    notify = next(step for step in inspection.steps if step.record.step == "notify")
    assert (notify.record.state, notify.record.generation, notify.record.attempt) == (
        "delivered",
        1,
        2,
    )


def test_an_applied_effect_whose_answer_was_lost_waits_for_an_operator(
    deployed: Deployed,
) -> None:
    deployed.products.inject("messaging", operation=SUBMIT, kind="commit-then-drop")
    admitted = deployed.admit(run_input())
    run_id = admitted.run.run_id
    status, _ = deployed.drive(run_id)
    assert (status.status, status.run.state.failure_code, status.uncertain) == (
        "attention",
        "transport-uncertain",
        True,
    )
    inspection = deployed.inspect(run_id)
    assert inspection is not None
    assert [(e.step, e.state) for e in inspection.effects] == [("notify", "unknown")]
    assert inspection.recovery.reconcile_allowed and inspection.recovery.retry_allowed
    # Nothing is claimable and nothing is sent again, however long the workers tick.
    assert not any(deployed.worker().tick() for _ in range(5))
    key = deployed.command_key(admitted)
    submissions = deployed.products.submissions(key)
    assert [entry["outcome"] for entry in submissions] == ["dropped"]
    assert submissions[0]["committed"] is True
    # The receipt settles it without sending the message again (07 §9.2, T31).
    result = deployed.service.reconcile(CALLER, run_id, "case-17")
    assert result.result == "settled"
    assert [(e.state, e.settled_by) for e in result.inspection.effects] == [
        ("accepted", "reconcile")
    ]
    status, _ = deployed.drive(run_id)
    assert status.status == "finished" and status.run.state.outcome == "message-accepted"
    assert len(deployed.products.submissions(key)) == 1


def test_retry_same_resends_the_frozen_command_with_its_original_key(
    sqlite_deployed: Deployed,
) -> None:
    deployed = sqlite_deployed
    deployed.products.inject("messaging", operation=SUBMIT, kind="commit-then-drop")
    admitted = deployed.admit(run_input())
    run_id = admitted.run.run_id
    status, _ = deployed.drive(run_id)
    assert status.status == "attention"
    retried = deployed.service.retry_same(CALLER, run_id, "case-18")
    assert retried.status == "running"
    status, _ = deployed.drive(run_id)
    assert status.status == "finished", status
    submissions = deployed.products.submissions(deployed.command_key(admitted))
    assert len(submissions) == 2
    assert submissions[0]["body"] == submissions[1]["body"]
    inspection = deployed.inspect(run_id)
    assert inspection is not None
    assert [(e.state, e.settled_by) for e in inspection.effects] == [("accepted", "retry-same")]


def test_a_lapsed_lease_after_the_pre_send_mark_is_unknown_never_resent(
    sqlite_deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process dies after the may-send mark committed (here: the adapter raises): the
    record stays `dispatched`; when its lease lapses the claim makes it `unknown` (T28)."""
    deployed = sqlite_deployed
    admitted = deployed.admit(run_input())
    run_id = admitted.run.run_id
    worker = deployed.worker()
    adapters = deployed.runtime.adapters

    real_dispatch = adapters.dispatch

    def crash(command: Dispatch, frozen: Any, **options: Any) -> Any:
        if command.operation == SUBMIT:  # the notice's send: the process dies here
            raise RuntimeError("the process died here")
        return real_dispatch(command, frozen, **options)

    monkeypatch.setattr(adapters, "dispatch", crash)
    with pytest.raises(RuntimeError):
        worker.tick()  # carried from the read to the notice, which dies after its mark
    snapshot = deployed.store.reads.get_run_snapshot(run_id)
    assert snapshot is not None
    notify = snapshot.current
    assert (notify.record.state, notify.record.dispatched, notify.record.sent) == (
        "leased",
        True,
        True,
    )
    monkeypatch.undo()
    later = wall_clock() + ms(seconds=LEASE_SECONDS + 1)
    worker.tick(later)  # the claim transaction recovers the lapsed lease: T28
    status = deployed.status(run_id)
    assert status is not None
    assert (status.status, status.run.state.failure_code) == ("attention", "transport-uncertain")
    assert not worker.tick(later + ms(seconds=1))
    assert deployed.products.submissions(deployed.command_key(admitted)) == []


def test_a_wait_until_in_the_future_is_a_record_not_a_sleeping_process(
    sqlite_deployed: Deployed,
) -> None:
    deployed = sqlite_deployed
    due = wall_clock() + ms(hours=2)
    admitted = deployed.admit(run_input(send_after=format_instant(due)))
    run_id = admitted.run.run_id
    worker = deployed.worker()
    assert worker.tick()  # first claim computes the instant (T16)
    status = deployed.status(run_id)
    assert status is not None and status.status == "running"
    assert status.next_due_at is not None
    assert abs((status.next_due_at - due) / 1000) < 0.002
    assert not worker.tick()  # nothing is due now
    ticks = 0
    moment = due + ms(seconds=1)
    while (current := deployed.status(run_id)) is not None and current.status == "running":
        assert worker.tick(moment)
        ticks += 1
        assert ticks < 10
    assert current is not None and current.status == "finished"
    assert ticks == 1  # the due record's claim carries the run on to the end (07 §7.7)


def test_cancel_while_due_stops_the_run_without_sending(sqlite_deployed: Deployed) -> None:
    deployed = sqlite_deployed
    due = format_instant(wall_clock() + ms(hours=1))
    admitted = deployed.admit(run_input(send_after=due))
    run_id = admitted.run.run_id
    assert deployed.worker().tick()
    cancelled = deployed.service.cancel(CALLER, run_id, "case-19")
    assert (cancelled.status, cancelled.run.state.cancel_requested) == ("cancelled", True)
    again = deployed.service.cancel(CALLER, run_id, "case-19")
    assert again.status == "cancelled"
    assert not deployed.worker().tick(wall_clock() + ms(hours=2))
    assert deployed.products.submissions(deployed.command_key(admitted)) == []


def test_the_journal_holds_the_worker_entries_and_verifies(sqlite_deployed: Deployed) -> None:
    deployed = sqlite_deployed
    admitted = deployed.admit(run_input())
    deployed.drive(admitted.run.run_id)
    result = verify_directory(deployed.audit.path.parent)
    assert result.entries >= 11
    lines = [json.loads(line) for line in deployed.audit.path.read_text().splitlines()]
    actions = [(line["record"]["action"], line["record"]["outcome"]) for line in lines]
    assert actions.count(("dispatch", "intent")) == 1
    assert actions.count(("attempt", "intent")) == 6  # the wait-until is claimed twice
    text = deployed.audit.path.read_text()
    assert APPLICATION_ID not in text and str(admitted.run.run_id) not in text


def test_a_run_whose_deadline_passed_while_waiting_expires(sqlite_deployed: Deployed) -> None:
    deployed = sqlite_deployed
    due = format_instant(wall_clock() + ms(days=60))
    admitted = deployed.admit(run_input(send_after=due))
    run_id = admitted.run.run_id
    worker = deployed.worker()
    assert worker.tick()  # the instant is capped at the deadline (T16)
    status = deployed.status(run_id)
    assert status is not None and status.next_due_at == status.run.state.deadline_at
    # The claim transaction's sweep expires the overdue record (T26); nothing is leased.
    assert not worker.tick(status.run.state.deadline_at + ms(seconds=1))
    status = deployed.status(run_id)
    assert status is not None
    assert (status.status, status.run.state.failure_code) == ("expired", "deadline-reached")
    assert deployed.products.submissions(deployed.command_key(admitted)) == []


def test_the_worker_loop_runs_until_stopped(sqlite_deployed: Deployed) -> None:
    deployed = sqlite_deployed
    shutdown = Shutdown(ServiceLog())
    loop = threading.Thread(
        target=worker_loop, args=(deployed.worker("loop"), 10, shutdown, shutdown.log)
    )
    loop.start()
    try:
        admitted = deployed.admit(run_input())
        deadline = time.monotonic() + 30
        while (status := deployed.status(admitted.run.run_id)) is not None:
            if status.status != "running" or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    finally:
        shutdown.request()
        loop.join(timeout=20)
    assert not loop.is_alive()
    assert status is not None and status.status == "finished"


def test_an_admission_wakes_an_idle_worker_loop_of_its_process(sqlite_deployed: Deployed) -> None:
    """07 §7.7 item 4: the loop waits on the service's wake-up, not out its poll interval.
    With the longest poll (10 s) the admitted run still finishes: each step's commit is
    followed by the next tick at once, and the admission ended the idle wait."""
    deployed = sqlite_deployed
    worker = deployed.worker("woken")
    shutdown = Shutdown(ServiceLog())
    idle = worker.wakeup.generation
    loop = threading.Thread(target=worker_loop, args=(worker, 10_000, shutdown, shutdown.log))
    loop.start()
    try:
        time.sleep(0.3)  # the loop's first tick found nothing; it now waits for 10 s
        admitted = deployed.admit(run_input())
        assert worker.wakeup.generation > idle  # the admission rang
        deadline = time.monotonic() + 8  # a hang guard below the poll interval
        while (status := deployed.status(admitted.run.run_id)) is not None:
            if status.status != "running" or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    finally:
        shutdown.request()  # rings every loop: the wait ends at once
        loop.join(timeout=20)
    assert not loop.is_alive()
    assert status is not None and status.status == "finished", status
