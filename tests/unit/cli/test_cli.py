"""The command line: envelope, exit codes, usage errors, init, schema, explain and eval (09 §2)."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from coordinatorctl.cli import main

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"
REPORT_SCHEMA = json.loads(
    (REPO / "spec" / "schemas" / "ctl-report.schema.json").read_text(encoding="utf-8")
)
CANARY = "CANARY-c1i-5e7a"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def report(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code, out, _ = run(capsys, *argv, "--format", "json")
    assert out.endswith("\n") and out.count("\n") == 1, "exactly one JSON object and a line feed"
    document = json.loads(out)
    jsonschema.Draft202012Validator(REPORT_SCHEMA).validate(document)
    return code, document


@pytest.mark.parametrize(
    "argv",
    [
        [f"--{CANARY}"],
        ["check", f"--{CANARY}"],
        ["check", "--project"],
        [CANARY],
        ["schema", CANARY],
        ["explain", "--project", "x", "--graph", CANARY],
        ["--format", CANARY],
    ],
)
def test_usage_errors_never_echo_the_offending_argument(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert CANARY not in out + err
    assert "coordinator.cli.usage" in err


def test_usage_error_in_json_mode_is_the_usage_envelope(capsys: pytest.CaptureFixture[str]) -> None:
    code, document = report(capsys, "check", f"--{CANARY}")
    assert code == 2
    assert document["command"] == "usage"
    assert document["status"] == "usage-error"
    assert [d["code"] for d in document["diagnostics"]] == ["coordinator.cli.usage"]
    assert CANARY not in json.dumps(document)


def test_check_without_project_or_runtime_is_command_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, document = report(capsys, "check")
    assert code == 2
    assert document["diagnostics"][0]["code"] == "coordinator.command.usage"


def test_global_flags_work_before_and_after_the_subcommand(
    capsys: pytest.CaptureFixture[str],
) -> None:
    project = str(EXAMPLES / "delayed-follow-up")
    before = main(["--format", "json", "check", "--project", project])
    first = capsys.readouterr().out
    after = main(["check", "--project", project, "--format", "json"])
    second = capsys.readouterr().out
    assert before == after == 0
    assert json.loads(first) == json.loads(second)


@pytest.mark.parametrize("example", ["reviewed-notice", "delayed-follow-up"])
def test_check_reports_valid_with_identities(
    capsys: pytest.CaptureFixture[str], example: str
) -> None:
    code, document = report(capsys, "check", "--project", str(EXAMPLES / example))
    assert code == 0
    assert document["status"] == "valid"
    assert document["workflow"] == example
    assert document["revision"].startswith("sha256:")
    assert document["definitionDigest"].startswith("sha256:")


def test_check_text_mode_prints_three_lines(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "check", "--project", str(EXAMPLES / "delayed-follow-up"))
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == "Valid workflow delayed-follow-up version 1"
    assert lines[1].startswith("Revision: sha256:")
    assert lines[2].startswith("Definition: sha256:")


def test_missing_project_is_exit_3(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, document = report(capsys, "check", "--project", str(tmp_path / "absent"))
    assert code == 3
    assert document["status"] == "operational-failure"
    assert document["diagnostics"][0]["code"] == "coordinator.definition.read"


def test_deny_warnings_turns_a_warning_into_a_refusal(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    project = tmp_path / "p"
    project.mkdir()
    for name in ("workflow.yaml", "functions.rhai"):
        (project / name).write_bytes((EXAMPLES / "delayed-follow-up" / name).read_bytes())
    (project / "drafts").mkdir()  # P4: an unread directory is a warning
    code, document = report(capsys, "check", "--project", str(project))
    assert code == 0 and document["status"] == "valid-with-warnings"
    code, document = report(capsys, "check", "--project", str(project), "--deny-warnings")
    assert code == 1 and document["status"] == "domain-refusal"


def test_explain_reports_structure_and_never_literal_values(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, document = report(capsys, "explain", "--project", str(EXAMPLES / "reviewed-notice"))
    assert code == 0
    steps = {step["id"]: step for step in document["steps"]}
    assert document["steps"][0]["id"] == "read-application"
    assert steps["send-notice"]["available"] == [
        "await-review",
        "read-application",
        "request-review",
    ]
    assert steps["withdraw-after-timeout"]["available"] == ["read-application", "request-review"]
    assert steps["await-review"]["observeOperation"] == "casework.read-review-result/v1"
    assert steps["await-review"]["defaultIntervalSeconds"] == 900
    kinds = {route["kind"] for route in steps["await-review"]["routes"]}
    assert kinds == {"next", "timeout", "cancel"}
    assert document["networkAccess"] is False
    assert document["limits"]["operations"] == 100000
    # the literal "application-review" is a value: only its type is shown
    assert "application-review" not in json.dumps(document)


@pytest.mark.parametrize("style", ["mermaid", "dot"])
def test_explain_graph_draws_every_route(capsys: pytest.CaptureFixture[str], style: str) -> None:
    code, out, _ = run(
        capsys, "explain", "--project", str(EXAMPLES / "reviewed-notice"), "--graph", style
    )
    assert code == 0
    for label in ("success", "timeout", "cancel", "approved", "rejected", "completed"):
        assert label in out
    # reviewed-notice has 14 routes: every one is an edge of the picture
    assert out.count("->|" if style == "mermaid" else " -> ") == 14


@pytest.mark.parametrize("name", ["workflow", "runtime", "scenarios"])
def test_schema_prints_the_published_schema(capsys: pytest.CaptureFixture[str], name: str) -> None:
    code, out, _ = run(capsys, "schema", name)
    assert code == 0
    schema = json.loads(out)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$id"].startswith("https://id.registrystack.org/schemas/coordinator/")


def test_schema_operation_prints_the_output_schema_the_adapters_apply(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from coordinator_core.operations import CATALOG

    code, out, _ = run(capsys, "schema", "operation", "casework.submit-review-request/v1")
    assert code == 0
    schema = json.loads(out)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$ref"] == "#/$defs/ReviewRequestAccepted"
    assert set(schema["$defs"]) == {"Policy", "ReviewRequestAccepted", "Sha256", "Subject"}
    validator = jsonschema.Draft202012Validator(schema)
    assert not validator.is_valid({"unexpected": 1})
    code, out, _ = run(
        capsys, "schema", "operation", "casework.submit-review-request/v1", "--completion", "result"
    )
    assert code == 0 and json.loads(out)["$ref"] == "#/$defs/ReviewResult"
    for operation in CATALOG:  # every operation of the catalogue has one
        code, document = report(capsys, "schema", "operation", operation)
        assert code == 0 and document["status"] == "printed"
        jsonschema.Draft202012Validator.check_schema(document["schema"])


def test_schema_operation_lists_the_catalogue(capsys: pytest.CaptureFixture[str]) -> None:
    from coordinator_core.operations import CATALOG

    code, out, _ = run(capsys, "schema", "operation")
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()] == list(CATALOG)
    assert "casework.submit-review-request/v1      mutation   --completion result" in out
    code, document = report(capsys, "schema", "operation")
    assert [entry["id"] for entry in document["operations"]] == list(CATALOG)
    assert document["operations"][3]["completions"] == ["result"]


def test_schema_operation_refuses_an_unknown_id_without_echoing_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, document = report(capsys, "schema", "operation", f"casework.{CANARY}/v1")
    assert code == 1
    (diagnostic,) = document["diagnostics"]
    assert diagnostic["code"] == "coordinator.command.unknown-operation"
    assert CANARY not in json.dumps(document)
    code, document = report(
        capsys, "schema", "operation", "casework.submit-review-request/v1", "--completion", "rsult"
    )
    assert code == 1 and document["diagnostics"][0]["message"] == (
        "Operation casework.submit-review-request/v1 exposes no such completion."
    )
    code, document = report(capsys, "schema", "workflow", "casework.submit-review-request/v1")
    assert code == 2 and document["diagnostics"][0]["code"] == "coordinator.cli.usage"


def test_init_writes_the_starter_project_with_private_keys(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    target = tmp_path / "deeper" / "follow-up"
    code, document = report(capsys, "init", "--directory", str(target))
    assert code == 0 and document["status"] == "initialized"
    assert document["directory"] == str(target)
    assert document["files"] == [
        ".coordinator/secrets/admission.key",
        ".coordinator/secrets/audit.key",
        ".coordinator/secrets/state-1.key",
        "functions.rhai",
        "input.example.json",
        "runtime.yaml",
        "sandbox.json",
        "scenarios.yaml",
        "workflow.yaml",
    ]
    secrets = target / ".coordinator" / "secrets"
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o700
    keys = [(secrets / name).read_bytes() for name in ("admission.key", "audit.key", "state-1.key")]
    assert all(len(key) == 32 for key in keys) and len(set(keys)) == 3
    for name in ("admission.key", "audit.key", "state-1.key"):
        assert stat.S_IMODE((secrets / name).stat().st_mode) == 0o600
    runtime = (target / "runtime.yaml").read_text(encoding="utf-8")
    assert f'root: "{target}/.coordinator/secrets"' in runtime
    expected = (EXAMPLES / "delayed-follow-up" / "runtime.yaml").read_text(encoding="utf-8")
    assert runtime == expected.replace("/home/dev/delayed-follow-up", str(target))
    for name in (
        "workflow.yaml",
        "functions.rhai",
        "scenarios.yaml",
        "input.example.json",
        "sandbox.json",
    ):
        assert (target / name).read_bytes() == (EXAMPLES / "delayed-follow-up" / name).read_bytes()
    code, checked = report(capsys, "check", "--project", str(target))
    assert code == 0, checked["diagnostics"]


def test_init_never_overwrites(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, document = report(capsys, "init", "--directory", str(tmp_path))
    assert code == 1
    assert document["diagnostics"][0]["code"] == "coordinator.project.init"


def test_package_reports_digest_and_refuses_a_second_time(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    output = tmp_path / "dist" / "pkg"
    project = str(EXAMPLES / "reviewed-notice")
    code, document = report(capsys, "package", "--project", project, "--output", str(output))
    assert code == 0 and document["status"] == "packaged"
    assert document["root"] == str(output)
    assert sorted(p.name for p in output.iterdir()) == ["SHA256SUMS", "definition.json"]
    code, document = report(capsys, "package", "--project", project, "--output", str(output))
    assert code == 1
    assert document["diagnostics"][0]["code"] == "coordinator.package.output-exists"


def test_text_rendering_follows_the_block_format(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    project = tmp_path / "p"
    project.mkdir()
    workflow = (EXAMPLES / "delayed-follow-up" / "workflow.yaml").read_text(encoding="utf-8")
    (project / "workflow.yaml").write_text(
        workflow.replace("next: read-application", "next: nowhere")
    )
    (project / "functions.rhai").write_bytes(
        (EXAMPLES / "delayed-follow-up" / "functions.rhai").read_bytes()
    )
    code, out, err = run(capsys, "check", "--project", str(project))
    assert code == 1 and out == ""
    lines = err.splitlines()
    assert lines[0].startswith("error[coordinator.definition.target] workflow.yaml:")
    assert lines[0].endswith(" /steps/due/next")
    assert lines[1].startswith("  ") and lines[2].startswith("  next: ")
    assert lines[-1] == "1 error, 0 warnings in 1 file"


def _functions(tmp_path: Path, source: str) -> str:
    path = tmp_path / "functions.rhai"
    path.write_text(source, encoding="utf-8")
    return str(path)


def test_eval_prints_the_canonical_result(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys,
        "eval",
        "--functions",
        str(EXAMPLES / "reviewed-notice" / "functions.rhai"),
        "--function",
        "review_route",
        "--arguments",
        '[{"status":"approved","completedAt":"2026-03-02T09:30:00Z"}]',
    )
    assert (code, out, err) == (0, '"approved"\n', "")


def test_eval_json_envelope_carries_function_and_result(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    functions = _functions(tmp_path, "fn pair(a, b) { #{ b: b, a: a } }")
    code, document = report(
        capsys, "eval", "--functions", functions, "--function", "pair", "--arguments", "[1, 2.5]"
    )
    assert code == 0 and document["status"] == "evaluated"
    assert document["function"] == "pair" and document["result"] == {"a": 1, "b": 2.5}


@pytest.mark.parametrize(
    ("source", "function", "arguments", "expected", "exit_code"),
    [
        ("fn f(a) { a }", "f", "[1, 2]", "coordinator.function.arity", 1),
        ("fn f(a) { a }", "g", "[1]", "coordinator.function.definition", 1),
        ("private fn f(a) { a }", "f", "[1]", "coordinator.function.definition", 1),
        ("fn f(a) { a", "f", "[1]", "coordinator.function.definition", 1),
        ("fn f(a) { a }", "f", '{"a": 1}', "coordinator.command.input-invalid", 1),
        ("fn f(a) { a }", "f", '[{"k": 1, "k": 2}]', "coordinator.command.input-invalid", 1),
        ("fn f(a) { a }", "f", "[9007199254740993]", "coordinator.function.input", 1),
        ("fn f() { throw `" + CANARY + "`; }", "f", "[]", "coordinator.function.execution", 1),
        ("fn f() { loop { } }", "f", "[]", "coordinator.function.resource-limit", 1),
        ("fn f() { 1..3 }", "f", "[]", "coordinator.function.output", 1),
    ],
)
def test_eval_refusals_carry_the_contract_codes_and_never_the_value(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    source: str,
    function: str,
    arguments: str,
    expected: str,
    exit_code: int,
) -> None:
    functions = _functions(tmp_path, source)
    code, out, err = run(
        capsys, "eval", "--functions", functions, "--function", function, "--arguments", arguments
    )
    assert code == exit_code
    assert f"error[{expected}]" in err
    assert CANARY not in out + err


def test_eval_missing_file_is_exit_3(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, document = report(
        capsys, "eval", "--functions", str(tmp_path / "none.rhai"), "--function", "f",
        "--arguments", "[]",
    )  # fmt: skip
    assert code == 3
    assert document["diagnostics"][0]["code"] == "coordinator.command.input-unavailable"


def _journal(directory: Path, count: int) -> None:
    from coordinator_core.shell.audit import (
        AuditReferences,
        AuditWriter,
        api_request,
        new_correlation,
        response,
    )

    references = AuditReferences(b"k" * 32, "db-cli-test")
    with AuditWriter.open(directory, "ctl") as writer:
        for _ in range(count):
            correlation = new_correlation()
            writer.append(api_request(correlation, "status", references.actor("a" * 64)))
            writer.append(response(correlation, "status", "accepted"))


def test_audit_verify_reports_every_group_and_its_head(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    directory = tmp_path / "audit"
    _journal(directory, 3)
    code, document = report(capsys, "audit", "verify", "--directory", str(directory))
    assert code == 0
    assert document["command"] == "audit verify" and document["status"] == "verified"
    assert document["entries"] == 6 and document["files"] == 1
    assert document["groups"][0]["head"].startswith("sha256:")


def test_audit_verify_without_the_runtime_file_says_it_cannot_check_the_tail(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    directory = tmp_path / "audit"
    _journal(directory, 2)
    code, document = report(capsys, "audit", "verify", "--directory", str(directory))
    assert code == 0 and document["headsChecked"] is False
    assert [d["code"] for d in document["diagnostics"]] == ["coordinator.audit.heads-unchecked"]
    assert main(["audit", "verify", "--directory", str(directory)]) == 0
    printed = capsys.readouterr()
    assert "Verified 4 entries" in printed.out
    assert "not compared with the store's journal heads" in printed.out


def test_audit_verify_reports_a_torn_tail_not_a_broken_chain(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    directory = tmp_path / "audit"
    _journal(directory, 3)
    journal = next(directory.glob("*.jsonl"))
    journal.write_bytes(journal.read_bytes()[:-40])  # the last write failed (a full disk)
    code, document = report(capsys, "audit", "verify", "--directory", str(directory))
    assert code == 0 and document["status"] == "verified"
    torn = [d for d in document["diagnostics"] if d["code"] == "coordinator.audit.torn-tail"]
    assert [(d["source"]["file"], d["source"]["line"]) for d in torn] == [(journal.name, 6)]
    assert document["tornTails"] == [{"file": journal.name, "line": 6, "movedAside": False}]
    assert document["entries"] == 5


def test_audit_verify_names_the_broken_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    directory = tmp_path / "audit"
    _journal(directory, 3)
    journal = next(directory.glob("*.jsonl"))
    lines = journal.read_bytes().split(b"\n")
    del lines[1]  # a deleted entry breaks the chain at the line that follows it
    journal.write_bytes(b"\n".join(lines))
    code, document = report(capsys, "audit", "verify", "--directory", str(directory))
    assert code == 1
    (diagnostic,) = document["diagnostics"]
    assert diagnostic["code"] == "coordinator.audit.chain-broken"
    assert diagnostic["source"]["file"] == journal.name and diagnostic["source"]["line"] == 2


def test_audit_verify_of_a_missing_directory_is_exit_3(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, document = report(capsys, "audit", "verify", "--directory", str(tmp_path / "none"))
    assert code == 3 and document["command"] == "audit verify"


def test_a_relative_runtime_config_is_the_working_directory_s(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    example = EXAMPLES / "reviewed-notice"
    monkeypatch.chdir(example)
    code, document = report(capsys, "check", "--runtime-config", "runtime.yaml")
    assert code == 0 and document["runtimeConfig"] == str(example / "runtime.yaml")
    monkeypatch.chdir(EXAMPLES)
    code, document = report(
        capsys, "check", "--runtime-config", "./reviewed-notice/../reviewed-notice/runtime.yaml"
    )
    assert code == 0 and document["runtimeConfig"] == str(example / "runtime.yaml")
    # An absolute path keeps its rule: no `.` or `..` segments.
    code, document = report(capsys, "check", "--runtime-config", f"{example}/../x/runtime.yaml")
    assert code == 2 and "must not have . or .. segments" in document["diagnostics"][0]["message"]


def test_every_subcommand_of_the_parser_has_one_handler_and_no_handler_is_orphaned() -> None:
    import argparse

    from coordinatorctl import cli

    parser = cli.build_parser()
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(subparsers.choices) == set(cli._HANDLERS)
