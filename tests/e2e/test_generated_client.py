"""A contract-driven consumer (issue 12 item 5): openapi-python-client generates a client from
the document a live `coordinator serve` answers at `/openapi.json`, and that client alone drives
`examples/reviewed-notice` against the sandbox: the workflow, a start and its replay, status,
inspect, a signed event and its redelivery, list pagination and a cancel.

Every call goes through a generated function named after its operationId and every answer is
parsed by a generated model and must round-trip unchanged (`to_dict()` equals the JSON the
service sent), so a renamed operationId, a dropped, added or renamed member, or an operation
the generator had to skip fails here.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from importlib.resources import files
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
from e2e_support import Project
from support.needs import unavailable

from coordinator_sandbox.delivery import delivery_signature
from coordinator_sandbox.testing import Processes, wait_for

OPERATIONS = {
    "getHealth", "getReady", "getMetrics", "getWorkflow", "startRun", "listRuns", "getRun", "inspectRun",
    "listStepAttempts", "cancelRun", "retrySame", "reconcileRun", "getDoctor", "setRestoreHold",
    "releaseRestoreHold", "releaseAdmissionHold", "retainRuns", "admitEvent", "reviewCompleted",
}  # fmt: skip
PACKAGE = "coordinator_client"
EVENT_SOURCE = "urn:registrystack:registry:example:instance:primary"
RUN_TIMEOUT = 30.0


def _snake(operation_id: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", operation_id).lower()


@pytest.fixture
def notice(tmp_path: Path, processes: Processes) -> Project:
    project = Project.create(tmp_path, processes, example="reviewed-notice")
    text = project.runtime.read_text()
    project.runtime.write_text(text[: text.index("deployment:\n")])  # write_runtime adds ours
    return project


def _generator() -> str:
    found = shutil.which("openapi-python-client", path=str(Path(sys.executable).parent))
    found = found or shutil.which("openapi-python-client")
    if found is None:
        unavailable("openapi-python-client is not installed here", "a test tool of `nox -s tests`")
    return found


@pytest.fixture
def generated(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    root = tmp_path / "generated-client"
    root.mkdir()
    sys.path.insert(0, str(root))
    try:
        yield root, _generator()
    finally:
        sys.path.remove(str(root))
        for name in [name for name in sys.modules if name.split(".")[0] == PACKAGE]:
            del sys.modules[name]


def _generate(document: bytes, root: Path, generator: str) -> ModuleType:
    source = root.parent / "served-openapi.json"
    source.write_bytes(document)
    done = subprocess.run(
        [generator, "generate", "--path", str(source), "--meta", "none",
         "--output-path", str(root / PACKAGE)],
        capture_output=True, text=True, timeout=300, check=False,
        # Its post-generation hooks run `ruff` (a dependency of the generator) from PATH.
        env={**os.environ, "PATH": f"{Path(generator).parent}{os.pathsep}{os.environ['PATH']}"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    # The generator reports what it could not turn into code (and then leaves it out).
    assert "warning" not in (done.stdout + done.stderr).lower(), done.stdout + done.stderr
    importlib.invalidate_caches()
    return importlib.import_module(PACKAGE)


def _equivalent(mine: Any, sent: Any) -> bool:
    """The same JSON, an instant written another way (`…+00:00` for `…Z`) counting as equal."""
    if isinstance(mine, dict) and isinstance(sent, dict):
        return mine.keys() == sent.keys() and all(_equivalent(mine[k], sent[k]) for k in mine)
    if isinstance(mine, list) and isinstance(sent, list):
        return len(mine) == len(sent) and all(map(_equivalent, mine, sent))
    if isinstance(mine, str) and isinstance(sent, str) and mine != sent:
        try:
            return datetime.fromisoformat(mine) == datetime.fromisoformat(sent)
        except ValueError:
            return False
    return bool(mine == sent and type(mine) is type(sent))


def _parsed(response: Any, status: int) -> Any:
    """The generated model of an answer with `status`, which must round-trip: every member the
    service sent is one the model knows, and nothing the model requires is missing."""
    assert response.status_code == status, response.content
    sent = json.loads(response.content)
    assert _equivalent(response.parsed.to_dict(), sent), (response.parsed.to_dict(), sent)
    return response.parsed


def _signer(key: bytes) -> Callable[[httpx.Request], None]:
    """An httpx request hook: the sender's v1 delivery signature (05 §7.1) over the very bytes
    and headers the generated client sends to the event route."""

    def sign(request: httpx.Request) -> None:
        if not request.url.path.startswith("/v1/events/"):
            return
        headers = request.headers
        request.headers["X-Registry-Signature"] = delivery_signature(
            key,
            ce_id=headers["ce-id"],
            ce_source=headers["ce-source"],
            ce_type=headers["ce-type"],
            ce_time=headers["ce-time"],
            ce_dataschema=headers.get("ce-dataschema", ""),
            generation=headers["X-Registry-Event-Generation"],
            attempt=headers["X-Registry-Delivery-Attempt"],
            delivery_time=headers["X-Registry-Delivery-Time"],
            method=request.method,
            target=request.url.raw_path.decode("ascii"),
            content_type=headers["content-type"],
            idempotency_key=headers["Idempotency-Key"],
            body=request.content,
        )

    return sign


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_generated_client_drives_runs_through_the_served_document(
    notice: Project, generated: tuple[Path, str]
) -> None:
    project = notice
    sandbox = project.start_sandbox(("identity", "breg", "casework", "messaging"))
    text = project.runtime.read_text()
    project.runtime.write_text(text.replace("http://127.0.0.1:8102", sandbox.url("casework")))
    project.write_runtime(sandbox)
    assert project.deploy_ctl("migrate")["status"] == "migrated"
    assert project.deploy_ctl("apply", "--reference", "E2E-CLIENT")["status"] == "applied"
    serve = project.start_service()
    project.wait_healthy(serve)
    token = project.token_file().read_text().strip()

    # The served document: no token, the shipped bytes, the same as `coordinatorctl openapi`.
    served = httpx.get(project.origin + "/openapi.json", timeout=10)
    assert served.status_code == 200
    assert served.content == files("coordinator_models").joinpath("openapi.json").read_bytes()
    printed = subprocess.run(
        [sys.executable, "-m", "coordinatorctl", "openapi", "--url", project.origin,
         "--format", "json"],
        capture_output=True, timeout=60, check=True, env=project.env,
    ).stdout  # fmt: skip
    assert printed == served.content
    explorer = httpx.get(project.origin + "/docs", timeout=10)
    assert explorer.status_code == 200 and "/docs/swagger-ui-bundle.js" in explorer.text
    assert explorer.headers["content-security-policy"].startswith("default-src 'none'; script-src")
    document = served.json()
    tags = {
        operation["operationId"]: operation["tags"][0]
        for item in document["paths"].values()
        for operation in item.values()
        if isinstance(operation, dict) and "operationId" in operation
    }
    assert set(tags) == OPERATIONS

    root, generator = generated
    client_package = _generate(served.content, root, generator)
    # Every operation became a module named after its operationId, under its tag.
    api = {
        operation_id: importlib.import_module(f"{PACKAGE}.api.{tag}.{_snake(operation_id)}")
        for operation_id, tag in tags.items()
    }
    models = importlib.import_module(f"{PACKAGE}.models")
    event_key = (project.secrets / "applications-events.key").read_bytes()
    client = client_package.AuthenticatedClient(
        base_url=project.origin,
        token=token,
        raise_on_unexpected_status=True,
        httpx_args={"event_hooks": {"request": [_signer(event_key)]}},
    )
    anonymous = client_package.Client(base_url=project.origin, raise_on_unexpected_status=True)

    health = _parsed(api["getHealth"].sync_detailed(client=anonymous), 200)
    assert health.live is True
    info = _parsed(api["getWorkflow"].sync_detailed(client=client), 200)
    assert (info.workflow_id, info.revision) == ("reviewed-notice", project.revision)
    assert list(info.triggers) == ["application-submitted"]

    applications = [str(uuid.uuid4()) for _ in range(3)]
    for application in applications:
        sandbox.seed_record(
            "applications",
            application,
            {"applicantName": "A. Applicant", "category": "standard",
             "contactEmail": "applicant@example.org"},
        )  # fmt: skip

    def start(application: str, key: str) -> Any:
        return api["startRun"].sync_detailed(
            client=client,
            idempotency_key=key,
            body=models.StartRunRequest(
                workflow="reviewed-notice",
                revision=project.revision,
                input_={"applicationId": application},
            ),
        )

    key = uuid.uuid4().hex
    first = _parsed(start(applications[0], key), 201)
    replay = _parsed(start(applications[0], key), 200)
    assert replay.run_id == first.run_id and first.workflow_id == "reviewed-notice"
    reused = start(applications[1], key)  # the same key with another input
    assert reused.status_code == 409
    assert reused.parsed.code == "idempotency.key-reused"
    second = _parsed(start(applications[1], uuid.uuid4().hex), 201)

    status = _parsed(api["getRun"].sync_detailed(first.run_id, client=client), 200)
    assert status.run_id == first.run_id and status.revision == project.revision
    inspection = _parsed(api["inspectRun"].sync_detailed(first.run_id, client=client), 200)
    assert inspection.run.run_id == first.run_id
    absent = api["getRun"].sync_detailed(uuid.uuid4(), client=client)
    assert absent.status_code == 404 and absent.parsed.code == "coordinator.command.run-absent"

    # A signed event admits the third run; its redelivery answers the same run.
    body = {"entity": "application", "recordIdentifier": applications[2]}
    event_id = str(uuid.uuid4())

    def deliver(attempt: int) -> Any:
        return api["admitEvent"].sync_detailed(
            "reviewed-notice",
            "application-submitted",
            client=client,
            body=body,
            ce_specversion=models.AdmitEventCeSpecversion("1.0"),
            ce_id=event_id,
            ce_source=EVENT_SOURCE,
            ce_type="application-submitted-v1",
            ce_time=_now(),
            x_registry_event_generation="1",
            x_registry_delivery_attempt=str(attempt),
            x_registry_delivery_time=_now(),
            idempotency_key=f"delivery-{event_id}",
            x_registry_signature="v1=" + "A" * 43,  # replaced by the signing hook
        )

    admitted = _parsed(deliver(1), 201)
    redelivered = _parsed(deliver(2), 200)
    assert redelivered.run_id == admitted.run_id
    third = _parsed(api["getRun"].sync_detailed(admitted.run_id, client=client), 200)
    assert third.origin.value == "event"

    # Pagination: one run per page, newest first, every run exactly once.
    seen: list[Any] = []
    cursor: Any = client_package.types.UNSET
    while True:
        page = _parsed(api["listRuns"].sync_detailed(client=client, limit=1, cursor=cursor), 200)
        assert len(page.runs) <= 1
        seen.extend(run.run_id for run in page.runs)
        if not isinstance(page.next_cursor, str):
            break
        cursor = page.next_cursor
    assert sorted(map(str, seen)) == sorted(
        map(str, [first.run_id, second.run_id, admitted.run_id])
    )
    assert str(seen[0]) == str(admitted.run_id)  # the newest first

    cancelled = _parsed(
        api["cancelRun"].sync_detailed(
            first.run_id, client=client, body=models.ReasonRequest(reason="E2E-CLIENT-1")
        ),
        200,
    )
    assert cancelled.cancel_requested is True or cancelled.status.value == "cancelled"

    def settled() -> Any:
        run = api["getRun"].sync_detailed(first.run_id, client=client).parsed
        return run if run.status.value in ("cancelled", "cancelled-after-effect") else None

    assert wait_for(settled, RUN_TIMEOUT, "the cancelled run to settle", 0.2)
    assert project.processes.stop(serve) == 0
