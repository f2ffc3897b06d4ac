"""The typed authored model (issue 26): workflow.yaml decoded once into frozen nodes, each with
its JSON pointer and the mark of its value; the same model from a snapshot's JSON, without
marks; absent or failed members are None, and the names as written stay declared."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from coordinator_core.authoring.decode import read_authored_file
from coordinator_core.authoring.model import (
    CallNode,
    WaitForNode,
    model_from_authored,
    model_from_json,
    routes_of,
)

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "reviewed-notice" / "workflow.yaml"


def _model(text: bytes) -> object:
    authored = read_authored_file(text, file="workflow.yaml", expected_kind="CoordinatorProject")
    return model_from_authored(authored)


def test_every_node_knows_its_pointer_and_where_it_was_written() -> None:
    model = _model(EXAMPLE.read_bytes())
    assert model is not None
    steps = model.steps  # type: ignore[attr-defined]
    wait = steps["await-review"]
    assert isinstance(wait, WaitForNode)
    assert (wait.pointer, wait.call, wait.completion) == (
        "/steps/await-review",
        "request-review",
        "result",
    )
    assert wait.mark is not None
    line = EXAMPLE.read_text(encoding="utf-8").splitlines()[wait.mark.line - 1]
    assert "type: wait-for" in line
    request = steps["request-review"]
    assert isinstance(request, CallNode) and request.input is not None
    argument = request.input.arguments[1]  # type: ignore[index]
    assert (argument.pointer, argument.kind, argument.step) == (
        "/steps/request-review/input/arguments/1",
        "step",
        "read-application",
    )
    assert [route.pointer for route in routes_of(wait)] == [
        "/steps/await-review/next",
        "/steps/await-review/onTimeout",
        "/steps/await-review/onCancel",
    ]
    with pytest.raises(dataclasses.FrozenInstanceError):
        wait.next = "elsewhere"  # type: ignore[misc]


def _unmarked(value: Any) -> Any:
    """`value` with every node's mark removed (nodes nest: a step holds mappings, arguments)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: _unmarked(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if "mark" in changes:
            changes["mark"] = None
        return dataclasses.replace(value, **changes)
    if isinstance(value, tuple):
        return tuple(_unmarked(item) for item in value)
    return value


def test_the_model_of_a_snapshot_is_the_same_without_marks() -> None:
    authored = read_authored_file(
        EXAMPLE.read_bytes(), file="workflow.yaml", expected_kind="CoordinatorProject"
    )
    from_yaml = model_from_authored(authored)
    assert from_yaml is not None and authored.decoded is not None
    from_json = model_from_json(authored.decoded, file="definition.json", artifact=None, out=[])
    assert from_json is not None and from_yaml.steps is not None and from_json.steps is not None
    for step_id, node in from_yaml.steps.items():
        assert _unmarked(node) == from_json.steps[step_id]


def test_a_member_that_failed_is_none_and_its_step_stays_declared() -> None:
    text = EXAMPLE.read_text(encoding="utf-8").replace(
        "    timeoutSeconds: 604800", "    timeoutSeconds: soon", 1
    )
    model = _model(text.encode("utf-8"))
    assert model is not None
    wait = model.steps["await-review"]  # type: ignore[attr-defined]
    assert wait.timeout_seconds is None
    broken = EXAMPLE.read_text(encoding="utf-8").replace(
        "    type: wait-for", "    type: wait-forever", 1
    )
    model = _model(broken.encode("utf-8"))
    assert model is not None
    assert "await-review" not in model.steps  # type: ignore[attr-defined]
    assert model.declared.step_types["await-review"] == "wait-forever"  # type: ignore[attr-defined]
    assert not model.all_steps_decoded  # type: ignore[attr-defined]
