"""ARCHITECTURE rule 3 on the API side: `coordinator_api.wire` builds every answer as the spec's
generated model, so an off-contract value never reaches the wire (request bodies are read as
theirs by `coordinator_api.bodies`: tests/api/test_api_bodies.py)."""

from __future__ import annotations

import dataclasses
import json
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
from api_fakes import FakeRunService, SigningKeys, bearer
from pydantic import ValidationError
from test_api_contract import start

from coordinator_api import wire
from coordinator_core.engine import RunState
from coordinator_core.shell.service import RunStatus
from coordinator_core.shell.store import StoredRun

pytestmark = pytest.mark.anyio

NOW = datetime(2026, 3, 2, 9, 0, 0, 123_456, tzinfo=UTC)
NOW_MS = (NOW - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)
CANARY = "canary-e7c1"


def _run(**changes: Any) -> RunStatus:
    """A run's status; `changes` by the names of its 06 §11.1 members' fields (a state field,
    a run field, or the status's own `next_due_at`, `uncertain`, `output`)."""
    state = RunState(
        status="running",
        current_step="read-application",
        admitted_at=NOW_MS,
        deadline_at=NOW_MS,
        input=None,
    )
    run = StoredRun(
        run_id=uuid.UUID("0b8f4f5e-8a0a-4c55-9d3b-3b2f4f9a7d10"),
        start_identity="a" * 64,
        input_digest="b" * 64,
        owner="c" * 64,
        origin="api",
        trigger=None,
        workflow_id="reviewed-notice",
        workflow_version="1",
        revision="sha256:" + "a" * 64,
        definition_digest="sha256:" + "b" * 64,
        binding_digest="sha256:" + "c" * 64,
        state=state,
    )
    own = {
        name: changes.pop(name)
        for name in ("next_due_at", "uncertain", "output")
        if name in changes
    }
    run_fields = {f.name for f in dataclasses.fields(StoredRun)}
    run_changes = {name: value for name, value in changes.items() if name in run_fields}
    state_changes = {name: value for name, value in changes.items() if name not in run_fields}
    run = dataclasses.replace(run, state=dataclasses.replace(state, **state_changes), **run_changes)
    return RunStatus(run=run, **own)


def test_a_run_renders_with_the_spec_member_names_and_millisecond_timestamps() -> None:
    body = wire.encode(wire.run_status_body(_run()))
    assert body.startswith(b'{"runId":"0b8f4f5e-8a0a-4c55-9d3b-3b2f4f9a7d10","workflowId"')
    assert b'"admittedAt":"2026-03-02T09:00:00.123Z"' in body
    # Required members that are null are present; none is left out.
    assert b'"completedAt":null' in body and b'"trigger":null' in body


