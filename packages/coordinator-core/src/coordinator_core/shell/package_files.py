"""Immutable packages: writing one (02 §9.1), loading and verifying one (K1–K5, §9.2–§9.3)."""

from __future__ import annotations

import hashlib
import re
import shutil
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from coordinator_core import limits
from coordinator_core.authoring.decode import AuthoredFile, decode_body, load_schema
from coordinator_core.authoring.yamlreader import YamlDocument
from coordinator_core.checking.checker import check_definition
from coordinator_core.definition.snapshot import Snapshot, from_document, operation_identities
from coordinator_core.errors import CoordinatorError, Diagnostic
from coordinator_core.values import StrictJsonError, canonical_json, parse_strict_json, sha256_label

__all__ = [
    "DEFINITION_FILE",
    "SUMS_FILE",
    "LoadedPackage",
    "load_package",
    "restore_snapshot",
    "write_package",
]

DEFINITION_FILE: Final = "definition.json"
SUMS_FILE: Final = "SHA256SUMS"
_SUMS_LINE: Final = re.compile(r"^([0-9a-f]{64})  (\S+)\n$")


@dataclass(frozen=True)
class LoadedPackage:
    """A verified package: its digest and the restored snapshot."""

    root: Path
    package_digest: str
    snapshot: Snapshot


def _refuse(code: str, file: str | None = None, message: str | None = None) -> CoordinatorError:
    return CoordinatorError(
        Diagnostic(code, path="", file=file, message=message, artifact=limits.KIND_SNAPSHOT)
    )


def write_package(snapshot: Snapshot, output: Path) -> str:
    """Write `definition.json` and `SHA256SUMS` into the new directory `output`.

    Returns the package digest. Refuses an existing `output`; on a write failure removes
    everything it created and raises `coordinator.command.output-unavailable`.
    """
    if output.exists() or output.is_symlink():
        raise CoordinatorError(
            Diagnostic("coordinator.package.output-exists", path="", file=str(output))
        )
    created: list[Path] = []
    for parent in reversed(output.parents):
        if not parent.exists():
            created.append(parent)
    sums = f"{hashlib.sha256(snapshot.canonical).hexdigest()}  {DEFINITION_FILE}\n".encode("ascii")
    try:
        output.mkdir(parents=True)
        created.append(output)
        (output / DEFINITION_FILE).write_bytes(snapshot.canonical)
        (output / SUMS_FILE).write_bytes(sums)
    except OSError:
        for path in reversed(created):
            shutil.rmtree(path, ignore_errors=True)
        raise CoordinatorError(
            Diagnostic("coordinator.command.output-unavailable", path="", file=str(output))
        ) from None
    return sha256_label(sums)


def load_package(root: Path, expected_digest: str | None = None) -> LoadedPackage:
    """Load and verify a package (K1–K5); raises CoordinatorError with the first refusal."""
    try:
        entries = sorted(root.iterdir())
    except OSError:
        raise _refuse(
            "coordinator.package.invalid",
            str(root),
            "The package root is not a readable directory.",
        ) from None
    names = {entry.name for entry in entries}
    expected = {SUMS_FILE, DEFINITION_FILE}
    irregular = sorted(entry.name for entry in entries if not stat.S_ISREG(entry.lstat().st_mode))
    if names != expected or irregular:
        problems = []
        if expected - names:
            problems.append("missing " + ", ".join(sorted(expected - names)))
        if names - expected:
            problems.append("unexpected " + ", ".join(sorted(names - expected)))
        if irregular:
            problems.append("not a regular file: " + ", ".join(irregular))
        raise _refuse(
            "coordinator.package.invalid",
            str(root),
            "The package must hold exactly the regular files SHA256SUMS and definition.json ("
            + "; ".join(problems)
            + ").",
        )
    sums = (root / SUMS_FILE).read_bytes()
    if len(sums) > limits.SHA256SUMS_MAX_BYTES:
        raise _refuse("coordinator.package.checksum", SUMS_FILE)
    match = _SUMS_LINE.match(sums.decode("ascii", errors="replace"))
    if match is None or match.group(2) != DEFINITION_FILE:
        raise _refuse("coordinator.package.checksum", SUMS_FILE)
    definition = (root / DEFINITION_FILE).read_bytes()
    if hashlib.sha256(definition).hexdigest() != match.group(1):
        raise _refuse("coordinator.package.checksum", SUMS_FILE)
    package_digest = sha256_label(sums)
    if expected_digest is not None and package_digest != expected_digest:
        raise _refuse("coordinator.package.digest-mismatch", SUMS_FILE)
    if len(definition) > limits.SNAPSHOT_MAX_BYTES:
        raise _refuse("coordinator.definition.canonical", DEFINITION_FILE)
    try:
        document = parse_strict_json(definition)
        canonical = canonical_json(document)
    except (StrictJsonError, ValueError):
        raise _refuse("coordinator.definition.canonical", DEFINITION_FILE) from None
    if canonical != definition:
        raise _refuse("coordinator.definition.canonical", DEFINITION_FILE)
    return LoadedPackage(root, package_digest, restore_snapshot(definition))


