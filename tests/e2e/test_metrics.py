"""End to end (06 §14, issue 12 item 6): `GET /metrics` on `coordinator serve` and on the listener
`coordinator worker --metrics-bind` opens, scraped while a run goes through real processes on
PostgreSQL: the counts move with the run, the service log has its keyed lines, and neither the
expositions nor the logs name a run id, an idempotency key, an input value or a token.

`serve` admits the run (due a few seconds later) and stops; the worker then works it alone.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from e2e_support import Project
from prometheus_client.parser import text_string_to_metric_families

from coordinator_sandbox.testing import Sandbox, free_port, wait_for

TIMEOUT = 45.0
MESSAGING = "messaging.submit-message/v1"
REFERENCE = re.compile(r"hmac-sha256:[0-9a-f]{64}")


def _as_user(url: str, user: str) -> str:
    parts = urlsplit(url)
    netloc = user + "@" + parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _postgres_runtime(
    project: Project, sandbox: Sandbox, postgres_url: str, postgres_role: Callable[[], str]
) -> None:
    role = postgres_role()
    project.write_postgres_runtime(
        sandbox,
        runtime_url=_as_user(postgres_url, role),
        migration_url=postgres_url,
        namespace=f"coordinator_e2e_{uuid.uuid4().hex[:8]}",
        runtime_role=role,
        concurrency=1,
    )


def _scrape(url: str) -> tuple[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    """The exposition at `url` and its samples by (name, sorted labels)."""
    answer = httpx.get(url, timeout=10)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return answer.text, samples


def _total(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    """The sum of `name`'s samples whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(value for (key, got), value in samples.items() if key == name and wanted <= set(got))


def _lines(log: str, code: str) -> list[dict[str, Any]]:
    found = []
    for text in log.splitlines():
        if text.startswith("{"):
            line = json.loads(text)
            if line.get("code") == code:
                found.append(line)
    return found


def _journal(directory: Path) -> str:
    return "".join(path.read_text() for path in sorted(directory.rglob("*.jsonl")))


def test_metrics_move_with_a_run_on_serve_and_worker_and_name_no_identifier(
    project: Project, postgres_url: str, postgres_role: Callable[[], str]
) -> None:
    sandbox = project.start_sandbox()
    _postgres_runtime(project, sandbox, postgres_url, postgres_role)
    assert project.deploy_ctl("migrate")["status"] == "migrated"
    assert project.deploy_ctl("apply", "--reference", "E2E-METRICS")["status"] == "applied"

    service = project.start_service()
    project.wait_healthy(service)
    metrics_url = project.origin + "/metrics"
    _, before = _scrape(metrics_url)
    accepted = {"origin": "api", "outcome": "accepted"}
    assert _total(before, "coordinator_admissions_total", **accepted) == 0

    token = project.token_file()
    application = str(uuid.uuid4())
    sandbox.seed_application(application)
    key = uuid.uuid4().hex
    created, body = project.api_start(
        token, application, key, datetime.now(UTC) + timedelta(seconds=4)
    )
    assert created == 201, body
    run_id = body["runId"]
    serve_text, during = _scrape(metrics_url)
    assert _total(during, "coordinator_admissions_total", **accepted) == 1
    assert _total(during, "coordinator_runs", status="running") == 1
    assert _total(during, "coordinator_store_gauges_available") == 1
    assert _total(during, "coordinator_audit_appends_total") > 0
    assert _total(during, "coordinator_process_frozen_objects") > 10_000  # its start-up heap
    assert project.processes.stop(service) == 0

    port = free_port()
    worker = project.processes.start(
        "worker",
        ["-m", "coordinator_api.serve", "worker", "--runtime-config", str(project.runtime),
         "--metrics-bind", f"127.0.0.1:{port}"],
        env=project.env,
    )  # fmt: skip
    worker_url = f"http://127.0.0.1:{port}/metrics"

    def finished() -> tuple[str, Any] | None:
        assert worker.poll() is None, project.processes.log("worker")
        try:
            text, samples = _scrape(worker_url)
        except httpx.HTTPError:
            return None
        changed = _total(samples, "coordinator_run_status_changes_total", status="finished")
        return (text, samples) if changed >= 1 else None

    worker_text, after = wait_for(finished, TIMEOUT, "the worker to finish the run", 0.2)
    (project.root / "worker-metrics.txt").write_text(worker_text)  # for a failing test's reader
    assert _total(after, "coordinator_runs", status="finished") == 1
    assert _total(after, "coordinator_runs", status="running") == 0
    delivered = {"step_type": "call", "operation": MESSAGING, "outcome": "delivered"}
    assert _total(after, "coordinator_step_attempts_total", **delivered) == 1
    assert _total(after, "coordinator_attempt_duration_seconds_count", step_type="call") >= 1
    assert _total(after, "coordinator_run_duration_seconds_count", status="finished") == 1
    assert _total(after, "coordinator_store_transaction_duration_seconds_count", mode="write") > 0
    assert _total(after, "coordinator_audit_fsync_duration_seconds_count") > 0
    assert _total(after, "coordinator_worker_loops") == 1
    assert _total(after, "coordinator_process_frozen_objects") > 10_000
    assert _total(after, "coordinator_admissions_total") == 0  # the worker admits nothing
    assert project.processes.stop(worker) == 0

    # One keyed line per admission, step outcome and status change; the references are the
    # audit journal's (07 §11), the same in both processes.
    serve_log, worker_log = project.processes.log("serve"), project.processes.log("worker")
    admitted = _lines(serve_log, "coordinator.run.admitted")
    assert len(admitted) == 1 and admitted[0]["outcome"] == "accepted"
    run_ref = admitted[0]["runRef"]
    assert REFERENCE.fullmatch(run_ref)
    assert run_ref in _journal(project.root / ".coordinator" / "audit")
    outcomes = _lines(worker_log, "coordinator.run.step-outcome")
    assert outcomes and {line["runRef"] for line in outcomes} == {run_ref}
    assert all(REFERENCE.fullmatch(line["stepRef"]) for line in outcomes)
    assert [line["outcome"] for line in outcomes if line["operation"] == MESSAGING] == ["delivered"]
    changes = _lines(worker_log, "coordinator.run.status-changed")
    assert [(line["runRef"], line["status"]) for line in changes] == [(run_ref, "finished")]

    secrets = (run_id, uuid.UUID(run_id).hex, key, application, token.read_text().strip())
    for text in (serve_text, worker_text, serve_log, worker_log):
        for secret in secrets:
            assert secret not in text
