"""A crash at each fused transaction boundary of the worker (07 §7.7, issue 9), on each backend.

The integration project (`examples/delayed-follow-up`, due at once: wait-until → read BReg →
choose → send Messaging → finish) takes three worker transactions when nothing fails:

1. **claim**: the claim of `due` carried on through its instant to the lease of the read and
   the freeze of the read's request (07 §7.7 items 1–2; the read's pre-send checks are made
   here, item 3) — or, when an idle loop of the admitting process takes the run, the
   **admission** itself (item 6);
2. **read-finish**: the read's finish carried on through the choice to the lease of the notice,
   the freeze of its request and its `dispatched` mark, its credential obtained before the
   transaction began (item 7);
3. **notice-finish**: the notice's finish carried on through the finish step (run finished).

When the notice's credential cannot be obtained beforehand, the read-finish stops at the
freeze and a fourth transaction comes between 2 and 3:

- **pre-send**: the notice's `dispatched` mark, committed before the request leaves (07 §7.2).

A run parked in its wait (instant in the future) falls due in one more kind of transaction:

- **fire**: a batch of due waits (issue 9), each delivered by the engine's claim of pure work
  only, the read after it left pending and due (claimed by a later claim, as in 1).

For each, the process dies (a) just before the transaction commits — its writes are
issued and its journal entries durable, then the last thing before the commit (a barrier of
the store transaction after the journal's, registered by the checked write `apply_txn`) raises
— and (b) just after the commit, before the worker does anything else (the store
call returns, then the process dies). `ProcessDied` is a `BaseException`, so nothing in the
worker catches it: the tick stops where a SIGKILL would have stopped it. A fresh worker then
takes over (at a later `now`, after the lease lapsed) and the tests check 07 §1:

* the run ends as it must (finished, or `attention` when the notice may have been sent without
  a recorded outcome: guarantees 5 and 6), and the notice is sent at most once — twice only by
  an operator's `retry-same` of a command marked `dispatched`, with the same bytes and key;
* the command frozen before the crash is the command sent after it (guarantee 4);
* the audit journal verifies, and the entries appended by a transaction that rolled back are
  either intents or are restated (or corrected) by a later committed entry on the same record
  attempt; the journal's last word on every record attempt agrees with the store (07 §11).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import pytest
from integration_support import CALLER, Deployed, run_input
from support.instants import ms

from coordinator_core.engine import format_instant
from coordinator_core.shell.audit import verify_directory
from coordinator_core.shell.clock import wall_clock
from coordinator_core.shell.execution import attempt as attempt_module
from coordinator_core.shell.service import RunAdmitted
from coordinator_core.shell.store import LEASE_SECONDS, RunSnapshot, StoredStep, writes

NOTIFY = "notify"
READ = "read-application"


class ProcessDied(BaseException):
    """The worker process dies here: no handler of the worker or the store may outlive it
    (the store transaction rolls back, as the server would roll back a dead session)."""


Moment = Literal["before-commit", "after-commit"]


@dataclass(frozen=True)
class Boundary:
    """A fused transaction: the store method that runs it and which call of that method in
    one run's tick it is."""

    name: str
    method: Literal["claim_due_step", "complete_step", "record_step_progress", "fire_due_waits"]
    call: int


CLAIM = Boundary("claim", "claim_due_step", 1)
READ_FINISH = Boundary("read-finish", "complete_step", 1)
PRE_SEND = Boundary("pre-send", "record_step_progress", 1)
NOTICE_FINISH = Boundary("notice-finish", "complete_step", 2)
FIRE = Boundary("fire", "fire_due_waits", 1)


@dataclass
class Crash:
    """What the armed crash saw: the journal sequence before and after the transaction that
    died (the entries it appended are `(before, after]`), and the run as stored after it."""

    journal_before: int = 0
    journal_after: int = 0
    happened: bool = False


