"""The store's Alembic migrations and the ledger rules built on them (file 07 §14.4).

Revisions live in `versions/`, are written by hand, are forward-only and each declares its
integer schema `VERSION`. The ledger checksum of a version is the SHA-256 of its revision
file's bytes, so the service can prove that the store was migrated by exactly these scripts.
Migrations are applied only by `coordinator_core.shell.store.deploy.migrate`.

A released revision file is never edited, with one documented exception: when the store package
moved to `coordinator_core.shell.store` (the layout of 2026-12), the one import line of versions
1 and 2 (`from coordinator_core.store.dialect import …`) had to follow it, which changed their
bytes. `RELOCATED_CHECKSUMS` keeps, for each such version, the checksum of the bytes released
before that move, so a store migrated by them still verifies; any other checksum still refuses.

The service checks the ledger without importing Alembic: the revisions' constants are read
from their source here (Alembic is imported only when migrating).
"""

from __future__ import annotations

import ast
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = [
    "MIGRATIONS_DIR",
    "RELOCATED_CHECKSUMS",
    "Migration",
    "alembic_config",
    "supported_migrations",
]


def _package_directory() -> Path:
    """This package's directory (package data: `env.py`, `script.py.mako`, `versions/`), found
    with importlib.resources. Alembic runs the scripts from a directory on disk, which every
    installed wheel is; a zipped install has none and is refused here, at import."""
    package = files(__name__)
    if not isinstance(package, Path):  # pragma: no cover - zipimport, which pip never installs
        raise RuntimeError("The store migrations must be installed as files, not zipped.")
    return package


MIGRATIONS_DIR: Final = _package_directory()
_VERSIONS_DIR: Final = MIGRATIONS_DIR / "versions"

# version → the ledger checksum of its released bytes before the relocation of the store package
# (only the import line of `coordinator_core.store.dialect` differed; computed with
# `git show <release>:packages/coordinator-core/src/coordinator_core/store/migrations/versions/
# <file> | sha256sum`). A store migrated by those bytes holds these checksums in its ledger.
RELOCATED_CHECKSUMS: Final[Mapping[int, tuple[str, ...]]] = MappingProxyType(
    {
        1: ("sha256:8bedcee3aeb894c9993746c224f1208424f23a3d353ed9f0a204d40907c2c6f3",),
        2: ("sha256:65e0e5ea6bafee11ffa604c45ef6c0173cc206ae19adaa5cacb1d15278864d22",),
    }
)


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema version this build can apply: its Alembic revision and ledger checksum."""

    version: int
    revision: str
    down_revision: str | None
    checksum: str
    # Checksums of earlier released bytes of the same revision (`RELOCATED_CHECKSUMS`).
    earlier_checksums: tuple[str, ...] = ()

    def accepts(self, checksum: str) -> bool:
        """A ledger row's checksum is this revision's: its bytes now, or its earlier released
        bytes (compared in constant time)."""
        found = False
        for known in (self.checksum, *self.earlier_checksums):
            found |= hmac.compare_digest(known, checksum)
        return found


def alembic_config() -> Config:
    """A programmatic Alembic configuration (no alembic.ini, no logging set-up)."""
    from alembic.config import Config  # noqa: PLC0415 - the service reads the ledger without Alembic

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


def _constants(source: bytes) -> dict[str, object]:
    found: dict[str, object] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and isinstance(node.value, ast.Constant):
                found[target.id] = node.value.value
    return found


@cache
def supported_migrations() -> tuple[Migration, ...]:
    """Every migration of this build in order: versions 1, 2, 3, … without gaps, each revising
    the one before (a single linear history)."""
    found: list[Migration] = []
    for path in sorted(_VERSIONS_DIR.glob("v[0-9]*.py")):
        source = path.read_bytes()
        constants = _constants(source)
        version, revision = constants.get("VERSION"), constants.get("revision")
        down = constants.get("down_revision")
        if not isinstance(version, int) or not isinstance(revision, str):
            raise RuntimeError("A store migration lacks its VERSION or revision.")
        if down is not None and not isinstance(down, str):
            raise RuntimeError("A store migration has a malformed down_revision.")
        found.append(
            Migration(
                version,
                revision,
                down,
                "sha256:" + hashlib.sha256(source).hexdigest(),
                RELOCATED_CHECKSUMS.get(version, ()),
            )
        )
    found.sort(key=lambda migration: migration.version)
    previous: str | None = None
    for number, migration in enumerate(found, start=1):
        if migration.version != number or migration.down_revision != previous:
            raise RuntimeError("The store migrations are not one linear history 1, 2, 3, ….")
        previous = migration.revision
    if not found:
        raise RuntimeError("The store ships no migration.")
    return tuple(found)
