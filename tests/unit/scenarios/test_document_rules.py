"""Document rules C1–C12 of scenarios.yaml (04 §3): each finding is reported at its member and
keeps its case from running; the other cases still run."""

from __future__ import annotations

import json
from typing import Any

import pytest
from scenario_support import (
    ACCEPTED,
    ACTION,
    EVALUATION,
    RECEIPT,
    RECORD,
    REVIEW_RESULT,
    WITHDRAWAL,
    case,
    codes,
    definition,
    document,
    only,
    run,
    success,
)

from coordinator_core.scenarios import check_scenario_document


def _findings(*cases: dict[str, Any]) -> list[tuple[str, str]]:
    return [(d.code, d.path) for d in check_scenario_document(document(*cases), definition("lab"))]


def _not_run(*cases: dict[str, Any]) -> None:
    report = run(*cases)
    result = report.cases[0]
    assert not result.ran and not result.passed
    assert result.to_json() == {"id": result.id, "passed": False}
    assert result.diagnostics, "a blocked case carries its findings"


def test_c1_admitted_at_and_event_time_must_be_date_times_with_offset() -> None:
    bad = case(admittedAt="2026-03-02T09:00:00")
    assert _findings(bad) == [("coordinator.scenarios.invalid-timestamp", "/cases/0/admittedAt")]
    event = case(None, event={"trigger": "submitted", "time": "yesterday", "data": {}})
    assert _findings(event) == [("coordinator.scenarios.invalid-timestamp", "/cases/0/event/time")]
    _not_run(bad)


def test_c2_exactly_one_of_input_and_event() -> None:
    both = case(event={"trigger": "submitted", "data": {}})
    neither = case(None)
    assert _findings(both) == [("coordinator.scenarios.invalid-start", "/cases/0")]
    assert _findings(neither) == [("coordinator.scenarios.invalid-start", "/cases/0")]
    _not_run(neither)


def test_c3_event_trigger_must_be_declared() -> None:
    unknown = case(None, event={"trigger": "nope", "data": {}})
    assert _findings(unknown) == [
        ("coordinator.scenarios.unknown-reference", "/cases/0/event/trigger")
    ]


def test_c4_every_named_step_must_be_declared() -> None:
    named = case(
        replies={"ghost": [success()]},
        observations={"phantom": []},
        recovery={"spirit": "retry-same"},
        path=["route", "nowhere"],
        expect={"effects": [{"step": "elsewhere", "state": "accepted"}]},
    )
    assert sorted(_findings(named)) == [
        ("coordinator.scenarios.unknown-reference", "/cases/0/expect/effects/0/step"),
        ("coordinator.scenarios.unknown-reference", "/cases/0/expect/path/1"),
        ("coordinator.scenarios.unknown-reference", "/cases/0/observations/phantom"),
        ("coordinator.scenarios.unknown-reference", "/cases/0/recovery/spirit"),
        ("coordinator.scenarios.unknown-reference", "/cases/0/replies/ghost"),
    ]


def test_c5_expected_outcome_must_be_declared() -> None:
    named = case(expect={"outcome": {"type": "named", "value": "victory"}})
    assert _findings(named) == [
        ("coordinator.scenarios.unknown-reference", "/cases/0/expect/outcome/value")
    ]
    assert _findings(case(expect={"outcome": {"type": "none"}})) == []


def test_c6_list_and_map_sizes_stay_within_bounds() -> None:
    too_many = case(
        replies={"read": [success()] * 9}, observations={"wait": [{"type": "pending"}] * 65}
    )
    assert sorted(_findings(too_many)) == [
        ("coordinator.scenarios.invalid-length", "/cases/0/observations/wait"),
        ("coordinator.scenarios.invalid-length", "/cases/0/replies/read"),
    ]
    empty = case(replies={"read": []})
    assert _findings(empty) == [("coordinator.scenarios.invalid-length", "/cases/0/replies/read")]
    long_path = case(path=["route"] * 65)
    assert ("coordinator.scenarios.invalid-length", "/cases/0/expect/path") in _findings(long_path)
    cases = [case(case_id=f"c{i}") for i in range(65)]
    report = run(*cases)
    assert ("coordinator.scenarios.invalid-length", "/cases") in codes(report)
    assert not any(result.ran for result in report.cases)


