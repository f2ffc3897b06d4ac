"""HTTP plumbing shared by every sandbox service: problem bodies, strict JSON bodies, dropping a
connection without an answer, and the 404/405 answers of unknown routes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from coordinator_sandbox.canonical import JsonParseError, parse_json_strict
from coordinator_sandbox.errors import ProblemError

__all__ = [
    "ConnectionControl",
    "DroppedResponse",
    "ProblemError",
    "http_exception_handler",
    "json_response",
    "problem_response",
    "read_json_body",
]

PROBLEM_TYPE_BASE = "https://id.registrystack.org/problems/sandbox/"
_ABORT_KEY = "coordinator_sandbox.abort"
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$")

_TITLES = {
    400: "Bad request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    410: "Gone",
    412: "Precondition failed",
    413: "Payload too large",
    415: "Unsupported media type",
    422: "Unprocessable content",
    429: "Too many requests",
    500: "Internal server error",
    503: "Service unavailable",
}


def _trace_id(request: Request | None) -> str | None:
    if request is None:
        return None
    match = _TRACEPARENT.match(request.headers.get("traceparent", ""))
    return match.group(1) if match else None


def json_response(
    body: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    """A JSON answer with `Cache-Control: no-store`."""
    all_headers = {"Cache-Control": "no-store", **(headers or {})}
    content = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return Response(content, status, all_headers, media_type="application/json")


def problem_response(error: ProblemError, request: Request | None = None) -> Response:
    """The problem body of file 08 §2.3: `{type, title, status, detail, code, traceId?}`."""
    body: dict[str, Any] = {
        "type": PROBLEM_TYPE_BASE + error.code.replace(".", "/"),
        "title": _TITLES.get(error.status, "Refused"),
        "status": error.status,
        "detail": error.detail or f"The sandbox answered {error.code}.",
        "code": error.code,
    }
    trace = _trace_id(request)
    if trace:
        body["traceId"] = trace
    body.update(error.extra)
    content = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    headers = {"Cache-Control": "no-store", **error.headers}
    return Response(content, error.status, headers, media_type="application/problem+json")


async def http_exception_handler(request: Request, exc: Exception) -> Response:
    """Unknown routes and methods answer problems too, so adapters classify them by code."""
    if isinstance(exc, HTTPException):
        headers = dict(exc.headers or {})
        return problem_response(ProblemError(exc.status_code, headers=headers), request)
    raise exc


def _is_json_media_type(value: str) -> bool:
    media = value.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


async def read_raw_body(request: Request, maximum_bytes: int) -> bytes:
    """The request body, refused with 413 once it exceeds `maximum_bytes`."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > maximum_bytes:
        raise ProblemError(413, "request.body-too-large")
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > maximum_bytes:
                raise ProblemError(413, "request.body-too-large")
            chunks.append(chunk)
    except ClientDisconnect:
        # The client went away mid-body (a killed caller): nothing to do, nobody to answer.
        raise ProblemError(400, "request.invalid", "The body was not sent whole.") from None
    return b"".join(chunks)


async def read_json_body(request: Request, maximum_bytes: int = 262_144) -> Any:
    """A strict JSON body: JSON media type (415), size (413), syntax and duplicates (400)."""
    if not _is_json_media_type(request.headers.get("content-type", "")):
        raise ProblemError(415, "request.unsupported-media-type")
    raw = await read_raw_body(request, maximum_bytes)
    try:
        return parse_json_strict(raw)
    except JsonParseError as exc:
        raise ProblemError(400, "request.invalid", "The body is not strict JSON.") from exc


class DroppedResponse(Response):
    """Closes the connection without writing any answer: the client sees the server hang up."""

    def __init__(self) -> None:
        super().__init__(b"", 200)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        abort: Callable[[], None] | None = scope.get(_ABORT_KEY)
        if abort is None:
            raise RuntimeError("the server does not expose its transport; cannot drop")
        abort()


class ConnectionControl:
    """Outermost ASGI layer: lets a handler close its connection without answering.

    Uvicorn's `send` is a bound method of its request cycle, which holds the transport; closing
    the transport and marking the cycle disconnected makes uvicorn write nothing more (no 500).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            cycle = getattr(send, "__self__", None)
            transport = getattr(cycle, "transport", None)
            if cycle is not None and transport is not None and hasattr(cycle, "disconnected"):
                request_cycle: Any = cycle

                def abort() -> None:
                    request_cycle.disconnected = True
                    transport.close()

                scope[_ABORT_KEY] = abort
        await self.app(scope, receive, send)


Handler = Callable[[Request], Awaitable[Response]]


def problems(handler: Handler) -> Handler:
    """Turn a raised ProblemError into its problem answer."""

    async def wrapped(request: Request) -> Response:
        try:
            return await handler(request)
        except ProblemError as error:
            return problem_response(error, request)

    wrapped.__name__ = handler.__name__
    wrapped.__doc__ = handler.__doc__
    return wrapped
