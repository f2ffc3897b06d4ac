"""`GET /health` and `GET /ready` (06 §10): unauthenticated, not audited."""

from __future__ import annotations

import logging

from starlette.responses import Response

from coordinator_api.edge import RequestContext
from coordinator_api.handlers._shared import json_reply

__all__ = ["get_health", "get_ready"]

logger = logging.getLogger("coordinator_api")


async def get_health(coordinator: RequestContext) -> Response:
    return json_reply({"live": True})


async def get_ready(coordinator: RequestContext) -> Response:
    """Recovery-only mode is never ready; the rest is the service's verdict. Not ready names
    why (`code`; 09 §5 step 7: `coordinator.command.store-unavailable` while the store is
    away)."""
    if coordinator.state.settings.recovery_only:
        code: str | None = "coordinator.command.recovery-only"
    else:
        try:
            code = await coordinator.state.service.ready()
        except Exception:  # a failing check is a "not ready", never a 500
            logger.warning("readiness check failed")
            code = "coordinator.request.internal-error"
    if code is None:
        return json_reply({"ready": True})
    return json_reply({"ready": False, "code": code}, 503)
