"""Conformance: every vector of the Rhai-subset file runs with the reference's result.

`tests/data/rhai/vectors.yaml` is a verbatim copy of the shared conformance file; each
expectation was checked against the reference Rhai engine under the coordinator profile.
Results compare type-strictly (int vs float, bool vs int, objects unordered); error vectors
assert the category, mapped to codes as contract 03 §6 says.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from coordinator_core.functions import FunctionError, compile_functions

VECTORS_FILE = Path(__file__).resolve().parents[2] / "data" / "rhai" / "vectors.yaml"

# Vector category → the contract 03 §6 codes that realise it.
CATEGORY_CODES: dict[str, frozenset[str]] = {
    "parse": frozenset(
        {
            "coordinator.function.definition",
            "coordinator.function.arity",
            "coordinator.function.source-limit",
        }
    ),
    "disabled": frozenset({"coordinator.function.definition"}),
    "execution": frozenset({"coordinator.function.execution"}),
    "resource-limit": frozenset({"coordinator.function.resource-limit"}),
    "value-limit": frozenset(
        {
            "coordinator.function.value-limit",
            "coordinator.function.json",
            "coordinator.function.output",
            "coordinator.function.input",
        }
    ),
}


def _load() -> list[dict[str, Any]]:
    with VECTORS_FILE.open(encoding="utf-8") as handle:
        document = yaml.safe_load(handle)
    vectors: list[dict[str, Any]] = document["vectors"]
    return vectors


VECTORS = _load()


def same_json(a: object, b: object) -> bool:
    """Type-strict JSON equality: 2 ≠ 2.0, True ≠ 1, objects compare unordered."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        assert isinstance(b, list)
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    return a == b


def run_vector(vector: dict[str, Any]) -> object:
    """Compile and call as a mapping would: a public function with the arguments' count."""
    result = compile_functions(vector["source"])
    if result.program is None:
        assert result.errors, "a failed compilation reports at least one error"
        raise result.errors[0]
    return result.program.call(vector["call"], vector["args"])


def test_vectors_file_is_the_full_conformance_set() -> None:
    ids = [v["id"] for v in VECTORS]
    assert len(ids) == 225
    assert len(set(ids)) == len(ids)
    assert all(("expect" in v) != ("error" in v) for v in VECTORS)


@pytest.mark.parametrize("vector", VECTORS, ids=[v["id"] for v in VECTORS])
def test_vector_matches_reference(vector: dict[str, Any]) -> None:
    if "expect" in vector:
        assert same_json(run_vector(vector), vector["expect"])
        return
    with pytest.raises(FunctionError) as caught:
        run_vector(vector)
    assert caught.value.code in CATEGORY_CODES[vector["error"]]


def test_vector_compile_errors_carry_a_position() -> None:
    for vector in VECTORS:
        if vector.get("error") not in ("parse", "disabled"):
            continue
        result = compile_functions(vector["source"])
        for error in result.errors:
            assert error.code == "coordinator.function.definition"
            assert error.line is not None and error.line >= 1
            assert error.column is not None and error.column >= 1
