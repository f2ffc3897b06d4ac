"""The connection guard of `coordinator serve`: what a client may hold before the app sees it.

uvicorn's httptools protocol, subclassed (`guarded_protocol`), with the bounds of `limits`:

* At most `MAX_CONNECTIONS` open connections; one more is answered
  `503 coordinator.request.connections-exhausted` as soon as it is accepted, before any of its
  bytes is parsed.
* A request head (request line and headers) of at most `HEAD_MAX_BYTES`: the parser is never fed
  more, so nothing of a longer head is buffered; it is answered
  `431 coordinator.request.headers-too-large` before any routing, authentication or body read.
* A head must be complete `HEAD_TIMEOUT_SECONDS` after it began (a silent new connection
  included), a body `BODY_TIMEOUT_SECONDS` after its head; otherwise the connection is cut. An
  idle kept-alive connection is closed after `KEEP_ALIVE_SECONDS` (uvicorn's own timer).

A refusal is a fixed problem+json answer (06 §3) sent with `Connection: close`; then the service
stops writing and drops what the client still sends for at most `CLOSE_LINGER_SECONDS`, so that
the client reads the answer instead of a reset. Nothing the client sent is logged or echoed.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

from coordinator_api import limits
from coordinator_api.edge import SECURITY_HEADERS
from coordinator_api.problems import problem_body, problem_headers
from coordinator_api.wire import encode

__all__ = ["CONNECTIONS_EXHAUSTED", "HEADERS_TOO_LARGE", "ConnectionLimits", "guarded_protocol"]

HEADERS_TOO_LARGE: Final = "coordinator.request.headers-too-large"
CONNECTIONS_EXHAUSTED: Final = "coordinator.request.connections-exhausted"
_RETRY_AFTER_SECONDS: Final = 1


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The bounds one server applies; the defaults are the service's (`limits`)."""

    head_max_bytes: int = limits.HEAD_MAX_BYTES
    head_timeout_seconds: float = limits.HEAD_TIMEOUT_SECONDS
    body_timeout_seconds: float = limits.BODY_TIMEOUT_SECONDS
    max_connections: int = limits.MAX_CONNECTIONS
    close_linger_seconds: float = limits.CLOSE_LINGER_SECONDS


