"""Claims, leases and fencing (07 §7.2): two workers never hold one record, and a stale holder
can never commit."""

from __future__ import annotations

import multiprocessing
import threading
import uuid
from collections import Counter

import pytest
from store_support import (
    SECOND,
    T0,
    Backend,
    admit,
    changed,
    changed_run,
    claim,
    claim_all_in_process,
    deliver_and_finish,
    lease_record,
    stand_in_recover,
    start_step,
)

from coordinator_core.engine import TimingPolicy
from coordinator_core.errors import CoordinatorError
from coordinator_core.shell.store import (
    LEASE_SECONDS,
    Claim,
    RunSnapshot,
    RunWrite,
    StaleLease,
    Store,
    StoreInvariantError,
)


def _snapshot(store: Store, run_id: uuid.UUID) -> RunSnapshot:
    snapshot = store.reads.get_run_snapshot(run_id)
    assert snapshot is not None
    return snapshot


def test_claim_leases_the_earliest_due_record_as_t2(store: Store) -> None:
    late = admit(store, "late", T0 + 2 * SECOND)
    early = admit(store, "early", T0 + SECOND)
    assert claim(store, T0) is None  # nothing due yet
    leased = claim(store, T0 + 5 * SECOND, worker="w-1")
    assert leased is not None and leased.run_id == early.run_id
    stored = _snapshot(store, early.run_id).current
    record = stored.record
    assert (record.state, record.attempt, record.claims, record.awaiting) == (
        "leased",
        1,
        1,
        "work",
    )
    assert record.attempt_started_at == T0 + 5 * SECOND
    assert stored.lease is not None
    assert stored.lease.expires_at == T0 + (5 + LEASE_SECONDS) * SECOND
    assert (stored.lease.token, stored.lease.owner, record.due_at) == (
        leased.lease.token,
        "w-1",
        None,
    )
    assert leased.snapshot.current == stored and leased.held == stored
    second = claim(store, T0 + 5 * SECOND)
    assert second is not None and second.run_id == late.run_id
    assert claim(store, T0 + 5 * SECOND) is None  # leased records are not claimable


def _claim_and_finish(store: Store, worker: str, now_offset: int, out: list[Claim]) -> None:
    now = T0 + now_offset * SECOND
    while (leased := claim(store, now, worker=worker)) is not None:
        out.append(leased)
        store.writes.complete_step(leased, now, deliver_and_finish(now))


