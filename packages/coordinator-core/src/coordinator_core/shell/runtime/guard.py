"""The connection guard of an HTTP listener: what a client may hold before the app sees it.
`coordinator serve` (coordinator_api.connection, with problem+json refusals) and
`coordinatorctl console` (plain-text refusals) run their uvicorn servers with it.

uvicorn's httptools protocol, subclassed (`guarded_protocol`), with the bounds of
`ConnectionLimits`:

* At most `max_connections` open connections in all; one more is refused as soon as it is
  accepted, before any of its bytes is parsed (`connections-exhausted`).
* Fair share (docs/operations.md, "HTTP edge limits"): at most `connections_per_peer` open connections and
  `heads_per_peer` connections still sending their first request head per peer, where a peer
  is an IPv4 address or an IPv6 /64 (an IPv4-mapped address is its IPv4 address). A peer at
  its open-connection share that opens another has its oldest idle kept-alive connection
  closed for it (a client whose pool leaves connections idle is not refused for them); with
  none idle, or at its share of pending heads, the new one is refused the same way
  (`peer-connections-exhausted`). One address holding its share cannot hold the listener. Peers in `trusted_proxies` (reverse proxies that enforce per-client
  limits themselves) count only against the global cap; no forwarded header is ever read.
* A request head (request line and headers) of at most `head_max_bytes`: the parser is never
  fed more, so nothing of a longer head is buffered; it is refused (`headers-too-large`)
  before any routing, authentication or body read.
* A head must be complete `head_timeout_seconds` after it began (a silent new connection
  included), a body `body_timeout_seconds` after its head; otherwise the connection is cut. An
  idle kept-alive connection is closed by uvicorn's own timer.

A refusal is a fixed answer (`Refusals`: the status and the header and body bytes) sent with
`Connection: close`; then the listener stops writing and drops what the client still sends for
at most `close_linger_seconds`, so that the client reads the answer instead of a reset. Nothing
the client sent is logged or echoed.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Literal

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

__all__ = [
    "CONNECTIONS_EXHAUSTED",
    "HEADERS_TOO_LARGE",
    "PEER_CONNECTIONS_EXHAUSTED",
    "ConnectionLimits",
    "Refusal",
    "guarded_protocol",
    "peer_of",
]

HEADERS_TOO_LARGE: Final = "coordinator.request.headers-too-large"
CONNECTIONS_EXHAUSTED: Final = "coordinator.request.connections-exhausted"
PEER_CONNECTIONS_EXHAUSTED: Final = "coordinator.request.peer-connections-exhausted"
Refusal = Literal[
    "coordinator.request.headers-too-large",
    "coordinator.request.connections-exhausted",
    "coordinator.request.peer-connections-exhausted",
]
Refusals = Mapping[str, tuple[int, bytes]]
"""Each refusal's status and the bytes after its status line and the server's default
headers: its own headers (`Connection: close` among them), the empty line and the body."""

_IPV6_PEER_PREFIX: Final = 64


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The bounds one listener applies (the defaults are the service's: docs/operations.md,
    "HTTP edge limits"; `coordinator_api.limits` names them)."""

    head_max_bytes: int = 32_768
    head_timeout_seconds: float = 10.0
    body_timeout_seconds: float = 10.0
    max_connections: int = 256
    close_linger_seconds: float = 2.0
    connections_per_peer: int = 32
    heads_per_peer: int = 8
    trusted_proxies: tuple[str, ...] = ()
    """IP addresses or networks whose connections are exempt from the per-peer caps."""


def peer_of(address: object) -> str | None:
    """The peer a socket address belongs to for the per-peer caps: an IPv4 address, or the
    /64 of an IPv6 address (an IPv4-mapped one is its IPv4 address); None for anything else
    (a Unix socket), which the per-peer caps do not count."""
    host = address[0] if isinstance(address, tuple) and address else None
    if not isinstance(host, str):
        return None
    try:
        parsed = ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return None
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(ipaddress.IPv6Network((parsed, _IPV6_PEER_PREFIX), strict=False))
    return str(parsed)


def _trusted(
    peer: str, networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
) -> bool:
    try:
        address = ipaddress.ip_network(peer, strict=False)
    except ValueError:
        return False
    return any(
        address.version == network.version and address.subnet_of(network)  # type: ignore[arg-type]
        for network in networks
    )


