"""End to end: the waiting status read (06 §5.3 `wait`/`seen`, docs/reference/api.md) of a real
`coordinator serve` ends when the worker finishes the run, long before its bound, both when the
serving process's own worker loop finishes it (SQLite: woken by the commit in the same process)
and when a separate `coordinator worker` does (PostgreSQL, read through a `--recovery-only`
serve that runs no worker loop: woken by its look at the store).
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from e2e_support import Project

from coordinator_sandbox.testing import database_url

BOUND = 20  # the documented maximum of `wait`
_ETAG = re.compile(r'^W/"([0-9a-f]{16})"$')


def _tag(answer: httpx.Response) -> str:
    found = _ETAG.match(answer.headers["etag"])
    assert found is not None, answer.headers.get("etag")
    return found.group(1)


def _follow(project: Project, token: Path, run_id: str) -> list[tuple[str, float, bool]]:
    """Waiting reads of the run until it has finished: (status, seconds, changed) of each."""
    url = f"{project.origin}/v1/runs/{run_id}"
    headers = {"Authorization": "Bearer " + token.read_text().strip()}
    answer = httpx.get(url, headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    tag, status = _tag(answer), answer.json()["status"]
    reads: list[tuple[str, float, bool]] = []
    give_up = time.monotonic() + 90
    while status != "finished":
        assert status in ("running", "cancel-requested"), status
        assert time.monotonic() < give_up, reads
        began = time.monotonic()
        answer = httpx.get(
            url, params={"wait": BOUND, "seen": tag}, headers=headers, timeout=BOUND + 10
        )
        took = time.monotonic() - began
        assert answer.status_code == 200, answer.text
        fresh, status = _tag(answer), answer.json()["status"]
        reads.append((status, took, fresh != tag))
        tag = fresh
    return reads


def _ended_before_the_bound(reads: list[tuple[str, float, bool]]) -> None:
    status, took, changed = reads[-1]
    assert (status, changed) == ("finished", True)
    assert took < BOUND - 5, reads  # the finish ended the wait, not the bound
    # Every read that saw a change answered it before its bound; none came back unchanged early.
    for _, seconds, moved in reads:
        assert moved or seconds >= BOUND - 1, reads
    assert len(reads) <= 6, reads  # one read per change, not a poll per interval


def test_the_serving_process_finishing_a_run_ends_a_waiting_read(project: Project) -> None:
    sandbox = project.start_sandbox()
    project.write_runtime(sandbox)
    assert project.deploy_ctl("migrate")["status"] == "migrated"
    assert project.deploy_ctl("apply")["status"] == "applied"
    service = project.start_service()
    project.wait_healthy(service)
    token = project.token_file()
    application = str(uuid.uuid4())
    sandbox.seed_application(application)
    due = datetime.now(UTC) + timedelta(seconds=3)
    created, body = project.api_start(token, application, uuid.uuid4().hex, due)
    assert created == 201, body
    _ended_before_the_bound(_follow(project, token, body["runId"]))
    assert len(sandbox.messages()) == 1
    assert project.processes.stop(service) == 0


def test_a_separate_worker_finishing_a_run_ends_a_waiting_read(
    project: Project, postgres_url: str, postgres_role: Callable[[], str]
) -> None:
    sandbox = project.start_sandbox()
    role = postgres_role()
    project.write_postgres_runtime(
        sandbox,
        runtime_url=database_url(postgres_url, postgres_url.rpartition("/")[2], user=role),
        migration_url=postgres_url,
        namespace=f"coordinator_e2e_{uuid.uuid4().hex[:8]}",
        runtime_role=role,
    )
    assert project.deploy_ctl("migrate")["status"] == "migrated"
    assert project.deploy_ctl("apply")["status"] == "applied"
    # Admit through `serve`, then serve reads only (`--recovery-only` runs no worker loop): the
    # run can be finished by the separate worker alone.
    admitting = project.start_service("serve-admit")
    project.wait_healthy(admitting, "serve-admit")
    token = project.token_file()
    application = str(uuid.uuid4())
    sandbox.seed_application(application)
    due = datetime.now(UTC) + timedelta(seconds=6)
    created, body = project.api_start(token, application, uuid.uuid4().hex, due)
    assert created == 201, body
    assert project.processes.stop(admitting) == 0
    reader = project.start_service("serve-read", "--recovery-only")
    project.wait_healthy(reader, "serve-read")
    worker = project.start_worker()
    reads: Any = _follow(project, token, body["runId"])
    _ended_before_the_bound(reads)
    assert len(sandbox.messages()) == 1
    assert project.processes.stop(worker) == 0
    assert project.processes.stop(reader) == 0
