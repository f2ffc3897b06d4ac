"""HTTP rules of 06 §1 and §3–§5: order of checks, size and media type, strict bodies, routing,
headers, problem bodies that never echo the request, audit entries, recovery-only mode."""

from __future__ import annotations

import dataclasses
import json
import threading
import uuid
from typing import Any

import httpx
import pytest
from api_fakes import (
    BASE_URL,
    CANARY,
    REVISION,
    WORKFLOW,
    FakeJournal,
    FakeRunService,
    SigningKeys,
    bearer,
    claims,
    settings,
)
from test_api_inbound import BODY as EVENT_BODY
from test_api_inbound import PATH as EVENT_PATH
from test_api_inbound import VECTOR_2 as EVENT_HEADERS

from coordinator_api import create_app
from coordinator_api.edge import RequestContext
from coordinator_api.problems import problem_codes, status_of
from coordinator_core.shell.service import ServiceRefusal

pytestmark = pytest.mark.anyio

START = {"workflow": WORKFLOW, "revision": REVISION, "input": {"applicationId": "app-1"}}
LIMIT = 65_536


def start_headers(keys: SigningKeys, key: str | None = "key-1", **kw: Any) -> dict[str, str]:
    headers = {**bearer(keys, **kw), "Content-Type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key
    return headers


async def existing_run(client: httpx.AsyncClient, keys: SigningKeys) -> str:
    response = await client.post("/v1/runs", json=START, headers=start_headers(keys))
    return str(response.json()["runId"])


def code(response: httpx.Response) -> tuple[int, str]:
    assert response.headers["content-type"] == "application/problem+json"
    return response.status_code, response.json()["code"]


# ---------------------------------------------------------------------------------------------
# Size and media type


async def test_a_body_over_the_limit_is_413(client: httpx.AsyncClient, keys: SigningKeys) -> None:
    body = json.dumps({**START, "input": {"blob": "x" * LIMIT}}).encode()
    response = await client.post("/v1/runs", content=body, headers=start_headers(keys))
    assert code(response) == (413, "coordinator.request.too-large")


async def test_a_body_of_exactly_the_limit_is_read(
    client: httpx.AsyncClient, keys: SigningKeys
) -> None:
    body = json.dumps({**START, "input": {"blob": ""}})
    body = body.replace('"blob": ""', '"blob": "' + "x" * (LIMIT - len(body)) + '"')
    assert len(body.encode()) == LIMIT
    response = await client.post("/v1/runs", content=body, headers=start_headers(keys))
    assert code(response) == (400, "coordinator.command.input-invalid")  # a 65,536-byte string


async def test_a_streamed_body_over_the_limit_is_413(
    client: httpx.AsyncClient, keys: SigningKeys
) -> None:
    async def chunks() -> Any:
        for _ in range(20):
            yield b"x" * 4096

    response = await client.post("/v1/runs", content=chunks(), headers=start_headers(keys))
    assert code(response) == (413, "coordinator.request.too-large")


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
     "application/json; charset=latin-1", "application/jsonx", None],
)  # fmt: skip
async def test_non_json_media_types_are_415(
    client: httpx.AsyncClient, keys: SigningKeys, content_type: str | None
) -> None:
    headers = start_headers(keys)
    del headers["Content-Type"]
    if content_type is not None:
        headers["Content-Type"] = content_type
    response = await client.post("/v1/runs", content=json.dumps(START), headers=headers)
    assert code(response) == (415, "coordinator.request.content-type-invalid")


@pytest.mark.parametrize(
    "content_type",
    ["application/json", "application/json; charset=utf-8", "application/merge-patch+json",
     "APPLICATION/JSON", 'application/vnd.example+json; charset="UTF-8"'],
)  # fmt: skip
async def test_json_media_types_are_accepted(
    client: httpx.AsyncClient, keys: SigningKeys, content_type: str
) -> None:
    headers = {**start_headers(keys), "Content-Type": content_type}
    response = await client.post("/v1/runs", content=json.dumps(START), headers=headers)
    assert response.status_code == 201


# ---------------------------------------------------------------------------------------------
# Strict bodies


