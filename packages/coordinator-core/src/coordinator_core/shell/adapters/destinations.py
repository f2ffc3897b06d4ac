"""The destination policy of the HTTP client (contract 08 §2.1): which URLs may be reached, and
the one address each is connected to.

https anywhere; plain http only to a numeric loopback address; cloud metadata addresses never,
however spelled (an IPv6 address that embeds one for a translator or a tunnel included).
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
from functools import lru_cache
from typing import Final

import httpx

from coordinator_core.shell.adapters.transport import RequestClock, TransportFailure

__all__ = [
    "METADATA_ADDRESSES",
    "DestinationRefused",
    "Resolver",
    "checked_address",
    "embedded_ipv4",
]

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


# Pure functions of the text, asked for every request: kept per text.
@lru_cache(maxsize=1024)
def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


@lru_cache(maxsize=1024)
def _is_numeric_loopback(host: str) -> bool:
    """05 §5.1: `127.0.0.0/8` or `[::1]`, written as such (no mapped or scoped forms)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv4Address):
        return address in _LOOPBACK_V4
    return address == _LOOPBACK_V6


# RFC 6052 §2.2: where an IPv4 address sits in an IPv6 address under each prefix length of a
# NAT64 prefix (the well-known 64:ff9b::/96, the local-use 64:ff9b:1::/48 of RFC 8215, or any
# network-specific one): the bit ranges of its 32 bits; bits 64–71 (the `u` octet) are zero.
_RFC6052_LAYOUTS: Final = (
    ((32, 64),),
    ((40, 64), (72, 80)),
    ((48, 64), (72, 88)),
    ((56, 64), (72, 96)),
    ((72, 104),),
    ((96, 128),),
)


def _bits(value: int, start: int, end: int) -> int:
    """Bits `start`..`end` (from the most significant, 128-bit value) as an integer."""
    return (value >> (128 - end)) & ((1 << (end - start)) - 1)


def embedded_ipv4(address: ipaddress.IPv6Address) -> frozenset[ipaddress.IPv4Address]:
    """Every IPv4 address an IPv6 address may carry to a translator or tunnel: IPv4-mapped and
    IPv4-compatible (RFC 4291 §2.5.5), each RFC 6052 layout whatever its prefix (a NAT64
    gateway reaches the IPv4 address it finds there), 6to4 (RFC 3056) and both addresses of
    Teredo (RFC 4380)."""
    value = int(address)
    found: set[ipaddress.IPv4Address] = set()
    if address.ipv4_mapped is not None:
        found.add(address.ipv4_mapped)
    if value >> 32 == 0 and value > 1:
        found.add(ipaddress.IPv4Address(value & 0xFFFFFFFF))  # ::a.b.c.d, compatible
    for layout in _RFC6052_LAYOUTS:
        if layout[0][0] < 64 and _bits(value, 64, 72) != 0:
            continue  # the `u` octet of a 6052 address is zero
        embedded = 0
        for start, end in layout:
            embedded = (embedded << (end - start)) | _bits(value, start, end)
        found.add(ipaddress.IPv4Address(embedded))
    if address.sixtofour is not None:
        found.add(address.sixtofour)
    if address.teredo is not None:
        found.update(address.teredo)
    return frozenset(found)


@lru_cache(maxsize=1024)
def _is_metadata(text: str) -> bool:
    address = _address(text)
    if address is None:
        return False
    if address in METADATA_ADDRESSES:
        return True
    return isinstance(address, ipaddress.IPv6Address) and bool(
        embedded_ipv4(address) & METADATA_ADDRESSES
    )


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
        if _is_metadata(host):
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
