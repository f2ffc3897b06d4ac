"""`POST /v1/review-completions` (06 §9): Casework completion events.

The bearer secret was matched by the security layer (`token_info["connection"]`). Nothing from
the body is stored or returned; the request id only selects the waits to observe sooner.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from coordinator_api.audit import Audited
from coordinator_api.bodies import read_body
from coordinator_api.edge import RequestContext
from coordinator_api.handlers._shared import empty_reply
from coordinator_api.wire import ReviewCompletion
from coordinator_core.shell.service import AuditRequest

__all__ = ["review_completed"]


async def review_completed(token_info: dict[str, Any], coordinator: RequestContext) -> Response:
    state = coordinator.state
    connection = token_info["connection"]
    assert isinstance(connection, str)
    # The journal entry names the Casework request, so it starts once the body is read.
    body = read_body(coordinator.body, ReviewCompletion)
    request_id = body.request_id
    entry = AuditRequest(action="review-completion", connection=connection, request_id=request_id)
    async with Audited(state.journal, entry) as audit:
        await audit.act(state.service.complete_review, connection, request_id)
        return empty_reply(204)