class _GuardedProtocol(HttpToolsProtocol):
    """One client connection under `ConnectionLimits` (see the module docstring)."""

    limits: ClassVar[ConnectionLimits]
    refusals: ClassVar[Refusals]
    proxies: ClassVar[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]]
    refusing: ClassVar[set[_GuardedProtocol]]
    """Connections refused beyond a cap that still linger (bounded by the global cap)."""
    open_by_peer: ClassVar[dict[str, dict[_GuardedProtocol, None]]]
    """Each peer's open connections, oldest first (an ordered set)."""
    heads_by_peer: ClassVar[dict[str, int]]

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
        self._peer: str | None = None  # counted in `open_by_peer` while set
        self._head_peer = ""  # the peer whose pending heads count this one
        self._first_head = False  # counted in `heads_by_peer` while set

    # -- asyncio.Protocol -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        refusal = self._admit(transport)
        if refusal is not None:
            self._refused = True
            self.transport = transport
            if len(self.refusing) >= self.limits.max_connections:
                transport.abort()  # a flood of refusals: not even a lingering answer
                return
            self.refusing.add(self)
            self._answer_and_close(refusal)
            return
        super().connection_made(transport)
        self._arm(self.limits.head_timeout_seconds)

    def _admit(self, transport: asyncio.Transport) -> str | None:
        """The refusal of a new connection, or None (then it is counted for its peer)."""
        if len(self.connections) >= self.limits.max_connections:
            return CONNECTIONS_EXHAUSTED
        peer = peer_of(transport.get_extra_info("peername"))
        if peer is None or (self.proxies and _trusted(peer, self.proxies)):
            return None
        if self.heads_by_peer.get(peer, 0) >= self.limits.heads_per_peer:
            return PEER_CONNECTIONS_EXHAUSTED
        opened = self.open_by_peer.setdefault(peer, {})
        if len(opened) >= self.limits.connections_per_peer:
            idle = next((other for other in opened if other._idle()), None)
            if idle is None:
                return PEER_CONNECTIONS_EXHAUSTED
            idle._evict()
        self._peer, self._head_peer, self._first_head = peer, peer, True
        opened[self] = None
        self.heads_by_peer[peer] = self.heads_by_peer.get(peer, 0) + 1
        return None

    def _idle(self) -> bool:
        """Kept alive after an answer, waiting for its next request (uvicorn's timer runs)."""
        return self.timeout_keep_alive_task is not None and not self.transport.is_closing()

    def _evict(self) -> None:
        """Close this idle connection for a new one of its peer; it stops counting at once."""
        self._forget_peer()
        self.transport.close()

    def _forget_peer(self) -> None:
        peer, self._peer = self._peer, None
        if peer is None:
            return
        opened = self.open_by_peer.get(peer)
        if opened is not None:
            opened.pop(self, None)
            if not opened:
                del self.open_by_peer[peer]

    def _head_done(self) -> None:
        """The first request head is complete: the connection no longer counts as sending it."""
        if self._first_head:
            self._first_head = False
            _decrement(self.heads_by_peer, self._head_peer)

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
        self._head_done()
        self._forget_peer()
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
        self._head_done()
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
        status, rest = self.refusals[code]
        default = b"".join(
            name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers
        )
        transport = self.transport
        transport.write(STATUS_LINE[status] + default + rest)
        if transport.can_write_eof():
            transport.write_eof()
            self._deadline = self.loop.call_later(self.limits.close_linger_seconds, transport.close)
        else:  # pragma: no cover - every transport of the listeners can half-close
            transport.close()


def _decrement(counts: dict[str, int], peer: str) -> None:
    left = counts.get(peer, 0) - 1
    if left > 0:
        counts[peer] = left
    else:
        counts.pop(peer, None)


def guarded_protocol(bounds: ConnectionLimits, refusals: Refusals) -> type[asyncio.Protocol]:
    """A protocol class for `uvicorn.Config(http=...)` applying `bounds`, answering each
    refusal with `refusals[code]` (every `Refusal` code); each call has its own counts of
    lingering refusals and of connections per peer (one listener, one event loop)."""
    missing = {HEADERS_TOO_LARGE, CONNECTIONS_EXHAUSTED, PEER_CONNECTIONS_EXHAUSTED} - set(refusals)
    if missing:
        raise ValueError("Every refusal of the guard needs its answer.")
    networks = tuple(ipaddress.ip_network(item, strict=False) for item in bounds.trusted_proxies)
    answers = dict(refusals)

    class GuardedProtocol(_GuardedProtocol):
        limits = bounds
        refusals: ClassVar[Refusals] = answers
        proxies = networks
        refusing: ClassVar[set[_GuardedProtocol]] = set()
        open_by_peer: ClassVar[dict[str, dict[_GuardedProtocol, None]]] = {}
        heads_by_peer: ClassVar[dict[str, int]] = {}

    return GuardedProtocol
