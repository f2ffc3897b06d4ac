"""Sandbox Casework: review requests (08 §4.1), results pending until decided (§4.2, §11.4),
withdrawal (§4.3) and completion events (§4.4)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
from sandbox_support import Receiver, Sandbox

SUBJECT = {
    "source": "urn:registrystack:registry:example:instance:primary",
    "type": "application",
    "id": "a8d12546-b2ca-46ac-b12b-06c199041bb2",
    "version": "1",
    "digest": "sha256:" + "ab" * 32,
}


def review_request() -> dict[str, Any]:
    return {
        "kind": "eligibility",
        "subject": SUBJECT,
        "requesterReference": f"run-{uuid.uuid4()}",
        "context": {"strategy": "submitted", "snapshot": {"applicant": "Ada"}},
    }


def submit(sandbox: Sandbox, key: str, body: dict[str, Any]) -> httpx.Response:
    return sandbox.http.post(
        sandbox.url("casework", "/v1/review-requests"),
        headers=sandbox.headers("casework", Idempotency_Key=key),
        json=body,
    )


def result(sandbox: Sandbox, request_id: str) -> httpx.Response:
    return sandbox.http.get(
        sandbox.url("casework", f"/v1/review-requests/{request_id}/result"),
        headers=sandbox.headers("casework"),
    )


def withdraw(sandbox: Sandbox, request_id: str, key: str) -> httpx.Response:
    return sandbox.http.post(
        sandbox.url("casework", f"/v1/review-requests/{request_id}/cancel"),
        headers=sandbox.headers("casework", Idempotency_Key=key),
        json={"subject": SUBJECT, "reason": "no longer needed"},
    )


def decide(sandbox: Sandbox, request_id: str, **decision: Any) -> httpx.Response:
    return sandbox.http.post(
        sandbox.url("casework", f"/sandbox/review-requests/{request_id}/decision"), json=decision
    )


def test_submission_is_201_then_200_for_the_same_key_and_409_for_another_body(
    sandbox: Sandbox, key: str
) -> None:
    body = review_request()
    first = submit(sandbox, key, body)
    assert first.status_code == 201
    accepted = first.json()
    assert set(accepted) == {"requestId", "subject", "policy", "submissionDigest"}
    assert accepted["subject"] == SUBJECT and set(accepted["policy"]) == {"id", "version", "digest"}
    again = submit(sandbox, key, body)
    assert again.status_code == 200 and again.json() == accepted
    other = submit(sandbox, key, {**body, "kind": "other"})
    assert other.status_code == 409 and other.json()["code"] == "idempotency.key-reused"


def test_result_stays_pending_until_decided_then_completion_event_is_sent(
    sandbox: Sandbox, receiver: Receiver, key: str
) -> None:
    request_id = submit(sandbox, key, review_request()).json()["requestId"]
    assert result(sandbox, request_id).status_code == 202
    before = len(receiver.wait_for(0, "/v1/review-completions"))
    decided = decide(sandbox, request_id, status="approved", outcome="eligible")
    assert decided.status_code == 200
    answer = result(sandbox, request_id)
    assert answer.status_code == 200
    review = answer.json()
    assert review["status"] == "approved" and review["outcome"] == "eligible"
    assert review["requestId"] == request_id
    event = receiver.wait_for(before + 1, "/v1/review-completions")[-1]
    token = (sandbox.secrets_dir / "casework-completions-token").read_text()
    assert event.headers["Authorization"] == f"Bearer {token}"
    payload = json.loads(event.body)
    assert payload["type"] == "review.completed" and payload["requestId"] == request_id
    assert payload["resultId"] == review["resultId"]
    assert set(payload) == {"type", "eventId", "requestId", "resultId", "completedAt"}


def test_withdrawing_a_pending_request_cancels_it_and_a_repeat_is_already_terminal(
    sandbox: Sandbox, key: str
) -> None:
    request_id = submit(sandbox, key, review_request()).json()["requestId"]
    withdraw_key = f"withdraw-{uuid.uuid4()}"
    first = withdraw(sandbox, request_id, withdraw_key)
    assert first.status_code == 200
    assert first.json()["outcome"] == "cancelled"
    assert first.json()["result"]["status"] == "cancelled"
    repeat = withdraw(sandbox, request_id, withdraw_key)
    assert repeat.status_code == 200 and repeat.json()["outcome"] == "already_terminal"
    assert repeat.json()["result"] == first.json()["result"]


def test_withdrawing_after_a_decision_is_already_terminal_with_that_decision(
    sandbox: Sandbox, key: str
) -> None:
    request_id = submit(sandbox, key, review_request()).json()["requestId"]
    decide(sandbox, request_id, status="rejected")
    answer = withdraw(sandbox, request_id, f"withdraw-{uuid.uuid4()}")
    assert answer.json()["outcome"] == "already_terminal"
    assert answer.json()["result"]["status"] == "rejected"


def test_unknown_request_is_404_and_an_expired_result_is_410(sandbox: Sandbox, key: str) -> None:
    assert result(sandbox, str(uuid.uuid4())).status_code == 404
    request_id = submit(sandbox, key, review_request()).json()["requestId"]
    decide(sandbox, request_id, status="answered", availableForSeconds=0)
    answer = result(sandbox, request_id)
    assert answer.status_code == 410


def test_review_request_outside_the_closed_shape_is_400(sandbox: Sandbox, key: str) -> None:
    body = review_request()
    body["context"] = {"strategy": "referenced", "snapshot": {}}
    assert submit(sandbox, key, body).status_code == 400
