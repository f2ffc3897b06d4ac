"""End to end: `coordinatorctl start --wait` follows a run of a real `coordinator serve` (SQLite,
sandbox products) to `finished`, with the service and token file taken from `COORDINATOR_URL`
and a relative `COORDINATOR_TOKEN_FILE`, and `status --watch -o jsonl` of the settled run is its
one final report line. Neither the token nor the input's values appear in any output.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from e2e_support import WORKFLOW, Project

from coordinator_sandbox.testing import PYTHON

REPORT_SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "spec" / "schemas" / "ctl-report.schema.json").read_text(
        encoding="utf-8"
    )
)


def test_start_wait_follows_a_served_run_to_finished(project: Project) -> None:
    import jsonschema

    sandbox = project.start_sandbox()
    project.write_runtime(sandbox)
    application = str(uuid.uuid4())
    sandbox.seed_application(application)
    assert project.deploy_ctl("migrate")["status"] == "migrated"
    assert project.deploy_ctl("apply")["status"] == "applied"
    service = project.start_service()
    project.wait_healthy(service)
    token = project.token_file().read_text().strip()

    send_after = datetime.now(UTC) + timedelta(seconds=2)
    moment = send_after.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    (project.root / "input.json").write_text(
        json.dumps({"applicationId": application, "sendAfter": moment})
    )
    (project.root / "key.txt").write_text(uuid.uuid4().hex)
    env = {
        **project.env,
        "COORDINATOR_URL": project.origin,
        "COORDINATOR_TOKEN_FILE": "token",  # relative: read from the current directory
    }

    def ctl(*arguments: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [PYTHON, "-m", "coordinatorctl", *arguments],
            capture_output=True,
            text=True,
            env=env,
            cwd=project.root,
            timeout=90,
            check=False,
        )
        for secret in (token, application):
            assert secret not in done.stdout + done.stderr
        return done

    waited = ctl(
        "start", "--wait", "--timeout", "60",
        "--workflow", WORKFLOW, "--revision", project.revision,
        "--input", "input.json", "--key-file", "key.txt",
    )  # fmt: skip
    assert waited.returncode == 0, waited.stderr
    out = waited.stdout.splitlines()
    assert out[0].startswith("Admitted run ")
    run_id = out[0].removeprefix("Admitted run ")
    assert "Status:     finished" in out and "Outcome:    message-accepted" in out
    first, *changes = waited.stderr.splitlines()
    assert first.startswith(f"Admitted run {run_id}; following it")  # the run id, first
    assert changes[0].split(" ", 2)[1] == "running"  # not a terminal: one line per change
    assert changes[-1].split(" ", 2)[1] == "finished"
    assert len(sandbox.messages()) == 1

    followed = ctl("status", "--run", run_id, "--watch", "-o", "jsonl")
    assert followed.returncode == 0 and followed.stderr == ""
    lines = followed.stdout.splitlines()
    assert len(lines) == 1
    final = json.loads(lines[0])
    jsonschema.Draft202012Validator(REPORT_SCHEMA).validate(final)
    assert final["ok"] is True and final["status"] == "completed"
    assert final["run"]["status"] == "finished" and final["run"]["runId"] == run_id
