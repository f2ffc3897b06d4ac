"""Every run status transition of contract 07 §5 (T1–T36), one test (at least) per number."""

from __future__ import annotations

import json
from dataclasses import replace

from engine_support import (
    SECOND,
    T0,
    Driver,
    call,
    choose,
    definition,
    finish,
    kinds,
    mapping,
    wait_for,
    wait_until,
)

from coordinator_core.engine import (
    AttemptRefused,
    Attention,
    CallOutcome,
    CancelRequested,
    DeadlinePassed,
    Definition,
    Dispatch,
    Fail,
    LeaseLapsed,
    ObservationOutcome,
    PreparationDone,
    ReadyToSend,
    ReceiptAnswer,
    ReconcileRequested,
    RestoreHold,
    RetrySame,
    ScheduleDue,
    ScheduleObservation,
    StepDue,
    StepRoute,
    parse_instant,
    unrestorable,
)
from coordinator_core.engine.detail import FailureDetail

READ = definition({"read": call("record", "end"), "end": finish()}, "read")
SEND = definition({"send": call("notice", "end"), "end": finish()}, "send")
ACT = definition(
    {
        "act": call("action", "end", onDeclaredRefusal={"withdrawn": "other"}),
        "end": finish(),
        "other": finish(),
    },
    "act",
)
REVIEW = definition(
    {
        "ask": call("review", "wait"),
        "wait": wait_for("ask", "ok", timeout=3600, on_timeout="late", on_cancel="undo"),
        "ok": finish(output=mapping("echo", "wait")),
        "late": finish(),
        "undo": call("withdraw", "undone", input=mapping("from_review", "ask")),
        "undone": finish(),
    },
    "ask",
)
BARE_REVIEW = definition(
    {"ask": call("review", "wait"), "wait": wait_for("ask", "ok", timeout=3600), "ok": finish()},
    "ask",
)
PICK = definition(
    {"pick": choose({"yes": "a", "no": "b"}), "a": finish(), "b": finish()},
    "pick",
)
TIMER = definition({"timer": wait_until("end"), "end": finish()}, "timer")


def _waiting_review(definition_: Definition = REVIEW) -> Driver:
    run = Driver(definition_)
    run.succeed("ask", {"requestId": "r-1"})
    return run


def test_t1_admission_runs_the_start_step_due_now() -> None:
    run = Driver(READ)
    assert run.status() == "running"
    assert run.state.current_step == "read"
    assert run.state.deadline_at == T0 + 86400 * SECOND
    record = run.record("read")
    assert (record.state, record.due_at, record.generation, record.attempt) == (
        "pending",
        T0,
        1,
        0,
    )
    assert run.commands == (ScheduleDue("read", T0),)


def test_t2_claim_leases_the_record_and_counts_the_attempt() -> None:
    run = Driver(READ)
    run.claim("read")
    record = run.record("read")
    assert (record.state, record.attempt, record.claims) == ("leased", 1, 1)
    assert record.attempt_started_at == T0 and record.due_at is None
    assert run.status() == "running"


def test_t3_call_success_delivers_through_next_and_records_the_output() -> None:
    run = Driver(READ)
    run.send("read")
    run.answer("read", "success", value={"data": 1})
    record = run.record("read")
    assert record.state == "delivered" and record.route == StepRoute("next")
    assert record.output == '{"data":1}' and record.settled_by == "response"
    assert run.state.current_step == "end" and run.record("end").state == "pending"
    assert run.status() == "running"


def test_t4_success_while_stopping_ends_a_mutation_cancelled_after_effect() -> None:
    run = Driver(SEND)
    run.send("send")
    run.feed(CancelRequested())
    assert run.status() == "cancel-requested"
    run.answer("send", "success", value={"id": "m"})
    assert run.status() == "cancelled-after-effect"
    assert run.record("send").effect_state == "accepted"
    assert run.state.completed_at == run.now
    assert "end" not in [r.step for r in run.state.records]


