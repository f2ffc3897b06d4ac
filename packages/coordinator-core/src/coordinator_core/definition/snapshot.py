"""The definition snapshot, its execution projection, the revision and the definition digest.

Contract 02 §8: the snapshot is the workflow exactly as authored, the functions source byte for
byte, this build's ABI identities and the descriptors of the operations it names. The revision
hashes the projection that leaves out what cannot change execution (version, titles,
descriptions); the definition digest hashes everything.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from coordinator_core import limits
from coordinator_core.operations import CATALOG
from coordinator_core.values import canonical_json, sha256_label

__all__ = [
    "Snapshot",
    "build_snapshot",
    "operation_identities",
    "projection",
    "strip_schema_annotations",
]

_SCHEMA_MAPS: Final = ("properties", "patternProperties", "$defs", "dependentSchemas")
_SCHEMA_SINGLE: Final = (
    "items",
    "additionalProperties",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contains",
    "propertyNames",
    "if",
    "then",
    "else",
    "not",
    "contentSchema",
)
_SCHEMA_LISTS: Final = ("prefixItems", "allOf", "anyOf", "oneOf")


@dataclass(frozen=True)
class Snapshot:
    """A frozen snapshot with its canonical bytes and both identities."""

    document: Mapping[str, Any]
    canonical: bytes
    revision: str
    definition_digest: str

    @property
    def workflow(self) -> Mapping[str, Any]:
        workflow: Mapping[str, Any] = self.document["workflow"]
        return workflow

    @property
    def source(self) -> str:
        return str(self.document["source"])


def operation_identities(workflow: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The descriptors of every distinct operation named by an alias, sorted by id."""
    ids = {
        entry["operation"]
        for entry in (workflow.get("operations") or {}).values()
        if isinstance(entry, Mapping) and entry.get("operation") in CATALOG
    }
    return [CATALOG[operation_id].to_json() for operation_id in sorted(ids)]


def build_snapshot(workflow: Mapping[str, Any], source: str) -> Snapshot:
    """Freeze a checked workflow document and functions source into a snapshot."""
    document = {
        "apiVersion": limits.SNAPSHOT_API_VERSION,
        "kind": limits.KIND_SNAPSHOT,
        "workflow": copy.deepcopy(dict(workflow)),
        "source": source,
        "adapterAbi": limits.ADAPTER_ABI,
        "interpreterAbi": limits.INTERPRETER_ABI,
        "schemaAbi": limits.SCHEMA_ABI,
        "operationIdentities": operation_identities(workflow),
    }
    return from_document(document)


def from_document(document: Mapping[str, Any]) -> Snapshot:
    """Compute canonical bytes, revision and digest of a snapshot document."""
    canonical = canonical_json(document)
    return Snapshot(
        document=document,
        canonical=canonical,
        revision=sha256_label(canonical_json(projection(document))),
        definition_digest=sha256_label(canonical),
    )


def strip_schema_annotations(schema: Any) -> Any:
    """A copy of a schema without `title`/`description` keywords at any schema position."""
    if not isinstance(schema, Mapping):
        return schema
    stripped: dict[str, Any] = {}
    for keyword, value in schema.items():
        if keyword in ("title", "description"):
            continue
        if keyword in _SCHEMA_MAPS and isinstance(value, Mapping):
            stripped[keyword] = {name: strip_schema_annotations(v) for name, v in value.items()}
        elif keyword in _SCHEMA_SINGLE:
            stripped[keyword] = strip_schema_annotations(value)
        elif keyword in _SCHEMA_LISTS and isinstance(value, list):
            stripped[keyword] = [strip_schema_annotations(v) for v in value]
        else:
            stripped[keyword] = value
    return stripped


def projection(document: Mapping[str, Any]) -> dict[str, Any]:
    """The execution projection of contract 02 §8.3: the snapshot without display members."""
    projected = dict(document)
    workflow = dict(document["workflow"])
    if isinstance(workflow.get("project"), Mapping):
        workflow["project"] = {
            k: v
            for k, v in workflow["project"].items()
            if k not in ("version", "title", "description")
        }
    if isinstance(workflow.get("steps"), Mapping):
        workflow["steps"] = {
            step_id: (
                {k: v for k, v in step.items() if k not in ("title", "description")}
                if isinstance(step, Mapping)
                else step
            )
            for step_id, step in workflow["steps"].items()
        }
    if "input" in workflow:
        workflow["input"] = strip_schema_annotations(workflow["input"])
    if isinstance(workflow.get("outcomes"), Mapping):
        workflow["outcomes"] = {
            outcome: strip_schema_annotations(schema)
            for outcome, schema in workflow["outcomes"].items()
        }
    projected["workflow"] = workflow
    return projected
