"""End to end: a PostgreSQL outage after start is ridden out (09 §5 step 7, 07 §15).

Real `coordinator serve` and `coordinator worker` processes on a private PostgreSQL cluster
(tests/support/private_postgres.py) with runs in flight. The cluster is fast-restarted
(`pg_ctl restart -m fast`), and separately its postmaster is SIGKILLed and started again after a
few seconds. Both processes stay up; `/ready` is not ready while the store is away and ready
after; API actions answer 503 `coordinator.command.store-unavailable` meanwhile; every run
settles afterwards, no Messaging request is sent twice for one idempotency key (an effect in
flight at the loss is settled by its lease: 07 §7, never guessed), and each process logs the
loss once and the recovery once. A store unreachable at start still refuses (exit 3).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2e_support import Project
from support.private_postgres import PrivatePostgres

from coordinator_sandbox.testing import Sandbox, wait_for

MESSAGING = "messaging.submit-message/v1"
RUNTIME_ROLE = "coordinator_runtime"
DATABASE = "coordinator"
RUNS = 16
SETTLED = {"finished", "failed", "attention", "expired"}
SETTLE_TIMEOUT = 120.0  # a lease in flight at the loss lapses after 15 s before it is settled
READY_TIMEOUT = 60.0
LOST = "The store cannot be reached: the process stays up and retries."
BACK = "The store answers again: the loops resume."


@pytest.fixture
def cluster() -> Iterator[PrivatePostgres]:
    with PrivatePostgres.running_with(DATABASE, RUNTIME_ROLE) as running:
        yield running


def _deploy(project: Project, sandbox: Sandbox, cluster: PrivatePostgres) -> None:
    project.write_postgres_runtime(
        sandbox,
        runtime_url=cluster.url(DATABASE, RUNTIME_ROLE),
        migration_url=cluster.url(DATABASE),
        namespace="coordinator_outage",
        runtime_role=RUNTIME_ROLE,
        concurrency=2,
    )
    assert project.deploy_ctl("migrate")["status"] == "migrated"
    assert project.deploy_ctl("apply", "--reference", "E2E-OUTAGE")["status"] == "applied"


def _ready(project: Project) -> int | None:
    try:
        return httpx.get(project.origin + "/ready", timeout=5).status_code
    except httpx.HTTPError:
        return None


@dataclass
class _ReadyProbe:
    """Polls `/ready` in a thread; what it answered, with the monotonic instant."""

    project: Project
    answers: list[tuple[float, int | None]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self.stop.is_set():
            began = time.monotonic()
            self.answers.append((began, _ready(self.project)))
            self.stop.wait(0.01)

    def finish(self) -> list[tuple[float, int | None]]:
        self.stop.set()
        self._thread.join(10)
        return self.answers


def _lines(project: Project, name: str) -> list[dict[str, Any]]:
    found = []
    for line in project.processes.log(name).splitlines():
        if line.startswith("{"):
            found.append(json.loads(line))
    return found


def _outage_lines(project: Project, name: str) -> tuple[list[str], list[str]]:
    lines = _lines(project, name)
    lost = [line["time"] for line in lines if line["message"] == LOST]
    back = [line["time"] for line in lines if line["message"] == BACK]
    assert all(
        line["code"] == "coordinator.command.store-unavailable"
        for line in lines
        if line["message"] == LOST
    )
    assert all(
        line["code"] == "coordinator.service.store-available"
        for line in lines
        if line["message"] == BACK
    )
    return lost, back


def _admit_under_load(project: Project, sandbox: Sandbox, token: Path) -> list[str]:
    """`RUNS` runs whose messages fall due over the next 8 s, so that some are sent before the
    outage, some fall due during it and some after; answers once the first message is out."""
    applications = [str(uuid.uuid4()) for _ in range(RUNS)]
    for application in applications:
        sandbox.seed_application(application)
    now = datetime.now(UTC)
    jobs = [
        (application, uuid.uuid4().hex, now + timedelta(seconds=1 + index * 0.5))
        for index, application in enumerate(applications)
    ]
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda job: project.api_start(token, *job), jobs))
    assert [status for status, _ in answers] == [201] * RUNS, answers
    wait_for(lambda: sandbox.received(MESSAGING), 30, "the first message to be sent", 0.05)
    return [body["runId"] for _, body in answers]


def _settle(project: Project, sandbox: Sandbox, token: Path, run_ids: list[str]) -> dict[str, int]:
    """Every run settles; none is finished without its one message, no key is sent twice;
    a run not finished is one whose effect was in flight at the loss (`attention`, effect
    `unknown`: 07 §7). The figures: finished, unknown, sent."""

    def settled() -> list[dict[str, Any]] | None:
        runs = [project.api_status(token, run_id) for run_id in run_ids]
        return runs if all(run["status"] in SETTLED for run in runs) else None

    runs = wait_for(settled, SETTLE_TIMEOUT, "every run to settle", 0.5)
    sent = sandbox.received(MESSAGING)
    keys = [request["idempotencyKey"] for request in sent]
    assert len(keys) == len(set(keys)), "a Messaging request was sent twice for one key"
    finished = [run for run in runs if run["status"] == "finished"]
    others = [run for run in runs if run["status"] != "finished"]
    for run in others:
        assert run["status"] == "attention", run
        effects = project.remote(token, "inspect", "--run", run["runId"])["effects"]
        assert "unknown" in [effect["state"] for effect in effects], effects
    assert len(finished) <= len(sent) <= len(runs)
    return {"finished": len(finished), "unknown": len(others), "sent": len(sent)}


def _start_both(project: Project) -> tuple[Any, Any]:
    service = project.start_service()
    worker = project.start_worker()
    project.wait_healthy(service)
    wait_for(lambda: _ready(project) == 200, READY_TIMEOUT, "serve to be ready", 0.1)
    wait_for(
        lambda: any(
            line["code"] == "coordinator.service.ready" for line in _lines(project, "worker")
        ),
        READY_TIMEOUT,
        "the worker to run its loops",
        0.1,
    )
    return service, worker


def _after_outage(
    project: Project, sandbox: Sandbox, token: Path, run_ids: list[str], back_at: float
) -> dict[str, Any]:
    service, worker = project.processes.started[-2:]
    wait_for(lambda: _ready(project) == 200, READY_TIMEOUT, "serve to be ready again", 0.05)
    ready_after = time.monotonic() - back_at
    figures = _settle(project, sandbox, token, run_ids)
    assert service.poll() is None, project.processes.log("serve")
    assert worker.poll() is None, project.processes.log("worker")
    for name in ("serve", "worker"):
        lost, back = _outage_lines(project, name)
        assert (len(lost), len(back)) == (1, 1), (name, lost, back)
        assert lost[0] <= back[0]
    assert project.processes.stop(worker) == 0, project.processes.log("worker")
    assert project.processes.stop(service) == 0, project.processes.log("serve")
    return {**figures, "readyAfterSeconds": round(ready_after, 3)}


def _problem_code(answer: httpx.Response) -> tuple[int, str | None]:
    body = answer.json()
    return answer.status_code, body.get("code") if isinstance(body, dict) else None


def test_a_fast_restart_of_postgres_is_ridden_out_by_serve_and_worker(
    project: Project, cluster: PrivatePostgres
) -> None:
    sandbox = project.start_sandbox()
    _deploy(project, sandbox, cluster)
    _start_both(project)
    token = project.token_file()
    run_ids = _admit_under_load(project, sandbox, token)

    probe = _ReadyProbe(project)
    wait_for(lambda: probe.answers, 10, "the first readiness probe", 0.01)
    lost_at = time.monotonic()
    took = cluster.restart_fast()  # waits until the server accepts connections again
    back_at = time.monotonic()
    wait_for(
        lambda: any(status == 200 and at > back_at for at, status in probe.answers),
        READY_TIMEOUT,
        "serve to be ready after the restart",
        0.05,
    )
    answers = probe.finish()
    during = [status for at, status in answers if lost_at <= at <= back_at]
    assert 503 in during, answers[-50:]
    assert None not in [status for _, status in answers], "the API stopped answering"

    figures = _after_outage(project, sandbox, token, run_ids, back_at)
    print(f"\nfast restart: pg_ctl {took:.3f} s, outage {back_at - lost_at:.3f} s, {figures}")


def test_a_killed_postmaster_started_again_later_is_ridden_out_by_serve_and_worker(
    project: Project, cluster: PrivatePostgres
) -> None:
    sandbox = project.start_sandbox()
    _deploy(project, sandbox, cluster)
    service, worker = _start_both(project)
    token = project.token_file()
    run_ids = _admit_under_load(project, sandbox, token)

    lost_at = time.monotonic()
    cluster.kill_postmaster()
    # While the store is away: both processes up, not ready, store actions answer 503.
    wait_for(lambda: _ready(project) == 503, 10, "serve to report not ready", 0.05)
    authorization = {"Authorization": "Bearer " + token.read_text().strip()}
    status = httpx.get(f"{project.origin}/v1/runs/{run_ids[0]}", headers=authorization, timeout=30)
    assert _problem_code(status) == (503, "coordinator.command.store-unavailable")
    application = str(uuid.uuid4())
    sandbox.seed_application(application)
    admitted = project.api_start(token, application, uuid.uuid4().hex, datetime.now(UTC))
    assert (admitted[0], admitted[1].get("code")) == (503, "coordinator.command.store-unavailable")
    assert httpx.get(project.origin + "/health", timeout=5).status_code == 200
    time.sleep(max(0.0, 4.0 - (time.monotonic() - lost_at)))  # a few seconds down, not a wait
    assert service.poll() is None, project.processes.log("serve")
    assert worker.poll() is None, project.processes.log("worker")
    assert _ready(project) == 503
    for name in ("serve", "worker"):  # the loss is logged while it lasts, no recovery yet
        wait_for(lambda n=name: _outage_lines(project, n)[0], 20, f"{name} to log the loss", 0.1)
        assert _outage_lines(project, name)[1] == []
    cluster.start()
    back_at = time.monotonic()

    figures = _after_outage(project, sandbox, token, run_ids, back_at)
    print(f"\npostmaster killed: outage {back_at - lost_at:.3f} s, {figures}")


def test_a_store_unreachable_at_start_still_refuses_with_exit_3(
    project: Project, cluster: PrivatePostgres
) -> None:
    """09 §5 step 3: at start an unreachable store is a refusal (exit 3), not ridden out."""
    sandbox = project.start_sandbox()
    _deploy(project, sandbox, cluster)
    cluster.stop()
    service = project.start_service()
    worker = project.start_worker()
    assert service.wait(60) == 3
    assert worker.wait(60) == 3
    for name in ("serve", "worker"):
        codes = [line["code"] for line in _lines(project, name)]
        assert "coordinator.command.store-unavailable" in codes, codes


def test_an_idle_process_notices_a_restart_through_its_listener_and_logs_it_once(
    project: Project, cluster: PrivatePostgres
) -> None:
    """No run in flight: the store's listener connection (07 §7.7 item 4) is what sees the
    restart; each process still logs one loss and one recovery, and stays up."""
    sandbox = project.start_sandbox()
    _deploy(project, sandbox, cluster)
    service, worker = _start_both(project)
    cluster.restart_fast()
    for name in ("serve", "worker"):
        wait_for(
            lambda n=name: _outage_lines(project, n)[1], 30, f"{name} to log the recovery", 0.1
        )
        lost, back = _outage_lines(project, name)
        assert (len(lost), len(back)) == (1, 1), (name, lost, back)
    wait_for(lambda: _ready(project) == 200, READY_TIMEOUT, "serve to be ready again", 0.05)
    assert service.poll() is None, project.processes.log("serve")
    assert worker.poll() is None, project.processes.log("worker")
    assert project.processes.stop(worker) == 0
    assert project.processes.stop(service) == 0


PROBE = """
from support.private_postgres import PrivatePostgres

def test_probe():
    with PrivatePostgres.running():
        pass
"""


@pytest.mark.parametrize(("ci", "outcome"), [("", "1 skipped"), ("true", "1 failed")])
def test_the_private_cluster_skips_without_binaries_and_fails_under_ci(
    tmp_path: Path, ci: str, outcome: str
) -> None:
    probe = tmp_path / "test_probe.py"
    probe.write_text(PROBE)
    tests = Path(__file__).resolve().parents[1]
    env = {
        **os.environ,
        "PYTHONPATH": str(tests),
        "CI": ci,
        "COORDINATOR_TEST_PG_BIN": str(tmp_path / "no-binaries"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", str(probe)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert outcome in done.stdout, done.stdout + done.stderr
    assert "cannot be run: no PostgreSQL server binaries" in done.stdout, done.stdout
