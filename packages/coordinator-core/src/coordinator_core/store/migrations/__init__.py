"""The store's Alembic migrations and the ledger rules built on them (file 07 §14.4).

Revisions live in `versions/`, are written by hand, are forward-only and each declares its
integer schema `VERSION`. The ledger checksum of a version is the SHA-256 of its revision
file's bytes, so the service can prove that the store was migrated by exactly these scripts.
Migrations are applied only by `coordinator_core.store.deployment.migrate`.

The service checks the ledger without importing Alembic: the revisions' constants are read
from their source here (Alembic is imported only when migrating).
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = ["MIGRATIONS_DIR", "Migration", "alembic_config", "supported_migrations"]

MIGRATIONS_DIR: Final = Path(__file__).parent
_VERSIONS_DIR: Final = MIGRATIONS_DIR / "versions"


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema version this build can apply: its Alembic revision and ledger checksum."""

    version: int
    revision: str
    down_revision: str | None
    checksum: str


def alembic_config() -> Config:
    """A programmatic Alembic configuration (no alembic.ini, no logging set-up)."""
    from alembic.config import Config

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
            Migration(version, revision, down, "sha256:" + hashlib.sha256(source).hexdigest())
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
