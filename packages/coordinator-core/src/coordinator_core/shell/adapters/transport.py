"""The pinned, deadline-clipped HTTP/1.1 transport under the HTTP client policy (contract 08 §2.1).

Every TCP connection is made to the one checked address of its destination (TLS still verifies
the certificate against the host name), and every socket operation is clipped to the deadline
of the request using the socket now (`RequestClock`), never of the one that opened it.

A request is written as one buffer; the answer is parsed by httptools (llhttp, the parser under
uvicorn). What is ours is only what the policy needs of a connection: the pinned connect, the
per-operation deadlines, knowing whether a byte may have left, and the pool.

Connections are pooled per checked destination: one process-wide keep-alive pool per (scheme,
host, port, resolved address, TLS context), so a host that now resolves elsewhere gets another
connection and a refused destination never reaches a pool. At most 8 idle connections are kept
per destination, none idle longer than 30 s. A connection goes back only once its answer was
read to its clean end and both sides keep it alive. An idle connection that has anything to
read when it is taken (the server's close, or bytes nobody asked for) is closed and another is
used: nothing of the request was written yet, so this is no retry. `close_pools()` closes them
all (also at process exit).
"""

from __future__ import annotations

import atexit
import os
import re
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from functools import lru_cache
from typing import Final

import httptools
import httpx

__all__ = [
    "MAX_HEAD_BYTES",
    "MINIMUM_WAIT",
    "POOL_IDLE_CONNECTIONS",
    "POOL_IDLE_SECONDS",
    "DestinationPool",
    "HttpConnection",
    "PoolKey",
    "ProtocolFailure",
    "RequestClock",
    "TransportFailure",
    "checkout",
    "close_pools",
    "default_ssl_context",
    "request_bytes",
]

# A socket timeout of 0 would make the socket non-blocking (an OSError, not a timeout), so a
# deadline that has not quite passed still gets this much time.
MINIMUM_WAIT: Final = 0.001
# A timeout firing this close to the attempt deadline is the attempt budget running out.
_BUDGET_SLACK: Final = 0.005
_READ_SIZE: Final = 65_536
# The most bytes an answer may take before its head (status line and header fields, interim
# answers included) is complete: a peer that never ends its head cannot grow memory.
MAX_HEAD_BYTES: Final = 65_536


class TransportFailure(Exception):
    """The exchange failed without a usable answer.

    `sent` is true once any byte of the request may have left (the first socket write was
    attempted); `budget` is true when the attempt budget, not the request's own timeout, ran
    out. The message is fixed and never names the URL or the cause's text.
    """

    def __init__(self, *, sent: bool, budget: bool, timeout: bool) -> None:
        super().__init__("The request did not complete.")
        self.sent = sent
        self.budget = budget
        self.timeout = timeout


class ProtocolFailure(Exception):
    """The peer broke HTTP/1.1: an answer that does not parse, or a close in its middle, or a
    request this client will not write (a header field that is not a token or holds a line
    break)."""


# How long a pooled connection may sit idle, and how many idle ones a destination keeps.
POOL_IDLE_SECONDS: Final = 30.0
POOL_IDLE_CONNECTIONS: Final = 8
# Destinations (pools) kept at once; an unused one goes once its connections have expired.
_POOL_DESTINATIONS: Final = 64


class RequestClock:
    """The request's deadline and what happened so far."""

    __slots__ = ("attempt_deadline", "deadline", "now", "sending")

    def __init__(self, deadline: float, attempt_deadline: float, now: Callable[[], float]):
        self.deadline = deadline
        self.attempt_deadline = attempt_deadline
        self.now = now
        self.sending = False

    def clip(self, timeout: float | None = None) -> float:
        """The seconds the next socket operation may take; TimeoutError once none are left."""
        remaining = self.deadline - self.now()
        if remaining <= 0:
            raise TimeoutError("The request deadline passed.")
        if timeout is not None:
            remaining = min(remaining, timeout)
        return max(remaining, MINIMUM_WAIT)

    def budget_spent(self) -> bool:
        return self.now() >= self.attempt_deadline - _BUDGET_SLACK


# -- the request -------------------------------------------------------------------------------

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
# An answer to HEAD (or CONNECT) is framed by the request, which a response parser never sees.
_METHODS: Final = frozenset({b"GET", b"POST", b"PUT", b"PATCH", b"DELETE"})
_FIELD_VALUE = re.compile(rb"[^\x00\r\n]*\Z")
_TARGET = re.compile(rb"[\x21-\x7e]+\Z")


