"""Contract 08 §3: BReg read-record, and invoke-action with its preparation and send."""

from __future__ import annotations

import json
from typing import Any

import pytest
from adapter_support import (
    Reply,
    call,
    command,
    command_key,
    deadline,
    declared_refusal,
    preparation_bytes,
    prepare_with,
    problem,
    receipt_expired,
    refused,
    retryable,
    success,
    uncertain,
)

from coordinator_core.shell.adapters.breg import BregAdapter
from coordinator_core.values import canonical_json

READ = "breg.read-record/v1"
INVOKE = "breg.invoke-action/v1"
ACTION = "record-decision"
FINGERPRINT = "sha256:" + "ab" * 32
RECORD = {
    "data": {
        "recordIdentifier": "r-1",
        "revisionIdentifier": "v-2",
        "revisionDigest": "sha256:" + "0" * 64,
        "domainData": {"name": "x"},
    },
    "meta": {"registryIdentifier": "reg", "datasetIdentifier": "ds", "entityTypeIdentifier": "e"},
}
SCHEMA = {
    "type": "object",
    "properties": {
        "applicationId": {"type": "string"},
        "decision": {"enum": ["approve", "reject"]},
    },
    "required": ["applicationId", "decision"],
    "additionalProperties": False,
}
ACTION_INPUT = {"applicationId": "app-1", "decision": "approve"}
RESULT = {
    "action": ACTION,
    "applicationId": "0b8f6d1e-6f51-4a39-9a0b-5a1d3c6f2e11",
    "results": {"application": {"entity": "application", "recordId": "app-1", "revision": "v-3"}},
}


def describe(**overrides: Any) -> dict[str, Any]:
    return {
        "action": ACTION,
        "kind": "immediate",
        "registryRevision": "rev-7",
        "contractFingerprint": FINGERPRINT,
        "inputSchema": SCHEMA,
        "conditionInputs": ["applicationId"],
        "maximumBodyBytes": 4096,
        **overrides,
    }


PRECONDITIONS = {"preconditions": {"application": {"ifMatch": '"etag-1"'}}}


@pytest.fixture
def bound(connect):
    return connect("breg", profile="coordinator-writer")


@pytest.fixture
def breg(fake):
    fake.route("GET", f"/v1/actions/{ACTION}", Reply(200, describe()))
    fake.route("POST", f"/v1/actions/{ACTION}/target-conditions", Reply(200, PRECONDITIONS))
    fake.route("POST", f"/v1/actions/{ACTION}", Reply(201, RESULT))
    return fake


def invoke_command(preparation: bytes | None = None, value: Any = None, key: str | None = None):
    return command(
        INVOKE,
        {"input": ACTION_INPUT} if value is None else value,
        key=key or command_key(),
        action=ACTION,
        preparation=preparation,
    )


def prepare(bound, cmd=None):
    return prepare_with(BregAdapter(), bound, cmd or invoke_command(), attempt_deadline=deadline())


# -- read-record -------------------------------------------------------------------------------


def test_read_record_returns_the_body_unchanged(fake, bound):
    fake.route("GET", "/v1/records/people/r-1", Reply(200, RECORD))
    outcome = call(
        BregAdapter(),
        bound,
        command(READ, {"collection": "people", "recordId": "r-1"}),
        attempt_deadline=deadline(),
    )
    assert outcome == success(RECORD)
    assert fake.requests()[-1].headers["registry-access-profile"] == "coordinator-writer"


@pytest.mark.parametrize(
    "value",
    [
        {"collection": "people"},
        {"collection": "people", "recordId": "r", "extra": 1},
        {"collection": "People", "recordId": "r"},
        {"collection": "people", "recordId": ""},
        {"collection": "people", "recordId": "x" * 257},
        {"collection": "people", "recordId": 7},
        ["people", "r"],
    ],
)
def test_read_record_refuses_an_invalid_command_before_sending(fake, bound, value):
    outcome = call(BregAdapter(), bound, command(READ, value), attempt_deadline=deadline())
    assert outcome == refused("invalid-command")
    assert not fake.seen  # not even a token was requested


