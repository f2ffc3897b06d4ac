"""`check` warns (exit 0) on a call that nothing defines, such as `timestamp()`: it compiles,
but fails whenever it runs (issue 26 item 5)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from coordinatorctl.cli import main

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "delayed-follow-up"


def test_a_call_of_an_absent_library_function_is_a_warning_at_the_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project"
    shutil.copytree(EXAMPLE, project)
    functions = project / "functions.rhai"
    text = functions.read_text(encoding="utf-8")
    # A helper no mapping calls yet: the scenarios still pass, and check still says it fails.
    functions.write_text("fn stamped(input) {\n    #{ at: timestamp() }\n}\n" + text, "utf-8")
    assert main(["check", "--project", str(project), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "valid-with-warnings"
    (warning,) = report["diagnostics"]
    assert (warning["severity"], warning["code"]) == (
        "warning",
        "coordinator.function.unknown-call",
    )
    assert warning["source"] == {"file": "functions.rhai", "line": 2, "column": 12}
    assert warning["message"].startswith("The call of timestamp with 0 arguments")
    assert main(["check", "--project", str(project), "--deny-warnings"]) == 1
    assert "warning[coordinator.function.unknown-call] functions.rhai:2:12" in (
        capsys.readouterr().err
    )
