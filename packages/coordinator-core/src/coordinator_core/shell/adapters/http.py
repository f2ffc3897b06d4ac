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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from typing import Final, Literal
from urllib.parse import quote

import httpx

from coordinator_core.shell.adapters.destinations import (
    DestinationRefused,
    Resolver,
    checked_address,
)
from coordinator_core.shell.adapters.transport import (
    HttpConnection,
    PoolKey,
    ProtocolFailure,
    RequestClock,
    TransportFailure,
    checkout,
    default_ssl_context,
    request_bytes,
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

    The request goes to the destination's pool (transport.py); httpx only parses and checks
    the URL.
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
    key: PoolKey = (
        target.scheme,
        target.raw_host.decode("ascii"),
        target.port or (443 if secure else 80),
        address,
        id(ssl_context) if secure else None,
    )
    try:
        message = request_bytes(
            method.encode("ascii"),
            target.raw_path,
            _request_headers(target, headers, body),
            body if body is not None else b"",
        )
    except (ProtocolFailure, UnicodeEncodeError) as exc:
        raise TransportFailure(sent=False, budget=False, timeout=False) from exc
    with checkout(key, ssl_context) as destination:
        try:
            connection = destination.connection(clock, settings.connect_timeout)
        except (OSError, ssl.SSLError) as exc:
            raise _failure(exc, clock) from exc
        answer: ProductAnswer | None = None
        try:
            answer = _answer_on(connection, message, clock, settings.max_body_bytes)
            return answer
        finally:
            if answer is not None and answer.body_problem is None and connection.reusable:
                destination.give_back(connection)
            else:
                connection.close()  # only a connection read to its clean end goes back


def _answer_on(
    connection: HttpConnection, message: bytes, clock: RequestClock, limit: int
) -> ProductAnswer:
    """Send `message` on `connection` and read its complete answer."""
    try:
        connection.send(message, clock, limit)
        status, head = connection.head(clock)
    except (OSError, ProtocolFailure) as exc:
        raise _failure(exc, clock) from exc
    content_type = _text(head.field(b"content-type"))
    declared = _text(head.field(b"content-length")) or ""
    if declared.strip().isdigit() and int(declared) > limit:
        return ProductAnswer(status, None, "oversize", content_type)
    coding = (_text(head.field(b"content-encoding")) or "identity").strip().lower()
    if coding != "identity":  # none was accepted (`Accept-Encoding: identity`)
        return ProductAnswer(status, None, "undecodable", content_type)
    try:
        body = connection.body(clock)
    except (OSError, ProtocolFailure) as exc:
        if 200 <= status < 300:
            raise _failure(exc, clock) from exc
        # the status alone decides
        return ProductAnswer(status, None, "undecodable", content_type)
    if body is None:
        return ProductAnswer(status, None, "oversize", content_type)
    return ProductAnswer(status, body, None, content_type)


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


def _failure(exc: BaseException, clock: RequestClock) -> TransportFailure:
    timed_out = isinstance(exc, TimeoutError)
    return TransportFailure(
        sent=clock.sending, budget=timed_out and clock.budget_spent(), timeout=timed_out
    )


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("latin-1")
