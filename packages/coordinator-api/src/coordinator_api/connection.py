"""The connection guard of `coordinator serve` (docs/operations.md, "HTTP edge limits"): the shared guard
(`coordinator_core.shell.runtime.guard`) with the service's bounds (`limits`, the listener's
per-peer caps from the runtime file) and its refusals as the fixed problem+json answers of
06 §3, with the security headers of every answer and, for the two 503s, `Retry-After: 1`."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Final

from coordinator_api import limits
from coordinator_api.edge import SECURITY_HEADERS
from coordinator_api.problems import problem_body, problem_headers
from coordinator_api.wire import encode
from coordinator_core.config.model import Listener
from coordinator_core.shell.runtime import guard
from coordinator_core.shell.runtime.guard import (
    CONNECTIONS_EXHAUSTED,
    HEADERS_TOO_LARGE,
    PEER_CONNECTIONS_EXHAUSTED,
    ConnectionLimits,
)

__all__ = [
    "CONNECTIONS_EXHAUSTED",
    "HEADERS_TOO_LARGE",
    "PEER_CONNECTIONS_EXHAUSTED",
    "ConnectionLimits",
    "guarded_protocol",
    "service_limits",
]

_RETRY_AFTER_SECONDS: Final = 1


def _fixed_answer(code: str) -> tuple[int, bytes]:
    """The status and the header-and-body bytes (after the status line and the server's
    default headers) of the refusal `code`: the same bytes every time."""
    problem = problem_body(code)
    body, status = encode(problem), problem.status
    headers = [
        (name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in problem_headers(code).items()
    ]
    if status == 503:
        headers.append((b"retry-after", str(_RETRY_AFTER_SECONDS).encode("ascii")))
    headers += [
        *SECURITY_HEADERS,
        (b"content-length", str(len(body)).encode("ascii")),
        (b"connection", b"close"),
    ]
    lines = b"".join(name + b": " + value + b"\r\n" for name, value in headers)
    return status, lines + b"\r\n" + body


_ANSWERS: Final = {
    code: _fixed_answer(code)
    for code in (HEADERS_TOO_LARGE, CONNECTIONS_EXHAUSTED, PEER_CONNECTIONS_EXHAUSTED)
}


def service_limits(listener: Listener | None = None) -> ConnectionLimits:
    """The service's bounds (`limits`) with the listener's per-peer caps and trusted proxies
    (05 §8 `deployment.listener`; their defaults without one)."""
    bounds = ConnectionLimits(
        head_max_bytes=limits.HEAD_MAX_BYTES,
        head_timeout_seconds=limits.HEAD_TIMEOUT_SECONDS,
        body_timeout_seconds=limits.BODY_TIMEOUT_SECONDS,
        max_connections=limits.MAX_CONNECTIONS,
        close_linger_seconds=limits.CLOSE_LINGER_SECONDS,
    )
    if listener is None:
        return bounds
    return replace(
        bounds,
        connections_per_peer=listener.connections_per_peer,
        heads_per_peer=listener.heads_per_peer,
        trusted_proxies=listener.trusted_proxies,
    )


def guarded_protocol(bounds: ConnectionLimits | None = None) -> type[asyncio.Protocol]:
    """A protocol class for `uvicorn.Config(http=...)` applying `bounds` (the service's own by
    default) with the service's refusals."""
    return guard.guarded_protocol(bounds or service_limits(), _ANSWERS)