@pytest.mark.parametrize("body", [{"meta": {}}, {"data": []}, [RECORD]])
def test_read_record_requires_an_object_with_a_data_object(fake, bound, body):
    fake.route("GET", "/v1/records/people/r-1", Reply(200, body))
    outcome = call(
        BregAdapter(),
        bound,
        command(READ, {"collection": "people", "recordId": "r-1"}),
        attempt_deadline=deadline(),
    )
    assert outcome == refused("invalid-response")


# -- invoke-action: preparation -------------------------------------------------------------------


def test_preparation_freezes_body_binding_and_key(breg, bound):
    key = command_key()
    preparation = preparation_bytes(prepare(bound, invoke_command(key=key)))
    body = canonical_json({"input": ACTION_INPUT, **PRECONDITIONS}).decode()
    assert preparation == canonical_json(
        {
            "version": 1,
            "binding": {
                "registryRevision": "rev-7",
                "action": ACTION,
                "accessProfile": "coordinator-writer",
                "contractFingerprint": FINGERPRINT,
            },
            "body": body,
            "idempotencyKey": key,
        }
    )
    conditions = breg.requests(f"/v1/actions/{ACTION}/target-conditions")
    assert [seen.json() for seen in conditions] == [{"input": {"applicationId": "app-1"}}]
    assert "idempotency-key" not in conditions[0].headers
    assert not [
        s for s in breg.requests() if s.method == "POST" and s.path == f"/v1/actions/{ACTION}"
    ]


def test_preparation_without_condition_inputs_omits_preconditions(breg, bound):
    breg.route("GET", f"/v1/actions/{ACTION}", Reply(200, describe(conditionInputs=[])))
    preparation = preparation_bytes(prepare(bound))
    assert json.loads(json.loads(preparation)["body"]) == {"input": ACTION_INPUT}
    assert not breg.requests(f"/v1/actions/{ACTION}/target-conditions")


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (Reply(404), refused("action-unavailable")),
        (Reply(200, describe(kind="proposal")), refused("action-unavailable")),
        (Reply(200, describe(kind="other")), refused("invalid-response")),
        (Reply(200, describe(action="another")), refused("invalid-response")),
        (Reply(200, describe(contractFingerprint="md5:1")), refused("invalid-response")),
        (
            Reply(200, describe(inputSchema={"type": "object", "definitions": {}})),
            refused("invalid-response"),
        ),
        (Reply(408), retryable("transport-unavailable")),
        (Reply(503), retryable("transport-unavailable")),
        (Reply(500), retryable("transport-unavailable")),
        (Reply(403), refused("product-forbidden")),
    ],
)
def test_preparation_describe_outcomes(breg, bound, reply, expected):
    breg.route("GET", f"/v1/actions/{ACTION}", reply)
    assert prepare(bound) == expected


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (Reply(503), retryable("transport-unavailable")),
        (Reply(408), retryable("transport-unavailable")),
        (
            Reply(200, {"preconditions": {"a": {"ifMatch": "unquoted"}}}),
            refused("invalid-response"),
        ),
        (Reply(200, {}), refused("invalid-response")),
    ],
)
def test_preparation_condition_outcomes(breg, bound, reply, expected):
    breg.route("POST", f"/v1/actions/{ACTION}/target-conditions", reply)
    assert prepare(bound) == expected


@pytest.mark.parametrize(
    "value",
    [
        {"input": {"applicationId": "app-1", "decision": "maybe"}},
        {"input": {"applicationId": "app-1"}},
    ],
)
def test_preparation_validates_the_input_against_the_action_schema(breg, bound, value):
    assert prepare(bound, invoke_command(value=value)) == refused("invalid-command")


@pytest.mark.parametrize("value", [{"input": []}, {"input": {}, "extra": 1}, {}])
def test_preparation_refuses_a_malformed_command_before_sending(breg, bound, value):
    assert prepare(bound, invoke_command(value=value)) == refused("invalid-command")
    assert not breg.seen


def test_preparation_refuses_a_body_above_the_action_maximum(breg, bound):
    breg.route("GET", f"/v1/actions/{ACTION}", Reply(200, describe(maximumBodyBytes=20)))
    assert prepare(bound) == refused("invalid-command")


# -- invoke-action: send ---------------------------------------------------------------------------


def prepared(bound, key: str) -> bytes:
    return preparation_bytes(prepare(bound, invoke_command(key=key)))


