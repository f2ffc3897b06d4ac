"""The reviewed-notice example of 04 §6 passes, case by case, with the report of 04 §5."""

from __future__ import annotations

import json

from scenario_support import DATA, definition

from coordinator_core.authoring.decode import AuthoredFile, read_authored_file
from coordinator_core.scenarios import ScenarioReport, check_scenario_document, run_scenarios


def _example() -> tuple[AuthoredFile, ScenarioReport]:
    authored = read_authored_file(
        (DATA / "reviewed-notice.scenarios.yaml").read_bytes(),
        file="scenarios.yaml",
        expected_kind="CoordinatorScenarios",
    )
    assert authored.diagnostics == []
    return authored, run_scenarios(authored, definition("reviewed-notice"))


def test_reviewed_notice_example_every_case_passes() -> None:
    authored, report = _example()
    assert check_scenario_document(authored, definition("reviewed-notice")) == []
    assert [(c.id, c.passed) for c in report.cases] == [
        ("approved", True),
        ("timed-out-but-decided", True),
        ("cancelled-while-waiting", True),
        ("uncertain-notice-reconciled", True),
        ("uncertain-review-request-held", True),
    ]
    assert report.diagnostics == ()


def test_reviewed_notice_example_approved_case_report_matches_section_5() -> None:
    _, report = _example()
    approved = report.to_json()["scenarios"][0]
    routes = approved.pop("routes")
    assert approved == {
        "id": "approved",
        "passed": True,
        "status": "finished",
        "path": [
            "read-application",
            "request-review",
            "await-review",
            "decide",
            "send-notice",
            "notice-sent",
        ],
        "outcome": {"type": "named", "value": "notice-sent"},
        "output": {"messageId": "45a8d043-f758-49fb-9bcc-69349586dbd1"},
        "failureCode": None,
        "effects": [
            {"step": "request-review", "state": "accepted"},
            {"step": "send-notice", "state": "accepted"},
        ],
        "elapsedSeconds": 1800,
        "callAttempts": {"read-application": 1, "request-review": 1, "send-notice": 1},
        "observations": {"await-review": 2},
        "frozenCommands": 2,
        "mappingFailure": None,
    }
    assert routes == [
        "/steps/read-application/next",
        "/steps/request-review/next",
        "/steps/await-review/next",
        "/steps/decide/cases/approved",
        "/steps/send-notice/next",
    ]


def test_reviewed_notice_example_other_cases_report_their_runs() -> None:
    _, report = _example()
    by_id = {c["id"]: c for c in report.to_json()["scenarios"]}
    timed_out = by_id["timed-out-but-decided"]
    assert timed_out["elapsedSeconds"] == 604800
    assert timed_out["observations"] == {"await-review": 671}
    cancelled = by_id["cancelled-while-waiting"]
    assert (cancelled["status"], cancelled["elapsedSeconds"]) == ("cancelled", 3600)
    assert cancelled["observations"] == {"await-review": 3}  # the cancel comes first at 3600 s
    reconciled = by_id["uncertain-notice-reconciled"]
    assert reconciled["callAttempts"]["send-notice"] == 2
    held = by_id["uncertain-review-request-held"]
    assert (held["status"], held["failureCode"]) == ("attention", "transport-uncertain")
    assert held["effects"] == [{"step": "request-review", "state": "unknown"}]
    json.dumps(report.to_json())


def test_reviewed_notice_example_route_coverage_names_the_untaken_routes() -> None:
    _, report = _example()
    coverage = report.to_json()["coverage"]
    assert coverage["uncovered"] == [
        "/steps/decide/cases/rejected",
        "/steps/decide/cases/other",
        "/steps/late-route/cases/undecided",
    ]
    assert len(coverage["routes"]) == 14 and coverage["percent"] == 78.6
    assert set(coverage["covered"]) == set(report.covered)