@pytest.mark.parametrize(
    "body",
    [
        b'{"workflow": "reviewed-notice", "workflow": "reviewed-notice", "revision": "x", "input": 1}',
        b'{"workflow": "reviewed-notice", "revision": "' + REVISION.encode() + b'"}',
        b'{"workflow": "reviewed-notice", "revision": "'
        + REVISION.encode()
        + b'", "input": 1, "x": 1}',
        b'{"workflow": 7, "revision": "' + REVISION.encode() + b'", "input": 1}',
        b'{"workflow": "reviewed-notice", "revision": "sha256:abc", "input": 1}',
        b'{"workflow": "reviewed-notice", "revision": "' + REVISION.encode() + b'", "input": NaN}',
        b'["reviewed-notice"]',
        b"",
        b"\xff\xfe{}",
        b'{"workflow": "\\ud800", "revision": "x", "input": 1}',
    ],
)
async def test_malformed_bodies_are_request_invalid(
    client: httpx.AsyncClient, keys: SigningKeys, body: bytes
) -> None:
    response = await client.post("/v1/runs", content=body, headers=start_headers(keys))
    assert code(response) == (400, "coordinator.request.invalid")


@pytest.mark.parametrize(
    "reason",
    [None, "", "x" * 257, "é" * 129, "tab\tinside", 42],
)
async def test_reasons_are_checked_after_visibility(
    client: httpx.AsyncClient, keys: SigningKeys, reason: Any
) -> None:
    run_id = await existing_run(client, keys)
    body = {} if reason is None else {"reason": reason}
    response = await client.post(f"/v1/runs/{run_id}/cancel", json=body, headers=bearer(keys))
    assert code(response) == (400, "coordinator.command.reason-invalid")
    absent = await client.post(
        f"/v1/runs/{uuid.uuid4()}/cancel", json=body, headers=bearer(keys)
    )  # an invisible run is reported before the body
    assert code(absent) == (404, "coordinator.command.run-absent")


async def test_unknown_members_beside_a_reason_are_request_invalid(
    client: httpx.AsyncClient, keys: SigningKeys
) -> None:
    run_id = await existing_run(client, keys)
    body = {"reason": "T-1", "extra": True}
    response = await client.post(f"/v1/runs/{run_id}/cancel", json=body, headers=bearer(keys))
    assert code(response) == (400, "coordinator.request.invalid")


async def test_visibility_comes_before_media_type_and_size(
    client: httpx.AsyncClient, keys: SigningKeys
) -> None:
    for run in ("not-a-uuid", str(uuid.uuid4())):
        headers = {**bearer(keys), "Content-Type": "text/plain"}
        response = await client.post(
            f"/v1/runs/{run}/retry-same", content=b"x" * (LIMIT + 1), headers=headers
        )
        assert code(response) == (404, "coordinator.command.run-absent")


# ---------------------------------------------------------------------------------------------
# The order of admission steps (06 §5.1)


async def test_admission_checks_run_in_contract_order(
    keys: SigningKeys, service: FakeRunService, journal: FakeJournal
) -> None:
    recovery = create_app(settings(keys, recovery_only=True), service=service, journal=journal)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=recovery), base_url=BASE_URL
    ) as client:
        # step 3 (policy for the workflow) before step 4 (recovery-only)
        other = {**START, "workflow": "other-workflow"}
        response = await client.post("/v1/runs", json=other, headers=start_headers(keys, key=None))
        assert code(response) == (403, "coordinator.access.denied")
        # step 4 before step 5 (workflow) and step 6 (key)
        response = await client.post("/v1/runs", json=START, headers=start_headers(keys, key=None))
        assert code(response) == (409, "coordinator.command.recovery-only")
        assert (await client.get("/ready")).status_code == 503
    assert service.calls == []


@pytest.mark.parametrize(
    ("key", "body", "expected"),
    [
        (None, {**START, "workflow": "retired-flow"}, "coordinator.command.workflow-absent"),
        (None, START, "coordinator.command.start-key-invalid"),
        ("", START, "coordinator.command.start-key-invalid"),
        ("has space", START, "coordinator.command.start-key-invalid"),
        ("k" * 257, START, "coordinator.command.start-key-invalid"),
        (
            "ok",
            {**START, "input": {"deep": json.loads("[" * 40 + "]" * 40)}},
            "coordinator.command.input-invalid",
        ),
        ("ok", {**START, "input": 2**63 - 1}, "coordinator.command.input-invalid"),
    ],
)
async def test_admission_refusals_before_the_service(
    client: httpx.AsyncClient,
    keys: SigningKeys,
    service: FakeRunService,
    key: str | None,
    body: dict[str, Any],
    expected: str,
) -> None:
    headers = {**bearer(keys), **({} if key is None else {"Idempotency-Key": key})}
    response = await client.post("/v1/runs", json=body, headers=headers)
    assert response.json()["code"] == expected
    assert response.status_code == status_of(expected)
    assert service.calls == []