def arm(
    monkeypatch: pytest.MonkeyPatch, deployed: Deployed, boundary: Boundary, moment: Moment
) -> Crash:
    """Make the worker process die at `boundary`, `moment`; answers what it saw."""
    store = deployed.store.writes
    real_method = getattr(store, boundary.method)
    real_apply = writes.apply_txn
    crash = Crash()
    calls = 0
    armed = False

    def die() -> None:
        crash.journal_after = deployed.audit.sequence
        crash.happened = True
        raise ProcessDied("before the commit")

    def apply(*arguments: Any, **options: Any) -> Any:
        written = real_apply(*arguments, **options)
        if armed:  # the transaction's writes are issued and its entries queued: it dies
            store.before_commit(die)  # once they are durable, at the last moment before commit
        return written

    def method(*arguments: Any, **options: Any) -> Any:
        nonlocal calls, armed
        calls += 1
        if calls != boundary.call:
            return real_method(*arguments, **options)
        crash.journal_before = deployed.audit.sequence
        if moment == "before-commit":
            armed = True
            try:
                return real_method(*arguments, **options)
            finally:
                armed = False
        real_method(*arguments, **options)  # committed
        crash.journal_after = deployed.audit.sequence
        crash.happened = True
        raise ProcessDied("after the commit")

    monkeypatch.setattr(store, boundary.method, method)
    monkeypatch.setattr(writes, "apply_txn", apply)
    return crash


def without_credentials_beforehand(monkeypatch: pytest.MonkeyPatch) -> None:
    """A continuation never gets its next call's credential before its transaction (the token
    endpoint answered too late, say): the call's `dispatched` mark then commits in a pre-send
    fence of its own."""
    monkeypatch.setattr(attempt_module.RecordAttempt, "prefetch", lambda *_arguments: (None, None))


def crash_at(
    monkeypatch: pytest.MonkeyPatch,
    deployed: Deployed,
    boundary: Boundary,
    moment: Moment,
    *,
    beforehand: bool = True,
) -> tuple[RunAdmitted, Crash]:
    """Admit a run, tick it with a worker that dies at `boundary`, `moment`; the crash hooks
    are removed afterwards (the fresh worker runs the real store). Without `beforehand`, the
    crashed worker obtains no credential before a continuation's transaction."""
    admitted = deployed.admit(run_input())
    crash = arm(monkeypatch, deployed, boundary, moment)
    if not beforehand:
        without_credentials_beforehand(monkeypatch)
    with pytest.raises(ProcessDied):
        deployed.worker("crashed").tick()
    monkeypatch.undo()
    assert crash.happened
    return admitted, crash


def stored(deployed: Deployed, admitted: RunAdmitted) -> RunSnapshot:
    snapshot = deployed.store.reads.get_run_snapshot(admitted.run.run_id)
    assert snapshot is not None
    return snapshot


def record(snapshot: RunSnapshot, step: str) -> StoredStep:
    found = snapshot.step(step)
    assert found is not None, step
    return found


def states(snapshot: RunSnapshot) -> dict[str, tuple[str, int, int]]:
    return {
        stored.step: (stored.record.state, stored.record.generation, stored.record.attempt)
        for stored in snapshot.steps
    }


def later_instants() -> Iterator[int]:
    """Instants for a fresh worker: past every lease taken so far, one second apart."""
    start = wall_clock() + ms(seconds=LEASE_SECONDS + 1)
    return (start + ms(seconds=index) for index in range(60))


def take_over(
    deployed: Deployed, admitted: RunAdmitted, until: Callable[[str], bool], *, name: str = "fresh"
) -> str:
    """A fresh worker ticks at later instants until the run's status satisfies `until`;
    answers the status."""
    worker = deployed.worker(name)
    for now in later_instants():
        worker.tick(now)
        status = deployed.status(admitted.run.run_id)
        assert status is not None
        if until(status.status):
            return status.status
    raise AssertionError("the run did not get on")


