"""Acceptance: every example's `scenarios.yaml` passes and covers every route of its graph.

For each example project, `coordinatorctl test --project DIR --format json` (file 04 §5) must
exit 0 with status `passed`, every case must pass, and the runner's `coverage` member must show
no uncovered route. `coordinatorctl check --project DIR --format json` runs the same cases
(file 02 §4.1 step 9) and must report `scenarios: {passed: n, failed: 0}`.

The per-example requirements of the scenario task are checked from the report too: the route
list of `coverage` equals the routes `explain` shows, at least one case ends `failed` with a
failure code and one ends in `attention`, and reviewed-notice keeps the cases of contract 04 §6
plus the required additions.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
EXAMPLE_NAMES = (
    "reviewed-notice",
    "delayed-follow-up",
    "appointment-booking",
    "recorded-decision",
    "holiday-routing",
)
REPORT_API_VERSION = "id.registrystack.org/formats/coordinator/ctl-report/v1alpha1"
SCENARIOS_API_VERSION = "id.registrystack.org/formats/coordinator/scenarios/v1alpha1"
SCENARIOS_MODELINE = (
    "# yaml-language-server: $schema="
    "https://id.registrystack.org/schemas/coordinator/scenarios/scenarios.v1alpha1.schema.json"
)
RUN_FIELDS = (
    "status",
    "path",
    "outcome",
    "output",
    "failureCode",
    "effects",
    "elapsedSeconds",
    "callAttempts",
    "observations",
    "frozenCommands",
    "mappingFailure",
)
"""The run fields of a case that ran (04 §5)."""
ROUTE_MEMBER = {"next": "next", "timeout": "onTimeout", "cancel": "onCancel"}

# reviewed-notice: the five cases of contract 04 §6 (normative, kept as written) and the cases the
# scenario task adds, by id, with the status and outcome each must end with.
REVIEWED_NOTICE_CASES = {
    # 04 §6
    "approved": ("finished", "notice-sent"),
    "timed-out-but-decided": ("finished", "decided-after-timeout"),
    "cancelled-while-waiting": ("cancelled", "review-withdrawn"),
    "uncertain-notice-reconciled": ("finished", "notice-sent"),
    "uncertain-review-request-held": ("attention", None),
    # added
    "rejected-from-event": ("finished", "review-rejected"),
    "timed-out-undecided": ("finished", "review-timed-out"),
    "uncertain-review-request-retried": ("finished", "notice-sent"),
}


@dataclass(frozen=True)
class Run:
    exit: int
    report: dict[str, Any]
    stderr: str


@cache
def _coordinatorctl(*arguments: str) -> Run:
    proc = subprocess.run(
        [sys.executable, "-m", "coordinatorctl", *arguments, "--format", "json"],
        cwd=REPO,
        capture_output=True,
        timeout=600,
        check=False,
    )
    stdout = proc.stdout.decode("utf-8")
    try:
        report = json.loads(stdout)
    except json.JSONDecodeError:
        pytest.fail(f"`coordinatorctl {' '.join(arguments)}` did not print one JSON report")
    assert isinstance(report, dict)
    assert report.get("apiVersion") == REPORT_API_VERSION
    return Run(proc.returncode, report, proc.stderr.decode("utf-8"))


def _codes(report: dict[str, Any]) -> list[str]:
    return [d.get("code") for d in report.get("diagnostics", [])]


def _test_run(directory: Path) -> Run:
    run = _coordinatorctl("test", "--project", str(directory))
    assert "coordinator.cli.usage" not in _codes(run.report), run.report.get("diagnostics")
    return run


def _authored_cases(directory: Path) -> list[dict[str, Any]]:
    document = yaml.safe_load((directory / "scenarios.yaml").read_text("utf-8"))
    assert isinstance(document, dict)
    cases = document.get("cases")
    assert isinstance(cases, list) and cases
    return cases


def _explained_routes(directory: Path) -> list[str]:
    """Every route of the graph as the JSON pointer of its member in workflow.yaml."""
    run = _coordinatorctl("explain", "--project", str(directory))
    assert run.exit == 0, run.report.get("diagnostics")
    routes: list[str] = []
    for step in run.report["steps"]:
        for route in step.get("routes", []):
            kind = route["kind"]
            if kind == "case":
                routes.append(f"/steps/{step['id']}/cases/{route['label']}")
            elif kind == "refusal":
                routes.append(f"/steps/{step['id']}/onDeclaredRefusal/{route['code']}")
            else:
                routes.append(f"/steps/{step['id']}/{ROUTE_MEMBER[kind]}")
    return routes


@pytest.fixture(params=EXAMPLE_NAMES)
def example(request: pytest.FixtureRequest) -> Path:
    name: str = request.param
    directory = EXAMPLES / name
    assert (directory / "workflow.yaml").is_file(), f"example {name} is missing"
    return directory


def test_scenarios_document_shape(example: Path) -> None:
    """The file exists, starts with the scenarios modeline (01 §1) and is a scenarios document."""
    path = example / "scenarios.yaml"
    assert path.is_file(), f"{example.name} has no scenarios.yaml"
    text = path.read_text("utf-8")
    assert text.splitlines()[0] == SCENARIOS_MODELINE
    document = yaml.safe_load(text)
    assert document["apiVersion"] == SCENARIOS_API_VERSION
    assert document["kind"] == "CoordinatorScenarios"
    ids = [case["id"] for case in document["cases"]]
    assert len(ids) == len(set(ids))
    for case in document["cases"]:
        assert "expect" in case and "status" in case["expect"] and "path" in case["expect"]


def test_every_case_passes(example: Path) -> None:
    run = _test_run(example)
    report = run.report
    assert run.exit == 0, (report.get("diagnostics"), run.stderr)
    assert report["command"] == "test"
    assert report["ok"] is True
    assert report["status"] == "passed"
    assert report["diagnostics"] == []
    cases = report["scenarios"]
    assert [case["id"] for case in cases] == [case["id"] for case in _authored_cases(example)]
    failing = [case["id"] for case in cases if case.get("passed") is not True]
    assert failing == [], f"cases not passed in {example.name}: {failing}"
    for case in cases:
        # a case that ran reports every run field of 04 §5
        for member in RUN_FIELDS:
            assert member in case, f"{example.name}/{case['id']} lacks {member}"


def test_every_route_is_covered(example: Path) -> None:
    report = _test_run(example).report
    coverage = report["coverage"]
    assert set(coverage) >= {"routes", "covered", "uncovered", "percent"}
    assert coverage["routes"] == _explained_routes(example)
    assert coverage["uncovered"] == [], f"uncovered routes in {example.name}"
    assert sorted(coverage["covered"]) == sorted(coverage["routes"])
    assert coverage["percent"] == 100


def test_failed_and_attention_cases_exist(example: Path) -> None:
    cases = _test_run(example).report["scenarios"]
    failed = [c for c in cases if c["status"] == "failed" and c["failureCode"]]
    attention = [c for c in cases if c["status"] == "attention" and c["failureCode"]]
    assert failed, f"{example.name} has no case that ends failed with a failure code"
    assert attention, f"{example.name} has no case that ends in attention"


def test_reviewed_notice_required_cases() -> None:
    directory = EXAMPLES / "reviewed-notice"
    cases = {case["id"]: case for case in _test_run(directory).report["scenarios"]}
    for case_id, (status, outcome) in REVIEWED_NOTICE_CASES.items():
        assert case_id in cases, f"reviewed-notice lacks the case {case_id}"
        case = cases[case_id]
        assert case["status"] == status, case_id
        expected = {"type": "named", "value": outcome} if outcome else {"type": "none"}
        assert case["outcome"] == expected, case_id
    # the timeout route with no decision, and the recoveries, end as the task describes
    assert cases["timed-out-undecided"]["output"] is None
    assert cases["uncertain-review-request-retried"]["callAttempts"]["request-review"] == 2
    assert cases["uncertain-notice-reconciled"]["callAttempts"]["send-notice"] == 2
    assert {"step": "send-notice", "state": "accepted"} in cases["uncertain-notice-reconciled"][
        "effects"
    ]


def test_check_runs_the_scenarios(example: Path) -> None:
    run = _coordinatorctl("check", "--project", str(example))
    assert run.exit == 0, (run.report.get("diagnostics"), run.stderr)
    assert run.report["status"] == "valid"
    count = len(_authored_cases(example))
    assert run.report["scenarios"] == {"passed": count, "failed": 0}
