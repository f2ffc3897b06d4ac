"""The one HTTP client policy every product adapter and the token exchange use (contract 08 §2.1).

Every request is checked and pinned on its own: the destination is checked (https anywhere;
plain http only to a numeric loopback address; cloud metadata addresses never), the host is
resolved once and the socket is connected to exactly that address (TLS still verifies the
certificate against the host name), every socket operation is clipped to the request's deadline
(connect 1 s, total 2 s, never beyond the attempt budget), redirects are never followed, nothing
is retried, and at most 65,536 body bytes are read.

Connections are pooled per checked destination: one process-wide keep-alive pool per (scheme,
host, port, resolved address, TLS context), so a host that now resolves elsewhere gets another
connection and a refused destination never reaches a pool. A pooled socket is clipped to the
deadline of the request using it now, not of the one that opened it. At most 8 idle connections
are kept per destination, none idle longer than 30 s; a connection goes back only after its
answer was read to the end (an oversize, undecodable or broken answer discards it). A reused
connection found closed by the server before any byte of the request was written is replaced
by a fresh one once (nothing was sent, so this is no retry); once a byte may have left, the
failure is reported as it is. `close_pools()` closes them all (also at process exit).

Failures leave this module as two exception types only, `DestinationRefused` and
`TransportFailure`, carrying facts (was anything sent? did the attempt budget run out?) and
fixed messages; the adapters classify them into the engine's outcomes.
"""

from __future__ import annotations

import atexit
import ipaddress
import itertools
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Final, Literal
from urllib.parse import quote

# httpcore is httpx's own transport layer: the pinned, deadline-clipped network backend below
# plugs in there, since httpx's public transport takes no backend.
import httpcore
import httpx

from coordinator_core.values import (
    JsonBoundsError,
    StrictJsonError,
    check_json_value,
    parse_strict_json,
)

__all__ = [
    "CONNECT_TIMEOUT_SECONDS",
    "MAX_BODY_BYTES",
    "METADATA_ADDRESSES",
    "POOL_IDLE_CONNECTIONS",
    "POOL_IDLE_SECONDS",
    "TOTAL_TIMEOUT_SECONDS",
    "DestinationRefused",
    "HttpSettings",
    "ProductAnswer",
    "ProductProblem",
    "TransportFailure",
    "close_pools",
    "exchange",
    "json_body",
    "path_segment",
    "problem_of",
    "user_agent",
]

CONNECT_TIMEOUT_SECONDS: Final = 1.0
TOTAL_TIMEOUT_SECONDS: Final = 2.0
MAX_BODY_BYTES: Final = 65_536
METADATA_ADDRESSES: Final = frozenset(
    ipaddress.ip_address(text) for text in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)

_LOOPBACK_V4: Final = ipaddress.ip_network("127.0.0.0/8")
# Message framing is this module's to write, never a caller's.
_FRAMING_FIELDS: Final = frozenset({"host", "content-length", "transfer-encoding"})
_LOOPBACK_V6: Final = ipaddress.ip_address("::1")
# A socket timeout of 0 would make the socket non-blocking (an OSError, not a timeout), so a
# deadline that has not quite passed still gets this much time.
_MINIMUM_WAIT: Final = 0.001
# A timeout firing this close to the attempt deadline is the attempt budget running out.
_BUDGET_SLACK: Final = 0.005

Resolver = Callable[[str, int], Sequence[str]]


@dataclass(frozen=True, slots=True)
class HttpSettings:
    """The client policy. Defaults are the contract's; tests shorten the timeouts or inject a
    resolver and a TLS context."""

    connect_timeout: float = CONNECT_TIMEOUT_SECONDS
    total_timeout: float = TOTAL_TIMEOUT_SECONDS
    max_body_bytes: int = MAX_BODY_BYTES
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False)
    resolver: Resolver | None = field(default=None, repr=False)
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)


class DestinationRefused(Exception):
    """The destination policy refused the URL; nothing was resolved or sent."""

    def __init__(self) -> None:
        super().__init__("The destination is refused by the client policy.")


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


BodyProblem = Literal["oversize", "undecodable"]


