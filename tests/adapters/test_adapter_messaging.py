"""Contract 08 §5: Messaging submission and the receipt lookup of a reconcile."""

from __future__ import annotations

from typing import Any

import adapter_support as support
import pytest
from adapter_support import (
    TOKEN_PATH,
    Reply,
    answered,
    call,
    command,
    command_key,
    confirmed,
    deadline,
    problem,
    refused,
    retryable,
    success,
)

from coordinator_core.shell.adapters.messaging import MessagingAdapter
from coordinator_core.values import canonical_json
from coordinator_sandbox.testing import free_port

SUBMIT = "messaging.submit-message/v1"
TEMPLATED = {
    "senderProfile": "notices",
    "to": {"email": "someone@example.org"},
    "template": {"id": "decision", "version": "2"},
    "locale": "nl-BE",
    "data": {"name": "A", "amount": 12.5},
    "notBefore": "2026-03-01T08:00:00Z",
    "expiresAt": "2026-03-02T08:00:00+01:00",
    "correlationId": "run-1",
}
RECEIPT = {
    "id": "7d444840-9dc0-11d1-b245-5ffdce74fad2",
    "status": "accepted",
    "links": {"self": "/v1/messages/7d44", "cancel": "/v1/messages/7d44/cancel"},
}


@pytest.fixture
def bound(connect):
    return connect("messaging")


def submit(bound, value: Any, key: str | None = None):
    frozen = command(SUBMIT, value, key=key or command_key())
    return call(MessagingAdapter(), bound, frozen, attempt_deadline=deadline())


def lookup(bound, value: Any = TEMPLATED, key: str | None = None):
    frozen = command(SUBMIT, value, key=key or command_key())
    return support.lookup(MessagingAdapter(), bound, frozen, attempt_deadline=deadline())


def test_submit_returns_the_receipt_and_sends_the_request_canonically(fake, bound):
    fake.route("POST", "/v1/messages", Reply(202, RECEIPT))
    key = command_key()
    assert submit(bound, TEMPLATED, key) == success(RECEIPT)
    seen = fake.requests()[-1]
    assert seen.body == canonical_json(TEMPLATED)
    assert seen.headers["idempotency-key"] == key


@pytest.mark.parametrize(
    "value",
    [
        {**TEMPLATED, "content": {"text": "both"}},
        {k: v for k, v in TEMPLATED.items() if k != "template"},
        {k: v for k, v in TEMPLATED.items() if k != "locale"},
        {k: v for k, v in TEMPLATED.items() if k != "data"},
        {**TEMPLATED, "to": {"phone": "0470123456"}},
        {**TEMPLATED, "to": {"phone": "+3212345678", "email": "a@b.c"}},
        {**TEMPLATED, "to": {"email": "ab"}},
        {**TEMPLATED, "senderProfile": ""},
        {**TEMPLATED, "senderProfile": "p" * 129},
        {**TEMPLATED, "notBefore": "2026-03-01 08:00"},
        {**TEMPLATED, "correlationId": "c" * 129},
        {**TEMPLATED, "unknown": True},
        {"senderProfile": "p", "to": {"email": "a@b.c"}, "content": {"subject": "no text"}},
    ],
)
def test_submit_refuses_an_invalid_command_before_sending(fake, bound, value):
    assert submit(bound, value) == refused("invalid-command")
    assert not fake.seen


def test_submit_refuses_a_key_outside_the_header_grammar(fake, bound):
    assert submit(bound, TEMPLATED, key="has space") == refused("invalid-command")
    assert not fake.requests()


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (problem(422, "template.locale-unavailable"), refused("product-not-found")),
        (problem(422, "template.data-invalid"), refused("product-refused")),
        (problem(404, "template.not-found"), refused("product-not-found")),
        (problem(403, "profile.not-authorized"), refused("product-forbidden")),
        (problem(415, "request.unsupported-media-type"), refused("product-refused")),
        (problem(429, "quota.exceeded"), retryable("rate-limited")),
    ],
)
def test_submit_problem_codes(fake, bound, reply, expected):
    fake.route("POST", "/v1/messages", reply)
    assert submit(bound, TEMPLATED) == expected


# -- receipt lookup (08 §5.2) ----------------------------------------------------------------------------


def test_lookup_sends_the_original_request_under_the_original_key(fake, bound):
    fake.route("POST", "/v1/messages/receipt-lookup", Reply(200, RECEIPT))
    key = command_key()
    assert lookup(bound, key=key) == confirmed(RECEIPT)
    seen = fake.requests()[-1]
    assert seen.body == canonical_json(TEMPLATED)
    assert seen.headers["idempotency-key"] == key
    assert not [s for s in fake.requests() if s.path == "/v1/messages"]  # never creates


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (problem(404, "receipt.unresolved"), answered("unresolved")),
        (problem(409, "idempotency.key-reused"), answered("key-reused")),
        (problem(410, "idempotency.expired"), answered("expired")),
        (Reply(404), answered("unavailable")),
        (Reply(410), answered("unavailable")),
        (Reply(500), answered("unavailable")),
        (Reply(401), answered("unavailable")),
        (Reply(200, {"id": "x"}), answered("unavailable")),
        (Reply(200, raw=b"{"), answered("unavailable")),
    ],
)
def test_lookup_answers(fake, bound, reply, expected):
    fake.route("POST", "/v1/messages/receipt-lookup", reply)
    assert lookup(bound) == expected


def test_lookup_transport_and_credential_failures_are_unavailable(fake, connect, bound):
    unreachable = connect("messaging", f"http://127.0.0.1:{free_port()}")
    assert lookup(unreachable) == answered("unavailable")
    fake.token_reply = lambda seen: Reply(503)
    assert lookup(bound) == answered("unavailable")
    assert not fake.requests("/v1")
    assert fake.requests(TOKEN_PATH)


def test_lookup_of_an_invalid_frozen_request_sends_nothing(fake, bound):
    assert lookup(bound, {"senderProfile": "p"}) == answered("unavailable")
    assert not fake.seen


def test_a_receipt_without_status_is_an_invalid_response_as_in_scenarios(fake, bound):
    """Issue 26: `{id: …}` (no `status`, no `links`) is not a MessageReceipt; the output
    schema that refuses it live is the one C13 holds a scripted reply to."""
    fake.route("POST", "/v1/messages", Reply(202, {"id": RECEIPT["id"]}))
    outcome = submit(bound, TEMPLATED)
    assert (outcome.outcome, outcome.code) == ("uncertain", "invalid-response")
