"""The `after-freeze` failpoint fires (issue 23: no workflow of the campaigns reached it).

`delayed-follow-up` freezes its message inside the claim, so its freeze fence is never a
transaction of its own. A prepared BReg action is: the worker asks BReg to prepare the
command, then commits the frozen preparation and command in the freeze fence, then marks it
`dispatched` in the pre-send fence, then sends. `tests/chaos/projects/recorded-action` is one
such call. `coordinator serve` with `COORDINATOR_FAILPOINTS=after-freeze=1` SIGKILLs itself right
after that freeze committed: nothing was sent (no dispatch mark, no proof of commit, no action
application at BReg). A plain restart, after the lease lapsed, sends the frozen command once
and the run finishes; the product holds one application of the action, and a plain start
never takes the crash for a restore."""

from __future__ import annotations

import shutil
import signal
import uuid
from pathlib import Path
from typing import Any

import httpx
from e2e_support import Project

from coordinator_sandbox.testing import Processes, wait_for

PROJECT = Path(__file__).parent / "projects" / "recorded-action"
ACTION = "record-review-decision"
ACTION_DEFINITION: dict[str, Any] = {
    "kind": "immediate",
    "registryRevision": "2026.1",
    "inputSchema": {
        "type": "object",
        "required": ["applicationId", "decision", "reviewResultId", "decidedAt"],
        "properties": {
            "applicationId": {"type": "string"},
            "decision": {"enum": ["approved", "rejected"]},
            "reviewResultId": {"type": "string"},
            "decidedAt": {"type": "string"},
        },
        "additionalProperties": False,
    },
    "conditionInputs": ["applicationId"],
    "targets": {
        "decision": {
            "collection": "applications",
            "recordIdMember": "applicationId",
            "entity": "application",
        }
    },
}
TIMEOUT = 90.0  # the lease (15 s) lapses before the restarted service takes the run over
DETECTIONS = ("coordinator.deployment.store-", "coordinator.audit.journal-")


def _applications(sandbox_url: str) -> list[dict[str, Any]]:
    answer = httpx.get(sandbox_url + "/sandbox/applications", timeout=10)
    answer.raise_for_status()
    found: list[dict[str, Any]] = answer.json()["applications"]
    return found


def test_a_kill_right_after_the_freeze_sends_nothing_and_the_restart_sends_once(
    tmp_path: Path, processes: Processes
) -> None:
    project = Project.create(tmp_path, processes, example="recorded-decision")
    for name in ("workflow.yaml", "functions.rhai"):
        shutil.copyfile(PROJECT / name, project.root / name)
    (project.root / "scenarios.yaml").unlink(missing_ok=True)
    project.workflow = "recorded-action"
    runtime = project.runtime.read_text()  # `write_runtime` adds its own deployment block
    project.runtime.write_text(runtime[: runtime.index("deployment:\n")])
    sandbox = project.start_sandbox()
    project.write_runtime(sandbox)
    assert project.deploy_ctl("migrate")["status"] == "migrated"
    assert project.deploy_ctl("apply", "--reference", "FREEZE")["status"] == "applied"
    breg = sandbox.url("breg")
    httpx.put(
        f"{breg}/sandbox/actions/{ACTION}", json=ACTION_DEFINITION, timeout=10
    ).raise_for_status()
    application = str(uuid.uuid4())
    sandbox.seed_application(application)

    project.env["COORDINATOR_FAILPOINTS"] = "after-freeze=1"
    armed = project.start_service("serve-armed")
    del project.env["COORDINATOR_FAILPOINTS"]
    project.wait_healthy(armed, "serve-armed")
    token = project.token_file().read_text().strip()
    answer = httpx.post(
        project.origin + "/v1/runs",
        headers={"Authorization": "Bearer " + token, "Idempotency-Key": "freeze-1"},
        json={
            "workflow": project.workflow,
            "revision": project.revision,
            "input": {"applicationId": application, "decision": "approved"},
        },
        timeout=30,
    )
    assert answer.status_code == 201, answer.text
    run_id = answer.json()["runId"]
    assert armed.wait(TIMEOUT) == -signal.SIGKILL  # the failpoint fired: killed at the freeze
    assert _applications(breg) == []  # nothing left before the pre-send fence

    service = project.start_service()
    project.wait_healthy(service)

    def status() -> str:
        found = httpx.get(
            f"{project.origin}/v1/runs/{run_id}",
            headers={"Authorization": "Bearer " + token},
            timeout=10,
        )
        return str(found.json()["status"])

    wait_for(lambda: status() == "finished", TIMEOUT, "the run to finish after the restart", 0.5)
    applied = _applications(breg)
    assert len(applied) == 1, applied
    log = processes.log("serve") + processes.log("serve-armed")
    assert not any(code in log for code in DETECTIONS)
    assert "Traceback" not in log
    assert processes.stop(service) == 0
    print("\nafter-freeze: killed at the freeze fence, 0 sends before the restart, 1 after")
