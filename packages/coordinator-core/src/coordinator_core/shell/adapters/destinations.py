"""The destination policy of the HTTP client (contract 08 §2.1): which URLs may be reached, and
the one address each is connected to.

https anywhere; plain http only to a numeric loopback address; cloud metadata addresses never.
A host name is resolved once, within the connect timeout, and refused outright if any of its
addresses is a metadata address; the transport then connects to exactly the address returned.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Final

import httpx

from coordinator_core.shell.adapters.transport import RequestClock, TransportFailure

__all__ = ["METADATA_ADDRESSES", "DestinationRefused", "Resolver", "checked_address"]

METADATA_ADDRESSES: Final = frozenset(
    ipaddress.ip_address(text) for text in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)

_LOOPBACK_V4: Final = ipaddress.ip_network("127.0.0.0/8")
_LOOPBACK_V6: Final = ipaddress.ip_address("::1")

Resolver = Callable[[str, int], Sequence[str]]


class DestinationRefused(Exception):
    """The destination policy refused the URL; nothing was resolved or sent."""

    def __init__(self) -> None:
        super().__init__("The destination is refused by the client policy.")


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


def checked_address(
    url: httpx.URL, resolver: Resolver | None, timeout: float, clock: RequestClock
) -> str:
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
        addresses = _resolve_within(resolver or _system_resolve, host, port, timeout)
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
