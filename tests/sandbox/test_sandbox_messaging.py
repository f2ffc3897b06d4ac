"""Sandbox Messaging: submission with Idempotency-Key (08 §5.1), the receipt lookup (§5.2) and
the fault injection of §11.7 observed over real HTTP."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from sandbox_support import Sandbox

MESSAGE: dict[str, Any] = {
    "senderProfile": "notices",
    "to": {"email": "ada@example.org"},
    "template": {"id": "decision-notice", "version": "3"},
    "locale": "en",
    "data": {"decision": "approved"},
    "correlationId": "run-1",
}


def submit(sandbox: Sandbox, key: str, body: Any = None, **options: Any) -> httpx.Response:
    return sandbox.http.post(
        sandbox.url("messaging", "/v1/messages"),
        headers=sandbox.headers("messaging", Idempotency_Key=key),
        json=MESSAGE if body is None else body,
        **options,
    )


def lookup(sandbox: Sandbox, key: str, body: Any = None) -> httpx.Response:
    return sandbox.http.post(
        sandbox.url("messaging", "/v1/messages/receipt-lookup"),
        headers=sandbox.headers("messaging", Idempotency_Key=key),
        json=MESSAGE if body is None else body,
    )


def messages_under(sandbox: Sandbox, key: str) -> list[dict[str, Any]]:
    listing = sandbox.http.get(sandbox.url("messaging", "/sandbox/messages")).json()
    return [item for item in listing["messages"] if item["idempotencyKey"] == key]


def test_same_key_and_same_request_return_the_same_receipt(sandbox: Sandbox, key: str) -> None:
    first = submit(sandbox, key)
    assert first.status_code == 202
    receipt = first.json()
    assert set(receipt) == {"id", "status", "links"} and set(receipt["links"]) == {"self", "cancel"}
    reordered = dict(reversed(list(MESSAGE.items())))  # same canonical JSON
    again = submit(sandbox, key, reordered)
    assert again.status_code == 202 and again.json() == receipt
    assert len(messages_under(sandbox, key)) == 1


def test_same_key_and_changed_request_is_409_key_reused(sandbox: Sandbox, key: str) -> None:
    assert submit(sandbox, key).status_code == 202
    changed = submit(sandbox, key, {**MESSAGE, "data": {"decision": "rejected"}})
    assert changed.status_code == 409
    problem = changed.json()
    assert problem["code"] == "idempotency.key-reused" and problem["status"] == 409
    assert changed.headers["content-type"] == "application/problem+json"


def test_receipt_lookup_answers_the_original_receipt_and_never_creates(
    sandbox: Sandbox, key: str
) -> None:
    unresolved = lookup(sandbox, key)
    assert unresolved.status_code == 404 and unresolved.json()["code"] == "receipt.unresolved"
    assert messages_under(sandbox, key) == []
    receipt = submit(sandbox, key).json()
    found = lookup(sandbox, key)
    assert found.status_code == 200 and found.json() == receipt
    other = lookup(sandbox, key, {**MESSAGE, "correlationId": "run-2"})
    assert other.status_code == 409 and other.json()["code"] == "idempotency.key-reused"
    assert len(messages_under(sandbox, key)) == 1


def test_keys_are_scoped_to_the_calling_principal(sandbox: Sandbox, key: str) -> None:
    assert submit(sandbox, key).status_code == 202
    stranger = sandbox.http.post(
        sandbox.token_endpoint.replace("/oauth/token", "/sandbox/access-tokens"),
        json={"clientId": "someone-else", "resource": "urn:registrystack:messaging",
              "scope": "messaging:messages:submit"},
    ).json()["access_token"]  # fmt: skip
    answer = sandbox.http.post(
        sandbox.url("messaging", "/v1/messages/receipt-lookup"),
        headers={"Authorization": f"Bearer {stranger}", "Idempotency-Key": key},
        json=MESSAGE,
    )
    assert answer.status_code == 404 and answer.json()["code"] == "receipt.unresolved"


def test_key_past_retention_answers_410_on_submit_and_lookup(sandbox: Sandbox, key: str) -> None:
    assert submit(sandbox, key).status_code == 202
    expired = sandbox.http.post(
        sandbox.url("messaging", "/sandbox/idempotency/expire"), json={"idempotencyKey": key}
    )
    assert expired.json() == {"expired": 1}
    for answer in (submit(sandbox, key), lookup(sandbox, key)):
        assert answer.status_code == 410 and answer.json()["code"] == "idempotency.expired"


@pytest.mark.parametrize(
    "body",
    [
        {**MESSAGE, "content": {"text": "both"}},
        {key: value for key, value in MESSAGE.items() if key != "locale"},
        {**MESSAGE, "to": {"phone": "0123"}},
        {**MESSAGE, "unexpected": True},
    ],
    ids=["template-and-content", "template-without-locale", "bad-phone", "unknown-member"],
)
def test_invalid_message_is_400_request_invalid(
    sandbox: Sandbox, key: str, body: dict[str, Any]
) -> None:
    answer = submit(sandbox, key, body)
    assert answer.status_code == 400 and answer.json()["code"] == "request.invalid"


def test_missing_or_malformed_idempotency_key_is_400(sandbox: Sandbox) -> None:
    for key in ("", "has space", "k" * 129):
        answer = submit(sandbox, key)
        assert answer.status_code == 400


def test_injected_503_commits_nothing_and_only_the_next_request_fails(
    sandbox: Sandbox, key: str
) -> None:
    sandbox.inject("messaging", operation="messaging.submit-message/v1", kind="fail", status=503)
    failed = submit(sandbox, key)
    assert failed.status_code == 503 and failed.json()["code"] == "service.unavailable"
    assert messages_under(sandbox, key) == []
    assert lookup(sandbox, key).status_code == 404
    assert submit(sandbox, key).status_code == 202
    entries = sandbox.requests(
        "messaging", idempotencyKey=key, operation="messaging.submit-message/v1"
    )
    assert [(e["fault"], e["status"], e["committed"]) for e in entries] == [
        ("fail", 503, False), (None, 202, True),
    ]  # fmt: skip


def test_effect_applied_response_lost_is_an_uncertain_outcome_settled_by_lookup(
    sandbox: Sandbox, key: str
) -> None:
    sandbox.inject("messaging", operation="messaging.submit-message/v1", kind="commit-then-drop")
    with pytest.raises(httpx.RemoteProtocolError):
        submit(sandbox, key)
    committed = messages_under(sandbox, key)
    assert len(committed) == 1  # the product applied the command although no answer came
    confirmed = lookup(sandbox, key)
    assert confirmed.status_code == 200 and confirmed.json()["id"] == committed[0]["id"]
    retried = submit(sandbox, key)
    assert retried.status_code == 202 and retried.json()["id"] == committed[0]["id"]
    assert len(messages_under(sandbox, key)) == 1
    outcomes = [e["outcome"] for e in sandbox.requests("messaging", idempotencyKey=key)]
    assert outcomes == ["dropped", "answered", "answered"]


def test_drop_before_commit_loses_the_request_without_effect(sandbox: Sandbox, key: str) -> None:
    sandbox.inject("messaging", operation="messaging.submit-message/v1", kind="drop")
    with pytest.raises(httpx.RemoteProtocolError):
        submit(sandbox, key)
    assert messages_under(sandbox, key) == []


def test_delay_longer_than_the_client_timeout_still_commits(sandbox: Sandbox, key: str) -> None:
    sandbox.inject(
        "messaging", operation="messaging.submit-message/v1", kind="delay", delaySeconds=0.6
    )
    with pytest.raises(httpx.ReadTimeout):
        submit(sandbox, key, timeout=0.2)
    deadline = time.monotonic() + 3
    while not messages_under(sandbox, key) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(messages_under(sandbox, key)) == 1


def test_injected_expiry_and_rate_limit_answer_their_problems(sandbox: Sandbox, key: str) -> None:
    sandbox.inject(
        "messaging",
        operation="messaging.submit-message/v1",
        kind="fail",
        status=429,
        count=2,
    )
    sandbox.inject("messaging", operation="messaging.submit-message/v1", kind="expired")
    statuses = [submit(sandbox, key).status_code for _ in range(4)]
    assert statuses == [429, 429, 410, 202]
    faults = sandbox.http.get(sandbox.url("messaging", "/sandbox/faults")).json()["faults"]
    assert faults == []


def test_unknown_fault_operation_or_kind_is_refused(sandbox: Sandbox) -> None:
    answer = sandbox.http.post(
        sandbox.url("messaging", "/sandbox/faults"),
        json={"operation": "messaging.nothing/v1", "kind": "fail"},
    )
    assert answer.status_code == 400
    answer = sandbox.http.post(
        sandbox.url("messaging", "/sandbox/faults"),
        json={"operation": "messaging.submit-message/v1", "kind": "explode"},
    )
    assert answer.status_code == 400


def test_body_must_be_strict_json_of_a_json_media_type(sandbox: Sandbox, key: str) -> None:
    headers = sandbox.headers("messaging", Idempotency_Key=key)
    url = sandbox.url("messaging", "/v1/messages")
    duplicate = sandbox.http.post(
        url, headers={**headers, "Content-Type": "application/json"},
        content=b'{"senderProfile":"a","senderProfile":"b"}',
    )  # fmt: skip
    assert duplicate.status_code == 400
    text = sandbox.http.post(url, headers={**headers, "Content-Type": "text/plain"}, content=b"{}")
    assert text.status_code == 415