async def test_a_repeated_idempotency_key_header_is_refused(
    client: httpx.AsyncClient, keys: SigningKeys
) -> None:
    headers = [*bearer(keys).items(), ("Idempotency-Key", "a"), ("Idempotency-Key", "b")]
    response = await client.post("/v1/runs", json=START, headers=headers)
    assert code(response) == (400, "coordinator.command.start-key-invalid")


# ---------------------------------------------------------------------------------------------
# Routing, headers, problems


async def test_unknown_routes_are_404_without_authentication(client: httpx.AsyncClient) -> None:
    for path in ("/", "/v1", "/v1/runs/", "/v1/openapi.json", "/v2/runs", "/health/"):
        assert code(await client.get(path)) == (404, "coordinator.request.not-found")


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("DELETE", "/v1/runs", "GET, POST"),
        ("PUT", "/v1/runs/x", "GET"),
        ("GET", "/v1/runs/x/cancel", "POST"),
        ("OPTIONS", "/health", "GET"),
        ("HEAD", "/v1/workflow", "GET"),
        ("PATCH", "/v1/events/reviewed-notice/application-submitted", "POST"),
    ],
)
async def test_other_methods_are_405_with_the_complete_allow_header(
    client: httpx.AsyncClient, method: str, path: str, allow: str
) -> None:
    response = await client.request(method, path)
    assert response.status_code == 405
    assert response.headers["allow"] == allow
    if method != "HEAD":
        assert response.json()["code"] == "coordinator.request.method-not-allowed"


async def test_every_response_carries_no_store_and_security_headers(
    client: httpx.AsyncClient, keys: SigningKeys
) -> None:
    responses = [
        await client.get("/health"),
        await client.get("/v1/workflow", headers=bearer(keys)),
        await client.get("/v1/workflow"),
        await client.get("/nowhere"),
        await client.post("/v1/runs", json=START, headers=start_headers(keys)),
    ]
    for response in responses:
        assert response.headers["cache-control"] == "no-store"
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["content-security-policy"] == "default-src 'none'"
        assert response.headers["referrer-policy"] == "no-referrer"
        assert "access-control-allow-origin" not in response.headers


async def test_problem_bodies_never_echo_the_request(
    client: httpx.AsyncClient, keys: SigningKeys
) -> None:
    run_id = await existing_run(client, keys)
    probes = [
        await client.post(
            "/v1/runs", json={**START, "workflow": CANARY}, headers=start_headers(keys)
        ),
        await client.post(
            "/v1/runs",
            json={**START, "input": {CANARY: CANARY * 9000}},
            headers=start_headers(keys),
        ),
        await client.post("/v1/runs", json=START, headers=start_headers(keys, key=CANARY + " x")),
        await client.post(
            f"/v1/runs/{run_id}/cancel", json={"reason": CANARY + "\n"}, headers=bearer(keys)
        ),
        await client.get(f"/v1/runs/{CANARY}", headers=bearer(keys)),
        await client.get("/v1/runs", params={"workflow": CANARY.upper()}, headers=bearer(keys)),
        await client.get("/v1/runs", params={"cursor": CANARY}, headers=bearer(keys)),
        await client.get(f"/{CANARY}"),
    ]
    for response in probes:
        assert response.status_code >= 400, response.request.url
        assert CANARY not in response.text and CANARY.upper() not in response.text
    # An unknown member's name is a name, not a value: the problem names it in `violations`
    # (and nowhere else); its value never appears.
    unknown = await client.post(
        "/v1/runs", json={**START, CANARY: CANARY.upper()}, headers=start_headers(keys)
    )
    problem = unknown.json()
    assert problem["code"] == "coordinator.request.invalid"
    assert problem["violations"] == [
        {"path": "", "keyword": "additionalProperties", "members": [CANARY]}
    ]
    assert CANARY.upper() not in unknown.text
    assert CANARY not in json.dumps({k: v for k, v in problem.items() if k != "violations"})


def test_every_problem_code_has_a_catalogue_status() -> None:
    for problem in problem_codes():
        status = status_of(problem)
        assert 400 <= status <= 599


async def test_an_unexpected_failure_is_a_problem_500(
    client: httpx.AsyncClient,
    keys: SigningKeys,
    service: FakeRunService,
    journal: FakeJournal,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: Any) -> Any:
        raise RuntimeError(CANARY)

    monkeypatch.setattr(service, "doctor", broken)
    response = await client.get("/v1/doctor", headers=bearer(keys))
    assert code(response) == (500, "coordinator.request.internal-error")
    assert CANARY not in response.text
    assert journal.entries[-1][2].outcome == "unknown"  # type: ignore[union-attr]


