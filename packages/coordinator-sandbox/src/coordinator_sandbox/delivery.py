"""Outbound deliveries with redelivery: BReg events signed with the v1 delivery signature
(file 05 §7.1, file 08 §3.4) and Casework completion events (file 08 §4.4).

Every retry keeps the event's identity (`ce-id` and `Idempotency-Key`, or `eventId`); only the
attempt number, the delivery time and therefore the signature change.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import struct
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import httpx

__all__ = [
    "Deliverer",
    "Delivery",
    "DeliveryPolicy",
    "delivery_signature",
    "rfc3339_now",
]

_SIGNATURE_LABEL = b"breg-webhook-signature-v1"


def rfc3339_now(milliseconds: bool = False) -> str:
    now = datetime.now(UTC)
    if milliseconds:
        return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def delivery_signature(
    key: bytes,
    *,
    ce_id: str,
    ce_source: str,
    ce_type: str,
    ce_time: str,
    ce_dataschema: str,
    generation: str,
    attempt: str,
    delivery_time: str,
    method: str,
    target: str,
    content_type: str,
    idempotency_key: str,
    body: bytes,
) -> str:
    """`X-Registry-Signature` of file 05 §7.1: `v1=` + base64url(HMAC-SHA256) without padding."""
    message = bytearray(_SIGNATURE_LABEL)
    values = (
        b"1.0",
        ce_id.encode(),
        ce_source.encode(),
        ce_type.encode(),
        ce_time.encode(),
        ce_dataschema.encode(),
        generation.encode(),
        attempt.encode(),
        delivery_time.encode(),
        method.encode(),
        target.encode(),
        content_type.encode(),
        idempotency_key.encode(),
        body,
    )
    for value in values:
        message += struct.pack(">Q", len(value)) + value
    digest = hmac.new(key, bytes(message), hashlib.sha256).digest()
    return "v1=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


@dataclass
class DeliveryPolicy:
    """Redelivery schedule: exponential from `initial_seconds`, capped, bounded in attempts."""

    initial_seconds: float = 0.5
    maximum_seconds: float = 30.0
    maximum_attempts: int = 1000
    timeout_seconds: float = 5.0


@dataclass
class Delivery:
    """One event and its delivery attempts."""

    delivery_id: str
    kind: str
    url: str
    body: bytes
    build_headers: Callable[[int], dict[str, str]]
    stop_on_client_error: bool
    summary: dict[str, Any]
    attempts: list[dict[str, Any]] = field(default_factory=list)
    state: str = "pending"

    def describe(self) -> dict[str, Any]:
        return {
            "deliveryId": self.delivery_id,
            "kind": self.kind,
            "url": self.url,
            "state": self.state,
            "attempts": self.attempts,
            **self.summary,
        }


class Deliverer:
    """Runs deliveries as background tasks of the sandbox's event loop."""

    def __init__(self, policy: DeliveryPolicy | None = None) -> None:
        self.policy = policy or DeliveryPolicy()
        self.deliveries: list[Delivery] = []
        self._tasks: set[asyncio.Task[None]] = set()

    def submit(self, delivery: Delivery) -> Delivery:
        self.deliveries.append(delivery)
        task = asyncio.get_running_loop().create_task(self._run(delivery))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return delivery

    async def _run(self, delivery: Delivery) -> None:
        policy = self.policy
        async with httpx.AsyncClient(
            timeout=policy.timeout_seconds, trust_env=False, follow_redirects=False
        ) as client:
            for attempt in range(1, policy.maximum_attempts + 1):
                headers = delivery.build_headers(attempt)
                record: dict[str, Any] = {"attempt": attempt, "at": time.time()}
                try:
                    response = await client.post(
                        delivery.url, content=delivery.body, headers=headers
                    )
                    record["status"] = response.status_code
                except httpx.HTTPError as exc:
                    record["error"] = type(exc).__name__
                    response = None
                delivery.attempts.append(record)
                if response is not None:
                    status = response.status_code
                    if 200 <= status < 300:
                        delivery.state = "delivered"
                        return
                    if (
                        delivery.stop_on_client_error
                        and 400 <= status < 500
                        and status not in {408, 429}
                    ):
                        delivery.state = "abandoned"
                        return
                delay = min(policy.initial_seconds * 2 ** (attempt - 1), policy.maximum_seconds)
                await asyncio.sleep(delay)
        delivery.state = "exhausted"

    def signed_event(
        self,
        *,
        url: str,
        key: bytes,
        source: str,
        event_type: str,
        body: bytes,
        ce_id: str | None = None,
        ce_time: str | None = None,
        dataschema: str | None = None,
        generation: int = 1,
        idempotency_key: str | None = None,
    ) -> Delivery:
        """Deliver a BReg event with the v1 delivery signature until a 2xx (a 4xx other than
        408/429 ends the retries, file 08 §3.4)."""
        event_id = ce_id or str(uuid.uuid4())
        event_time = ce_time or rfc3339_now()
        key_header = idempotency_key or f"delivery-{event_id}"
        parts = urlsplit(url)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        content_type = "application/json"

        def headers(attempt: int) -> dict[str, str]:
            delivery_time = rfc3339_now()
            signature = delivery_signature(
                key,
                ce_id=event_id,
                ce_source=source,
                ce_type=event_type,
                ce_time=event_time,
                ce_dataschema=dataschema or "",
                generation=str(generation),
                attempt=str(attempt),
                delivery_time=delivery_time,
                method="POST",
                target=target,
                content_type=content_type,
                idempotency_key=key_header,
                body=body,
            )
            result = {
                "ce-specversion": "1.0",
                "ce-id": event_id,
                "ce-source": source,
                "ce-type": event_type,
                "ce-time": event_time,
                "X-Registry-Event-Generation": str(generation),
                "X-Registry-Delivery-Attempt": str(attempt),
                "X-Registry-Delivery-Time": delivery_time,
                "Content-Type": content_type,
                "Idempotency-Key": key_header,
                "X-Registry-Signature": signature,
            }
            if dataschema:
                result["ce-dataschema"] = dataschema
            return result

        summary = {"ceId": event_id, "type": event_type, "idempotencyKey": key_header}
        return self.submit(Delivery(str(uuid.uuid4()), "event", url, body, headers, True, summary))

    def completion(self, *, url: str, token: str, body: bytes, event_id: str) -> Delivery:
        """Deliver a Casework completion event with the destination's bearer secret, retrying
        with the same `eventId` until a 2xx (file 08 §4.4)."""

        def headers(attempt: int) -> dict[str, str]:
            return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

        summary = {"eventId": event_id}
        return self.submit(
            Delivery(str(uuid.uuid4()), "review-completion", url, body, headers, False, summary)
        )

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