@dataclass(frozen=True, slots=True)
class ProductAnswer:
    """A complete HTTP answer. `body` is None when it could not be kept (`body_problem`)."""

    status: int
    body: bytes | None = field(repr=False)
    body_problem: BodyProblem | None = None
    content_type: str | None = None


@dataclass(frozen=True, slots=True)
class ProductProblem:
    """The only members of an `application/problem+json` body the adapter ever keeps (08 §2.3),
    and only when the body's `status` equals the HTTP status."""

    code: str
    refusal_code: str | None = None


# -- small pieces ------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def user_agent() -> str:
    """`registry-coordinator/<version>` (08 §2.1)."""
    try:
        return f"registry-coordinator/{version('coordinator-core')}"
    except PackageNotFoundError:
        return "registry-coordinator/0"


def path_segment(value: str) -> str:
    """`value` percent-encoded as exactly one path segment (08 §2.1).

    Everything outside RFC 3986 `unreserved` is encoded, so `/`, `?`, `#` and `%` cannot
    change the path; `.` and `..` are encoded too because a client or server that removes
    dot segments would otherwise climb out of the collection.
    """
    encoded = quote(value, safe="")
    if encoded in (".", ".."):
        return encoded.replace(".", "%2E")
    return encoded


def json_body(answer: ProductAnswer) -> object | None:
    """The body as a strict JSON value within the value bounds (03 §4), or None when it is
    missing, oversize, not strict JSON or out of bounds (08 §2.1: `invalid-response`)."""
    if answer.body is None or not answer.body:
        return None
    try:
        value = parse_strict_json(answer.body)
        check_json_value(value)
    except (StrictJsonError, JsonBoundsError):
        return None
    return value


def problem_of(answer: ProductAnswer) -> ProductProblem | None:
    """The trusted `code` (and `refusalCode`) of a problem body, or None (08 §2.3)."""
    value = json_body(answer)
    if not isinstance(value, dict):
        return None
    status, code = value.get("status"), value.get("code")
    if isinstance(status, bool) or status != answer.status or not isinstance(code, str):
        return None
    refusal = value.get("refusalCode")
    return ProductProblem(code, refusal if isinstance(refusal, str) else None)


# -- destination policy --------------------------------------------------------------------------


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _is_numeric_loopback(host: str) -> bool:
    """05 §5.1: `127.0.0.0/8` or `[::1]`, written as such (no mapped or scoped forms)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv4Address):
        return address in _LOOPBACK_V4
    return address == _LOOPBACK_V6


def _is_metadata(text: str) -> bool:
    address = _address(text)
    return address is not None and address in METADATA_ADDRESSES


def _system_resolve(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return [str(info[4][0]) for info in infos]


_resolver_pool: ThreadPoolExecutor | None = None
_resolver_lock = threading.Lock()


def _resolve_within(resolver: Resolver, host: str, port: int, timeout: float) -> Sequence[str]:
    """Resolve on a helper thread so a slow resolver cannot outlast the connect timeout."""
    global _resolver_pool  # noqa: PLW0603 - one small lazily created pool per process
    with _resolver_lock:
        if _resolver_pool is None:
            _resolver_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="resolve")
        pool = _resolver_pool
    future: Future[Sequence[str]] = pool.submit(resolver, host, port)
    return future.result(timeout=timeout)


def _destination(url: httpx.URL, settings: HttpSettings, timeout: float, clock: _Clock) -> str:
    """The one address to connect to, or DestinationRefused / a pre-send TransportFailure."""
    scheme = url.scheme
    host = url.raw_host.decode("ascii")
    if scheme not in ("http", "https") or not host or url.userinfo:
        raise DestinationRefused()
    literal = _address(host)
    if scheme == "http" and not _is_numeric_loopback(host):
        raise DestinationRefused()  # plain http only to a numeric loopback address
    if literal is not None:
        if literal in METADATA_ADDRESSES:
            raise DestinationRefused()
        return host
    port = url.port or 443
    try:
        addresses = _resolve_within(settings.resolver or _system_resolve, host, port, timeout)
    except FutureTimeout as exc:
        raise TransportFailure(sent=False, budget=clock.budget_spent(), timeout=True) from exc
    except Exception as exc:  # any resolver failure is a DNS failure
        raise TransportFailure(sent=False, budget=False, timeout=False) from exc
    if not addresses:
        raise TransportFailure(sent=False, budget=False, timeout=False)
    # Refuse the name if any of its addresses is a metadata address: a resolver that mixes
    # one in must not get a second chance at the next request.
    if any(_is_metadata(address) for address in addresses) or any(
        _address(address) is None for address in addresses
    ):
        raise DestinationRefused()
    return addresses[0]


# -- the pinned, deadline-clipped transport --------------------------------------------------------

# How long a pooled connection may sit idle, and how many idle ones a destination keeps.
POOL_IDLE_SECONDS: Final = 30.0
POOL_IDLE_CONNECTIONS: Final = 8
# Destinations (pools) kept at once; an unused one goes once its connections have expired.
_POOL_DESTINATIONS: Final = 64

_serials = itertools.count(1)


class _Clock:
    """The request's deadline and what happened so far; shared by the backend and streams."""

    def __init__(self, deadline: float, attempt_deadline: float, now: Callable[[], float]):
        self.serial = next(_serials)
        self.deadline = deadline
        self.attempt_deadline = attempt_deadline
        self.now = now
        self.sending = False

    def clip(self, timeout: float | None, expired: type[Exception]) -> float:
        remaining = self.deadline - self.now()
        if remaining <= 0:
            raise expired("The request deadline passed.")
        if timeout is not None:
            remaining = min(remaining, timeout)
        return max(remaining, _MINIMUM_WAIT)

    def budget_spent(self) -> bool:
        return self.now() >= self.attempt_deadline - _BUDGET_SLACK