def test_concurrent_workers_claim_every_due_record_exactly_once(store: Store) -> None:
    runs = {admit(store, f"k{i}").run_id for i in range(60)}
    claims: list[Claim] = []
    workers = [
        threading.Thread(target=_claim_and_finish, args=(store, f"w-{n}", 1, claims))
        for n in range(4)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    counted = Counter((leased.run_id, leased.step) for leased in claims)
    assert set(counted.values()) == {1}
    assert {run_id for run_id, _step in counted} == runs
    assert {leased.lease.owner for leased in claims} <= {f"w-{n}" for n in range(4)}
    page = store.reads.list_runs(owner=None, status="finished", limit=100)
    assert len(page.runs) == 60


def test_concurrent_processes_claim_every_due_record_exactly_once(
    postgresql_backend: Backend,
) -> None:
    postgresql_backend.migrate()
    postgresql_backend.apply()
    with postgresql_backend.open() as store:
        runs = {admit(store, f"k{i}").run_id for i in range(40)}
    context = multiprocessing.get_context("fork")  # the children open their own store
    barrier = context.Barrier(2)
    results = context.Queue()
    processes = [
        context.Process(
            target=claim_all_in_process,
            args=(postgresql_backend.url, postgresql_backend.namespace, f"p-{n}", barrier, results),
        )
        for n in range(2)
    ]
    for process in processes:
        process.start()
    outcome = [results.get(timeout=60) for _ in processes]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    assert all(isinstance(result, list) for result in outcome), outcome
    assert all(result for result in outcome), "both processes claimed work"
    claimed = [key for result in outcome for key in result]
    assert len(claimed) == len(set(claimed)) == 40
    assert {uuid.UUID(run_id) for run_id, _step in claimed} == runs


def test_an_expired_lease_is_recovered_and_the_stale_holder_cannot_commit(store: Store) -> None:
    run = admit(store, "k1")
    stale = claim(store, T0, worker="w-1")
    assert stale is not None
    later = T0 + (LEASE_SECONDS + 1) * SECOND
    fresh = claim(store, later, worker="w-2", recover=stand_in_recover(later))
    assert fresh is not None and fresh.run_id == run.run_id
    assert (fresh.held.record.attempt, fresh.lease.owner) == (2, "w-2")
    assert fresh.lease.token != stale.lease.token
    with pytest.raises(StaleLease):
        store.writes.complete_step(stale, later, deliver_and_finish(later))
    with pytest.raises(StaleLease):
        store.writes.record_step_progress(stale, later, lambda snapshot: None)
    finished = store.writes.complete_step(fresh, later, deliver_and_finish(later)).snapshot
    assert (finished.run.state.status, finished.current.record.state) == ("finished", "delivered")
    assert finished.current.lease is None


def test_a_finish_makes_the_next_claim_with_it_and_a_stale_finish_claims_nothing(
    store: Store,
) -> None:
    """07 §7.7 item 8: `complete_step(then=…)` claims the first claimable record of another
    run in the finish's own transaction, leased to the finishing claim's owner; when the
    finish's fence is stale, nothing of either commits (the other run stays claimable)."""
    first = admit(store, "k1", T0)
    second = admit(store, "k2", T0 + SECOND)
    third = admit(store, "k3", T0 + 2 * SECOND)
    now = T0 + 3 * SECOND
    held = claim(store, now, worker="w-1")
    assert held is not None and held.run_id == first.run_id
    written = store.writes.complete_step(held, now, deliver_and_finish(now), then=lease_record(now))
    assert written.snapshot.run.state.status == "finished" and written.claim is None
    assert written.then is not None and written.then.claim is not None
    follow = written.then.claim
    assert (follow.run_id, follow.lease.owner) == (second.run_id, "w-1")
    stored = _snapshot(store, second.run_id).current
    assert stored.record.state == "leased" and stored.lease == follow.lease

    later = T0 + (LEASE_SECONDS + 4) * SECOND  # the follow's lease lapsed: taken over
    assert store.writes.sweep("w-2", later, stand_in_recover(later)) == 1
    assert _snapshot(store, second.run_id).current.lease != follow.lease
    with pytest.raises(StaleLease):
        store.writes.complete_step(
            follow, later, deliver_and_finish(later), then=lease_record(later)
        )
    assert _snapshot(store, third.run_id).current.record.state == "pending"
    assert _snapshot(store, third.run_id).current.lease is None
    taken = claim(store, later, worker="w-3")  # the third is still claimable, first in line
    assert taken is not None and taken.run_id == third.run_id


def test_a_lapsed_lease_the_engine_leaves_alone_is_taken_over_until_its_new_lease_lapses(
    store: Store,
) -> None:
    admit(store, "k1")
    stale = claim(store, T0)
    assert stale is not None
    later = T0 + (LEASE_SECONDS + 1) * SECOND
    assert claim(store, later) is None  # recover answered None
    stored = _snapshot(store, stale.run_id).current
    assert stored.record.state == "leased"
    assert stored.lease is not None and stored.lease.token != stale.lease.token
    assert stored.lease.expires_at == later + LEASE_SECONDS * SECOND
    with pytest.raises(StaleLease):
        store.writes.complete_step(stale, later, deliver_and_finish(later))


def test_a_lapsed_lease_nobody_took_over_still_finishes_but_no_longer_passes_a_fence(
    store: Store,
) -> None:
    admit(store, "k1")
    leased = claim(store, T0)
    assert leased is not None
    late = T0 + (LEASE_SECONDS + 5) * SECOND
    store.writes.record_step_progress(leased, T0 + SECOND, lambda snapshot: None)
    with pytest.raises(StaleLease):
        store.writes.record_step_progress(leased, late, lambda snapshot: None)
    finished = store.writes.complete_step(leased, late, deliver_and_finish(late))
    assert finished.snapshot.run.state.status == "finished" and finished.claim is None


def test_a_dispatched_lapsed_lease_becomes_unknown(store: Store) -> None:
    run = admit(store, "k1")
    leased = claim(store, T0)
    assert leased is not None

    def freeze_and_mark(snapshot: RunSnapshot) -> RunWrite:
        record = changed(
            snapshot.current,
            command=b"sealed-command",
            command_prepared=True,
            sent=True,
            dispatched=True,
        )
        return RunWrite(snapshot.run, (record,))

    store.writes.record_step_progress(leased, T0 + SECOND, freeze_and_mark)
    later = T0 + (LEASE_SECONDS + 1) * SECOND
    assert claim(store, later, worker="w-2", recover=stand_in_recover(later)) is None
    snapshot = _snapshot(store, run.run_id)
    assert (snapshot.run.state.status, snapshot.current.record.state) == ("attention", "unknown")
    assert snapshot.current.record.effect_state == "unknown"
    assert store.reads.summary(later).unknown_effects == 1


def test_an_overdue_record_is_expired_not_leased_but_pure_records_still_run(store: Store) -> None:
    overdue = admit(store, "call", deadline_seconds=10)
    pure = admit(store, "choose", step_type="choose", deadline_seconds=10)
    later = T0 + 11 * SECOND
    leased = claim(store, later, worker="w-1", recover=stand_in_recover(later))
    assert leased is not None and leased.run_id == pure.run_id
    expired = _snapshot(store, overdue.run_id)
    assert (expired.run.state.status, expired.current.record.state) == ("expired", "expired")
    assert expired.run.state.completed_at == later


def test_the_claim_decision_runs_inside_the_claim_and_its_failure_rolls_it_back(
    store: Store,
) -> None:
    """The engine decides the lease inside the claim transaction (and journals there): a
    decision that raises leaves the record as it was; one that refuses claims nothing."""
    run = admit(store, "k1")

    def broken(_snapshot: RunSnapshot) -> RunWrite:
        raise OSError("audit unavailable")

    with pytest.raises(OSError, match="audit unavailable"):
        claim(store, T0, decide=broken)
    assert _snapshot(store, run.run_id).current.record.state == "pending"
    assert claim(store, T0, decide=lambda _snapshot: None) is None
    assert _snapshot(store, run.run_id).current.record.state == "pending"
    seen: list[RunSnapshot] = []

    def leasing(snapshot: RunSnapshot) -> RunWrite | None:
        seen.append(snapshot)
        return lease_record(T0)(snapshot)

    leased = claim(store, T0, decide=leasing)
    assert leased is not None and [s.run.run_id for s in seen] == [run.run_id]
    assert seen[0].current.record.state == "pending"  # the decision sees the record as it is stored


def test_holds_and_reviews_block_claims(store: Store) -> None:
    reviewed = admit(store, "reviewed")
    store.operator.set_restore_hold(
        T0,
        lambda s: RunWrite(changed_run(s.run, restore_review=s.run.run_id == reviewed.run_id)),
    )
    assert claim(store, T0) is None
    fresh = store.operator.release_restore_hold("evidence")
    assert (fresh.restore_hold, fresh.admissions_hold, fresh.restore_review) == (False, True, 1)
    assert claim(store, T0) is None  # under review: held until reviewed
    store.writes.update_run(
        reviewed.run_id, T0, lambda s: RunWrite(changed_run(s.run, restore_review=False))
    )
    assert claim(store, T0) is not None


def test_restore_hold_fences_out_an_attempt_in_flight(store: Store) -> None:
    admit(store, "k1")
    leased = claim(store, T0)
    assert leased is not None
    store.operator.set_restore_hold(
        T0 + SECOND, lambda s: stand_in_recover(T0 + SECOND)(s, "lease-lapsed")
    )
    with pytest.raises(StaleLease):
        store.writes.record_step_progress(leased, T0 + SECOND, lambda snapshot: None)
    with pytest.raises(StaleLease):
        store.writes.complete_step(leased, T0 + SECOND, deliver_and_finish(T0 + SECOND))


def test_a_restore_hold_refuses_the_pre_send_fence_of_a_record_it_left_leased(
    store: Store,
) -> None:
    """07 §12 step 3: under a restore hold no attempt goes on, even one whose record the hold's
    review left leased: its mid-attempt fence (the pre-send one) is refused, while its finish
    still commits (it names the same lease) and leases nothing."""
    admit(store, "k1")
    leased = claim(store, T0)
    assert leased is not None
    store.operator.set_restore_hold(T0 + SECOND, lambda s: None)
    with pytest.raises(StaleLease):
        store.writes.record_step_progress(leased, T0 + SECOND, lambda snapshot: None)
    finished = store.writes.complete_step(leased, T0 + SECOND, deliver_and_finish(T0 + SECOND))
    assert finished.claim is None
    assert finished.snapshot.current.record.state == "delivered"


def test_a_stopping_run_keeps_only_an_uncertain_call_claimable(store: Store) -> None:
    plain = admit(store, "plain")
    uncertain = admit(store, "uncertain")

    def stopping(snapshot: RunSnapshot) -> RunWrite:
        run = changed_run(
            snapshot.run, cancel_mode="stopping", cancel_requested=True, status="cancel-requested"
        )
        record = snapshot.current
        if snapshot.run.run_id == uncertain.run_id:
            record = changed(record, command=b"c", command_prepared=True, sent=True, uncertain=True)
        return RunWrite(run, (record,))

    for run in (plain, uncertain):
        store.writes.update_run(run.run_id, T0, stopping)
    leased = claim(store, T0)
    assert leased is not None and leased.run_id == uncertain.run_id
    assert claim(store, T0) is None


def test_finishing_creates_the_next_record_in_the_same_transaction(store: Store) -> None:
    run = admit(store, "k1")
    leased = claim(store, T0)
    assert leased is not None
    now = T0 + SECOND

    def next_step(snapshot: RunSnapshot) -> RunWrite:
        done = changed(snapshot.current, state="delivered", route_kind="next", finished_at=now)
        following = start_step(run.run_id, now, step="decide", type="choose", pure=True)
        return RunWrite(changed_run(snapshot.run, current_step="decide"), (done, following))

    after = store.writes.complete_step(leased, now, next_step).snapshot
    assert [(r.step, r.state) for r in after.records] == [
        ("start", "delivered"),
        ("decide", "pending"),
    ]
    again = claim(store, now)
    assert again is not None and again.step == "decide"


def test_a_frozen_command_is_kept_and_completed_once_with_its_preparation(store: Store) -> None:
    admit(store, "k1")
    leased = claim(store, T0)
    assert leased is not None

    def freeze(command: bytes, *, preparation: bool = False) -> object:
        def decide(snapshot: RunSnapshot) -> RunWrite:
            record = changed(
                snapshot.current,
                command=command,
                command_prepared=True,
                preparation_frozen=preparation or snapshot.current.preparation_frozen,
            )
            return RunWrite(snapshot.run, (record,))

        return decide

    store.writes.record_step_progress(leased, T0, freeze(b"request"))  # type: ignore[arg-type]
    with pytest.raises(StoreInvariantError):
        store.writes.record_step_progress(leased, T0, freeze(b"other"))  # type: ignore[arg-type]
    done = store.writes.record_step_progress(leased, T0, freeze(b"request+prep", preparation=True))  # type: ignore[arg-type]
    assert done.snapshot.current.command == b"request+prep"
    with pytest.raises(StoreInvariantError):
        store.writes.record_step_progress(leased, T0, freeze(b"again", preparation=True))  # type: ignore[arg-type]
    with pytest.raises(StoreInvariantError):  # nor is the preparation removed
        store.writes.record_step_progress(
            leased, T0, lambda s: RunWrite(s.run, (changed(s.current, preparation_frozen=False),))
        )
    finished = store.writes.complete_step(leased, T0 + SECOND, deliver_and_finish(T0 + SECOND))
    assert finished.snapshot.current.preparation_frozen  # kept to the end of the attempt
    assert finished.snapshot.current.command == b"request+prep"


@pytest.mark.parametrize(
    "breaks",
    [
        lambda s: RunWrite(changed_run(s.run, input=b"other")),
        lambda s: RunWrite(changed_run(s.run, deadline_at=T0)),
        lambda s: RunWrite(changed_run(s.run, policy=TimingPolicy((1,), 1))),
        lambda s: RunWrite(changed_run(s.run, payload_erased_at=T0)),
        lambda s: RunWrite(s.run, (changed(s.current, type="finish"),)),
        lambda s: RunWrite(s.run, (changed(s.current, effect_kind="read"),)),
        lambda s: RunWrite(s.run, (changed(s.current, generation=0),)),
        lambda s: RunWrite(s.run, (s.current, s.current)),
        lambda s: RunWrite(changed_run(s.run, current_step="nowhere")),
        lambda s: RunWrite(
            s.run,
            (changed(start_step(s.run.run_id, T0, step="next", type="choose"), state="leased"),),
        ),
    ],
    ids=[
        "input",
        "deadline",
        "policy",
        "payload-erased",
        "type",
        "effect",
        "generation",
        "twice",
        "current",
        "new-leased",
    ],
)
def test_writes_that_break_store_invariants_are_refused_whole(store: Store, breaks: object) -> None:
    run = admit(store, "k1")
    leased = claim(store, T0)
    assert leased is not None
    before = _snapshot(store, run.run_id)
    with pytest.raises(StoreInvariantError):
        store.writes.complete_step(leased, T0, breaks)  # type: ignore[arg-type]
    assert _snapshot(store, run.run_id) == before


def test_sent_is_never_cleared(store: Store) -> None:
    admit(store, "k1")
    leased = claim(store, T0)
    assert leased is not None
    store.writes.record_step_progress(
        leased,
        T0,
        lambda s: RunWrite(
            s.run, (changed(s.current, command=b"c", command_prepared=True, sent=True),)
        ),
    )
    with pytest.raises(StoreInvariantError):
        store.writes.complete_step(
            leased, T0, lambda s: RunWrite(s.run, (changed(s.current, sent=False),))
        )


def test_claims_verify_the_deployment_in_every_transaction(migrated: Backend, store: Store) -> None:
    admit(store, "k1")
    migrated.execute("UPDATE control SET database_id = 'moved'")
    with pytest.raises(CoordinatorError) as refused:
        claim(store, T0)
    assert refused.value.code == "coordinator.deployment.database-id-mismatch"


def test_a_refused_claim_writes_nothing_while_the_sweep_before_it_commits(store: Store) -> None:
    """The sweep (lapsed leases, overdue records) runs in its own transactions before the claim
    (07 §7.2 steps 2–3, off the claim path): a claim whose decision refuses — the engine saw
    a run a review holds — takes nothing back from the sweep."""
    lapsed = admit(store, "lapsed", T0 - SECOND)
    first = claim(store, T0)
    assert first is not None and first.run_id == lapsed.run_id
    later = T0 + (LEASE_SECONDS + 1) * SECOND
    assert claim(store, later, recover=stand_in_recover(later), decide=lambda _s: None) is None
    stored = _snapshot(store, lapsed.run_id).current
    assert (stored.record.state, stored.lease) == ("pending", None)


def test_a_finish_may_lease_the_next_record_for_the_same_owner(store: Store) -> None:
    """07 §7.7 item 1: the finish transaction leases the run's next record (the engine's T2)
    and the store gives it a fresh fence for the loop to go on with."""
    run = admit(store, "k1")
    leased = claim(store, T0, worker="w-1")
    assert leased is not None
    now = T0 + SECOND

    def carried(snapshot: RunSnapshot) -> RunWrite:
        done = changed(snapshot.current, state="delivered", route_kind="next", finished_at=now)
        following = changed(
            start_step(run.run_id, now, step="decide", type="choose", pure=True),
            state="leased",
            attempt=1,
            claims=1,
            attempt_started_at=now,
            due_at=None,
            awaiting="work",
        )
        return RunWrite(changed_run(snapshot.run, current_step="decide"), (done, following))

    written = store.writes.complete_step(leased, now, carried)
    assert written.claim is not None and written.claim.step == "decide"
    assert written.claim.lease.owner == "w-1" and written.claim.lease.token != leased.lease.token
    assert written.claim.lease.expires_at == now + LEASE_SECONDS * SECOND
    stored = _snapshot(store, run.run_id)
    assert stored == written.snapshot  # the snapshot answered is what was written
    assert stored.current.lease == written.claim.lease
    assert claim(store, now) is None  # the continued record is leased, not claimable
    with pytest.raises(StaleLease):
        store.writes.complete_step(leased, now, deliver_and_finish(now))


def test_a_finish_under_a_restore_hold_never_leases(store: Store) -> None:
    run = admit(store, "k1")
    leased = claim(store, T0)
    assert leased is not None
    migrated_hold = store.operator.set_restore_hold(T0, lambda s: None)
    assert migrated_hold.restore_hold

    def carried(snapshot: RunSnapshot) -> RunWrite:
        done = changed(snapshot.current, state="delivered", finished_at=T0)
        following = changed(
            start_step(run.run_id, T0, step="decide", type="choose", pure=True),
            state="leased",
            attempt=1,
            claims=1,
            attempt_started_at=T0,
            due_at=None,
        )
        return RunWrite(changed_run(snapshot.run, current_step="decide"), (done, following))

    with pytest.raises(StoreInvariantError):
        store.writes.complete_step(leased, T0, carried)


def test_a_pooled_connection_the_server_dropped_is_replaced_without_a_refusal(
    postgresql_backend: Backend,
) -> None:
    """No pre-ping per transaction: a pooled connection that died while idle fails on its
    first statement, before anything was sent to commit, and the store runs the transaction
    again on a new connection (07 §14.2: transactions are short; a lost commit would still be
    `store-unavailable`)."""
    postgresql_backend.migrate()
    postgresql_backend.apply()
    with postgresql_backend.open() as store:
        run = admit(store, "k1")
        assert store.reads.get_run(run.run_id) is not None  # the pool now holds idle connections
        killed = postgresql_backend.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND application_name = 'registry-coordinator'"
        )
        assert killed and all(row[0] for row in killed)
        assert store.reads.get_run(run.run_id) is not None
        leased = claim(store, T0)
        assert leased is not None and leased.run_id == run.run_id