def restore_snapshot(data: bytes) -> Snapshot:
    """Restore a snapshot from bytes (02 §9.3); raises CoordinatorError on any refusal."""
    if len(data) > limits.SNAPSHOT_MAX_BYTES:
        raise _refuse("coordinator.definition.snapshot", DEFINITION_FILE)
    try:
        document = parse_strict_json(data)
    except (StrictJsonError, ValueError):
        raise _refuse("coordinator.definition.snapshot", DEFINITION_FILE) from None
    if not isinstance(document, dict):
        raise _refuse("coordinator.definition.snapshot", DEFINITION_FILE)
    expected_members = {
        "apiVersion",
        "kind",
        "workflow",
        "source",
        "adapterAbi",
        "interpreterAbi",
        "schemaAbi",
        "operationIdentities",
    }
    if (
        set(document) != expected_members
        or document["apiVersion"] != limits.SNAPSHOT_API_VERSION
        or document["kind"] != limits.KIND_SNAPSHOT
        or not isinstance(document["workflow"], dict)
        or not isinstance(document["source"], str)
    ):
        raise _refuse("coordinator.definition.snapshot", DEFINITION_FILE)
    if (
        document["adapterAbi"] != limits.ADAPTER_ABI
        or document["interpreterAbi"] != limits.INTERPRETER_ABI
        or document["schemaAbi"] != limits.SCHEMA_ABI
        or document["operationIdentities"] != operation_identities(document["workflow"])
    ):
        raise _refuse("coordinator.definition.abi", DEFINITION_FILE)
    _revalidate(document["workflow"], document["source"])
    return from_document(document)


def _revalidate(workflow: Mapping[str, Any], source: str) -> None:
    """Every definition rule that needs no runtime file, over the restored workflow and source."""
    diagnostics: list[Diagnostic] = []
    document = YamlDocument(value=dict(workflow), positions={}, key_positions={})
    if (
        workflow.get("apiVersion") != limits.PROJECT_API_VERSION
        or workflow.get("kind") != limits.KIND_PROJECT
    ):
        raise _refuse("coordinator.definition.snapshot", DEFINITION_FILE)
    decoded, failed = decode_body(
        document,
        load_schema("project"),
        file=DEFINITION_FILE,
        artifact=limits.KIND_SNAPSHOT,
        out=diagnostics,
    )
    authored = AuthoredFile(DEFINITION_FILE, document, decoded, failed, diagnostics)
    result = check_definition(authored, source, diagnostics)
    errors = [d for d in diagnostics if d.effective_severity == "error"]
    if errors:
        first = errors[0]
        raise CoordinatorError(
            Diagnostic(
                first.code, path=first.path, file=DEFINITION_FILE, artifact=limits.KIND_SNAPSHOT
            )
        )
    if result.graph is None:
        raise _refuse("coordinator.definition.snapshot", DEFINITION_FILE)