def test_c7_reply_and_observation_codes_must_be_adapter_or_fallback_codes() -> None:
    bad = case(
        replies={"read": [{"type": "refused", "code": "mapping-invalid"}]},
        observations={"wait": [{"type": "retryable", "code": "made-up"}]},
    )
    assert sorted(_findings(bad)) == [
        ("coordinator.scenarios.unknown-code", "/cases/0/observations/wait/0/code"),
        ("coordinator.scenarios.unknown-code", "/cases/0/replies/read/0/code"),
    ]
    assert _findings(case(replies={"read": [{"type": "refused", "code": "remote-refused"}]})) == []


def test_c8_replies_only_for_call_steps() -> None:
    assert _findings(case(replies={"wait": [success()]})) == [
        ("coordinator.scenario.reply-step", "/cases/0/replies/wait")
    ]


def test_c9_observations_only_for_wait_for_steps() -> None:
    assert _findings(case(observations={"read": []})) == [
        ("coordinator.scenario.observation-step", "/cases/0/observations/read")
    ]


@pytest.mark.parametrize(
    ("step", "action"),
    [("route", "retry-same"), ("read", "reconcile"), ("ask", "reconcile"), ("score", "retry-same")],
)
def test_c10_recovery_only_where_the_operation_allows_it(step: str, action: str) -> None:
    assert _findings(case(recovery={step: action})) == [
        ("coordinator.scenario.recovery", f"/cases/0/recovery/{step}")
    ]


def test_c10_allowed_recoveries_pass() -> None:
    allowed = case(recovery={"notify": "reconcile", "ask": "retry-same", "score": "reconcile"})
    assert _findings(allowed) == [("coordinator.scenario.recovery", "/cases/0/recovery/score")]


@pytest.mark.parametrize(
    ("step", "reply"),
    [
        ("notify", {"type": "declared-refusal", "refusalCode": "withdrawn"}),
        ("read", {"type": "uncertain", "code": "transport-uncertain"}),
        ("score", {"type": "receipt-expired"}),
        ("read", {"type": "receipt-expired"}),
    ],
)
def test_c11_replies_must_fit_the_operation(step: str, reply: dict[str, Any]) -> None:
    answer = {"notify": RECEIPT, "score": EVALUATION, "read": RECORD}[step]
    assert _findings(case(replies={step: [success(answer), reply]})) == [
        ("coordinator.scenario.reply", f"/cases/0/replies/{step}/1")
    ]


def test_c11_fitting_replies_pass() -> None:
    fitting = case(
        replies={
            "decide": [{"type": "declared-refusal", "refusalCode": "withdrawn"}],
            "score": [{"type": "uncertain", "code": "evaluation-uncertain"}],
            "notify": [{"type": "receipt-expired"}],
        }
    )
    assert _findings(fitting) == []


def test_c12_foreign_values_obey_the_json_value_bounds() -> None:
    deep: Any = "leaf"
    for _ in range(40):
        deep = [deep]
    bad = case(
        input={"route": "read", "deep": deep},
        replies={"read": [success(deep)]},
        observations={"wait": [{"type": "complete", "value": deep}]},
        expect={"output": deep},
    )
    assert sorted(_findings(bad)) == [
        ("coordinator.scenarios.value-limit", "/cases/0/expect/output"),
        ("coordinator.scenarios.value-limit", "/cases/0/input"),
        ("coordinator.scenarios.value-limit", "/cases/0/observations/wait/0/value"),
        ("coordinator.scenarios.value-limit", "/cases/0/replies/read/0/value"),
    ]
    event = case(None, event={"trigger": "submitted", "data": deep})
    assert _findings(event) == [("coordinator.scenarios.value-limit", "/cases/0/event/data")]


def test_document_rules_block_only_their_own_case() -> None:
    good = case(
        "read",
        case_id="good",
        replies={"read": [success()]},
        path=["route", "read", "read-done"],
    )
    bad = case(case_id="bad", admittedAt="noon")
    report = run(bad, good)
    assert [(r.id, r.ran, r.passed) for r in report.cases] == [
        ("bad", False, False),
        ("good", True, True),
    ]
    assert codes(report) == [("coordinator.scenarios.invalid-timestamp", "/cases/0/admittedAt")]


def test_document_diagnostics_carry_file_line_and_column() -> None:
    report = run(case(admittedAt="noon"))
    diagnostic = report.diagnostics[0]
    assert diagnostic.file == "scenarios.yaml" and diagnostic.artifact == "CoordinatorScenarios"
    assert diagnostic.line is not None and diagnostic.line > 1 and diagnostic.column is not None
    assert "no live effect" in diagnostic.effective_hint


def test_a_case_with_a_reader_finding_does_not_run() -> None:
    report = run(case(observationFloorSeconds=5))
    assert not only(report).ran
    assert report.diagnostics == ()  # the reader's finding stays with the reader