def request_bytes(
    method: bytes, target: bytes, fields: list[tuple[bytes, bytes]], body: bytes
) -> bytes:
    """The request as written on the wire; ProtocolFailure for a method, target or field
    that could change the message's framing (a line break in a value, a space in the name)."""
    if method not in _METHODS or not _TARGET.match(target):
        raise ProtocolFailure("The request line is not valid.")
    lines = [method, b" ", target, b" HTTP/1.1\r\n"]
    for name, value in fields:
        if not _TOKEN.match(name) or not _FIELD_VALUE.match(value):
            raise ProtocolFailure("A request header field is not valid.")
        lines += (name, b": ", value.strip(b" \t"), b"\r\n")
    lines.append(b"\r\n")
    lines.append(body)
    return b"".join(lines)


# -- the answer --------------------------------------------------------------------------------


class _Answer:
    """httptools' callbacks for one answer: the final status, its fields and its body up to a
    limit (an interim 1xx answer is skipped)."""

    __slots__ = (
        "_head",
        "body",
        "complete",
        "fields",
        "head_bytes",
        "keep_alive",
        "limit",
        "messages",
        "oversize",
        "parser",
        "size",
        "status",
    )

    def __init__(self, limit: int) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.fields: list[tuple[bytes, bytes]] | None = None  # set once the head is complete
        self.head_bytes = 0
        self.body: list[bytes] = []
        self.size = 0
        self.limit = limit
        self.oversize = False
        self.complete = False
        self.keep_alive = False
        self.messages = 0
        self._reset()

    def _reset(self) -> None:
        self._head: list[tuple[bytes, bytes]] = []

    def on_message_begin(self) -> None:
        self.messages += 1

    # Whatever follows the answer (bytes nobody asked for) is parsed but never kept: it only
    # counts as a further message, which makes the connection unusable.

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.complete:
            self._head.append((name, value))

    def on_headers_complete(self) -> None:
        if self.complete:
            return
        status = self.parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            self._reset()  # an interim answer: the final one follows
            return
        self.status = status
        self.fields = self._head

    def on_body(self, chunk: bytes) -> None:
        if self.complete:
            return
        self.size += len(chunk)
        if self.size > self.limit:
            self.oversize = True
            self.body.clear()
        elif not self.oversize:
            self.body.append(chunk)

    def on_message_complete(self) -> None:
        if self.complete:
            return
        if self.fields is None:
            self.messages -= 1  # the interim answer
            return
        self.complete = True
        self.keep_alive = self.parser.should_keep_alive()

    def field(self, name: bytes) -> bytes | None:
        for key, value in self.fields or ():
            if key.lower() == name:
                return value
        return None


