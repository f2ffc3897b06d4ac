"""The operator console's web application against a fake service (docs/console.md): the
loopback Host check, the CSRF token and Origin check on every state change, the security headers
on every answer, escaping, attention runs first, the forms only where recovery allows them,
a step's attempts on the run page and paged on their own, and no operator page for a token that
may not call doctor."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from coordinatorctl.console.web import CSP, ConsoleSettings, create_app
from coordinatorctl.remote.exchange import Failure, RemoteAnswer
from coordinatorctl.remote.request import ApiRequest

PORT = 8470
BASE = f"http://127.0.0.1:{PORT}"
DIGEST = "sha256:" + "a" * 64
RUN = str(uuid.UUID(int=1, version=4))
ATTENTION_RUN = str(uuid.UUID(int=2, version=4))
CANARY = "canary-input-7f3a"


ATTEMPTS: list[dict[str, Any]] = [
    {"generation": 1, "attempt": 2, "startedAt": "2026-12-01T10:00:05.000Z",
     "endedAt": "2026-12-01T10:00:06.000Z", "outcome": "delivered", "failureCode": None},
    {"generation": 1, "attempt": 1, "startedAt": "2026-12-01T10:00:00.000Z",
     "endedAt": "2026-12-01T10:00:01.000Z", "outcome": "retry",
     "failureCode": "transport-unavailable"},
]  # fmt: skip


def run_status(run_id: str = RUN, **changes: Any) -> dict[str, Any]:
    status: dict[str, Any] = {
        "runId": run_id, "workflowId": "follow-up", "workflowVersion": "1",
        "revision": DIGEST, "definitionDigest": DIGEST, "bindingDigest": DIGEST,
        "origin": "api", "trigger": None, "status": "running", "step": "notify",
        "admittedAt": "2026-12-01T10:00:00.000Z", "deadlineAt": "2026-12-02T10:00:00.000Z",
        "completedAt": None, "nextDueAt": None, "cancelRequested": False,
        "restoreReview": False, "uncertain": False, "outcome": None, "output": None,
        "failureCode": None, "payloadErased": False,
    }  # fmt: skip
    status.update(changes)
    return status


def inspection(**changes: Any) -> dict[str, Any]:
    recovery = {
        "retryAllowed": False, "retryBlockedBy": "not-uncertain",
        "reconcileAllowed": False, "reconcileBlockedBy": "not-uncertain",
    }  # fmt: skip
    recovery.update(changes.pop("recovery", {}))
    return {
        "run": run_status(**changes),
        "steps": [
            {
                "step": "notify", "type": "call", "state": "leased", "generation": 1,
                "attempt": 1, "enteredAt": "2026-12-01T10:00:00.000Z", "finishedAt": None,
                "nextDueAt": None, "leaseExpiresAt": None, "failureCode": None, "route": None,
                "operation": "messaging.submit-message/v1", "effect": "mutation",
                "commandPrepared": True, "uncertain": False, "receiptExpired": False,
                "attempts": [ATTEMPTS[0]], "attemptCount": 2,
            }
        ],
        "effects": [
            {"step": "notify", "operation": "messaging.submit-message/v1", "state": "unknown",
             "settledBy": None}
        ],
        "recovery": recovery,
    }  # fmt: skip


def doctor() -> dict[str, Any]:
    statuses = dict.fromkeys(
        ("running", "attention", "cancel-requested", "finished", "failed", "cancelled",
         "cancelled-after-effect", "expired"), 0,
    )  # fmt: skip
    statuses.update(running=3, attention=1)
    return {
        "activationReady": True,
        "state": {
            "databaseId": "db", "store": "sqlite", "schemaVersion": 1,
            "activePackageDigest": DIGEST, "activeRevision": DIGEST, "restoreHold": False,
            "admissionsHold": False, "auditReady": True, "restoreReview": 0,
            "statuses": statuses, "unknownEffects": 1, "waits": 0, "oldestDueAt": None,
            "terminalPayloads": 0, "oldestTerminalPayloadAt": None, "auditHead": DIGEST,
        },
    }  # fmt: skip


def problem(status: int, code: str, title: str) -> RemoteAnswer:
    body = {
        "type": "https://id.registrystack.org/problems/registry-coordinator/access/denied",
        "title": title, "status": status, "detail": "The policy does not allow this.",
        "code": code, "suggestedAction": "Ask for an operator token.",
    }  # fmt: skip
    return RemoteAnswer(status, "application/problem+json", json.dumps(body).encode())


def ok(body: Any) -> RemoteAnswer:
    return RemoteAnswer(200, "application/json", json.dumps(body).encode())


class FakeService:
    def __init__(self, *, operator: bool = True) -> None:
        self.operator = operator
        self.sent: list[ApiRequest] = []
        self.inspection = inspection()
        self.tag: str | None = "0123456789abcdef"  # the ETag tag of a run status read

    def __call__(self, request: ApiRequest) -> RemoteAnswer | Failure:
        self.sent.append(request)
        path = request.path
        if path == "/v1/doctor":
            if not self.operator:
                return problem(403, "coordinator.access.denied", "Access denied")
            return ok(doctor())
        if path == "/v1/runs":
            return ok(
                {
                    "runs": [
                        run_status(),
                        run_status(ATTENTION_RUN, status="attention", uncertain=True,
                                   failureCode="transport-uncertain"),
                    ],
                    "nextCursor": "next.page",
                }
            )  # fmt: skip
        if path.endswith("/inspect"):
            return ok(self.inspection)
        if path == f"/v1/runs/{RUN}":
            answer = ok(run_status())
            return RemoteAnswer(answer.status, answer.media_type, answer.body, self.tag)
        if path == f"/v1/runs/{RUN}/steps/notify/attempts":
            # Pages of one attempt: the first page's cursor leads to the older one.
            older = ("cursor", "older.page") in request.query
            return ok(
                {"runId": RUN, "step": "notify", "attempts": [ATTEMPTS[1 if older else 0]],
                 "nextCursor": None if older else "older.page"}
            )  # fmt: skip
        if "/steps/" in path:
            return problem(404, "coordinator.command.step-absent", "Step not found")
        if path.endswith("/cancel"):
            return ok(run_status(status="cancelled"))
        if path.endswith("/reconcile"):
            return problem(409, "coordinator.command.reconcile-refused", "Reconcile refused")
        return problem(404, "coordinator.request.not-found", "Not found")


@pytest.fixture
def service() -> FakeService:
    return FakeService()


@pytest.fixture
def settings() -> ConsoleSettings:
    return ConsoleSettings(port=PORT)


@pytest.fixture
def client(service: FakeService, settings: ConsoleSettings) -> TestClient:
    return TestClient(create_app(service, settings), base_url=BASE)


def csrf_of(page: str) -> str:
    found = re.search(r'action="[^"?]+\?csrf=([^"&]+)"', page)
    assert found is not None
    return found.group(1)


def post(
    client: TestClient, path: str, data: dict[str, str], headers: dict[str, str] | None = None
) -> Any:
    """A form of the console posted as a browser posts it: its CSRF token in the action's
    query (checked before the body is read), the rest in the body."""
    form = dict(data)
    token = form.pop("csrf", None)
    params = {"csrf": token} if token is not None else None
    return client.post(path, params=params, data=form, headers=headers or {})


def test_every_answer_carries_the_security_headers(client: TestClient) -> None:
    for path in ("/", f"/runs/{RUN}", "/console.css", "/nowhere", "/workflow", "/holds"):
        answer = client.get(path)
        assert answer.headers["content-security-policy"] == CSP, path
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["referrer-policy"] == "no-referrer"
        assert answer.headers["cache-control"] == "no-store"
    assert client.get("/console.css").headers["content-type"].startswith("text/css")


@pytest.mark.parametrize(
    "host", ["evil.example", "localhost:8470", "127.0.0.1", "127.0.0.1:8471", "[::1]:8470"]
)
def test_a_host_other_than_the_loopback_address_and_port_is_refused(
    service: FakeService, settings: ConsoleSettings, host: str
) -> None:
    client = TestClient(create_app(service, settings), base_url=BASE)
    answer = client.get("/", headers={"host": host})
    assert answer.status_code == 421
    assert answer.headers["content-security-policy"] == CSP
    assert service.sent == []  # nothing reached the service


def test_the_runs_page_lists_attention_first_with_counts_and_paging(
    client: TestClient, service: FakeService
) -> None:
    page = client.get("/?status=running&workflow=follow-up").text
    assert page.index(ATTENTION_RUN) < page.index(RUN)
    assert "uncertain effect" in page
    assert '<dd data-status="running">3</dd>' in page
    assert 'href="/?status=running&amp;workflow=follow-up&amp;cursor=next.page"' in page
    listed = next(request for request in service.sent if request.path == "/v1/runs")
    assert ("status", "running") in listed.query
    assert ("workflow", "follow-up") in listed.query
    # The one script is the console's own file (progressive enhancement, CSP script-src 'self').
    assert re.findall(r"<script[^>]*>", page) == ['<script src="/console.js" defer>']
    assert 'http-equiv="refresh"' not in page and "data-live" not in page
    live = client.get("/?auto=5").text
    assert '<main data-live="5">' in live
    assert '<noscript><meta http-equiv="refresh" content="5"></noscript>' in live


def test_a_bad_filter_is_refused_before_anything_is_sent(
    client: TestClient, service: FakeService
) -> None:
    answer = client.get("/?status=<b>x</b>")
    assert answer.status_code == 400
    assert "<b>x</b>" not in answer.text
    assert service.sent == []


def test_ids_and_filters_are_escaped(client: TestClient) -> None:
    page = client.get('/?workflow="><script>alert(1)</script>').text
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;" in page or "&#34;&gt;&lt;script" in page
    missing = client.get("/runs/%3Cscript%3E")
    assert missing.status_code == 404
    assert "<script>" not in missing.text


def test_the_run_page_shows_steps_effects_and_only_the_allowed_forms(
    client: TestClient, service: FakeService
) -> None:
    page = client.get(f"/runs/{RUN}").text
    assert "messaging.submit-message/v1" in page
    assert 'id="form-cancel"' in page  # not terminal
    assert 'id="form-reconcile"' not in page
    assert 'id="form-retry-same"' not in page
    service.inspection = inspection(
        status="attention", uncertain=True,
        recovery={"reconcileAllowed": True, "reconcileBlockedBy": None},
    )  # fmt: skip
    page = client.get(f"/runs/{RUN}").text
    assert 'id="form-reconcile"' in page
    service.inspection = inspection(status="finished", outcome="sent", output={"ref": "x-1"})
    page = client.get(f"/runs/{RUN}").text
    assert 'id="form-cancel"' not in page
    assert "x-1" in page  # the declared output of a finished run


def test_the_run_page_shows_each_steps_latest_attempts_and_links_the_rest(
    client: TestClient,
) -> None:
    page = client.get(f"/runs/{RUN}").text
    section = page[page.index('id="attempts"') : page.index('id="effects-title"')]
    assert '<h3 data-attempts-of="notify">notify · 2 ended</h3>' in section
    assert '<tr data-attempt="1-2"><td>1</td><td>2</td><td>delivered</td>' in section
    assert "2026-12-01T10:00:05.000Z" in section and "2026-12-01T10:00:06.000Z" in section
    assert 'data-attempt="1-1"' not in section  # only what the inspection carries
    assert f'href="/runs/{RUN}/steps/notify/attempts">All 2 attempts</a>' in section


def test_the_attempts_page_pages_a_steps_attempts_with_the_services_cursor(
    client: TestClient, service: FakeService
) -> None:
    first = client.get(f"/runs/{RUN}/steps/notify/attempts")
    assert first.status_code == 200
    assert first.headers["content-security-policy"] == CSP
    assert 'data-attempt="1-2"' in first.text and 'data-attempt="1-1"' not in first.text
    link = f'href="/runs/{RUN}/steps/notify/attempts?cursor=older.page" rel="next"'
    assert link in first.text
    sent = service.sent[-1]
    assert (sent.path, sent.query) == (f"/v1/runs/{RUN}/steps/notify/attempts", (("limit", "50"),))
    older = client.get(f"/runs/{RUN}/steps/notify/attempts?cursor=older.page").text
    assert 'data-attempt="1-1"' in older and "transport-unavailable" in older
    assert 'rel="next"' not in older and "Newest page" in older
    absent = client.get(f"/runs/{RUN}/steps/gone/attempts")
    assert absent.status_code == 404 and "coordinator.command.step-absent" in absent.text
    before = len(service.sent)
    for path in (
        f"/runs/{RUN}/steps/Not%20A%20Step/attempts",
        "/runs/not-a-run/steps/notify/attempts",
        f"/runs/{RUN}/steps/notify/attempts?cursor=%01",
    ):
        refused = client.get(path)
        assert refused.status_code in (400, 404), path
        assert "Not A Step" not in refused.text
    assert len(service.sent) == before  # refused before anything was sent


def test_a_post_needs_the_csrf_token_and_the_console_origin(
    client: TestClient, service: FakeService
) -> None:
    token = csrf_of(client.get(f"/runs/{RUN}").text)
    form = {"csrf": token, "reason": "case-1", "confirm": "yes"}
    origin = {"origin": BASE}
    for data, headers in (
        ({**form, "csrf": "forged"}, origin),
        ({k: v for k, v in form.items() if k != "csrf"}, origin),
        (form, {"origin": "http://evil.example"}),
        (form, {}),
        (form, {"origin": "null"}),
        (form, {"origin": "null", "sec-fetch-site": "cross-site"}),
    ):
        answer = post(client, f"/runs/{RUN}/cancel", data, headers)
        assert answer.status_code == 403
    assert not [request for request in service.sent if request.method == "POST"]
    answer = post(client, f"/runs/{RUN}/cancel", form, origin)
    assert answer.status_code == 200
    posted = [request for request in service.sent if request.method == "POST"]
    assert [(request.path, request.body) for request in posted] == [
        (f"/v1/runs/{RUN}/cancel", {"reason": "case-1"})
    ]
    assert 'id="action-status">cancelled<' in answer.text
    # What a browser sends under `Referrer-Policy: no-referrer`: the page's own form.
    same_page = {"origin": "null", "sec-fetch-site": "same-origin"}
    assert post(client, f"/runs/{RUN}/cancel", form, same_page).status_code == 200


def test_a_form_is_judged_before_its_body_is_read(client: TestClient, service: FakeService) -> None:
    """Origin, CSRF token (in the form's action), media type and declared length come first:
    a form over 4,096 bytes, or one without a declared length, is refused unread."""
    token = csrf_of(client.get(f"/runs/{RUN}").text)
    origin = {"origin": BASE}
    big = {"csrf": token, "reason": "case-1", "confirm": "yes", "padding": "p" * 5000}
    assert post(client, f"/runs/{RUN}/cancel", big, origin).status_code == 403

    def chunks() -> Iterator[bytes]:
        yield b"reason=case-1&confirm=yes"

    chunked = client.post(
        f"/runs/{RUN}/cancel",
        params={"csrf": token},
        content=chunks(),
        headers={**origin, "content-type": "application/x-www-form-urlencoded"},
    )
    assert chunked.status_code == 403
    assert chunked.headers["connection"] == "close"
    assert not [request for request in service.sent if request.method == "POST"]


def test_a_post_without_confirmation_asks_again_and_sends_nothing(
    client: TestClient, service: FakeService
) -> None:
    token = csrf_of(client.get(f"/runs/{RUN}").text)
    answer = post(
        client, f"/runs/{RUN}/cancel", {"csrf": token, "reason": "case-1"}, {"origin": BASE}
    )
    assert answer.status_code == 400
    assert "I confirm" in answer.text
    assert 'id="confirm-problem"' in answer.text
    assert not [request for request in service.sent if request.method == "POST"]


def test_a_refusal_shows_the_problem_title_and_hint(
    client: TestClient, service: FakeService
) -> None:
    token = csrf_of(client.get(f"/runs/{RUN}").text)
    answer = post(
        client,
        f"/runs/{RUN}/reconcile",
        {"csrf": token, "reason": "case-2", "confirm": "yes"},
        {"origin": BASE},
    )
    assert "Reconcile refused" in answer.text
    assert "coordinator.command.reconcile-refused" in answer.text
    assert "Ask for an operator token." in answer.text


def test_a_non_operator_token_sees_no_counts_and_no_operator_page(
    settings: ConsoleSettings,
) -> None:
    client = TestClient(create_app(FakeService(operator=False), settings), base_url=BASE)
    page = client.get("/").text
    assert 'href="/holds"' not in page
    assert 'id="counts"' not in page
    holds = client.get("/holds")
    assert holds.status_code == 403
    assert "<form" not in holds.text


def test_an_unreachable_service_is_one_sentence(settings: ConsoleSettings) -> None:
    def unreachable(request: ApiRequest) -> RemoteAnswer | Failure:
        return "unreachable"

    api: Callable[[ApiRequest], RemoteAnswer | Failure] = unreachable
    page = TestClient(create_app(api, settings), base_url=BASE).get("/").text
    assert "The service cannot be reached." in page


def test_the_holds_page_sends_the_attestations_and_retention_as_typed(
    client: TestClient, service: FakeService
) -> None:
    page = client.get("/holds").text
    assert 'id="form-restore-hold"' in page
    assert 'id="form-retention"' in page
    token = csrf_of(page)
    origin = {"origin": BASE}
    post(
        client,
        "/holds/release-admission-hold",
        {"csrf": token, "reason": "EV-1", "confirm": "yes", "priorDeploymentFenced": "yes"},
        origin,
    )
    post(
        client,
        "/holds/retention",
        {"csrf": token, "before": "2026-11-01T00:00:00.5Z", "limit": "7", "confirm": "yes"},
        origin,
    )
    refused = post(
        client,
        "/holds/retention",
        {"csrf": token, "before": "yesterday", "limit": "7", "confirm": "yes"},
        origin,
    )
    assert refused.status_code == 400
    posted = [(r.path, r.body) for r in service.sent if r.method == "POST"]
    assert posted == [
        (
            "/v1/release-admission-hold",
            {"reason": "EV-1", "admissionHistoryComplete": False, "priorDeploymentFenced": True},
        ),
        ("/v1/retention", {"before": "2026-11-01T00:00:00.5Z", "limit": 7}),
    ]


def test_the_workflow_page_shows_the_active_revision(settings: ConsoleSettings) -> None:
    info = {
        "workflowId": "follow-up", "title": "Follow <up>", "version": "1", "revision": DIGEST,
        "definitionDigest": DIGEST, "packageDigest": DIGEST, "inputSchema": True,
        "triggers": [], "outcomes": ["sent"],
    }  # fmt: skip

    def api(request: ApiRequest) -> RemoteAnswer | Failure:
        return ok(info) if request.path == "/v1/workflow" else "unreachable"

    page = TestClient(create_app(api, settings), base_url=BASE).get("/workflow").text
    assert DIGEST in page
    assert "Follow &lt;up&gt;" in page
    assert "sent" in page


def test_the_command_refuses_before_it_listens(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    from coordinatorctl.cli import main

    monkeypatch.delenv("COORDINATOR_URL", raising=False)
    monkeypatch.delenv("COORDINATOR_TOKEN_FILE", raising=False)
    assert main(["--format", "json", "console"]) == 2
    report = json.loads(capsys.readouterr().out)
    codes = {d["code"] for d in report["diagnostics"]}
    assert codes == {
        "coordinator.command.service-required",
        "coordinator.command.token-file-required",
    }
    token = tmp_path / "token"
    token.write_text("not a token\n")
    arguments = ["--format", "json", "--url", "http://127.0.0.1:9", "--token-file", str(token)]
    assert main([*arguments, "console", "--port", "70000"]) == 2
    capsys.readouterr()
    assert main([*arguments, "console", "--port", "0"]) != 0  # the token file is refused
    assert "not a token" not in capsys.readouterr().out


def test_a_project_of_another_definition_draws_no_graph(service: FakeService) -> None:
    other = ConsoleSettings(
        port=PORT, explained={"definitionDigest": "sha256:" + "b" * 64, "steps": []}
    )
    page = TestClient(create_app(service, other), base_url=BASE).get(f"/runs/{RUN}").text
    assert 'id="graph"' not in page
    assert "is not this run" in page


def test_the_script_is_served_from_the_wheel_under_the_same_headers(client: TestClient) -> None:
    answer = client.get("/console.js")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/javascript")
    assert answer.headers["content-security-policy"] == CSP
    assert "data-until" in answer.text and "data-live" in answer.text
    assert "script-src 'self'" in CSP and "connect-src 'self'" in CSP


def test_instants_carry_their_live_countdown(client: TestClient) -> None:
    page = client.get(f"/runs/{RUN}?auto=5").text
    assert (
        '2026-12-02T10:00:00.000Z <span class="countdown" data-until="2026-12-02T10:00:00.000Z">'
        in page
    )
    assert '<main data-live="5" data-follow=' in page


def test_a_live_run_page_follows_the_run_through_the_waiting_read(
    client: TestClient, service: FakeService
) -> None:
    assert "data-follow" not in client.get(f"/runs/{RUN}").text
    page = client.get(f"/runs/{RUN}?auto=5").text
    assert f'<main data-live="5" data-follow="/runs/{RUN}/changes">' in page
    first = client.get(f"/runs/{RUN}/changes")
    assert first.status_code == 200 and first.json() == {"tag": "0123456789abcdef"}
    assert first.headers["content-security-policy"] == CSP
    assert service.sent[-1] == ApiRequest("GET", f"/v1/runs/{RUN}")  # no tag yet: a plain read
    waited = client.get(f"/runs/{RUN}/changes", params={"seen": "fedcba9876543210"})
    assert waited.json() == {"tag": "0123456789abcdef"}
    assert service.sent[-1].query == (("wait", "20"), ("seen", "fedcba9876543210"))


def test_the_follow_forwards_no_malformed_tag_and_falls_back_without_one(
    client: TestClient, service: FakeService
) -> None:
    answer = client.get(f"/runs/{RUN}/changes", params={"seen": CANARY})
    assert answer.status_code == 200 and CANARY not in answer.text
    assert service.sent[-1].query == ()  # never sent on: a plain read
    service.tag = None  # a service without the waiting read
    assert client.get(f"/runs/{RUN}/changes").status_code == 204
    assert client.get("/runs/not-a-run/changes").status_code == 404


def test_the_script_follows_a_run_page_and_keeps_the_timer_as_its_fallback(
    client: TestClient,
) -> None:
    script = client.get("/console.js").text
    assert "data-follow" in script and "?seen=" in script and "setInterval" in script


@pytest.mark.parametrize(
    ("since", "shown", "next_page"),
    [
        ("2026-12-01T10:00:00Z", True, True),
        ("2026-12-01", True, True),
        ("2026-12-01T11:00:00+01:00", True, True),
        ("2026-12-01T10:00:01Z", False, False),
    ],
)
def test_the_admitted_since_filter_hides_older_runs_and_ends_the_paging(
    client: TestClient, since: str, shown: bool, next_page: bool
) -> None:
    page = client.get("/", params={"since": since}).text
    assert (f'data-run="{RUN}"' in page) is shown
    assert ("cursor=next.page" in page) is next_page
    if next_page:
        assert "since=" in page.split("cursor=next.page")[0].rsplit("href=", 1)[1]


def test_a_bad_admitted_since_filter_is_refused_before_anything_is_sent(
    client: TestClient, service: FakeService
) -> None:
    answer = client.get("/", params={"since": "last tuesday <b>"})
    assert answer.status_code == 400
    assert "admitted-since filter" in answer.text and "<b>" not in answer.text
    assert service.sent == []
