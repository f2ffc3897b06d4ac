"""The clean-up lint (issue 26): `check` warns `coordinator.definition.open-mutation` (exit 0,
in JSON with its code) where a cancel or a timeout can end a run while an accepted mutation of
a product that supports withdrawal — a Casework review request — is still open and the route
taken has no step that withdraws it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coordinator_core.checking.checker import check_project
from coordinatorctl.cli import main

REPO = Path(__file__).resolve().parents[3]
CODE = "coordinator.definition.open-mutation"
FUNCTIONS = """
fn request(input) { #{ id: input.id } }
fn withdraw(accepted) { #{ requestId: accepted.requestId, subject: accepted.subject, reason: "x" } }
fn route(result) { result.status }
"""


def _call(operation: str, next_step: str, argument: str | None = None) -> dict[str, Any]:
    arguments = [{"type": "input"}] if argument is None else [{"type": "step", "step": argument}]
    return {
        "type": "call",
        "operation": operation,
        "input": {"function": "withdraw" if argument else "request", "arguments": arguments},
        "next": next_step,
    }


def _wait(next_step: str, **routes: str) -> dict[str, Any]:
    return {
        "type": "wait-for",
        "call": "ask",
        "completion": "result",
        "timeoutSeconds": 3600,
        "next": next_step,
        **routes,
    }


def _finish() -> dict[str, Any]:
    return {"type": "finish", "outcome": "done"}


def _project(tmp_path: Path, steps: dict[str, Any]) -> Path:
    workflow = {
        "apiVersion": "id.registrystack.org/formats/coordinator/project/v1alpha1",
        "kind": "CoordinatorProject",
        "project": {"id": "lint", "version": "1"},
        "input": {"type": "object"},
        "operations": {
            "review": {"operation": "casework.submit-review-request/v1", "connection": "reviews"},
            "withdrawal": {
                "operation": "casework.withdraw-review-request/v1",
                "connection": "reviews",
            },
            "other-withdrawal": {
                "operation": "casework.withdraw-review-request/v1",
                "connection": "other-reviews",
            },
            "notice": {"operation": "messaging.submit-message/v1", "connection": "notices"},
        },
        "functionsFile": "functions.rhai",
        "deadlineSeconds": 86400,
        "start": "ask",
        "steps": steps,
        "outcomes": {"done": True},
    }
    used = {step.get("operation") for step in steps.values()}
    workflow["operations"] = {a: o for a, o in workflow["operations"].items() if a in used}
    project = tmp_path / "project"
    project.mkdir()
    (project / "workflow.yaml").write_text(json.dumps(workflow, indent=2), encoding="utf-8")
    (project / "functions.rhai").write_text(FUNCTIONS, encoding="utf-8")
    return project


def _lint(project: Path) -> list[tuple[str, str]]:
    checked = check_project(project)
    assert not checked.has_errors, [(d.code, d.path) for d in checked.diagnostics]
    return [(d.path, d.effective_message) for d in checked.diagnostics if d.code == CODE]


def test_the_maintained_examples_are_clean() -> None:
    for example in sorted((REPO / "examples").iterdir()):
        checked = check_project(example)
        assert [d.path for d in checked.diagnostics if d.code == CODE] == [], example.name


def test_a_wait_without_on_cancel_leaves_the_review_open_when_cancelled(tmp_path: Path) -> None:
    project = _project(
        tmp_path,
        {
            "ask": _call("review", "wait"),
            "wait": _wait("end", onTimeout="undo"),
            "undo": _call("withdrawal", "end", "ask"),
            "end": _finish(),
        },
    )
    assert _lint(project) == [
        (
            "/steps/wait/onCancel",
            "Wait-for step wait has no onCancel route: a run cancelled while it waits there"
            " leaves the review request of step ask open.",
        )
    ]


def test_an_on_cancel_route_that_does_not_withdraw_is_flagged(tmp_path: Path) -> None:
    project = _project(
        tmp_path,
        {
            "ask": _call("review", "wait"),
            "wait": _wait("end", onTimeout="undo", onCancel="tell"),
            "tell": _call("notice", "end"),
            "undo": _call("withdrawal", "end", "ask"),
            "end": _finish(),
        },
    )
    assert _lint(project) == [
        (
            "/steps/wait/onCancel",
            "The onCancel route of wait-for step wait can end the run without withdrawing the"
            " review request of step ask.",
        )
    ]


def test_a_wait_without_on_timeout_fails_with_the_review_open(tmp_path: Path) -> None:
    project = _project(
        tmp_path,
        {
            "ask": _call("review", "wait"),
            "wait": _wait("end", onCancel="undo"),
            "undo": _call("withdrawal", "end", "ask"),
            "end": _finish(),
        },
    )
    assert _lint(project) == [
        (
            "/steps/wait/onTimeout",
            "Wait-for step wait has no onTimeout route: a run that times out there fails with"
            " the review request of step ask still open.",
        )
    ]


def test_an_on_timeout_route_that_does_not_withdraw_is_flagged(tmp_path: Path) -> None:
    project = _project(
        tmp_path,
        {
            "ask": _call("review", "wait"),
            "wait": _wait("end", onTimeout="late", onCancel="undo"),
            "late": _finish(),
            "undo": _call("withdrawal", "end", "ask"),
            "end": _finish(),
        },
    )
    assert _lint(project) == [
        (
            "/steps/wait/onTimeout",
            "The onTimeout route of wait-for step wait can end the run without withdrawing the"
            " review request of step ask.",
        )
    ]


def test_a_withdrawal_on_another_connection_withdraws_nothing(tmp_path: Path) -> None:
    project = _project(
        tmp_path,
        {
            "ask": _call("review", "wait"),
            "wait": _wait("end", onTimeout="undo", onCancel="undo"),
            "undo": _call("other-withdrawal", "end", "ask"),
            "end": _finish(),
        },
    )
    assert sorted(path for path, _ in _lint(project)) == [
        "/steps/wait/onCancel",
        "/steps/wait/onTimeout",
    ]


def test_withdrawing_on_both_routes_is_clean_and_a_completed_review_is_closed(
    tmp_path: Path,
) -> None:
    """After the wait on the review's own completion takes `next`, the review is final: a later
    wait (here on the same completion again, in a second branch) has nothing open."""
    project = _project(
        tmp_path,
        {
            "ask": _call("review", "wait"),
            "wait": _wait("tell", onTimeout="undo", onCancel="undo"),
            "tell": _call("notice", "end"),
            "undo": _call("withdrawal", "end", "ask"),
            "end": _finish(),
        },
    )
    assert _lint(project) == []


def test_on_the_cancel_path_a_later_wait_without_on_cancel_stops_the_run_there(
    tmp_path: Path,
) -> None:
    """A cancel applied at `wait` follows `onCancel` to `second`, a wait with no `onCancel`
    of its own: there the cancelled run stops, with the review still open."""
    steps = {
        "ask": _call("review", "wait"),
        "wait": _wait("end", onTimeout="undo", onCancel="second"),
        "second": _wait("undo", onTimeout="undo", onCancel="undo"),
        "undo": _call("withdrawal", "end", "ask"),
        "end": _finish(),
    }
    assert _lint(_project(tmp_path, steps)) == []
    del steps["second"]["onCancel"]
    again = tmp_path / "again"
    again.mkdir()
    paths = [path for path, _ in _lint(_project(again, steps))]
    assert "/steps/wait/onCancel" in paths and "/steps/second/onCancel" in paths


def test_the_warning_is_exit_0_in_text_and_json_and_fails_under_deny_warnings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = _project(
        tmp_path,
        {
            "ask": _call("review", "wait"),
            "wait": _wait("end", onTimeout="undo"),
            "undo": _call("withdrawal", "end", "ask"),
            "end": _finish(),
        },
    )
    assert main(["check", "--project", str(project), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "valid-with-warnings"
    (warning,) = report["diagnostics"]
    assert (warning["severity"], warning["code"]) == ("warning", CODE)
    assert warning["related"][0]["path"] == "/steps/ask"
    assert main(["check", "--project", str(project)]) == 0
    assert f"warning[{CODE}]" in capsys.readouterr().err
    assert main(["check", "--project", str(project), "--deny-warnings"]) == 1
