"""The remote commands of 09 §4 against a tiny fake service (starlette under uvicorn on loopback).

The fake service records every request and answers what the test set up. Every invocation goes
through `coordinatorctl.cli.main` and every output is checked for the access token (canary).
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import uvicorn
import yaml
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from coordinator_models import api
from coordinatorctl.cli import main
from coordinatorctl.remote import checks as remote_inputs
from coordinatorctl.remote import exchange as remote_exchange
from coordinatorctl.remote import outcome as remote_outcome
from coordinatorctl.remote import text as remote_text
from coordinatorctl.remote.args import COMMANDS

REPO = Path(__file__).resolve().parents[3]
REPORT_SCHEMA = json.loads(
    (REPO / "spec" / "schemas" / "ctl-report.schema.json").read_text(encoding="utf-8")
)
CANARY = "Q0FOQVJZLXRva2VuLTdmM2E"
TOKEN = f"eyJhbGciOiJFUzI1NiIsInR5cCI6ImF0K2p3dCJ9.{CANARY}.c2lnbmF0dXJlLXNlZ21lbnQ"
RUN_ID = "0b7d3c52-5e1a-4b9e-9c1d-2f3a4b5c6d7e"
DIGEST = "sha256:" + "5" * 64
PROBLEM = "application/problem+json"

RUN_STATUS: dict[str, Any] = {
    "runId": RUN_ID,
    "workflowId": "reviewed-notice",
    "workflowVersion": "1",
    "revision": DIGEST,
    "definitionDigest": DIGEST,
    "bindingDigest": DIGEST,
    "origin": "api",
    "trigger": None,
    "status": "running",
    "step": "await-review",
    "admittedAt": "2025-01-01T10:00:00.000Z",
    "deadlineAt": "2025-02-01T10:00:00.000Z",
    "completedAt": None,
    "nextDueAt": "2025-01-01T11:00:00.000Z",
    "cancelRequested": False,
    "restoreReview": False,
    "uncertain": True,
    "outcome": None,
    "output": None,
    "failureCode": None,
    "payloadErased": False,
}
INSPECTION: dict[str, Any] = {
    "run": RUN_STATUS,
    "steps": [
        {
            "step": "request-review",
            "type": "call",
            "state": "delivered",
            "generation": 1,
            "attempt": 1,
            "enteredAt": "2025-01-01T10:00:00.000Z",
            "finishedAt": "2025-01-01T10:00:01.000Z",
            "nextDueAt": None,
            "leaseExpiresAt": None,
            "failureCode": None,
            "route": {"kind": "next"},
            "operation": "casework.request-review/v1",
            "effect": "mutation",
            "commandPrepared": True,
            "uncertain": False,
            "receiptExpired": False,
            "attempts": [
                {
                    "generation": 1,
                    "attempt": 2,
                    "startedAt": "2025-01-01T10:00:00.500Z",
                    "endedAt": "2025-01-01T10:00:01.000Z",
                    "outcome": "delivered",
                    "failureCode": None,
                },
                {
                    "generation": 1,
                    "attempt": 1,
                    "startedAt": "2025-01-01T10:00:00.000Z",
                    "endedAt": "2025-01-01T10:00:00.100Z",
                    "outcome": "retry",
                    "failureCode": "transport-unavailable",
                },
            ],
            "attemptCount": 2,
        },
        {
            "step": "await-review",
            "type": "wait-for",
            "state": "pending",
            "generation": 1,
            "attempt": 0,
            "enteredAt": "2025-01-01T10:00:01.000Z",
            "finishedAt": None,
            "nextDueAt": "2025-01-01T11:00:00.000Z",
            "leaseExpiresAt": None,
            "failureCode": None,
            "route": None,
            "wait": {
                "call": "read-review",
                "completion": "review-completed",
                "startedAt": "2025-01-01T10:00:01.000Z",
                "timeoutAt": "2025-01-08T10:00:01.000Z",
                "intervalSeconds": 900,
                "observations": 4,
                "lastObservedAt": "2025-01-01T10:45:00.000Z",
                "nextObservationAt": "2025-01-01T11:00:00.000Z",
                "result": "waiting",
            },
        },
    ],
    "effects": [
        {
            "step": "request-review",
            "operation": "casework.request-review/v1",
            "state": "accepted",
            "settledBy": "response",
        },
        {
            "step": "send-notice",
            "operation": "messaging.send/v1",
            "state": "unknown",
            "settledBy": None,
        },
    ],
    "recovery": {
        "retryAllowed": False,
        "retryBlockedBy": "not-uncertain",
        "reconcileAllowed": True,
        "reconcileBlockedBy": None,
    },
}
WORKFLOW_INFO = {
    "workflowId": "reviewed-notice",
    "version": "1",
    "revision": DIGEST,
    "definitionDigest": DIGEST,
    "packageDigest": DIGEST,
    "inputSchema": {"type": "object"},
    "triggers": ["application-submitted"],
    "outcomes": ["notice-sent"],
}
HOLD_STATE = {"restoreHold": True, "admissionsHold": True, "restoreReview": 3}
DOCTOR: dict[str, Any] = {
    "activationReady": True,
    "state": {
        "databaseId": "coordinator",
        "store": "sqlite",
        "schemaVersion": 2,
        "activePackageDigest": DIGEST,
        "activeRevision": DIGEST,
        "restoreHold": False,
        "admissionsHold": False,
        "auditReady": True,
        "restoreReview": 0,
        "statuses": {
            "running": 1,
            "attention": 0,
            "cancel-requested": 0,
            "finished": 4,
            "failed": 0,
            "cancelled": 0,
            "cancelled-after-effect": 0,
            "expired": 0,
        },
        "unknownEffects": 1,
        "waits": 1,
        "oldestDueAt": "2025-01-01T11:00:00.000Z",
        "terminalPayloads": 4,
        "oldestTerminalPayloadAt": "2025-01-01T09:00:00.000Z",
        "auditHead": DIGEST,
    },
}


def problem(status: int, code: str, **extra: Any) -> bytes:
    body: dict[str, Any] = {
        "type": "https://id.registrystack.org/problems/registry-coordinator/"
        + code.removeprefix("coordinator.").replace(".", "/"),
        "title": "Refused",
        "status": status,
        "detail": "A fixed sentence for this code.",
        "code": code,
        "suggestedAction": "Do the fixed next thing.",
    }
    body.update(extra)
    return json.dumps(body).encode()


# --------------------------------------------------------------------------------------------
# The fake service.


@dataclass
class Canned:
    status: int = 200
    body: bytes = b"{}"
    media_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    drip: bool = False  # stream the body one byte per 0.1 s
    chunked: bool = False  # stream the body without a Content-Length


@dataclass
class Seen:
    method: str
    path: str
    query: list[tuple[str, str]]
    headers: dict[str, str]
    body: bytes


class FakeService:
    def __init__(self) -> None:
        self.canned = Canned()
        self.seen: list[Seen] = []
        self.url = ""
        self.port = 0

    def answer(self, status: int = 200, body: Any = None, **options: Any) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body or {}).encode()
        self.canned = Canned(status=status, body=data, **options)

    async def endpoint(self, request: Request) -> Response:
        self.seen.append(
            Seen(
                request.method,
                request.url.path,
                list(request.query_params.multi_items()),
                {name.lower(): value for name, value in request.headers.items()},
                await request.body(),
            )
        )
        canned = self.canned
        if canned.delay:
            await asyncio.sleep(canned.delay)
        if canned.drip or canned.chunked:

            async def stream() -> AsyncIterator[bytes]:
                if canned.drip:
                    for index in range(len(canned.body)):
                        yield canned.body[index : index + 1]
                        await asyncio.sleep(0.1)
                else:
                    for start in range(0, len(canned.body), 65_536):
                        yield canned.body[start : start + 65_536]

            return StreamingResponse(
                stream(),
                status_code=canned.status,
                media_type=canned.media_type,
                headers=canned.headers,
            )
        return Response(
            canned.body,
            status_code=canned.status,
            media_type=canned.media_type,
            headers=canned.headers,
        )


@pytest.fixture(scope="module")
def server() -> Iterator[FakeService]:
    fake = FakeService()
    app = Starlette(
        routes=[Route("/{path:path}", fake.endpoint, methods=["GET", "POST", "PUT", "DELETE"])]
    )
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    fake.port = listener.getsockname()[1]
    fake.url = f"http://127.0.0.1:{fake.port}"
    config = uvicorn.Config(
        app, log_level="critical", lifespan="off", access_log=False, timeout_graceful_shutdown=1
    )
    uvicorn_server = uvicorn.Server(config)
    thread = threading.Thread(
        target=uvicorn_server.run, kwargs={"sockets": [listener]}, daemon=True
    )
    thread.start()
    deadline = time.monotonic() + 10
    while not uvicorn_server.started:
        assert time.monotonic() < deadline, "the fake service did not start"
        time.sleep(0.01)
    yield fake
    uvicorn_server.should_exit = True
    thread.join(timeout=10)
    listener.close()


@pytest.fixture
def service(server: FakeService) -> FakeService:
    server.canned = Canned()
    server.seen = []
    return server


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n", encoding="ascii")
    return path


# --------------------------------------------------------------------------------------------
# Running the command line.


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    assert CANARY not in captured.out + captured.err, "the access token reached the output"
    return code, captured.out, captured.err


def report(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code, out, err = run(capsys, *argv, "--format", "json")
    assert err == ""
    assert out.endswith("\n") and out.count("\n") == 1, "exactly one JSON object and a line feed"
    document = json.loads(out)
    jsonschema.Draft202012Validator(REPORT_SCHEMA).validate(document)
    assert document["ok"] is (code == 0)
    return code, document


def remote_args(service: FakeService, token_file: Path) -> list[str]:
    return ["--url", service.url, "--token-file", str(token_file)]


def codes(document: dict[str, Any]) -> list[str]:
    return [d["code"] for d in document["diagnostics"]]


# --------------------------------------------------------------------------------------------
# Every command sends the right request and nests its answer as 09 §4 says.


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]
    method: str
    path: str
    answer: Any
    query: tuple[tuple[str, str], ...] = ()
    body: Any = None
    status: str = "completed"


ATTEMPT_PAGE: dict[str, Any] = {
    "runId": RUN_ID,
    "step": "request-review",
    "attempts": INSPECTION["steps"][0]["attempts"],
    "nextCursor": "next.page",
}

CASES = {
    "workflow": Case(("workflow",), "GET", "/v1/workflow", WORKFLOW_INFO),
    "status": Case(("status", "--run", RUN_ID.upper()), "GET", f"/v1/runs/{RUN_ID}", RUN_STATUS),
    "list": Case(
        ("list",), "GET", "/v1/runs", {"runs": [RUN_STATUS], "nextCursor": None}, (("limit", "20"),)
    ),
    "list-filtered": Case(
        ("list", "--limit", "5", "--cursor", "abc.def", "--status", "attention", "--workflow", "w"),
        "GET",
        "/v1/runs",
        {"runs": [], "nextCursor": "next.page"},
        (("limit", "5"), ("cursor", "abc.def"), ("status", "attention"), ("workflow", "w")),
    ),
    "inspect": Case(("inspect", "--run", RUN_ID), "GET", f"/v1/runs/{RUN_ID}/inspect", INSPECTION),
    "attempts": Case(
        ("attempts", "--run", RUN_ID.upper(), "--step", "request-review"),
        "GET",
        f"/v1/runs/{RUN_ID}/steps/request-review/attempts",
        ATTEMPT_PAGE,
        (("limit", "20"),),
    ),
    "attempts-paged": Case(
        ("attempts", "--run", RUN_ID, "--step", "await-review", "--limit", "2", "--cursor", "c.1"),
        "GET",
        f"/v1/runs/{RUN_ID}/steps/await-review/attempts",
        {**ATTEMPT_PAGE, "step": "await-review", "attempts": [], "nextCursor": None},
        (("limit", "2"), ("cursor", "c.1")),
    ),
    "cancel": Case(
        ("cancel", "--run", "{" + RUN_ID + "}", "--reason", "INC-1042"),
        "POST",
        f"/v1/runs/{RUN_ID}/cancel",
        RUN_STATUS,
        body={"reason": "INC-1042"},
    ),
    "retry-same": Case(
        ("retry-same", "--run", RUN_ID.replace("-", ""), "--reason", "INC-1042"),
        "POST",
        f"/v1/runs/{RUN_ID}/retry-same",
        RUN_STATUS,
        body={"reason": "INC-1042"},
    ),
    "reconcile": Case(
        ("reconcile", "--run", RUN_ID, "--reason", "INC-1042"),
        "POST",
        f"/v1/runs/{RUN_ID}/reconcile",
        {"result": "settled", "inspection": INSPECTION},
        body={"reason": "INC-1042"},
    ),
    "doctor": Case(("doctor",), "GET", "/v1/doctor", DOCTOR),
    "restore-hold": Case(
        ("restore-hold", "--reason", "INC-7"),
        "POST",
        "/v1/restore-hold",
        HOLD_STATE,
        body={"reason": "INC-7"},
    ),
    "release-restore-hold": Case(
        ("release-restore-hold", "--reason", "INC-7"),
        "POST",
        "/v1/release-restore-hold",
        HOLD_STATE,
        body={"reason": "INC-7"},
    ),
    "release-admission-hold": Case(
        ("release-admission-hold", "--reason", "INC-7"),
        "POST",
        "/v1/release-admission-hold",
        HOLD_STATE,
        body={"reason": "INC-7", "admissionHistoryComplete": False, "priorDeploymentFenced": False},
    ),
    "release-admission-hold-attested": Case(
        (
            "release-admission-hold",
            "--reason",
            "INC-7",
            "--admission-history-complete",
            "--prior-deployment-fenced",
        ),
        "POST",
        "/v1/release-admission-hold",
        HOLD_STATE,
        body={"reason": "INC-7", "admissionHistoryComplete": True, "priorDeploymentFenced": True},
    ),
    "retain": Case(
        ("retain", "--before", "2025-01-01T00:00:00Z"),
        "POST",
        "/v1/retention",
        {"erased": 2},
        body={"before": "2025-01-01T00:00:00Z", "limit": 100},
    ),
    "retain-limited": Case(
        ("retain", "--before", "2025-01-01T01:00:00.5+01:00", "--limit", "7"),
        "POST",
        "/v1/retention",
        {"erased": 0},
        body={"before": "2025-01-01T01:00:00.5+01:00", "limit": 7},
    ),
}


def expected_members(command: str, answer: dict[str, Any]) -> dict[str, Any]:
    if command in ("status", "cancel", "retry-same", "start"):
        return {"run": answer}
    return answer


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_every_command_sends_its_api_call_and_nests_the_answer(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path, case_id: str
) -> None:
    case = CASES[case_id]
    service.answer(200, case.answer)
    code, document = report(capsys, *remote_args(service, token_file), *case.argv)
    assert code == 0, document
    assert len(service.seen) == 1
    seen = service.seen[0]
    assert (seen.method, seen.path) == (case.method, case.path)
    assert seen.query == list(case.query)
    assert seen.headers["authorization"] == f"Bearer {TOKEN}"
    assert "idempotency-key" not in seen.headers
    assert seen.headers["accept-encoding"] == "identity"
    assert seen.headers["user-agent"].startswith("coordinatorctl")
    if case.body is None:
        assert seen.body == b""
    else:
        assert seen.headers["content-type"] == "application/json"
        assert json.loads(seen.body) == case.body
    command = case.argv[0]
    assert document["command"] == command
    assert document["status"] == case.status
    members = {k: v for k, v in document.items() if k not in remote_envelope_names()}
    assert members == expected_members(command, case.answer)


def remote_envelope_names() -> set[str]:
    return {"apiVersion", "kind", "command", "ok", "status", "diagnostics"}


def test_every_remote_command_has_a_spec_and_a_case() -> None:
    assert set(remote_outcome.SPECS) == COMMANDS
    covered = {case.argv[0] for case in CASES.values()} | {"start"}
    assert covered == COMMANDS


def test_global_flags_may_follow_the_subcommand(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path
) -> None:
    service.answer(200, WORKFLOW_INFO)
    code, document = report(capsys, "workflow", *remote_args(service, token_file))
    assert code == 0 and document["workflowId"] == "reviewed-notice"


@pytest.fixture
def start_files(tmp_path: Path) -> tuple[Path, Path]:
    payload = tmp_path / "input.json"
    payload.write_text('{"applicationId": "a8d12546", "n": 1.5, "list": [1, 2]}', encoding="utf-8")
    key = tmp_path / "key.txt"
    key.write_text("admission-key-0001\n", encoding="ascii")
    return payload, key


def start_argv(payload: Path, key: Path) -> list[str]:
    return [
        "start",
        "--workflow",
        "reviewed-notice",
        "--revision",
        DIGEST,
        "--input",
        str(payload),
        "--key-file",
        str(key),
    ]


@pytest.mark.parametrize(("http", "word"), [(201, "admitted"), (200, "replayed")])
def test_start_posts_the_run_with_the_key_and_reports_admitted_or_replayed(
    capsys: pytest.CaptureFixture[str],
    service: FakeService,
    token_file: Path,
    start_files: tuple[Path, Path],
    http: int,
    word: str,
) -> None:
    service.answer(http, RUN_STATUS, headers={"Location": f"/v1/runs/{RUN_ID}"})
    code, document = report(capsys, *remote_args(service, token_file), *start_argv(*start_files))
    assert code == 0
    seen = service.seen[0]
    assert (seen.method, seen.path) == ("POST", "/v1/runs")
    assert seen.headers["idempotency-key"] == "admission-key-0001"  # the line feed is stripped
    assert seen.headers["authorization"] == f"Bearer {TOKEN}"
    assert json.loads(seen.body) == {
        "workflow": "reviewed-notice",
        "revision": DIGEST,
        "input": {"applicationId": "a8d12546", "n": 1.5, "list": [1, 2]},
    }
    # 02 §3 / 09 §4: the run is nested, so its own `status` never replaces the envelope's.
    assert document["status"] == word
    assert document["run"] == RUN_STATUS and document["run"]["status"] == "running"


def test_start_with_another_success_status_is_service_unavailable(
    capsys: pytest.CaptureFixture[str],
    service: FakeService,
    token_file: Path,
    start_files: tuple[Path, Path],
) -> None:
    service.answer(202, RUN_STATUS)
    code, document = report(capsys, *remote_args(service, token_file), *start_argv(*start_files))
    assert code == 3 and codes(document) == ["coordinator.command.service-unavailable"]


# --------------------------------------------------------------------------------------------
# The outcome mapping table of 09 §4, row by row.


def test_4xx_with_a_valid_problem_passes_code_detail_and_action(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path
) -> None:
    service.answer(404, problem(404, "coordinator.command.run-absent"), media_type=PROBLEM)
    code, document = report(capsys, *remote_args(service, token_file), "status", "--run", RUN_ID)
    assert code == 1 and document["status"] == "domain-refusal"
    [diagnostic] = document["diagnostics"]
    assert diagnostic["code"] == "coordinator.command.run-absent"
    assert diagnostic["message"] == "A fixed sentence for this code."
    assert diagnostic["suggestedAction"] == "Do the fixed next thing."
    assert diagnostic["severity"] == "error"


def test_4xx_problem_without_suggested_action_gets_a_fixed_default(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path
) -> None:
    body = problem(409, "coordinator.command.no-such-code-here", suggestedAction=None)
    service.answer(409, body, media_type=PROBLEM)
    code, document = report(capsys, *remote_args(service, token_file), "doctor")
    assert code == 1
    [diagnostic] = document["diagnostics"]
    assert diagnostic["code"] == "coordinator.command.no-such-code-here"
    assert diagnostic["suggestedAction"] == remote_outcome._PROBLEM_DEFAULT_HINT


def test_problem_detail_is_stripped_of_control_characters_and_capped(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path
) -> None:
    detail = "Refused\x1b[31m red\u202e\u0085\nnext line " + "x" * 5000
    body = problem(400, "coordinator.request.invalid", detail=detail)
    service.answer(400, body, media_type=PROBLEM)
    code, out, err = run(capsys, *remote_args(service, token_file), "doctor")
    assert code == 1
    assert "\x1b" not in err and "\u202e" not in err and "\u0085" not in err
    message_line = err.splitlines()[1]
    assert message_line.startswith("  Refused[31m red next line xxx")
    assert len(message_line) <= 2 + remote_outcome.MAX_PASSED_TEXT_CHARS
    assert out == ""


def test_retry_refused_reason_is_reported_as_blocked_by(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path
) -> None:
    body = problem(409, "coordinator.command.retry-refused", reason="lease-active")
    service.answer(409, body, media_type=PROBLEM)
    code, document = report(
        capsys, *remote_args(service, token_file), "retry-same", "--run", RUN_ID, "--reason", "I-1"
    )
    assert code == 1
    assert codes(document) == ["coordinator.command.retry-refused"]
    assert document["blockedBy"] == "lease-active"
    assert document["diagnostics"][0]["message"].endswith(" Blocked by: lease-active.")


@pytest.mark.parametrize(
    ("body", "media_type"),
    [
        (b"<html>Forbidden</html>", "text/html"),
        (b"", "text/plain"),
        (problem(403, "coordinator.access.denied"), "application/json"),  # not problem+json
        (problem(404, "coordinator.access.denied"), PROBLEM),  # status differs from the answer's
        (problem(403, "NOT A CODE"), PROBLEM),
        (b'{"code": "coordinator.access.denied", "code": "x"}', PROBLEM),  # not strict JSON
        (b"[]", PROBLEM),
    ],
)
def test_4xx_without_a_valid_problem_is_service_refused(
    capsys: pytest.CaptureFixture[str],
    service: FakeService,
    token_file: Path,
    body: bytes,
    media_type: str,
) -> None:
    service.answer(403, body, media_type=media_type)
    code, document = report(capsys, *remote_args(service, token_file), "workflow")
    assert code == 1 and document["status"] == "domain-refusal"
    assert codes(document) == ["coordinator.command.service-refused"]


def test_4xx_exit_class_is_1_whatever_the_catalogue_says_about_the_code(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path
) -> None:
    # coordinator.command.store-unavailable is exit 3 in the catalogue; a 4xx is a refusal.
    body = problem(409, "coordinator.command.store-unavailable")
    service.answer(409, body, media_type=PROBLEM)
    code, document = report(capsys, *remote_args(service, token_file), "doctor")
    assert code == 1 and document["status"] == "domain-refusal"


@pytest.mark.parametrize(
    "code_in_problem", ["coordinator.access.unavailable", "coordinator.command.audit-unavailable"]
)
def test_5xx_with_a_valid_problem_keeps_its_code_and_is_exit_3(
    capsys: pytest.CaptureFixture[str],
    service: FakeService,
    token_file: Path,
    code_in_problem: str,
) -> None:
    service.answer(503, problem(503, code_in_problem), media_type=PROBLEM)
    code, document = report(
        capsys, *remote_args(service, token_file), "cancel", "--run", RUN_ID, "--reason", "I-1"
    )
    assert code == 3 and document["status"] == "operational-failure"
    assert codes(document) == [code_in_problem]
    assert document["diagnostics"][0]["message"] == "A fixed sentence for this code."


def test_5xx_without_a_valid_problem_is_service_unavailable(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path
) -> None:
    service.answer(502, b"Bad gateway", media_type="text/plain")
    code, document = report(
        capsys, *remote_args(service, token_file), "cancel", "--run", RUN_ID, "--reason", "I-1"
    )
    assert code == 3
    assert unavailable(document) == remote_outcome._FAILURE_MESSAGES["failed"]
    assert "inspect" in document["diagnostics"][0]["suggestedAction"]


def unavailable(document: dict[str, Any]) -> str:
    assert document["status"] == "operational-failure"
    assert codes(document) == ["coordinator.command.service-unavailable"]
    return str(document["diagnostics"][0]["message"])


def test_timeout_is_service_unavailable_with_the_inspect_advice(
    capsys: pytest.CaptureFixture[str],
    service: FakeService,
    token_file: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(remote_exchange, "TOTAL_TIMEOUT_SECONDS", 0.3)
    service.answer(200, RUN_STATUS, delay=1.5)
    code, document = report(
        capsys, *remote_args(service, token_file), "cancel", "--run", RUN_ID, "--reason", "I-1"
    )
    assert code == 3  # the answer was held back longer: only the time limit ends the command
    assert unavailable(document) == "The service did not answer within the time limit."
    assert "coordinatorctl inspect" in document["diagnostics"][0]["suggestedAction"]


def test_the_total_timeout_bounds_a_slowly_dripping_answer(
    capsys: pytest.CaptureFixture[str],
    service: FakeService,
    token_file: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each byte arrives well within the read timeout; only the total deadline stops it.
    monkeypatch.setattr(remote_exchange, "TOTAL_TIMEOUT_SECONDS", 0.5)
    service.answer(200, b" " * 40 + b"{}", drip=True)
    code, document = report(capsys, *remote_args(service, token_file), "doctor")
    assert code == 3 and "time limit" in unavailable(document)


def test_the_client_timeouts_are_the_contract_values() -> None:
    assert remote_exchange.TOTAL_TIMEOUT_SECONDS == 30.0
    assert remote_exchange.CONNECT_TIMEOUT_SECONDS == 5.0
    assert remote_exchange.MAX_RESPONSE_BYTES == 1_048_576


def test_connection_refused_is_service_unavailable(
    capsys: pytest.CaptureFixture[str], token_file: Path
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code, document = report(
        capsys, "--url", f"http://127.0.0.1:{port}", "--token-file", str(token_file), "workflow"
    )
    assert code == 3 and unavailable(document) == "The service could not be reached."


@pytest.mark.parametrize("chunked", [False, True])
@pytest.mark.parametrize("status", [200, 404])
def test_an_answer_over_1_mib_is_service_unavailable(
    capsys: pytest.CaptureFixture[str],
    service: FakeService,
    token_file: Path,
    chunked: bool,
    status: int,
) -> None:
    body = b'{"pad": "' + b"x" * remote_exchange.MAX_RESPONSE_BYTES + b'"}'
    service.answer(
        status, body, chunked=chunked, media_type=PROBLEM if status >= 400 else "application/json"
    )
    code, document = report(capsys, *remote_args(service, token_file), "doctor")
    assert code == 3 and "1,048,576" in unavailable(document)


def test_an_answer_of_exactly_1_mib_is_read(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path
) -> None:
    # Padded with insignificant whitespace: RetentionResult has no member to pad with.
    head = b'{"erased": 1'
    body = head + b" " * (remote_exchange.MAX_RESPONSE_BYTES - len(head) - 1) + b"}"
    assert len(body) == remote_exchange.MAX_RESPONSE_BYTES
    service.answer(200, body, chunked=True)
    code, document = report(
        capsys, *remote_args(service, token_file), "retain", "--before", "2025-01-01T00:00:00Z"
    )
    assert code == 0 and document["erased"] == 1


@pytest.mark.parametrize(
    ("body", "media_type", "message"),
    [
        (b"{not json", "application/json", "not strict JSON"),
        (b'{"erased": 1, "erased": 2}', "application/json", "not strict JSON"),
        (b'{"n": NaN}', "application/json", "not strict JSON"),
        (b"\xff\xfe{}", "application/json", "not strict JSON"),
        (b'{"erased": 1}', "text/html", "not a valid HTTP answer"),
        (b"[1, 2]", "application/json", "documented shape"),
    ],
)
def test_an_invalid_success_answer_is_service_unavailable(
    capsys: pytest.CaptureFixture[str],
    service: FakeService,
    token_file: Path,
    body: bytes,
    media_type: str,
    message: str,
) -> None:
    service.answer(200, body, media_type=media_type)
    code, document = report(
        capsys, *remote_args(service, token_file), "retain", "--before", "2025-01-01T00:00:00Z"
    )
    assert code == 3 and message in unavailable(document)


@pytest.mark.parametrize(
    ("argv", "answer"),
    [
        (("list",), {"runs": "nope", "nextCursor": None}),
        (("list",), {"runs": [], "nextCursor": 7}),
        (("inspect", "--run", RUN_ID), {"steps": []}),
        (("reconcile", "--run", RUN_ID, "--reason", "I"), {"result": "settled"}),
        # A merged result may not replace an envelope member nor use a non-camelCase name.
        (("workflow",), {"workflowId": "w", "status": "hijacked"}),
        (("doctor",), {"Weird-Name": 1}),
    ],
)
def test_an_answer_without_the_documented_shape_is_service_unavailable(
    capsys: pytest.CaptureFixture[str],
    service: FakeService,
    token_file: Path,
    argv: tuple[str, ...],
    answer: dict[str, Any],
) -> None:
    service.answer(200, answer)
    code, document = report(capsys, *remote_args(service, token_file), *argv)
    assert code == 3 and "documented shape" in unavailable(document)


def test_a_redirect_is_never_followed(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path
) -> None:
    service.answer(302, b"", headers={"Location": f"{service.url}/elsewhere"})
    code, document = report(capsys, *remote_args(service, token_file), "doctor")
    assert code == 3 and "redirect" in unavailable(document)
    assert [seen.path for seen in service.seen] == ["/v1/doctor"]


def test_an_answer_that_repeats_the_token_never_reaches_the_output(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path
) -> None:
    for status, body, media_type in (
        (200, json.dumps({**WORKFLOW_INFO, "title": TOKEN}).encode(), "application/json"),
        (400, problem(400, "coordinator.request.invalid", detail=f"bad {TOKEN}"), PROBLEM),
    ):
        service.answer(status, body, media_type=media_type)
        code, document = report(capsys, *remote_args(service, token_file), "workflow")
        assert code == 3 and "not a valid HTTP answer" in unavailable(document)
        code, _, _ = run(capsys, *remote_args(service, token_file), "workflow")  # text mode
        assert code == 3


def test_proxies_from_the_environment_are_not_used(
    capsys: pytest.CaptureFixture[str],
    service: FakeService,
    token_file: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "all_proxy"):
        monkeypatch.setenv(name, dead)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    service.answer(200, DOCTOR)
    code, _ = report(capsys, *remote_args(service, token_file), "doctor")
    assert code == 0 and len(service.seen) == 1


# --------------------------------------------------------------------------------------------
# --url, --token-file and the command inputs are checked before anything is sent.


@pytest.mark.parametrize(
    ("text", "origin"),
    [
        ("https://coordinator.example.org", "https://coordinator.example.org"),
        ("https://Coordinator.Example.org:8443/", "https://coordinator.example.org:8443"),
        ("HTTPS://h", "https://h"),
        ("http://127.0.0.1:8108", "http://127.0.0.1:8108"),
        ("http://127.1.2.3", "http://127.1.2.3"),
        ("http://[::1]:8108/", "http://[::1]:8108"),
        ("http://localhost:8108", "http://localhost:8108"),
        ("https://[2001:db8::1]", "https://[2001:db8::1]"),
        ("https://10.0.0.1:443", "https://10.0.0.1:443"),
    ],
)
def test_acceptable_origins(text: str, origin: str) -> None:
    assert remote_inputs.parse_origin(text) == origin


BAD_URLS = [
    "http://svc.example.net",  # plain http off loopback
    "http://10.0.0.1:8108",
    "http://0.0.0.0:8108",
    "http://[::ffff:127.0.0.1]:8108",
    f"https://ops:{CANARY}@svc.example.net",  # user info
    f"https://{CANARY}@svc.example.net",
    "https://svc.example.net/v1",  # a path
    "https://svc.example.net//",
    "https://svc.example.net?x=1",  # a query
    "https://svc.example.net?",
    "https://svc.example.net#f",  # a fragment
    "https://svc.example.net/#",
    "ftp://svc.example.net",
    "svc.example.net",
    "https://",
    "https://:8443",
    "https://h:",
    "https://h:0",
    "https://h:65536",
    "https://h:+1",
    "https://h h",
    "https://h\\@evil",
    "https://[::1",
    "https://[nothex]",
    "https://ex_ample.org",
    "https://-bad.org",
    "https://bücher.example",
    "",
]


@pytest.mark.parametrize("url", BAD_URLS)
def test_an_unacceptable_url_is_command_usage_and_never_echoed(
    capsys: pytest.CaptureFixture[str], token_file: Path, url: str
) -> None:
    assert remote_inputs.parse_origin(url) is None
    code, document = report(capsys, "--url", url, "--token-file", str(token_file), "workflow")
    assert code == 2 and document["status"] == "usage-error"
    assert codes(document) == ["coordinator.command.usage"]
    if "svc." in url or CANARY in url:
        assert url not in json.dumps(document)


def test_missing_url_and_token_file_are_both_reported(
    capsys: pytest.CaptureFixture[str], service: FakeService
) -> None:
    code, document = report(capsys, "doctor")
    assert code == 2
    assert codes(document) == [
        "coordinator.command.service-required",
        "coordinator.command.token-file-required",
    ]
    code, document = report(capsys, "--url", service.url, "doctor")
    assert code == 2 and codes(document) == ["coordinator.command.token-file-required"]
    code, document = report(capsys, "--token-file", "/tmp/t", "doctor")
    assert code == 2 and codes(document) == ["coordinator.command.service-required"]
    assert service.seen == []


def test_a_relative_token_file_path_is_resolved_against_the_current_directory(
    capsys: pytest.CaptureFixture[str],
    service: FakeService,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 09 §1 names the token file by an absolute path: a relative one is joined to the current
    # directory before it is read (tests/unit/cli/test_remote_watch.py reads one).
    monkeypatch.chdir(tmp_path)
    code, document = report(capsys, "--url", service.url, "--token-file", "token", "doctor")
    assert code == 1 and codes(document) == ["coordinator.command.token-invalid"]
    assert document["diagnostics"][0]["source"]["file"] == str(tmp_path / "token")
    assert service.seen == []


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\n",
        (TOKEN + "\n\n").encode(),  # only one trailing line feed
        (TOKEN + "\r\n").encode(),
        (" " + TOKEN).encode(),
        (TOKEN + " " + TOKEN).encode(),  # two tokens
        (TOKEN + "\n" + TOKEN).encode(),
        f"{CANARY}.{CANARY}".encode(),  # two segments
        f"{CANARY}.{CANARY}.{CANARY}.{CANARY}.{CANARY}".encode(),  # JWE-like
        f"{CANARY}..{CANARY}".encode(),
        f"{CANARY}=.{CANARY}.{CANARY}".encode(),  # padding is not base64url
        ("a" * 16_381 + "." + CANARY + "." + "b").encode(),  # 16,384 + canary bytes
        b"\xff" + TOKEN.encode(),
    ],
)
def test_a_malformed_token_file_is_token_invalid_and_never_echoed(
    capsys: pytest.CaptureFixture[str], service: FakeService, tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "token"
    path.write_bytes(content)
    code, document = report(capsys, "--url", service.url, "--token-file", str(path), "doctor")
    assert code == 1 and document["status"] == "domain-refusal"
    assert codes(document) == ["coordinator.command.token-invalid"]
    assert service.seen == []


def test_an_unreadable_token_file_is_token_invalid(
    capsys: pytest.CaptureFixture[str], service: FakeService, tmp_path: Path
) -> None:
    for path in (tmp_path / "absent", tmp_path):
        code, document = report(capsys, "--url", service.url, "--token-file", str(path), "doctor")
        assert code == 1 and codes(document) == ["coordinator.command.token-invalid"]
    assert service.seen == []


@pytest.mark.parametrize("trailer", ["", "\n"])
def test_a_token_of_16384_bytes_is_sent_without_its_line_feed(
    capsys: pytest.CaptureFixture[str], service: FakeService, tmp_path: Path, trailer: str
) -> None:
    token = "a" * (16_384 - 2 - len(CANARY) - 1) + "." + CANARY + ".b"
    assert len(token) == 16_384
    path = tmp_path / "token"
    path.write_text(token + trailer, encoding="ascii")
    service.answer(200, DOCTOR)
    code, _ = report(capsys, "--url", service.url, "--token-file", str(path), "doctor")
    assert code == 0
    assert service.seen[0].headers["authorization"] == f"Bearer {token}"


@pytest.mark.parametrize(
    "reason",
    ["", "x" * 257, "é" * 129, "INC\x01", "INC\x7f", "INC\u0085", "line\nbreak", "tab\there"],
)
def test_a_malformed_reason_is_input_invalid_before_any_request(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path, reason: str
) -> None:
    for argv in (
        ("cancel", "--run", RUN_ID, "--reason", reason),
        ("restore-hold", "--reason", reason),
        ("release-admission-hold", "--reason", reason),
    ):
        code, document = report(capsys, *remote_args(service, token_file), *argv)
        assert code == 1 and codes(document) == ["coordinator.command.input-invalid"]
    assert service.seen == []


@pytest.mark.parametrize("reason", ["x" * 256, "é" * 128, "INC-1042 (ticket)"])
def test_a_reason_of_up_to_256_bytes_is_sent(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path, reason: str
) -> None:
    service.answer(200, HOLD_STATE)
    code, _ = report(capsys, *remote_args(service, token_file), "restore-hold", "--reason", reason)
    assert code == 0 and json.loads(service.seen[0].body) == {"reason": reason}


def test_a_malformed_run_id_is_input_invalid_before_any_request(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path
) -> None:
    for run_id in ("../doctor", "not-a-uuid", RUN_ID + "0", ""):
        code, document = report(
            capsys, *remote_args(service, token_file), "status", "--run", run_id
        )
        assert code == 1 and codes(document) == ["coordinator.command.input-invalid"]
    assert service.seen == []


@pytest.mark.parametrize(
    "before",
    [
        "2025-01-01",
        "2025-13-01T00:00:00Z",
        "2025-01-01T00:00:00",
        "yesterday",
        "2025-02-30T00:00:00Z",
    ],
)
def test_a_malformed_before_is_input_invalid(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path, before: str
) -> None:
    code, document = report(capsys, *remote_args(service, token_file), "retain", "--before", before)
    assert code == 1 and codes(document) == ["coordinator.command.input-invalid"]
    assert service.seen == []


@pytest.mark.parametrize(
    "argv",
    [
        ("list", "--limit", "0"),
        ("list", "--limit", "101"),
        ("list", "--limit", CANARY),
        ("list", "--status", CANARY),
        ("retain", "--before", "2025-01-01T00:00:00Z", "--limit", "1000"),
        ("start", "--input"),  # an option without its value
        ("cancel", "--run", RUN_ID),
        ("status",),
    ],
)
def test_unparsable_remote_command_lines_are_cli_usage(
    capsys: pytest.CaptureFixture[str],
    service: FakeService,
    token_file: Path,
    argv: tuple[str, ...],
) -> None:
    code, document = report(capsys, *remote_args(service, token_file), *argv)
    assert code == 2 and document["command"] == "usage"
    assert codes(document) == ["coordinator.cli.usage"]
    assert service.seen == []


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"x" * 65_537, "coordinator.command.input-invalid"),
        (b"{not json", "coordinator.command.input-invalid"),
        (b'{"a": 1, "a": 2}', "coordinator.command.input-invalid"),
        (b'{"big": 1e400}', "coordinator.command.input-invalid"),
        (b"\xef\xbb\xbf{}", "coordinator.command.input-invalid"),
        (None, "coordinator.command.input-unavailable"),
    ],
)
def test_a_bad_input_file_is_refused_before_any_request(
    capsys: pytest.CaptureFixture[str],
    service: FakeService,
    token_file: Path,
    start_files: tuple[Path, Path],
    content: bytes | None,
    expected: str,
) -> None:
    payload, key = start_files
    if content is None:
        payload.unlink()
    else:
        payload.write_bytes(content)
    code, document = report(capsys, *remote_args(service, token_file), *start_argv(payload, key))
    assert code == (3 if content is None else 1)
    assert codes(document) == [expected]
    assert service.seen == []


def test_an_input_of_65536_bytes_is_sent(
    capsys: pytest.CaptureFixture[str],
    service: FakeService,
    token_file: Path,
    start_files: tuple[Path, Path],
) -> None:
    payload, key = start_files
    value = {name: name * 16_000 for name in "abcd"}
    text = json.dumps(value)
    payload.write_text(text + " " * (65_536 - len(text)), encoding="ascii")
    assert payload.stat().st_size == 65_536
    service.answer(201, RUN_STATUS)
    code, _ = report(capsys, *remote_args(service, token_file), *start_argv(payload, key))
    assert code == 0 and json.loads(service.seen[0].body)["input"] == value


@pytest.mark.parametrize(
    "content",
    [b"", b"\n", b"k" * 257, b"k" * 256 + b"\n\n", b"key with space", b"key\r\n", "kéy".encode()],
)
def test_a_bad_key_file_is_input_invalid(
    capsys: pytest.CaptureFixture[str],
    service: FakeService,
    token_file: Path,
    start_files: tuple[Path, Path],
    content: bytes,
) -> None:
    payload, key = start_files
    key.write_bytes(content)
    code, document = report(capsys, *remote_args(service, token_file), *start_argv(payload, key))
    assert code == 1 and codes(document) == ["coordinator.command.input-invalid"]
    assert service.seen == []


def test_a_key_of_256_characters_with_a_line_feed_is_sent(
    capsys: pytest.CaptureFixture[str],
    service: FakeService,
    token_file: Path,
    start_files: tuple[Path, Path],
) -> None:
    payload, key = start_files
    key.write_bytes(b"~" * 256 + b"\n")
    service.answer(201, RUN_STATUS)
    code, _ = report(capsys, *remote_args(service, token_file), *start_argv(payload, key))
    assert code == 0 and service.seen[0].headers["idempotency-key"] == "~" * 256


def test_independent_local_problems_are_all_reported(
    capsys: pytest.CaptureFixture[str],
    service: FakeService,
    tmp_path: Path,
    start_files: tuple[Path, Path],
) -> None:
    payload, key = start_files
    payload.write_bytes(b"{")
    key.write_bytes(b"")
    bad_token = tmp_path / "bad-token"
    bad_token.write_text(CANARY, encoding="ascii")
    code, document = report(
        capsys, "--url", service.url, "--token-file", str(bad_token), *start_argv(payload, key)
    )
    assert code == 1
    assert codes(document) == [
        "coordinator.command.token-invalid",
        "coordinator.command.input-invalid",
        "coordinator.command.input-invalid",
    ]
    assert service.seen == []


# --------------------------------------------------------------------------------------------
# Text mode.


def test_status_text_is_a_readable_summary(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path
) -> None:
    service.answer(200, RUN_STATUS)
    code, out, err = run(capsys, *remote_args(service, token_file), "status", "--run", RUN_ID)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == f"Run:        {RUN_ID}"
    assert "Status:     running" in lines
    assert "Step:       await-review" in lines
    assert "Next due:   2025-01-01T11:00:00.000Z" in lines
    assert "Flags:      uncertain effect" in lines


def test_start_text_names_the_admission(
    capsys: pytest.CaptureFixture[str],
    service: FakeService,
    token_file: Path,
    start_files: tuple[Path, Path],
) -> None:
    service.answer(200, RUN_STATUS)
    code, out, _ = run(capsys, *remote_args(service, token_file), *start_argv(*start_files))
    assert code == 0 and out.splitlines()[0] == f"Replayed run {RUN_ID}"


def test_inspect_text_shows_effects_wait_timing_and_observations(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path
) -> None:
    service.answer(200, INSPECTION)
    code, out, _ = run(capsys, *remote_args(service, token_file), "inspect", "--run", RUN_ID)
    assert code == 0
    assert "Effects:    1 accepted, 1 unknown (2 in all)" in out
    assert "messaging.send/v1 unknown" in out
    assert "Wait:       await-review waiting, started 2025-01-01T10:00:01.000Z" in out
    assert "times out 2025-01-08T10:00:01.000Z" in out
    assert "every 900 s; 4 observations" in out
    assert "Recovery:   retry-same blocked (not-uncertain); reconcile allowed" in out
    assert "request-review" in out and "Steps:" in out
    timeline = out[out.index("Attempts (newest first):") :].splitlines()
    assert timeline[1] == "  request-review: 2 ended"
    assert timeline[2].split() == [
        "gen", "1", "#2", "delivered", "started", "2025-01-01T10:00:00.500Z",
        "ended", "2025-01-01T10:00:01.000Z",
    ]  # fmt: skip
    assert timeline[3].split()[3:4] + timeline[3].split()[-1:] == [
        "retry",
        "transport-unavailable",
    ]
    assert len(timeline) == 4  # a step without ended attempts has no timeline


def test_inspect_text_bounds_each_steps_timeline_and_names_the_command_for_the_rest(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path
) -> None:
    observation = {
        "generation": 1,
        "startedAt": None,
        "endedAt": "2025-01-01T10:15:00.000Z",
        "outcome": "pending",
        "failureCode": None,
    }
    wait = {
        **INSPECTION["steps"][1],
        "attempts": [{**observation, "attempt": n} for n in range(10, 0, -1)],
        "attemptCount": 42,
    }
    service.answer(200, {**INSPECTION, "steps": [INSPECTION["steps"][0], wait]})
    code, out, _ = run(capsys, *remote_args(service, token_file), "inspect", "--run", RUN_ID)
    assert code == 0
    timeline = out[out.index("  await-review: 42 ended") :].splitlines()
    assert [line.split()[1] for line in timeline[1:4]] == ["1", "1", "1"]
    assert [line.split()[2] for line in timeline[1:4]] == ["#10", "#9", "#8"]
    assert "started -" in timeline[1]
    assert timeline[4] == (
        f"    … 39 more: coordinatorctl attempts --run {RUN_ID} --step await-review"
    )
    assert len(timeline) == 5


def test_attempts_text_is_a_table_of_the_page_with_its_cursor(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path
) -> None:
    service.answer(200, ATTEMPT_PAGE)
    argv = ("attempts", "--run", RUN_ID, "--step", "request-review")
    code, out, _ = run(capsys, *remote_args(service, token_file), *argv)
    assert code == 0
    lines = out.splitlines()
    assert lines[:2] == [f"Run:        {RUN_ID}", "Step:       request-review"]
    assert lines[2].split() == ["GEN", "ATTEMPT", "OUTCOME", "STARTED", "ENDED", "FAILURE"]
    assert lines[3].split() == [
        "1", "2", "delivered", "2025-01-01T10:00:00.500Z", "2025-01-01T10:00:01.000Z", "-"
    ]  # fmt: skip
    assert lines[4].split()[2::3] == ["retry", "transport-unavailable"]
    assert lines[5] == "Next cursor: next.page"
    service.answer(200, {**ATTEMPT_PAGE, "attempts": [], "nextCursor": None})
    code, out, _ = run(capsys, *remote_args(service, token_file), *argv)
    assert (code, out.splitlines()[2:]) == (0, ["No ended attempts."])


@pytest.mark.parametrize("step", ["Request", "a/b", "../inspect", "x" * 65, "a?b"])
def test_attempts_refuses_a_step_that_is_no_step_id_before_sending(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path, step: str
) -> None:
    argv = ("attempts", "--run", RUN_ID, "--step", step)
    code, document = report(capsys, *remote_args(service, token_file), *argv)
    assert (code, codes(document)) == (1, ["coordinator.command.input-invalid"])
    assert service.seen == []
    assert step not in json.dumps(document)


def test_attempts_of_a_step_the_run_lacks_is_the_services_refusal(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path
) -> None:
    service.answer(404, problem(404, "coordinator.command.step-absent"), media_type=PROBLEM)
    argv = ("attempts", "--run", RUN_ID, "--step", "no-such-step")
    code, document = report(capsys, *remote_args(service, token_file), *argv)
    assert (code, codes(document)) == (1, ["coordinator.command.step-absent"])


def test_reconcile_text_leads_with_the_result(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path
) -> None:
    service.answer(200, {"result": "unresolved", "inspection": INSPECTION})
    code, out, _ = run(
        capsys, *remote_args(service, token_file), "reconcile", "--run", RUN_ID, "--reason", "I"
    )
    assert code == 0 and out.splitlines()[0] == "Result:     unresolved"


def test_list_text_is_a_plain_aligned_table_off_a_terminal(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path
) -> None:
    other = {**RUN_STATUS, "runId": "1" * 8 + RUN_ID[8:], "status": "finished", "uncertain": False}
    other["outcome"] = "notice-sent"
    service.answer(200, {"runs": [RUN_STATUS, other], "nextCursor": "c.1"})
    code, out, _ = run(capsys, *remote_args(service, token_file), "list")
    assert code == 0 and "\x1b" not in out
    lines = out.splitlines()
    assert lines[0].split() == [
        "RUN", "WORKFLOW", "STATUS", "STEP", "OUTCOME", "FAILURE", "ADMITTED"
    ]  # fmt: skip
    assert lines[1].split()[:3] == [RUN_ID, "reviewed-notice", "running"]
    assert lines[2].split()[4:6] == ["notice-sent", "-"]
    column = lines[0].index("STATUS")
    assert lines[1][column:].startswith("running") and lines[2][column:].startswith("finished")
    assert lines[-1] == "Next cursor: c.1"


def test_list_text_is_a_rich_table_on_a_terminal(
    capsys: pytest.CaptureFixture[str],
    service: FakeService,
    token_file: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service.answer(200, {"runs": [RUN_STATUS], "nextCursor": None})
    import sys

    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    code, out, _ = run(capsys, *remote_args(service, token_file), "list")
    assert code == 0 and "\x1b[" in out and "RUN" in out and RUN_ID in out


def test_list_text_of_an_empty_page(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path
) -> None:
    service.answer(200, {"runs": [], "nextCursor": None})
    code, out, _ = run(capsys, *remote_args(service, token_file), "list")
    assert code == 0 and out == "No runs.\n"


def test_text_mode_sanitises_service_strings(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path
) -> None:
    # The cursor is free text (RunList.nextCursor); the ids have patterns the model holds.
    service.answer(200, {"runs": [RUN_STATUS], "nextCursor": "evil\x1b[2J\nc\u0085"})
    code, out, _ = run(capsys, *remote_args(service, token_file), "list")
    assert code == 0 and "\x1b" not in out and "\u0085" not in out
    assert out.splitlines()[-1] == "Next cursor: evil\\u{1B}[2J\\u{0A}c\\u{85}"


def test_a_step_id_with_control_characters_is_not_the_documented_shape(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path
) -> None:
    service.answer(200, {**RUN_STATUS, "step": "evil\x1b[2J\nstep"})
    code, out, err = run(capsys, *remote_args(service, token_file), "status", "--run", RUN_ID)
    assert code == 3 and out == "" and "\x1b" not in err
    assert "documented shape" in err


def test_other_commands_print_indented_json_in_text_mode(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path
) -> None:
    service.answer(200, HOLD_STATE)
    code, out, _ = run(capsys, *remote_args(service, token_file), "restore-hold", "--reason", "I")
    assert code == 0 and json.loads(out) == HOLD_STATE and out.startswith("{\n  ")


def test_a_failure_in_text_mode_goes_to_stderr_only(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path
) -> None:
    service.answer(404, problem(404, "coordinator.command.run-absent"), media_type=PROBLEM)
    code, out, err = run(capsys, *remote_args(service, token_file), "status", "--run", RUN_ID)
    assert code == 1 and out == ""
    assert err.splitlines()[0] == "error[coordinator.command.run-absent] /"


def test_an_inspection_with_malformed_members_is_not_the_documented_shape(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path
) -> None:
    # Text mode reads the typed model: an answer RunInspection refuses never reaches it.
    service.answer(200, {"run": {"step": 7}, "steps": 7, "effects": "x", "recovery": []})
    code, out, err = run(capsys, *remote_args(service, token_file), "inspect", "--run", RUN_ID)
    assert code == 3 and out == "" and "documented shape" in err


def test_https_to_a_plain_listener_is_service_unavailable(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path
) -> None:
    url = f"https://127.0.0.1:{service.port}"
    code, document = report(capsys, "--url", url, "--token-file", str(token_file), "doctor")
    assert code == 3 and codes(document) == ["coordinator.command.service-unavailable"]


def test_a_known_problem_code_without_suggested_action_gets_the_catalogue_hint(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path
) -> None:
    from coordinator_core.errors import entry

    body = problem(403, "coordinator.access.denied", suggestedAction=None)
    service.answer(403, body, media_type=PROBLEM)
    code, document = report(capsys, *remote_args(service, token_file), "doctor")
    assert code == 1
    assert document["diagnostics"][0]["suggestedAction"] == entry("coordinator.access.denied").hint


# --------------------------------------------------------------------------------------------
# The typed boundary (remote/models.py): request bodies are the generated models' dumps and
# answers are read through the models of spec/openapi.yaml.

# The request body model of each command that sends one (spec/openapi.yaml).
REQUEST_MODELS: dict[str, type[BaseModel]] = {
    "start": api.StartRunRequest,
    "cancel": api.ReasonRequest,
    "retry-same": api.ReasonRequest,
    "reconcile": api.ReasonRequest,
    "restore-hold": api.ReasonRequest,
    "release-restore-hold": api.ReasonRequest,
    "release-admission-hold": api.ReleaseAdmissionHoldRequest,
    "retain": api.RetentionRequest,
}


def wire_names(model: type[BaseModel]) -> set[str]:
    return {field.alias or name for name, field in model.model_fields.items()}


def test_every_request_body_is_its_model_with_exactly_its_members(
    capsys: pytest.CaptureFixture[str],
    service: FakeService,
    token_file: Path,
    start_files: tuple[Path, Path],
) -> None:
    argvs = [case.argv for case in CASES.values() if case.body is not None]
    argvs.append(tuple(start_argv(*start_files)))
    assert {argv[0] for argv in argvs} == set(REQUEST_MODELS)
    for argv in argvs:
        service.seen = []
        service.answer(200, RUN_STATUS)
        report(capsys, *remote_args(service, token_file), *argv)
        [seen] = service.seen
        model = REQUEST_MODELS[argv[0]]
        model.model_validate_json(seen.body, strict=True, by_alias=True, by_name=False)
        assert set(json.loads(seen.body)) == wire_names(model), argv


def test_every_success_model_is_the_schema_its_route_answers() -> None:
    document = yaml.safe_load((REPO / "spec" / "openapi.yaml").read_text(encoding="utf-8"))
    responses = document["components"]["responses"]
    routes = {case.argv[0]: (case.method, case.path) for case in CASES.values()}
    routes["start"] = ("POST", "/v1/runs")
    for command, (method, path) in sorted(routes.items()):
        [template] = [
            t
            for t in document["paths"]
            if re.fullmatch(re.sub(r"\\\{[a-z]+\\\}", "[^/]+", re.escape(t)), path)
        ]
        answer = document["paths"][template][method.lower()]["responses"]["200"]
        answer = responses[answer["$ref"].rsplit("/", 1)[1]] if "$ref" in answer else answer
        schema = answer["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
        assert remote_outcome.SPECS[command].model is getattr(api, schema), command


def test_no_merged_member_can_replace_an_envelope_member() -> None:
    # The merged bodies' members are the report's result members: the models fix their names.
    from coordinatorctl.report import RESERVED_MEMBERS

    assert remote_envelope_names() == RESERVED_MEMBERS
    for command, spec in remote_outcome.SPECS.items():
        if spec.shape == "merged":
            names = wire_names(spec.model)
            assert not names & RESERVED_MEMBERS, command
            assert all(re.fullmatch(r"[a-z][A-Za-z0-9]*", name) for name in names), command


def replaced(value: dict[str, Any], path: str, new: Any) -> dict[str, Any]:
    """A deep copy of `value` with the member at the dotted `path` set to `new` (or removed)."""
    copy = json.loads(json.dumps(value))
    *parents, last = path.split(".")
    target = copy
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    if new is REMOVED:
        del target[last]
    else:
        target[last] = new
    return copy


REMOVED = object()

MALFORMED_ANSWERS = {
    "extra member": (("status", "--run", RUN_ID), {**RUN_STATUS, "note": "x"}),
    "snake_case member": (
        ("restore-hold", "--reason", "I"),
        {"restore_hold": True, "admissionsHold": True, "restoreReview": 3},
    ),
    "missing member": (("workflow",), replaced(WORKFLOW_INFO, "revision", REMOVED)),
    "missing cursor": (("list",), {"runs": []}),
    "unknown status word": (("status", "--run", RUN_ID), {**RUN_STATUS, "status": "paused"}),
    "unknown failure code": (
        ("status", "--run", RUN_ID),
        {**RUN_STATUS, "failureCode": "it-broke"},
    ),
    "unknown step state": (
        ("inspect", "--run", RUN_ID),
        replaced(INSPECTION, "steps.0.state", "done"),
    ),
    "unknown block reason": (
        ("inspect", "--run", RUN_ID),
        replaced(INSPECTION, "recovery.retryBlockedBy", "moon-phase"),
    ),
    "unknown reconcile result": (
        ("reconcile", "--run", RUN_ID, "--reason", "I"),
        {"result": "maybe", "inspection": INSPECTION},
    ),
    "unknown store": (("doctor",), replaced(DOCTOR, "state.store", "oracle")),
    "impossible date": (
        ("status", "--run", RUN_ID),
        {**RUN_STATUS, "admittedAt": "2025-13-01T10:00:00.000Z"},
    ),
    "timestamp without offset": (
        ("status", "--run", RUN_ID),
        {**RUN_STATUS, "deadlineAt": "2025-02-01T10:00:00.000"},
    ),
    "timestamp as a word": (
        ("inspect", "--run", RUN_ID),
        replaced(INSPECTION, "steps.1.wait.timeoutAt", "next week"),
    ),
    "timestamp as a number": (
        ("doctor",),
        replaced(DOCTOR, "state.oldestDueAt", 1_735_725_600),
    ),
    "run id not a UUID": (("status", "--run", RUN_ID), {**RUN_STATUS, "runId": "run-1"}),
    "boolean as a string": (("status", "--run", RUN_ID), {**RUN_STATUS, "uncertain": "true"}),
    "boolean as a number": (
        ("release-admission-hold", "--reason", "I"),
        {**HOLD_STATE, "restoreHold": 1},
    ),
    "count as a string": (("retain", "--before", "2025-01-01T00:00:00Z"), {"erased": "2"}),
    "count as a fraction": (("retain", "--before", "2025-01-01T00:00:00Z"), {"erased": 2.5}),
    "count as a boolean": (("retain", "--before", "2025-01-01T00:00:00Z"), {"erased": True}),
    "negative count": (
        ("release-restore-hold", "--reason", "I"),
        {**HOLD_STATE, "restoreReview": -1},
    ),
    "version as a number": (
        ("list",),
        {"runs": [{**RUN_STATUS, "workflowVersion": 1}], "nextCursor": None},
    ),
    "digest of another form": (("workflow",), {**WORKFLOW_INFO, "revision": "sha1:abc"}),
}


@pytest.mark.parametrize("case_id", sorted(MALFORMED_ANSWERS))
def test_an_answer_its_model_refuses_is_not_the_documented_shape(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path, case_id: str
) -> None:
    argv, answer = MALFORMED_ANSWERS[case_id]
    service.answer(200, answer)
    code, document = report(capsys, *remote_args(service, token_file), *argv)
    assert code == 3 and "documented shape" in unavailable(document)
    assert set(document) == remote_envelope_names()  # nothing of the answer reaches the result


def test_the_result_keeps_the_body_as_received_and_text_shows_the_service_form(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path
) -> None:
    # Valid RFC 3339 instants in another form than the service's: the JSON result keeps them,
    # text mode shows them as `YYYY-MM-DDTHH:MM:SS.mmmZ` in UTC.
    answer = {
        **RUN_STATUS,
        "admittedAt": "2025-01-01T11:00:00+01:00",
        "nextDueAt": "2025-01-01T11:00:00.123456Z",
        "runId": RUN_ID.upper(),
    }
    service.answer(200, answer)
    code, document = report(capsys, *remote_args(service, token_file), "status", "--run", RUN_ID)
    assert code == 0 and document["run"] == answer
    code, out, _ = run(capsys, *remote_args(service, token_file), "status", "--run", RUN_ID)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"Run:        {RUN_ID}"
    assert "Admitted:   2025-01-01T10:00:00.000Z" in lines
    assert "Deadline:   2025-02-01T10:00:00.000Z" in lines
    assert "Next due:   2025-01-01T11:00:00.123Z" in lines


def test_run_text_shows_the_optional_members_of_a_settled_event_run(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path
) -> None:
    settled = {
        **RUN_STATUS,
        "origin": "event",
        "trigger": "application-submitted",
        "status": "failed",
        "nextDueAt": None,
        "completedAt": "2025-01-02T10:00:00.000Z",
        "failureCode": "deadline-reached",
        "uncertain": False,
        "restoreReview": True,
        "output": {"notice": "sent"},
    }
    service.answer(200, settled)
    code, out, _ = run(capsys, *remote_args(service, token_file), "status", "--run", RUN_ID)
    assert code == 0
    lines = out.splitlines()
    assert "Next due:   -" not in lines and not any(line.startswith("Next due") for line in lines)
    assert "Completed:  2025-01-02T10:00:00.000Z" in lines
    assert "Failure:    deadline-reached" in lines
    assert "Trigger:    application-submitted" in lines
    assert "Flags:      restore review" in lines
    assert 'Output:     {"notice":"sent"}' in lines
    assert lines[-1] == f"Next:       {remote_text.REVIEW_NEXT}"


def test_inspect_text_shows_a_wait_until(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path
) -> None:
    inspection = replaced(INSPECTION, "steps.1.wait", {"until": "2025-01-03T00:00:00.000Z"})
    inspection = replaced(inspection, "steps.1.type", "wait-until")
    service.answer(200, inspection)
    code, out, _ = run(capsys, *remote_args(service, token_file), "inspect", "--run", RUN_ID)
    assert code == 0 and "Wait:       await-review until 2025-01-03T00:00:00.000Z" in out


@pytest.mark.parametrize("reason", sorted(api.BlockReason))
def test_every_block_reason_word_is_reported(
    capsys: pytest.CaptureFixture[str],
    service: FakeService,
    token_file: Path,
    reason: api.BlockReason,
) -> None:
    body = problem(409, "coordinator.command.reconcile-refused", reason=reason.value)
    service.answer(409, body, media_type=PROBLEM)
    code, document = report(
        capsys, *remote_args(service, token_file), "reconcile", "--run", RUN_ID, "--reason", "I"
    )
    assert code == 1 and document["blockedBy"] == reason.value


@pytest.mark.parametrize("reason", ["moon-phase", 7, None])
def test_a_problem_with_an_unknown_block_reason_keeps_its_code_and_drops_the_reason(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path, reason: object
) -> None:
    body = problem(409, "coordinator.command.retry-refused", reason=reason)
    service.answer(409, body, media_type=PROBLEM)
    code, document = report(
        capsys, *remote_args(service, token_file), "retry-same", "--run", RUN_ID, "--reason", "I"
    )
    assert code == 1 and codes(document) == ["coordinator.command.retry-refused"]
    assert "blockedBy" not in document
    assert document["diagnostics"][0]["message"] == "A fixed sentence for this code."


@pytest.mark.parametrize(
    "body",
    [
        problem(403, "coordinator.access.denied", note="x"),  # a member Problem does not have
        problem(403, "coordinator.access.denied", type="not a uri"),
        problem(403, "coordinator.access.denied", title=""),
        problem(403, "coordinator.access.denied", detail=""),
        problem(403, "coordinator.access.denied", detail=7),
        json.dumps(
            {**json.loads(problem(403, "coordinator.access.denied")), "status": "403"}
        ).encode(),
        problem(403, "coordinator.access.denied", suggestedAction=7),
        problem(403, "coordinator.access.denied", suggested_action="x"),
        json.dumps(
            replaced(
                json.loads(problem(403, "coordinator.access.denied")), "suggestedAction", REMOVED
            )
        ).encode(),
        problem(403, "coordinator." + "a" * 60 + "." + "b" * 60),  # over 128 characters
        problem(403, "coordinator.access.denied", reason="moon-phase", note="x"),
    ],
)
def test_a_problem_its_model_refuses_is_service_refused(
    capsys: pytest.CaptureFixture[str], service: FakeService, token_file: Path, body: bytes
) -> None:
    service.answer(403, body, media_type=PROBLEM)
    code, document = report(capsys, *remote_args(service, token_file), "workflow")
    assert code == 1 and codes(document) == ["coordinator.command.service-refused"]


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--workflow", "Reviewed-Notice", "--workflow is not a workflow id"),
        ("--workflow", "w" * 65, "--workflow is not a workflow id"),
        ("--revision", "sha256:" + "A" * 64, "--revision is not a revision"),
        ("--revision", "rev-one", "--revision is not a revision"),
    ],
)
def test_a_start_id_its_model_refuses_is_input_invalid_before_any_request(
    capsys: pytest.CaptureFixture[str],
    service: FakeService,
    token_file: Path,
    start_files: tuple[Path, Path],
    flag: str,
    value: str,
    message: str,
) -> None:
    argv = start_argv(*start_files)
    argv[argv.index(flag) + 1] = value
    code, document = report(capsys, *remote_args(service, token_file), *argv)
    assert code == 1 and codes(document) == ["coordinator.command.input-invalid"]
    assert document["diagnostics"][0]["message"].startswith(message)
    assert value not in json.dumps(document)
    assert service.seen == []


def test_refused_ids_are_reported_with_the_other_local_problems_once_each(
    capsys: pytest.CaptureFixture[str],
    service: FakeService,
    token_file: Path,
    start_files: tuple[Path, Path],
) -> None:
    payload, key = start_files
    payload.write_bytes(b"{")
    argv = start_argv(payload, key)
    argv[argv.index("--workflow") + 1] = "Bad"
    argv[argv.index("--revision") + 1] = "bad\x01"  # the text check's diagnostic, not a second
    code, document = report(capsys, *remote_args(service, token_file), *argv)
    assert code == 1
    messages = [d["message"] for d in document["diagnostics"]]
    assert len(messages) == 3
    assert messages[0].startswith("--revision must be")
    assert messages[1].startswith("The --input file")
    assert messages[2].startswith("--workflow is not a workflow id")
    assert service.seen == []


# --------------------------------------------------------------------------------------------
# A TLS certificate this machine does not trust (issue 23): said so, with the trust setting.


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for the IP address 127.0.0.1 and its key, as PEM files."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "coordinator test")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "service.pem", directory / "service-key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@pytest.fixture
def tls_service(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    fake = FakeService()
    fake.canned = Canned(body=json.dumps(RUN_STATUS).encode())
    app = Starlette(routes=[Route("/{path:path}", fake.endpoint, methods=["GET"])])
    cert, key = _self_signed(tmp_path)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        app,
        log_level="critical",
        lifespan="off",
        access_log=False,
        ssl_certfile=str(cert),
        ssl_keyfile=str(key),
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "the TLS service did not start"
        time.sleep(0.01)
    yield f"https://127.0.0.1:{listener.getsockname()[1]}", cert
    server.should_exit = True
    thread.join(timeout=10)
    listener.close()


def test_an_untrusted_certificate_is_said_so_with_the_trust_setting(
    capsys: pytest.CaptureFixture[str],
    tls_service: tuple[str, Path],
    token_file: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, certificate = tls_service
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    arguments = ("--url", url, "--token-file", str(token_file), "status", "--run", RUN_ID)
    code, document = report(capsys, *arguments)
    assert code == 3
    (diagnostic,) = document["diagnostics"]
    assert diagnostic["code"] == "coordinator.command.service-unavailable"
    assert "TLS certificate could not be verified" in diagnostic["message"]
    assert "SSL_CERT_FILE" in diagnostic["suggestedAction"]
    assert "could not be reached" not in diagnostic["message"]
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate))  # the setting the hint names
    code, document = report(capsys, *arguments)
    assert code == 0, document
