"""Sandbox BReg: records (08 §3.1), immediate actions (§3.2), bearer checks (§11.2) and signed
event delivery (§3.4, 05 §7.1)."""

from __future__ import annotations

import hashlib
import json
import uuid

import httpx
from sandbox_support import PROFILE, RECORD_ID, Receiver, Sandbox

from coordinator_sandbox.canonical import canonical_json
from coordinator_sandbox.delivery import delivery_signature

ACTION = "/v1/actions/approve-application"


def test_seeded_record_reads_with_the_digest_of_its_canonical_domain_data(
    sandbox: Sandbox,
) -> None:
    answer = sandbox.http.get(
        sandbox.url("breg", f"/v1/records/applications/{RECORD_ID}"),
        headers=sandbox.headers("breg"),
    )
    assert answer.status_code == 200
    body = answer.json()
    data = body["data"]
    assert data["recordIdentifier"] == RECORD_ID
    assert data["domainData"] == {"applicant": {"name": "Ada"}, "status": "submitted", "fee": 1.5}
    expected = hashlib.sha256(b'{"applicant":{"name":"Ada"},"fee":1.5,"status":"submitted"}')
    assert data["revisionDigest"] == "sha256:" + expected.hexdigest()
    assert set(body["meta"]) == {"registryIdentifier", "datasetIdentifier", "entityTypeIdentifier"}
    assert body["meta"]["entityTypeIdentifier"] == "application"


def test_absent_record_is_404_problem(sandbox: Sandbox) -> None:
    answer = sandbox.http.get(
        sandbox.url("breg", "/v1/records/applications/absent"), headers=sandbox.headers("breg")
    )
    assert answer.status_code == 404
    assert answer.headers["content-type"] == "application/problem+json"
    problem = answer.json()
    assert problem["status"] == 404 and problem["code"] == "record.not-found"


def test_products_refuse_missing_or_foreign_tokens_401_and_missing_scope_403(
    sandbox: Sandbox,
) -> None:
    path = sandbox.url("breg", f"/v1/records/applications/{RECORD_ID}")
    missing = sandbox.http.get(path, headers={"Registry-Access-Profile": PROFILE})
    assert missing.status_code == 401 and missing.json()["code"] == "authentication.refused"
    assert missing.headers["www-authenticate"].startswith("Bearer")
    foreign = sandbox.token("messaging")  # audience is Messaging's resource, not BReg's
    answer = sandbox.http.get(
        path, headers={"Authorization": f"Bearer {foreign}", "Registry-Access-Profile": PROFILE}
    )
    assert answer.status_code == 401
    narrow = sandbox.token("breg", ["breg:actions:invoke"])
    answer = sandbox.http.get(
        path, headers={"Authorization": f"Bearer {narrow}", "Registry-Access-Profile": PROFILE}
    )
    assert answer.status_code == 403 and answer.json()["code"] == "operation.not-authorized"


def test_every_breg_request_needs_the_access_profile_header(sandbox: Sandbox) -> None:
    headers = sandbox.headers("breg")
    del headers["Registry-Access-Profile"]
    answer = sandbox.http.get(
        sandbox.url("breg", f"/v1/records/applications/{RECORD_ID}"), headers=headers
    )
    assert answer.status_code == 400


def seed_application(sandbox: Sandbox) -> str:
    record_id = str(uuid.uuid4())
    answer = sandbox.http.put(
        sandbox.url("breg", f"/sandbox/records/applications/{record_id}"),
        json={"domainData": {"status": "submitted"}, "entityTypeIdentifier": "application"},
    )
    assert answer.status_code == 201
    return record_id


def prepared_body(sandbox: Sandbox, record_id: str, decision: str = "approve") -> bytes:
    headers = sandbox.headers("breg")
    descriptor = sandbox.http.get(sandbox.url("breg", ACTION), headers=headers).json()
    assert descriptor["kind"] == "immediate" and descriptor["conditionInputs"] == ["applicationId"]
    assert descriptor["contractFingerprint"].startswith("sha256:")
    conditions = sandbox.http.post(
        sandbox.url("breg", ACTION + "/target-conditions"),
        headers=sandbox.headers("breg"),
        json={"input": {"applicationId": record_id}},
    )
    assert conditions.status_code == 200
    preconditions = conditions.json()["preconditions"]
    assert preconditions == {"application": {"ifMatch": '"1"'}}
    return canonical_json(
        {
            "input": {"applicationId": record_id, "decision": decision},
            "preconditions": preconditions,
        }
    )


def invoke(sandbox: Sandbox, key: str, body: bytes) -> httpx.Response:
    headers = sandbox.headers("breg", Idempotency_Key=key)
    headers["Content-Type"] = "application/json"
    return sandbox.http.post(sandbox.url("breg", ACTION), headers=headers, content=body)


def test_action_commits_once_per_key_and_answers_the_original_response_again(
    sandbox: Sandbox, key: str
) -> None:
    record_id = seed_application(sandbox)
    body = prepared_body(sandbox, record_id)
    first = invoke(sandbox, key, body)
    assert first.status_code == 201
    result = first.json()
    assert result["action"] == "approve-application"
    assert result["results"]["application"] == {
        "entity": "application", "recordId": record_id, "revision": "2",
    }  # fmt: skip
    again = invoke(sandbox, key, body)
    assert again.status_code == 201 and again.json() == result
    other = invoke(sandbox, key, body.replace(b"approve", b"reopen"))
    assert other.status_code == 409 and other.json()["code"] == "idempotency.key-reused"
    applications = sandbox.http.get(sandbox.url("breg", "/sandbox/applications")).json()
    assert sum(1 for item in applications["applications"] if item["idempotencyKey"] == key) == 1


