"""Ownership on the wire (06 §2): `coordinator serve` on PostgreSQL, two callers with real
tokens of the same non-operator policy (the sandbox issuer's, subjects `alice` and `bob`) and
an operator. A run is its owner's: the other caller's status, inspect, attempts, cancel and list answer
exactly as for a run that does not exist, and its cancel changes nothing; the owner and the
operator see it. The API tests' fake service carries no such rule: this is where it is held."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from e2e_support import Project, starter_policy

from coordinator_sandbox.testing import database_url


def _call(project: Project, token: Path, method: str, path: str, **body: Any) -> httpx.Response:
    return httpx.request(
        method,
        project.origin + path,
        headers={"Authorization": "Bearer " + token.read_text().strip()},
        json=body or None,
        timeout=30,
    )


def _listed(project: Project, token: Path) -> list[str]:
    answer = _call(project, token, "GET", "/v1/runs")
    assert answer.status_code == 200, answer.text
    return [run["runId"] for run in answer.json()["runs"]]


def test_a_run_is_visible_to_its_owner_and_operators_only(
    project: Project, postgres_url: str, postgres_role: Callable[[], str]
) -> None:
    sandbox = project.start_sandbox()
    role = postgres_role()
    database = postgres_url.rpartition("/")[2]
    project.write_postgres_runtime(
        sandbox,
        runtime_url=database_url(postgres_url, database, user=role),
        migration_url=postgres_url,
        namespace=f"coordinator_owners_{uuid.uuid4().hex[:8]}",
        runtime_role=role,
        policies=[starter := starter_policy()],
    )
    assert project.deploy_ctl("migrate")["status"] == "migrated"
    assert project.deploy_ctl("apply", "--reference", "OWNERS-1")["status"] == "applied"
    service = project.start_service()
    project.wait_healthy(service)
    client, scopes = starter.client_id, tuple(starter.required_scopes)
    alice = project.token_file(subject="alice", client_id=client, scopes=scopes, name="alice")
    bob = project.token_file(subject="bob", client_id=client, scopes=scopes, name="bob")
    operator = project.token_file()

    # Each caller starts a run that waits an hour before it reads anything.
    later = datetime.now(UTC) + timedelta(hours=1)
    created, body = project.api_start(alice, str(uuid.uuid4()), uuid.uuid4().hex, later)
    assert created == 201, body
    run = body["runId"]
    created, body = project.api_start(bob, str(uuid.uuid4()), uuid.uuid4().hex, later)
    assert created == 201, body
    bobs = body["runId"]

    # The other caller: every route answers as for a run that does not exist.
    absent = str(uuid.uuid4())
    for method, route, reason in (
        ("GET", "/v1/runs/{}", None),
        ("GET", "/v1/runs/{}/inspect", None),
        ("GET", "/v1/runs/{}/steps/due/attempts", None),
        ("POST", "/v1/runs/{}/cancel", "not mine"),
    ):
        extra = {} if reason is None else {"reason": reason}
        hidden = _call(project, bob, method, route.format(run), **extra)
        missing = _call(project, bob, method, route.format(absent), **extra)
        assert hidden.status_code == 404, (route, hidden.text)
        assert hidden.json()["code"] == "coordinator.command.run-absent", route
        assert hidden.content == missing.content, route
    assert _listed(project, bob) == [bobs]

    # Bob's cancel changed nothing: the owner sees the run as it was, and so does an operator.
    mine = _call(project, alice, "GET", f"/v1/runs/{run}")
    assert mine.status_code == 200, mine.text
    assert mine.json()["status"] == "running" and not mine.json()["cancelRequested"]
    assert _call(project, alice, "GET", f"/v1/runs/{run}/inspect").status_code == 200
    assert _call(project, alice, "GET", f"/v1/runs/{run}/steps/due/attempts").status_code == 200
    assert _listed(project, alice) == [run]
    assert _call(project, operator, "GET", f"/v1/runs/{run}").json() == mine.json()
    assert set(_listed(project, operator)) == {run, bobs}

    # The owner may cancel it.
    cancelled = _call(project, alice, "POST", f"/v1/runs/{run}/cancel", reason="mine")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelled" or cancelled.json()["cancelRequested"]
    assert project.processes.stop(service) == 0
