"""Run routes (06 §5): admission, list, status, inspection, a step's attempts, cancel,
retry-same, reconcile.

Each handler runs the checks of 06 §1 item 6 in order after Connexion's security layer has done
(1) the token and (2) the route's action: (3) run id and visibility, (4) media type and size,
(5) body, then the route's own steps, then the service call inside the audit bracket.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, Literal
from uuid import UUID

from starlette.responses import Response

from coordinator_api.audit import Audited
from coordinator_api.bodies import read_body
from coordinator_api.edge import RequestContext
from coordinator_api.handlers._shared import (
    REASON_CODES,
    caller_of,
    idempotency_key,
    json_reply,
    parse_run_id,
    reason_of,
    visible_run,
)
from coordinator_api.problems import ApiProblem
from coordinator_api.waits import ended
from coordinator_api.wire import (
    Body,
    ReasonRequest,
    StartRunRequest,
    attempt_page_body,
    inspection_body,
    reconcile_body,
    run_page_body,
    run_status_body,
)
from coordinator_core.shell.service import (
    AdmissionRequest,
    AuditRequest,
    Caller,
    RunQuery,
    RunStatusValue,
)
from coordinator_core.values import JsonBoundsError, check_json_value

__all__ = [
    "cancel_run",
    "get_run",
    "inspect_run",
    "list_runs",
    "list_step_attempts",
    "reconcile_run",
    "retry_same",
    "start_run",
]


async def start_run(token_info: dict[str, Any], coordinator: RequestContext) -> Response:
    """06 §5.1 steps 2–11. The worker loop that takes the new run is woken once the answer is
    sent (`RequestContext.after_answer`), not beside it."""
    caller = caller_of(token_info)
    state = coordinator.state
    async with Audited(state.journal, AuditRequest(action="admit", caller=caller)) as audit:
        body = read_body(coordinator.body, StartRunRequest)
        workflow, revision, run_input = body.workflow, body.revision, body.input
        if not caller.may("start", workflow):
            raise ApiProblem("coordinator.access.denied")
        if state.settings.recovery_only:
            raise ApiProblem("coordinator.command.recovery-only")
        if workflow != state.settings.workflow.workflow_id:
            raise ApiProblem("coordinator.command.workflow-absent")
        key = idempotency_key(coordinator)
        if key is None:
            raise ApiProblem("coordinator.command.start-key-invalid")
        try:
            check_json_value(run_input)
        except JsonBoundsError:
            raise ApiProblem("coordinator.command.input-invalid") from None
        admitted = await audit.act(
            functools.partial(state.service.admit, after_answer=coordinator.after_answer),
            AdmissionRequest(
                caller=caller,
                workflow=workflow,
                revision=revision,
                input=run_input,
                idempotency_key=key,
            ),
        )
        if not admitted.created:
            return json_reply(run_status_body(admitted.run), 200)
        location = f"/v1/runs/{admitted.run.run_id}"
        return json_reply(run_status_body(admitted.run), 201, {"Location": location})


async def list_runs(
    token_info: dict[str, Any],
    coordinator: RequestContext,
    limit: int = 20,
    cursor: str | None = None,
    status: RunStatusValue | None = None,
    workflow: str | None = None,
) -> Response:
    """06 §5.2 (the query parameters are validated by Connexion against the document)."""
    caller = caller_of(token_info)
    state = coordinator.state
    query = RunQuery(limit=limit, cursor=cursor, status=status, workflow=workflow)
    async with Audited(state.journal, AuditRequest(action="list", caller=caller)) as audit:
        page = await audit.act(state.service.list_runs, caller, query)
        return json_reply(run_page_body(page))


async def get_run(
    run: str,
    token_info: dict[str, Any],
    coordinator: RequestContext,
    wait: int = 0,
    seen: str | None = None,
) -> Response:
    """06 §5.3, with the waiting read (`wait`, `seen`: coordinator_api.waits); the query
    parameters are validated by Connexion against the document."""
    caller = caller_of(token_info)
    state = coordinator.state
    async with Audited(state.journal, AuditRequest(action="status", caller=caller)) as audit:
        run_id = parse_run_id(run)
        audit.note(run_id=run_id)
        await audit.begin()
        status = await visible_run(coordinator, caller, run_id, "status")
        if seen is not None and wait > 0 and status.fingerprint == seen and not ended(status):
            status = await state.waits.until_changed(
                caller, status, seen, wait, coordinator.receive
            )
        return json_reply(run_status_body(status), headers={"ETag": f'W/"{status.fingerprint}"'})


async def inspect_run(
    run: str, token_info: dict[str, Any], coordinator: RequestContext
) -> Response:
    """06 §5.4."""
    caller = caller_of(token_info)
    state = coordinator.state
    async with Audited(state.journal, AuditRequest(action="inspect", caller=caller)) as audit:
        run_id = parse_run_id(run)
        audit.note(run_id=run_id)
        inspection = await audit.act(state.service.inspect_run, caller, run_id)
        if inspection is None or not caller.may("inspect", inspection.run.run.workflow_id):
            raise ApiProblem("coordinator.command.run-absent")
        return json_reply(inspection_body(inspection))


async def list_step_attempts(
    run: str,
    step: str,
    token_info: dict[str, Any],
    coordinator: RequestContext,
    limit: int = 20,
    cursor: str | None = None,
) -> Response:
    """A step's ended attempts, a page at a time: the inspection's action and visibility, the
    step checked against the run's definition (the query parameters are validated by
    Connexion against the document)."""
    caller = caller_of(token_info)
    state = coordinator.state
    async with Audited(state.journal, AuditRequest(action="attempts", caller=caller)) as audit:
        run_id = parse_run_id(run)
        audit.note(run_id=run_id)
        page = await audit.act(state.service.step_attempts, caller, run_id, step, cursor, limit)
        if page is None:
            raise ApiProblem("coordinator.command.run-absent")
        return json_reply(attempt_page_body(run_id, step, page))


async def _run_command(
    run: str,
    token_info: dict[str, Any],
    coordinator: RequestContext,
    action: Literal["cancel", "retry-same", "reconcile"],
    call: Callable[[Audited, Caller, UUID, str], Awaitable[Body]],
) -> Response:
    """A run command with a `{reason}` body: steps (3), (4), (5), then the service call."""
    caller = caller_of(token_info)
    state = coordinator.state
    async with Audited(state.journal, AuditRequest(action=action, caller=caller)) as audit:
        run_id = parse_run_id(run)
        audit.note(run_id=run_id)
        await visible_run(coordinator, caller, run_id, action)
        body = read_body(coordinator.body, ReasonRequest, member_codes=REASON_CODES)
        reason = reason_of(body.reason)
        audit.note(reason=reason)
        return json_reply(await call(audit, caller, run_id, reason))


async def cancel_run(run: str, token_info: dict[str, Any], coordinator: RequestContext) -> Response:
    """06 §5.5."""
    service = coordinator.state.service

    async def call(audit: Audited, caller: Caller, run_id: UUID, reason: str) -> Body:
        return run_status_body(await audit.act(service.cancel, caller, run_id, reason))

    return await _run_command(run, token_info, coordinator, "cancel", call)


async def retry_same(run: str, token_info: dict[str, Any], coordinator: RequestContext) -> Response:
    """06 §5.6."""
    service = coordinator.state.service

    async def call(audit: Audited, caller: Caller, run_id: UUID, reason: str) -> Body:
        return run_status_body(await audit.act(service.retry_same, caller, run_id, reason))

    return await _run_command(run, token_info, coordinator, "retry-same", call)


async def reconcile_run(
    run: str, token_info: dict[str, Any], coordinator: RequestContext
) -> Response:
    """06 §5.7."""
    service = coordinator.state.service

    async def call(audit: Audited, caller: Caller, run_id: UUID, reason: str) -> Body:
        return reconcile_body(await audit.act(service.reconcile, caller, run_id, reason))

    return await _run_command(run, token_info, coordinator, "reconcile", call)
