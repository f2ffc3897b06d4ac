"""`coordinatorctl test` through the real command line (issue 13 items 3 and 4): every case on
its own line, expected against actual for each failure, the closing count, the same detail in
JSON, the `--junit` report; `init` then `test`; a project at a repository root."""

from __future__ import annotations

import io
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import jsonschema
import pytest

from coordinatorctl.cli import main

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "delayed-follow-up"
REPORT_SCHEMA = json.loads(
    (REPO / "spec" / "schemas" / "ctl-report.schema.json").read_text(encoding="utf-8")
)
CANARY = "CANARY-t3st-91b"
ROUTE_MEMBER = {"next": "next", "timeout": "onTimeout", "cancel": "onCancel"}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def report(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code, out, _ = run(capsys, *argv, "--format", "json")
    assert out.endswith("\n") and out.count("\n") == 1
    document = json.loads(out)
    jsonschema.Draft202012Validator(REPORT_SCHEMA).validate(document)
    return code, document


def _replace_case(text: str, case_id: str, old: str, new: str) -> str:
    start = text.index(f"  - id: {case_id}\n")
    end = text.find("\n  - id: ", start + 1)
    end = len(text) if end < 0 else end
    block = text[start:end]
    assert old in block, (case_id, old)
    return text[:start] + block.replace(old, new, 1) + text[end:]


@pytest.fixture
def failing(tmp_path: Path) -> Path:
    """The delayed-follow-up example with four broken cases (and a canary in replies and in an
    expected output, which must never be shown)."""
    project = tmp_path / "failing"
    shutil.copytree(EXAMPLE, project)
    text = (project / "scenarios.yaml").read_text(encoding="utf-8")
    text = text.replace("applicantName: Ada Example", f"applicantName: {CANARY}")
    # 0: elapsed time only
    text = _replace_case(
        text, "follow-up-sent", "workflowElapsedSeconds: 259200", "workflowElapsedSeconds: 259201"
    )
    # 1: the steps
    text = _replace_case(
        text,
        "no-flag-skipped",
        "path: [due, read-application, permission, skipped]",
        "path: [due, read-application, permission, notify, accepted]",
    )
    # 2: status, outcome, output, failure code and effects
    text = _replace_case(
        text,
        "string-flag-skipped",
        "      status: finished\n",
        "      status: attention\n",
    )
    text = _replace_case(
        text,
        "string-flag-skipped",
        "outcome: {type: named, value: no-current-permission}",
        "outcome: {type: named, value: message-accepted}",
    )
    text = _replace_case(text, "string-flag-skipped", "output: null", f"output: {{id: {CANARY}}}")
    text = _replace_case(
        text,
        "string-flag-skipped",
        "      effects: []\n",
        "      effects: [{step: notify, state: unknown}]\n      failureCode: transport-uncertain\n",
    )
    # 6: a document rule stops the case (an undeclared step in the expected path)
    text = _replace_case(text, "cancelled-while-due", "path: [due]", "path: [due, nowhere]")
    (project / "scenarios.yaml").write_text(text, encoding="utf-8")
    return project


def test_failing_cases_text_shows_every_case_and_expected_against_actual(
    capsys: pytest.CaptureFixture[str], failing: Path
) -> None:
    code, out, err = run(capsys, "test", "--project", str(failing))
    assert code == 1
    lines = out.splitlines()
    heads = [line for line in lines if line.startswith(("PASS ", "FAIL "))]
    assert len(heads) == 12
    assert heads[:3] == [
        "FAIL follow-up-sent finished message-accepted 259200s",
        "FAIL no-flag-skipped finished no-current-permission 259200s",
        "FAIL string-flag-skipped finished no-current-permission 259200s",
    ]
    assert "PASS past-instant-runs-at-once finished message-accepted 0s" in heads
    assert "FAIL cancelled-while-due not run" in heads
    assert lines[-1] == "8 passed, 4 failed"
    assert lines[-2] == "routes covered: 5 of 5 (100.0%)"
    detail = out.split("FAIL follow-up-sent", 1)[1].split("FAIL no-flag-skipped", 1)[0]
    assert "workflowElapsedSeconds  expected: 259201s" in detail
    assert "actual:   259200s" in detail
    detail = out.split("FAIL no-flag-skipped", 1)[1].split("FAIL string-flag-skipped", 1)[0]
    assert (
        "path                    expected: due, read-application, permission, notify, accepted"
        in detail
    )
    assert "actual:   due, read-application, permission, skipped" in detail
    detail = out.split("FAIL string-flag-skipped", 1)[1].split("PASS", 1)[0].splitlines()[1:]
    assert [line.split()[0] for line in detail if not line.lstrip().startswith("actual")] == [
        "status",
        "outcome",
        "output",
        "failureCode",
        "effects",
    ]
    assert "  status                  expected: attention" in detail
    assert "  outcome                 expected: message-accepted" in detail
    assert "  failureCode             expected: transport-uncertain" in detail
    assert "  effects                 expected: notify unknown" in detail
    assert any(line.startswith("  output ") and "differs" in line for line in detail)
    not_run = out.split("FAIL cancelled-while-due not run\n", 1)[1].splitlines()[0]
    assert not_run.startswith("  coordinator.scenarios.unknown-reference at /cases/6/expect/path/1")
    # the diagnostics follow on stderr, one per failed case
    assert err.count("error[coordinator.scenario.expectation]") == 3
    assert err.splitlines()[-1] == "4 errors, 0 warnings in 1 file"
    assert CANARY not in out and CANARY not in err


def test_a_runner_error_is_shown_under_its_case(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    project = tmp_path / "leftover"
    shutil.copytree(EXAMPLE, project)
    text = (project / "scenarios.yaml").read_text(encoding="utf-8")
    text = _replace_case(
        text,
        "follow-up-sent",
        "      notify:\n",
        "      notify:\n        - type: retryable\n          code: transport-unavailable\n"
        "        - type: retryable\n          code: transport-unavailable\n"
        "        - type: retryable\n          code: transport-unavailable\n"
        "        - type: retryable\n          code: transport-unavailable\n"
        "        - type: retryable\n          code: transport-unavailable\n"
        "        - type: retryable\n          code: transport-unavailable\n"
        "        - type: retryable\n          code: transport-unavailable\n"
        "        - type: retryable\n          code: transport-unavailable\n"
        "        - type: retryable\n          code: transport-unavailable\n"
        "        - type: retryable\n          code: transport-unavailable\n",
    )
    (project / "scenarios.yaml").write_text(text, encoding="utf-8")
    code, out, err = run(capsys, "test", "--project", str(project))
    assert code == 1
    head = next(line for line in out.splitlines() if " follow-up-sent " in line)
    assert head.startswith("FAIL follow-up-sent ")
    below = out.split(head + "\n", 1)[1].splitlines()[0]
    code_shown = below.split()[0]
    assert code_shown.startswith("coordinator.") and code_shown in err
    assert out.splitlines()[-1] == "11 passed, 1 failed"


def test_failing_cases_json_carries_the_same_detail(
    capsys: pytest.CaptureFixture[str], failing: Path
) -> None:
    code, document = report(capsys, "test", "--project", str(failing))
    assert code == 1 and document["status"] == "domain-refusal"
    assert document["counts"] == {"passed": 8, "failed": 4}
    cases = {case["id"]: case for case in document["scenarios"]}
    assert cases["follow-up-sent"]["differences"] == [
        {"member": "workflowElapsedSeconds", "expected": 259201, "actual": 259200}
    ]
    assert cases["no-flag-skipped"]["differences"] == [
        {
            "member": "path",
            "expected": ["due", "read-application", "permission", "notify", "accepted"],
            "actual": ["due", "read-application", "permission", "skipped"],
        }
    ]
    assert cases["string-flag-skipped"]["differences"] == [
        {"member": "status", "expected": "attention", "actual": "finished"},
        {
            "member": "outcome",
            "expected": {"type": "named", "value": "message-accepted"},
            "actual": {"type": "named", "value": "no-current-permission"},
        },
        {"member": "output"},
        {"member": "failureCode", "expected": "transport-uncertain", "actual": None},
        {
            "member": "effects",
            "expected": [{"step": "notify", "state": "unknown"}],
            "actual": [],
        },
    ]
    assert cases["follow-up-retried"]["differences"] == []
    assert cases["cancelled-while-due"] == {"id": "cancelled-while-due", "passed": False}
    assert CANARY not in json.dumps([case.get("differences") for case in document["scenarios"]])


def test_junit_report_has_one_testcase_per_case_and_is_replaced(
    capsys: pytest.CaptureFixture[str], failing: Path, tmp_path: Path
) -> None:
    target = tmp_path / "reports" / "scenarios.xml"
    code, out, _ = run(capsys, "test", "--project", str(failing), "--junit", str(target))
    assert code == 1 and out.splitlines()[-1] == "8 passed, 4 failed"
    first = target.read_bytes()
    root = ElementTree.fromstring(first)
    assert root.tag == "testsuites"
    [suite] = root.findall("testsuite")
    assert suite.get("name") == "delayed-follow-up"
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("12", "4", "0")
    testcases = suite.findall("testcase")
    assert [case.get("classname") for case in testcases] == ["delayed-follow-up"] * 12
    failures = {case.get("name"): case.find("failure") for case in testcases}
    assert sum(1 for failure in failures.values() if failure is not None) == 4
    elapsed = failures["follow-up-sent"]
    assert elapsed is not None
    assert elapsed.get("type") == "coordinator.scenario.expectation"
    assert elapsed.get("message") == "workflowElapsedSeconds differs from the expectation."
    assert "expected: 259201s" in (elapsed.text or "") and "actual:   259200s" in (
        elapsed.text or ""
    )
    not_run = failures["cancelled-while-due"]
    assert not_run is not None and not_run.get("type") == "coordinator.scenarios.unknown-reference"
    assert failures["follow-up-retried"] is None
    assert CANARY.encode() not in first
    # a second run replaces the report (the usual CI behaviour): now every case passes
    shutil.copy(EXAMPLE / "scenarios.yaml", failing / "scenarios.yaml")
    code, _, _ = run(capsys, "test", "--project", str(failing), "--junit", str(target))
    assert code == 0
    suite = ElementTree.fromstring(target.read_bytes()).findall("testsuite")[0]
    assert (suite.get("tests"), suite.get("failures")) == ("12", "0")
    assert not list(target.parent.glob(".*.tmp")), "no temporary file is left behind"


def test_junit_report_when_no_case_can_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    project = tmp_path / "no-scenarios"
    shutil.copytree(EXAMPLE, project)
    (project / "scenarios.yaml").unlink()
    target = tmp_path / "junit.xml"
    target.write_text("<testsuites><testsuite tests='99'/></testsuites>")
    code, _, err = run(capsys, "test", "--project", str(project), "--junit", str(target))
    assert code == 3 and "coordinator.command.input-unavailable" in err
    root = ElementTree.fromstring(target.read_bytes())
    [case] = root.iter("testcase")
    failure = case.find("failure")
    assert failure is not None and failure.get("type") == "coordinator.command.input-unavailable"
    assert root.get("tests") == "1" and root.get("failures") == "1"


def test_junit_never_replaces_a_project_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    project = tmp_path / "p"
    shutil.copytree(EXAMPLE, project)
    before = (project / "scenarios.yaml").read_bytes()
    code, document = report(
        capsys, "test", "--project", str(project), "--junit", str(project / "scenarios.yaml")
    )
    assert code == 2 and document["diagnostics"][0]["code"] == "coordinator.command.usage"
    assert (project / "scenarios.yaml").read_bytes() == before


def test_junit_unwritable_is_exit_3(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, document = report(
        capsys, "test", "--project", str(EXAMPLE), "--junit", str(blocker / "junit.xml")
    )
    assert code == 3
    assert [d["code"] for d in document["diagnostics"]] == [
        "coordinator.command.output-unavailable"
    ]
    assert document["counts"] == {"passed": 12, "failed": 0}


def _explained_routes(capsys: pytest.CaptureFixture[str], project: Path) -> list[str]:
    """Every route of the graph, from `explain`, as the pointer of its member in workflow.yaml."""
    code, explained = report(capsys, "explain", "--project", str(project))
    assert code == 0, explained["diagnostics"]
    routes = []
    for step in explained["steps"]:
        for route in step["routes"]:
            kind = route["kind"]
            if kind == "case":
                routes.append(f"/steps/{step['id']}/cases/{route['label']}")
            elif kind == "refusal":
                routes.append(f"/steps/{step['id']}/onDeclaredRefusal/{route['code']}")
            else:
                routes.append(f"/steps/{step['id']}/{ROUTE_MEMBER[kind]}")
    return routes


def test_init_then_test_passes_and_covers_every_route(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    target = tmp_path / "follow-up"
    code, initialized = report(capsys, "init", "--directory", str(target))
    assert code == 0 and "scenarios.yaml" in initialized["files"]
    code, out, err = run(capsys, "test", "--project", str(target))
    assert code == 0, err
    assert out.splitlines()[-1].endswith(" passed, 0 failed")
    code, tested = report(capsys, "test", "--project", str(target))
    assert code == 0 and tested["status"] == "passed"
    assert all(case["passed"] for case in tested["scenarios"])
    routes = _explained_routes(capsys, target)
    assert len(routes) >= 5 and any("/cases/" in route for route in routes)
    assert tested["coverage"]["routes"] == routes
    assert tested["coverage"]["covered"] == routes and tested["coverage"]["uncovered"] == []
    taken = {route for case in tested["scenarios"] for route in case["routes"]}
    assert taken == set(routes)


def test_a_project_at_a_repository_root_checks_and_tests_clean(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    root = tmp_path / "repository"
    shutil.copytree(EXAMPLE, root)
    (root / "docker-compose.yml").write_text(
        "x-env: &env\n  TZ: UTC\nservices:\n  db:\n    image: postgres:16\n    environment: *env\n",
        encoding="utf-8",
    )
    (root / ".pre-commit-config.yaml").write_text(
        "repos:\n  - repo: https://github.com/pre-commit/pre-commit-hooks\n    rev: v4.6.0\n"
        "    hooks:\n      - id: trailing-whitespace\n",
        encoding="utf-8",
    )
    (root / "mkdocs.yml").write_text("site_name: Follow-up\n", encoding="utf-8")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n", encoding="utf-8")
    (root / ".github" / "workflows").mkdir(parents=True)
    (root / ".github" / "workflows" / "ci.yml").write_text("on: [push]\n", encoding="utf-8")
    (root / "compose.override.yml").symlink_to(root / "docker-compose.yml")
    code, checked = report(capsys, "check", "--project", str(root), "--deny-warnings")
    assert code == 0 and checked["diagnostics"] == [], checked["diagnostics"]
    assert checked["scenarios"] == {"passed": 12, "failed": 0}
    code, tested = report(capsys, "test", "--project", str(root))
    assert code == 0 and tested["diagnostics"] == []
    code, out, err = run(capsys, "test", "--project", str(root))
    assert code == 0 and err == "" and out.splitlines()[-1] == "12 passed, 0 failed"


def test_a_misplaced_project_file_is_still_reported(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    project = tmp_path / "p"
    shutil.copytree(EXAMPLE, project)
    shutil.copy(EXAMPLE / "scenarios.yaml", project / "my-scenarios.yaml")
    code, checked = report(capsys, "check", "--project", str(project))
    assert code == 1
    assert [(d["code"], d["source"]["file"]) for d in checked["diagnostics"]] == [
        ("coordinator.project.misplaced-kind", "my-scenarios.yaml")
    ]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_pass_and_fail_are_coloured_only_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch, failing: Path
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    outputs = []
    for stream in (io.StringIO(), _Terminal()):
        monkeypatch.setattr(sys, "stdout", stream)
        monkeypatch.setattr(sys, "stderr", io.StringIO())
        assert main(["test", "--project", str(failing)]) == 1
        outputs.append(stream.getvalue())
    plain, coloured = outputs
    assert "\x1b[" not in plain and plain.splitlines()[0].startswith("FAIL follow-up-sent")
    assert "\x1b[" in coloured
    assert re.sub(r"\x1b\[[0-9;]*m", "", coloured) == plain


# -- rule C13: a scripted reply must be an output the product can give (04 §3) ---------------


def test_an_impossible_reply_fails_test_with_reply_shape_and_the_case_does_not_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    project = tmp_path / "reviewed-notice"
    shutil.copytree(REPO / "examples" / "reviewed-notice", project)
    text = (project / "scenarios.yaml").read_text(encoding="utf-8")
    text = _replace_case(
        text,
        "approved",
        "            requestId: feee46df-d0fd-4064-8630-f1cc2d973a2e\n",
        f"            unexpected: {CANARY}\n",
    )
    (project / "scenarios.yaml").write_text(text, encoding="utf-8")
    code, document = report(capsys, "test", "--project", str(project))
    assert code == 1 and document["status"] == "domain-refusal"
    (diagnostic,) = document["diagnostics"]
    assert diagnostic["code"] == "coordinator.scenarios.reply-shape"
    assert diagnostic["path"] == "/cases/0/replies/request-review/0/value"
    assert "casework.submit-review-request/v1" in diagnostic["message"]
    assert "`required`" in diagnostic["message"] and "requestId" in diagnostic["message"]
    assert CANARY not in json.dumps(document)
    code, _, err = run(capsys, "check", "--project", str(project))
    assert code == 1 and "error[coordinator.scenarios.reply-shape]" in err


def test_with_a_runtime_file_external_replies_must_match_its_response_schema(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`external-http.get/v1` outputs are `{status, body}` for any status; the connection's
    `responseSchema` (this example's: status 200 with a `holidays` array) applies when
    `--runtime-config` names the runtime file."""
    project = tmp_path / "holiday-routing"
    shutil.copytree(REPO / "examples" / "holiday-routing", project)
    text = (project / "scenarios.yaml").read_text(encoding="utf-8")
    text = text.replace("            status: 200\n", "            status: 203\n", 1)
    (project / "scenarios.yaml").write_text(text, encoding="utf-8")
    runtime = str(project / "runtime.yaml")
    code, document = report(capsys, "test", "--project", str(project))
    assert code == 0, document["diagnostics"]  # a 203 is a possible output of the operation
    code, document = report(capsys, "test", "--project", str(project), "--runtime-config", runtime)
    assert code == 1
    shapes = [
        d for d in document["diagnostics"] if d["code"] == "coordinator.scenarios.reply-shape"
    ]
    assert [d["path"] for d in shapes] == ["/cases/0/replies/read-holidays/0/value"]
    assert "responseSchema of connection holidays" in shapes[0]["message"]
    assert "`const` fails at /status" in shapes[0]["message"]


# -- a failed mapping names its cause, its function and its statement (issue 26) -------------


def test_a_failing_function_is_explained_by_cause_function_and_position(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    project = tmp_path / "delayed-follow-up"
    shutil.copytree(EXAMPLE, project)
    functions = (project / "functions.rhai").read_text(encoding="utf-8")
    broken = functions.replace(
        "    if application.data.domainData.followUpAllowed == true {",
        "    if application.data.details.followUpAllowed == true {",
    )
    assert broken != functions
    (project / "functions.rhai").write_text(broken, encoding="utf-8")
    code, document = report(capsys, "test", "--project", str(project))
    assert code == 1
    failed = [c for c in document["scenarios"] if c["mappingFailure"] is not None]
    assert failed and all(
        c["mappingFailure"]["code"] == "coordinator.function.execution" for c in failed
    )
    expectation = next(
        d for d in document["diagnostics"] if d["code"] == "coordinator.scenario.expectation"
    )
    why = expectation["related"][-1]
    assert why["file"] == "functions.rhai" and (why["line"], why["column"]) == (11, 5)
    assert why["message"] == (
        "Function notice_route failed with coordinator.function.execution (property-of-unit)"
        " at line 11, column 5 of functions.rhai."
    )
    code, _, err = run(capsys, "test", "--project", str(project))
    assert "note: functions.rhai:11:5" in err


def test_eval_names_the_cause_the_function_and_the_statement_with_a_frame(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    functions = tmp_path / "functions.rhai"
    functions.write_text(
        "fn eligibility_route(application) {\n"
        '    if application.data.renewable == true { "renew" } else { "new" }\n'
        "}\n"
        "fn pick(items) { helper(items) }\n"
        "private fn helper(items) { items[3] }\n",
        encoding="utf-8",
    )
    code, _, err = run(
        capsys,
        "eval",
        "--functions",
        str(functions),
        "--function",
        "eligibility_route",
        "--arguments",
        f'[{{"data": null, "secret": "{CANARY}"}}]',
    )
    assert code == 1
    assert f"error[coordinator.function.execution] {functions}:2:5 /" in err
    assert (
        "Function eligibility_route failed during execution: it read a property of unit `()`,"
        " the value of a missing member." in err
    )
    assert "next: Read through a member that may be missing with `?.`" in err
    assert "coordinatorctl eval" not in err.split("next:")[1].split("\n")[0]
    assert "  2 |     if application.data.renewable == true" in err
    assert CANARY not in err
    code, document = report(
        capsys, "eval", "--functions", str(functions), "--function", "pick", "--arguments", "[[1]]"
    )
    (diagnostic,) = document["diagnostics"]
    assert diagnostic["message"] == (
        "Function helper failed during execution: it indexed an array or a string past its end."
    )
    assert diagnostic["source"] == {"file": str(functions), "line": 5, "column": 28}


def test_a_project_without_scenarios_says_so_and_how_to_start_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for name in ("workflow.yaml", "functions.rhai"):
        (tmp_path / name).write_bytes((EXAMPLE / name).read_bytes())
    code, document = report(capsys, "test", "--project", str(tmp_path))
    [diagnostic] = document["diagnostics"]
    assert code == 3 and diagnostic["code"] == "coordinator.command.input-unavailable"
    assert diagnostic["message"] == "The project has no scenarios.yaml: there is nothing to test."
    assert "--scenarios" in diagnostic["suggestedAction"]