def test_a_fence_reads_what_others_changed_while_the_claim_was_held(store: Store) -> None:
    """The fence's snapshot is the claim's own with the record and the run's columns that
    others change (a cancel, a restore review) read fresh: the decision sees the cancel, and a
    write built on the claim's older copy of the run cannot undo it."""
    run = admit(store, "k1")
    leased = claim(store, T0)
    assert leased is not None

    def cancel(snapshot: RunSnapshot) -> RunWrite:
        stopping = changed_run(
            snapshot.run, cancel_requested=True, cancel_mode="stopping", status="cancel-requested"
        )
        return RunWrite(stopping)

    assert store.writes.request_cancel(run.run_id, T0, cancel) is not None
    seen: list[RunSnapshot] = []

    def look(snapshot: RunSnapshot) -> None:
        seen.append(snapshot)

    store.writes.record_step_progress(leased, T0, look)  # type: ignore[arg-type]
    assert seen[0].run.state.cancel_requested and not leased.snapshot.run.state.cancel_requested
    assert seen[0].run.state.status == "cancel-requested"
    with pytest.raises(StoreInvariantError):  # the claim's copy of the run clears the cancel
        store.writes.complete_step(
            leased, T0, lambda s: RunWrite(leased.snapshot.run, (changed(s.current, detail="x"),))
        )
    assert _snapshot(store, run.run_id).run.state.cancel_requested