def test_declared_refusal_is_422_with_refusal_code_and_commits_nothing(
    sandbox: Sandbox, key: str
) -> None:
    record_id = seed_application(sandbox)
    answer = invoke(sandbox, key, prepared_body(sandbox, record_id, decision="reopen"))
    assert answer.status_code == 422
    problem = answer.json()
    assert problem["code"] == "action.refused" and problem["refusalCode"] == "application.closed"
    record = sandbox.http.get(
        sandbox.url("breg", f"/v1/records/applications/{record_id}"),
        headers=sandbox.headers("breg"),
    ).json()
    assert record["data"]["revisionIdentifier"] == "1"


def test_injected_declared_refusal_commits_nothing(sandbox: Sandbox, key: str) -> None:
    record_id = seed_application(sandbox)
    body = prepared_body(sandbox, record_id)
    sandbox.inject(
        "breg", operation="breg.invoke-action/v1", kind="declared-refusal", refusalCode="quota.hit"
    )
    refused = invoke(sandbox, key, body)
    assert refused.status_code == 422 and refused.json()["refusalCode"] == "quota.hit"
    assert invoke(sandbox, key, body).status_code == 201


def test_stale_precondition_fails_412_without_effect(sandbox: Sandbox, key: str) -> None:
    record_id = seed_application(sandbox)
    body = prepared_body(sandbox, record_id)
    sandbox.http.put(
        sandbox.url("breg", f"/sandbox/records/applications/{record_id}"),
        json={"domainData": {"status": "changed elsewhere"}},
    )
    answer = invoke(sandbox, key, body)
    assert answer.status_code == 412 and answer.json()["code"] == "precondition.failed"


def test_body_longer_than_maximum_body_bytes_is_413(sandbox: Sandbox, key: str) -> None:
    body = json.dumps({"input": {"applicationId": "x" * 70_000, "decision": "approve"}}).encode()
    answer = invoke(sandbox, key, body)
    assert answer.status_code == 413


def test_proposal_and_unknown_actions_are_visible_as_such(sandbox: Sandbox) -> None:
    headers = sandbox.headers("breg")
    proposal = sandbox.http.get(sandbox.url("breg", "/v1/actions/propose-change"), headers=headers)
    assert proposal.json()["kind"] == "proposal"
    unknown = sandbox.http.get(sandbox.url("breg", "/v1/actions/unknown"), headers=headers)
    assert unknown.status_code == 404


def test_delivery_signature_reproduces_the_contract_test_vectors() -> None:
    key = b"webhook-delivery-signing-key-0123456789abcdef"
    common = {"ce_source": "urn:registrystack:registry:example:instance:primary",
              "generation": "1", "attempt": "1", "method": "POST",
              "content_type": "application/json"}  # fmt: skip
    first = delivery_signature(
        key, ce_id="00000000-0000-4000-8000-000000000001", ce_type="case-created-v1",
        ce_time="2026-08-30T00:00:00Z",
        ce_dataschema="urn:registrystack:registry:example:event:case-created-v1:schema:sha256:aaa",
        delivery_time="2026-08-30T00:00:01Z", target="/hooks/registry",
        idempotency_key="sha256:" + "a" * 64,
        body=b'{"entity":"case","values":{"label":"value"}}', **common,
    )  # fmt: skip
    assert first == "v1=OzL5k0ghZJb9nPbb-JOVsroWeanipBlZXbeKDd52RcM"
    second = delivery_signature(
        key, ce_id="00000000-0000-4000-8000-000000000002", ce_type="application-submitted-v1",
        ce_time="2026-03-02T08:59:58Z", ce_dataschema="", delivery_time="2026-03-02T09:00:00Z",
        target="/v1/events/reviewed-notice/application-submitted",
        idempotency_key="delivery-00000000-0000-4000-8000-000000000002",
        body=b'{"entity":"application","recordIdentifier":"a8d12546-b2ca-46ac-b12b-06c199041bb2"}',
        **common,
    )  # fmt: skip
    assert second == "v1=nmk4kGxR0rByid1x2AAKJcQX7mI57mo40GjggzsyunY"


def test_events_are_signed_and_redelivered_with_the_same_identity_until_2xx(
    sandbox: Sandbox, receiver: Receiver
) -> None:
    receiver.answers.put(503)
    answer = sandbox.http.post(
        sandbox.url("breg", "/sandbox/events"),
        json={"workflow": "reviewed-notice", "trigger": "application-submitted",
              "type": "application-submitted-v1",
              "data": {"entity": "application", "recordIdentifier": RECORD_ID}},
    )  # fmt: skip
    assert answer.status_code == 202
    first, second = receiver.wait_for(2, "/v1/events/reviewed-notice/")[-2:]
    assert first.headers["ce-id"] == second.headers["ce-id"]
    assert first.headers["Idempotency-Key"] == second.headers["Idempotency-Key"]
    assert (
        first.headers["X-Registry-Delivery-Attempt"],
        second.headers["X-Registry-Delivery-Attempt"],
    ) == ("1", "2")
    key = (sandbox.secrets_dir / "applications-events.key").read_bytes()
    headers = second.headers
    expected = delivery_signature(
        key, ce_id=headers["ce-id"], ce_source=headers["ce-source"], ce_type=headers["ce-type"],
        ce_time=headers["ce-time"], ce_dataschema="",
        generation=headers["X-Registry-Event-Generation"],
        attempt=headers["X-Registry-Delivery-Attempt"],
        delivery_time=headers["X-Registry-Delivery-Time"], method="POST", target=second.path,
        content_type=headers["Content-Type"], idempotency_key=headers["Idempotency-Key"],
        body=second.body,
    )  # fmt: skip
    assert headers["X-Registry-Signature"] == expected
    assert second.body == canonical_json({"entity": "application", "recordIdentifier": RECORD_ID})
