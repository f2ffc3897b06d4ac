"""An admission that claims its run's first record for an idle loop of its process (07 §7.7
item 6), and the three write transactions of the integration project's run it leads to
(items 6 and 7 composed): the admission with the read's lease and frozen request, the read's
finish through the notice's lease, freeze and `dispatched` mark, the notice's finish.

A crash at the admission's boundary — before its commit, or after it and before the loop
took the claim — sends nothing twice and nothing without its mark: the lease the admission
took lapses like a claim's and the run is retried by any worker (07 §7.7 item 6: "claimable
again by anyone once its lease lapses").
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from integration_support import Deployed, run_input
from test_worker_fused_crashes import (
    ProcessDied,
    finished_once,
    record,
    states,
    stored,
    take_over,
)

from coordinator_core.shell.audit import verify_directory
from coordinator_core.shell.service import RunAdmitted, ServiceRefusal
from coordinator_core.shell.store import writes

READ = "read-application"


def admit_taken(deployed: Deployed, monkeypatch: pytest.MonkeyPatch) -> RunAdmitted:
    """Admit a run while an idle loop of this process is free to take it."""
    wakeup = deployed.runtime.wakeup
    free = iter([True])
    monkeypatch.setattr(wakeup, "take_idle_loop", lambda: next(free, False))
    return deployed.admit(run_input())


def test_the_loop_that_took_the_run_is_woken_when_the_caller_says_it_answered(
    deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With `after_answer` (the API's admission), the loop the run was handed to is rung only
    by the action the admission hands over, which the API runs once its answer is sent; the
    claim is handed at the commit all the same, and the ring, when it comes, is the one the
    taken loop waits for."""
    wakeup = deployed.runtime.wakeup
    free = iter([True])
    monkeypatch.setattr(wakeup, "take_idle_loop", lambda: next(free, False))
    rings: list[str] = []
    monkeypatch.setattr(wakeup, "ring", lambda: rings.append("ring"))
    later: list[Any] = []
    admitted = deployed.admit(run_input(), after_answer=later.append)
    assert admitted.created
    assert rings == []  # nobody woken beside the answer
    assert len(later) == 1
    later[0]()
    assert rings == ["ring"]
    monkeypatch.undo()
    assert deployed.worker().tick()  # the handed claim, no claim transaction
    finished_once(deployed, admitted)