def test_t4_success_of_a_read_while_stopping_ends_cancelled() -> None:
    run = Driver(READ)
    run.send("read")
    run.feed(CancelRequested())
    run.answer("read", "success", value={})
    assert run.status() == "cancelled"


def test_t5_routed_declared_refusal_continues_at_the_refusal_target() -> None:
    run = Driver(ACT)
    run.send("act")
    run.answer("act", "declared-refusal", refusal_code="withdrawn")
    record = run.record("act")
    assert record.state == "delivered" and record.route == StepRoute("refusal", "withdrawn")
    assert record.output is None and record.effect_state == "refused"
    assert run.state.current_step == "other"


def test_t6_unrouted_declared_refusal_fails_with_product_refused() -> None:
    run = Driver(ACT)
    run.send("act")
    run.answer("act", "declared-refusal", refusal_code="something-else")
    assert run.record("act").state == "dead-lettered"
    assert run.status() == "failed" and run.state.failure_code == "product-refused"
    assert Fail("failed", "product-refused") in run.commands


def test_t6_declared_refusal_while_stopping_ends_cancelled() -> None:
    run = Driver(ACT)
    run.send("act")
    run.feed(CancelRequested())
    run.answer("act", "declared-refusal", refusal_code="withdrawn")
    assert run.status() == "cancelled"
    assert run.record("act").effect_state == "refused"


def test_t7_retryable_schedules_the_next_attempt_after_the_delay() -> None:
    run = Driver(SEND)
    run.send("send")
    run.answer("send", "retryable", code="transport-unavailable")
    record = run.record("send")
    assert record.state == "pending" and record.due_at == T0 + 100
    assert run.commands == (ScheduleDue("send", T0 + 100),)
    run.send("send")
    run.answer("send", "retryable", code="rate-limited")
    assert run.record("send").due_at == T0 + 100 + 500


def test_t8_third_retryable_dead_letters_with_its_code() -> None:
    run = Driver(SEND)
    for _ in range(3):
        run.send("send")
        run.answer("send", "retryable", code="transport-unavailable")
    assert run.record("send").state == "dead-lettered"
    assert run.record("send").attempt == 3
    assert (run.status(), run.state.failure_code) == ("failed", "transport-unavailable")


def test_t9_a_retry_at_or_after_the_deadline_expires_instead() -> None:
    short = definition({"send": call("notice", "end"), "end": finish()}, "send", deadline=10)
    run = Driver(short)
    run.claim("send")
    run.feed(ReadyToSend("send"), at=T0 + 10 * SECOND - 100)
    run.answer("send", "retryable", code="transport-unavailable")
    assert run.record("send").state == "expired"
    assert (run.status(), run.state.failure_code) == ("expired", "deadline-reached")


def test_t10_refused_dead_letters_and_fails_the_run() -> None:
    run = Driver(SEND)
    run.send("send")
    run.answer("send", "refused", code="invalid-command")
    assert run.record("send").state == "dead-lettered"
    assert run.record("send").effect_state == "refused"
    assert (run.status(), run.state.failure_code) == ("failed", "invalid-command")


def test_t10_refused_while_stopping_ends_cancelled() -> None:
    run = Driver(SEND)
    run.send("send")
    run.feed(CancelRequested())
    run.answer("send", "refused", code="product-forbidden")
    assert run.status() == "cancelled" and run.record("send").state == "dead-lettered"


def test_t11_uncertain_mutation_puts_run_in_attention() -> None:
    run = Driver(SEND)
    run.send("send")
    result = run.feed(CallOutcome("send", "uncertain", code="transport-uncertain"), at=T0 + SECOND)
    record = run.record("send")
    assert record.state == "unknown" and record.uncertain
    assert record.effect_state == "unknown"
    # The record is at rest: ended now, due never, awaiting nothing; the operator is told why.
    assert (record.finished_at, record.due_at, record.awaiting) == (T0 + SECOND, None, None)
    assert (run.status(), run.state.failure_code) == ("attention", "transport-uncertain")
    assert run.state.completed_at is None
    assert [c for c in result.commands if isinstance(c, Attention)] == [
        Attention("transport-uncertain")
    ]


