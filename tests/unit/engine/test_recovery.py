"""Recovery rules per operation (08 §1.1) and operator recovery (07 §9): retry-same, reconcile."""

from __future__ import annotations

from dataclasses import replace

import pytest
from engine_support import SECOND, T0, Driver, call, definition, finish, kinds, wait_for

from coordinator_core.engine import (
    CallOutcome,
    CancelRequested,
    Definition,
    LeaseLapsed,
    ObservationOutcome,
    ReceiptAnswer,
    ReconcileRequested,
    RestoreHold,
    RetrySame,
    StepDue,
    Work,
)

SEND = definition({"send": call("notice", "end"), "end": finish()}, "send")
READ = definition({"read": call("record", "end"), "end": finish()}, "read")
REVIEW = definition({"ask": call("review", "end"), "end": finish()}, "ask")
EVALUATE = definition({"eval": call("evaluate", "end"), "end": finish()}, "eval")
WAIT = definition(
    {"ask": call("review", "wait"), "wait": wait_for("ask", "end"), "end": finish()}, "ask"
)


def _uncertain(definition_: Definition = SEND, step: str = "send") -> Driver:
    run = Driver(definition_)
    run.send(step)
    run.answer(step, "uncertain", code="transport-uncertain")
    return run


# -- read-again -------------------------------------------------------------------------------


def test_read_again_a_lapsed_read_is_read_again_never_unknown() -> None:
    run = Driver(READ)
    run.send("read")  # reads are never marked: no dispatch risk
    assert not run.record("read").dispatched
    run.feed(LeaseLapsed("read"), at=T0 + 15 * SECOND)
    assert run.record("read").state == "pending"
    assert run.status() == "running"


# -- same-command -----------------------------------------------------------------------------


def test_same_command_retry_same_resends_identical_bytes_and_key_in_every_generation() -> None:
    run = Driver(REVIEW)
    sent = [run.send("ask")]
    run.answer("ask", "uncertain", code="transport-uncertain")
    for generation in (2, 3):
        run.feed(RetrySame())
        sent.append(run.send("ask"))
        assert sent[-1].generation == generation
        run.answer("ask", "uncertain", code="transport-uncertain")
    assert len({(d.command, d.idempotency_key) for d in sent}) == 1


def test_same_command_retry_same_after_a_definite_failure_resends_the_frozen_command() -> None:
    run = Driver(REVIEW)
    first = run.send("ask")
    run.answer("ask", "refused", code="product-refused")
    assert run.status() == "failed"
    run.feed(RetrySame())
    assert run.status() == "running" and run.state.failure_code is None
    assert run.send("ask").command == first.command
    assert kinds(run.log[-3].commands) == ["claimed"]  # no second freeze: evaluated once


def test_same_command_reconcile_is_unavailable_without_a_readable_receipt() -> None:
    run = _uncertain(REVIEW, "ask")
    assert run.feed(ReconcileRequested()).refused == "no-receipt"


# -- same-command-and-receipt ----------------------------------------------------------------


def test_same_command_and_receipt_reconcile_unresolved_changes_nothing() -> None:
    run = _uncertain()
    before = run.state
    run.feed(ReconcileRequested())
    result = run.feed(ReceiptAnswer("send", 1, "unresolved"))
    assert result.answer == "unresolved" and run.state == before
    assert run.feed(ReceiptAnswer("send", 1, "unavailable")).answer == "unavailable"
    assert run.feed(ReceiptAnswer("send", 1, "key-reused")).answer == "unresolved"
    assert run.state == before


def test_same_command_and_receipt_a_stale_receipt_answer_is_raced() -> None:
    run = _uncertain()
    run.feed(ReconcileRequested())
    run.feed(RetrySame())  # generation 2 now
    assert run.feed(ReceiptAnswer.confirmed("send", 1, {})).refused == "reconcile-raced"


def test_same_command_and_receipt_after_expiry_retry_and_reconcile_are_refused() -> None:
    run = Driver(SEND)
    run.send("send")
    run.answer("send", "receipt-expired")
    assert run.feed(RetrySame()).refused == "receipt-expired"
    assert run.feed(ReconcileRequested()).refused == "receipt-expired"


# -- hold-after-dispatch ---------------------------------------------------------------------


def test_hold_after_dispatch_an_uncertain_evaluation_is_never_resent() -> None:
    run = _uncertain(EVALUATE, "eval")
    assert run.feed(RetrySame()).refused == "evaluation-uncertain"
    assert run.feed(ReconcileRequested()).refused == "no-receipt"


def test_hold_after_dispatch_a_lapsed_evaluation_lease_is_unknown_not_retried() -> None:
    run = Driver(EVALUATE)
    run.send("eval")
    run.feed(LeaseLapsed("eval"), at=T0 + 15 * SECOND)
    assert run.record("eval").state == "unknown"
    assert run.feed(RetrySame()).refused == "evaluation-uncertain"


