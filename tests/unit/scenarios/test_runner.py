"""Runner semantics of 04 §4 over the lab project: start, main loop, wait-until, call, recovery,
wait-for, choose, finish, cancel, runner errors and the expectation."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import Any

import pytest
from scenario_support import (
    ACCEPTED,
    ACTION,
    ADMITTED,
    RECEIPT,
    REVIEW_RESULT,
    WITHDRAWAL,
    case,
    codes,
    definition,
    only,
    record,
    run,
    success,
)

from coordinator_core.engine import Dispatch, advance
from coordinator_core.scenarios import ScenarioKeys
from coordinator_core.scenarios import runner as runner_module

READ = ["route", "read", "read-done"]
NOTIFY = ["route", "notify", "end"]
REVIEW = ["route", "ask", "wait"]
UNCERTAIN = {"type": "uncertain", "code": "transport-uncertain"}
RETRYABLE = {"type": "retryable", "code": "transport-unavailable"}
REFUSED = {"type": "refused", "code": "product-refused"}
REVIEW_REPLY = {"ask": [success(ACCEPTED)]}


def _result(*args: Any, **kwargs: Any) -> dict[str, Any]:
    report = run(case(*args, **kwargs))
    return only(report).to_json()


# -- start (04 §4.2) ----------------------------------------------------------------------


def test_start_a_literal_input_failing_the_input_schema_is_scenario_input() -> None:
    report = run(case(input={"other": 1}))
    assert codes(report) == [("coordinator.scenario.input", "/cases/0/input")]
    assert only(report).to_json() == {"id": "c", "passed": False}


def test_start_an_event_runs_the_trigger_mapping_on_the_event_argument() -> None:
    event = {"trigger": "submitted", "data": {"route": "echo"}}
    result = _result(None, event=event, path=["route", "echo-end"])
    assert result["passed"]
    assert result["output"] == {
        "route": "echo",
        "source": "urn:coordinator:scenario:registry",
        "type": "submitted-v1",
        "time": ADMITTED,
        "id": "00000000-0000-4000-8000-000000000000",
    }
    given = {**event, "id": "evt-7", "time": "2026-03-02T08:00:00+00:00"}
    output = _result(None, event=given, path=["route", "echo-end"])["output"]
    assert (output["id"], output["time"]) == ("evt-7", "2026-03-02T08:00:00+00:00")


def test_start_a_failing_trigger_mapping_is_scenario_event_with_the_function_code() -> None:
    report = run(case(None, event={"trigger": "submitted", "data": {"fail": True}}))
    assert codes(report) == [("coordinator.scenario.event", "/cases/0/event")]
    related = report.diagnostics[0].related
    assert len(related) == 1 and related[0].file == "functions.rhai"
    assert "coordinator.function.execution" in related[0].message
    # the failing statement (the `throw`), its function and the cause class
    assert (related[0].line, related[0].column) == (5, 9)
    assert "trigger_input" in related[0].message and "(thrown)" in related[0].message


def test_start_a_mapped_input_failing_the_input_schema_is_trigger_input() -> None:
    report = run(case(None, event={"trigger": "submitted", "data": {}}))
    assert codes(report) == [("coordinator.mapping.trigger-input", "/cases/0/event")]


# -- main loop and cancel at a step boundary ----------------------------------------------


def test_cancel_at_admission_stops_before_the_start_step_is_entered() -> None:
    result = _result("read", status="cancelled", cancel={"afterSeconds": 0})
    assert result["passed"] and result["path"] == [] and result["elapsedSeconds"] == 0


def test_replies_for_steps_the_run_never_entered_are_ignored() -> None:
    result = _result(
        "read",
        replies={"read": [success()], "notify": [success(RECEIPT), success(RECEIPT)]},
        path=READ,
    )
    assert result["passed"] and result["callAttempts"] == {"read": 1}


def test_more_events_than_the_bound_is_scenario_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner_module, "MAX_EVENTS", 5)
    report = run(case("review", replies=REVIEW_REPLY, path=REVIEW))
    assert codes(report) == [("coordinator.scenario.bound", "/cases/0")]


# -- wait-until (04 §4.4) -----------------------------------------------------------------


def test_wait_until_advances_the_virtual_clock_to_its_instant() -> None:
    result = _result(
        None,
        input={"route": "timer", "at": "2026-03-02T10:30:00Z"},
        path=["route", "timer", "timed"],
    )
    assert result["passed"] and result["elapsedSeconds"] == 5400


def test_wait_until_a_past_instant_takes_no_time() -> None:
    result = _result(
        None,
        input={"route": "timer", "at": "2020-01-01T00:00:00Z"},
        path=["route", "timer", "timed"],
    )
    assert result["elapsedSeconds"] == 0


def test_wait_until_not_a_date_time_fails_mapping_invalid_with_the_timestamp_detail() -> None:
    result = _result(
        None, input={"route": "timer", "at": "soon"}, status="failed", path=["route", "timer"]
    )
    assert result["failureCode"] == "mapping-invalid"
    assert result["mappingFailure"] == {"step": "timer", "code": "coordinator.mapping.timestamp"}


def test_wait_until_at_or_after_the_deadline_expires_at_the_deadline() -> None:
    result = _result(
        None,
        input={"route": "timer", "at": "2026-03-09T00:00:00Z"},
        status="expired",
        path=["route", "timer"],
    )
    assert result["passed"] and result["elapsedSeconds"] == 86400
    assert result["failureCode"] == "deadline-reached"


def test_wait_until_cancel_before_the_instant_stops_the_run_there() -> None:
    result = _result(
        None,
        input={"route": "timer", "at": "2026-03-02T10:00:00Z"},
        cancel={"afterSeconds": 600},
        status="cancelled",
        path=["route", "timer"],
    )
    assert result["passed"] and result["elapsedSeconds"] == 600


def test_virtual_time_has_millisecond_resolution() -> None:
    result = _result(
        None,
        input={"route": "timer", "at": "2026-03-02T09:00:01.250Z"},
        path=["route", "timer", "timed"],
        expect={"workflowElapsedSeconds": 1.25},
    )
    assert result["passed"] and result["elapsedSeconds"] == 1.25


# -- call (04 §4.5) -------------------------------------------------------------------------


def test_call_retryable_replies_are_retried_automatically_without_virtual_time() -> None:
    result = _result(
        "notify", replies={"notify": [RETRYABLE, RETRYABLE, success(RECEIPT)]}, path=NOTIFY
    )
    assert result["passed"] and result["callAttempts"] == {"notify": 3}
    assert result["elapsedSeconds"] == 0 and result["frozenCommands"] == 1


def test_call_a_third_retryable_fails_with_its_code_and_a_refused_effect() -> None:
    result = _result(
        "notify",
        replies={"notify": [RETRYABLE, RETRYABLE, {"type": "retryable", "code": "rate-limited"}]},
        status="failed",
        path=["route", "notify"],
    )
    assert result["failureCode"] == "rate-limited"
    assert result["effects"] == [{"step": "notify", "state": "refused"}]


def test_call_refused_with_retry_same_resends_and_settles() -> None:
    result = _result(
        "notify",
        replies={"notify": [REFUSED, success(RECEIPT)]},
        recovery={"notify": "retry-same"},
        path=NOTIFY,
    )
    assert result["passed"] and result["failureCode"] is None
    assert result["effects"] == [{"step": "notify", "state": "accepted"}]


def test_call_refused_without_recovery_and_an_unused_reply_is_scenario_reply() -> None:
    report = run(case("notify", replies={"notify": [REFUSED, success(RECEIPT)]}, status="failed"))
    assert codes(report) == [("coordinator.scenario.reply", "/cases/0/replies/notify/1")]


def test_call_reconcile_after_a_definite_failure_is_scenario_recovery() -> None:
    report = run(
        case(
            "notify",
            replies={"notify": [REFUSED, success(RECEIPT)]},
            recovery={"notify": "reconcile"},
        )
    )
    assert codes(report) == [("coordinator.scenario.recovery", "/cases/0/recovery/notify")]


def test_call_uncertain_without_recovery_needs_attention() -> None:
    result = _result(
        "notify", replies={"notify": [UNCERTAIN]}, status="attention", path=["route", "notify"]
    )
    assert result["failureCode"] == "transport-uncertain"
    assert result["effects"] == [{"step": "notify", "state": "unknown"}]


def test_call_uncertain_with_retry_same_settles_by_the_same_command() -> None:
    result = _result(
        "decide",
        replies={"decide": [UNCERTAIN, RETRYABLE, success(ACTION)]},
        recovery={"decide": "retry-same"},
        path=["route", "decide", "end"],
    )
    assert result["passed"] and result["callAttempts"] == {"decide": 3}
    assert result["effects"] == [{"step": "decide", "state": "accepted"}]


def test_call_unknown_then_declared_refusal_keeps_the_uncertain_code() -> None:
    result = _result(
        "decide",
        replies={"decide": [UNCERTAIN, {"type": "declared-refusal", "refusalCode": "withdrawn"}]},
        recovery={"decide": "retry-same"},
        status="attention",
        path=["route", "decide"],
    )
    assert result["passed"] and result["failureCode"] == "transport-uncertain"


def test_call_reconcile_looks_up_again_while_unresolved_then_settles() -> None:
    result = _result(
        "notify",
        replies={"notify": [UNCERTAIN, UNCERTAIN, success(RECEIPT)]},
        recovery={"notify": "reconcile"},
        path=NOTIFY,
    )
    assert result["passed"] and result["effects"] == [{"step": "notify", "state": "accepted"}]


def test_call_reconcile_unresolved_with_no_reply_left_stays_in_attention() -> None:
    result = _result(
        "notify",
        replies={"notify": [UNCERTAIN, UNCERTAIN]},
        recovery={"notify": "reconcile"},
        status="attention",
        path=["route", "notify"],
    )
    assert result["passed"]


def test_call_reconcile_receipt_expired_stops_and_a_later_reply_is_receipt_expired() -> None:
    expired = {"type": "receipt-expired"}
    result = _result(
        "notify",
        replies={"notify": [UNCERTAIN, expired]},
        recovery={"notify": "reconcile"},
        status="attention",
        path=["route", "notify"],
        expect={"failureCode": "receipt-expired"},
    )
    assert result["passed"]
    report = run(
        case(
            "notify",
            replies={"notify": [UNCERTAIN, expired, success(RECEIPT)]},
            recovery={"notify": "reconcile"},
        )
    )
    assert codes(report) == [("coordinator.scenario.receipt-expired", "/cases/0/replies/notify/2")]


def test_call_receipt_expired_in_send_mode_stops_in_attention() -> None:
    report = run(
        case(
            "notify",
            replies={"notify": [{"type": "receipt-expired"}, success(RECEIPT)]},
            recovery={"notify": "retry-same"},
        )
    )
    assert codes(report) == [("coordinator.scenario.receipt-expired", "/cases/0/replies/notify/1")]


def test_call_reconcile_answered_by_a_refusal_is_scenario_reply() -> None:
    report = run(
        case("notify", replies={"notify": [UNCERTAIN, REFUSED]}, recovery={"notify": "reconcile"})
    )
    assert codes(report) == [("coordinator.scenario.reply", "/cases/0/replies/notify/1")]


def test_call_needing_a_reply_when_none_is_left_is_scenario_reply() -> None:
    report = run(case("notify", replies={"notify": [RETRYABLE]}))
    assert codes(report) == [("coordinator.scenario.reply", "/cases/0/replies/notify")]
    unscripted = run(case("notify"))
    assert codes(unscripted) == [("coordinator.scenario.reply", "/cases/0")]


def test_call_a_reply_left_after_success_is_scenario_reply() -> None:
    report = run(case("read", replies={"read": [success(), success()]}))
    assert codes(report) == [("coordinator.scenario.reply", "/cases/0/replies/read/1")]


def test_call_routed_declared_refusal_continues_without_output() -> None:
    result = _result(
        "decide",
        replies={"decide": [{"type": "declared-refusal", "refusalCode": "withdrawn"}]},
        path=["route", "decide", "withdrawn"],
    )
    assert result["passed"] and result["effects"] == [{"step": "decide", "state": "refused"}]


def test_call_unrouted_declared_refusal_fails_product_refused_without_recovery() -> None:
    result = _result(
        "decide",
        replies={"decide": [{"type": "declared-refusal", "refusalCode": "other"}]},
        status="failed",
        path=["route", "decide"],
        expect={"failureCode": "product-refused"},
    )
    assert result["passed"]


def test_call_input_that_is_not_an_object_fails_mapping_invalid_with_call_shape() -> None:
    result = _result("shapeless", status="failed", path=["route", "shapeless"])
    assert result["failureCode"] == "mapping-invalid"
    assert result["mappingFailure"] == {
        "step": "shapeless",
        "code": "coordinator.mapping.call-shape",
    }
    assert result["effects"] == [] and result["callAttempts"] == {}


def test_call_uncertain_evaluation_is_held_in_attention() -> None:
    result = _result(
        "score",
        replies={"score": [{"type": "uncertain", "code": "evaluation-uncertain"}]},
        status="attention",
        path=["route", "score"],
    )
    assert result["effects"] == [{"step": "score", "state": "unknown"}]
    assert result["frozenCommands"] == 1


def test_call_a_changed_command_between_attempts_is_scenario_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = advance
    seen: list[int] = []

    def tampering(*args: Any) -> Any:
        result = real(*args)
        commands = []
        for command in result.commands:
            changed = command
            if isinstance(command, Dispatch):
                seen.append(1)
                if len(seen) == 2:
                    changed = replace(command, command=command.command + " ")
            commands.append(changed)
        return type(result)(result.state, tuple(commands), result.refused, result.answer)

    monkeypatch.setattr(runner_module, "advance", tampering)
    report = run(case("notify", replies={"notify": [RETRYABLE, success(RECEIPT)]}))
    assert codes(report) == [("coordinator.scenario.command", "/cases/0")]


def test_scenario_command_key_is_the_digest_of_case_step_and_definition() -> None:
    digest = definition("lab").definition_digest
    keys = ScenarioKeys("c", digest)
    expected = hashlib.sha256(f"c\u0000notify\u0000{digest}".encode()).hexdigest()
    assert keys.command_key("notify") == "scenario-" + expected


# -- wait-for (04 §4.6) ----------------------------------------------------------------------


def test_wait_for_reads_every_interval_until_complete() -> None:
    result = _result(
        "review",
        replies=REVIEW_REPLY,
        observations={"wait": [{"type": "pending"}, {"type": "complete", "value": REVIEW_RESULT}]},
        path=[*REVIEW, "reviewed"],
    )
    assert result["passed"] and result["elapsedSeconds"] == 1800
    assert result["output"] == REVIEW_RESULT and result["observations"] == {"wait": 2}


def test_wait_for_retryable_read_comes_back_after_the_floor() -> None:
    result = _result(
        "review",
        replies=REVIEW_REPLY,
        observationFloorSeconds=60,
        observations={
            "wait": [
                {"type": "retryable", "code": "transport-unavailable"},
                {"type": "complete", "value": REVIEW_RESULT},
            ]
        },
        path=[*REVIEW, "reviewed"],
    )
    assert result["elapsedSeconds"] == 960


def test_wait_for_refused_read_fails_with_its_code() -> None:
    result = _result(
        "review",
        replies=REVIEW_REPLY,
        observations={"wait": [{"type": "refused", "code": "completion-expired"}]},
        status="failed",
        path=REVIEW,
        expect={"failureCode": "completion-expired", "workflowElapsedSeconds": 900},
    )
    assert result["passed"]


def test_wait_for_timeout_takes_on_timeout_with_no_read_at_the_timeout() -> None:
    result = _result("review", replies=REVIEW_REPLY, path=[*REVIEW, "late"])
    assert result["passed"] and result["elapsedSeconds"] == 3600
    assert result["observations"] == {"wait": 3}


def test_wait_for_unused_observations_are_scenario_reply() -> None:
    report = run(
        case(
            "review",
            replies=REVIEW_REPLY,
            observations={
                "wait": [{"type": "complete", "value": REVIEW_RESULT}, {"type": "pending"}]
            },
        )
    )
    assert codes(report) == [("coordinator.scenario.reply", "/cases/0/observations/wait/1")]


def test_wait_for_cancel_takes_on_cancel_and_the_finish_ends_cancelled() -> None:
    result = _result(
        "review",
        replies={**REVIEW_REPLY, "undo": [success(WITHDRAWAL)]},
        cancel={"afterSeconds": 1800},
        status="cancelled",
        path=[*REVIEW, "undo", "undone"],
        expect={"outcome": {"type": "named", "value": "done"}, "workflowElapsedSeconds": 1800},
    )
    assert result["passed"] and result["observations"] == {"wait": 1}
    assert result["effects"] == [
        {"step": "ask", "state": "accepted"},
        {"step": "undo", "state": "accepted"},
    ]


# -- choose and finish (04 §4.7, §4.8) -------------------------------------------------------


def test_choose_a_result_that_is_no_case_label_fails_choice_invalid() -> None:
    result = _result("nowhere", status="failed", path=["route"])
    assert result["failureCode"] == "choice-invalid"
    assert result["mappingFailure"] == {"step": "route", "code": "coordinator.mapping.branch"}


def test_finish_output_failing_its_schema_fails_outcome_invalid_and_notes_it() -> None:
    report = run(case("strict", status="finished", path=["route", "strict-end"]))
    result = only(report)
    assert (result.status, result.failure_code) == ("failed", "outcome-invalid")
    assert result.mapping_failure == ("strict-end", "coordinator.mapping.outcome")
    (diagnostic,) = report.diagnostics
    assert diagnostic.code == "coordinator.scenario.expectation"
    assert diagnostic.related and "coordinator.mapping.outcome" in diagnostic.related[0].message


# -- expectation (04 §4.10) ------------------------------------------------------------------


def test_expectation_mismatch_names_the_members_that_differ() -> None:
    report = run(case("read", replies={"read": [success()]}, status="failed", path=["route"]))
    (diagnostic,) = report.diagnostics
    assert (diagnostic.code, diagnostic.path) == ("coordinator.scenario.expectation", "/cases/0")
    assert diagnostic.effective_message == "status and path differ from the expectation."
    three = run(
        case(
            "read",
            replies={"read": [success()]},
            status="failed",
            path=READ,
            expect={
                "output": record({"ok": False}),
                "effects": [{"step": "read", "state": "accepted"}],
            },
        )
    )
    assert three.diagnostics[0].effective_message == (
        "status, output and effects differ from the expectation."
    )


def test_expectation_members_left_out_are_not_compared() -> None:
    result = _result("read", replies={"read": [success(record({"x": 1}))]}, path=READ)
    assert result["passed"] and result["output"] == record({"x": 1})


def test_expectation_output_compares_canonical_json() -> None:
    result = _result(
        "read",
        replies={"read": [success(record({"b": 2.0, "a": [1, 1e2]}))]},
        path=READ,
        expect={"output": record({"a": [1.0, 100], "b": 2})},
    )
    assert result["passed"]


def test_no_scenario_value_reaches_a_diagnostic() -> None:
    canary = "CANARY-7f3a"
    report = run(
        case(
            "read",
            case_id="leaky",
            replies={"read": [success(record({"secret": canary}))]},
            status="finished",
            path=READ,
            expect={"output": record({"secret": canary + "-other"})},
        ),
        case(
            None,
            case_id="event",
            event={"trigger": "submitted", "data": {"fail": True, "x": canary}},
        ),
        case(
            "notify",
            case_id="extra",
            replies={"notify": [REFUSED, success({**RECEIPT, "status": canary})]},
        ),
    )
    assert len(report.diagnostics) == 3
    text = json.dumps([d.to_json() for d in report.diagnostics])
    assert canary not in text


def test_the_same_document_always_gives_the_same_report() -> None:
    cases = [
        case("review", case_id="a", replies=REVIEW_REPLY, path=[*REVIEW, "late"]),
        case("notify", case_id="b", replies={"notify": [UNCERTAIN]}, status="attention"),
    ]
    assert run(*cases).to_json() == run(*cases).to_json()


def test_a_choose_failure_names_the_returned_label_and_the_declared_ones() -> None:
    """Issue 26: `coordinator.mapping.branch` says which label came back (an identifier) and
    which labels the step declares, in the failing case's note."""
    report = run(case("nowhere", status="finished", path=["route"]))
    (diagnostic,) = report.diagnostics
    assert diagnostic.code == "coordinator.scenario.expectation"
    stopped, why = diagnostic.related
    assert stopped.message == "Step route stopped with coordinator.mapping.branch."
    assert (why.file, why.path) == ("workflow.yaml", "/steps/route/cases")
    assert why.message == (
        "The choose function returned nowhere, which is not one of the case labels read,"
        " notify, decide, review, timer, score, shapeless, strict, echo."
    )
    unnamed = run(case("not a label!", status="finished", path=["route"]))
    assert (
        unnamed.diagnostics[0]
        .related[1]
        .message.startswith("The choose function returned no case label; the labels are read,")
    )