def test_t11_receipt_expired_marks_the_record() -> None:
    run = Driver(SEND)
    run.send("send")
    run.answer("send", "receipt-expired")
    record = run.record("send")
    assert record.state == "unknown" and record.receipt_expired
    assert run.state.failure_code == "receipt-expired"


def test_t11_declared_refusal_while_uncertain_keeps_the_earlier_code() -> None:
    run = Driver(ACT)
    run.send("act")
    run.answer("act", "uncertain", code="transport-uncertain")
    run.feed(RetrySame())
    run.send("act")
    run.answer("act", "declared-refusal", refusal_code="withdrawn")
    assert run.record("act").state == "unknown"
    assert run.state.failure_code == "transport-uncertain"


def test_t11_any_non_success_while_uncertain_stays_unknown_with_its_code() -> None:
    run = Driver(SEND)
    run.send("send")
    run.answer("send", "uncertain", code="transport-uncertain")
    run.feed(RetrySame())
    run.send("send")
    run.answer("send", "refused", code="product-refused")
    assert run.record("send").state == "unknown" and run.status() == "attention"
    assert run.state.failure_code == "product-refused"


def test_t12_choose_label_delivers_through_its_case() -> None:
    run = Driver(PICK)
    run.claim("pick")
    assert run.record("pick").route == StepRoute("case", "yes")
    assert run.state.current_step == "a"


def test_t13_choose_with_a_label_that_is_no_case_is_choice_invalid() -> None:
    run = Driver(PICK, {"label": "maybe"})
    run.claim("pick")
    record = run.record("pick")
    assert (record.state, record.failure_code) == ("dead-lettered", "choice-invalid")
    assert record.detail is not None
    detail = FailureDetail.parse(record.detail)
    # The returned label is named because it is an identifier; the declared labels are too.
    assert (detail.code, detail.label, detail.labels) == (
        "coordinator.mapping.branch",
        "maybe",
        ("yes", "no"),
    )
    assert detail.sentence() == (
        "The choose function returned maybe, which is not one of the case labels yes, no."
    )
    assert (run.status(), run.state.failure_code) == ("failed", "choice-invalid")


def test_t13_a_returned_label_that_is_no_identifier_is_never_named() -> None:
    run = Driver(PICK, {"label": "CANARY value 7"})
    run.claim("pick")
    record = run.record("pick")
    assert record.detail is not None and "CANARY" not in record.detail
    detail = FailureDetail.parse(record.detail)
    assert (detail.code, detail.label, detail.labels) == (
        "coordinator.mapping.branch",
        None,
        ("yes", "no"),
    )


def test_t13_choose_function_failure_is_mapping_invalid() -> None:
    broken = definition({"pick": choose({"a": "a"}, "broken"), "a": finish()}, "pick")
    run = Driver(broken)
    run.claim("pick")
    assert run.state.failure_code == "mapping-invalid"
    detail = run.record("pick").detail
    assert detail is not None
    assert FailureDetail.parse(detail) == FailureDetail(
        "coordinator.function.execution", "thrown", "broken", 6, 20
    )


def test_t14_finish_publishes_outcome_and_output() -> None:
    published = definition({"end": finish("done", mapping("publish"))}, "end")
    run = Driver(published)
    run.claim("end")
    assert run.status() == "finished"
    assert (run.state.outcome, run.state.output) == ("done", "1")
    assert run.state.completed_at == T0


def test_t14_finish_on_the_cancel_path_ends_cancelled_with_its_outcome() -> None:
    run = _waiting_review()
    run.feed(CancelRequested(), at=T0 + 60 * SECOND)
    run.succeed("undo", {"ok": True})
    run.claim("undone")
    assert run.status() == "cancelled" and run.state.outcome == "done"
    assert run.state.cancel_requested


