"""`GET /health`, `GET /ready` (06 §10) and `GET /metrics` (06 §14): unauthenticated, not audited."""

from __future__ import annotations

import asyncio
import logging

from starlette.responses import Response

from coordinator_api.edge import RequestContext
from coordinator_api.handlers._shared import json_reply
from coordinator_api.wire import Liveness, Readiness
from coordinator_core.shell.observe import metrics

__all__ = ["get_health", "get_metrics", "get_ready"]

logger = logging.getLogger("coordinator_api")


async def get_health(coordinator: RequestContext) -> Response:
    return json_reply(Liveness(live=True))


async def get_ready(coordinator: RequestContext) -> Response:
    """Recovery-only mode is never ready; the rest is the service's verdict. Not ready names
    why (`code`; 09 §5 step 7: `coordinator.command.store-unavailable` while the store is
    away)."""
    if coordinator.state.settings.recovery_only:
        code: str | None = "coordinator.command.recovery-only"
    else:
        try:
            code = await asyncio.to_thread(coordinator.state.service.ready)
        except Exception:  # a failing check is a "not ready", never a 500
            logger.warning("readiness check failed")
            code = "coordinator.request.internal-error"
    if code is None:
        return json_reply(Readiness(ready=True))
    return json_reply(Readiness(ready=False, code=code), 503)


async def get_metrics(coordinator: RequestContext) -> Response:
    """The process's metrics (`coordinator_core.shell.observe.metrics`); the exposition reads the store
    gauges, so it is made in a worker thread, never on the event loop."""
    body = await asyncio.to_thread(metrics.exposition)
    return Response(content=body, status_code=200, headers={"Content-Type": metrics.CONTENT_TYPE})
