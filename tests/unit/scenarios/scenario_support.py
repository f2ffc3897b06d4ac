"""Projects and scenario documents for the scenario runner tests."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from coordinator_core.authoring.decode import AuthoredFile, read_authored_file
from coordinator_core.checking.checker import check_project
from coordinator_core.definition.snapshot import Snapshot
from coordinator_core.engine import Definition
from coordinator_core.scenarios import CaseResult, ScenarioReport, run_scenarios

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parents[3]
ADMITTED = "2026-03-02T09:00:00Z"
API_VERSION = "id.registrystack.org/formats/coordinator/scenarios/v1alpha1"


@cache
def snapshot(project: str) -> Snapshot:
    """The snapshot of a checked project: `lab` (test data) or an example's name."""
    directory = DATA / "lab" if project == "lab" else REPO / "examples" / project
    checked = check_project(directory)
    assert checked.definition is not None and checked.definition.snapshot is not None, [
        (d.code, d.path) for d in checked.diagnostics
    ]
    return checked.definition.snapshot


@cache
def definition(project: str) -> Definition:
    return Definition.from_snapshot(snapshot(project))


def document(*cases: dict[str, Any]) -> AuthoredFile:
    """A scenarios.yaml (written as JSON, which the strict reader accepts) with these cases."""
    text = json.dumps(
        {"apiVersion": API_VERSION, "kind": "CoordinatorScenarios", "cases": list(cases)},
        indent=2,
    )
    return read_authored_file(
        text.encode("utf-8"), file="scenarios.yaml", expected_kind="CoordinatorScenarios"
    )


def case(
    route: str | None = "read",
    *,
    status: str = "finished",
    path: list[str] | None = None,
    case_id: str = "c",
    **members: Any,
) -> dict[str, Any]:
    """A lab case that starts on `route` and expects `status` and `path`."""
    built: dict[str, Any] = {"id": case_id, "admittedAt": ADMITTED}
    if route is not None:
        built["input"] = {"route": route}
    expect = members.pop("expect", {})
    built.update(members)
    built["expect"] = {"status": status, "path": path if path is not None else [], **expect}
    return built


def run(*cases: dict[str, Any], project: str = "lab") -> ScenarioReport:
    return run_scenarios(document(*cases), definition(project))


def only(report: ScenarioReport) -> CaseResult:
    assert len(report.cases) == 1
    return report.cases[0]


def codes(report: ScenarioReport) -> list[tuple[str, str]]:
    return [(d.code, d.path) for d in report.diagnostics]


# Whole outputs of the lab's operations, as the products answer them (rule C13 holds scripted
# values to the output schemas of `coordinatorctl schema operation <id>`).
DIGEST = "sha256:" + "0" * 64
SUBJECT = {"source": "lab", "type": "application", "id": "a-1", "version": "1", "digest": DIGEST}
POLICY = {"id": "lab-policy", "version": "1", "digest": DIGEST}
ACCEPTED = {
    "requestId": "feee46df-d0fd-4064-8630-f1cc2d973a2e",
    "subject": SUBJECT,
    "policy": POLICY,
    "submissionDigest": DIGEST,
}
REVIEW_RESULT = {
    "resultId": "7f9032bd-8202-4636-ae7c-c1e1ef32e6ab",
    "requestId": "feee46df-d0fd-4064-8630-f1cc2d973a2e",
    "subject": SUBJECT,
    "policy": POLICY,
    "submissionDigest": DIGEST,
    "status": "approved",
    "completedAt": "2026-03-02T09:25:00Z",
    "availableUntil": "2026-06-02T09:25:00Z",
}
WITHDRAWAL = {"outcome": "cancelled", "result": {**REVIEW_RESULT, "status": "cancelled"}}
RECEIPT = {
    "id": "45a8d043-f758-49fb-9bcc-69349586dbd1",
    "status": "accepted",
    "links": {"self": "/v1/messages/45a8", "cancel": "/v1/messages/45a8/cancel"},
}
ACTION = {
    "action": "record-decision",
    "applicationId": "0d7f5c1e-6f7a-4a8e-9a49-1c2d3e4f5a6b",
    "results": {},
}
EVALUATION = {
    "protocol": "system-one",
    "requestedModel": "lab-model",
    "returnedModel": "lab-model",
    "answers": {},
    "usage": {"inputTokens": 0, "outputTokens": 0},
}


def record(domain: dict[str, Any] | None = None) -> dict[str, Any]:
    """A `breg.read-record/v1` output whose `domainData` is `domain`."""
    return {
        "data": {
            "recordIdentifier": "a-1",
            "revisionIdentifier": "r-1",
            "revisionDigest": DIGEST,
            "domainData": domain or {},
        }
    }


RECORD = record()


def success(value: Any = None) -> dict[str, Any]:
    """A success reply; by default the lab's record read."""
    return {"type": "success", "value": RECORD if value is None else value}