# The clock of the request this thread is sending now: a pooled socket outlives the request
# that opened it, so every operation asks for the current one.
_active_clock: ContextVar[_Clock | None] = ContextVar("coordinator_http_clock", default=None)


def _clock(expired: type[Exception]) -> _Clock:
    clock = _active_clock.get()
    if clock is None:  # a socket is only ever used inside exchange()
        raise expired("No request is active.")
    return clock


class _StaleConnection(httpcore.ConnectError):
    """A reused connection was closed by the server while idle; nothing of the request left.

    A ConnectError, never a WriteError: httpcore swallows write errors to read an early answer.
    """


class _Stream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream, opened_for: int) -> None:
        self._inner = inner
        self._opened_for = opened_for  # the serial of the request that opened the socket

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        wait = _clock(httpcore.ReadTimeout).clip(timeout, httpcore.ReadTimeout)
        return self._inner.read(max_bytes, wait)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        clock = _clock(httpcore.WriteTimeout)
        wait = clock.clip(timeout, httpcore.WriteTimeout)
        if buffer:
            if (
                not clock.sending
                and clock.serial != self._opened_for
                and self._inner.get_extra_info("is_readable")
            ):
                # An idle connection has nothing to read but its end: the server closed it.
                raise _StaleConnection("The pooled connection was closed.")
            clock.sending = True  # from here on the request may have left
        self._inner.write(buffer, wait)

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        clock = _clock(httpcore.ConnectTimeout)
        wait = clock.clip(timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, wait), clock.serial)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _PinnedBackend(httpcore.NetworkBackend):
    """Connects every TCP connection to the one checked address of its destination."""

    def __init__(self, address: str) -> None:
        self._address = address
        self._inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        clock = _clock(httpcore.ConnectTimeout)
        wait = clock.clip(timeout, httpcore.ConnectTimeout)
        stream = self._inner.connect_tcp(
            self._address, port, wait, local_address=local_address, socket_options=socket_options
        )
        return _Stream(stream, clock.serial)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("Unix sockets are not a destination.")

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


_Key = tuple[str, str, int, str, int | None]


