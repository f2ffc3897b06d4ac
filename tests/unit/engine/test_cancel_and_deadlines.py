"""Cancel (07 §8, the cancel rule of §5) and deadlines (07 §7.5)."""

from __future__ import annotations

from engine_support import (
    SECOND,
    T0,
    Driver,
    call,
    choose,
    definition,
    finish,
    mapping,
    wait_for,
    wait_until,
)

from coordinator_core.engine import (
    Cancelled,
    CancelRequested,
    DeadlinePassed,
    LeaseLapsed,
    ObservationOutcome,
    ReadyToSend,
    RetrySame,
    Work,
)

SEND = definition({"send": call("notice", "end"), "end": finish()}, "send")
CHAIN = definition(
    {"read": call("record", "send"), "send": call("notice", "end"), "end": finish()}, "read"
)
REVIEW = definition(
    {
        "ask": call("review", "wait"),
        "wait": wait_for("ask", "ok", on_cancel="undo"),
        "ok": finish(),
        "undo": call("withdraw", "second", input=mapping("from_review", "ask")),
        "second": wait_for("ask", "ok2", on_cancel="gone"),
        "ok2": finish(),
        "gone": finish(),
    },
    "ask",
)


def test_cancel_without_on_cancel_of_a_pending_call_ends_cancelled_with_nothing_sent() -> None:
    run = Driver(SEND)
    result = run.feed(CancelRequested())
    assert run.status() == "cancelled" and run.record("send").state == "cancelled"
    assert result.commands == (Cancelled("cancelled"),)
    assert run.record("send").effect_state is None  # never prepared: no effect


def test_cancel_before_the_pre_send_fence_is_not_sent_and_its_effect_is_not_sent() -> None:
    run = Driver(SEND)
    run.claim("send")  # frozen, waiting for the credential
    run.feed(CancelRequested())
    assert run.status() == "cancel-requested"
    result = run.feed(ReadyToSend("send"))
    assert "dispatch" not in [c.kind for c in result.commands]
    assert run.status() == "cancelled"
    assert run.record("send").effect_state == "not-sent"


def test_cancel_of_a_sent_command_awaiting_a_retry_has_effect_refused() -> None:
    run = Driver(SEND)
    run.send("send")
    run.answer("send", "retryable", code="transport-unavailable")
    run.feed(CancelRequested())
    assert run.status() == "cancelled"
    assert run.record("send").effect_state == "refused"


def test_cancel_while_leased_resolves_a_retry_at_once() -> None:
    run = Driver(SEND)
    run.send("send")
    run.feed(CancelRequested())
    run.answer("send", "retryable", code="transport-unavailable")
    assert run.record("send").state == "cancelled" and run.status() == "cancelled"


def test_cancel_after_effect_a_leased_mutation_accepted_later() -> None:
    run = Driver(CHAIN)
    run.succeed("read", {})
    run.send("send")
    run.feed(CancelRequested())
    run.answer("send", "success", value={"id": "m"})
    assert run.status() == "cancelled-after-effect"
    assert [r.step for r in run.state.records] == ["read", "send"]


def test_cancel_while_a_pure_step_is_leased_cancels_the_next_record() -> None:
    picked = definition(
        {"pick": choose({"yes": "send"}), "send": call("notice", "end"), "end": finish()}, "pick"
    )
    run = Driver(picked)
    run.lease("pick")
    run.feed(CancelRequested())
    run.feed(Work("pick"))
    assert run.record("send").state == "cancelled" and run.status() == "cancelled"


def test_cancel_with_on_cancel_runs_the_cancel_path_and_later_waits_take_their_cancel_route() -> (
    None
):
    run = Driver(REVIEW)
    run.succeed("ask", {"requestId": "r"})
    run.feed(CancelRequested(), at=T0 + 10 * SECOND)
    assert run.state.cancel_mode == "on-cancel-path"
    run.succeed("undo", {})
    # a wait-for entered on the cancel path is resolved at once through its own onCancel
    route = run.record("second").route
    assert route is not None and route.kind == "cancel"
    run.claim("gone")
    assert run.status() == "cancelled" and run.state.outcome == "done"


