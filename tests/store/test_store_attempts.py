"""Each attempt's history (`step_attempts`) and the operator's reasons, kept by the store in the
transaction that ended the attempt or took the action (schema version 6)."""

from __future__ import annotations

from dataclasses import replace

from store_support import (
    SECOND,
    T0,
    admit,
    changed,
    changed_run,
    claim,
    deliver_and_finish,
    stand_in_recover,
)

from coordinator_core.shell.store import LEASE_SECONDS, RunSnapshot, RunWrite, Store


def _retry(now: int) -> object:
    """The claimed call's attempt failed retryably: pending again, due a second later."""

    def decide(snapshot: RunSnapshot) -> RunWrite:
        record = changed(snapshot.current, state="pending", due_at=now + SECOND, awaiting=None)
        return RunWrite(snapshot.run, (record,))

    return decide


def test_a_finished_attempt_is_recorded_with_its_instants_and_outcome(store: Store) -> None:
    run = admit(store, "k1")
    held = claim(store, T0 + SECOND)
    assert held is not None
    store.writes.complete_step(held, T0 + 3 * SECOND, deliver_and_finish(T0 + 3 * SECOND))
    recent = store.reads.recent_attempts(run.run_id)
    assert list(recent) == ["start"]
    attempts, total = recent["start"]
    assert total == 1
    (attempt,) = attempts
    assert (attempt.generation, attempt.attempt, attempt.outcome) == (1, 1, "delivered")
    assert (attempt.started_at, attempt.ended_at, attempt.failure_code) == (
        T0 + SECOND,
        T0 + 3 * SECOND,
        None,
    )


def test_a_retry_and_a_lapsed_lease_end_their_attempts_and_a_claim_ends_none(
    store: Store,
) -> None:
    run = admit(store, "k1")
    first = claim(store, T0)
    assert first is not None
    assert store.reads.recent_attempts(run.run_id) == {}  # leased: nothing ended yet
    store.writes.complete_step(first, T0 + SECOND, _retry(T0 + SECOND))  # type: ignore[arg-type]
    second = claim(store, T0 + 2 * SECOND)
    assert second is not None
    lapsed = T0 + (3 + LEASE_SECONDS) * SECOND
    claim(store, lapsed, recover=stand_in_recover(lapsed))  # the sweep: T29 back to pending
    attempts, total = store.reads.recent_attempts(run.run_id)["start"]
    assert total == 2
    assert [(a.attempt, a.outcome) for a in attempts] == [(2, "retry"), (1, "retry")]
    assert attempts[0].ended_at == lapsed


def test_an_inspection_shows_a_bounded_number_of_attempts_and_the_rest_is_paged(
    store: Store,
) -> None:
    run = admit(store, "k1")
    now = T0
    for _ in range(13):
        held = claim(store, now)
        assert held is not None
        store.writes.complete_step(held, now + 10, _retry(now + 10))  # type: ignore[arg-type]
        now += 2 * SECOND
    attempts, total = store.reads.recent_attempts(run.run_id, per_step=10)["start"]
    assert total == 13 and [a.attempt for a in attempts] == list(range(13, 3, -1))
    page, after = store.reads.attempts(run.run_id, "start", limit=5)
    assert [a.attempt for a in page] == [13, 12, 11, 10, 9] and after == (1, 9)
    page, after = store.reads.attempts(run.run_id, "start", before=after, limit=5)
    assert [a.attempt for a in page] == [8, 7, 6, 5, 4] and after == (1, 4)
    page, after = store.reads.attempts(run.run_id, "start", before=after, limit=5)
    assert [a.attempt for a in page] == [3, 2, 1] and after is None


def test_a_step_worked_and_left_within_one_write_is_recorded_and_a_pending_one_is_not(
    store: Store,
) -> None:
    """A continuation leases and works a pure step in the same transaction: its attempt ended
    there. A record entered pending, never claimed, has no attempt."""
    run = admit(store, "k1")
    held = claim(store, T0)
    assert held is not None
    now = T0 + SECOND

    def carried(snapshot: RunSnapshot) -> RunWrite:
        done = changed(snapshot.current, state="delivered", route_kind="next", finished_at=now)
        pure = replace(
            done,
            record=replace(
                done.record,
                step="decide",
                type="choose",
                pure=True,
                attempt=1,
                claims=1,
                attempt_started_at=now,
                entered_at=now,
                operation=None,
                effect=None,
            ),
        )
        later = replace(
            done,
            record=replace(
                done.record,
                step="later",
                type="wait-until",
                state="pending",
                attempt=0,
                claims=0,
                entered_at=now,
                due_at=now + 60 * SECOND,
                finished_at=None,
                route=None,
                operation=None,
                effect=None,
                attempt_started_at=None,
            ),
        )
        return RunWrite(changed_run(snapshot.run, current_step="later"), (done, pure, later))

    store.writes.complete_step(held, now, carried)
    recent = store.reads.recent_attempts(run.run_id)
    assert sorted(recent) == ["decide", "start"]
    assert recent["decide"][0][0].outcome == "delivered"


def test_an_operator_command_keeps_its_action_and_reasons_keyed_reference(store: Store) -> None:
    run = admit(store, "k1")
    reference = "hmac-sha256:" + "c" * 64

    def cancel(snapshot: RunSnapshot) -> RunWrite:
        stopped = changed_run(
            snapshot.run, status="cancelled", cancel_mode="stopping", cancel_requested=True
        )
        return RunWrite(stopped, (changed(snapshot.current, state="cancelled"),))

    after = store.writes.request_cancel(run.run_id, T0 + SECOND, cancel, reason_ref=reference)
    assert after is not None
    stored = after.run
    assert (stored.operator_action, stored.operator_action_at, stored.operator_reason_ref) == (
        "cancel",
        T0 + SECOND,
        reference,
    )
    assert store.reads.get_run(run.run_id) == stored
    again = store.writes.request_cancel(run.run_id, T0 + 2 * SECOND, cancel, reason_ref="other")
    assert again is not None and again.run.operator_reason_ref == reference  # nothing changed


def test_a_run_command_that_changes_nothing_records_no_action(store: Store) -> None:
    run = admit(store, "k1")
    after = store.writes.update_run(
        run.run_id, T0, lambda _s: None, action="retry-same", reason_ref="hmac-sha256:" + "d" * 64
    )
    assert after is not None and after.run.operator_action is None


def test_the_restore_hold_keeps_its_reason_until_released(store: Store) -> None:
    reference = "hmac-sha256:" + "e" * 64
    store.operator.set_restore_hold(T0, lambda _s: None, reason_ref=reference)
    assert store.reads.control().restore_hold_reason_ref == reference
    store.operator.release_restore_hold("hmac-sha256:" + "f" * 64)
    assert store.reads.control().restore_hold_reason_ref is None