class _Destination:
    """One checked destination: its keep-alive pool and the pinned backend under it."""

    def __init__(self, address: str, ssl_context: ssl.SSLContext) -> None:
        self.ssl_context = ssl_context  # kept alive: its identity is part of the key
        self.backend = _PinnedBackend(address)
        self.pool = httpcore.ConnectionPool(
            ssl_context=ssl_context,
            max_connections=None,  # as many at once as there are callers
            max_keepalive_connections=POOL_IDLE_CONNECTIONS,
            keepalive_expiry=POOL_IDLE_SECONDS,
            http1=True,
            http2=False,
            retries=0,  # the worker owns retries (08 §2.1)
            network_backend=self.backend,
        )
        self.active = 0
        self.last_used = time.monotonic()

    def fresh(self) -> httpcore.ConnectionPool:
        """A one-connection pool that keeps nothing: a guaranteed new connection."""
        return httpcore.ConnectionPool(
            ssl_context=self.ssl_context,
            max_connections=1,
            max_keepalive_connections=0,
            http1=True,
            http2=False,
            retries=0,
            network_backend=self.backend,
        )


class _Pools:
    """The process-wide destinations, thread-safe; unused ones are closed after the idle time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._destinations: dict[_Key, _Destination] = {}

    @contextmanager
    def checkout(self, key: _Key, ssl_context: ssl.SSLContext) -> Iterator[_Destination]:
        closing: list[_Destination] = []
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
                destination = _Destination(key[3], ssl_context)
                self._destinations[key] = destination
            destination.active += 1
        for old in closing:
            old.pool.close()
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
            destination.pool.close()

    def forget(self) -> None:
        """After fork: the child must not share the parent's sockets or locks."""
        self._lock = threading.Lock()
        self._destinations = {}


_pools = _Pools()


def close_pools() -> None:
    """Close every pooled connection (tests and shutdown; also run at process exit)."""
    _pools.close()


atexit.register(close_pools)
if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_pools.forget)


@lru_cache(maxsize=1)
def _default_ssl_context() -> ssl.SSLContext:
    return httpx.create_ssl_context(trust_env=False)


# -- the exchange ------------------------------------------------------------------------------------


def exchange(
    method: str,
    url: str,
    *,
    headers: Mapping[str, str],
    body: bytes | None = None,
    attempt_deadline: float,
    settings: HttpSettings,
) -> ProductAnswer:
    """Send one request under the client policy and read its complete answer.

    Raises DestinationRefused or TransportFailure; any other exception is a fault of this
    module (the adapters map it to the fallback codes). A non-2xx body that cannot be kept
    is dropped (the status alone then classifies); a 2xx body that is oversize or cannot be
    decoded is reported through `body_problem`.

    The request goes straight to the destination's httpcore pool; httpx only parses and
    checks the URL (its client, built per request with auth, redirect and cookie handling
    this policy never uses, cost more CPU than the exchange itself).
    """
    now = settings.clock()
    deadline = min(now + settings.total_timeout, attempt_deadline)
    clock = _Clock(deadline, attempt_deadline, settings.clock)
    if deadline - now <= 0:
        raise TransportFailure(sent=False, budget=True, timeout=True)
    target = _parsed(url)
    if target is None:
        raise DestinationRefused()
    connect = min(settings.connect_timeout, deadline - now)
    address = _destination(target, settings, connect, clock)
    if clock.deadline - settings.clock() <= 0:
        raise TransportFailure(sent=False, budget=clock.budget_spent(), timeout=True)

    ssl_context = settings.ssl_context or _default_ssl_context()
    secure = target.scheme == "https"
    port = target.port or (443 if secure else 80)
    key: _Key = (
        target.scheme,
        target.raw_host.decode("ascii"),
        port,
        address,
        id(ssl_context) if secure else None,
    )
    remaining = max(deadline - settings.clock(), _MINIMUM_WAIT)
    request = httpcore.Request(
        method=method.encode("ascii"),
        url=httpcore.URL(
            scheme=target.raw_scheme,
            host=target.raw_host,
            port=target.port,
            target=target.raw_path,
        ),
        headers=_request_headers(target, headers, body),
        content=body if body is not None else b"",
        extensions={
            "timeout": {
                "connect": min(settings.connect_timeout, remaining),
                "read": remaining,
                "write": remaining,
                "pool": remaining,
            }
        },
    )
    with _pools.checkout(key, ssl_context) as destination, _serving(clock):
        try:
            try:
                response = destination.pool.handle_request(request)
            except _StaleConnection:
                # The server had closed the reused connection and no byte of this request was
                # written: once more on a new connection (a transport detail, not a retry).
                response = destination.fresh().handle_request(request)
        except httpcore.UnsupportedProtocol as exc:
            raise DestinationRefused() from exc
        except (httpcore.TimeoutException, httpcore.NetworkError, httpcore.ProtocolError) as exc:
            raise _failure(exc, clock) from exc
        except OSError as exc:
            raise _failure(exc, clock) from exc
        answer: ProductAnswer | None = None
        try:
            answer = _read_answer(response, clock, settings.max_body_bytes)
            return answer
        finally:
            if answer is None or answer.body_problem is not None:
                _discard(response)  # only a connection read to its clean end goes back
            response.close()


