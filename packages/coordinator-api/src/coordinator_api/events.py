"""The v1 delivery signature of signed product events (05 §7.1) and the event headers.

Header values are taken exactly as received (raw bytes from the ASGI scope) and the request
target is the raw path and query, so the signed message is the one the sender built.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from coordinator_api.bodies import parse_rfc3339

__all__ = [
    "SIGNATURE_CONTEXT",
    "DeliveryHeaders",
    "delivery_signature",
    "parse_delivery_headers",
    "request_target",
]

SIGNATURE_CONTEXT: Final = b"breg-webhook-signature-v1"

_VISIBLE_ASCII: Final = re.compile(rb"[\x21-\x7e]{1,256}")
_EVENT_TYPE: Final = re.compile(rb"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_POSITIVE: Final = re.compile(rb"[1-9][0-9]{0,18}")
_SIGNATURE: Final = re.compile(rb"v1=[A-Za-z0-9_-]{43}")
_SOURCE: Final = re.compile(rb"[A-Za-z][A-Za-z0-9+.-]*:[\x21-\x7e]+")
_CONTENT_TYPE: Final = re.compile(rb"application/json(?:[ \t]*;[ \t]*charset=\"?utf-8\"?)?", re.I)
_HEADER_NAMES: Final = (
    b"ce-specversion",
    b"ce-id",
    b"ce-source",
    b"ce-type",
    b"ce-time",
    b"ce-dataschema",
    b"x-registry-event-generation",
    b"x-registry-delivery-attempt",
    b"x-registry-delivery-time",
    b"content-type",
    b"idempotency-key",
    b"x-registry-signature",
)


@dataclass(frozen=True, slots=True)
class DeliveryHeaders:
    """The well-formed delivery headers of one event, as received."""

    event_id: bytes
    source: bytes
    event_type: bytes
    time: bytes
    dataschema: bytes
    generation: bytes
    attempt: bytes
    delivery_time: bytes
    content_type: bytes
    idempotency_key: bytes
    signature: bytes


def _single(headers: Mapping[bytes, list[bytes]], name: bytes) -> bytes | None:
    values = headers.get(name, [])
    if len(values) > 1:
        raise ValueError("repeated header")
    return values[0] if values else None


def parse_delivery_headers(raw: Iterable[tuple[bytes, bytes]]) -> DeliveryHeaders | None:
    """The delivery headers when all required ones are present once and well formed."""
    headers: dict[bytes, list[bytes]] = {}
    for name, value in raw:
        lowered = name.lower()
        if lowered in _HEADER_NAMES:
            headers.setdefault(lowered, []).append(value)
    try:
        values = {name: _single(headers, name) for name in _HEADER_NAMES}
    except ValueError:
        return None
    required = [name for name in _HEADER_NAMES if name != b"ce-dataschema"]
    if any(values[name] is None for name in required):
        return None
    spec, event_id, source, event_type, event_time, dataschema = (
        values[b"ce-specversion"],
        values[b"ce-id"],
        values[b"ce-source"],
        values[b"ce-type"],
        values[b"ce-time"],
        values[b"ce-dataschema"],
    )
    generation, attempt, delivery_time = (
        values[b"x-registry-event-generation"],
        values[b"x-registry-delivery-attempt"],
        values[b"x-registry-delivery-time"],
    )
    content_type, key, signature = (
        values[b"content-type"],
        values[b"idempotency-key"],
        values[b"x-registry-signature"],
    )
    assert event_id is not None and source is not None and event_type is not None
    assert event_time is not None and generation is not None and attempt is not None
    assert delivery_time is not None and content_type is not None and key is not None
    assert signature is not None
    well_formed = (
        spec == b"1.0"
        and _VISIBLE_ASCII.fullmatch(event_id)
        and len(source) <= 512
        and _SOURCE.fullmatch(source)
        and _EVENT_TYPE.fullmatch(event_type)
        and _is_rfc3339(event_time, utc_only=False)
        and (dataschema is None or (0 < len(dataschema) <= 2048 and _printable(dataschema)))
        and _POSITIVE.fullmatch(generation)
        and _POSITIVE.fullmatch(attempt)
        and _is_rfc3339(delivery_time, utc_only=True)
        and _CONTENT_TYPE.fullmatch(content_type)
        and _VISIBLE_ASCII.fullmatch(key)
        and _SIGNATURE.fullmatch(signature)
    )
    if not well_formed:
        return None
    return DeliveryHeaders(
        event_id=event_id,
        source=source,
        event_type=event_type,
        time=event_time,
        dataschema=dataschema or b"",
        generation=generation,
        attempt=attempt,
        delivery_time=delivery_time,
        content_type=content_type,
        idempotency_key=key,
        signature=signature,
    )


def _printable(value: bytes) -> bool:
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return not any(ord(char) < 0x20 or 0x7F <= ord(char) <= 0x9F for char in text)


def _is_rfc3339(value: bytes, *, utc_only: bool) -> bool:
    try:
        text = value.decode("ascii")
    except UnicodeDecodeError:
        return False
    if utc_only and not (text.endswith(("Z", "z", "+00:00"))):
        return False
    return parse_rfc3339(text) is not None


def request_target(raw_path: bytes, query_string: bytes) -> bytes:
    """The request target exactly as received: raw path and, when present, `?` and query."""
    return raw_path + (b"?" + query_string if query_string else b"")


def delivery_signature(
    key: bytes, headers: DeliveryHeaders, *, method: bytes, target: bytes, body: bytes
) -> bytes:
    """`v1=` + unpadded base64url HMAC-SHA256 over the length-prefixed message of 05 §7.1."""
    parts = (
        b"1.0",
        headers.event_id,
        headers.source,
        headers.event_type,
        headers.time,
        headers.dataschema,
        headers.generation,
        headers.attempt,
        headers.delivery_time,
        method,
        target,
        headers.content_type,
        headers.idempotency_key,
        body,
    )
    message = SIGNATURE_CONTEXT + b"".join(len(part).to_bytes(8, "big") + part for part in parts)
    digest = hmac.new(key, message, hashlib.sha256).digest()
    return b"v1=" + base64.urlsafe_b64encode(digest).rstrip(b"=")


def signature_matches(expected: bytes, presented: bytes) -> bool:
    return hmac.compare_digest(expected, presented)
