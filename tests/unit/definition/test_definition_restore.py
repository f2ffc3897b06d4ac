"""Restoring a definition goes through the one typed model and the same rules (issue 26), and
a definition's functions are compiled once: by `check` (which also runs the scenarios on the
IR it built) and by loading a package (whose IR the service and the definition cache keep)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import coordinator_core.functions.program as program
from coordinator_core.checking.checker import check_project
from coordinator_core.definition.restore import restore_definition
from coordinator_core.errors import CoordinatorError
from coordinator_core.shell.package_files import load_package, write_package
from coordinator_core.values import canonical_json

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "reviewed-notice"


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every functions source compiled while the test runs."""
    seen: list[str] = []
    real = program._compile

    def counting(source: str) -> Any:
        seen.append(source)
        return real(source)

    monkeypatch.setattr(program, "_compile", counting)
    return seen


def test_check_compiles_the_functions_once_and_runs_the_scenarios_on_its_ir(
    compiles: list[str],
) -> None:
    checked = check_project(EXAMPLE)
    assert checked.scenario_report is not None and checked.scenario_report.passed
    assert len(compiles) == 1
    assert checked.definition is not None and checked.definition.ir is not None
    # the IR's canonical form is the snapshot, byte for byte the digest's input
    snapshot = checked.definition.ir.snapshot
    assert checked.definition.snapshot is snapshot
    assert snapshot.definition_digest == checked.definition.ir.definition_digest


def test_a_package_restores_its_ir_once_and_keeps_it(tmp_path: Path, compiles: list[str]) -> None:
    checked = check_project(EXAMPLE, definition_only=True)
    assert checked.definition is not None and checked.definition.snapshot is not None
    digest = write_package(checked.definition.snapshot, tmp_path / "package")
    before = len(compiles)
    loaded = load_package(tmp_path / "package", digest)
    assert len(compiles) == before + 1
    assert loaded.snapshot.canonical == checked.definition.snapshot.canonical
    assert loaded.definition.steps.keys() == checked.definition.ir.steps.keys()  # type: ignore[union-attr]
    assert loaded.definition.program is not None and len(compiles) == before + 1


def _snapshot_bytes() -> dict[str, Any]:
    checked = check_project(EXAMPLE, definition_only=True)
    assert checked.definition is not None and checked.definition.snapshot is not None
    document: dict[str, Any] = json.loads(checked.definition.snapshot.canonical)
    return document


def _refusal(document: dict[str, Any]) -> tuple[str, str]:
    with pytest.raises(CoordinatorError) as refused:
        restore_definition(canonical_json(document))
    return refused.value.diagnostic.code, refused.value.diagnostic.path


def test_a_restored_workflow_is_decoded_and_checked_by_the_same_rules() -> None:
    """A snapshot member the decoder refuses, and a rule the model breaks, are the codes and
    pointers `check` would give, without positions (the snapshot was never text)."""
    unknown = _snapshot_bytes()
    unknown["workflow"]["steps"]["decide"]["colour"] = "red"
    assert _refusal(unknown) == ("config.unknown-key", "/steps/decide/colour")
    dangling = _snapshot_bytes()
    dangling["workflow"]["steps"]["decide"]["cases"]["approved"] = "nowhere"
    assert _refusal(dangling) == ("coordinator.definition.target", "/steps/decide/cases/approved")
    undominated = _snapshot_bytes()
    arguments = undominated["workflow"]["steps"]["request-review"]["input"]["arguments"]
    arguments.append({"type": "step", "step": "await-review"})
    assert _refusal(undominated)[0] in (
        "coordinator.function.definition",  # F4 first: the function takes fewer parameters
        "coordinator.mapping.dominance",
    )
    restored = restore_definition(canonical_json(_snapshot_bytes()))
    assert restored.workflow_id == "reviewed-notice"