@lru_cache(maxsize=256)
def _parsed(url: str) -> httpx.URL | None:
    """`url` parsed and checked by httpx (immutable, so kept: a connection's token endpoint
    and most operation URLs repeat), or None when it is not a valid URL."""
    try:
        return httpx.URL(url)
    except httpx.InvalidURL:
        return None


def _request_headers(
    target: httpx.URL, headers: Mapping[str, str], body: bytes | None
) -> list[tuple[bytes, bytes]]:
    """The request's header fields: `Host`, the policy's defaults, the caller's (a caller's
    field replaces a default of the same name, in any case), and `Content-Length` when there
    is a body."""
    fields = {
        "accept": ("Accept", "application/json"),
        "user-agent": ("User-Agent", user_agent()),
        # Bodies are counted as they arrive; asking for no content coding keeps that honest.
        "accept-encoding": ("Accept-Encoding", "identity"),
    }
    for name, value in headers.items():
        fields[name.lower()] = (name, value)
    encoded = [(b"Host", target.netloc)]
    encoded.extend(
        (name.encode("latin-1"), value.encode("latin-1"))
        for lowered, (name, value) in fields.items()
        if lowered not in _FRAMING_FIELDS
    )
    if body is not None:
        encoded.append((b"Content-Length", str(len(body)).encode("ascii")))
    return encoded


@contextmanager
def _serving(clock: _Clock) -> Iterator[None]:
    """Make `clock` the one every socket operation of this thread is clipped to."""
    token = _active_clock.set(clock)
    try:
        yield
    finally:
        _active_clock.reset(token)


def _discard(response: httpcore.Response) -> None:
    stream = response.extensions.get("network_stream")
    if isinstance(stream, httpcore.NetworkStream):
        stream.close()  # the pool then sees it closed and drops it


def _failure(exc: BaseException, clock: _Clock) -> TransportFailure:
    timed_out = isinstance(exc, httpcore.TimeoutException | TimeoutError)
    return TransportFailure(
        sent=clock.sending, budget=timed_out and clock.budget_spent(), timeout=timed_out
    )


def _field(response: httpcore.Response, name: bytes) -> str | None:
    for key, value in response.headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _read_answer(response: httpcore.Response, clock: _Clock, limit: int) -> ProductAnswer:
    status = response.status
    success = 200 <= status < 300
    content_type = _field(response, b"content-type")
    declared = _field(response, b"content-length") or ""
    if declared.strip().isdigit() and int(declared) > limit:
        return ProductAnswer(status, None, "oversize", content_type)
    coding = (_field(response, b"content-encoding") or "identity").strip().lower()
    if coding != "identity":  # none was accepted (`Accept-Encoding: identity`)
        return ProductAnswer(status, None, "undecodable", content_type)
    stream = response.stream
    assert isinstance(stream, Iterable)
    chunks: list[bytes] = []
    size = 0
    try:
        for chunk in stream:
            size += len(chunk)
            if size > limit:
                return ProductAnswer(status, None, "oversize", content_type)
            chunks.append(chunk)
    except (
        httpcore.TimeoutException,
        httpcore.NetworkError,
        httpcore.ProtocolError,
        OSError,
    ) as exc:
        if success:
            raise _failure(exc, clock) from exc
        # the status alone decides
        return ProductAnswer(status, None, "undecodable", content_type)
    return ProductAnswer(status, b"".join(chunks), None, content_type)
