"""`GET /v1/workflow` (06 §6): the active workflow, from the settings."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from coordinator_api.audit import Audited
from coordinator_api.edge import RequestContext
from coordinator_api.handlers._shared import caller_of, json_reply
from coordinator_api.problems import ApiProblem
from coordinator_api.wire import workflow_body
from coordinator_core.shell.service import AuditRequest

__all__ = ["get_workflow"]


async def get_workflow(token_info: dict[str, Any], coordinator: RequestContext) -> Response:
    caller = caller_of(token_info)
    workflow = coordinator.state.settings.workflow
    entry = AuditRequest(action="workflow-read", caller=caller)
    async with Audited(coordinator.state.journal, entry) as audit:
        if not caller.may("status", workflow.workflow_id):
            raise ApiProblem("coordinator.access.denied")
        await audit.begin()
        return json_reply(workflow_body(workflow))