def test_t15_finish_output_failing_its_schema_is_outcome_invalid() -> None:
    strict = definition({"end": finish("strict", mapping("publish"))}, "end")
    run = Driver(strict)
    run.claim("end")
    assert (run.status(), run.state.failure_code) == ("failed", "outcome-invalid")
    assert run.record("end").detail == "coordinator.mapping.outcome"


def test_t15_finish_function_failure_is_mapping_invalid() -> None:
    broken = definition({"end": finish("done", mapping("broken"))}, "end")
    run = Driver(broken)
    run.claim("end")
    assert run.state.failure_code == "mapping-invalid"


def test_t16_wait_until_records_its_instant_and_is_due_then() -> None:
    run = Driver(TIMER)
    run.claim("timer")
    record = run.record("timer")
    instant = parse_instant("2026-03-02T10:00:00Z")
    assert record.state == "pending" and record.wait_until == instant
    assert record.due_at == instant and run.commands == (ScheduleDue("timer", instant or 0),)


def test_t16_a_past_instant_does_not_rewind_and_a_late_one_is_capped_at_the_deadline() -> None:
    run = Driver(TIMER, {"at": "2020-01-01T00:00:00Z"})
    run.claim("timer")
    assert run.record("timer").due_at == T0
    late = Driver(TIMER, {"at": "2099-01-01T00:00:00Z"})
    late.claim("timer")
    assert late.record("timer").due_at == late.state.deadline_at


def test_t17_wait_until_that_is_not_a_date_time_is_mapping_invalid() -> None:
    run = Driver(TIMER, {"at": "tomorrow"})
    run.claim("timer")
    assert (run.status(), run.state.failure_code) == ("failed", "mapping-invalid")
    assert run.record("timer").detail == "coordinator.mapping.timestamp"


def test_t18_wait_until_due_delivers_through_next() -> None:
    run = Driver(TIMER)
    run.claim("timer")
    run.claim("timer")
    assert run.record("timer").state == "delivered"
    assert run.state.current_step == "end" and run.record("end").entered_at == T0 + 3600 * SECOND


def test_t19_pending_observation_schedules_the_next_read() -> None:
    run = _waiting_review()
    wait = run.record("wait")
    assert wait.interval_seconds == 900 and wait.due_at == T0 + 900 * SECOND
    run.claim("wait")
    run.feed(ObservationOutcome("wait", "pending"))
    record = run.record("wait")
    assert record.observations == 1 and record.last_observed_at == T0 + 900 * SECOND
    assert record.due_at == T0 + 1800 * SECOND and record.attempt == 0
    assert run.commands == (ScheduleObservation("wait", T0 + 1800 * SECOND),)


def test_t20_complete_observation_delivers_with_the_completion_value() -> None:
    run = _waiting_review()
    run.claim("wait")
    run.feed(ObservationOutcome.complete("wait", {"status": "approved"}))
    record = run.record("wait")
    assert record.state == "delivered" and record.output == '{"status":"approved"}'
    run.claim("ok")
    assert run.state.output == '{"status":"approved"}'


def test_t21_timeout_takes_on_timeout_without_a_read() -> None:
    run = _waiting_review()
    for _ in range(3):
        run.claim("wait")
        run.feed(ObservationOutcome("wait", "pending"))
    assert run.record("wait").due_at == T0 + 3600 * SECOND
    result = run.claim("wait")
    assert "observe" not in kinds(result.commands)
    assert run.record("wait").route == StepRoute("timeout")
    assert run.state.current_step == "late"


def test_t22_timeout_without_on_timeout_fails_wait_timed_out() -> None:
    run = _waiting_review(BARE_REVIEW)
    run.now = T0 + 3600 * SECOND
    run.claim("wait")
    assert (run.status(), run.state.failure_code) == ("failed", "wait-timed-out")


def test_t23_refused_observation_fails_the_run_with_its_code() -> None:
    run = _waiting_review()
    run.claim("wait")
    run.feed(ObservationOutcome("wait", "refused", code="completion-expired"))
    assert run.record("wait").state == "dead-lettered"
    assert (run.status(), run.state.failure_code) == ("failed", "completion-expired")