async def test_service_refusals_are_rendered_with_their_reason(
    client: httpx.AsyncClient, keys: SigningKeys, service: FakeRunService
) -> None:
    run_id = await existing_run(client, keys)
    service.refusal = ServiceRefusal("coordinator.command.reconcile-refused", "lease-active")
    response = await client.post(
        f"/v1/runs/{run_id}/reconcile", json={"reason": "r"}, headers=bearer(keys)
    )
    assert code(response) == (409, "coordinator.command.reconcile-refused")
    assert response.json()["reason"] == "lease-active"
    assert response.json()["type"].endswith("/command/reconcile-refused")
    service.refusal = ServiceRefusal("coordinator.command.store-unavailable")
    response = await client.post(
        f"/v1/runs/{run_id}/cancel", json={"reason": "r"}, headers=bearer(keys)
    )
    assert code(response) == (503, "coordinator.command.store-unavailable")


# ---------------------------------------------------------------------------------------------
# Audit (06 §4, 07 §11)


async def test_each_request_is_journaled_before_and_after(
    client: httpx.AsyncClient, keys: SigningKeys, journal: FakeJournal
) -> None:
    run_id = await existing_run(client, keys)
    await client.post(f"/v1/runs/{run_id}/cancel", json={"reason": "T-9"}, headers=bearer(keys))
    phases = [(phase, entry.action) for phase, _, entry in journal.entries]
    assert phases == [
        ("request", "admit"), ("response", "admit"),
        ("request", "cancel"), ("response", "cancel"),
    ]  # fmt: skip
    request, response = journal.entries[2][2], journal.entries[3][2]
    assert (request.run_id, request.reason) == (uuid.UUID(run_id), "T-9")  # type: ignore[union-attr]
    assert response.outcome == "accepted"  # type: ignore[union-attr]
    assert journal.entries[2][1] == journal.entries[3][1]


async def test_a_command_journals_and_acts_in_one_worker_thread_off_the_event_loop(
    client: httpx.AsyncClient,
    keys: SigningKeys,
    service: FakeRunService,
    journal: FakeJournal,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A command's request entry (which waits for its fsync), the service action and the
    response entry run in one worker thread, in that order: one hop off the event loop."""
    seen: list[tuple[str, int]] = []
    loop_thread = threading.get_ident()
    for name in ("request", "response"):
        append = getattr(journal, name)

        def recorded(*args: Any, append: Any = append, name: str = name) -> Any:
            seen.append((name, threading.get_ident()))
            return append(*args)

        monkeypatch.setattr(journal, name, recorded)
    admit = service.admit

    def admitting(admission: Any, **options: Any) -> Any:
        seen.append(("admit", threading.get_ident()))
        return admit(admission, **options)

    monkeypatch.setattr(service, "admit", admitting)
    response = await client.post("/v1/runs", json=START, headers=start_headers(keys))
    assert response.status_code == 201
    assert [name for name, _ in seen] == ["request", "admit", "response"]
    assert len({thread for _, thread in seen}) == 1
    assert seen[0][1] != loop_thread


async def test_a_refused_command_journals_its_code_as_it_refuses(
    client: httpx.AsyncClient, keys: SigningKeys, service: FakeRunService, journal: FakeJournal
) -> None:
    run_id = await existing_run(client, keys)
    service.refusal = ServiceRefusal("coordinator.command.reconcile-refused", "lease-active")
    response = await client.post(
        f"/v1/runs/{run_id}/reconcile", json={"reason": "r"}, headers=bearer(keys)
    )
    assert code(response) == (409, "coordinator.command.reconcile-refused")
    phases = [(phase, entry.action) for phase, _, entry in journal.entries[2:]]
    assert phases == [("request", "reconcile"), ("response", "reconcile")]
    refused = journal.entries[3][2]
    assert (refused.outcome, refused.code) == (  # type: ignore[union-attr]
        "refused",
        "coordinator.command.reconcile-refused",
    )


async def test_refusals_after_authentication_are_journaled(
    client: httpx.AsyncClient, keys: SigningKeys, journal: FakeJournal
) -> None:
    await client.get(f"/v1/runs/{uuid.uuid4()}", headers=bearer(keys))
    await client.get("/v1/workflow")  # unauthenticated: no actor to journal
    assert [(phase, entry.action) for phase, _, entry in journal.entries] == [
        ("request", "status"),
        ("response", "status"),
    ]
    assert journal.entries[1][2].code == "coordinator.command.run-absent"  # type: ignore[union-attr]
    assert journal.entries[1][2].outcome == "refused"  # type: ignore[union-attr]


async def test_a_failing_request_entry_changes_nothing(
    client: httpx.AsyncClient, keys: SigningKeys, service: FakeRunService, journal: FakeJournal
) -> None:
    journal.fail_requests = True
    response = await client.post("/v1/runs", json=START, headers=start_headers(keys))
    assert code(response) == (503, "coordinator.command.audit-unavailable")
    assert service.calls == []


async def test_a_failing_response_entry_says_the_action_may_have_completed(
    client: httpx.AsyncClient, keys: SigningKeys, service: FakeRunService, journal: FakeJournal
) -> None:
    journal.fail_responses = True
    response = await client.post("/v1/runs", json=START, headers=start_headers(keys))
    assert code(response) == (503, "coordinator.command.audit-response-unavailable")
    assert service.calls == ["admit", "woken"] and len(service.runs) == 1


async def test_workflow_reads_are_journaled_for_the_workflow_policy(
    keys: SigningKeys, client: httpx.AsyncClient, journal: FakeJournal
) -> None:
    await client.get(
        "/v1/workflow", headers=bearer(keys, claims(client="reader", scopes="coordinator:read"))
    )
    assert [entry.action for _, _, entry in journal.entries] == ["workflow-read", "workflow-read"]


async def test_settings_must_bind_every_trigger(keys: SigningKeys) -> None:
    broken = dataclasses.replace(settings(keys), event_triggers={})
    with pytest.raises(ValueError, match="triggers"):
        create_app(broken, service=FakeRunService(), journal=FakeJournal())


# ---------------------------------------------------------------------------------------------
# The admitted run's loop is woken once the answer is sent


async def _admit_raw(app: Any, service: FakeRunService, keys: SigningKeys) -> None:
    """POST /v1/runs straight through the ASGI app, every message sent recorded in
    `service.calls` beside the service's own calls."""
    headers = start_headers(keys, key=f"key-{uuid.uuid4()}")
    await _post_raw(app, service, "/v1/runs", json.dumps(START).encode(), headers)


async def _post_raw(
    app: Any, service: FakeRunService, path: str, body: bytes, headers: dict[str, str]
) -> None:
    """POST `body` to `path` straight through the ASGI app, every message sent recorded in
    `service.calls` beside the service's own calls."""
    raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    raw.append((b"content-length", str(len(body)).encode()))
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "headers": raw, "server": ("testserver", 80),
        "client": ("127.0.0.1", 50000),
    }  # fmt: skip
    heard = False

    async def receive() -> dict[str, Any]:
        nonlocal heard
        if not heard:
            heard = True
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        service.calls.append(message["type"])

    await app(scope, receive, send)