def test_an_instant_on_a_whole_second_keeps_its_milliseconds() -> None:
    """Pydantic's own rendering of a datetime drops a zero fraction (`…:00Z`); the models'
    `Instant` writes `.000Z`, and a later instant in another offset is written in UTC."""
    second = (NOW_MS // 1000) * 1000
    body = json.loads(wire.encode(wire.run_status_body(_run(admitted_at=second))))
    assert body["admittedAt"] == "2026-03-02T09:00:00.000Z"
    assert body["deadlineAt"] == "2026-03-02T09:00:00.123Z"
    shifted = datetime(2026, 3, 2, 11, 0, 0, 5_000, tzinfo=timezone(timedelta(hours=2)))
    assert (
        wire.RunStatus.model_validate({**body, "admittedAt": shifted})
        .model_dump_json(by_alias=True)
        .count('"admittedAt":"2026-03-02T09:00:00.005Z"')
        == 1
    )


def test_an_output_of_any_text_renders_and_reads_back_the_same() -> None:
    """Non-ASCII text is written as UTF-8; a lone surrogate (which a JSON input's escapes can
    carry, and pydantic cannot write as UTF-8) is written ASCII-escaped rather than failing."""
    for output in (
        {"name": "Ærø \u2028 日本"},
        {"name": "\ud800 alone"},
        {"n": 1.5e-7, "big": 10**30},
    ):
        body = wire.encode(wire.run_status_body(_run(output=output)))
        assert json.loads(body)["output"] == output


@pytest.mark.parametrize(
    "changes",
    [
        {"status": "paused"},
        {"failure_code": "made-up-failure"},
        {"origin": "cron"},
    ],
)
def test_an_off_contract_word_fails_at_the_boundary(changes: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        wire.run_status_body(_run(**changes))


@pytest.mark.parametrize(
    "changes",
    [
        {"revision": "md5:" + CANARY},
        {"current_step": "Not-A-Local-Id"},
        {"workflow_version": ""},
        {"outcome": CANARY.upper()},
        {"trigger": "Not-A-Local-Id"},
    ],
)
def test_an_off_contract_value_fails_validation(changes: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        wire.run_status_body(_run(**changes))


def test_optional_members_appear_only_when_set() -> None:
    problem = wire.problem(
        type_uri="https://id.registrystack.org/problems/registry-coordinator/command/run-absent",
        title="Run not found",
        status=404,
        detail="x",
        code="coordinator.command.run-absent",
        suggested_action=None,
    )
    assert b'"reason"' not in wire.encode(problem)
    assert b'"suggestedAction":null' in wire.encode(problem)
    refused = wire.problem(
        type_uri="https://id.registrystack.org/problems/registry-coordinator/command/retry-refused",
        title="Retry refused",
        status=409,
        detail="x",
        code="coordinator.command.retry-refused",
        suggested_action=None,
        reason="terminal",
    )
    assert wire.encode(refused).endswith(b'"reason":"terminal"}')


async def test_an_off_contract_answer_is_an_internal_error_without_the_value(
    client: httpx.AsyncClient, keys: SigningKeys, service: FakeRunService
) -> None:
    run_id = uuid.UUID((await start(client, keys)).json()["runId"])
    stored = service.runs[run_id]
    run = stored.status.run
    state = dataclasses.replace(run.state, outcome=CANARY.upper())
    stored.status = dataclasses.replace(stored.status, run=dataclasses.replace(run, state=state))
    response = await client.get(f"/v1/runs/{run_id}", headers=bearer(keys))
    assert response.status_code == 500
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == "coordinator.request.internal-error"
    assert CANARY.upper().encode() not in response.content


async def test_inspect_names_why_a_mapping_stopped_a_step(
    client: httpx.AsyncClient, keys: SigningKeys, service: FakeRunService
) -> None:
    """Issue 26: a step a mapping stopped carries `mappingFailure` (the detailed code, the
    cause class, the function, the statement's position; a choose's label when it is an
    identifier and the declared labels), read from the record's stored detail, and only the
    members it has."""
    from coordinator_core.engine import StepRecord
    from coordinator_core.engine.detail import FailureDetail
    from coordinator_core.shell.service import Caller, StepStatus

    run_id = uuid.UUID((await start(client, keys)).json()["runId"])
    workflow = service.runs[run_id].status.run.workflow_id
    operator = Caller("issuer", "subject", "client", True, frozenset({workflow}), frozenset())
    inspection = service.inspect_run(operator, run_id)
    assert inspection is not None
    entered = inspection.run.run.state.admitted_at

    def stopped(step: str, code: str, detail: FailureDetail) -> StepStatus:
        record = StepRecord(
            step=step,
            type="choose",
            state="dead-lettered",
            entered_at=entered,
            finished_at=entered,
            failure_code=code,
            detail=detail.text(),  # as the engine records it, and the store keeps it
        )
        return StepStatus(record=record)

    failed_call = FailureDetail(
        "coordinator.function.execution", "property-of-unit", "eligibility_route", 3, 5
    )
    branch = FailureDetail.of_branch("renewl", ("renew", "new"))
    steps = [
        stopped("route", "choice-invalid", branch),
        stopped("decide", "mapping-invalid", failed_call),
    ]
    body = wire.inspection_body(dataclasses.replace(inspection, steps=steps))
    rendered = json.loads(wire.encode(body))
    assert [step["mappingFailure"] for step in rendered["steps"]] == [
        {"code": "coordinator.mapping.branch", "label": "renewl", "labels": ["renew", "new"]},
        {
            "code": "coordinator.function.execution",
            "cause": "property-of-unit",
            "function": "eligibility_route",
            "line": 3,
            "column": 5,
        },
    ]
