"""End to end: `examples/holiday-routing` under `coordinator serve` against the sandbox's external
JSON endpoint and evaluation provider, each a separate process (08 §7, §8; 07 §9).

One run reads the calendar, asks the evaluator and finishes on its choice; a second run whose
evaluation answer is lost after sending goes to `attention` with `evaluation-uncertain`, and
neither `retry-same`, `reconcile` nor a SIGKILL and restart of the service sends it again.
"""

from __future__ import annotations

import signal
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2e_support import Project

from coordinator_sandbox.testing import Processes, wait_for

EXTERNAL_GET = "external-http.get/v1"
EVALUATE = "evaluation.evaluate/v1"
RUN_TIMEOUT = 30.0


@pytest.fixture
def holidays(tmp_path: Path, processes: Processes) -> Project:
    return Project.create(tmp_path, processes, example="holiday-routing")


def _start(project: Project, token: Path) -> str:
    answer = httpx.post(
        project.origin + "/v1/runs",
        headers={
            "Authorization": "Bearer " + token.read_text().strip(),
            "Idempotency-Key": uuid.uuid4().hex,
        },
        json={
            "workflow": project.workflow,
            "revision": project.revision,
            "input": {"applicationId": str(uuid.uuid4()), "year": "2026"},
        },
        timeout=30,
    )
    assert answer.status_code == 201, answer.text
    run_id: str = answer.json()["runId"]
    return run_id


def _settled(project: Project, token: Path, run_id: str, wanted: str) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        run = project.api_status(token, run_id)
        return run if run["status"] == wanted else None

    found: dict[str, Any] = wait_for(reached, RUN_TIMEOUT, f"run to reach {wanted}", 0.2)
    return found


def test_holiday_routing_runs_live_and_an_uncertain_evaluation_is_never_resent(
    holidays: Project,
) -> None:
    project = holidays
    sandbox = project.start_sandbox(("identity", "external", "evaluation"))
    project.write_runtime(sandbox)
    assert project.deploy_ctl("migrate")["status"] == "migrated"
    assert project.deploy_ctl("apply", "--reference", "E2E-HOLIDAYS")["status"] == "applied"
    assert project.deploy_ctl("deployment-status")["status"] == "checked"
    serve = project.start_service()
    project.wait_healthy(serve)
    token = project.token_file()

    httpx.put(
        sandbox.url("evaluation") + "/sandbox/answers/route",
        json={
            "type": "choice",
            "choice": "standard",
            "probabilities": {"standard": 0.9, "expedite": 0.1},
        },
        timeout=5,
    ).raise_for_status()
    finished = _settled(project, token, _start(project, token), "finished")
    assert finished["outcome"] == "standard"
    assert finished["output"] == {"route": "standard", "returnedModel": "sandbox-router-1"}
    [read] = sandbox.received(EXTERNAL_GET)
    assert (read["path"], read["query"]) == ("/v1/holidays", "year=2026")
    [evaluation] = sandbox.received(EVALUATE)
    assert evaluation["body"]["model"] == "sandbox-router-1"

    # The provider evaluates, then the answer is lost: the evaluation is held.
    sandbox.fault(EVALUATE, kind="commit-then-drop")
    run_id = _start(project, token)
    held = _settled(project, token, run_id, "attention")
    assert held["failureCode"] == "evaluation-uncertain"
    inspected = project.remote(token, "inspect", "--run", run_id)
    recovery = inspected["recovery"]
    assert (recovery["retryAllowed"], recovery["retryBlockedBy"]) == (False, "evaluation-uncertain")
    retried = project.remote(
        token, "retry-same", "--run", run_id, "--reason", "case-9", check=False
    )
    assert retried["exitCode"] != 0
    assert retried["diagnostics"][0]["code"] == "coordinator.command.retry-refused"
    reconciled = project.remote(
        token, "reconcile", "--run", run_id, "--reason", "case-9", check=False
    )
    assert reconciled["exitCode"] != 0

    serve.send_signal(signal.SIGKILL)
    serve.wait(timeout=10)
    restarted = project.start_service("serve-2")
    project.wait_healthy(restarted, "serve-2")
    assert project.api_status(token, run_id)["status"] == "attention"
    assert len(sandbox.received(EVALUATE)) == 2  # one per run: the held one went out once
    restarted.send_signal(signal.SIGTERM)
    assert restarted.wait(timeout=15) == 0