def finished_once(deployed: Deployed, admitted: RunAdmitted, *, sends: int = 1) -> None:
    """The run finished with the notice's receipt; Messaging received `sends` submissions of
    the one frozen command (same body, same key), and accepted at most one message."""
    status = deployed.status(admitted.run.run_id)
    assert status is not None
    assert (status.status, status.run.state.outcome) == ("finished", "message-accepted"), status
    assert isinstance(status.output, dict) and set(status.output) == {"messageId"}
    submissions = deployed.products.submissions(deployed.command_key(admitted))
    assert len(submissions) == sends
    assert len({json.dumps(entry["body"], sort_keys=True) for entry in submissions}) == 1
    assert sum(1 for entry in submissions if entry.get("committed")) >= 1


# -- the journal ----------------------------------------------------------------------------


def _journal(deployed: Deployed) -> list[dict[str, Any]]:
    directory = deployed.audit.path.parent
    lines: list[dict[str, Any]] = []
    for path in sorted(directory.glob("*.jsonl")):
        lines.extend(json.loads(line) for line in path.read_text().splitlines())
    return lines


def _worker_entries(deployed: Deployed, admitted: RunAdmitted) -> list[dict[str, Any]]:
    run_ref = deployed.secrets.audit_references.run(str(admitted.run.run_id))
    return [
        line
        for line in _journal(deployed)
        if line["phase"] == "record" and line["record"].get("runRef") == run_ref
    ]


def _attempt_of(line: dict[str, Any]) -> tuple[str, int, int]:
    entry = line["record"]
    return entry["stepRef"], entry["generation"], entry["attempt"]


def journaled_by_the_crashed_transaction(
    deployed: Deployed, admitted: RunAdmitted, crash: Crash
) -> list[tuple[str, str, str]]:
    """The entries appended by the transaction at the crash (rolled back before its commit,
    or committed just before the process died), as (step, action, outcome); "?" names a
    record that the store does not hold."""
    names = {
        deployed.secrets.audit_references.step(str(admitted.run.run_id), row.step): row.step
        for row in stored(deployed, admitted).steps
    }
    found = []
    for line in _worker_entries(deployed, admitted):
        if crash.journal_before < line["sequence"] <= crash.journal_after:
            entry = line["record"]
            found.append((names.get(entry["stepRef"], "?"), entry["action"], entry["outcome"]))
    return found


_LAST_WORD = {"delivered": {"delivered"}, "unknown": {"unknown", "lease-lapsed"}}
"""The worker outcomes that may end a record attempt the store holds in a final state."""


def assert_journal_agrees(
    deployed: Deployed, admitted: RunAdmitted, crash: Crash, moment: Moment
) -> None:
    """07 §11 after a crash: the journal verifies; no entry claims an effect that did not
    commit unless a later committed entry restates or corrects it; the last word on every
    record attempt agrees with the store; every send of the notice had its dispatch intent."""
    result = verify_directory(deployed.audit.path.parent)
    assert result.entries == len(_journal(deployed))
    entries = _worker_entries(deployed, admitted)
    window = [e for e in entries if crash.journal_before < e["sequence"] <= crash.journal_after]
    assert window, "the transaction that died journaled nothing"
    if moment == "before-commit":
        later = [e for e in entries if e["sequence"] > crash.journal_after]
        for line in window:
            if line["record"]["outcome"] == "intent":
                continue
            assert any(_attempt_of(other) == _attempt_of(line) for other in later), line
    references = deployed.secrets.audit_references
    run_id = str(admitted.run.run_id)
    for row in stored(deployed, admitted).steps:
        step_ref = references.step(run_id, row.step)
        endings = [
            e
            for e in entries
            if e["record"]["stepRef"] == step_ref and e["record"]["outcome"] != "intent"
        ]
        for attempt in {_attempt_of(e) for e in endings}:
            last = [e for e in endings if _attempt_of(e) == attempt][-1]["record"]["outcome"]
            if attempt[1:] != (row.record.generation, row.record.attempt):
                assert last != "delivered", (row.step, attempt, last)  # an earlier attempt
            elif row.record.settled_by != "reconcile":  # a reconcile is the API's entry, not ours
                assert last in _LAST_WORD.get(row.record.state, {last}), (row.step, attempt, last)
    notify_ref = references.step(run_id, NOTIFY)
    dispatches = [
        e
        for e in entries
        if e["record"]["stepRef"] == notify_ref and e["record"]["action"] == "dispatch"
    ]
    committed_dispatches = [e for e in dispatches if e not in window or moment == "after-commit"]
    submissions = deployed.products.submissions(deployed.command_key(admitted))
    assert len(submissions) <= len(committed_dispatches)


