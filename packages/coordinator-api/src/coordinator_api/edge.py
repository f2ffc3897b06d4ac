"""The outermost ASGI layer: what holds for every request and every response (06 §1).

* Unknown paths answer `404 coordinator.request.not-found`, known paths with an undocumented
  method `405 coordinator.request.method-not-allowed` with the complete `Allow` header.
* The body is read here, at most 65,536 bytes (a larger declared or streamed body is not read
  further and is marked too large); handlers decide 413 at their point in the order of checks.
  A client that goes away before its body is complete has nothing handled.
* The media type is classified here from the original `Content-Type`; Connexion is then handed
  `application/json` (or nothing), so that neither its media-type check nor its form parsing
  runs before access and visibility have been decided (06 §1 item 6).
* Every response gets `Cache-Control: no-store` and the recommended security headers.
* What a handler asked to run once its answer is sent (`RequestContext.after_answer`: the
  wake-up of the loop an admission handed its run to) runs here, after the response's last
  byte was handed to the server, or when the request ends without one.
* A well-formed W3C `traceparent` is accepted and kept on the request context; with tracing
  on (`coordinator_core.shell.observe.tracing`), the request's span, named by its operationId, is its
  child (the caller's `tracestate` is not taken).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coordinator_api.bodies import BodyCapture
from coordinator_api.events import request_target
from coordinator_api.limits import BODY_MAX_BYTES
from coordinator_api.problems import problem_response
from coordinator_api.spec import RouteTable
from coordinator_core.shell.observe import tracing

if TYPE_CHECKING:
    from coordinator_api.app_state import AppState

__all__ = ["CONTEXT_KEY", "SECURITY_HEADERS", "EdgeMiddleware", "RequestContext"]

CONTEXT_KEY: Final = "coordinator"
"""The key of the request context in Connexion's context (handlers take it as a parameter)."""

SECURITY_HEADERS: Final = (
    (b"cache-control", b"no-store"),
    (b"x-content-type-options", b"nosniff"),
    (b"content-security-policy", b"default-src 'none'"),
    (b"referrer-policy", b"no-referrer"),
)
logger = logging.getLogger("coordinator_api")
_TRACEPARENT: Final = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")


@dataclass(slots=True)
class RequestContext:
    """Per-request state shared by the security functions and the handlers."""

    state: AppState
    body: BodyCapture
    raw_headers: list[tuple[bytes, bytes]]
    method: bytes
    target: bytes
    traceparent: str | None = None
    receive: Receive | None = None
    """The request's ASGI `receive` once its body was read: what is left to hear is the
    client going away (`http.disconnect`), which a waiting status read listens for."""
    answered: list[Callable[[], None]] = field(default_factory=list)

    def after_answer(self, action: Callable[[], None]) -> None:
        """Run `action` once the answer is sent, or the request ended without one (any
        thread may call this while the request is handled)."""
        self.answered.append(action)

    def ran_answered(self) -> None:
        """The edge, once the request is over: every action, whatever the others raise (what
        one raises is logged)."""
        actions, self.answered = self.answered, []
        for action in actions:
            try:
                action()
            except Exception as error:  # the answer is sent: nothing is left to tell the caller
                logger.error("an action after the answer failed: %s", type(error).__name__)

    def header(self, name: str) -> list[str]:
        """Every value of header `name` (latin-1 decoded, as HTTP defines header bytes)."""
        wanted = name.lower().encode("latin-1")
        return [value.decode("latin-1") for key, value in self.raw_headers if key == wanted]


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return bytes(value)
    return None


async def _read_body(scope: Scope, receive: Receive) -> tuple[bytes, bool] | None:
    """The body and whether it is too large; None when the client went away before its body
    was complete (a truncated body is never handled: it might even parse)."""
    declared = _header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > BODY_MAX_BYTES:
        return b"", True
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        body.extend(message.get("body", b""))
        if len(body) > BODY_MAX_BYTES:
            return b"", True
        if not message.get("more_body", False):
            return bytes(body), False


def _replay(body: bytes, receive: Receive) -> Receive:
    delivered = False

    async def replay() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        while True:  # after the body only the disconnect matters; drop unread body chunks
            message = await receive()
            if message["type"] != "http.request":
                return message

    return replay


def _with_headers(send: Send) -> Send:
    async def send_with_headers(message: Message) -> None:
        if message["type"] == "http.response.start":
            names = {name for name, _ in SECURITY_HEADERS}
            headers = [
                (bytes(name).lower(), bytes(value))
                for name, value in message.get("headers", [])
                if bytes(name).lower() not in names
            ]
            message = {**message, "headers": [*headers, *SECURITY_HEADERS]}
        await send(message)

    return send_with_headers


class EdgeMiddleware:
    """The outermost layer of the app (see the module docstring)."""

    def __init__(self, app: ASGIApp, *, state: AppState) -> None:
        self.app = app
        self.state = state
        self.routes: RouteTable = state.routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = _with_headers(send)
        route = self.routes.match(scope["path"])
        if route is None:
            await problem_response("coordinator.request.not-found")(scope, receive, send)
            return
        if scope["method"] not in route.methods:
            response = problem_response(
                "coordinator.request.method-not-allowed", headers={"Allow": route.allow}
            )
            await response(scope, receive, send)
            return
        read = await _read_body(scope, receive)
        if read is None:
            return  # nobody is left to answer, and nothing half-sent is acted on
        data, too_large = read
        content_type = _header(scope, b"content-type")
        traceparent = _header(scope, b"traceparent")
        raw_path = scope.get("raw_path") or scope["path"].encode("utf-8")
        query = scope.get("query_string", b"")
        context = RequestContext(
            state=self.state,
            body=BodyCapture(
                data=data,
                too_large=too_large,
                content_type=None if content_type is None else content_type.decode("latin-1"),
            ),
            raw_headers=[(bytes(k).lower(), bytes(v)) for k, v in scope.get("headers", [])],
            method=scope["method"].encode("ascii"),
            target=request_target(bytes(raw_path), bytes(query)),
            traceparent=(
                traceparent.decode("latin-1")
                if traceparent is not None and _TRACEPARENT.match(traceparent.decode("latin-1"))
                else None
            ),
        )
        replayed = _replay(data, receive)
        context.receive = replayed
        downstream: MutableMapping[str, Any] = dict(scope)
        downstream["headers"] = [
            (key, b"application/json" if bytes(key).lower() == b"content-type" else value)
            for key, value in scope.get("headers", [])
        ]
        extensions = dict(scope.get("extensions") or {})
        extensions["connexion_context"] = {CONTEXT_KEY: context}
        downstream["extensions"] = extensions
        try:
            if not tracing.enabled():
                await self.app(downstream, replayed, send)
                return
            with tracing.request(
                route.operation_ids[scope["method"]],
                scope["method"],
                route.template,
                context.traceparent,
            ) as span:
                await self.app(downstream, replayed, _observed(send, span))
        finally:
            context.ran_answered()


def _observed(send: Send, span: object) -> Send:
    """`send`, telling the request's span the response status."""

    async def send_observed(message: Message) -> None:
        if message["type"] == "http.response.start":
            tracing.responded(span, int(message["status"]))
        await send(message)

    return send_observed


def context_of(request: Any) -> RequestContext:
    """The request context from a Connexion request (security functions)."""
    context = request.context[CONTEXT_KEY]
    assert isinstance(context, RequestContext)
    return context
