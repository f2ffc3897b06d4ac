"""Parked runs at scale (issue 9) through the real worker, engine and store: due waits fired in
batches, each once, and the look-ahead that lets an idle poller sleep until the store can next
have work (07 §7.7 item 4). The project is `examples/delayed-follow-up` (wait-until → read BReg
→ choose → send Messaging → finish), parked by an instant in the future."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from integration_support import Deployed, run_input
from support.instants import ms

from coordinator_core.engine import format_instant
from coordinator_core.shell.clock import wall_clock
from coordinator_core.shell.execution.wakeup import Wakeup
from coordinator_core.shell.service import RunAdmitted
from coordinator_core.shell.store import FIRE_BATCH

WAIT = "due"
READ = "read-application"


def _parked(deployed: Deployed, count: int, due: int) -> list[RunAdmitted]:
    """`count` runs whose wait-until is due at `due`, each parked by one claim (T16)."""
    instant = format_instant(due)
    runs = [deployed.admit(run_input(send_after=instant)) for _ in range(count)]
    worker = deployed.worker("parker")
    while worker.tick():
        pass
    for admitted in runs:
        snapshot = deployed.store.reads.get_run_snapshot(admitted.run.run_id)
        assert snapshot is not None and snapshot.run.state.current_step == WAIT
        assert (snapshot.current.record.state, snapshot.current.record.due_at) == ("pending", due)
    return runs


def _entries(deployed: Deployed, admitted: RunAdmitted, step: str) -> list[tuple[str, str, int]]:
    """The worker entries journaled for one record of one run: (action, outcome, attempt)."""
    references = deployed.secrets.audit_references
    run_ref = references.run(str(admitted.run.run_id))
    step_ref = references.step(str(admitted.run.run_id), step)
    found = []
    for path in sorted(deployed.audit.path.parent.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            record = entry["record"]
            if (
                entry["phase"] == "record"
                and record.get("runRef") == run_ref
                and record["stepRef"] == step_ref
            ):
                found.append((record["action"], record["outcome"], record["attempt"]))
    return found


def test_a_batch_fires_each_due_wait_once_and_leaves_the_read_to_an_ordinary_claim(
    deployed: Deployed,
) -> None:
    due = wall_clock() + ms(seconds=5)
    runs = _parked(deployed, 5, due)
    fired_at = due + ms(seconds=1)
    worker = deployed.worker()
    assert worker.fire_due_waits(due - ms(milliseconds=1)) == 0  # not due yet
    assert worker.fire_due_waits(fired_at) == 5
    assert worker.fire_due_waits(fired_at) == 0  # each once
    for admitted in runs:
        snapshot = deployed.store.reads.get_run_snapshot(admitted.run.run_id)
        assert snapshot is not None
        wait, read = snapshot.step(WAIT), snapshot.step(READ)
        assert wait is not None and (wait.record.state, wait.record.finished_at) == (
            "delivered",
            fired_at,
        )
        # the read needs I/O: pending and due, never leased, nothing frozen yet
        assert read is not None and (
            read.record.state,
            read.record.due_at,
            read.record.attempt,
        ) == (
            "pending",
            fired_at,
            0,
        )
        assert (read.lease, read.command) == (None, None)
        # parked by one claim, fired by the batch: one intent and one transition each
        assert _entries(deployed, admitted, WAIT) == [
            ("attempt", "intent", 1),
            ("transition", "pending", 0),
            ("attempt", "intent", 1),
            ("transition", "delivered", 1),
        ]
        assert _entries(deployed, admitted, READ) == []
    for admitted in runs:
        status, _ = deployed.drive(admitted.run.run_id)
        assert status.status == "finished", status
        assert len(deployed.products.submissions(deployed.command_key(admitted))) == 1


def test_a_claim_that_finds_a_parked_wait_due_has_the_next_tick_fire_the_others(
    sqlite_deployed: Deployed,
) -> None:
    deployed = sqlite_deployed
    due = wall_clock() + ms(seconds=5)
    runs = _parked(deployed, 4, due)
    worker = deployed.worker()
    later = due + ms(seconds=1)

    def delivered() -> int:
        count = 0
        for admitted in runs:
            snapshot = deployed.store.reads.get_run_snapshot(admitted.run.run_id)
            assert snapshot is not None
            wait = snapshot.step(WAIT)
            count += wait is not None and wait.record.state == "delivered"
        return count

    # one wait claimed as usual, carried on through its read; its finish claimed the next
    # due wait in the same transaction (07 §7.7 item 8), for the loop's next tick
    assert worker.tick(later)
    assert delivered() == 2
    assert worker.holding
    assert worker.tick(later)  # the other two in one batch, then the claimed run worked
    assert delivered() == 4


def test_a_full_batch_asks_for_another(sqlite_deployed: Deployed) -> None:
    deployed = sqlite_deployed
    due = wall_clock() + ms(seconds=5)
    _parked(deployed, FIRE_BATCH + 1, due)
    worker = deployed.worker()
    worker.wakeup.take_fire()
    assert worker.fire_due_waits(due) == FIRE_BATCH
    assert worker.wakeup.take_fire()  # more may be due
    assert worker.fire_due_waits(due) == 1
    assert not worker.wakeup.take_fire()


def test_an_idle_worker_sleeps_until_the_next_due_wait_and_an_earlier_one_wakes_it_sooner(
    deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """07 §7.7 item 4: after a tick that found nothing, the poller's sleep ends at the store's
    next due instant; a record this process parks earlier shortens it, and only that one is
    announced to the other processes."""
    now = wall_clock() + ms(seconds=30)  # after every admission below
    worker = deployed.worker()
    announced: list[int] = []
    real_announce = deployed.store.channel.announce

    def announce(instant: int) -> Any:
        announced.append(instant)
        return real_announce(instant)

    worker.ports = replace(
        worker.ports, wakeup=Wakeup(clock=lambda: now, cap=3600.0), announce=announce
    )
    assert not worker.tick(now)  # an empty store: nothing to wait for
    assert worker.wakeup.poll_seconds(0.1) == pytest.approx(3600, abs=1)
    first = _admit_parked(deployed, now + ms(seconds=600))
    assert worker.tick(now) and not worker.tick(now)  # parked, then nothing to do
    assert worker.wakeup.poll_seconds(0.1) == pytest.approx(600, abs=1)
    _admit_parked(deployed, now + ms(seconds=900))
    assert worker.tick(now)
    _admit_parked(deployed, now + ms(seconds=120))
    assert worker.tick(now)  # parking it lowers the instant at once, before any look
    assert worker.wakeup.poll_seconds(0.1) == pytest.approx(120, abs=1)
    assert announced == [now + ms(seconds=600), now + ms(seconds=120)]
    assert not worker.tick(now)
    assert worker.wakeup.poll_seconds(0.1) == pytest.approx(120, abs=1)
    assert first.run.status == "running"


def _admit_parked(deployed: Deployed, due: int) -> RunAdmitted:
    return deployed.admit(run_input(send_after=format_instant(due)))