def _fixed_answer(code: str) -> tuple[int, bytes]:
    """The status and the header-and-body bytes (after the status line and the server's
    default headers) of the refusal `code`: the same bytes every time."""
    problem = problem_body(code)
    body, status = encode(problem), problem.status
    headers = [
        (name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in problem_headers(code).items()
    ]
    if code == CONNECTIONS_EXHAUSTED:
        headers.append((b"retry-after", str(_RETRY_AFTER_SECONDS).encode("ascii")))
    headers += [
        *SECURITY_HEADERS,
        (b"content-length", str(len(body)).encode("ascii")),
        (b"connection", b"close"),
    ]
    lines = b"".join(name + b": " + value + b"\r\n" for name, value in headers)
    return status, lines + b"\r\n" + body


class _GuardedProtocol(HttpToolsProtocol):
    """One client connection under `ConnectionLimits` (see the module docstring)."""

    limits: ClassVar[ConnectionLimits]
    refusing: ClassVar[set[_GuardedProtocol]]
    """Connections refused beyond the cap that still linger (bounded by the cap itself)."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._in_head = True
        self._began = False  # the parser has seen the first byte of the current request
        self._head_bytes = 0
        self._completed = 0  # requests whose body was read in full
        self._deadline: asyncio.TimerHandle | None = None
        self._closing = False
        self._deferred = False  # a 431 waits for the answers before it
        self._refused = False

    # -- asyncio.Protocol -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.connections) >= self.limits.max_connections:
            self._refused = True
            self.transport = transport
            if len(self.refusing) >= self.limits.max_connections:
                transport.abort()  # a flood of refusals: not even a lingering answer
                return
            self.refusing.add(self)
            self._answer_and_close(CONNECTIONS_EXHAUSTED)
            return
        super().connection_made(transport)
        self._arm(self.limits.head_timeout_seconds)

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return  # a refused connection's remaining bytes are dropped, never parsed
        while data and not self._stopped():
            if self._in_head:
                allowed = self.limits.head_max_bytes - self._head_bytes
                if allowed <= 0:  # the head goes on past the bound: none of it is parsed
                    self._refuse_head()
                    return
                piece, data = data[:allowed], data[allowed:]
                self._head_bytes += len(piece)
            else:
                piece, data = data, b""
            completed = self._completed
            super().data_received(piece)
            if self._completed != completed:
                # The piece ended a request and may have begun the next one: count that head
                # from what the parser already holds of it (a header still in the parser's
                # hands is not counted; it came in this piece, so at most twice the bound is
                # ever buffered, and `on_headers_complete` refuses what the parser holds).
                self._head_bytes = self._parsed_head_bytes() if self._began else 0

    def eof_received(self) -> None:
        if self._closing:
            self.transport.close()  # the client has read the answer and stopped sending

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._refused:
            self.refusing.discard(self)
            return
        super().connection_lost(exc)

    def shutdown(self) -> None:
        if self._closing:
            self.transport.close()
            return
        super().shutdown()

    # -- httptools parser callbacks --------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._began = True
        if self._deadline is None:
            self._arm(self.limits.head_timeout_seconds)

    def on_headers_complete(self) -> None:
        if self._closing:
            return
        if self._parsed_head_bytes() > self.limits.head_max_bytes:
            # Reachable only for a head that began inside the piece that ended the previous
            # request (pipelining), which `data_received` could not count exactly.
            self._refuse_head()
            return
        self._in_head = False
        self._arm(self.limits.body_timeout_seconds)
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._closing:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._closing:
            return
        self._disarm()
        self._in_head = True
        self._began = False
        self._head_bytes = 0
        self._completed += 1
        super().on_message_complete()

    # -- the guard -------------------------------------------------------------------------

    # The parser's callbacks change this during `super().data_received`; read through a method
    # so that no narrowing from before the call is assumed after it.
    def _stopped(self) -> bool:
        return self._closing or self.transport.is_closing()

    def _parsed_head_bytes(self) -> int:
        # At least what the head parsed so far took on the wire: a request line is the target
        # and at least 14 bytes more (`GET ` ... ` HTTP/1.1\n`), a header line its name and
        # value and at least `:` and `\n`. Never more, so no head within the bound is refused.
        return len(self.url) + 14 + sum(len(name) + len(value) + 2 for name, value in self.headers)

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()

    def _refuse_head(self) -> None:
        self._closing = True  # from here on nothing is parsed
        self._disarm()
        if self.cycle is not None and not self.cycle.response_complete:
            # Answers to earlier requests on this connection are pending: the refusal follows
            # them (`on_response_complete`), never spliced into one.
            self._deferred = True
            return
        self._answer_and_close(HEADERS_TOO_LARGE)

    def on_response_complete(self) -> None:
        if not self._deferred or self.pipeline:
            super().on_response_complete()
            return
        self._deferred = False
        if not self.transport.is_closing():
            self._answer_and_close(HEADERS_TOO_LARGE)

    def _answer_and_close(self, code: str) -> None:
        self._closing = True
        self._disarm()
        self._unset_keepalive_if_required()
        status, rest = _ANSWERS[code]
        default = b"".join(
            name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers
        )
        transport = self.transport
        transport.write(STATUS_LINE[status] + default + rest)
        if transport.can_write_eof():
            transport.write_eof()
            self._deadline = self.loop.call_later(self.limits.close_linger_seconds, transport.close)
        else:  # pragma: no cover - every transport of the service can half-close
            transport.close()


_ANSWERS: Final = {code: _fixed_answer(code) for code in (HEADERS_TOO_LARGE, CONNECTIONS_EXHAUSTED)}


def guarded_protocol(bounds: ConnectionLimits | None = None) -> type[asyncio.Protocol]:
    """A protocol class for `uvicorn.Config(http=...)` applying `bounds` (the service's own by
    default); each call has its own count of lingering refusals."""

    class GuardedProtocol(_GuardedProtocol):
        limits = bounds or ConnectionLimits()
        refusing: ClassVar[set[_GuardedProtocol]] = set()

    return GuardedProtocol
