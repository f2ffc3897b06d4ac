"""Contract 08 §7 and 05 §5.2: the fixed read-only external GET."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from adapter_support import (
    CANARY,
    TOKEN_PATH,
    RawServer,
    Reply,
    call,
    command,
    credential_of,
    deadline,
    read_request,
    refused,
    reset,
    retryable,
    success,
)

from coordinator_core.shell.adapters import (
    AccessToken,
    ClientCredentials,
    ExternalConnection,
)
from coordinator_core.shell.adapters.external import ExternalHttpAdapter
from coordinator_sandbox.testing import free_port

GET = "external-http.get/v1"
HOLIDAYS = {"holidays": ["2026-01-01", "2026-12-25"]}
ANY_STATUS = {
    "type": "object",
    "required": ["status", "body"],
    "properties": {"status": {"type": "integer"}},
}
ONLY_200 = {
    "type": "object",
    "required": ["status", "body"],
    "properties": {
        "status": {"const": 200},
        "body": {
            "type": "object",
            "required": ["holidays"],
            "properties": {"holidays": {"type": "array", "items": {"type": "string"}}},
        },
    },
}


def external(
    base_url: str,
    *,
    schema: Any = ANY_STATUS,
    paths: tuple[str, ...] = ("v1/holidays", "status"),
    query: tuple[str, ...] = ("year", "region"),
    authorization: ClientCredentials | None = None,
    timeout_ms: int = 2000,
    maximum: int = 65_536,
) -> ExternalConnection:
    return ExternalConnection(
        name="calendar",
        base_url=base_url + "/",
        paths=frozenset(paths),
        query_parameters=frozenset(query),
        response_schema=schema,
        authorization=authorization,
        attempt_timeout_milliseconds=timeout_ms,
        maximum_response_bytes=maximum,
    )


def get(bound: ExternalConnection, value: Any, budget: float = 10.0) -> Any:
    adapter = ExternalHttpAdapter()
    token = adapter.obtain_credential(bound, credential_of(), attempt_deadline=deadline(budget))
    assert isinstance(token, AccessToken)
    return call(
        adapter, bound, command(GET, value), attempt_deadline=deadline(budget), credential=token
    )


def test_the_get_carries_exactly_the_allowed_query_sorted_and_encoded_and_no_credential(fake, live):
    fake.route("GET", "/v1/holidays", Reply(200, HOLIDAYS), public=True)
    bound = external(live.origin, schema=ONLY_200)
    outcome = get(bound, {"path": "v1/holidays", "query": {"year": "2026", "region": "BE & NL/ü"}})
    assert outcome == success({"status": 200, "body": HOLIDAYS})
    [seen] = fake.requests()
    assert seen.method == "GET" and seen.path == "/v1/holidays"
    assert seen.query == "region=BE%20%26%20NL%2F%C3%BC&year=2026"
    assert "authorization" not in seen.headers
    assert seen.headers["accept"] == "application/json"
    assert seen.body == b""


def test_a_path_without_query_sends_no_question_mark(fake, live):
    fake.route("GET", "/status", Reply(200, {"ok": True}), public=True)
    assert get(external(live.origin), {"path": "status"}) == success(
        {"status": 200, "body": {"ok": True}}
    )
    assert fake.requests("/status")[0].query == ""


@pytest.mark.parametrize(
    "value",
    [
        {"path": "v1/other"},
        {"path": "/v1/holidays"},
        {"path": "v1/holidays", "query": {"page": "1"}},
        {"path": "v1/holidays", "query": {"year": 2026}},
        {"path": "v1/holidays", "query": {"year": "x" * 1025}},
        {"path": "v1/holidays", "query": {"year": "20\n26"}},
        {"path": "v1/holidays", "query": {"year": "20\x7f26"}},
        {"path": "v1/holidays", "query": []},
        {"path": "v1/holidays", "extra": True},
        {"query": {"year": "2026"}},
        "v1/holidays",
    ],
)
def test_a_command_outside_the_connection_is_refused_before_sending(fake, live, value):
    assert get(external(live.origin), value) == refused("external-invalid-command")
    assert not fake.requests("/")


def test_more_than_sixteen_query_entries_are_refused(fake, live):
    names = tuple(f"p{index}" for index in range(17))
    bound = external(live.origin, query=names)
    outcome = get(bound, {"path": "status", "query": {name: "v" for name in names}})
    assert outcome == refused("external-invalid-command")
    assert not fake.requests("/")


def test_any_status_is_a_success_when_the_output_matches_the_schema(fake, live):
    fake.route("GET", "/status", Reply(404, {"missing": True}), public=True)
    assert get(external(live.origin), {"path": "status"}) == success(
        {"status": 404, "body": {"missing": True}}
    )


def test_an_output_outside_the_response_schema_is_external_invalid_response(fake, live):
    fake.route("GET", "/v1/holidays", Reply(503, {"title": CANARY}), public=True)
    outcome = get(external(live.origin, schema=ONLY_200), {"path": "v1/holidays"})
    assert outcome == refused("external-invalid-response")
    assert CANARY not in repr(outcome)


def test_an_empty_body_reads_as_null(fake, live):
    fake.route("GET", "/status", Reply(204), public=True)
    assert get(external(live.origin), {"path": "status"}) == success({"status": 204, "body": None})


@pytest.mark.parametrize(
    "reply",
    [
        Reply(200, raw=b"{not json"),
        Reply(200, raw=b'{"a": 1, "a": 2}'),
        Reply(200, {"big": "x" * 200}),
    ],
)
def test_a_body_that_is_not_json_or_too_large_is_external_invalid_response(fake, live, reply):
    fake.route("GET", "/status", reply, public=True)
    outcome = get(external(live.origin, maximum=128), {"path": "status"})
    assert outcome == refused("external-invalid-response")


def test_a_redirect_is_never_followed(fake, live):
    fake.route("GET", "/status", Reply(302, headers={"location": "/elsewhere"}), public=True)
    assert get(external(live.origin), {"path": "status"}) == refused("external-redirect")
    assert [seen.path for seen in fake.requests("/")] == ["/status"]


@pytest.mark.parametrize(
    "base_url", ["http://registry.example", "https://169.254.169.254", "http://10.0.0.1"]
)
def test_a_destination_outside_the_policy_is_refused(fake, base_url):
    assert get(external(base_url), {"path": "status"}) == refused("external-destination-refused")


def test_a_connect_failure_is_retryable_external_unavailable():
    bound = external(f"http://127.0.0.1:{free_port()}")
    assert get(bound, {"path": "status"}) == retryable("external-unavailable")


def test_the_connections_own_timeout_bounds_the_request(fake, live):
    fake.route("GET", "/status", Reply(200, {"ok": True}, delay=1.0), public=True)
    outcome = get(external(live.origin, timeout_ms=200), {"path": "status"})
    assert outcome == retryable("external-unavailable")


def test_a_reset_after_sending_is_still_only_retryable():
    def behaviour(conn: socket.socket) -> None:
        read_request(conn)
        reset(conn)

    server = RawServer(behaviour)
    try:
        assert get(external(server.origin), {"path": "status"}) == retryable("external-unavailable")
    finally:
        server.close()


def test_with_authorization_every_attempt_gets_a_fresh_token(fake, live, token_endpoint, ec_pair):
    fake.route("GET", "/status", Reply(200, {"ok": True}))
    credentials = ClientCredentials(
        token_endpoint=token_endpoint,
        client_id="calendar-client",
        signing_key=ec_pair.private,
        resource="urn:example:calendar",
        scopes=("calendar:read",),
    )
    fake.register("calendar-client", ec_pair, token_endpoint)
    bound = external(live.origin, authorization=credentials)
    for _ in range(2):
        assert get(bound, {"path": "status"}) == success({"status": 200, "body": {"ok": True}})
    tokens = [seen.headers["authorization"] for seen in fake.requests("/status")]
    assert len(fake.requests(TOKEN_PATH)) == 2
    assert len(set(tokens)) == 2 and all(token.startswith("Bearer ") for token in tokens)
