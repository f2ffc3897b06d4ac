"""Failover to an asynchronous standby (07 §12.1 item 5, docs/operations.md "High availability"):
a private primary with a streaming standby, `coordinator serve` and `coordinator worker`
connected through the multi-host URL with `target_session_attrs=read-write`, runs sending
messages the whole time. The standby is cut off from the primary (a partition: it falls
behind, as an asynchronous standby may), the service goes on committing and sending for a
moment, then the primary is SIGKILLed and the standby promoted.

What the standby lacks is lost: the `dispatched` marks of messages the product accepted. The
processes reach the promoted standby through their URL and refuse to work it
(`coordinator.deployment.store-restored`: its timeline is new) and stop; a plain start refuses
likewise; no message goes out between the promotion and an operator's decision. The runbook
(restore hold, review: reconcile or retry-same each run, release) then brings the deployment
back on the new primary, and every message the product holds was delivered once, under one
key. Bounded: about a minute."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from chaos_support import MESSAGING, TERMINAL, _application_of
from e2e_support import Project
from support.private_postgres import PrivatePostgres

from coordinator_sandbox.testing import Processes, wait_for

RUNTIME_ROLE = "coordinator_runtime"
DATABASE = "coordinator"
NAMESPACE = "coordinator_failover"
RESTORED = "coordinator.deployment.store-restored"
RUNS = 14
TIMEOUT = 60.0


@pytest.fixture
def primary() -> Iterator[PrivatePostgres]:
    with PrivatePostgres.running_with(DATABASE, RUNTIME_ROLE) as running:
        yield running


def _token(project: Project) -> str:
    return (project.root / "token").read_text().strip()


def _api(project: Project, method: str, path: str, body: Any = None) -> httpx.Response:
    return httpx.request(
        method,
        project.origin + path,
        headers={"Authorization": "Bearer " + _token(project)},
        json=body,
        timeout=30,
    )


def _dispatched_in(cluster: PrivatePostgres) -> int:
    """Notices the store shows as sent: marked `dispatched`, or their attempt over."""
    with psycopg.connect(cluster.url(DATABASE), connect_timeout=5) as connection:
        row = connection.execute(
            f'SELECT count(*) FROM "{NAMESPACE}".steps WHERE step = %s'
            " AND (dispatched OR state NOT IN ('pending', 'leased'))",
            ("notify",),
        ).fetchone()
    return int(row[0]) if row else 0


def test_a_promoted_asynchronous_standby_is_refused_and_nothing_is_sent_again(
    tmp_path: Path, processes: Processes, primary: PrivatePostgres
) -> None:
    project = Project.create(tmp_path, processes)
    sandbox = project.start_sandbox()
    with primary.standby() as standby:
        both = (
            f"postgresql://{RUNTIME_ROLE}@127.0.0.1:{primary.port},127.0.0.1:{standby.port}"
            f"/{DATABASE}?target_session_attrs=read-write"
        )
        project.write_postgres_runtime(
            sandbox,
            runtime_url=both,
            migration_url=primary.url(DATABASE),
            namespace=NAMESPACE,
            runtime_role=RUNTIME_ROLE,
            concurrency=2,
        )
        assert project.deploy_ctl("migrate")["status"] == "migrated"
        assert project.deploy_ctl("apply", "--reference", "FAILOVER")["status"] == "applied"
        serve = project.start_service()
        project.wait_healthy(serve)
        worker = project.start_worker()
        project.token_file()

        # Runs whose messages fall due over the next seconds, on both processes.
        began = datetime.now(UTC)
        applications: dict[str, str] = {}
        for index in range(RUNS):
            application = str(uuid.uuid4())
            sandbox.seed_application(application, contact=f"{application}@example.org")
            created, body = project.api_start(
                project.root / "token",
                application,
                uuid.uuid4().hex,
                began + timedelta(seconds=1 + index * 0.4),
            )
            assert created == 201, body
            applications[str(body["runId"])] = application
        wait_for(lambda: len(sandbox.received(MESSAGING)) >= 3, TIMEOUT, "first messages")

        # The standby falls behind (cut off), the primary goes on, then dies.
        wait_for(lambda: _dispatched_in(standby) >= 1, TIMEOUT, "the standby to replay a send")
        standby.detach()
        cut = len(sandbox.received(MESSAGING))
        wait_for(
            lambda: len(sandbox.received(MESSAGING)) >= cut + 2,
            TIMEOUT,
            "messages sent after the standby fell behind",
        )
        primary.kill_postmaster()
        sent_at_loss = {r.get("idempotencyKey") for r in sandbox.received(MESSAGING)}
        standby.promote()
        promoted = time.monotonic()
        lost = len(sent_at_loss) - _dispatched_in(standby)

        # Both processes reach the promoted standby through their URL and stop on it.
        assert serve.wait(TIMEOUT) == 1, processes.log("serve")
        assert worker.wait(TIMEOUT) == 1, processes.log("worker")
        stopped = time.monotonic() - promoted
        assert RESTORED in processes.log("serve") and RESTORED in processes.log("worker")
        after_promotion = len(sandbox.received(MESSAGING))
        plain = project.start_service("serve-plain")
        assert plain.wait(TIMEOUT) == 1
        assert RESTORED in processes.log("serve-plain")
        assert len(sandbox.received(MESSAGING)) == after_promotion

        # The runbook on the new primary: hold, review every run, release.
        recovery = project.start_service("serve-recovery", "--recovery-only")
        project.wait_healthy(recovery, "serve-recovery")
        held = _api(project, "POST", "/v1/restore-hold", {"reason": "FAILOVER-1"})
        assert held.status_code == 200, held.text
        reviewed = held.json()["restoreReview"]
        for run_id in applications:
            inspection = _api(project, "GET", f"/v1/runs/{run_id}/inspect").json()
            if not inspection["run"].get("restoreReview"):
                continue
            if inspection["recovery"]["reconcileAllowed"]:
                _api(project, "POST", f"/v1/runs/{run_id}/reconcile", {"reason": "FAILOVER-1"})
            answer = _api(project, "POST", f"/v1/runs/{run_id}/retry-same", {"reason": "F-1"})
            assert answer.is_success, answer.text
        assert len(sandbox.received(MESSAGING)) == after_promotion  # recovery-only sends none
        before_release = len(sandbox.received(MESSAGING)) - after_promotion
        assert _api(project, "POST", "/v1/release-restore-hold", {"reason": "FENCE-1"}).is_success
        released = _api(
            project,
            "POST",
            "/v1/release-admission-hold",
            {
                "reason": "ADMISSIONS-1",
                "admissionHistoryComplete": True,
                "priorDeploymentFenced": True,
            },
        )
        assert released.is_success, released.text
        assert processes.stop(recovery) == 0
        serve = project.start_service("serve-after")
        project.wait_healthy(serve, "serve-after")
        project.start_worker("worker-after")

        def settled() -> bool:
            statuses = [
                _api(project, "GET", f"/v1/runs/{run_id}").json()["status"]
                for run_id in applications
            ]
            return all(status in TERMINAL for status in statuses)

        wait_for(settled, TIMEOUT * 2, "every run to settle", 0.5)

    messages: dict[str, int] = {}
    for message in sandbox.messages():
        application = _application_of(message.get("request")) or "?"
        messages[application] = messages.get(application, 0) + 1
    keys: dict[str, set[str]] = {}
    for request in sandbox.received(MESSAGING):
        application = _application_of(request.get("body")) or "?"
        keys.setdefault(application, set()).add(str(request.get("idempotencyKey")))
    print(
        f"\nfailover to an asynchronous standby: {RUNS} runs, {len(sent_at_loss)} messages"
        f" sent when the primary died, {lost} of their marks lost by the promotion,"
        f" processes stopped {stopped:.1f} s after it, {reviewed} runs under review,"
        f" {before_release} requests before release, "
        f"{sum(messages.values())} messages delivered"
    )
    assert lost >= 1, "the drill lost no commit: it proves nothing"
    assert all(count == 1 for count in messages.values()), messages
    assert set(messages) == set(applications.values())
    assert all(len(found) == 1 for found in keys.values()), keys
    assert before_release == 0
