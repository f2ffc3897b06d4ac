"""`coordinatorctl openapi` (09 §2): the shipped document, or with `--url` the served one."""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path
from typing import ClassVar

import pytest
import yaml

from coordinatorctl.cli import main

REPO = Path(__file__).resolve().parents[3]
SHIPPED = files("coordinator_models").joinpath("openapi.json").read_bytes()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_shipped_copy_is_the_bundled_document() -> None:
    bundled = yaml.safe_load((REPO / "generated" / "openapi.bundled.yaml").read_text("utf-8"))
    assert json.loads(SHIPPED) == bundled
    assert bundled["openapi"] == "3.1.0"


def test_text_mode_prints_the_document_as_indented_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "openapi")
    assert (code, err) == (0, "")
    assert out.startswith('{\n  "openapi": "3.1.0"')
    assert json.loads(out) == json.loads(SHIPPED)


def test_json_mode_prints_the_raw_document_without_the_envelope(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "openapi", "--format", "json")
    assert code == 0
    assert out.encode("utf-8") == SHIPPED
    assert "apiVersion" not in json.loads(out)


class _Answers(http.server.BaseHTTPRequestHandler):
    """A stand-in server: `/openapi.json` answers what the test put in `answers`."""

    answers: ClassVar[dict[str, tuple[int, str, bytes]]] = {}
    seen_headers: ClassVar[list[dict[str, str]]] = []

    def do_GET(self) -> None:
        type(self).seen_headers.append(dict(self.headers.items()))
        status, media_type, body = type(self).answers[self.path]
        self.send_response(status)
        self.send_header("Content-Type", media_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    # shutdown() returns at the loop's next poll: every 50 ms rather than the default 0.5 s.
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    _Answers.answers, _Answers.seen_headers = {}, []
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def test_url_fetches_the_served_document_without_a_token(
    capsys: pytest.CaptureFixture[str], server: str
) -> None:
    served = json.loads(SHIPPED)
    served["info"]["version"] = "served-copy"
    body = json.dumps(served, indent=2).encode() + b"\n"
    _Answers.answers["/openapi.json"] = (200, "application/json", body)
    code, out, _ = run(capsys, "openapi", "--url", server, "--format", "json")
    assert code == 0
    assert out.encode() == body  # the served document, not the shipped copy
    code, out, _ = run(capsys, "openapi", "--url", server)
    assert code == 0 and json.loads(out)["info"]["version"] == "served-copy"
    assert all("Authorization" not in headers for headers in _Answers.seen_headers)


@pytest.mark.parametrize(
    ("status", "media_type", "body"),
    [
        (200, "text/html", b"<html></html>"),
        (200, "application/json", b'{"openapi": "3.0.3", "paths": {}}'),
        (200, "application/json", b'{"openapi": "3.1.0", "paths": {}, "paths": {}}'),
        (502, "text/plain", b"bad gateway"),
    ],
)
def test_an_answer_that_is_not_a_31_document_is_service_unavailable(
    capsys: pytest.CaptureFixture[str], server: str, status: int, media_type: str, body: bytes
) -> None:
    _Answers.answers["/openapi.json"] = (status, media_type, body)
    code, out, _ = run(capsys, "openapi", "--url", server, "--format", "json")
    report = json.loads(out)
    assert code == 3
    assert report["ok"] is False and report["command"] == "openapi"
    assert [d["code"] for d in report["diagnostics"]] == ["coordinator.command.service-unavailable"]


def test_a_service_without_the_route_is_named_by_its_problem_code(
    capsys: pytest.CaptureFixture[str], server: str
) -> None:
    problem = {
        "type": "https://id.registrystack.org/problems/registry-coordinator/request/not-found",
        "title": "Not found",
        "status": 404,
        "detail": "No route.",
        "code": "coordinator.request.not-found",
        "suggestedAction": None,
    }
    _Answers.answers["/openapi.json"] = (
        404,
        "application/problem+json",
        json.dumps(problem).encode(),
    )
    code, out, _ = run(capsys, "openapi", "--url", server, "--format", "json")
    assert code == 1
    assert [d["code"] for d in json.loads(out)["diagnostics"]] == ["coordinator.request.not-found"]


def test_an_unreachable_service_is_exit_3(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code, out, err = run(capsys, "openapi", "--url", f"http://127.0.0.1:{port}")
    assert code == 3 and out == ""
    assert "coordinator.command.service-unavailable" in err


@pytest.mark.parametrize(
    "url", ["http://example.org", "https://user:CANARY@host.example", "https://h.example/path"]
)
def test_url_must_be_an_origin_and_is_never_echoed(
    capsys: pytest.CaptureFixture[str], url: str
) -> None:
    code, out, err = run(capsys, "openapi", "--url", url)
    assert code == 2
    assert "coordinator.command.usage" in err
    assert url not in out + err and "CANARY" not in out + err
