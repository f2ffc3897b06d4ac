"""Contract 08 §4: Casework submit, read result (as a call and as an observation), withdraw."""

from __future__ import annotations

import copy
from typing import Any

import adapter_support as support
import pytest
from adapter_support import (
    Reply,
    command,
    command_key,
    complete,
    deadline,
    observed,
    pending,
    problem,
    receipt_expired,
    refused,
    retryable,
    success,
    uncertain,
)

from coordinator_core.shell.adapters.casework import CaseworkAdapter
from coordinator_core.values import canonical_json

SUBMIT = "casework.submit-review-request/v1"
READ = "casework.read-review-result/v1"
WITHDRAW = "casework.withdraw-review-request/v1"
REQUEST_ID = "5f0c3a52-1d2e-4f6a-8b7c-9d0e1f2a3b4c"
SUBJECT = {
    "source": "urn:registry:applications",
    "type": "application",
    "id": "app-1",
    "version": "3",
    "digest": "sha256:" + "1" * 64,
}
REVIEW = {
    "kind": "eligibility",
    "subject": SUBJECT,
    "requesterReference": "run-1",
    "initiator": {"issuer": "https://idp.example", "subject": "user-1"},
    "context": {"strategy": "submitted", "snapshot": {"income": 1200}},
    "resultConstraints": {"allowed": ["approved", "rejected"]},
}
ACCEPTED = {
    "requestId": REQUEST_ID,
    "subject": SUBJECT,
    "policy": {"id": "p", "version": "1", "digest": "sha256:" + "2" * 64},
    "submissionDigest": "sha256:" + "3" * 64,
}
RESULT = {
    "resultId": "6a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
    "requestId": REQUEST_ID,
    "subject": SUBJECT,
    "policy": ACCEPTED["policy"],
    "submissionDigest": ACCEPTED["submissionDigest"],
    "status": "approved",
    "outcome": "eligible",
    "result": {"score": 3},
    "completedAt": "2026-03-01T10:00:00Z",
    "availableUntil": "2026-06-01T10:00:00+02:00",
}
RESULT_PATH = f"/v1/review-requests/{REQUEST_ID}/result"


@pytest.fixture
def bound(connect):
    return connect("casework")


def call(bound, operation: str, value: Any, key: str | None = None):
    frozen = command(operation, value, key=key)
    return support.call(CaseworkAdapter(), bound, frozen, attempt_deadline=deadline())


def observe(bound, reference: Any):
    return support.observe(CaseworkAdapter(), bound, READ, reference, attempt_deadline=deadline())


# -- submit --------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [201, 200])
def test_submit_returns_the_acceptance(fake, bound, status):
    fake.route("POST", "/v1/review-requests", Reply(status, ACCEPTED))
    key = command_key()
    assert call(bound, SUBMIT, REVIEW, key) == success(ACCEPTED)
    seen = fake.requests()[-1]
    assert seen.body == canonical_json(REVIEW)
    assert seen.headers["idempotency-key"] == key


def _without(name: str) -> dict[str, Any]:
    return {k: v for k, v in REVIEW.items() if k != name}


def _with(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(REVIEW)
    target = changed
    for name in path[:-1]:
        target = target[name]
    target[path[-1]] = value
    return changed


@pytest.mark.parametrize(
    "value",
    [
        _without("kind"),
        _without("context"),
        {**REVIEW, "extra": 1},
        _with(("kind",), ""),
        _with(("kind",), "k" * 129),
        _with(("subject", "digest"), "sha256:xyz"),
        _with(("subject", "extra"), "x"),
        _with(("subject", "source"), "s" * 257),
        _with(("requesterReference",), "r" * 257),
        _with(("initiator",), {"issuer": "i"}),
        _with(("initiator", "subject"), "s" * 513),
        _with(("context", "strategy"), "referenced"),
        _with(("context", "snapshot"), [1]),
        _with(("context", "snapshot"), {"big": ["x" * 16_000] * 5}),
        _with(("resultConstraints",), "none"),
    ],
)
def test_submit_refuses_an_invalid_request_before_sending(fake, bound, value):
    assert call(bound, SUBMIT, value, command_key()) == refused("invalid-command")
    assert not fake.seen


def test_submit_refuses_a_body_over_98304_bytes(fake, bound):
    snapshot = {f"k{i}": "x" * 16_000 for i in range(4)}  # ≤ 65,536 on its own
    value = _with(("context", "snapshot"), snapshot)
    value["resultConstraints"] = {f"c{i}": "y" * 16_000 for i in range(3)}
    assert call(bound, SUBMIT, value, command_key()) == refused("invalid-command")
    assert not fake.seen


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (problem(409, "idempotency.key-reused"), refused("product-refused")),
        (problem(410, "idempotency.expired"), receipt_expired()),
        (Reply(201, {**ACCEPTED, "requestId": "nope"}), uncertain("invalid-response")),
        (Reply(202, ACCEPTED), uncertain("invalid-response")),
        (Reply(504), uncertain("transport-uncertain")),
    ],
)
def test_submit_outcomes(fake, bound, reply, expected):
    fake.route("POST", "/v1/review-requests", reply)
    assert call(bound, SUBMIT, REVIEW, command_key()) == expected