def test_t24_retryable_observation_reads_again_after_the_floor() -> None:
    run = _waiting_review()
    run.claim("wait")
    run.feed(ObservationOutcome("wait", "retryable", code="transport-unavailable"))
    assert run.record("wait").due_at == T0 + (900 + 30) * SECOND
    assert run.record("wait").observations == 1


def test_t25_cancel_of_a_pending_wait_with_on_cancel_takes_the_cancel_route() -> None:
    run = _waiting_review()
    run.feed(CancelRequested(), at=T0 + 60 * SECOND)
    assert run.record("wait").route == StepRoute("cancel")
    assert run.state.cancel_mode == "on-cancel-path"
    assert run.status() == "cancel-requested" and run.state.cancel_requested
    assert run.state.current_step == "undo" and run.record("undo").state == "pending"


def test_t25_cancel_of_a_pending_wait_without_on_cancel_ends_cancelled() -> None:
    run = _waiting_review(BARE_REVIEW)
    run.feed(CancelRequested(), at=T0 + 60 * SECOND)
    assert run.record("wait").state == "cancelled"
    assert run.status() == "cancelled" and run.state.completed_at == T0 + 60 * SECOND


def test_t25_cancel_of_another_pending_record_ends_cancelled() -> None:
    run = Driver(TIMER)
    run.claim("timer")
    run.feed(CancelRequested(), at=T0 + 60 * SECOND)
    assert run.record("timer").state == "cancelled" and run.status() == "cancelled"


def test_t26_deadline_sweep_expires_a_pending_non_pure_record() -> None:
    run = Driver(TIMER, {"at": "2099-01-01T00:00:00Z"})
    run.claim("timer")
    run.feed(DeadlinePassed(), at=run.state.deadline_at)
    assert run.record("timer").state == "expired"
    assert (run.status(), run.state.failure_code) == ("expired", "deadline-reached")


def test_t26_a_claim_after_the_deadline_expires_instead_of_leasing() -> None:
    run = Driver(READ)
    run.feed(StepDue("read"), at=run.state.deadline_at)
    assert run.record("read").state == "expired" and run.record("read").attempt == 0


def test_t27_deadline_of_an_uncertain_record_needs_attention() -> None:
    run = Driver(SEND)
    run.send("send")
    run.answer("send", "uncertain", code="transport-uncertain")
    run.feed(RetrySame())
    run.feed(DeadlinePassed(), at=run.state.deadline_at)
    assert run.record("send").state == "unknown"
    assert (run.status(), run.state.failure_code) == ("attention", "transport-uncertain")


def test_t28_lease_lapsed_after_dispatch_is_unknown_transport_uncertain() -> None:
    run = Driver(SEND)
    run.send("send")
    run.feed(LeaseLapsed("send"), at=T0 + 15 * SECOND)
    record = run.record("send")
    assert record.state == "unknown" and record.uncertain
    assert (run.status(), run.state.failure_code) == ("attention", "transport-uncertain")


def test_t29_lease_lapsed_before_dispatch_retries_as_attempt_timeout() -> None:
    run = Driver(SEND)
    run.claim("send")
    run.feed(LeaseLapsed("send"), at=T0 + 15 * SECOND)
    record = run.record("send")
    assert record.state == "pending" and record.failure_code == "attempt-timeout"
    assert record.due_at == T0 + 15 * SECOND + 100


def test_t29_lease_lapsed_observation_waits_for_the_floor() -> None:
    run = _waiting_review()
    run.claim("wait")
    started = run.now
    run.feed(LeaseLapsed("wait"), at=started + 15 * SECOND)
    assert run.record("wait").due_at == started + 30 * SECOND
    assert run.record("wait").observations == 0
    # Observations are not retries: the lapsed read is not counted as an attempt.
    assert run.record("wait").attempt == 0
    run.lease("wait")
    assert run.record("wait").attempt == 1