def _woken_once_after_the_body(calls: list[str]) -> None:
    wakes = [index for index, call in enumerate(calls) if call == "woken"]
    assert len(wakes) == 1 and wakes[0] > calls.index("http.response.body"), calls


async def test_an_admission_wakes_the_loop_only_after_its_answer_is_sent(
    app: Any, service: FakeRunService, keys: SigningKeys
) -> None:
    await _admit_raw(app, service, keys)
    assert "admit" in service.calls
    _woken_once_after_the_body(service.calls)


async def test_a_refused_admission_wakes_the_loops_after_its_problem_is_sent(
    app: Any, service: FakeRunService, keys: SigningKeys
) -> None:
    service.refusal = ServiceRefusal("coordinator.command.restore-hold")
    await _admit_raw(app, service, keys)
    _woken_once_after_the_body(service.calls)


async def test_an_event_admission_wakes_the_loops_only_after_its_answer_is_sent(
    app: Any, service: FakeRunService
) -> None:
    await _post_raw(app, service, EVENT_PATH, EVENT_BODY, EVENT_HEADERS)
    assert "admit-event" in service.calls
    _woken_once_after_the_body(service.calls)


async def test_a_refused_event_admission_wakes_the_loops_after_its_problem_is_sent(
    app: Any, service: FakeRunService
) -> None:
    service.refusal = ServiceRefusal("coordinator.event.admissions-held")
    await _post_raw(app, service, EVENT_PATH, EVENT_BODY, EVENT_HEADERS)
    _woken_once_after_the_body(service.calls)


def test_an_action_after_the_answer_that_fails_leaves_the_others_to_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ran: list[str] = []
    context = RequestContext(
        state=None,  # type: ignore[arg-type]
        body=None,  # type: ignore[arg-type]
        raw_headers=[],
        method=b"POST",
        target=b"/v1/runs",
    )

    def failing() -> None:
        raise RuntimeError(CANARY)

    context.after_answer(failing)
    context.after_answer(lambda: ran.append("woken"))
    context.ran_answered()
    context.ran_answered()  # each action runs once
    assert ran == ["woken"]
    assert "RuntimeError" in caplog.text and CANARY not in caplog.text