# -- read result ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "as_call", "as_observation"),
    [
        (Reply(200, RESULT), success({"state": "complete", "result": RESULT}), complete(RESULT)),
        (Reply(202, {"ignored": True}), success({"state": "pending"}), pending()),
        (Reply(202, raw=b"not json"), success({"state": "pending"}), pending()),
        (
            problem(404, "review.not-found"),
            refused("product-not-found"),
            observed("refused", "product-not-found"),
        ),
        (Reply(410), refused("completion-expired"), observed("refused", "completion-expired")),
        (
            Reply(503),
            retryable("transport-unavailable"),
            observed("retryable", "transport-unavailable"),
        ),
        (Reply(429), retryable("rate-limited"), observed("retryable", "rate-limited")),
        (Reply(401), refused("product-forbidden"), observed("refused", "product-forbidden")),
        (
            Reply(200, {**RESULT, "status": "pending"}),
            refused("invalid-response"),
            observed("refused", "invalid-response"),
        ),
        (
            Reply(200, {**RESULT, "completedAt": "yesterday"}),
            refused("invalid-response"),
            observed("refused", "invalid-response"),
        ),
    ],
)
def test_read_result_as_a_call_and_as_an_observation(fake, bound, reply, as_call, as_observation):
    fake.route("GET", RESULT_PATH, reply)
    assert call(bound, READ, {"requestId": REQUEST_ID}) == as_call
    assert observe(bound, REQUEST_ID) == as_observation


@pytest.mark.parametrize(
    "value", [{"requestId": "not-a-uuid"}, {}, {"requestId": REQUEST_ID, "x": 1}]
)
def test_read_result_refuses_an_invalid_command(fake, bound, value):
    assert call(bound, READ, value) == refused("invalid-command")
    assert not fake.seen


@pytest.mark.parametrize("reference", ["not-a-uuid", 7, None, {"requestId": REQUEST_ID}])
def test_an_observation_of_an_invalid_reference_is_refused(fake, bound, reference):
    assert observe(bound, reference) == observed("refused", "invalid-command")
    assert not fake.seen


# -- withdraw ------------------------------------------------------------------------------------------


def test_withdraw_posts_subject_and_reason(fake, bound):
    answer = {"outcome": "already_terminal", "result": RESULT}
    fake.route("POST", f"/v1/review-requests/{REQUEST_ID}/cancel", Reply(200, answer))
    key = command_key()
    value = {"requestId": REQUEST_ID, "subject": SUBJECT, "reason": "run cancelled"}
    assert call(bound, WITHDRAW, value, key) == success(answer)
    seen = fake.requests()[-1]
    assert seen.json() == {"subject": SUBJECT, "reason": "run cancelled"}
    assert seen.headers["idempotency-key"] == key


@pytest.mark.parametrize(
    "value",
    [
        {"requestId": REQUEST_ID, "subject": SUBJECT},
        {"requestId": REQUEST_ID, "subject": SUBJECT, "reason": ""},
        {"requestId": "x", "subject": SUBJECT, "reason": "r"},
        {"requestId": REQUEST_ID, "subject": {**SUBJECT, "digest": "d"}, "reason": "r"},
    ],
)
def test_withdraw_refuses_an_invalid_command(fake, bound, value):
    assert call(bound, WITHDRAW, value, command_key()) == refused("invalid-command")
    assert not fake.seen


def test_withdraw_with_an_unknown_outcome_is_an_invalid_response(fake, bound):
    fake.route(
        "POST",
        f"/v1/review-requests/{REQUEST_ID}/cancel",
        Reply(200, {"outcome": "gone", "result": RESULT}),
    )
    value = {"requestId": REQUEST_ID, "subject": SUBJECT, "reason": "r"}
    assert call(bound, WITHDRAW, value, command_key()) == uncertain("invalid-response")


def test_a_keyed_command_without_its_key_is_refused(fake, bound):
    assert call(bound, SUBMIT, REVIEW, None) == refused("invalid-command")
    assert not fake.seen


# -- answers are held to the output schemas of the spec (issue 26) ------------------------------


def test_the_answers_a_scenario_may_not_script_are_invalid_responses_live(fake, bound):
    """The submission answer without `requestId` and the result with only `status`: the
    same output schemas refuse them here and in `coordinatorctl test` (C13)."""
    fake.route("POST", "/v1/review-requests", Reply(201, {"unexpected": 1}))
    assert call(bound, SUBMIT, REVIEW, command_key()) == uncertain("invalid-response")
    fake.route("GET", RESULT_PATH, Reply(200, {"status": "approved"}))
    assert observe(bound, REQUEST_ID) == observed("refused", "invalid-response")
    assert call(bound, READ, {"requestId": REQUEST_ID}) == refused("invalid-response")


@pytest.mark.parametrize(
    "broken",
    [
        {**ACCEPTED, "policy": {"id": "p"}},
        {**ACCEPTED, "subject": {**SUBJECT, "digest": "md5:1"}},
        {key: value for key, value in ACCEPTED.items() if key != "submissionDigest"},
    ],
)
def test_a_submission_answer_off_the_schema_is_uncertain_invalid_response(fake, bound, broken):
    fake.route("POST", "/v1/review-requests", Reply(201, broken))
    assert call(bound, SUBMIT, REVIEW, command_key()) == uncertain("invalid-response")


def test_a_result_over_16384_canonical_bytes_is_still_refused(fake, bound):
    """What a schema cannot say stays a check of the adapter."""
    fake.route("GET", RESULT_PATH, Reply(200, {**RESULT, "result": {"x": "y" * 16_400}}))
    assert observe(bound, REQUEST_ID) == observed("refused", "invalid-response")
