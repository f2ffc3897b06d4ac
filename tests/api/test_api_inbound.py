"""Signed product events (06 §8, 05 §7.1) and Casework completion events (06 §9)."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from api_fakes import (
    BASE_URL,
    CANARY,
    COMPLETION_TOKEN,
    EVENT_KEY,
    EVENT_SOURCE,
    FakeJournal,
    FakeRunService,
    SigningKeys,
    bearer,
    settings,
)

from coordinator_api import create_app
from coordinator_api.events import DeliveryHeaders, delivery_signature, parse_delivery_headers
from coordinator_core.shell.service import ServiceRefusal

pytestmark = pytest.mark.anyio

PATH = "/v1/events/reviewed-notice/application-submitted"
BODY = b'{"entity":"application","recordIdentifier":"a8d12546-b2ca-46ac-b12b-06c199041bb2"}'
VECTOR_2 = {
    "ce-specversion": "1.0",
    "ce-id": "00000000-0000-4000-8000-000000000002",
    "ce-source": EVENT_SOURCE,
    "ce-type": "application-submitted-v1",
    "ce-time": "2026-03-02T08:59:58Z",
    "X-Registry-Event-Generation": "1",
    "X-Registry-Delivery-Attempt": "1",
    "X-Registry-Delivery-Time": "2026-03-02T09:00:00Z",
    "Content-Type": "application/json",
    "Idempotency-Key": "delivery-00000000-0000-4000-8000-000000000002",
    "X-Registry-Signature": "v1=nmk4kGxR0rByid1x2AAKJcQX7mI57mo40GjggzsyunY",
}


def signed(
    headers: dict[str, str], body: bytes, path: str = PATH, key: bytes = EVENT_KEY
) -> dict[str, str]:
    """`headers` with a fresh valid signature for `body` at `path`."""
    unsigned = {**headers, "X-Registry-Signature": "v1=" + "A" * 43}
    parsed = parse_delivery_headers([(k.lower().encode(), v.encode()) for k, v in unsigned.items()])
    assert parsed is not None
    signature = delivery_signature(key, parsed, method=b"POST", target=path.encode(), body=body)
    return {**headers, "X-Registry-Signature": signature.decode()}


def test_signature_vector_1() -> None:
    headers = DeliveryHeaders(
        event_id=b"00000000-0000-4000-8000-000000000001",
        source=EVENT_SOURCE.encode(),
        event_type=b"case-created-v1",
        time=b"2026-08-30T00:00:00Z",
        dataschema=b"urn:registrystack:registry:example:event:case-created-v1:schema:sha256:aaa",
        generation=b"1",
        attempt=b"1",
        delivery_time=b"2026-08-30T00:00:01Z",
        content_type=b"application/json",
        idempotency_key=b"sha256:" + b"a" * 64,
        signature=b"",
    )
    body = b'{"entity":"case","values":{"label":"value"}}'
    signature = delivery_signature(
        EVENT_KEY, headers, method=b"POST", target=b"/hooks/registry", body=body
    )
    assert signature == b"v1=OzL5k0ghZJb9nPbb-JOVsroWeanipBlZXbeKDd52RcM"


def test_signature_vector_2() -> None:
    assert signed(VECTOR_2, BODY)["X-Registry-Signature"] == VECTOR_2["X-Registry-Signature"]


async def test_vector_2_admits_a_run_once(
    client: httpx.AsyncClient, service: FakeRunService, journal: FakeJournal, conforms: Any
) -> None:
    first = conforms(await client.post(PATH, content=BODY, headers=VECTOR_2))
    assert first.status_code == 201, first.text
    again = conforms(await client.post(PATH, content=BODY, headers=VECTOR_2))
    assert again.status_code == 200 and again.json() == first.json()
    assert len(service.runs) == 1
    request = journal.entries[0][2]
    assert (request.action, request.source, request.event_id) == (  # type: ignore[union-attr]
        "event-admit",
        "applications",
        VECTOR_2["ce-id"],
    )
    assert journal.entries[1][2].run_id == uuid.UUID(first.json()["runId"])
    assert journal.entries[3][2].run_id == uuid.UUID(first.json()["runId"])  # the replay's
    # Each request entry is made durable with the admission's commit, not by an fsync of its own.
    assert journal.until_commit == ["event-admit", "event-admit"]


async def test_a_refused_event_admission_names_no_run(
    client: httpx.AsyncClient, service: FakeRunService, journal: FakeJournal
) -> None:
    service.refusal = ServiceRefusal("idempotency.key-reused")
    response = await client.post(PATH, content=BODY, headers=VECTOR_2)
    assert response.status_code == 409, response.text
    phases = [(phase, getattr(entry, "outcome", None)) for phase, _, entry in journal.entries]
    assert phases == [("request", None), ("response", "refused")]
    assert journal.entries[1][2].run_id is None  # type: ignore[union-attr]
    assert journal.until_commit == ["event-admit"]


@pytest.mark.parametrize(
    ("path", "changes", "body", "expected"),
    [
        (
            "/v1/events/other-flow/application-submitted",
            {},
            BODY,
            "coordinator.event.trigger-unknown",
        ),
        ("/v1/events/reviewed-notice/nope", {}, BODY, "coordinator.event.trigger-unknown"),
        (PATH, {"ce-specversion": "0.3"}, BODY, "coordinator.event.headers-invalid"),
        (PATH, {"ce-id": None}, BODY, "coordinator.event.headers-invalid"),
        (PATH, {"ce-time": "yesterday"}, BODY, "coordinator.event.headers-invalid"),
        (
            PATH,
            {"X-Registry-Delivery-Time": "2026-03-02T10:00:00+01:00"},
            BODY,
            "coordinator.event.headers-invalid",
        ),
        (PATH, {"X-Registry-Event-Generation": "0"}, BODY, "coordinator.event.headers-invalid"),
        (PATH, {"Content-Type": "text/plain"}, BODY, "coordinator.event.headers-invalid"),
        (PATH, {"X-Registry-Signature": "v1=short"}, BODY, "coordinator.event.headers-invalid"),
        (PATH, {"ce-source": "urn:someone:else"}, BODY, "coordinator.event.signature-invalid"),
        (
            PATH,
            {"X-Registry-Delivery-Time": "2026-03-02T09:05:01Z"},
            BODY,
            "coordinator.event.stale",
        ),
        (PATH, {"ce-type": "something-else-v1"}, BODY, "coordinator.event.type-mismatch"),
        (PATH, {}, b'{"a": 1, "a": 2}', "coordinator.event.body-invalid"),
        (PATH, {}, b"[" * 40 + b"]" * 40, "coordinator.event.body-invalid"),
    ],
    ids=lambda value: value if isinstance(value, str) and value.startswith("coord") else "",
)
async def test_event_refusals_follow_the_contract_order(
    client: httpx.AsyncClient,
    service: FakeRunService,
    conforms: Any,
    path: str,
    changes: dict[str, str | None],
    body: bytes,
    expected: str,
) -> None:
    headers = {k: v for k, v in {**VECTOR_2, **changes}.items() if v is not None}
    if expected != "coordinator.event.headers-invalid":
        headers = signed(headers, body, path)  # every check before the failing one passes
    response = conforms(await client.post(path, content=body, headers=headers))
    assert response.json()["code"] == expected, response.text
    assert service.calls == []


async def test_a_wrong_signature_is_refused_and_journaled(
    client: httpx.AsyncClient, journal: FakeJournal
) -> None:
    headers = signed(VECTOR_2, BODY, key=b"another-key-of-at-least-32-bytes-long")
    response = await client.post(PATH, content=BODY, headers=headers)
    assert response.status_code == 401
    assert response.json()["code"] == "coordinator.event.signature-invalid"
    outcome = journal.entries[-1][2]
    assert outcome.code == "coordinator.event.signature-invalid"  # type: ignore[union-attr]


async def test_a_changed_body_breaks_the_signature(client: httpx.AsyncClient) -> None:
    response = await client.post(PATH, content=BODY.replace(b"a8d1", b"b8d1"), headers=VECTOR_2)
    assert response.json()["code"] == "coordinator.event.signature-invalid"


async def test_an_oversized_event_is_413_first(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/events/x/y", content=b"x" * 70_000, headers={})
    assert response.status_code == 413


async def test_holds_and_recovery_only_answer_retry_after(
    keys: SigningKeys, client: httpx.AsyncClient, service: FakeRunService
) -> None:
    await client.post("/v1/restore-hold", json={"reason": "INC-1"}, headers=bearer(keys))
    held = await client.post(PATH, content=BODY, headers=VECTOR_2)
    assert (held.status_code, held.headers["retry-after"]) == (503, "60")
    assert held.json()["code"] == "coordinator.event.admissions-held"
    recovery = create_app(
        settings(keys, recovery_only=True), service=FakeRunService(), journal=FakeJournal()
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=recovery), base_url=BASE_URL
    ) as other:
        response = await other.post(PATH, content=BODY, headers=VECTOR_2)
    assert (response.status_code, response.headers["retry-after"]) == (503, "60")


# ---------------------------------------------------------------------------------------------
# Casework completion events


def completion(**changes: Any) -> dict[str, Any]:
    body = {
        "type": "review.completed",
        "eventId": str(uuid.uuid4()),
        "requestId": str(uuid.uuid4()),
        "resultId": str(uuid.uuid4()),
        "completedAt": "2026-03-02T08:00:00Z",
    }
    body.update(changes)
    return body


async def test_a_completion_is_204_and_reaches_the_service(
    client: httpx.AsyncClient, service: FakeRunService, journal: FakeJournal
) -> None:
    body = completion()
    headers = {"Authorization": "Bearer " + COMPLETION_TOKEN.decode()}
    response = await client.post("/v1/review-completions", json=body, headers=headers)
    assert response.status_code == 204 and response.content == b""
    assert response.headers["cache-control"] == "no-store"
    assert service.completions == [("reviews", uuid.UUID(body["requestId"]))]
    assert journal.entries[0][2].connection == "reviews"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "authorization", [None, "Bearer wrong-secret", "Bearer", "Basic " + COMPLETION_TOKEN.decode()]
)
async def test_a_completion_without_the_secret_is_refused(
    client: httpx.AsyncClient, keys: SigningKeys, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    response = await client.post("/v1/review-completions", json=completion(), headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert response.json()["code"] == "coordinator.completion.unauthenticated"
    access_token = await client.post(
        "/v1/review-completions", json=completion(), headers=bearer(keys)
    )
    assert access_token.json()["code"] == "coordinator.completion.unauthenticated"


@pytest.mark.parametrize(
    "body",
    [completion(type="review.started"), completion(requestId="nope"), completion(extra=1),
     completion(completedAt="soon"), {"type": "review.completed"}],
)  # fmt: skip
async def test_a_malformed_completion_is_request_invalid(
    client: httpx.AsyncClient, service: FakeRunService, body: dict[str, Any]
) -> None:
    headers = {"Authorization": "Bearer " + COMPLETION_TOKEN.decode()}
    response = await client.post("/v1/review-completions", json=body, headers=headers)
    assert (response.status_code, response.json()["code"]) == (400, "coordinator.request.invalid")
    assert CANARY not in response.text
    assert service.completions == []