def send(bound, preparation: bytes | None, key: str, **kw: Any):
    return call(
        BregAdapter(),
        bound,
        invoke_command(preparation, key=key, **kw),
        attempt_deadline=deadline(),
    )


def test_send_posts_exactly_the_prepared_bytes_with_the_key(breg, bound):
    key = command_key()
    preparation = prepared(bound, key)
    breg.route(
        "POST", f"/v1/actions/{ACTION}/target-conditions", Reply(200, {"preconditions": {}})
    )  # conditions are never refreshed at send
    assert send(bound, preparation, key) == success(RESULT)
    posted = [
        s for s in breg.requests() if s.method == "POST" and s.path == f"/v1/actions/{ACTION}"
    ]
    assert len(posted) == 1
    assert posted[0].body == json.loads(preparation)["body"].encode()
    assert posted[0].headers["idempotency-key"] == key
    describes = [s for s in breg.requests() if s.method == "GET"]
    assert len(describes) == 2  # preparation, and again at send with the fresh credential
    assert describes[0].headers["authorization"] != describes[1].headers["authorization"]


def test_a_changed_binding_is_a_mismatch_and_nothing_is_posted(breg, bound, connect):
    key = command_key()
    preparation = prepared(bound, key)
    breg.route("GET", f"/v1/actions/{ACTION}", Reply(200, describe(registryRevision="rev-8")))
    assert send(bound, preparation, key) == refused("prepared-command-mismatch")
    breg.route(
        "GET",
        f"/v1/actions/{ACTION}",
        Reply(200, describe(contractFingerprint="sha256:" + "cd" * 32)),
    )
    assert send(bound, preparation, key) == refused("prepared-command-mismatch")
    breg.route("GET", f"/v1/actions/{ACTION}", Reply(200, describe()))
    other_profile = connect("breg", profile="coordinator-other")
    assert send(other_profile, preparation, key) == refused("prepared-command-mismatch")
    assert send(bound, preparation, command_key("another-step")) == refused(
        "prepared-command-mismatch"
    )
    changed = {"input": {**ACTION_INPUT, "decision": "reject"}}
    assert send(bound, preparation, key, value=changed) == refused("prepared-command-mismatch")
    assert send(bound, b"{}", key) == refused("prepared-command-mismatch")
    assert send(bound, None, key) == refused("prepared-command-mismatch")
    assert not [
        s for s in breg.requests() if s.method == "POST" and s.path == f"/v1/actions/{ACTION}"
    ]


def test_the_action_withdrawn_before_send_is_unavailable(breg, bound):
    key = command_key()
    preparation = prepared(bound, key)
    breg.route("GET", f"/v1/actions/{ACTION}", Reply(404))
    assert send(bound, preparation, key) == refused("action-unavailable")


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (Reply(200, RESULT), success(RESULT)),
        (
            problem(422, "action.refused", refusalCode="application-withdrawn"),
            declared_refusal("application-withdrawn"),
        ),
        (problem(422, "action.refused", refusalCode="Not A Code"), refused("product-refused")),
        (problem(422, "action.refused"), refused("product-refused")),
        (
            Reply(422, {"status": 400, "code": "action.refused", "refusalCode": "x"}),
            refused("product-refused"),
        ),
        (problem(409, "idempotency.key-reused"), refused("product-refused")),
        (problem(410, "idempotency.expired"), receipt_expired()),
        (Reply(500), uncertain("transport-uncertain")),
        (Reply(201, {"action": ACTION}), uncertain("invalid-response")),
    ],
)
def test_send_outcomes(breg, bound, reply, expected):
    key = command_key()
    preparation = prepared(bound, key)
    breg.route("POST", f"/v1/actions/{ACTION}", reply)
    assert send(bound, preparation, key) == expected


def test_a_describe_failure_at_send_is_retryable_within_a_mutation(breg, bound):
    key = command_key()
    preparation = prepared(bound, key)
    breg.route("GET", f"/v1/actions/{ACTION}", Reply(503))
    assert send(bound, preparation, key) == retryable("transport-unavailable")


def test_a_breg_connection_without_a_profile_is_unbound(breg, connect):
    outcome = call(
        BregAdapter(),
        connect("breg"),
        command(READ, {"collection": "people", "recordId": "r-1"}),
        attempt_deadline=deadline(),
    )
    assert outcome == refused("operation-unbound")