def test_t28_t29_a_lapsed_lease_of_a_record_no_longer_leased_changes_nothing() -> None:
    """The sweep's LeaseLapsed may reach a record its attempt already left (answered, here
    retryable and pending again): it is not applicable and changes nothing."""
    run = Driver(SEND)
    run.send("send")
    run.answer("send", "retryable", code="product-unavailable")
    assert run.record("send").state == "pending"
    before = run.state
    result = run.feed(LeaseLapsed("send"), at=T0 + 15 * SECOND)
    assert (result.refused, result.commands, run.state) == ("not-applicable", (), before)


def test_t29_lease_lapsed_pure_step_is_due_now() -> None:
    run = Driver(PICK)
    run.lease("pick")
    assert run.record("pick").state == "leased"
    run.feed(LeaseLapsed("pick"), at=T0 + 15 * SECOND)
    record = run.record("pick")
    assert (record.state, record.due_at) == ("pending", T0 + 15 * SECOND)
    run.claim("pick")
    assert run.state.current_step == "a"


def test_t29_lease_lapsed_wait_until_before_its_instant_was_recorded_is_due_now() -> None:
    run = Driver(TIMER)
    run.lease("timer")
    run.feed(LeaseLapsed("timer"), at=T0 + 15 * SECOND)
    record = run.record("timer")
    assert (record.state, record.due_at, record.wait_until) == ("pending", T0 + 15 * SECOND, None)


def test_t30_retry_same_rearms_the_record_in_a_new_generation() -> None:
    run = Driver(SEND)
    first = run.send("send")
    run.answer("send", "uncertain", code="transport-uncertain")
    result = run.feed(RetrySame(), at=T0 + 60 * SECOND)
    record = run.record("send")
    assert result.refused is None
    assert (record.state, record.generation, record.attempt) == ("pending", 2, 0)
    assert record.due_at == T0 + 60 * SECOND and record.uncertain
    assert (run.status(), run.state.failure_code, run.state.completed_at) == (
        "running",
        None,
        None,
    )
    second = run.send("send")
    assert (second.command, second.idempotency_key) == (first.command, first.idempotency_key)
    run.answer("send", "success", value={"id": "m"})
    assert run.record("send").settled_by == "retry-same"


def test_t31_confirmed_reconcile_settles_by_receipt_and_continues() -> None:
    run = Driver(SEND)
    run.send("send")
    run.answer("send", "uncertain", code="transport-uncertain")
    lookup = run.feed(ReconcileRequested())
    assert kinds(lookup.commands) == ["lookup-receipt"]
    result = run.feed(ReceiptAnswer.confirmed("send", 1, {"id": "m"}))
    assert result.answer == "confirmed"
    record = run.record("send")
    assert record.state == "delivered" and record.settled_by == "reconcile"
    assert record.output == '{"id":"m"}' and not record.uncertain
    assert run.status() == "running" and run.state.current_step == "end"


def test_t32_reconcile_receipt_expired_stays_in_attention() -> None:
    run = Driver(SEND)
    run.send("send")
    run.answer("send", "uncertain", code="transport-uncertain")
    run.feed(ReconcileRequested())
    result = run.feed(ReceiptAnswer("send", 1, "expired"))
    assert result.answer == "receipt-expired"
    assert run.record("send").receipt_expired
    assert (run.status(), run.state.failure_code) == ("attention", "receipt-expired")


def test_t33_restore_hold_reviews_the_run_and_lapses_its_lease() -> None:
    run = Driver(SEND)
    run.send("send")
    run.feed(RestoreHold())
    assert run.state.restore_review and run.state.reported_status == "attention"
    assert run.record("send").state == "unknown"  # dispatched: T28
    idle = Driver(READ)
    idle.claim("read")
    idle.feed(RestoreHold())
    assert idle.record("read").state == "pending"  # not dispatched: T29
    assert idle.feed(StepDue("read"), at=T0 + SECOND).refused == "not-applicable"


