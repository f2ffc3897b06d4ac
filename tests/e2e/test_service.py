"""End to end: `coordinatorctl` deployment commands, `coordinator serve`/`worker` and the sandbox
products, each a separate process on loopback (09 §3, §5; 07 §1 guarantees).

* SQLite: init → keys → package → migrate → apply → serve → start → the run finishes exactly
  once and Messaging received exactly one message; SIGTERM exits 0.
* PostgreSQL: `coordinator serve` plus a second `coordinator worker`; many runs admitted
  concurrently each finish exactly once; a replayed start key answers the same run.
* Without HTTP: a `coordinator worker` that cannot import Connexion, Starlette or uvicorn (both
  as `coordinator worker` and as `python -m coordinator_core.shell.runtime.process worker`) finishes
  runs admitted through `coordinator serve`; it needs only coordinator-core.
* Crash: the service is SIGKILLed while a Messaging command is in flight (after the pre-send
  commit, before the outcome is recorded); after a restart the run is `attention` with the
  effect `unknown`, and nothing was sent again.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from e2e_support import Project

from coordinator_sandbox.testing import Processes, Sandbox, database_url, wait_for

MESSAGING = "messaging.submit-message/v1"
RUN_TIMEOUT = 30.0


def _wait_status(project: Project, token: Any, run_id: str, wanted: set[str]) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        run = project.status(token, run_id)
        return run if run["status"] in wanted else None

    found: dict[str, Any] = wait_for(reached, RUN_TIMEOUT, f"run to reach {wanted}", 0.25)
    return found


def _deploy(project: Project) -> None:
    migrated = project.deploy_ctl("migrate")
    assert migrated["status"] == "migrated"
    assert migrated["toVersion"] >= 1
    applied = project.deploy_ctl("apply", "--reference", "E2E-1")
    assert applied["status"] == "applied"
    assert applied["packageDigest"] == project.package_digest
    status = project.deploy_ctl("deployment-status")
    assert status["status"] == "checked"
    assert status["packageDigest"] == project.package_digest


def test_sqlite_run_finishes_once_and_sends_one_message(project: Project) -> None:
    sandbox = project.start_sandbox()
    project.write_runtime(sandbox)
    application = str(uuid.uuid4())
    sandbox.seed_application(application)
    _deploy(project)

    service = project.start_service()
    project.wait_healthy(service)
    token = project.token_file()
    started = project.start_run(token, application, delay=1.0)
    assert started["status"] == "admitted"
    run_id = started["run"]["runId"]

    run = _wait_status(project, token, run_id, {"finished", "failed", "attention", "expired"})
    assert run["status"] == "finished"
    assert run["outcome"] == "message-accepted"
    inspection = project.remote(token, "inspect", "--run", run_id)
    assert [e["state"] for e in inspection["effects"]] == ["accepted"]
    assert len(sandbox.received(MESSAGING)) == 1
    assert len(sandbox.messages()) == 1
    # Each step's attempts: in the inspection, and paged by `attempts` (no value of the run).
    steps = {step["step"]: step for step in inspection["steps"]}
    assert all(step["attemptCount"] >= 1 for step in steps.values()), steps
    notify = steps["notify"]
    assert (notify["attemptCount"], [a["outcome"] for a in notify["attempts"]]) == (
        1,
        ["delivered"],
    )
    attempts = project.remote(token, "attempts", "--run", run_id, "--step", "notify")
    assert (attempts["runId"], attempts["step"], attempts["nextCursor"]) == (
        run_id,
        "notify",
        None,
    )
    assert attempts["attempts"] == notify["attempts"]
    assert attempts["attempts"][0]["startedAt"] <= attempts["attempts"][0]["endedAt"]
    assert application not in json.dumps(attempts)
    absent = project.remote(
        token, "attempts", "--run", run_id, "--step", "no-such-step", check=False
    )
    assert absent["exitCode"] == 1
    assert [d["code"] for d in absent["diagnostics"]] == ["coordinator.command.step-absent"]
    # A send answered 503 once is retried: notify's two attempts, paged one at a time.
    sandbox.fault(MESSAGING, kind="fail", status=503)
    retried_application = str(uuid.uuid4())
    sandbox.seed_application(retried_application)
    retried = project.start_run(token, retried_application, delay=0.5)["run"]["runId"]
    finished = _wait_status(project, token, retried, {"finished", "failed", "attention"})
    assert finished["status"] == "finished"
    page = ("attempts", "--run", retried, "--step", "notify", "--limit", "1")
    newest = project.remote(token, *page)
    assert [(a["attempt"], a["outcome"]) for a in newest["attempts"]] == [(2, "delivered")]
    assert newest["nextCursor"]
    older = project.remote(token, *page, "--cursor", newest["nextCursor"])
    assert [(a["attempt"], a["outcome"]) for a in older["attempts"]] == [(1, "retry")]
    assert older["attempts"][0]["failureCode"] is not None and older["nextCursor"] is None
    assert older["attempts"][0]["endedAt"] <= newest["attempts"][0]["startedAt"]
    other_step = project.remote(
        token, "attempts", "--run", retried, "--step", "due", "--cursor", newest["nextCursor"],
        check=False,
    )  # fmt: skip
    assert [d["code"] for d in other_step["diagnostics"]] == ["coordinator.request.cursor-invalid"]
    sent = len(sandbox.received(MESSAGING))
    assert sent == 3

    # SQLite is one process: a second service is refused while the first holds the store.
    busy = project.start_service("serve-2")
    assert busy.wait(30) == 3
    assert "coordinator.command.store-busy" in project.processes.log("serve-2")
    # `coordinator worker` on SQLite is refused outright.
    worker = project.start_worker()
    assert worker.wait(30) == 1
    assert "coordinator.command.store-single-process" in project.processes.log("worker")

    assert project.processes.stop(service, signal.SIGINT) == 0
    assert len(sandbox.received(MESSAGING)) == sent

    # The listener's port is taken: `listener-unavailable`, exit 3 (nothing else changes).
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", project.listener_port))
        taken.listen()
        blocked = project.start_service("serve-blocked")
        assert blocked.wait(30) == 3
    assert "coordinator.command.listener-unavailable" in project.processes.log("serve-blocked")

    # Recovery-only: the API serves reads, admits nothing and is never ready (06 §13).
    recovery = project.start_service("serve-recovery", "--recovery-only")
    project.wait_healthy(recovery, "serve-recovery")
    assert httpx.get(project.origin + "/ready", timeout=5).status_code == 503
    refused = project.start_run(token, application, check=False)
    assert refused["exitCode"] == 1
    assert [d["code"] for d in refused["diagnostics"]] == ["coordinator.command.recovery-only"]
    assert project.status(token, run_id)["status"] == "finished"
    assert project.processes.stop(recovery) == 0


def _postgres_runtime(
    project: Project,
    sandbox: Sandbox,
    postgres_url: str,
    postgres_role: Callable[[], str],
) -> None:
    role = postgres_role()
    namespace = f"coordinator_e2e_{uuid.uuid4().hex[:8]}"
    database = postgres_url.rpartition("/")[2]
    project.write_postgres_runtime(
        sandbox,
        runtime_url=database_url(postgres_url, database, user=role),
        migration_url=postgres_url,
        namespace=namespace,
        runtime_role=role,
        concurrency=2,
    )


def test_postgres_serve_and_worker_finish_every_run_once(
    project: Project, postgres_url: str, postgres_role: Callable[[], str]
) -> None:
    sandbox = project.start_sandbox()
    _postgres_runtime(project, sandbox, postgres_url, postgres_role)
    _deploy(project)
    service = project.start_service()
    worker = project.start_worker()
    project.wait_healthy(service)
    token = project.token_file()

    count = 50
    applications = [str(uuid.uuid4()) for _ in range(count)]
    for application in applications:
        sandbox.seed_application(application)
    keys = [uuid.uuid4().hex for _ in range(count)]
    send_after = datetime.now(UTC) + timedelta(seconds=2)
    # Every key is sent twice at once: concurrent admissions with one key resolve to one run.
    # Eight in flight: one peer may have at most `headsPerPeer` (8) connections still sending
    # their head, beyond which the service answers 503 with Retry-After (docs/operations.md,
    # "HTTP edge limits").
    requests = [(a, k) for a, k in zip(applications, keys, strict=True)] * 2
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(
            pool.map(lambda pair: project.api_start(token, pair[0], pair[1], send_after), requests)
        )
    first, second = answers[:count], answers[count:]
    run_ids = [body["runId"] for _, body in first]
    assert [body["runId"] for _, body in second] == run_ids
    assert len(set(run_ids)) == count
    for (one, _), (other, _) in zip(first, second, strict=True):
        assert sorted((one, other)) == [200, 201]
    # A later replay of the same key and input answers the same run.
    status, replay = project.api_start(token, applications[0], keys[0], send_after)
    assert (status, replay["runId"]) == (200, run_ids[0])

    def all_settled() -> list[dict[str, Any]] | None:
        runs = [project.api_status(token, run_id) for run_id in run_ids]
        settled = {"finished", "failed", "attention", "expired"}
        return runs if all(run["status"] in settled for run in runs) else None

    runs = wait_for(all_settled, 45, "every run to settle", interval=0.5)
    assert {run["status"] for run in runs} == {"finished"}
    sent = sandbox.received(MESSAGING)
    assert len(sent) == count
    assert len({r["idempotencyKey"] for r in sent}) == count
    assert len(sandbox.messages()) == count
    # Both processes worked: the scale-out worker journaled attempts of its own.
    audit = project.root / ".coordinator" / "audit"
    worker_files = list(audit.glob("worker-*.jsonl"))
    assert worker_files
    assert any('"phase":"record"' in path.read_text() for path in worker_files)
    assert worker.poll() is None
    assert project.processes.stop(worker) == 0
    assert project.processes.stop(service) == 0


# A `python -c` prelude that refuses the HTTP server frameworks, records every attempt to import
# one, then runs the module named by its first argument as `__main__` with the rest as argv.
HTTP_BLOCKER = """
import importlib.abc, os, runpy, sys
BLOCKED = ("connexion", "starlette", "uvicorn")
attempts = os.environ["BLOCKED_IMPORTS"]