def test_a_refused_admission_still_hands_over_its_wake_up(
    deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    later: list[Any] = []
    with pytest.raises(ServiceRefusal):
        deployed.admit({"applicationId": 7}, after_answer=later.append)
    assert len(later) == 1  # the caller rings once it answered the refusal


def count_writes(deployed: Deployed, monkeypatch: pytest.MonkeyPatch, *also: str) -> list[str]:
    """The names of the store's run write transactions as they are made, in order (`also`:
    more of `RunWrites`' methods to count): the claims, fences and finishes, a claim that
    found nothing not counted."""
    store = deployed.store.writes
    seen: list[str] = []
    for name in (*also, "claim_due_step", "complete_step", "record_step_progress"):
        real = getattr(store, name)

        def traced(*arguments: Any, _real: Any = real, _name: str = name, **options: Any) -> Any:
            written = _real(*arguments, **options)
            if _name != "claim_due_step" or written is not None:
                seen.append(_name)
            return written

        monkeypatch.setattr(store, name, traced)
    return seen


def test_a_run_taken_at_admission_needs_three_write_transactions(
    deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = count_writes(deployed, monkeypatch, "admit")
    admitted = admit_taken(deployed, monkeypatch)
    snapshot = stored(deployed, admitted)
    read = record(snapshot, READ)
    # The admission leased the read (through the instant that was due at once) and froze it.
    assert states(snapshot) == {"due": ("delivered", 1, 1), READ: ("leased", 1, 1)}
    assert read.lease is not None and read.record.command_prepared
    assert deployed.worker().tick()  # the loop takes the handed claim: no claim of its own
    monkeypatch.undo()
    assert seen == ["admit", "complete_step", "complete_step"]
    finished_once(deployed, admitted)
    attempts = deployed.store.reads.recent_attempts(admitted.run.run_id)
    assert {step: [a.outcome for a in found] for step, (found, _) in attempts.items()} == {
        "due": ["delivered"],
        READ: ["delivered"],
        "permission": ["delivered"],
        "notify": ["delivered"],
        "accepted": ["delivered"],
    }
    assert verify_directory(deployed.audit.path.parent).entries > 0


def admit_dying_after_the_commit(deployed: Deployed, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Admit a run taken by an idle loop, the process dying right after the admission's commit
    (before the loop took the claim); answers what the admission committed."""
    real = writes.RunWrites.admit
    admitted_runs: list[Any] = []

    def dying(self: writes.RunWrites, admission: Any, now: int, **options: Any) -> Any:
        admitted_runs.append(real(self, admission, now, **options))
        raise ProcessDied("after the commit")

    monkeypatch.setattr(writes.RunWrites, "admit", dying)
    with pytest.raises(ProcessDied):
        admit_taken(deployed, monkeypatch)
    (result,) = admitted_runs
    return result


def count_credentials(deployed: Deployed, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """The (step, thread name) of every fresh credential the deployment's adapters obtain."""
    adapters = deployed.runtime.ports.adapters
    real = adapters.obtain_credential
    seen: list[tuple[str, str]] = []

    def obtain(command: Any, **options: Any) -> Any:
        seen.append((command.step, threading.current_thread().name))
        return real(command, **options)

    monkeypatch.setattr(adapters, "obtain_credential", obtain)
    return seen


def test_the_first_calls_credential_is_obtained_beside_the_admission_and_used_once(
    deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """07 §7.7 items 6 and 7: the read the admission leased asks for a fresh credential; it is
    obtained beside the admission's transaction (not by the loop after the answer), and that
    attempt sends with it without asking again."""
    obtained = count_credentials(deployed, monkeypatch)
    admitted = admit_taken(deployed, monkeypatch)
    assert deployed.worker().tick()  # the handed claim
    finished_once(deployed, admitted)
    reads = [thread for step, thread in obtained if step == READ]
    assert len(reads) == 1 and reads[0].startswith("credential-ahead"), obtained
    assert [step for step, _ in obtained].count("notify") == 1  # the next call asks as before


def test_a_credential_obtained_for_a_claim_nobody_took_is_never_used(
    deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process died after the admission's commit, before its loop took the claim: the
    credential obtained beside it goes with the process; the worker that retries the read once
    its lease lapsed obtains its own."""
    obtained = count_credentials(deployed, monkeypatch)
    result = admit_dying_after_the_commit(deployed, monkeypatch)
    admitted = RunAdmitted(deployed.status(result.run.run_id), True)  # type: ignore[arg-type]
    take_over(deployed, admitted, lambda status: status != "running")
    monkeypatch.undo()
    finished_once(deployed, admitted)
    ahead = [thread.startswith("credential-ahead") for step, thread in obtained if step == READ]
    assert sorted(ahead) == [False, True], obtained  # one beside the admission, one retrying


def test_an_admission_that_dies_before_its_commit_leaves_nothing_and_sends_nothing(
    deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its journal append happened (intents), then the process died inside the transaction:
    no run exists, nothing was sent, and the journal still verifies."""
    real = writes.RunWrites.admit

    def dying(self: writes.RunWrites, admission: Any, now: int, **options: Any) -> Any:
        journal = admission.journal
        assert journal is not None  # the admission claims the record for the taken loop

        def die() -> None:
            raise ProcessDied("before the commit")

        def append_then_die() -> None:
            journal()  # queued, durable before the commit: the process dies just then
            self.before_commit(die)

        return real(
            self,
            type(admission)(**{**_fields(admission), "journal": append_then_die}),
            now,
            **options,
        )

    monkeypatch.setattr(writes.RunWrites, "admit", dying)
    with pytest.raises(ProcessDied):
        admit_taken(deployed, monkeypatch)
    monkeypatch.undo()
    assert deployed.store.reads.list_runs(owner=None).runs == ()
    assert deployed.runtime.wakeup.take_handed() is None
    assert verify_directory(deployed.audit.path.parent).entries > 0


def test_an_admission_whose_process_died_after_its_commit_is_retried_and_sends_once(
    deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run and its leased, frozen read committed; the loop never took the claim. The lease
    lapses like a claim's (T29): any worker retries the read with the frozen request."""
    result = admit_dying_after_the_commit(deployed, monkeypatch)
    monkeypatch.undo()
    assert result.claim is not None and deployed.runtime.wakeup.take_handed() is None
    admitted = RunAdmitted(deployed.status(result.run.run_id), True)  # type: ignore[arg-type]
    read = record(stored(deployed, admitted), READ)
    assert (read.record.state, read.record.attempt) == ("leased", 1)
    frozen = read.command
    assert not deployed.worker("other").tick()  # leased: nobody claims it before it lapses
    take_over(deployed, admitted, lambda status: status != "running")
    finished_once(deployed, admitted)
    read = record(stored(deployed, admitted), READ)
    assert (read.record.state, read.record.attempt, read.command) == ("delivered", 2, frozen)


def _fields(value: Any) -> dict[str, Any]:
    return {name: getattr(value, name) for name in value.__dataclass_fields__}


def test_an_admission_that_parks_its_first_wait_schedules_the_instant_it_falls_due(
    deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wait-until that is not yet due at admission is parked by the admission's claim: there
    is nothing to hand over and nobody else is told, so the admitting process schedules the
    instant itself (and announces it) — else the run would sleep until the idle cap."""
    wakeup = deployed.runtime.wakeup
    scheduled: list[int] = []
    real_schedule = wakeup.schedule

    def schedule(instant: int) -> bool:
        scheduled.append(instant)
        return real_schedule(instant)

    monkeypatch.setattr(wakeup, "schedule", schedule)
    free = iter([True])
    monkeypatch.setattr(wakeup, "take_idle_loop", lambda: next(free, False))
    admitted = deployed.admit(run_input(send_after="2999-01-01T00:00:00Z"))
    due = record(stored(deployed, admitted), "due").record
    assert due.state == "pending" and due.due_at is not None
    assert scheduled == [due.due_at]


def test_a_loop_rests_after_its_handed_run_unless_another_became_claimable(
    deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 25: the loop that worked the run an admission handed it waits for a ring instead
    of claiming again (`Worker.rests`), because whatever became claimable meanwhile rang; a
    run admitted during the tick with no idle loop to take it rings, and the loop claims it
    at once."""
    wakeup = deployed.runtime.wakeup
    worker = deployed.worker()
    assert not worker.tick()  # nothing claimable: the process looks ahead
    first = admit_taken(deployed, monkeypatch)
    monkeypatch.undo()
    seen = wakeup.generation  # read by the loop its admission rang
    assert worker.tick() and worker.rests(seen)
    finished_once(deployed, first)
    assert not worker.tick()  # the claim it saves would have found nothing

    second = admit_taken(deployed, monkeypatch)
    monkeypatch.undo()
    seen = wakeup.generation
    monkeypatch.setattr(wakeup, "take_idle_loop", lambda: False)
    third = deployed.admit(run_input())  # no idle loop: announced, and this process rung
    monkeypatch.undo()
    assert worker.tick() and not worker.rests(seen)
    finished_once(deployed, second)
    assert worker.tick()  # the loop claims the third run at once
    # its finish looked for the next claim in the same transaction (07 §7.7 item 8) and
    # found none, so the loop rests; a ring since then makes it look again
    assert worker.rests(wakeup.generation)
    wakeup.ring()
    assert not worker.rests(wakeup.generation - 1)
    finished_once(deployed, third)
