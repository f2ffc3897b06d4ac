"""Remote ergonomics: `COORDINATOR_URL` / `COORDINATOR_TOKEN_FILE` defaults, a relative token
path, `start --wait` / `status --watch` (remote/watch.py), the `list` columns and `--format jsonl`.

A scripted fake service (the standard library's threading HTTP server on loopback) answers each
route from a queue: every request takes the next answer, the last one repeats. Every invocation
goes through `coordinatorctl.cli.main`; every output is checked for the token and input canaries.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from coordinatorctl.cli import main
from coordinatorctl.remote import watch as remote_watch
from coordinatorctl.remote.text import LIST_COLUMNS

REPO = Path(__file__).resolve().parents[3]
REPORT_SCHEMA = json.loads(
    (REPO / "spec" / "schemas" / "ctl-report.schema.json").read_text(encoding="utf-8")
)
CANARY = "Q0FOQVJZLXdhdGNoLTlkMmI"
TOKEN = f"eyJhbGciOiJFUzI1NiIsInR5cCI6ImF0K2p3dCJ9.{CANARY}.c2lnbmF0dXJlLXNlZ21lbnQ"
INPUT_CANARY = "INPUT-CANARY-4b1e"
RUN_ID = "0b7d3c52-5e1a-4b9e-9c1d-2f3a4b5c6d7e"
DIGEST = "sha256:" + "5" * 64
RUN_PATH = f"/v1/runs/{RUN_ID}"


def run_status(
    status: str = "running", step: str = "read-application", **members: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "runId": RUN_ID,
        "workflowId": "reviewed-notice",
        "workflowVersion": "1",
        "revision": DIGEST,
        "definitionDigest": DIGEST,
        "bindingDigest": DIGEST,
        "origin": "api",
        "trigger": None,
        "status": status,
        "step": step,
        "admittedAt": "2025-01-01T10:00:00.000Z",
        "deadlineAt": "2025-02-01T10:00:00.000Z",
        "completedAt": None,
        "nextDueAt": None,
        "cancelRequested": False,
        "restoreReview": False,
        "uncertain": False,
        "outcome": None,
        "output": None,
        "failureCode": None,
        "payloadErased": False,
    }
    body.update(members)
    return body


RUNNING = run_status()
WAITING = run_status(step="await-review", nextDueAt="2025-01-01T11:00:00.000Z")
FINISHED = run_status(
    "finished",
    "notice-sent",
    outcome="notice-sent",
    completedAt="2025-01-01T12:00:00.000Z",
)


# --------------------------------------------------------------------------------------------
# The scripted fake service.


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    query: str = ""


@dataclass
class Script:
    answers: dict[tuple[str, str], list[tuple[int, bytes, str]]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    url: str = ""
    tags: bool = False  # answer a run status with the weak ETag of the waiting read (06 §5.3)

    def on(self, method: str, path: str, *bodies: Any, status: int = 200) -> None:
        self.answers[(method, path)] = [
            (status, json.dumps(body).encode(), "application/json") for body in bodies
        ]

    def then(self, method: str, path: str, status: int, body: Any, media: str) -> None:
        self.answers[(method, path)].append((status, json.dumps(body).encode(), media))

    def take(self, method: str, path: str) -> tuple[int, bytes, str]:
        queue = self.answers.get((method, path))
        if not queue:
            return 404, b'{"nope": true}', "application/json"
        return queue.pop(0) if len(queue) > 1 else queue[0]

    def calls(self, method: str, path: str) -> int:
        return sum(1 for seen in self.seen if (seen.method, seen.path) == (method, path))


@pytest.fixture(scope="module")
def server() -> Iterator[Script]:
    script = Script()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: Any) -> None:
            return None

        def _answer(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            path, _, query = self.path.partition("?")
            script.seen.append(
                Seen(
                    self.command,
                    path,
                    {k.lower(): v for k, v in self.headers.items()},
                    self.rfile.read(length),
                    query,
                )
            )
            status, body, media = script.take(self.command, path)
            self.send_response(status)
            self.send_header("Content-Type", media)
            if script.tags and self.command == "GET" and path == RUN_PATH and status == 200:
                self.send_header("ETag", f'W/"{tag_of(body)}"')
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = _answer
        do_POST = _answer

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    script.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    # shutdown() returns at the loop's next poll: every 50 ms rather than the default 0.5 s.
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    yield script
    httpd.shutdown()
    httpd.server_close()


def tag_of(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()[:16]


@pytest.fixture
def service(server: Script, monkeypatch: pytest.MonkeyPatch) -> Script:
    server.answers = {}
    server.seen = []
    server.tags = False
    monkeypatch.delenv("COORDINATOR_URL", raising=False)
    monkeypatch.delenv("COORDINATOR_TOKEN_FILE", raising=False)
    return server


@pytest.fixture
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    """Watch pauses of 10–40 ms instead of 1–5 s."""
    monkeypatch.setattr(remote_watch, "FIRST_INTERVAL_SECONDS", 0.01)
    monkeypatch.setattr(remote_watch, "MAX_INTERVAL_SECONDS", 0.04)


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n", encoding="ascii")
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    everything = captured.out + captured.err
    assert CANARY not in everything, "the access token reached the output"
    assert INPUT_CANARY not in everything, "an input value reached the output"
    return code, captured.out, captured.err


def valid(document: dict[str, Any]) -> dict[str, Any]:
    jsonschema.Draft202012Validator(REPORT_SCHEMA).validate(document)
    return document


def report(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code, out, err = run(capsys, *argv, "--format", "json")
    assert err == "" and out.count("\n") == 1
    document = valid(json.loads(out))
    assert document["ok"] is (code == 0)
    return code, document


def flags(service: Script, token_file: Path) -> list[str]:
    return ["--url", service.url, "--token-file", str(token_file)]


def codes(document: dict[str, Any]) -> list[str]:
    return [d["code"] for d in document["diagnostics"]]


def start_argv(tmp_path: Path) -> list[str]:
    payload = tmp_path / "input.json"
    payload.write_text(json.dumps({"applicationId": INPUT_CANARY}), encoding="utf-8")
    key = tmp_path / "key"
    key.write_text("key-1\n", encoding="ascii")
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


# --------------------------------------------------------------------------------------------
# COORDINATOR_URL, COORDINATOR_TOKEN_FILE and a relative token path.


def test_the_environment_gives_the_url_and_the_token_file(
    capsys: pytest.CaptureFixture[str],
    service: Script,
    token_file: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service.on("GET", RUN_PATH, RUNNING)
    monkeypatch.setenv("COORDINATOR_URL", service.url)
    monkeypatch.setenv("COORDINATOR_TOKEN_FILE", str(token_file))
    code, document = report(capsys, "status", "--run", RUN_ID)
    assert code == 0 and document["run"]["status"] == "running"
    assert service.seen[0].headers["authorization"] == f"Bearer {TOKEN}"


def test_flags_win_over_the_environment(
    capsys: pytest.CaptureFixture[str],
    service: Script,
    token_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service.on("GET", RUN_PATH, RUNNING)
    # Neither would work: a non-loopback http origin and a missing file.
    monkeypatch.setenv("COORDINATOR_URL", f"http://{CANARY}.example.org")
    monkeypatch.setenv("COORDINATOR_TOKEN_FILE", str(tmp_path / "absent"))
    code, _ = report(capsys, *flags(service, token_file), "status", "--run", RUN_ID)
    assert code == 0 and len(service.seen) == 1


def test_an_empty_variable_counts_as_unset(
    capsys: pytest.CaptureFixture[str], service: Script, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COORDINATOR_URL", "")
    monkeypatch.setenv("COORDINATOR_TOKEN_FILE", "")
    code, document = report(capsys, "doctor")
    assert code == 2 and codes(document) == [
        "coordinator.command.service-required",
        "coordinator.command.token-file-required",
    ]


def test_a_missing_url_names_the_flag_and_the_variable(
    capsys: pytest.CaptureFixture[str], service: Script, token_file: Path
) -> None:
    code, out, err = run(capsys, "--token-file", str(token_file), "doctor")
    assert code == 2 and out == ""
    assert err.splitlines()[0] == "error[coordinator.command.service-required] /"
    assert "`--url`" in err and "`COORDINATOR_URL`" in err
    assert service.seen == []


def test_a_missing_token_file_names_the_flag_and_the_variable(
    capsys: pytest.CaptureFixture[str], service: Script
) -> None:
    code, _, err = run(capsys, "--url", service.url, "doctor")
    assert code == 2 and "`--token-file`" in err and "`COORDINATOR_TOKEN_FILE`" in err


def test_a_bad_url_from_the_environment_names_the_variable_and_is_never_echoed(
    capsys: pytest.CaptureFixture[str],
    service: Script,
    token_file: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COORDINATOR_URL", f"https://user:{CANARY}@svc.example.org")
    code, document = report(capsys, "--token-file", str(token_file), "doctor")
    assert code == 2 and codes(document) == ["coordinator.command.usage"]
    assert document["diagnostics"][0]["message"].startswith("COORDINATOR_URL must be an origin")
    assert service.seen == []


@pytest.mark.parametrize("via", ["flag", "variable"])
def test_a_relative_token_path_is_read_from_the_current_directory(
    capsys: pytest.CaptureFixture[str],
    service: Script,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    via: str,
) -> None:
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "token").write_text(TOKEN, encoding="ascii")
    monkeypatch.chdir(tmp_path)
    service.on("GET", RUN_PATH, RUNNING)
    argv = ["--url", service.url]
    if via == "flag":
        argv += ["--token-file", "secrets/token"]
    else:
        monkeypatch.setenv("COORDINATOR_TOKEN_FILE", "secrets/token")
    code, _ = report(capsys, *argv, "status", "--run", RUN_ID)
    assert code == 0 and service.seen[0].headers["authorization"] == f"Bearer {TOKEN}"


def test_a_relative_token_path_that_is_not_there_names_its_absolute_path(
    capsys: pytest.CaptureFixture[str],
    service: Script,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    code, document = report(capsys, "--url", service.url, "--token-file", "absent", "doctor")
    assert code == 1 and codes(document) == ["coordinator.command.token-invalid"]
    assert document["diagnostics"][0]["source"]["file"] == str(tmp_path / "absent")
    assert service.seen == []


# --------------------------------------------------------------------------------------------
# status --watch and start --wait.


def test_status_watch_follows_the_run_to_finished_one_plain_line_per_change(
    capsys: pytest.CaptureFixture[str], service: Script, token_file: Path, fast: None
) -> None:
    service.on("GET", RUN_PATH, RUNNING, RUNNING, WAITING, WAITING, WAITING, FINISHED)
    code, out, err = run(capsys, *flags(service, token_file), "status", "--run", RUN_ID, "--watch")
    assert code == 0
    first, *lines = err.splitlines()
    # The run id comes first: a watch that never ends still named its run.
    assert first == f"Run {RUN_ID}; following it until it settles (Ctrl-C stops watching)"
    assert [line.split(" ", 1)[1] for line in lines] == [
        "running at read-application",
        "running at await-review, next due 2025-01-01T11:00:00.000Z",
        "finished at notice-sent, outcome notice-sent",
    ]
    assert all(line.startswith("+") and "s " in line for line in lines)
    assert "Status:     finished" in out and "Outcome:    notice-sent" in out
    assert service.calls("GET", RUN_PATH) == 6
    assert [seen.method for seen in service.seen] == ["GET"] * 6  # only reads, never a cancel


def test_start_wait_admits_then_follows_the_run(
    capsys: pytest.CaptureFixture[str],
    service: Script,
    token_file: Path,
    tmp_path: Path,
    fast: None,
) -> None:
    service.on("POST", "/v1/runs", RUNNING, status=201)
    service.on("GET", RUN_PATH, WAITING, FINISHED)
    code, out, err = run(capsys, *flags(service, token_file), *start_argv(tmp_path), "--wait")
    assert code == 0
    assert out.splitlines()[0] == f"Admitted run {RUN_ID}"
    assert "Status:     finished" in out
    assert err.splitlines()[0].startswith(f"Admitted run {RUN_ID}; following it")
    assert len(err.splitlines()) == 4
    assert service.calls("POST", "/v1/runs") == 1 and service.calls("GET", RUN_PATH) == 2


def test_start_wait_json_prints_only_the_final_report(
    capsys: pytest.CaptureFixture[str],
    service: Script,
    token_file: Path,
    tmp_path: Path,
    fast: None,
) -> None:
    service.on("POST", "/v1/runs", RUNNING, status=200)
    service.on("GET", RUN_PATH, WAITING, FINISHED)
    code, document = report(capsys, *flags(service, token_file), *start_argv(tmp_path), "--wait")
    assert code == 0 and document["command"] == "start" and document["status"] == "replayed"
    assert document["run"] == FINISHED


def test_a_run_already_finished_at_admission_is_not_polled(
    capsys: pytest.CaptureFixture[str],
    service: Script,
    token_file: Path,
    tmp_path: Path,
    fast: None,
) -> None:
    service.on("POST", "/v1/runs", FINISHED, status=200)
    code, out, _ = run(capsys, *flags(service, token_file), *start_argv(tmp_path), "--wait")
    assert code == 0 and out.splitlines()[0] == f"Replayed run {RUN_ID}"
    assert out.count("Replayed run") == 1 and service.calls("GET", RUN_PATH) == 0


@pytest.mark.parametrize(
    ("final", "fragment"),
    [
        (run_status("failed", "send-notice", failureCode="product-refused"), "ended `failed`"),
        (run_status("cancelled", "read-application", cancelRequested=True), "ended `cancelled`"),
        (run_status("cancelled-after-effect", "send-notice"), "ended `cancelled-after-effect`"),
        (run_status("expired", "await-review", failureCode="deadline-reached"), "ended `expired`"),
        (
            run_status(
                "attention", "send-notice", uncertain=True, failureCode="transport-uncertain"
            ),
            "needs an operator (`attention`)",
        ),
    ],
)
def test_a_run_that_settles_otherwise_is_exit_1_run_not_finished(
    capsys: pytest.CaptureFixture[str],
    service: Script,
    token_file: Path,
    fast: None,
    final: dict[str, Any],
    fragment: str,
) -> None:
    service.on("GET", RUN_PATH, RUNNING, final)
    code, document = report(
        capsys, *flags(service, token_file), "status", "--run", RUN_ID, "--watch"
    )
    assert code == 1 and document["status"] == "domain-refusal"
    assert codes(document) == ["coordinator.command.run-not-finished"]
    assert fragment in document["diagnostics"][0]["message"]
    if final["failureCode"] is not None:
        assert f"failure code `{final['failureCode']}`" in document["diagnostics"][0]["message"]
    assert document["run"] == final
    code, out, err = run(capsys, *flags(service, token_file), "status", "--run", RUN_ID, "--watch")
    assert code == 1 and out == "" and "error[coordinator.command.run-not-finished]" in err


def test_jsonl_prints_one_report_per_change_then_the_final_report(
    capsys: pytest.CaptureFixture[str], service: Script, token_file: Path, fast: None
) -> None:
    service.on("GET", RUN_PATH, RUNNING, RUNNING, WAITING, WAITING, FINISHED)
    code, out, err = run(
        capsys, *flags(service, token_file), "status", "--run", RUN_ID, "--watch", "-o", "jsonl"
    )
    assert code == 0 and err == ""
    lines = [valid(json.loads(line)) for line in out.splitlines()]
    assert [(line["status"], line["run"]["step"]) for line in lines] == [
        ("observed", "read-application"),
        ("observed", "await-review"),
        ("completed", "notice-sent"),
    ]
    assert all(line["command"] == "status" and line["ok"] for line in lines)


def test_jsonl_ends_with_the_failing_report(
    capsys: pytest.CaptureFixture[str], service: Script, token_file: Path, fast: None
) -> None:
    service.on("GET", RUN_PATH, RUNNING, run_status("expired", failureCode="deadline-reached"))
    code, out, _ = run(
        capsys, *flags(service, token_file), "status", "--run", RUN_ID, "--watch", "--format=jsonl"
    )
    lines = [valid(json.loads(line)) for line in out.splitlines()]
    assert code == 1 and [line["ok"] for line in lines] == [True, False]
    assert codes(lines[-1]) == ["coordinator.command.run-not-finished"]


def test_the_pause_grows_from_1_s_by_half_to_5_s_and_resets_on_a_change(
    capsys: pytest.CaptureFixture[str],
    service: Script,
    token_file: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pauses: list[float] = []
    monkeypatch.setattr(remote_watch.time, "sleep", pauses.append)
    service.on("GET", RUN_PATH, *([RUNNING] * 7), WAITING, WAITING, FINISHED)
    code, _ = report(capsys, *flags(service, token_file), "status", "--run", RUN_ID, "--watch")
    assert code == 0
    assert pauses == [1.0, 1.5, 2.25, 3.375, 5.0, 5.0, 5.0, 1.0, 1.5]


def test_status_watch_sends_waiting_reads_naming_the_last_tag_and_never_pauses(
    capsys: pytest.CaptureFixture[str],
    service: Script,
    token_file: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service.tags = True
    pauses: list[float] = []
    monkeypatch.setattr(remote_watch.time, "sleep", pauses.append)
    service.on("GET", RUN_PATH, RUNNING, WAITING, FINISHED)
    code, _ = report(capsys, *flags(service, token_file), "status", "--run", RUN_ID, "--watch")
    assert code == 0
    assert pauses == []  # each read answered a change: the client never sleeps
    reads = [seen.query for seen in service.seen]
    tags = [tag_of(json.dumps(body).encode()) for body in (RUNNING, WAITING)]
    assert reads == ["", *(f"wait=20&seen={tag}" for tag in tags)]


def test_start_wait_fetches_the_tag_with_one_plain_read_then_waits(
    capsys: pytest.CaptureFixture[str],
    service: Script,
    token_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service.tags = True
    pauses: list[float] = []
    monkeypatch.setattr(remote_watch.time, "sleep", pauses.append)
    service.on("POST", "/v1/runs", RUNNING, status=201)
    service.on("GET", RUN_PATH, RUNNING, FINISHED)
    code, _ = report(capsys, *flags(service, token_file), *start_argv(tmp_path), "--wait")
    assert code == 0 and pauses == []
    reads = [seen.query for seen in service.seen if seen.method == "GET"]
    assert reads == ["", f"wait=20&seen={tag_of(json.dumps(RUNNING).encode())}"]


def test_a_waiting_read_answered_unchanged_at_once_is_followed_by_a_pause(
    capsys: pytest.CaptureFixture[str],
    service: Script,
    token_file: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A service past its bound of waiting reads answers at once: the watch must not spin.
    service.tags = True
    pauses: list[float] = []
    monkeypatch.setattr(remote_watch.time, "sleep", pauses.append)
    service.on("GET", RUN_PATH, RUNNING, RUNNING, RUNNING, FINISHED)
    code, _ = report(capsys, *flags(service, token_file), "status", "--run", RUN_ID, "--watch")
    assert code == 0
    assert pauses == [1.5, 2.25]
    assert all(seen.query.startswith("wait=20&seen=") for seen in service.seen[1:])


def test_a_waiting_read_never_outlasts_the_timeout(
    capsys: pytest.CaptureFixture[str], service: Script, token_file: Path, fast: None
) -> None:
    service.tags = True
    service.on("GET", RUN_PATH, WAITING)
    code, document = report(
        capsys, *flags(service, token_file), "status", "--run", RUN_ID, "--watch", "--timeout", "3"
    )
    assert code == 1 and codes(document) == ["coordinator.command.watch-timeout"]
    waits = [
        int(seen.query.split("&")[0].removeprefix("wait="))
        for seen in service.seen[1:]
        if seen.query  # the last reads, under a second before the deadline, are plain
    ]
    assert waits and all(1 <= wait <= 3 for wait in waits)


def test_the_timeout_ends_the_watch_with_exit_1_and_cancels_nothing(
    capsys: pytest.CaptureFixture[str], service: Script, token_file: Path, fast: None
) -> None:
    service.on("GET", RUN_PATH, WAITING)
    code, document = report(
        capsys, *flags(service, token_file), "status", "--run", RUN_ID, "--watch", "--timeout", "1"
    )
    assert code == 1 and codes(document) == ["coordinator.command.watch-timeout"]
    assert document["run"] == WAITING
    assert {seen.method for seen in service.seen} == {"GET"}
    assert service.calls("GET", RUN_PATH) >= 10  # polled until the deadline, not once


def test_timeout_without_a_watch_is_command_usage(
    capsys: pytest.CaptureFixture[str], service: Script, token_file: Path
) -> None:
    code, document = report(
        capsys, *flags(service, token_file), "status", "--run", RUN_ID, "--timeout", "5"
    )
    assert code == 2 and codes(document) == ["coordinator.command.usage"]
    assert service.seen == []


@pytest.mark.parametrize("value", ["0", "-1", "1.5", "31536001", CANARY])
def test_a_bad_timeout_is_cli_usage_and_never_echoed(
    capsys: pytest.CaptureFixture[str], service: Script, token_file: Path, value: str
) -> None:
    code, document = report(
        capsys,
        *flags(service, token_file),
        "status",
        "--run",
        RUN_ID,
        "--watch",
        "--timeout",
        value,
    )
    assert code == 2 and codes(document) == ["coordinator.cli.usage"]
    assert value not in json.dumps(document["diagnostics"])


def test_ctrl_c_ends_the_watch_with_exit_130_and_cancels_nothing(
    capsys: pytest.CaptureFixture[str],
    service: Script,
    token_file: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def interrupt(_: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(remote_watch.time, "sleep", interrupt)
    service.on("GET", RUN_PATH, WAITING)
    code, out, err = run(capsys, *flags(service, token_file), "status", "--run", RUN_ID, "--watch")
    assert code == 130 and out == ""
    assert "error[coordinator.command.watch-interrupted]" in err and "nothing was cancelled" in err
    code, document = report(
        capsys, *flags(service, token_file), "status", "--run", RUN_ID, "--watch"
    )
    assert code == 130 and document["ok"] is False and document["status"] == "domain-refusal"
    assert codes(document) == ["coordinator.command.watch-interrupted"]
    assert document["run"] == WAITING
    assert {seen.method for seen in service.seen} == {"GET"}


def test_a_failing_poll_ends_the_watch_with_its_outcome_and_the_last_run(
    capsys: pytest.CaptureFixture[str], service: Script, token_file: Path, fast: None
) -> None:
    service.on("GET", RUN_PATH, RUNNING)
    service.then("GET", RUN_PATH, 503, {"oops": True}, "application/json")
    code, document = report(
        capsys, *flags(service, token_file), "status", "--run", RUN_ID, "--watch"
    )
    assert code == 3 and codes(document) == ["coordinator.command.service-unavailable"]
    assert document["command"] == "status" and document["run"] == RUNNING
    assert service.calls("GET", RUN_PATH) == 1 + remote_watch.POLL_ATTEMPTS


def test_a_read_that_fails_is_tried_again_twice(
    capsys: pytest.CaptureFixture[str], service: Script, token_file: Path, fast: None
) -> None:
    service.on("GET", RUN_PATH, RUNNING)
    service.then("GET", RUN_PATH, 503, {"oops": True}, "application/json")
    service.then("GET", RUN_PATH, 503, {"oops": True}, "application/json")
    service.then("GET", RUN_PATH, 200, FINISHED, "application/json")
    code, out, err = run(capsys, *flags(service, token_file), "status", "--run", RUN_ID, "--watch")
    assert code == 0 and "Status:     finished" in out
    lines = err.splitlines()[1:]  # after the run id
    assert len(lines) == 4 and "could not be read (1 of 2 retries)" in lines[1]
    assert "could not be read (2 of 2 retries)" in lines[2] and " finished at " in lines[3]
    assert service.calls("GET", RUN_PATH) == 4


def test_a_refused_read_is_not_tried_again(
    capsys: pytest.CaptureFixture[str], service: Script, token_file: Path, fast: None
) -> None:
    service.on("GET", RUN_PATH, RUNNING)
    service.then(
        "GET",
        RUN_PATH,
        401,
        {
            "type": "https://id.registrystack.org/problems/registry-coordinator/access/unauthenticated",
            "title": "Refused",
            "status": 401,
            "detail": "A fixed sentence.",
            "code": "coordinator.access.unauthenticated",
            "suggestedAction": "Do the fixed next thing.",
        },
        "application/problem+json",
    )
    code, document = report(
        capsys, *flags(service, token_file), "status", "--run", RUN_ID, "--watch"
    )
    assert code == 1 and codes(document) == ["coordinator.access.unauthenticated"]
    assert document["run"] == RUNNING and service.calls("GET", RUN_PATH) == 2


def test_a_refused_start_is_not_followed(
    capsys: pytest.CaptureFixture[str],
    service: Script,
    token_file: Path,
    tmp_path: Path,
    fast: None,
) -> None:
    service.on("POST", "/v1/runs")
    service.then(
        "POST",
        "/v1/runs",
        409,
        {
            "type": "https://id.registrystack.org/problems/registry-coordinator/command/restore-hold",
            "title": "Refused",
            "status": 409,
            "detail": "A fixed sentence.",
            "code": "coordinator.command.restore-hold",
            "suggestedAction": "Do the fixed next thing.",
        },
        "application/problem+json",
    )
    code, document = report(capsys, *flags(service, token_file), *start_argv(tmp_path), "--wait")
    assert code == 1 and codes(document) == ["coordinator.command.restore-hold"]
    assert service.calls("GET", RUN_PATH) == 0


def test_the_live_panel_on_a_terminal_shows_no_secret(
    capsys: pytest.CaptureFixture[str],
    service: Script,
    token_file: Path,
    monkeypatch: pytest.MonkeyPatch,
    fast: None,
) -> None:
    import sys

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    service.on("GET", RUN_PATH, RUNNING, WAITING, FINISHED)
    code, out, err = run(capsys, *flags(service, token_file), "status", "--run", RUN_ID, "--watch")
    assert code == 0 and "Status:     finished" in out
    assert "\x1b" in err  # drawn, then removed


def test_the_live_panel_shows_the_wait_timing_of_a_wait_step(
    capsys: pytest.CaptureFixture[str],
    service: Script,
    token_file: Path,
    monkeypatch: pytest.MonkeyPatch,
    fast: None,
) -> None:
    import sys

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    monkeypatch.setenv("COLUMNS", "200")
    wait = {
        "call": "read-review",
        "completion": "review-completed",
        "startedAt": "2025-01-01T10:00:01.000Z",
        "timeoutAt": "2025-01-08T10:00:01.000Z",
        "intervalSeconds": 900,
        "observations": 4,
        "lastObservedAt": "2025-01-01T10:45:00.000Z",
        "nextObservationAt": "2025-01-01T11:00:00.000Z",
        "result": "waiting",
    }
    step = {
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
        "wait": wait,
    }
    inspection = {
        "run": WAITING,
        "steps": [step],
        "effects": [],
        "recovery": {
            "retryAllowed": False,
            "retryBlockedBy": "not-uncertain",
            "reconcileAllowed": False,
            "reconcileBlockedBy": "not-uncertain",
        },
    }
    service.on("GET", RUN_PATH, WAITING, WAITING, FINISHED)
    service.on("GET", RUN_PATH + "/inspect", inspection)
    code, _, err = run(capsys, *flags(service, token_file), "status", "--run", RUN_ID, "--watch")
    assert code == 0 and service.calls("GET", RUN_PATH + "/inspect") == 1
    assert "waiting, 4 observations, next 2025-01-01T11:00:00.000Z" in err
    assert "times out 2025-01-08T10:00:01.000Z" in err


# --------------------------------------------------------------------------------------------
# list: the columns, and one run per line with --format jsonl.


def test_list_columns_say_what_they_hold(
    capsys: pytest.CaptureFixture[str], service: Script, token_file: Path
) -> None:
    failed = run_status("failed", "send-notice", failureCode="product-refused")
    failed["runId"] = "1" * 8 + RUN_ID[8:]
    service.on("GET", "/v1/runs", {"runs": [FINISHED, failed, WAITING], "nextCursor": None})
    code, out, _ = run(capsys, *flags(service, token_file), "list")
    assert code == 0
    lines = out.splitlines()
    assert LIST_COLUMNS == ("RUN", "WORKFLOW", "STATUS", "STEP", "OUTCOME", "FAILURE", "ADMITTED")
    assert lines[0].split() == list(LIST_COLUMNS)
    assert lines[1].split() == [
        RUN_ID,
        "reviewed-notice",
        "finished",
        "notice-sent",
        "notice-sent",
        "-",
        "2025-01-01T10:00:00.000Z",
    ]
    assert lines[2].split()[2:6] == ["failed", "send-notice", "-", "product-refused"]
    assert lines[3].split()[2:6] == ["running", "await-review", "-", "-"]
    for name in ("OUTCOME", "FAILURE", "ADMITTED"):
        column = lines[0].index(name)
        assert all(line[column - 1] == " " and line[column] != " " for line in lines[1:])


def test_list_jsonl_prints_one_run_per_line(
    capsys: pytest.CaptureFixture[str], service: Script, token_file: Path
) -> None:
    service.on("GET", "/v1/runs", {"runs": [RUNNING, FINISHED], "nextCursor": "c.2"})
    code, out, err = run(capsys, *flags(service, token_file), "list", "--format", "jsonl")
    assert code == 0 and err == ""
    lines = [valid(json.loads(line)) for line in out.splitlines()]
    assert [line["run"] for line in lines] == [RUNNING, FINISHED]
    assert all(line["nextCursor"] == "c.2" and line["command"] == "list" for line in lines)


def test_list_jsonl_of_an_empty_page_is_the_one_report(
    capsys: pytest.CaptureFixture[str], service: Script, token_file: Path
) -> None:
    service.on("GET", "/v1/runs", {"runs": [], "nextCursor": None})
    code, out, _ = run(capsys, *flags(service, token_file), "-o", "jsonl", "list")
    assert code == 0 and out.count("\n") == 1
    assert valid(json.loads(out))["runs"] == []


def test_jsonl_for_a_single_answer_is_its_one_report_line(
    capsys: pytest.CaptureFixture[str], service: Script, token_file: Path
) -> None:
    service.on("GET", RUN_PATH, RUNNING)
    code, out, _ = run(
        capsys, *flags(service, token_file), "status", "--run", RUN_ID, "-o", "jsonl"
    )
    assert code == 0 and out.count("\n") == 1 and valid(json.loads(out))["run"] == RUNNING


def test_a_usage_error_under_o_json_is_a_report(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "-o", "jsonl", "list", "--limit", "0")
    assert code == 2 and valid(json.loads(out))["command"] == "usage"


# --------------------------------------------------------------------------------------------
# `start` like its peers: the service's workflow and active revision, a generated key, the
# input from a file, @file, standard input or inline, and never an input value in an error.

WORKFLOW = {
    "workflowId": "reviewed-notice",
    "version": "1",
    "revision": DIGEST,
    "definitionDigest": DIGEST,
    "packageDigest": DIGEST,
    "inputSchema": {"type": "object"},
    "triggers": [],
    "outcomes": ["notice-sent"],
}
INPUT = {"applicationId": INPUT_CANARY}


def sent(service: Script) -> dict[str, Any]:
    [post] = [seen for seen in service.seen if seen.method == "POST"]
    body: dict[str, Any] = json.loads(post.body)
    return {**body, "key": post.headers["idempotency-key"]}


def test_start_defaults_to_the_served_workflow_and_active_revision_and_a_printed_key(
    capsys: pytest.CaptureFixture[str], service: Script, token_file: Path
) -> None:
    service.on("GET", "/v1/workflow", WORKFLOW)
    service.on("POST", "/v1/runs", RUNNING, status=201)
    code, document = report(
        capsys, *flags(service, token_file), "start", "--input-json", json.dumps(INPUT)
    )
    assert code == 0 and document["status"] == "admitted"
    body = sent(service)
    assert (body["workflow"], body["revision"], body["input"]) == ("reviewed-notice", DIGEST, INPUT)
    assert body["key"].startswith("ctl-") and document["idempotencyKey"] == body["key"]
    assert [(seen.method, seen.path) for seen in service.seen] == [
        ("GET", "/v1/workflow"),
        ("POST", "/v1/runs"),
    ]
    # Text mode prints the generated key first, so that a retry can reuse it.
    service.seen = []
    code, out, _ = run(capsys, *flags(service, token_file), "start", "--input-json", "{}")
    key = sent(service)["key"]
    assert code == 0 and out.splitlines()[0].startswith(f"Idempotency-Key: {key} ")


def test_start_revision_active_is_the_served_one_and_a_given_key_is_sent_unprinted(
    capsys: pytest.CaptureFixture[str], service: Script, token_file: Path
) -> None:
    service.on("GET", "/v1/workflow", WORKFLOW)
    service.on("POST", "/v1/runs", RUNNING, status=200)
    code, out, _ = run(
        capsys, *flags(service, token_file), "start", "--workflow", "reviewed-notice",
        "--revision", "active", "--input-json", "{}", "--key", "retry-me-1",
    )  # fmt: skip
    assert code == 0 and out.startswith("Replayed run ")
    assert sent(service)["revision"] == DIGEST and sent(service)["key"] == "retry-me-1"
    assert "retry-me-1" not in out


def test_start_with_workflow_and_revision_given_asks_the_service_nothing_else(
    capsys: pytest.CaptureFixture[str], service: Script, token_file: Path, tmp_path: Path
) -> None:
    service.on("POST", "/v1/runs", RUNNING, status=201)
    code, _ = report(capsys, *flags(service, token_file), *start_argv(tmp_path))
    assert code == 0 and [seen.path for seen in service.seen] == ["/v1/runs"]


@pytest.mark.parametrize("form", ["file", "@file", "stdin"])
def test_start_reads_the_input_from_a_file_at_file_or_standard_input(
    capsys: pytest.CaptureFixture[str],
    service: Script,
    token_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    form: str,
) -> None:
    import io

    service.on("GET", "/v1/workflow", WORKFLOW)
    service.on("POST", "/v1/runs", RUNNING, status=201)
    payload = tmp_path / "input.json"
    payload.write_text(json.dumps(INPUT), encoding="utf-8")
    source = {"file": str(payload), "@file": f"@{payload}", "stdin": "-"}[form]
    if form == "stdin":
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(json.dumps(INPUT).encode())))
    code, _ = report(capsys, *flags(service, token_file), "start", "--input", source)
    assert code == 0 and sent(service)["input"] == INPUT


@pytest.mark.parametrize(
    ("argv", "code", "fragment"),
    [
        # Inline JSON given to --input is no file name: it is not echoed, --input-json is named.
        (["--input", json.dumps(INPUT)], "coordinator.command.input-unavailable", "--input-json"),
        (
            ["--input-json", '{"applicationId": "' + INPUT_CANARY + '",'],
            "coordinator.command.input-invalid",
            "--input-json is not strict JSON",
        ),
        ([], "coordinator.command.usage", "needs the run input"),
        (["--input-json", "{}", "--input", "x.json"], "coordinator.command.usage", "once"),
        (
            ["--input-json", "{}", "--key", "k", "--key-file", "f"],
            "coordinator.command.usage",
            "--key or --key-file",
        ),
        (
            ["--input-json", "{}", "--key", INPUT_CANARY + " x"],
            "coordinator.command.input-invalid",
            "--key must hold",
        ),
        (
            ["--input-json", "{}", "--revision", "sha256:" + INPUT_CANARY],
            "coordinator.command.input-invalid",
            "or `active`",
        ),
    ],
)
def test_start_refuses_its_inputs_locally_without_echoing_them(
    capsys: pytest.CaptureFixture[str],
    service: Script,
    token_file: Path,
    argv: list[str],
    code: str,
    fragment: str,
) -> None:
    exit_code, document = report(capsys, *flags(service, token_file), "start", *argv)
    assert exit_code in (1, 2, 3) and codes(document) == [code]
    assert fragment in json.dumps(document)
    assert service.seen == []


def test_a_refused_revision_says_what_to_pass_instead(
    capsys: pytest.CaptureFixture[str], service: Script, token_file: Path
) -> None:
    _, document = report(
        capsys, *flags(service, token_file), "start", "--input-json", "{}", "--revision", "v2"
    )
    [diagnostic] = document["diagnostics"]
    assert "`coordinatorctl workflow`" in diagnostic["suggestedAction"]
    assert "--revision active" in diagnostic["suggestedAction"]


def test_a_failed_read_of_the_served_workflow_ends_start_with_the_key_to_retry_with(
    capsys: pytest.CaptureFixture[str], service: Script, token_file: Path
) -> None:
    service.on("GET", "/v1/workflow", {"oops": True}, status=503)
    code, document = report(capsys, *flags(service, token_file), "start", "--input-json", "{}")
    assert code == 3 and document["command"] == "start"
    assert "--workflow and --revision default to" in document["diagnostics"][0]["message"]
    assert document["idempotencyKey"].startswith("ctl-")
    assert not any(seen.method == "POST" for seen in service.seen)


def test_a_lost_admission_names_the_generated_key_in_its_next_step(
    capsys: pytest.CaptureFixture[str], service: Script, token_file: Path
) -> None:
    service.on("GET", "/v1/workflow", WORKFLOW)
    service.on("POST", "/v1/runs", {"oops": True}, status=502)
    code, document = report(capsys, *flags(service, token_file), "start", "--input-json", "{}")
    key = document["idempotencyKey"]
    assert code == 3 and f"`--key {key}`" in document["diagnostics"][0]["suggestedAction"]


def test_every_next_step_naming_run_names_the_run(
    capsys: pytest.CaptureFixture[str], service: Script, token_file: Path, fast: None
) -> None:
    failed = run_status("failed", "notify", failureCode="product-refused")
    service.on("GET", "/v1/workflow", WORKFLOW)
    service.on("POST", "/v1/runs", RUNNING, status=201)
    service.on("GET", RUN_PATH, failed)
    code, document = report(
        capsys, *flags(service, token_file), "start", "--input-json", "{}", "--wait"
    )
    assert code == 1 and codes(document) == ["coordinator.command.run-not-finished"]
    assert (
        f"`coordinatorctl inspect --run {RUN_ID}`" in document["diagnostics"][0]["suggestedAction"]
    )
    # A command on a run whose answer was lost: inspect that run before repeating it.
    service.on("POST", f"{RUN_PATH}/retry-same", {"oops": True}, status=503)
    code, document = report(
        capsys, *flags(service, token_file), "retry-same", "--run", RUN_ID, "--reason", "r"
    )
    assert code == 3
    assert (
        f"`coordinatorctl inspect --run {RUN_ID}`" in document["diagnostics"][0]["suggestedAction"]
    )


def test_a_watch_that_times_out_names_its_run_in_the_next_step(
    capsys: pytest.CaptureFixture[str], service: Script, token_file: Path, fast: None
) -> None:
    service.on("GET", RUN_PATH, WAITING)
    code, document = report(
        capsys, *flags(service, token_file), "status", "--run", RUN_ID, "--watch", "--timeout", "1"
    )
    assert code == 1 and codes(document) == ["coordinator.command.watch-timeout"]
    assert f"--watch --run {RUN_ID}`" in document["diagnostics"][0]["suggestedAction"]


def test_a_refused_input_names_each_place_and_never_a_value(
    capsys: pytest.CaptureFixture[str], service: Script, token_file: Path
) -> None:
    violations = [
        {"path": "", "keyword": "additionalProperties", "members": ["workflowId"]},
        {"path": "/applicationId", "keyword": "format"},
    ]
    service.on("GET", "/v1/workflow", WORKFLOW)
    problem = {
        "type": "https://id.registrystack.org/problems/registry-coordinator/definition/input",
        "title": "Input does not match the schema",
        "status": 400,
        "detail": "The run input does not validate against the workflow's input schema.",
        "code": "coordinator.definition.input",
        "suggestedAction": "Correct the input.",
        "violations": violations,
    }
    service.answers[("POST", "/v1/runs")] = [
        (400, json.dumps(problem).encode(), "application/problem+json")
    ]
    code, document = report(
        capsys, *flags(service, token_file), "start", "--input-json", json.dumps(INPUT)
    )
    assert code == 1 and document["violations"] == violations
    places = [(d["path"], d["message"]) for d in document["diagnostics"][1:]]
    assert places == [
        ("", "The run input has the member `workflowId` here, which its schema does not allow."),
        ("/applicationId", "The run input fails the schema keyword `format` here."),
    ]
    code, _, err = run(
        capsys, *flags(service, token_file), "start", "--input-json", json.dumps(INPUT)
    )
    assert "error[coordinator.definition.input] /applicationId" in err