def test_t34_an_unrestorable_snapshot_fails_the_run() -> None:
    run = Driver(READ)
    result = unrestorable(run.state, T0)
    assert result.state.status == "failed"
    assert result.state.failure_code == "snapshot-incompatible"
    assert result.state.current.state == "dead-lettered"
    via_event = Driver(READ)
    via_event.claim("read")
    via_event.feed(AttemptRefused("read", "snapshot-incompatible"))
    assert via_event.state.failure_code == "snapshot-incompatible"


def test_t35_an_unrestorable_snapshot_of_an_uncertain_record_keeps_its_code() -> None:
    run = Driver(SEND)
    run.send("send")
    run.answer("send", "uncertain", code="transport-uncertain")
    run.feed(RetrySame())
    result = unrestorable(run.state, T0)
    assert result.state.status == "attention"
    assert result.state.current.state == "unknown"
    assert result.state.failure_code == "transport-uncertain"


def test_t35_a_refused_attempt_of_an_uncertain_record_leaves_it_unknown_and_never_due() -> None:
    """Only its product can settle an uncertain record: a re-armed one (retry-same) whose
    next attempt is refused before sending (a binding check) is unknown again, at rest."""
    run = Driver(SEND)
    run.send("send")
    run.answer("send", "uncertain", code="transport-uncertain")
    run.feed(RetrySame(), at=T0 + 60 * SECOND)
    assert run.record("send").due_at == T0 + 60 * SECOND
    run.feed(AttemptRefused("send", "binding-changed"), at=T0 + 61 * SECOND)
    record = run.record("send")
    assert (record.state, record.due_at, record.awaiting) == ("unknown", None, None)
    assert record.finished_at == T0 + 61 * SECOND
    assert (run.status(), run.state.failure_code) == ("attention", "transport-uncertain")


def test_t36_a_record_that_does_not_fit_the_snapshot_is_step_invalid() -> None:
    run = Driver(READ)
    other = definition({"read": choose({"a": "end"}), "end": finish()}, "read")
    run.definition = other
    run.claim("read")
    assert run.record("read").state == "dead-lettered"
    assert (run.status(), run.state.failure_code) == ("failed", "step-invalid")


def test_dispatch_carries_the_frozen_command_and_the_product_command_key() -> None:
    run = Driver(SEND)
    dispatch = run.send("send")
    assert isinstance(dispatch, Dispatch)
    assert dispatch.idempotency_key is not None and len(dispatch.idempotency_key) == 64
    assert f'"idempotencyKey":"{dispatch.idempotency_key}"' in dispatch.command
    assert kinds(run.commands) == ["mark-may-send", "dispatch"]
    read = Driver(READ)
    assert read.send("read").idempotency_key is None


def test_the_frozen_command_names_the_alias_operation_connection_and_input() -> None:
    """07 §7.4 step 2: the command is evaluated once and frozen as the canonical JSON the
    adapters read (`alias`, `operation`, `connection`, `input`, and the product command key
    when the operation takes one); retry-same resends these very bytes."""
    dispatch = Driver(SEND).send("send")
    assert json.loads(dispatch.command) == {
        "alias": "notice",
        "operation": "messaging.submit-message/v1",
        "connection": "notices",
        "input": {"id": "x-1"},
        "idempotencyKey": dispatch.idempotency_key,
    }
    read = Driver(READ).send("read")
    assert json.loads(read.command) == {
        "alias": "record",
        "operation": "breg.read-record/v1",
        "connection": "registry",
        "input": {"id": "x-1"},
    }
    assert (read.operation, read.connection) == ("breg.read-record/v1", "registry")