def test_cancel_during_an_observation_discards_the_read() -> None:
    run = Driver(REVIEW)
    run.succeed("ask", {"requestId": "r"})
    run.claim("wait")
    run.feed(CancelRequested())
    run.feed(ObservationOutcome.complete("wait", {"status": "approved"}))
    wait = run.record("wait")
    assert wait.output is None and wait.route is not None and wait.route.kind == "cancel"
    assert run.state.current_step == "undo"


def test_cancel_on_the_cancel_path_is_a_second_cancel_and_changes_nothing() -> None:
    run = Driver(REVIEW)
    run.succeed("ask", {"requestId": "r"})
    run.feed(CancelRequested())
    before = run.state
    assert run.feed(CancelRequested()).state == before


def test_cancel_of_a_failed_run_ends_cancelled_and_keeps_its_failure_code() -> None:
    run = Driver(SEND)
    run.send("send")
    run.answer("send", "refused", code="invalid-command")
    run.feed(CancelRequested(), at=T0 + SECOND)
    assert (run.status(), run.state.failure_code) == ("cancelled", "invalid-command")
    assert run.feed(RetrySame()).refused == "cancelled"


def test_cancel_of_a_terminal_run_changes_nothing() -> None:
    run = Driver(definition({"end": finish()}, "end"))
    run.claim("end")
    before = run.state
    result = run.feed(CancelRequested())
    assert result.state == before and result.commands == ()


def test_cancel_of_an_unknown_effect_keeps_attention_and_sends_nothing() -> None:
    run = Driver(SEND)
    run.send("send")
    run.answer("send", "uncertain", code="transport-uncertain")
    result = run.feed(CancelRequested())
    assert run.status() == "attention" and run.state.cancel_requested
    assert result.commands == ()


def test_cancel_rule_a_lapsed_lease_of_a_stopping_run_resolves_at_once() -> None:
    run = Driver(SEND)
    run.claim("send")
    run.feed(CancelRequested())
    run.feed(LeaseLapsed("send"), at=T0 + 15 * SECOND)
    assert run.record("send").state == "cancelled" and run.status() == "cancelled"


def test_cancel_under_restore_review_clears_the_review_when_terminal() -> None:
    from coordinator_core.engine import RestoreHold

    run = Driver(SEND)
    run.feed(RestoreHold())
    run.feed(CancelRequested())
    assert run.status() == "cancelled" and not run.state.restore_review


# -- deadlines ----------------------------------------------------------------------------


def test_deadline_pure_steps_never_expire() -> None:
    late = definition({"read": call("record", "end"), "end": finish()}, "read", deadline=10)
    run = Driver(late)
    run.send("read")
    run.answer("read", "success", value={})  # the answer arrived in time
    run.now = run.state.deadline_at + 5 * SECOND
    assert run.feed(DeadlinePassed()).refused == "not-applicable"
    run.claim("end")
    assert run.status() == "finished"


def test_deadline_the_pre_send_fence_expires_a_call_past_the_deadline() -> None:
    short = definition({"send": call("notice", "end"), "end": finish()}, "send", deadline=10)
    run = Driver(short)
    run.claim("send")
    run.feed(ReadyToSend("send"), at=run.state.deadline_at)
    assert run.status() == "expired"
    assert run.record("send").effect_state == "not-sent"


def test_deadline_wins_over_a_wait_timeout_at_or_after_it() -> None:
    long_wait = definition(
        {
            "ask": call("review", "wait"),
            "wait": wait_for("ask", "ok", timeout=7200, on_timeout="ok"),
            "ok": finish(),
        },
        "ask",
        deadline=3600,
    )
    run = Driver(long_wait)
    run.succeed("ask", {"requestId": "r"})
    for _ in range(3):
        run.claim("wait")
        run.feed(ObservationOutcome("wait", "pending"))
    assert run.record("wait").due_at == T0 + 3600 * SECOND
    run.feed(DeadlinePassed(), at=T0 + 3600 * SECOND)
    assert (run.status(), run.state.failure_code) == ("expired", "deadline-reached")


def test_deadline_of_a_wait_until_due_at_the_deadline_expires() -> None:
    timer = definition({"t": wait_until("end"), "end": finish()}, "t", deadline=60)
    run = Driver(timer)
    run.claim("t")
    assert run.record("t").due_at == run.state.deadline_at
    run.claim("t")
    assert run.status() == "expired"
