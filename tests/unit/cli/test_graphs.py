"""`explain --graph svg|png` and `inspect --graph … --project DIR` through `coordinatorctl`'s
main() (docs/graphs.md): the SVG of every example, the same bytes on every run, the file of
`--output`, PNG only through a converter that is installed (else a stable tool-missing code),
and a run's path drawn over the project's graph, refused when the run executes another
definition. The picture carries ids and closed words only, never a value of the run.
"""

from __future__ import annotations

import importlib.machinery
import json
import stat
import sys
import threading
import types
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from coordinatorctl.cli import main

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"
EXAMPLE_NAMES = sorted(
    path.name for path in EXAMPLES.iterdir() if (path / "workflow.yaml").is_file()
)
REVIEWED = EXAMPLES / "reviewed-notice"
DOCS_IMAGE = REPO / "docs" / "images" / "reviewed-notice.svg"
DOCS_RUN_IMAGE = REPO / "docs" / "images" / "reviewed-notice-run.svg"
REPORT_SCHEMA = json.loads(
    (REPO / "spec" / "schemas" / "ctl-report.schema.json").read_text(encoding="utf-8")
)
SVG = "{http://www.w3.org/2000/svg}"
SOURCE = "{https://id.registrystack.org/formats/coordinator/graph}source"
TARGET = "{https://id.registrystack.org/formats/coordinator/graph}target"
CANARY = "CANARY-gr4ph-value"
TOKEN = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJvcHMifQ.c2lnbmF0dXJl"
RUN_ID = "0b7d3c52-5e1a-4b9e-9c1d-2f3a4b5c6d7e"
OTHER_DIGEST = "sha256:" + "5" * 64
PNG = b"\x89PNG\r\n\x1a\n"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def report(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code, out, _ = run(capsys, *argv, "--format", "json")
    document = json.loads(out)
    jsonschema.Draft202012Validator(REPORT_SCHEMA).validate(document)
    return code, document


def explained(capsys: pytest.CaptureFixture[str], project: Path) -> dict[str, Any]:
    code, document = report(capsys, "explain", "--project", str(project))
    assert code == 0
    return document


def svg_structure(svg: str) -> tuple[list[str], list[tuple[str, str, str]]]:
    """The step ids of the boxes and the (source, target, label) of the routes."""
    root = ET.fromstring(svg.encode())
    assert root.tag == SVG + "svg" and root.get("version") == "1.1"
    steps, routes = [], []
    for group in root.iter(SVG + "g"):
        classes = (group.get("class") or "").split()
        if "step" in classes:
            assert len(group.findall(SVG + "rect[@class='box']")) == 1
            steps.append(str(group.get("id")).removeprefix("step-"))
        if "route" in classes:
            assert len(group.findall(SVG + "path")) == 1
            label = group.find(SVG + "text")
            assert label is not None and label.text
            routes.append((str(group.get(SOURCE)), str(group.get(TARGET)), label.text))
    return steps, routes


# --------------------------------------------------------------------------------------------
# explain --graph svg


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_explain_graph_svg_draws_every_step_and_route_of_each_example(
    capsys: pytest.CaptureFixture[str], name: str
) -> None:
    project = EXAMPLES / name
    document = explained(capsys, project)
    code, out, err = run(capsys, "explain", "--project", str(project), "--graph", "svg")
    assert code == 0 and err == ""
    steps, routes = svg_structure(out)
    assert steps == [step["id"] for step in document["steps"]]
    expected = [
        (step["id"], route["target"]) for step in document["steps"] for route in step["routes"]
    ]
    assert [(source, target) for source, target, _ in routes] == expected
    for step in document["steps"]:
        if step["type"] == "finish":
            assert f"finish: {step['outcome']}" in out
    # the same project gives the same bytes
    assert run(capsys, "explain", "--project", str(project), "--graph", "svg")[1] == out


def test_explain_graph_svg_labels_the_wait_and_refusal_routes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(
        capsys, "explain", "--project", str(EXAMPLES / "recorded-decision"), "--graph", "svg"
    )
    assert code == 0
    labels = {label for _, _, label in svg_structure(out)[1]}
    assert {"success", "completed", "timeout", "refusal: decision-already-recorded"} <= labels


def test_the_svg_in_the_docs_is_the_one_explain_draws(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "explain", "--project", str(REVIEWED), "--graph", "svg")
    assert code == 0
    assert DOCS_IMAGE.read_text(encoding="utf-8") == out, (
        "regenerate docs/images/reviewed-notice.svg (docs/graphs.md, Regenerate)"
    )


def test_explain_graph_output_writes_the_file_and_names_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    target = tmp_path / "graph.svg"
    target.write_text("old", encoding="utf-8")
    code, out, _ = run(
        capsys, "explain", "--project", str(REVIEWED), "--graph", "svg", "--output", str(target)
    )
    assert code == 0
    assert out == f"Wrote the svg graph of reviewed-notice to {target}\n"
    svg_structure(target.read_text(encoding="utf-8"))
    assert [p.name for p in tmp_path.iterdir()] == ["graph.svg"], "no temporary file is left"


def test_explain_graph_output_into_a_missing_directory_is_output_unavailable(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    target = tmp_path / "absent" / "graph.svg"
    code, document = report(
        capsys, "explain", "--project", str(REVIEWED), "--graph", "svg", "--output", str(target)
    )
    assert code == 3
    assert [d["code"] for d in document["diagnostics"]] == [
        "coordinator.command.output-unavailable"
    ]


def test_output_without_graph_is_command_usage(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, document = report(
        capsys, "explain", "--project", str(REVIEWED), "--output", str(tmp_path / "x.svg")
    )
    assert code == 2
    assert [d["code"] for d in document["diagnostics"]] == ["coordinator.command.usage"]


# --------------------------------------------------------------------------------------------
# --graph png: only through a converter that is installed


@pytest.fixture
def no_converter(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setitem(sys.modules, "cairosvg", None)  # find_spec answers None


def fake_tool(directory: Path, name: str, script: str) -> None:
    directory.mkdir(exist_ok=True)
    tool = directory / name
    tool.write_text(f"#!{sys.executable}\n{script}", encoding="utf-8")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def fake_rsvg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An `rsvg-convert` that checks it was given our SVG on stdin and answers a PNG header."""
    directory = tmp_path / "bin"
    fake_tool(
        directory,
        "rsvg-convert",
        "import sys\n"
        "data = sys.stdin.buffer.read()\n"
        "assert sys.argv[1:] == ['--format', 'png'] and b'<svg' in data\n"
        "sys.stdout.buffer.write(b'\\x89PNG\\r\\n\\x1a\\n' + b'fake')\n",
    )
    monkeypatch.setenv("PATH", str(directory))
    monkeypatch.setitem(sys.modules, "cairosvg", None)
    return directory


@pytest.mark.usefixtures("no_converter")
def test_png_without_a_converter_is_tool_missing_with_a_hint(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    target = tmp_path / "graph.png"
    code, out, err = run(
        capsys, "explain", "--project", str(REVIEWED), "--graph", "png", "--output", str(target)
    )
    assert code == 2 and out == ""
    assert "coordinator.command.graph-tool-missing" in err
    assert "--graph svg" in err, "the hint names the way that needs no converter"
    assert not target.exists()
    code, document = report(
        capsys, "explain", "--project", str(REVIEWED), "--graph", "png", "--output", str(target)
    )
    assert code == 2 and document["status"] == "usage-error"
    assert [d["code"] for d in document["diagnostics"]] == [
        "coordinator.command.graph-tool-missing"
    ]


def test_png_through_an_installed_converter_is_written_to_the_output(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fake_rsvg: Path
) -> None:
    target = tmp_path / "graph.png"
    code, out, err = run(
        capsys, "explain", "--project", str(REVIEWED), "--graph", "png", "--output", str(target)
    )
    assert code == 0, err
    assert out == f"Wrote the png graph of reviewed-notice to {target}\n"
    assert target.read_bytes() == PNG + b"fake"


def test_png_prefers_the_cairosvg_package_when_it_is_installed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[bytes] = []

    def svg2png(*, bytestring: bytes) -> bytes:
        seen.append(bytestring)
        return PNG + b"cairo"

    module = types.ModuleType("cairosvg")
    module.__spec__ = importlib.machinery.ModuleSpec("cairosvg", None)
    module.svg2png = svg2png  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cairosvg", module)
    monkeypatch.setenv("PATH", str(tmp_path))  # no rsvg-convert, no dot
    target = tmp_path / "graph.png"
    code, _, err = run(
        capsys, "explain", "--project", str(REVIEWED), "--graph", "png", "--output", str(target)
    )
    assert code == 0, err
    assert target.read_bytes() == PNG + b"cairo"
    assert len(seen) == 1
    svg_structure(seen[0].decode())


@pytest.mark.usefixtures("fake_rsvg")
def test_png_without_output_is_command_usage(capsys: pytest.CaptureFixture[str]) -> None:
    code, document = report(capsys, "explain", "--project", str(REVIEWED), "--graph", "png")
    assert code == 2
    assert [d["code"] for d in document["diagnostics"]] == ["coordinator.command.usage"]


def test_a_converter_that_fails_is_output_unavailable(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "bin"
    fake_tool(directory, "rsvg-convert", "import sys\nsys.exit(1)\n")
    monkeypatch.setenv("PATH", str(directory))
    monkeypatch.setitem(sys.modules, "cairosvg", None)
    target = tmp_path / "graph.png"
    code, document = report(
        capsys, "explain", "--project", str(REVIEWED), "--graph", "png", "--output", str(target)
    )
    assert code == 3
    assert [d["code"] for d in document["diagnostics"]] == [
        "coordinator.command.output-unavailable"
    ]
    assert not target.exists()


# --------------------------------------------------------------------------------------------
# inspect --graph … --project DIR against a fake service


class FakeService:
    def __init__(self) -> None:
        self.body: dict[str, Any] = {}
        self.paths: list[str] = []
        self.url = ""


@pytest.fixture(scope="module")
def server() -> Iterator[FakeService]:
    fake = FakeService()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            fake.paths.append(self.path)
            data = json.dumps(fake.body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    fake.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    # shutdown() returns at the loop's next poll: every 50 ms rather than the default 0.5 s.
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    yield fake
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=10)


@pytest.fixture
def service(server: FakeService) -> FakeService:
    server.paths = []
    server.body = {}
    return server


@pytest.fixture
def remote(service: FakeService, tmp_path: Path) -> list[str]:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n", encoding="ascii")
    return ["--url", service.url, "--token-file", str(token)]


def _call(step: str, operation: str, effect: str, state: str, route: Any, entered: str) -> Any:
    return {
        "step": step,
        "type": "call",
        "state": state,
        "generation": 1,
        "attempt": 1,
        "enteredAt": entered,
        "finishedAt": None,
        "nextDueAt": None,
        "leaseExpiresAt": None,
        "failureCode": "transport-uncertain" if state == "unknown" else None,
        "route": route,
        "operation": operation,
        "effect": effect,
        "commandPrepared": True,
        "uncertain": state == "unknown",
        "receiptExpired": False,
    }


def inspection(digest: str) -> dict[str, Any]:
    """A reviewed-notice run that timed out waiting and is stuck on an unknown withdrawal."""
    return {
        "run": {
            "runId": RUN_ID,
            "workflowId": "reviewed-notice",
            "workflowVersion": "1",
            "revision": digest,
            "definitionDigest": digest,
            "bindingDigest": digest,
            "origin": "api",
            "trigger": None,
            "status": "attention",
            "step": "withdraw-after-timeout",
            "admittedAt": "2025-01-01T10:00:00.000Z",
            "deadlineAt": "2025-02-01T10:00:00.000Z",
            "completedAt": None,
            "nextDueAt": None,
            "cancelRequested": False,
            "restoreReview": False,
            "uncertain": True,
            "outcome": None,
            "output": None,
            "failureCode": "transport-uncertain",
            "payloadErased": False,
        },
        "steps": [
            _call(
                "read-application",
                "breg.read-record/v1",
                "read",
                "delivered",
                {"kind": "next"},
                "2025-01-01T10:00:00.000Z",
            ),
            _call(
                "request-review",
                "casework.submit-review-request/v1",
                "mutation",
                "delivered",
                {"kind": "next"},
                "2025-01-01T10:00:01.000Z",
            ),
            {
                "step": "await-review",
                "type": "wait-for",
                "state": "delivered",
                "generation": 1,
                "attempt": 0,
                "enteredAt": "2025-01-01T10:00:02.000Z",
                "finishedAt": "2025-01-08T10:00:02.000Z",
                "nextDueAt": None,
                "leaseExpiresAt": None,
                "failureCode": None,
                "route": {"kind": "timeout"},
                "wait": {
                    "call": "request-review",
                    "completion": "result",
                    "startedAt": "2025-01-01T10:00:02.000Z",
                    "timeoutAt": "2025-01-08T10:00:02.000Z",
                    "intervalSeconds": 900,
                    "observations": 672,
                    "lastObservedAt": "2025-01-08T09:45:00.000Z",
                    "nextObservationAt": None,
                    "result": "timed-out",
                },
            },
            _call(
                "withdraw-after-timeout",
                "casework.withdraw-review-request/v1",
                "mutation",
                "unknown",
                None,
                "2025-01-08T10:00:02.000Z",
            ),
        ],
        "effects": [
            {
                "step": "request-review",
                "operation": "casework.submit-review-request/v1",
                "state": "accepted",
                "settledBy": "response",
            },
            {
                "step": "withdraw-after-timeout",
                "operation": "casework.withdraw-review-request/v1",
                "state": "unknown",
                "settledBy": None,
            },
        ],
        "recovery": {
            "retryAllowed": True,
            "retryBlockedBy": None,
            "reconcileAllowed": True,
            "reconcileBlockedBy": None,
        },
    }


def inspect_argv(remote: list[str], *extra: str) -> list[str]:
    return [*remote, "inspect", "--run", RUN_ID, *extra]


def test_inspect_graph_mermaid_draws_the_run_path_in_words(
    capsys: pytest.CaptureFixture[str], service: FakeService, remote: list[str]
) -> None:
    digest = explained(capsys, REVIEWED)["definitionDigest"]
    service.body = inspection(digest)
    code, out, err = run(
        capsys, *inspect_argv(remote, "--graph", "mermaid", "--project", str(REVIEWED))
    )
    assert code == 0, err
    assert service.paths == [f"/v1/runs/{RUN_ID}/inspect"]
    assert out.startswith("flowchart TD\n")
    assert "withdraw-after-timeout<br/><small>casework.withdraw-review-request/v1</small>" in out
    assert "<small>now: unknown, effect unknown</small>" in out
    assert "<small>delivered, effect accepted</small>" in out
    taken = [line.strip() for line in out.splitlines() if "(taken)" in line]
    assert taken == [
        's0 ==>|"success (taken)"| s1',
        's1 ==>|"success (taken)"| s2',
        's2 ==>|"timeout (taken)"| s8',
    ]
    assert "class s8 current" in out
    assert TOKEN not in out + err


def test_inspect_graph_svg_marks_the_current_step_and_the_taken_routes(
    capsys: pytest.CaptureFixture[str], service: FakeService, remote: list[str], tmp_path: Path
) -> None:
    digest = explained(capsys, REVIEWED)["definitionDigest"]
    service.body = inspection(digest)
    code, out, _ = run(capsys, *inspect_argv(remote, "--graph", "svg", "--project", str(REVIEWED)))
    assert code == 0
    steps, routes = svg_structure(out)
    assert len(steps) == 15
    assert [(s, t) for s, t, label in routes if label.endswith("(taken)")] == [
        ("read-application", "request-review"),
        ("request-review", "await-review"),
        ("await-review", "withdraw-after-timeout"),
    ]
    root = ET.fromstring(out.encode())
    current = [g for g in root.iter(SVG + "g") if "current" in (g.get("class") or "").split()]
    assert [g.get("id") for g in current] == ["step-withdraw-after-timeout"]
    assert [t.text for t in current[0].iter(SVG + "text")][2] == "now: unknown, effect unknown"
    assert DOCS_RUN_IMAGE.read_text(encoding="utf-8") == out, (
        "regenerate docs/images/reviewed-notice-run.svg from this test's inspection"
        " (docs/graphs.md, Regenerate)"
    )
    # the same inspection gives the same bytes; --output writes them
    target = tmp_path / "run.svg"
    code, written, _ = run(
        capsys,
        *inspect_argv(
            remote, "--graph", "svg", "--project", str(REVIEWED), "--output", str(target)
        ),
    )
    assert code == 0 and written.startswith("Wrote the svg graph of reviewed-notice to ")
    assert target.read_text(encoding="utf-8") == out


def test_inspect_graph_never_shows_a_value_of_the_run(
    capsys: pytest.CaptureFixture[str], service: FakeService, remote: list[str]
) -> None:
    digest = explained(capsys, REVIEWED)["definitionDigest"]
    body = inspection(digest)
    body["run"].update(
        status="finished",
        step="review-timed-out",
        outcome="review-timed-out",
        output={"note": CANARY},
        completedAt="2025-01-08T10:00:03.000Z",
        failureCode=None,
        uncertain=False,
    )
    service.body = body
    for style in ("mermaid", "dot", "svg"):
        code, out, err = run(
            capsys, *inspect_argv(remote, "--graph", style, "--project", str(REVIEWED))
        )
        assert code == 0, err
        assert CANARY not in out + err


def test_inspect_graph_refuses_a_run_of_another_definition(
    capsys: pytest.CaptureFixture[str], service: FakeService, remote: list[str]
) -> None:
    service.body = inspection(OTHER_DIGEST)
    code, out, err = run(
        capsys, *inspect_argv(remote, "--graph", "svg", "--project", str(REVIEWED))
    )
    assert code == 1 and out == ""
    assert "coordinator.command.graph-definition-mismatch" in err
    assert OTHER_DIGEST in err
    code, document = report(
        capsys, *inspect_argv(remote, "--graph", "mermaid", "--project", str(REVIEWED))
    )
    assert code == 1 and document["status"] == "domain-refusal"
    assert [d["code"] for d in document["diagnostics"]] == [
        "coordinator.command.graph-definition-mismatch"
    ]
    assert "run" not in document, "a refused picture reports no inspection"


def test_inspect_graph_refuses_a_step_the_graph_lacks(
    capsys: pytest.CaptureFixture[str], service: FakeService, remote: list[str]
) -> None:
    digest = explained(capsys, REVIEWED)["definitionDigest"]
    body = inspection(digest)
    body["steps"][3]["step"] = "somewhere-else"
    service.body = body
    code, document = report(
        capsys, *inspect_argv(remote, "--graph", "svg", "--project", str(REVIEWED))
    )
    assert code == 1
    assert [d["code"] for d in document["diagnostics"]] == [
        "coordinator.command.graph-definition-mismatch"
    ]


@pytest.mark.parametrize(
    "extra",
    [["--graph", "svg"], ["--project", str(REVIEWED)], ["--output", "/tmp/never-written.svg"]],
)
def test_inspect_graph_and_project_need_each_other_and_nothing_is_sent(
    capsys: pytest.CaptureFixture[str], service: FakeService, remote: list[str], extra: list[str]
) -> None:
    code, document = report(capsys, *inspect_argv(remote, *extra))
    assert code == 2
    assert [d["code"] for d in document["diagnostics"]] == ["coordinator.command.usage"]
    assert service.paths == []


def test_inspect_graph_over_an_invalid_project_reports_it_and_sends_nothing(
    capsys: pytest.CaptureFixture[str], service: FakeService, remote: list[str], tmp_path: Path
) -> None:
    code, document = report(
        capsys, *inspect_argv(remote, "--graph", "svg", "--project", str(tmp_path / "absent"))
    )
    assert code != 0
    assert document["diagnostics"]
    assert service.paths == []


@pytest.mark.usefixtures("no_converter")
def test_inspect_graph_png_without_a_converter_is_tool_missing_and_sends_nothing(
    capsys: pytest.CaptureFixture[str], service: FakeService, remote: list[str], tmp_path: Path
) -> None:
    code, document = report(
        capsys,
        *inspect_argv(
            remote,
            "--graph",
            "png",
            "--project",
            str(REVIEWED),
            "--output",
            str(tmp_path / "r.png"),
        ),
    )
    assert code == 2
    assert [d["code"] for d in document["diagnostics"]] == [
        "coordinator.command.graph-tool-missing"
    ]
    assert service.paths == []


def test_inspect_without_graph_is_unchanged(
    capsys: pytest.CaptureFixture[str], service: FakeService, remote: list[str]
) -> None:
    service.body = inspection(OTHER_DIGEST)
    code, out, _ = run(capsys, *inspect_argv(remote))
    assert code == 0
    assert out.startswith("Run:")
