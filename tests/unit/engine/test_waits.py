"""Waits are data (07 §5.1, §7.3, §7.6): intervals, completion events and the observation floor."""

from __future__ import annotations

from engine_support import KEYS, SECOND, T0, Driver, call, definition, finish, wait_for

from coordinator_core.engine import (
    CompletionNotified,
    ObservationOutcome,
    ScheduleObservation,
    TimingPolicy,
)

REVIEW = definition(
    {"ask": call("review", "wait"), "wait": wait_for("ask", "end", timeout=7200), "end": finish()},
    "ask",
)


def _waiting(policy: TimingPolicy | None = None) -> Driver:
    run = Driver(REVIEW, policy=policy)
    run.succeed("ask", {"requestId": "req-9"})
    return run


def test_wait_for_interval_is_the_larger_of_floor_and_completion_default() -> None:
    assert _waiting().record("wait").interval_seconds == 900
    assert (
        _waiting(TimingPolicy(observation_floor_seconds=1200)).record("wait").interval_seconds
        == 1200
    )


def test_wait_for_records_the_completion_reference_commitment() -> None:
    record = _waiting().record("wait")
    assert record.completion_ref == KEYS.completion_ref("reviews", "req-9")
    assert record.timeout_at == T0 + 7200 * SECOND


def test_wait_for_observe_reads_the_reference_on_the_waited_connection() -> None:
    run = _waiting()
    run.claim("wait")
    (observe,) = run.commands
    assert observe.kind == "observe"
    assert (observe.operation, observe.connection, observe.reference) == (  # type: ignore[union-attr]
        "casework.read-review-result/v1",
        "reviews",
        '"req-9"',
    )


def test_completion_event_before_any_read_brings_the_read_to_now() -> None:
    run = _waiting()
    result = run.feed(CompletionNotified(), at=T0 + 60 * SECOND)
    assert result.commands == (ScheduleObservation("wait", T0 + 60 * SECOND),)
    assert run.record("wait").due_at == T0 + 60 * SECOND


def test_completion_event_never_brings_a_read_closer_than_the_floor() -> None:
    run = _waiting()
    run.claim("wait")
    run.feed(ObservationOutcome("wait", "pending"))
    observed = run.now
    run.feed(CompletionNotified(), at=observed + 5 * SECOND)
    assert run.record("wait").due_at == observed + 30 * SECOND
    later = run.feed(CompletionNotified(), at=observed + 10 * SECOND)
    assert later.commands == ()  # not earlier than the current due time: nothing changes


def test_completion_event_for_a_leased_observation_changes_nothing() -> None:
    run = _waiting()
    run.claim("wait")
    before = run.state
    assert run.feed(CompletionNotified()).state == before


def test_effects_list_prepared_mutations_in_order_of_first_attempt() -> None:
    run = _waiting()
    assert run.state.effects == (
        ("ask", "casework.submit-review-request/v1", "accepted", "response"),
    )