# -- 1. the claim with the freeze of the read's request -------------------------------------


def test_a_claim_that_dies_before_its_commit_leaves_the_run_as_admitted_and_it_finishes_once(
    deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    admitted, crash = crash_at(monkeypatch, deployed, CLAIM, "before-commit")
    snapshot = stored(deployed, admitted)
    # Nothing of the claim committed: `due` is pending and unleased, no read record exists.
    assert states(snapshot) == {"due": ("pending", 1, 0)}
    assert record(snapshot, "due").lease is None
    assert journaled_by_the_crashed_transaction(deployed, admitted, crash) == [
        ("due", "attempt", "intent"),
        ("due", "transition", "pending"),
        ("due", "attempt", "intent"),
        ("due", "transition", "delivered"),
        ("?", "attempt", "intent"),  # the read, whose record never committed
    ]
    take_over(deployed, admitted, lambda status: status != "running")
    finished_once(deployed, admitted)
    assert_journal_agrees(deployed, admitted, crash, "before-commit")


def test_a_claim_that_dies_after_its_commit_retries_the_read_it_froze_and_finishes_once(
    deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    admitted, crash = crash_at(monkeypatch, deployed, CLAIM, "after-commit")
    snapshot = stored(deployed, admitted)
    read = record(snapshot, READ)
    assert (read.record.state, read.record.attempt, read.record.command_prepared) == (
        "leased",
        1,
        True,
    )
    frozen = read.command
    take_over(deployed, admitted, lambda status: status != "running")
    finished_once(deployed, admitted)
    after = stored(deployed, admitted)
    read = record(after, READ)
    # The lapsed lease was a retryable attempt-timeout (T29); the retry used the frozen request.
    assert (read.record.state, read.record.generation, read.record.attempt) == ("delivered", 1, 2)
    assert read.command == frozen
    assert_journal_agrees(deployed, admitted, crash, "after-commit")


# -- 2. the read's finish carried on to the lease and freeze of the notice ------------------


def test_a_read_finish_that_dies_before_its_commit_leaves_no_notice_and_the_read_is_retried(
    deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    admitted, crash = crash_at(monkeypatch, deployed, READ_FINISH, "before-commit")
    snapshot = stored(deployed, admitted)
    # The read stays leased at its first attempt; neither the choice nor the notice exists.
    assert states(snapshot) == {"due": ("delivered", 1, 1), READ: ("leased", 1, 1)}
    assert journaled_by_the_crashed_transaction(deployed, admitted, crash) == [
        (READ, "transition", "delivered"),
        ("?", "attempt", "intent"),
        ("?", "transition", "delivered"),  # the choice, whose record never committed
        ("?", "attempt", "intent"),  # the notice, idem
        ("?", "dispatch", "intent"),  # its mark, idem: nothing was sent
    ]
    assert deployed.products.submissions(deployed.command_key(admitted)) == []
    take_over(deployed, admitted, lambda status: status != "running")
    finished_once(deployed, admitted)
    read = record(stored(deployed, admitted), READ)
    assert (read.record.state, read.record.attempt) == ("delivered", 2)
    assert_journal_agrees(deployed, admitted, crash, "before-commit")


def test_a_notice_marked_by_a_read_finish_whose_worker_died_is_unknown_and_only_retry_same_sends_it(
    deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read's finish committed the notice's lease, frozen request and `dispatched` mark
    (07 §7.7 item 7), then the process died before the request left: the mark is proof that
    it may have been sent, so the lapsed lease is `unknown` and nothing is resent but by an
    operator's retry-same (same bytes, same key)."""
    admitted, crash = crash_at(monkeypatch, deployed, READ_FINISH, "after-commit")
    snapshot = stored(deployed, admitted)
    notify = record(snapshot, NOTIFY)
    assert states(snapshot)["permission"] == ("delivered", 1, 1)
    assert (notify.record.state, notify.record.attempt, notify.record.command_prepared) == (
        "leased",
        1,
        True,
    )
    assert (notify.record.dispatched, notify.record.sent) == (True, True)
    assert journaled_by_the_crashed_transaction(deployed, admitted, crash)[-1] == (
        NOTIFY,
        "dispatch",
        "intent",
    )
    frozen = notify.command
    key = deployed.command_key(admitted)
    assert deployed.products.submissions(key) == []  # it died before the request left
    status = take_over(deployed, admitted, lambda status: status != "running")
    assert status == "attention"
    notify = record(stored(deployed, admitted), NOTIFY)
    assert (notify.record.state, notify.record.uncertain) == ("unknown", True)
    assert deployed.products.submissions(key) == []
    assert_journal_agrees(deployed, admitted, crash, "after-commit")
    retried = deployed.service.retry_same(CALLER, admitted.run.run_id, "case-90")
    assert retried.status == "running"
    take_over(deployed, admitted, lambda status: status != "running", name="after-retry")
    finished_once(deployed, admitted)
    notify = record(stored(deployed, admitted), NOTIFY)
    assert (notify.command, notify.record.generation) == (frozen, 2)
    assert_journal_agrees(deployed, admitted, crash, "after-commit")


def test_a_notice_leased_by_a_read_finish_without_its_credential_is_retried_and_sent_once(
    deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the credential beforehand the read's finish stops at the notice's freeze: a
    worker that died after it leaves a lease that lapses as a retryable attempt (T29)."""
    admitted, crash = crash_at(monkeypatch, deployed, READ_FINISH, "after-commit", beforehand=False)
    snapshot = stored(deployed, admitted)
    notify = record(snapshot, NOTIFY)
    assert states(snapshot)["permission"] == ("delivered", 1, 1)
    assert (notify.record.state, notify.record.attempt, notify.record.command_prepared) == (
        "leased",
        1,
        True,
    )
    assert (notify.record.dispatched, notify.record.sent) == (False, False)
    frozen = notify.command
    take_over(deployed, admitted, lambda status: status != "running")
    finished_once(deployed, admitted)
    notify = record(stored(deployed, admitted), NOTIFY)
    # Never past its pre-send fence, the lapsed attempt was retryable (T29), not uncertain.
    assert (notify.record.state, notify.record.generation, notify.record.attempt) == (
        "delivered",
        1,
        2,
    )
    assert (notify.command, notify.record.uncertain) == (frozen, False)
    assert_journal_agrees(deployed, admitted, crash, "after-commit")


# -- the notice's pre-send fence, when its credential was not obtained beforehand --------------


def test_a_pre_send_fence_that_dies_before_its_commit_never_sends_and_the_retry_sends_once(
    deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    admitted, crash = crash_at(monkeypatch, deployed, PRE_SEND, "before-commit", beforehand=False)
    notify = record(stored(deployed, admitted), NOTIFY)
    assert (notify.record.state, notify.record.dispatched, notify.record.sent) == (
        "leased",
        False,
        False,
    )
    assert deployed.products.submissions(deployed.command_key(admitted)) == []
    assert journaled_by_the_crashed_transaction(deployed, admitted, crash) == [
        (NOTIFY, "dispatch", "intent")
    ]
    take_over(deployed, admitted, lambda status: status != "running")
    finished_once(deployed, admitted)
    notify = record(stored(deployed, admitted), NOTIFY)
    assert (notify.record.state, notify.record.attempt, notify.record.uncertain) == (
        "delivered",
        2,
        False,
    )
    assert_journal_agrees(deployed, admitted, crash, "before-commit")


def test_a_notice_marked_dispatched_whose_worker_died_is_unknown_and_only_retry_same_sends_it(
    deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    admitted, crash = crash_at(monkeypatch, deployed, PRE_SEND, "after-commit", beforehand=False)
    notify = record(stored(deployed, admitted), NOTIFY)
    assert (notify.record.state, notify.record.dispatched, notify.record.sent) == (
        "leased",
        True,
        True,
    )
    assert journaled_by_the_crashed_transaction(deployed, admitted, crash) == [
        (NOTIFY, "dispatch", "intent")
    ]
    key = deployed.command_key(admitted)
    assert deployed.products.submissions(key) == []  # it died before the request left
    # The lapsed lease after the mark is `unknown` (T28): attention, never resent by a worker.
    status = take_over(deployed, admitted, lambda status: status != "running")
    assert status == "attention"
    run = deployed.status(admitted.run.run_id)
    assert run is not None and (run.run.state.failure_code, run.uncertain) == (
        "transport-uncertain",
        True,
    )
    notify = record(stored(deployed, admitted), NOTIFY)
    assert (notify.record.state, notify.record.uncertain) == ("unknown", True)
    worker = deployed.worker("fresh")
    assert not any(worker.tick(now) for now in list(later_instants())[-3:])
    assert deployed.products.submissions(key) == []
    assert_journal_agrees(deployed, admitted, crash, "after-commit")
    # Only the operator's retry-same sends it: the same frozen command, the same key.
    retried = deployed.service.retry_same(CALLER, admitted.run.run_id, "case-91")
    assert retried.status == "running"
    take_over(deployed, admitted, lambda status: status != "running", name="after-retry")
    finished_once(deployed, admitted)
    notify = record(stored(deployed, admitted), NOTIFY)
    assert (notify.record.generation, notify.record.settled_by) == (2, "retry-same")
    assert_journal_agrees(deployed, admitted, crash, "after-commit")


# -- 3. the notice's finish carried on through the finish step ------------------------------


def test_a_notice_finish_that_dies_before_its_commit_is_unknown_and_reconcile_ends_it_unsent(
    deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    admitted, crash = crash_at(monkeypatch, deployed, NOTICE_FINISH, "before-commit")
    snapshot = stored(deployed, admitted)
    notify = record(snapshot, NOTIFY)
    # The message was accepted, but its outcome did not commit: the mark did.
    assert (notify.record.state, notify.record.dispatched, notify.record.sent) == (
        "leased",
        True,
        True,
    )
    assert snapshot.run.state.status == "running" and snapshot.step("accepted") is None
    key = deployed.command_key(admitted)
    assert [entry["status"] for entry in deployed.products.submissions(key)] == [202]
    assert journaled_by_the_crashed_transaction(deployed, admitted, crash) == [
        (NOTIFY, "transition", "delivered"),
        ("?", "attempt", "intent"),
        ("?", "transition", "delivered"),  # the finish step, whose record never committed
    ]
    status = take_over(deployed, admitted, lambda status: status != "running")
    assert status == "attention"
    notify = record(stored(deployed, admitted), NOTIFY)
    assert (notify.record.state, notify.record.uncertain) == ("unknown", True)
    assert len(deployed.products.submissions(key)) == 1  # never resent automatically
    # The product's receipt settles it without sending again (T31).
    settled = deployed.service.reconcile(CALLER, admitted.run.run_id, "case-92")
    assert settled.result == "settled"
    take_over(deployed, admitted, lambda status: status != "running", name="after-reconcile")
    finished_once(deployed, admitted)
    assert record(stored(deployed, admitted), NOTIFY).record.settled_by == "reconcile"
    assert_journal_agrees(deployed, admitted, crash, "before-commit")


def test_a_worker_that_dies_after_the_final_commit_leaves_the_run_finished_with_one_message(
    deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    admitted, crash = crash_at(monkeypatch, deployed, NOTICE_FINISH, "after-commit")
    snapshot = stored(deployed, admitted)
    assert snapshot.run.state.status == "finished"
    assert all(stored.lease is None for stored in snapshot.steps)
    assert journaled_by_the_crashed_transaction(deployed, admitted, crash) == [
        (NOTIFY, "transition", "delivered"),
        ("accepted", "attempt", "intent"),
        ("accepted", "transition", "delivered"),
    ]
    worker = deployed.worker("fresh")
    assert not any(worker.tick(now) for now in list(later_instants())[:3])
    finished_once(deployed, admitted)
    assert_journal_agrees(deployed, admitted, crash, "after-commit")


# -- 5. a batch of due waits ------------------------------------------------------------------


def fire_crash(
    monkeypatch: pytest.MonkeyPatch, deployed: Deployed, moment: Moment
) -> tuple[RunAdmitted, Crash]:
    """Admit a run parked until a few seconds from now, park it, then fire the due waits with
    a worker that dies at the batch transaction, `moment`."""
    due = wall_clock() + ms(seconds=3)
    admitted = deployed.admit(run_input(send_after=format_instant(due)))
    assert deployed.worker("parker").tick()  # T16: pending until `due`
    assert states(stored(deployed, admitted)) == {"due": ("pending", 1, 0)}
    crash = arm(monkeypatch, deployed, FIRE, moment)
    with pytest.raises(ProcessDied):
        deployed.worker("crashed").fire_due_waits(due + ms(seconds=1))
    monkeypatch.undo()
    assert crash.happened
    return admitted, crash


def test_a_batch_that_dies_before_its_commit_leaves_the_wait_due_and_it_fires_once_later(
    deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    admitted, crash = fire_crash(monkeypatch, deployed, "before-commit")
    snapshot = stored(deployed, admitted)
    assert states(snapshot) == {"due": ("pending", 1, 0)}  # nothing of the batch committed
    assert journaled_by_the_crashed_transaction(deployed, admitted, crash) == [
        ("due", "attempt", "intent"),
        ("due", "transition", "delivered"),
    ]
    take_over(deployed, admitted, lambda status: status != "running")
    finished_once(deployed, admitted)
    assert_journal_agrees(deployed, admitted, crash, "before-commit")


def test_a_batch_that_committed_before_its_worker_died_leaves_the_read_due_unleased(
    deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    admitted, crash = fire_crash(monkeypatch, deployed, "after-commit")
    snapshot = stored(deployed, admitted)
    read = record(snapshot, READ)
    assert states(snapshot)["due"] == ("delivered", 1, 1)
    # no lease for anyone to lose: the read is claimed as usual, with no lapse to wait for
    assert (read.record.state, read.record.attempt, read.lease, read.command) == (
        "pending",
        0,
        None,
        None,
    )
    take_over(deployed, admitted, lambda status: status != "running")
    finished_once(deployed, admitted)
    read = record(stored(deployed, admitted), READ)
    assert (read.record.state, read.record.generation, read.record.attempt) == ("delivered", 1, 1)
    assert_journal_agrees(deployed, admitted, crash, "after-commit")


@pytest.mark.parametrize("beforehand", [True, False], ids=["credential-before", "pre-send"])
def test_every_fused_boundary_is_reached_in_one_tick_in_this_order(
    sqlite_deployed: Deployed, monkeypatch: pytest.MonkeyPatch, beforehand: bool
) -> None:
    """The boundaries above are the run's worker transactions, in this order: three when the
    notice's credential is obtained before the read's finish, four when it is not (a guard: if
    the worker fused or split them differently, the crash points would move)."""
    deployed = sqlite_deployed
    if not beforehand:
        without_credentials_beforehand(monkeypatch)
    store = deployed.store.writes
    seen: list[str] = []
    for name in ("claim_due_step", "complete_step", "record_step_progress"):
        real = getattr(store, name)

        def traced(*arguments: Any, _real: Any = real, _name: str = name, **options: Any) -> Any:
            seen.append(_name)
            return _real(*arguments, **options)

        monkeypatch.setattr(store, name, traced)
    admitted = deployed.admit(run_input())
    assert deployed.worker().tick()
    monkeypatch.undo()
    expected = ["claim_due_step", "complete_step", "complete_step"]
    if not beforehand:
        expected.insert(2, "record_step_progress")
    assert seen == expected
    finished_once(deployed, admitted)