def test_a_mid_attempt_fence_answers_the_claim_the_attempt_goes_on_with(store: Store) -> None:
    """A mid-attempt fence answers the run as written and the claim as it now stands (the same
    lease, the snapshot as stored), whether it wrote (the frozen command) or not; the run's
    other records and the columns another transaction changed meanwhile (a cancel) are in
    it, as stored."""
    run = admit(store, "k1")
    first = claim(store, T0)
    assert first is not None
    now = T0 + SECOND

    def next_step(snapshot: RunSnapshot) -> RunWrite:
        done = changed(snapshot.current, state="delivered", route_kind="next", finished_at=now)
        following = start_step(run.run_id, now, step="send", type="call")
        return RunWrite(changed_run(snapshot.run, current_step="send"), (done, following))

    store.writes.complete_step(first, now, next_step)
    leased = claim(store, now)
    assert leased is not None and leased.step == "send"

    def freeze(snapshot: RunSnapshot) -> RunWrite:
        return RunWrite(
            snapshot.run, (changed(snapshot.current, command=b"c", command_prepared=True),)
        )

    frozen = store.writes.record_step_progress(leased, now, freeze)
    assert frozen.claim is not None
    assert (frozen.claim.step, frozen.claim.lease) == ("send", leased.lease)
    assert frozen.claim.snapshot == frozen.snapshot == _snapshot(store, run.run_id)

    def cancel(snapshot: RunSnapshot) -> RunWrite:
        stopping = changed_run(
            snapshot.run, cancel_requested=True, cancel_mode="stopping", status="cancel-requested"
        )
        return RunWrite(stopping)

    reason = "hmac-sha256:" + "c" * 64
    assert store.writes.request_cancel(run.run_id, now + SECOND, cancel, reason_ref=reason)
    unchanged = store.writes.record_step_progress(frozen.claim, now + SECOND, lambda s: None)
    stored = _snapshot(store, run.run_id)
    assert [(r.step, r.state) for r in stored.records] == [
        ("start", "delivered"),
        ("send", "leased"),
    ]
    assert unchanged.claim is not None and unchanged.claim.lease == leased.lease
    assert unchanged.claim.snapshot == unchanged.snapshot == stored
    assert unchanged.snapshot.run.state.cancel_requested
    # The attempt's finish keeps the operator's cancel as the run's last operator action.
    later = now + 2 * SECOND
    assert unchanged.claim is not None
    finished = store.writes.complete_step(
        unchanged.claim, later, deliver_and_finish(later)
    ).snapshot
    assert finished == _snapshot(store, run.run_id)
    action = finished.run
    assert (action.operator_action, action.operator_action_at, action.operator_reason_ref) == (
        "cancel",
        now + SECOND,
        reason,
    )
