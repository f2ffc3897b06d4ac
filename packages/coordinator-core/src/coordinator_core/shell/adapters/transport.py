"""The pinned, deadline-clipped transport under the HTTP client policy (contract 08 §2.1).

Every TCP connection is made to the one checked address of its destination (TLS still verifies
the certificate against the host name), and every socket operation is clipped to the deadline
of the request using the socket now (`RequestClock`, made current by `serving`), not of the one
that opened it.

Connections are pooled per checked destination: one process-wide keep-alive pool per (scheme,
host, port, resolved address, TLS context), so a host that now resolves elsewhere gets another
connection and a refused destination never reaches a pool. At most 8 idle connections are kept
per destination, none idle longer than 30 s. A reused connection found closed by the server
before any byte of the request was written raises `StaleConnection`, so the exchange can replace
it by a fresh one once (nothing was sent, so this is no retry). `close_pools()` closes them all
(also at process exit).
"""

from __future__ import annotations

import atexit
import itertools
import os
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from functools import lru_cache
from typing import Any, Final

# httpcore is httpx's own transport layer: the pinned, deadline-clipped network backend below
# plugs in there, since httpx's public transport takes no backend.
import httpcore
import httpx

__all__ = [
    "MINIMUM_WAIT",
    "POOL_IDLE_CONNECTIONS",
    "POOL_IDLE_SECONDS",
    "DestinationPool",
    "PoolKey",
    "RequestClock",
    "StaleConnection",
    "TransportFailure",
    "checkout",
    "close_pools",
    "default_ssl_context",
    "serving",
]

# A socket timeout of 0 would make the socket non-blocking (an OSError, not a timeout), so a
# deadline that has not quite passed still gets this much time.
MINIMUM_WAIT: Final = 0.001
# A timeout firing this close to the attempt deadline is the attempt budget running out.
_BUDGET_SLACK: Final = 0.005


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


# How long a pooled connection may sit idle, and how many idle ones a destination keeps.
POOL_IDLE_SECONDS: Final = 30.0
POOL_IDLE_CONNECTIONS: Final = 8
# Destinations (pools) kept at once; an unused one goes once its connections have expired.
_POOL_DESTINATIONS: Final = 64

_serials = itertools.count(1)


class RequestClock:
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
        return max(remaining, MINIMUM_WAIT)

    def budget_spent(self) -> bool:
        return self.now() >= self.attempt_deadline - _BUDGET_SLACK


# The clock of the request this thread is sending now: a pooled socket outlives the request
# that opened it, so every operation asks for the current one.
_active_clock: ContextVar[RequestClock | None] = ContextVar("coordinator_http_clock", default=None)


def _clock(expired: type[Exception]) -> RequestClock:
    clock = _active_clock.get()
    if clock is None:  # a socket is only ever used inside exchange()
        raise expired("No request is active.")
    return clock


@contextmanager
def serving(clock: RequestClock) -> Iterator[None]:
    """Make `clock` the one every socket operation of this thread is clipped to."""
    token = _active_clock.set(clock)
    try:
        yield
    finally:
        _active_clock.reset(token)


class StaleConnection(httpcore.ConnectError):
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
                raise StaleConnection("The pooled connection was closed.")
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


PoolKey = tuple[str, str, int, str, int | None]


class DestinationPool:
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
                destination = DestinationPool(key[3], ssl_context)
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
