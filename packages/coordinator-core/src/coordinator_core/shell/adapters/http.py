"""The one HTTP client policy every product adapter and the token exchange use (contract 08 §2.1).

Every request is checked and pinned on its own: the destination is checked and the host
resolved once (destinations.py), the socket is connected to exactly that address and every
socket operation is clipped to the request's deadline (transport.py: connect 1 s, total 2 s,
never beyond the attempt budget), redirects are never followed, nothing is retried, and at most
65,536 body bytes are read. A connection goes back to its pool only after its answer was read to
the end (an oversize, undecodable or broken answer discards it); once a byte of the request may
have left, a failure is reported as it is.

Failures leave the exchange as two exception types only, `DestinationRefused` (destinations.py)
and `TransportFailure` (transport.py), carrying facts (was anything sent? did the attempt budget
run out?) and fixed messages; the adapters classify them into the engine's outcomes.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from typing import Final, Literal
from urllib.parse import quote

import httpcore
import httpx

from coordinator_core.shell.adapters.destinations import (
    DestinationRefused,
    Resolver,
    checked_address,
)
from coordinator_core.shell.adapters.transport import (
    MINIMUM_WAIT,
    PoolKey,
    RequestClock,
    StaleConnection,
    TransportFailure,
    checkout,
    default_ssl_context,
    serving,
)
from coordinator_core.values import (
    JsonBoundsError,
    StrictJsonError,
    check_json_value,
    parse_strict_json,
)

__all__ = [
    "CONNECT_TIMEOUT_SECONDS",
    "MAX_BODY_BYTES",
    "TOTAL_TIMEOUT_SECONDS",
    "HttpSettings",
    "ProductAnswer",
    "ProductProblem",
    "exchange",
    "json_body",
    "path_segment",
    "problem_of",
    "user_agent",
]

CONNECT_TIMEOUT_SECONDS: Final = 1.0
TOTAL_TIMEOUT_SECONDS: Final = 2.0
MAX_BODY_BYTES: Final = 65_536

# Message framing is this module's to write, never a caller's.
_FRAMING_FIELDS: Final = frozenset({"host", "content-length", "transfer-encoding"})


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
    clock = RequestClock(deadline, attempt_deadline, settings.clock)
    if deadline - now <= 0:
        raise TransportFailure(sent=False, budget=True, timeout=True)
    target = _parsed(url)
    if target is None:
        raise DestinationRefused()
    connect = min(settings.connect_timeout, deadline - now)
    address = checked_address(target, settings.resolver, connect, clock)
    if clock.deadline - settings.clock() <= 0:
        raise TransportFailure(sent=False, budget=clock.budget_spent(), timeout=True)

    ssl_context = settings.ssl_context or default_ssl_context()
    secure = target.scheme == "https"
    port = target.port or (443 if secure else 80)
    key: PoolKey = (
        target.scheme,
        target.raw_host.decode("ascii"),
        port,
        address,
        id(ssl_context) if secure else None,
    )
    remaining = max(deadline - settings.clock(), MINIMUM_WAIT)
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
    with checkout(key, ssl_context) as destination, serving(clock):
        try:
            try:
                response = destination.pool.handle_request(request)
            except StaleConnection:
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


def _discard(response: httpcore.Response) -> None:
    stream = response.extensions.get("network_stream")
    if isinstance(stream, httpcore.NetworkStream):
        stream.close()  # the pool then sees it closed and drops it


def _failure(exc: BaseException, clock: RequestClock) -> TransportFailure:
    timed_out = isinstance(exc, httpcore.TimeoutException | TimeoutError)
    return TransportFailure(
        sent=clock.sending, budget=timed_out and clock.budget_spent(), timeout=timed_out
    )


def _field(response: httpcore.Response, name: bytes) -> str | None:
    for key, value in response.headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _read_answer(response: httpcore.Response, clock: RequestClock, limit: int) -> ProductAnswer:
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
