"""The outputs of the catalogue's operations and completions (contract 08), one source of truth.

`spec/schemas/outputs.schema.json`, published as package data of `coordinator-models`, defines
what each operation gives a run as a call step's output and what each completion gives a
`wait-for` as its output; the catalogue (`operations.py`) names each one's definition. The same
compiled schemas serve the adapters (a live answer that does not match is `invalid-response`),
the scenario rule C13 (a scripted reply that does not match is
`coordinator.scenarios.reply-shape`) and `coordinatorctl schema operation <id>`, which prints
one definition bundled with the definitions it references.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from functools import cache
from importlib.resources import files
from typing import Any, Final

from coordinator_core.jsonschema.dialect import SchemaValidator, compile_validator
from coordinator_core.jsonschema.violations import Violation
from coordinator_core.operations import CATALOG, Completion, OperationDescriptor

__all__ = [
    "completion_output_failure",
    "completion_output_schema",
    "first_violation",
    "operation_output_schema",
    "output_failure",
    "outputs_document",
    "prepare_validators",
]

_REFERENCE: Final = "#/$defs/"
_PUBLISHED: Final = "https://id.registrystack.org/schemas/coordinator/outputs"


@cache
def outputs_document() -> Mapping[str, Any]:
    """The published outputs schema (package data of coordinator-models)."""
    text = files("coordinator_models").joinpath("schemas", "outputs.schema.json").read_text("utf-8")
    document: Mapping[str, Any] = json.loads(text)
    return document


def _references(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "$ref" and isinstance(item, str) and item.startswith(_REFERENCE):
                yield item.removeprefix(_REFERENCE)
            else:
                yield from _references(item)
    elif isinstance(value, list):
        for item in value:
            yield from _references(item)


def _bundled(definition: str) -> dict[str, Any]:
    """`{"$ref": …, "$defs": …}` holding `definition` and every definition it reaches."""
    definitions: Mapping[str, Any] = outputs_document()["$defs"]
    needed: set[str] = set()
    pending = [definition]
    while pending:
        name = pending.pop()
        if name in needed:
            continue
        needed.add(name)
        pending.extend(_references(definitions[name]))
    return {
        "$ref": _REFERENCE + definition,
        "$defs": {name: definitions[name] for name in sorted(needed)},
    }


def _printable(definition: str, path: str, title: str) -> dict[str, Any]:
    found = outputs_document()["$defs"][definition]
    return {
        "$schema": outputs_document()["$schema"],
        "$id": f"{_PUBLISHED}/{path}.schema.json",
        "title": title,
        "description": found.get("description", ""),
        **_bundled(definition),
    }


def operation_output_schema(operation_id: str) -> dict[str, Any] | None:
    """The self-contained JSON Schema of an operation's output, or None for an unknown id."""
    operation = CATALOG.get(operation_id)
    if operation is None:
        return None
    return _printable(operation.output, f"{operation_id}.output", f"{operation_id} output")


def completion_output_schema(operation_id: str, completion: str) -> dict[str, Any] | None:
    """The self-contained JSON Schema of a completion's output, or None when unknown."""
    operation = CATALOG.get(operation_id)
    found = operation.completions.get(completion) if operation is not None else None
    if found is None:
        return None
    return _printable(
        found.output,
        f"{operation_id}.{completion}.completion",
        f"{operation_id} completion {completion}",
    )


@cache
def _validator(definition: str) -> SchemaValidator:
    return compile_validator(_bundled(definition))


def first_violation(validator: SchemaValidator, value: Any) -> Violation | None:
    """Where `value` first fails (in pointer order, the top first), or None when it passes."""
    if validator.is_valid(value):
        return None
    found = validator.violations(value)
    return found[0] if found else Violation("", "schema")


def output_failure(operation: OperationDescriptor, value: Any) -> Violation | None:
    """Why `value` is not an output of `operation` (None when it is)."""
    return first_violation(_validator(operation.output), value)


def completion_output_failure(completion: Completion, value: Any) -> Violation | None:
    """Why `value` is not an output of `completion` (None when it is)."""
    return first_violation(_validator(completion.output), value)


def prepare_validators(operation: OperationDescriptor) -> None:
    """Compile now the validators of `operation`'s output and of its completions' outputs, as
    their first use would (a service calls this at its start for the operations its workflow
    calls, so that its first runs do not pay jsonschema's import and the compiles, about
    0.3 s of CPU together, while they are timed by their callers)."""
    _validator(operation.output)
    for completion in operation.completions.values():
        _validator(completion.output)
