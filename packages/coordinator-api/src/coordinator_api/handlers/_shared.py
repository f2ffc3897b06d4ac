"""What several handlers share: replies, the caller, run ids, visibility and reasons."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Mapping
from typing import Any, Final

from starlette.responses import Response

from coordinator_api.edge import RequestContext
from coordinator_api.limits import IDEMPOTENCY_KEY_MAX_CHARACTERS, REASON_MAX_BYTES
from coordinator_api.problems import ApiProblem
from coordinator_api.wire import Body, encode
from coordinator_core.shell.service import Caller, RunStatus

__all__ = [
    "REASON_CODES",
    "caller_of",
    "json_reply",
    "parse_run_id",
    "reason_of",
    "visible_run",
]

JSON_MEDIA_TYPE: Final = "application/json"
REASON_CODES: Final[Mapping[str, str]] = {"reason": "coordinator.command.reason-invalid"}
_VISIBLE_ASCII: Final = re.compile(rf"[\x21-\x7e]{{1,{IDEMPOTENCY_KEY_MAX_CHARACTERS}}}")


def json_reply(body: Body, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    """A JSON success response of a spec model, with an explicit Content-Type (STACK.md P1)."""
    return Response(
        content=encode(body),
        status_code=status,
        headers={"Content-Type": JSON_MEDIA_TYPE, **(headers or {})},
    )


def empty_reply(status: int = 204) -> Response:
    return Response(status_code=status)


def caller_of(token_info: Mapping[str, Any]) -> Caller:
    caller = token_info["caller"]
    assert isinstance(caller, Caller)
    return caller


def parse_run_id(text: str) -> uuid.UUID:
    """Any textual UUID form (06 §1 item 5); anything else answers like an absent run."""
    if len(text) > 64:
        raise ApiProblem("coordinator.command.run-absent")
    try:
        return uuid.UUID(text)
    except ValueError:
        raise ApiProblem("coordinator.command.run-absent") from None


async def visible_run(
    context: RequestContext, caller: Caller, run_id: uuid.UUID, action: str
) -> RunStatus:
    """06 §1 item 6 step (3): the run, if the caller may see it and act on its workflow."""
    run = await asyncio.to_thread(context.state.service.get_run, caller, run_id)
    if run is None or not caller.may(action, run.run.workflow_id):
        raise ApiProblem("coordinator.command.run-absent")
    return run


def reason_of(reason: str) -> str:
    """A body's `reason`, 1–256 bytes of UTF-8 (the schema bounds characters)."""
    if len(reason.encode("utf-8")) > REASON_MAX_BYTES:
        raise ApiProblem("coordinator.command.reason-invalid")
    return reason


def idempotency_key(context: RequestContext) -> str | None:
    """The single well-formed `Idempotency-Key` header, or None."""
    values = context.header("idempotency-key")
    if len(values) != 1 or not _VISIBLE_ASCII.fullmatch(values[0]):
        return None
    return values[0]
