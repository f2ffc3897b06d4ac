"""Diagnostics like the best linters: code frame, caret, "did you mean", a hint per condition.

Each test runs the real CLI (`coordinatorctl check --project …` through `main()`) on a copy of
examples/reviewed-notice with one authored mistake, in text and JSON mode, and checks that no
data value (a literal, a schema value, a string in functions.rhai, an environment default in
runtime.yaml) ever comes out, frame included (contract 02 §1 item 2).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from coordinatorctl.cli import main

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "reviewed-notice"
REPORT_SCHEMA = json.loads(
    (REPO / "spec" / "schemas" / "ctl-report.schema.json").read_text(encoding="utf-8")
)
CANARY = "CANARY-d1a9-0b5e"


def _project(tmp_path: Path, **edits: list[tuple[str, str]]) -> Path:
    """A copy of reviewed-notice with `(old, new)` replacements per file (each must apply)."""
    project = tmp_path / "project"
    shutil.copytree(EXAMPLE, project)
    for name, replacements in edits.items():
        path = project / name.replace("_", ".")
        text = path.read_text(encoding="utf-8")
        for old, new in replacements:
            assert old in text, (name, old)
            text = text.replace(old, new, 1)
        path.write_text(text, encoding="utf-8")
    return project


def _check(capsys: pytest.CaptureFixture[str], project: Path) -> tuple[str, dict[str, Any]]:
    """The text-mode stderr and the JSON report of one check (both never hold a canary)."""
    code = main(["check", "--project", str(project)])
    text = capsys.readouterr()
    assert code == 1 and text.out == ""
    json_code = main(["--format", "json", "check", "--project", str(project)])
    out = capsys.readouterr().out
    assert json_code == 1
    document = json.loads(out)
    jsonschema.Draft202012Validator(REPORT_SCHEMA).validate(document)
    assert CANARY not in text.err, "a data value reached the text report"
    assert CANARY not in out, "a data value reached the JSON report"
    return text.err, document


def _block(err: str, code: str, path: str) -> list[str]:
    """The text block of the diagnostic with this code and pointer."""
    blocks: list[list[str]] = []
    for line in err.splitlines():
        if line.startswith("  ") and blocks:
            blocks[-1].append(line)
        else:
            blocks.append([line])
    for block in blocks:
        if block[0].startswith(f"error[{code}] ") and block[0].endswith(f" {path}"):
            return block
    raise AssertionError(f"no block for {code} {path} in:\n{err}")


def _diagnostic(document: dict[str, Any], code: str, path: str) -> dict[str, Any]:
    found = [d for d in document["diagnostics"] if d["code"] == code and d["path"] == path]
    assert len(found) == 1, document["diagnostics"]
    return found[0]


def _frame(block: list[str], shown_line: str, column: int, width: int) -> None:
    """The block shows `shown_line` with a caret run of `width` under its 1-based `column`."""
    rows = [i for i, line in enumerate(block) if re.match(r"^  \d+ \| ", line)]
    assert len(rows) == 1, block
    row = rows[0]
    number, _, shown = block[row][2:].partition(" | ")
    gutter = " " * len(number)
    assert block[row - 1] == f"  {gutter} |", block
    assert shown == shown_line, block
    assert block[row + 1] == f"  {gutter} | " + " " * (column - 1) + "^" * width, block
    assert row == 4, "the frame follows the message and the next: line"


def _column_of(project: Path, name: str, line: int) -> str:
    return (project / name).read_text(encoding="utf-8").split("\n")[line - 1]


# -- did you mean -------------------------------------------------------------------------


def test_unknown_step_names_the_step_suggests_the_declared_one_and_shows_the_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    project = _project(
        tmp_path,
        workflow_yaml=[
            ("    next: request-review\n", "    next: request-reveiw\n"),
            ("value: application-review", f"value: {CANARY}"),
        ],
    )
    err, document = _check(capsys, project)
    path = "/steps/read-application/next"
    d = _diagnostic(document, "coordinator.definition.target", path)
    assert "request-reveiw" in d["message"] and "read-application" in d["message"]
    assert d["suggestion"] == "request-review"
    assert d["related"][0]["path"] == "/steps/request-review"
    assert d["related"][0]["file"] == "workflow.yaml"
    assert d["related"][0]["message"] == "step request-review is declared here"
    line, column = d["source"]["line"], d["source"]["column"]
    assert _column_of(project, "workflow.yaml", line)[column - 1 :] == "request-reveiw"
    block = _block(err, "coordinator.definition.target", path)
    assert block[1] == "  " + d["message"]
    assert block[2] == "  next: " + d["suggestedAction"]
    _frame(block, "    next: request-reveiw", column, len("request-reveiw"))
    assert "  help: did you mean `request-review`?" in block
    assert block[-1].startswith("  note: workflow.yaml:")


@pytest.mark.parametrize(
    ("old", "new", "code", "path", "unknown", "suggestion"),
    [
        (
            "    operation: review-request\n",
            "    operation: review-requst\n",
            "coordinator.definition.operation",
            "/steps/request-review/operation",
            "review-requst",
            "review-request",
        ),
        (
            "    outcome: notice-sent\n",
            "    outcome: notice-snt\n",
            "coordinator.definition.outcome",
            "/steps/notice-sent/outcome",
            "notice-snt",
            "notice-sent",
        ),
        (
            "    completion: result\n",
            "    completion: reslt\n",
            "coordinator.definition.completion",
            "/steps/await-review/completion",
            "reslt",
            "result",
        ),
        (
            "    call: request-review\n",
            "    call: request-reviw\n",
            "coordinator.definition.wait-for",
            "/steps/await-review/call",
            "request-reviw",
            "request-review",
        ),
    ],
    ids=["alias", "outcome", "completion", "wait-for-call"],
)
def test_unknown_names_are_named_and_get_a_suggestion(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    old: str,
    new: str,
    code: str,
    path: str,
    unknown: str,
    suggestion: str,
) -> None:
    project = _project(tmp_path, workflow_yaml=[(old, new)])
    err, document = _check(capsys, project)
    d = _diagnostic(document, code, path)
    assert unknown in d["message"]
    assert d["suggestion"] == suggestion
    block = _block(err, code, path)
    _frame(block, new.rstrip("\n"), d["source"]["column"], len(unknown))
    assert f"  help: did you mean `{suggestion}`?" in block


def test_unknown_function_suggests_the_public_function_and_points_at_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    project = _project(
        tmp_path, workflow_yaml=[("function: read_request", "function: read_requst")]
    )
    err, document = _check(capsys, project)
    path = "/steps/read-application/input/function"
    d = _diagnostic(document, "coordinator.function.definition", path)
    assert d["message"] == "No function named read_requst is defined in functions.rhai."
    assert d["suggestion"] == "read_request"
    assert d["related"] == [
        {
            "file": "functions.rhai",
            "line": 10,
            "column": 1,
            "path": "",
            "message": "function read_request is defined here",
        }
    ]
    block = _block(err, "coordinator.function.definition", path)
    _frame(block, "      function: read_requst", d["source"]["column"], len("read_requst"))
    assert "  help: did you mean `read_request`?" in block
    assert block[-1].startswith("  note: functions.rhai:10:1 ")


def test_unknown_connection_is_reported_in_the_runtime_file_without_any_value(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    project = _project(
        tmp_path,
        workflow_yaml=[("    connection: notices\n", "    connection: notice\n")],
        runtime_yaml=[
            (
                "      clientId: coordinator-notices\n",
                f"      clientId: ${{COORDINATOR_NOTICES_CLIENT:-{CANARY}}}\n",
            )
        ],
    )
    err, document = _check(capsys, project)
    path = "/connections/notice"
    d = _diagnostic(document, "coordinator.runtime.workflow-binding", path)
    assert "notice" in d["message"] and "applicant-notice" in d["message"]
    assert d["suggestion"] == "notices"
    assert d["related"][0]["file"] == "workflow.yaml"
    assert d["related"][0]["path"] == "/operations/applicant-notice/connection"
    block = _block(err, "coordinator.runtime.workflow-binding", path)
    assert "  help: did you mean `notices`?" in block
    frame = [line for line in block if re.match(r"^  \d+ \| ", line)]
    assert all(":" in line.split(" | ", 1)[1] for line in frame)
    assert "${" not in err and "coordinator-notices" not in err


def test_no_suggestion_when_nothing_is_close(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    project = _project(tmp_path, workflow_yaml=[("    next: request-review\n", "    next: zzz\n")])
    err, document = _check(capsys, project)
    d = _diagnostic(document, "coordinator.definition.target", "/steps/read-application/next")
    assert "suggestion" not in d and "related" not in d
    assert "help:" not in "\n".join(_block(err, d["code"], d["path"]))


# -- one hint per condition ---------------------------------------------------------------


def _functions_case(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, old: str, new: str
) -> tuple[list[str], dict[str, Any]]:
    project = _project(tmp_path, functions_rhai=[(old, new)])
    err, document = _check(capsys, project)
    found = [d for d in document["diagnostics"] if d["source"]["file"] == "functions.rhai"]
    assert len(found) == 1, document["diagnostics"]
    d = found[0]
    assert d["code"] == "coordinator.function.definition"
    return _block(err, d["code"], "/"), d


def test_syntax_error_frame_masks_string_literals(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    block, d = _functions_case(
        capsys,
        tmp_path,
        "    let record = application.data;\n    #{\n        kind: kind,",
        f'    let record = "{CANARY}" + ;\n    #{{\n        kind: kind,',
    )
    assert d["message"] == "An expression is expected."
    assert d["source"]["line"] == 16 and d["source"]["column"] == 39
    _frame(block, '    let record = "…" + ;', 39 - (len(CANARY) - 1), 1)
    assert "reserved" not in d["suggestedAction"]


def test_reserved_word_is_named_with_its_own_hint(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    block, d = _functions_case(
        capsys,
        tmp_path,
        "    let record = application.data;\n    #{\n        kind: kind,",
        "    let case = application.data;\n    let record = case;\n    #{\n        kind: kind,",
    )
    assert d["message"] == (
        "`case` is a reserved word of the function language; rename the variable."
    )
    assert "reserved words" in d["suggestedAction"]
    _frame(block, "    let case = application.data;", 9, 4)


def test_disabled_symbol_has_its_own_hint(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    block, d = _functions_case(
        capsys,
        tmp_path,
        "    let record = application.data;\n",
        "    print(application);\n    let record = application.data;\n",
    )
    assert "not permitted" in d["message"]
    assert "`print`" in d["suggestedAction"]
    _frame(block, "    print(application);", 5, 5)


def test_missing_function_syntax_error_and_reserved_word_have_different_hints(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    hints = set()
    _, syntax = _functions_case(capsys, tmp_path / "a", "input.applicationId }", "input. }")
    hints.add(syntax["suggestedAction"])
    _, reserved = _functions_case(
        capsys, tmp_path / "b", "fn late_summary(read)", "fn late_summary(match)"
    )
    hints.add(reserved["suggestedAction"])
    project = _project(
        tmp_path / "c", workflow_yaml=[("function: read_request", "function: build_everything")]
    )
    _, document = _check(capsys, project)
    missing = _diagnostic(
        document, "coordinator.function.definition", "/steps/read-application/input/function"
    )
    assert "suggestion" not in missing
    hints.add(missing["suggestedAction"])
    assert len(hints) == 3, hints


# -- values never shown -------------------------------------------------------------------


def test_a_frame_on_a_value_line_shows_the_key_and_masks_the_value(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    project = _project(
        tmp_path,
        workflow_yaml=[("      format: uuid\n", f"      format: {CANARY}  # {CANARY}\n")],
    )
    err, document = _check(capsys, project)
    path = "/input/properties/applicationId/format"
    d = _diagnostic(document, "coordinator.definition.schema", path)
    _frame(_block(err, d["code"], path), "      format: …", d["source"]["column"], 1)


def test_no_frame_for_a_line_inside_a_block_scalar_or_with_a_substitution(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    project = _project(
        tmp_path,
        workflow_yaml=[
            (
                "  description: >-\n",
                f"  description: >-\n    {CANARY}: ${{{CANARY}}}\n",
            )
        ],
    )
    err, _ = _check(capsys, project)
    assert not any(line.startswith("  9 | ") for line in err.splitlines()), err


def test_long_lines_are_trimmed_around_the_column(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    padding = "x" * 150
    project = _project(
        tmp_path,
        functions_rhai=[
            (
                "    let record = application.data;\n",
                f"    let {padding} = 1; let record = application.data +;\n",
            )
        ],
    )
    err, document = _check(capsys, project)
    d = next(x for x in document["diagnostics"] if x["source"]["file"] == "functions.rhai")
    block = _block(err, d["code"], "/")
    row = next(line for line in block if re.match(r"^  \d+ \| ", line))
    shown = row.split(" | ", 1)[1]
    assert len(shown) <= 96 and shown.startswith("…") and shown.endswith("+;")
    caret = block[block.index(row) + 1].split(" | ", 1)[1]
    assert shown[len(caret) - 1] == ";"


@pytest.mark.parametrize("command", ["package", "test"])
def test_package_and_test_show_the_same_frame_as_check(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    project = _project(
        tmp_path, workflow_yaml=[("    next: request-review\n", "    next: request-reveiw\n")]
    )
    argv = [command, "--project", str(project)]
    if command == "package":
        argv += ["--output", str(tmp_path / "package")]
    assert main(argv) == 1
    err = capsys.readouterr().err
    block = _block(err, "coordinator.definition.target", "/steps/read-application/next")
    assert "    next: request-reveiw" in "\n".join(block)
    assert "  help: did you mean `request-review`?" in block
