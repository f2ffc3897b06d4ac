"""Restoring a snapshot into the execution IR (contract 02 §9.3), for packages and stored runs.

The snapshot's workflow is decoded into the same typed model `check` builds from workflow.yaml
(without positions: it was never text), the same rules run on it, its functions are compiled
once, and the IR is built from the model. Nothing pretends the JSON was a YAML document.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from coordinator_core import limits
from coordinator_core.authoring.model import model_from_json
from coordinator_core.definition.ir import Definition, build_definition
from coordinator_core.definition.rules import check_workflow
from coordinator_core.definition.snapshot import from_document, operation_identities
from coordinator_core.errors import CoordinatorError, Diagnostic
from coordinator_core.functions import compile_functions
from coordinator_core.values import StrictJsonError, parse_strict_json

__all__ = ["DEFINITION_FILE", "restore_definition"]

DEFINITION_FILE: Final = "definition.json"
_MEMBERS: Final = frozenset(
    {
        "apiVersion",
        "kind",
        "workflow",
        "source",
        "adapterAbi",
        "interpreterAbi",
        "schemaAbi",
        "operationIdentities",
    }
)


def _refuse(code: str) -> CoordinatorError:
    return CoordinatorError(
        Diagnostic(code, path="", file=DEFINITION_FILE, artifact=limits.KIND_SNAPSHOT)
    )


def restore_definition(data: bytes) -> Definition:
    """The IR of snapshot bytes (02 §9.3); raises CoordinatorError with the first refusal:
    `coordinator.definition.snapshot` (not a snapshot), `coordinator.definition.abi` (another
    build's), or the code of the first definition rule it breaks."""
    if len(data) > limits.SNAPSHOT_MAX_BYTES:
        raise _refuse("coordinator.definition.snapshot")
    try:
        document = parse_strict_json(data)
    except (StrictJsonError, ValueError):
        raise _refuse("coordinator.definition.snapshot") from None
    if (
        not isinstance(document, dict)
        or set(document) != _MEMBERS
        or document["apiVersion"] != limits.SNAPSHOT_API_VERSION
        or document["kind"] != limits.KIND_SNAPSHOT
        or not isinstance(document["workflow"], dict)
        or not isinstance(document["source"], str)
    ):
        raise _refuse("coordinator.definition.snapshot")
    if (
        document["adapterAbi"] != limits.ADAPTER_ABI
        or document["interpreterAbi"] != limits.INTERPRETER_ABI
        or document["schemaAbi"] != limits.SCHEMA_ABI
        or document["operationIdentities"] != operation_identities(document["workflow"])
    ):
        raise _refuse("coordinator.definition.abi")
    return _checked(document)


def _checked(document: Mapping[str, Any]) -> Definition:
    """Steps 5–6: every rule that needs no runtime file, then the IR and its identities."""
    workflow: Mapping[str, Any] = document["workflow"]
    source: str = document["source"]
    if (
        workflow.get("apiVersion") != limits.PROJECT_API_VERSION
        or workflow.get("kind") != limits.KIND_PROJECT
    ):
        raise _refuse("coordinator.definition.snapshot")
    found: list[Diagnostic] = []
    model = model_from_json(
        workflow, file=DEFINITION_FILE, artifact=limits.KIND_SNAPSHOT, out=found
    )
    compiled = compile_functions(source)
    for error in compiled.errors:
        found.append(Diagnostic(error.code, path="", file=DEFINITION_FILE))
    program = compiled.program
    facts = None
    if model is not None:
        facts = check_workflow(model, program.functions if program is not None else None, found)
    errors = [d for d in found if d.effective_severity == "error"]
    if errors:
        first = errors[0]
        raise CoordinatorError(
            Diagnostic(
                first.code, path=first.path, file=DEFINITION_FILE, artifact=limits.KIND_SNAPSHOT
            )
        )
    if model is None or facts is None or program is None:
        raise _refuse("coordinator.definition.snapshot")
    return build_definition(model, from_document(document), program)