class HttpConnection:
    """One open connection: it writes a request and reads its answer, every operation clipped
    to the clock of the request using it."""

    __slots__ = ("_answer", "_broken", "_closed", "last_used", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.last_used = time.monotonic()
        self._answer: _Answer | None = None
        self._closed = False  # the peer's end was read (or this side closed)
        self._broken = False  # a write failed: an early answer may still be read, no reuse

    def send(self, data: bytes, clock: RequestClock, limit: int) -> None:
        """Write the whole request; from the first write on, the request may have left. Its
        answer's body will be kept up to `limit` bytes."""
        wait = clock.clip()
        self._answer = _Answer(limit)
        clock.sending = True
        self.sock.settimeout(wait)
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            # The server may have answered early and closed (a refusal before it read the
            # body): the answer, if one arrived, is read below.
            self._broken = True

    def head(self, clock: RequestClock) -> tuple[int, _Answer]:
        """Read until the answer's status and header fields are complete."""
        answer = self._answer
        assert answer is not None
        while answer.fields is None:
            if not self._fill(answer, clock):
                raise ProtocolFailure("The connection closed before an answer.")
        return answer.status, answer

    def body(self, clock: RequestClock) -> bytes | None:
        """Read the body to its end: its bytes, or None once it passed the limit (the
        connection is then not reusable)."""
        answer = self._answer
        assert answer is not None
        while not answer.complete and not answer.oversize:
            if not self._fill(answer, clock):
                if answer.field(b"content-length") is None and (
                    b"chunked" not in (answer.field(b"transfer-encoding") or b"").lower()
                ):
                    break  # a body delimited by the close of the connection
                raise ProtocolFailure("The connection closed in the middle of an answer.")
        return None if answer.oversize else b"".join(answer.body)

    @property
    def reusable(self) -> bool:
        answer = self._answer
        return (
            not self._closed
            and not self._broken
            and answer is not None
            and answer.complete
            and answer.keep_alive
            and answer.messages == 1
        )

    def _fill(self, answer: _Answer, clock: RequestClock) -> bool:
        if self._closed:
            return False
        self.sock.settimeout(clock.clip())
        data = self.sock.recv(_READ_SIZE)
        if not data:
            self._closed = True
            return False
        if answer.fields is None:
            answer.head_bytes += len(data)
            if answer.head_bytes > MAX_HEAD_BYTES:
                raise ProtocolFailure("The answer's head is too large.")
        try:
            answer.parser.feed_data(data)
        except httptools.HttpParserError as exc:  # HttpParserUpgrade included
            raise ProtocolFailure("The answer is not valid HTTP/1.1.") from exc
        return True

    def idle_but_readable(self) -> bool:
        """An idle connection has nothing to read but its end: the server closed it (or sent
        something nobody asked for); either way it cannot carry a request."""
        if isinstance(self.sock, ssl.SSLSocket) and self.sock.pending():
            return True
        try:
            poller = select.poll()
            poller.register(self.sock, select.POLLIN)
            return bool(poller.poll(0))
        except (OSError, ValueError):
            return True

    def close(self) -> None:
        self._closed = True
        with suppress(OSError):
            self.sock.close()


PoolKey = tuple[str, str, int, str, int | None]


class DestinationPool:
    """One checked destination: its idle keep-alive connections and how to open a new one."""

    def __init__(self, key: PoolKey, ssl_context: ssl.SSLContext) -> None:
        scheme, host, port, address, _ = key
        self.ssl_context = ssl_context  # kept alive: its identity is part of the key
        self._secure = scheme == "https"
        self._host = host
        self._port = port
        self._address = address
        self._lock = threading.Lock()
        self._idle: list[HttpConnection] = []
        self._closed = False
        self.active = 0
        self.last_used = time.monotonic()

    def connection(self, clock: RequestClock, connect_timeout: float) -> HttpConnection:
        """The most recently used idle connection that can still carry a request, or a new one
        (connected, and for https verified, within the connect timeout)."""
        while True:
            with self._lock:
                if not self._idle:
                    break
                connection = self._idle.pop()
            if (
                time.monotonic() - connection.last_used > POOL_IDLE_SECONDS
                or connection.idle_but_readable()
            ):
                connection.close()
                continue
            return connection
        sock = socket.create_connection(
            (self._address, self._port), timeout=clock.clip(connect_timeout)
        )
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._secure:
                sock = self.ssl_context.wrap_socket(
                    sock, server_hostname=self._host, do_handshake_on_connect=False
                )
                sock.settimeout(clock.clip(connect_timeout))
                sock.do_handshake()
        except BaseException:
            sock.close()
            raise
        return HttpConnection(sock)

    def give_back(self, connection: HttpConnection) -> None:
        """Keep `connection` for the next request, unless enough are idle already."""
        connection.last_used = time.monotonic()
        with self._lock:
            if not self._closed and len(self._idle) < POOL_IDLE_CONNECTIONS:
                self._idle.append(connection)
                return
        connection.close()

    def close(self) -> None:
        """Close the idle connections; one in use is closed when it comes back."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()


class _Pools:
    """The process-wide destinations, thread-safe; unused ones are closed after the idle time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._destinations: dict[PoolKey, DestinationPool] = {}

    @contextmanager
    def checkout(self, key: PoolKey, ssl_context: ssl.SSLContext) -> Iterator[DestinationPool]:
        closing: list[DestinationPool] = []
        with self._lock:
            now = time.monotonic()
            for other_key, other in list(self._destinations.items()):
                if other.active == 0 and now - other.last_used > POOL_IDLE_SECONDS:
                    closing.append(self._destinations.pop(other_key))
            destination = self._destinations.get(key)
            if destination is None:
                if len(self._destinations) >= _POOL_DESTINATIONS:
                    unused = [
                        (d.last_used, k) for k, d in self._destinations.items() if not d.active
                    ]
                    if unused:
                        closing.append(self._destinations.pop(min(unused)[1]))
                destination = DestinationPool(key, ssl_context)
                self._destinations[key] = destination
            destination.active += 1
        for old in closing:
            old.close()
        try:
            yield destination
        finally:
            with self._lock:
                destination.active -= 1
                destination.last_used = time.monotonic()

    def close(self) -> None:
        with self._lock:
            closing = list(self._destinations.values())
            self._destinations.clear()
        for destination in closing:
            destination.close()

    def forget(self) -> None:
        """After fork: the child must not share the parent's sockets or locks."""
        self._lock = threading.Lock()
        self._destinations = {}


_pools = _Pools()


def checkout(key: PoolKey, ssl_context: ssl.SSLContext) -> AbstractContextManager[DestinationPool]:
    """The destination of `key` (created on first use), held in use for the `with` block."""
    return _pools.checkout(key, ssl_context)


def close_pools() -> None:
    """Close every pooled connection (tests and shutdown; also run at process exit)."""
    _pools.close()


atexit.register(close_pools)
if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_pools.forget)


@lru_cache(maxsize=1)
def default_ssl_context() -> ssl.SSLContext:
    return httpx.create_ssl_context(trust_env=False)