def test_hold_after_dispatch_claiming_an_uncertain_evaluation_holds_it() -> None:
    # Under restore review a pending record may be made claimable; an uncertain evaluation
    # that reaches a claim is never sent again (07 §7.4 step 1).
    run = Driver(EVALUATE)
    run.send("eval")
    run.feed(LeaseLapsed("eval"), at=T0 + 15 * SECOND)
    state = run.state
    record = state.current
    rearmed = replace(record, state="pending", due_at=run.now)
    run.state = replace(state, status="running", records=(rearmed,))
    run.feed(StepDue("eval"))
    result = run.feed(Work("eval"))
    assert "dispatch" not in kinds(result.commands)
    assert (run.status(), run.state.failure_code) == ("attention", "evaluation-uncertain")


def test_hold_after_dispatch_a_retryable_evaluation_is_retried() -> None:
    run = Driver(EVALUATE)
    run.send("eval")
    run.answer("eval", "retryable", code="evaluation-unavailable")
    assert run.record("eval").state == "pending"


# -- retry-same refusals, in the order of 07 §9.1 ---------------------------------------------


def test_retry_same_is_refused_for_a_cancelled_run() -> None:
    run = Driver(SEND)
    run.send("send")
    run.answer("send", "refused", code="product-refused")
    run.feed(CancelRequested())
    assert run.status() == "cancelled"
    assert run.feed(RetrySame()).refused == "cancelled"


def test_retry_same_is_refused_for_finished_running_and_non_recoverable_runs() -> None:
    finished = Driver(definition({"end": finish()}, "end"))
    finished.claim("end")
    assert finished.feed(RetrySame()).refused == "terminal"
    running = Driver(SEND)
    assert running.feed(RetrySame()).refused == "terminal"
    broken = Driver(definition({"end": finish("strict")}, "end"))
    broken.claim("end")
    assert broken.state.failure_code == "outcome-invalid"
    assert broken.feed(RetrySame()).refused == "terminal"


def test_retry_same_is_refused_after_the_deadline() -> None:
    run = _uncertain()
    result = run.feed(RetrySame(), at=run.state.deadline_at)
    assert result.refused == "deadline-reached"


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        (RetrySame(binding_unchanged=False), "binding-changed"),
        (RetrySame(snapshot_restores=False), "snapshot-incompatible"),
        (RetrySame(payload_erased=True), "payload-erased"),
        (RetrySame(lease_active=True), "lease-active"),
        (RetrySame(binding_unchanged=False, payload_erased=True), "binding-changed"),
    ],
)
def test_retry_same_shell_checks_refuse_in_contract_order(event: RetrySame, reason: str) -> None:
    run = _uncertain()
    assert run.feed(event).refused == reason


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        (ReconcileRequested(lease_active=True), "lease-active"),
        (ReconcileRequested(binding_unchanged=False), "binding-changed"),
        (ReconcileRequested(payload_erased=True), "payload-erased"),
    ],
)
def test_reconcile_shell_checks_refuse_in_contract_order(
    event: ReconcileRequested, reason: str
) -> None:
    run = _uncertain()
    assert run.feed(event).refused == reason


def test_reconcile_is_refused_when_the_record_is_not_uncertain() -> None:
    run = Driver(SEND)
    run.send("send")
    run.answer("send", "refused", code="product-refused")
    assert run.feed(ReconcileRequested()).refused == "not-uncertain"


def test_retry_same_of_a_refused_wait_observes_again_within_its_timeout() -> None:
    run = Driver(WAIT)
    run.succeed("ask", {"requestId": "r"})
    run.claim("wait")
    assert run.feed(CallOutcome("wait", "refused", code="x")).refused == "not-applicable"
    run.feed(ObservationOutcome("wait", "refused", code="product-not-found"))
    timeout_at = run.record("wait").timeout_at
    run.feed(RetrySame())
    record = run.record("wait")
    assert record.state == "pending" and record.timeout_at == timeout_at
    assert record.generation == 2


def test_retry_same_under_restore_review_makes_a_pending_record_claimable() -> None:
    run = Driver(SEND)
    run.feed(RestoreHold())
    assert run.state.reported_status == "attention"
    assert run.feed(StepDue("send")).refused == "not-applicable"
    run.feed(RetrySame())
    assert (run.state.restore_review, run.state.reported_status) == (False, "running")
    assert run.record("send").generation == 1
    run.send("send")


def test_retry_same_of_an_unknown_effect_after_cancel_ends_cancelled_after_effect() -> None:
    run = _uncertain()
    run.feed(CancelRequested())
    assert run.status() == "attention" and run.state.cancel_requested
    run.feed(RetrySame())
    assert run.status() == "cancel-requested"
    run.send("send")
    run.answer("send", "success", value={"id": "m"})
    assert run.status() == "cancelled-after-effect"


def test_reconcile_of_an_unknown_effect_after_cancel_ends_cancelled_after_effect() -> None:
    run = _uncertain()
    run.feed(CancelRequested())
    run.feed(ReconcileRequested())
    run.feed(ReceiptAnswer.confirmed("send", 1, {"id": "m"}))
    assert run.status() == "cancelled-after-effect"
