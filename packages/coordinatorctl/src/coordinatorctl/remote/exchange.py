"""The HTTP exchange of the remote commands under the client policy of 09 §4: one request, a
total deadline of 30 s (connect 5 s), redirects never followed, no proxy or netrc from the
environment, at most 1 MiB of answer read incrementally.

A failed exchange is one closed word (`Failure`), never an exception's text: the token sent in
the `Authorization` header, the URL and the cause stay out of every result.

It is not the transport of a client generated from the OpenAPI document (openapi-python-client):
measured, that removed no code here; docs/architecture.md says why.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal

from coordinatorctl.remote.request import ApiRequest

if TYPE_CHECKING:
    import ssl

__all__ = [
    "CONNECT_TIMEOUT_SECONDS",
    "MAX_RESPONSE_BYTES",
    "TOTAL_TIMEOUT_SECONDS",
    "Failure",
    "RemoteAnswer",
    "exchange",
    "send",
]

TOTAL_TIMEOUT_SECONDS: float = 30.0
CONNECT_TIMEOUT_SECONDS: float = 5.0
MAX_RESPONSE_BYTES: Final = 1_048_576

Failure = Literal["unreachable", "tls", "timeout", "oversize", "invalid", "redirect"]


@dataclass(frozen=True, slots=True)
class RemoteAnswer:
    """A complete answer: status, media type (lowercase, without parameters), body and, for a
    run's status read, the opaque tag of its weak `ETag` (06 §5.3: what `seen` takes)."""

    status: int
    media_type: str
    body: bytes = field(repr=False)
    tag: str | None = None


def _user_agent() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"coordinatorctl/{version('coordinatorctl')}"
    except PackageNotFoundError:
        return "coordinatorctl"


def _ssl_context() -> ssl.SSLContext:
    """The system trust store (which honours SSL_CERT_FILE / SSL_CERT_DIR) plus certifi's."""
    import ssl

    context = ssl.create_default_context()
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        import certifi

        context.load_verify_locations(cafile=certifi.where())
    except (ImportError, OSError):  # pragma: no cover - certifi ships with httpx
        pass
    return context


def _certificate_refused(error: BaseException) -> bool:
    """Whether a connection failed because the service's TLS certificate was not trusted (or
    does not name the host): an `ssl.SSLCertVerificationError` in the error's chain."""
    import ssl

    seen: BaseException | None = error
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, ssl.SSLCertVerificationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _media_type(value: str | None) -> str:
    return (value or "").split(";", 1)[0].strip().lower()


_WEAK_TAG: Final = re.compile(r'^W/"([0-9a-f]{16})"$')


def _weak_tag(value: str | None) -> str | None:
    """The opaque tag of a run status's weak `ETag`, or None (absent or of another form)."""
    found = _WEAK_TAG.match(value.strip()) if value is not None else None
    return found.group(1) if found is not None else None


async def _exchange(origin: str, request: ApiRequest, token: str | None) -> RemoteAnswer | Failure:
    import asyncio

    import httpx  # noqa: TID251 - remote commands are a shell module; see the module docstring

    headers = {
        "Accept": "application/json, application/problem+json",
        # Answers are counted as sent; asking for no content coding keeps the count honest.
        "Accept-Encoding": "identity",
        "User-Agent": _user_agent(),
    }
    if token is not None:  # `openapi --url` asks a tokenless route (06 §14)
        headers["Authorization"] = f"Bearer {token}"
    content: bytes | None = None
    if request.body is not None:
        headers["Content-Type"] = "application/json"
        content = json.dumps(request.body, ensure_ascii=False, separators=(",", ":")).encode()
    headers.update(request.headers)
    timeout = httpx.Timeout(TOTAL_TIMEOUT_SECONDS, connect=CONNECT_TIMEOUT_SECONDS)
    verify: ssl.SSLContext | bool = _ssl_context() if origin.startswith("https:") else False
    try:
        async with (
            asyncio.timeout(TOTAL_TIMEOUT_SECONDS),
            httpx.AsyncClient(
                timeout=timeout,
                follow_redirects=False,
                trust_env=False,  # no proxy, netrc or certificate settings from the environment
                verify=verify,
                http2=False,
            ) as client,
            client.stream(
                request.method,
                origin + request.path,
                params=list(request.query),
                headers=headers,
                content=content,
            ) as response,
        ):
            status = response.status_code
            if 300 <= status < 400:
                return "redirect"
            if not 200 <= status < 600:
                return "invalid"
            if _media_type(response.headers.get("content-encoding")) not in ("", "identity"):
                return "invalid"
            declared = response.headers.get("content-length", "").strip()
            if declared.isdigit() and int(declared) > MAX_RESPONSE_BYTES:
                return "oversize"
            body = bytearray()
            async for chunk in response.aiter_raw():
                body += chunk
                if len(body) > MAX_RESPONSE_BYTES:
                    return "oversize"
            return RemoteAnswer(
                status,
                _media_type(response.headers.get("content-type")),
                bytes(body),
                _weak_tag(response.headers.get("etag")),
            )
    except (TimeoutError, httpx.TimeoutException):
        return "timeout"
    except httpx.ConnectError as error:
        return "tls" if _certificate_refused(error) else "unreachable"
    except httpx.UnsupportedProtocol:
        return "unreachable"
    except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError, OSError, UnicodeError):
        return "invalid"


def send(origin: str, request: ApiRequest, token: str | None) -> RemoteAnswer | Failure:
    """Send one request and read its complete answer (blocking)."""
    import asyncio

    return asyncio.run(_exchange(origin, request, token))


def exchange(origin: str, request: ApiRequest, token: str) -> RemoteAnswer | Failure:
    """One request under the client policy of 09 §4; an answer that repeats the caller's token
    is no valid answer of the service (06 §12) and never reaches the output."""
    answer = send(origin, request, token)
    if isinstance(answer, RemoteAnswer) and token.encode("ascii") in answer.body:
        return "invalid"
    return answer
