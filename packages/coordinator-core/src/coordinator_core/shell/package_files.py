"""Immutable packages: writing one (02 §9.1), loading and verifying one (K1–K5, §9.2–§9.3).

K5 (restoring the snapshot into the IR, with every definition rule) is `definition.restore`.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from coordinator_core import limits
from coordinator_core.definition.ir import Definition
from coordinator_core.definition.restore import DEFINITION_FILE, restore_definition
from coordinator_core.definition.snapshot import Snapshot
from coordinator_core.errors import CoordinatorError, Diagnostic
from coordinator_core.values import StrictJsonError, canonical_json, parse_strict_json, sha256_label

__all__ = [
    "DEFINITION_FILE",
    "SUMS_FILE",
    "LoadedPackage",
    "load_package",
    "write_package",
]

SUMS_FILE: Final = "SHA256SUMS"
_SUMS_LINE: Final = re.compile(r"^([0-9a-f]{64})  (\S+)\n$")


@dataclass(frozen=True)
class LoadedPackage:
    """A verified package: its digest and the restored definition (its functions compiled)."""

    root: Path
    package_digest: str
    definition: Definition

    @property
    def snapshot(self) -> Snapshot:
        return self.definition.snapshot


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
    return LoadedPackage(root, package_digest, restore_definition(definition))