def note(name):
    with open(attempts, "a", encoding="utf-8") as stream:
        stream.write(name + "\\n")

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            note(name)
            raise ImportError(name + " is not importable here")
        return None

for loaded in list(sys.modules):
    if loaded.partition(".")[0] in BLOCKED:
        note(loaded)
sys.meta_path.insert(0, Refuse())
module = sys.argv[1]
sys.argv = [module, *sys.argv[2:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""
WORKER_COMMANDS = (
    ("coordinator_api.serve", "worker"),  # what the `coordinator` console script runs
    ("coordinator_core.shell.runtime.process", "worker"),
)


def _without_http(
    project: Project, attempts: Path, *command: str
) -> tuple[list[str], dict[str, str]]:
    arguments = ["-c", HTTP_BLOCKER, *command, "--runtime-config", str(project.runtime)]
    return arguments, {**project.env, "BLOCKED_IMPORTS": str(attempts)}


def test_the_worker_path_imports_no_http_framework(project: Project, tmp_path: Path) -> None:
    """Fast and without PostgreSQL: both worker entry points get as far as the runtime file
    (init's has no deployment block: exit 2) without touching an HTTP framework."""
    for index, command in enumerate(WORKER_COMMANDS):
        attempts = tmp_path / f"blocked-{index}.txt"
        arguments, env = _without_http(project, attempts, *command)
        done = subprocess.run(
            [sys.executable, *arguments],
            check=False,
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert done.returncode == 2, done.stderr
        assert "coordinator.command.deployment-required" in done.stderr
        assert not attempts.exists(), attempts.read_text()
    # The prelude does block: the HTTP app cannot be imported under it.
    attempts = tmp_path / "blocked-app.txt"
    env = {**project.env, "BLOCKED_IMPORTS": str(attempts)}
    script = [sys.executable, "-c", HTTP_BLOCKER, "coordinator_api.app"]
    done = subprocess.run(script, check=False, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode != 0
    assert "connexion" in attempts.read_text()


def test_a_worker_without_http_finishes_runs_admitted_through_serve(
    project: Project, postgres_url: str, postgres_role: Callable[[], str], tmp_path: Path
) -> None:
    sandbox = project.start_sandbox()
    _postgres_runtime(project, sandbox, postgres_url, postgres_role)
    _deploy(project)
    token: Path | None = None
    for index, command in enumerate(WORKER_COMMANDS):
        # Admit through `coordinator serve`, then stop it before the run's message is due, so
        # that only the worker can finish the run.
        service = project.start_service(f"serve-{index}")
        project.wait_healthy(service, f"serve-{index}")
        token = token or project.token_file()
        application = str(uuid.uuid4())
        sandbox.seed_application(application)
        due = datetime.now(UTC) + timedelta(seconds=4)
        created, body = project.api_start(token, application, uuid.uuid4().hex, due)
        assert created == 201, body
        run_id = body["runId"]
        assert project.processes.stop(service) == 0
        assert len(sandbox.messages()) == index

        attempts = tmp_path / f"blocked-{index}.txt"
        arguments, env = _without_http(project, attempts, *command)
        worker = project.processes.start(f"worker-{index}", arguments, env=env)

        def sent_or_exited(process: Any = worker, wanted: int = index + 1) -> bool:
            return len(sandbox.messages()) == wanted or process.poll() is not None

        wait_for(sent_or_exited, RUN_TIMEOUT, "the worker to send the message", 0.25)
        assert worker.poll() is None, project.processes.log(f"worker-{index}")
        assert project.processes.stop(worker) == 0, project.processes.log(f"worker-{index}")
        assert not attempts.exists(), attempts.read_text()
        assert "coordinator.service.ready" in project.processes.log(f"worker-{index}")

        # Recovery-only runs no worker loop: what it reports is the worker's doing.
        reader = project.start_service(f"serve-recovery-{index}", "--recovery-only")
        project.wait_healthy(reader, f"serve-recovery-{index}")
        run = project.status(token, run_id)
        assert (run["status"], run["outcome"]) == ("finished", "message-accepted")
        assert project.processes.stop(reader) == 0
    assert len(sandbox.received(MESSAGING)) == len(WORKER_COMMANDS)


def test_crash_after_dispatch_leaves_the_effect_unknown(
    project: Project, processes: Processes
) -> None:
    sandbox = project.start_sandbox()
    project.write_runtime(sandbox)
    application = str(uuid.uuid4())
    sandbox.seed_application(application)
    _deploy(project)
    # Messaging holds the request for 5 s before committing: the window to crash in.
    sandbox.fault(MESSAGING, kind="delay", delaySeconds=5)

    service = project.start_service()
    project.wait_healthy(service)
    token = project.token_file()
    run_id = project.start_run(token, application, delay=0.5)["run"]["runId"]
    wait_for(lambda: sandbox.received(MESSAGING), RUN_TIMEOUT, "the message to be dispatched")
    service.send_signal(signal.SIGKILL)
    service.wait(10)

    restarted = project.start_service("serve-restarted")
    project.wait_healthy(restarted, "serve-restarted")
    # The lease (15 s) lapses; the next claim makes the in-flight attempt `unknown` (T28).
    run = _wait_status(project, token, run_id, {"attention", "finished", "failed"})
    assert run["status"] == "attention"
    assert run["uncertain"] is True
    inspection = project.remote(token, "inspect", "--run", run_id)
    assert [e["state"] for e in inspection["effects"]] == ["unknown"]
    assert len(sandbox.received(MESSAGING)) == 1
    assert processes.stop(restarted) == 0
    assert len(sandbox.received(MESSAGING)) == 1


def test_usage_and_refusals_of_the_service_command(project: Project) -> None:
    usage = subprocess.run(
        [*project_python(), "serve", "--poll-ms", "5", "--runtime-config", "/x"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert usage.returncode == 2
    assert "coordinator.cli.usage" in usage.stderr
    assert "/x" not in usage.stderr
    missing = subprocess.run(
        [*project_python(), "serve", "--runtime-config", str(project.runtime)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert missing.returncode == 2  # init's runtime.yaml has no deployment block
    assert "coordinator.command.deployment-required" in missing.stderr
    # Every line the service writes is a JSON object of exactly these members. (Python's own
    # warnings, printed while `coordinator_api` is imported, precede the service's first line.)
    lines = [line for line in missing.stderr.splitlines() if line.startswith("{")]
    assert lines
    for line in lines:
        assert set(json.loads(line)) == {"time", "level", "code", "message"}


def project_python() -> list[str]:
    return [sys.executable, "-m", "coordinator_api.serve"]
