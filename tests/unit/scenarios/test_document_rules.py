"""Document rules C1–C12 of scenarios.yaml (04 §3): each finding is reported at its member and
keeps its case from running; the other cases still run."""

from __future__ import annotations

from typing import Any

import pytest
from scenario_support import case, codes, definition, document, only, run, success

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
    assert _findings(case(replies={step: [success(), reply]})) == [
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