def test_a_case_missing_a_required_member_does_not_run() -> None:
    report = run({"id": "partial", "admittedAt": "2026-03-02T09:00:00Z", "input": {}})
    assert [(r.id, r.passed, r.ran) for r in report.cases] == [("partial", False, False)]


def test_a_case_with_an_undecodable_reply_does_not_run_and_the_others_do() -> None:
    broken = case(case_id="broken", replies={"read": [{"type": "teleport"}]})
    fine = case(case_id="fine", replies={"read": [success()]}, path=["route", "read", "read-done"])
    report = run(broken, fine)
    assert [(r.id, r.passed, r.ran) for r in report.cases] == [
        ("broken", False, False),
        ("fine", True, True),
    ]


def test_an_undecodable_cases_list_lists_its_cases_as_not_passed() -> None:
    report = run(case(case_id="fine"), "not a case")  # type: ignore[arg-type]
    assert [(r.id, r.passed, r.ran) for r in report.cases] == [
        ("fine", False, False),
        (None, False, False),
    ]


# -- C13: a scripted reply is an output the product can give ---------------------------------


def test_c13_the_three_impossible_replies_are_refused_before_the_case_runs() -> None:
    """The replies of issue 26 that passed before: a Casework submission without `requestId`
    (the reference its wait polls by), a Messaging receipt without `status`, a review result
    with nothing but `status`. Live, each would be `invalid-response`."""
    loose = case(
        "review",
        replies={"ask": [success({"unexpected": 1})], "notify": [success({"id": RECEIPT["id"]})]},
        observations={"wait": [{"type": "complete", "value": {"status": "approved"}}]},
    )
    assert sorted(_findings(loose)) == [
        ("coordinator.scenarios.reply-shape", "/cases/0/observations/wait/0/value"),
        ("coordinator.scenarios.reply-shape", "/cases/0/replies/ask/0/value"),
        ("coordinator.scenarios.reply-shape", "/cases/0/replies/notify/0/value"),
    ]
    _not_run(loose)


def test_c13_the_message_names_the_operation_the_keyword_and_the_place_never_a_value() -> None:
    canary = "CANARY-c13"
    found = check_scenario_document(
        document(
            case(
                replies={
                    "notify": [success({"id": canary, "status": "accepted"})],
                    "ask": [success({**ACCEPTED, "requestId": None, "note": canary})],
                },
                observations={"wait": [{"type": "complete", "value": {"status": canary}}]},
            )
        ),
        definition("lab"),
    )
    messages = {d.path: d.effective_message for d in found}
    assert messages["/cases/0/replies/notify/0/value"] == (
        "The value is not an output of operation messaging.submit-message/v1: keyword"
        " `required` fails at the top of the value (member links is missing)."
    )
    assert messages["/cases/0/replies/ask/0/value"] == (
        "The value is not an output of operation casework.submit-review-request/v1: keyword"
        " `type` fails at /requestId."
    )
    assert messages["/cases/0/observations/wait/0/value"].startswith(
        "The value is not a completion output of operation casework.submit-review-request/v1:"
    )
    assert all(d.line is not None for d in found)
    assert canary not in json.dumps([d.to_json() for d in found])


def test_c13_whole_outputs_pass_and_other_reply_kinds_carry_no_value() -> None:
    whole = case(
        "review",
        replies={
            "ask": [success(ACCEPTED)],
            "undo": [success(WITHDRAWAL)],
            "notify": [{"type": "uncertain", "code": "transport-uncertain"}, success(RECEIPT)],
            "decide": [success(ACTION)],
            "score": [success(EVALUATION)],
        },
        observations={"wait": [{"type": "pending"}, {"type": "complete", "value": REVIEW_RESULT}]},
    )
    assert _findings(whole) == []


def test_c13_a_reconcile_answer_is_held_to_the_output_too() -> None:
    reconciled = case(
        "notify",
        replies={"notify": [{"type": "uncertain", "code": "transport-uncertain"}, success({})]},
        recovery={"notify": "reconcile"},
    )
    assert _findings(reconciled) == [
        ("coordinator.scenarios.reply-shape", "/cases/0/replies/notify/1/value")
    ]


def test_c13_a_value_over_the_json_bounds_is_only_c12() -> None:
    deep: Any = "leaf"
    for _ in range(40):
        deep = [deep]
    assert _findings(case(replies={"notify": [success(deep)]})) == [
        ("coordinator.scenarios.value-limit", "/cases/0/replies/notify/0/value")
    ]