def test_a_call_input_that_fails_or_is_no_object_is_mapping_invalid_and_never_frozen() -> None:
    for function, detail in (
        ("broken", FailureDetail("coordinator.function.execution", "thrown", "broken", 6, 20)),
        ("text", FailureDetail("coordinator.mapping.call-shape")),
    ):
        steps = {"send": call("notice", "end", input=mapping(function)), "end": finish()}
        run = Driver(definition(steps, "send"))
        run.claim("send")
        record = run.record("send")
        assert (record.state, record.command) == ("dead-lettered", None), function
        assert (run.status(), run.state.failure_code) == ("failed", "mapping-invalid")
        assert record.detail is not None and FailureDetail.parse(record.detail) == detail
        assert "freeze-command" not in kinds(run.commands)


def test_a_frozen_command_naming_another_operation_or_connection_is_never_sent() -> None:
    """07 §7.4 step 4: before a credential is asked for, the frozen command (a restored
    record's, here rewritten) must still name the step's operation and connection; either one
    changed dead-letters the record `protected-state-invalid`, and an uncertain record is left
    unknown with its code (only its product can settle it)."""

    def rewritten(run: Driver, step: str, member: str, value: str) -> None:
        record = run.record(step)
        assert record.command is not None
        command = json.loads(record.command) | {member: value}
        changed = replace(record, command=json.dumps(command, separators=(",", ":")))
        run.state = replace(run.state, records=(changed,))

    for member, value in (("operation", "breg.read-record/v1"), ("connection", "reviews")):
        run = Driver(ACT)
        run.claim("act")  # frozen, waiting for its preparation
        rewritten(run, "act", member, value)
        run.feed(PreparationDone("act", b"prepared"))
        assert "obtain-credential" not in kinds(run.commands), member
        assert run.record("act").state == "dead-lettered"
        assert (run.status(), run.state.failure_code) == ("failed", "protected-state-invalid")

        uncertain = Driver(SEND)
        uncertain.send("send")
        uncertain.answer("send", "uncertain", code="transport-uncertain")
        uncertain.feed(RetrySame())
        rewritten(uncertain, "send", member, value)
        uncertain.claim("send")
        assert "obtain-credential" not in kinds(uncertain.commands), member
        assert uncertain.record("send").state == "unknown"
        assert uncertain.state.failure_code == "transport-uncertain"


def test_the_pre_send_fence_sends_once_and_never_under_a_restore_review() -> None:
    """ReadyToSend after the dispatch (a duplicate) is not applicable; a run under a restore
    review (its record still leased, as a store's review may leave it) sends nothing."""
    run = Driver(SEND)
    run.send("send")
    again = run.feed(ReadyToSend("send"))
    assert (again.refused, again.commands) == ("not-applicable", ())
    held = Driver(SEND)
    held.claim("send")
    assert kinds(held.commands)[-1] == "obtain-credential"
    held.state = replace(held.state, restore_review=True)
    before = held.state
    refused = held.feed(ReadyToSend("send"))
    assert (refused.refused, refused.commands, held.state) == ("restore-review", (), before)


def test_preparation_is_frozen_once_and_too_large_evidence_is_refused() -> None:
    run = Driver(ACT)
    run.claim("act")
    assert kinds(run.commands) == ["freeze-command", "prepare"]
    run.feed(PreparationDone("act", b"prepared"))
    assert kinds(run.commands) == ["freeze-preparation", "obtain-credential"]
    run.feed(ReadyToSend("act"))
    (dispatch,) = [c for c in run.commands if isinstance(c, Dispatch)]
    assert dispatch.preparation == b"prepared"  # the frozen preparation goes with the command
    large = Driver(ACT)
    large.claim("act")
    large.feed(PreparationDone("act", b"x" * 65_537))
    assert large.state.failure_code == "preparation-too-large"


def test_a_call_outcome_before_sending_can_only_be_a_definite_failure() -> None:
    run = Driver(SEND)
    run.claim("send")
    refused = run.feed(CallOutcome("send", "uncertain", code="transport-uncertain"))
    assert refused.refused == "not-applicable"
    run.feed(CallOutcome("send", "retryable", code="credential-unavailable"))
    record = run.record("send")
    assert record.state == "pending" and not record.sent
    assert record.effect_state == "not-sent"
