"""The store's Alembic migrations and the ledger rules built on them (file 07 §14.4).

Revisions live in `versions/`, are written by hand, are forward-only and each declares its
integer schema `VERSION`. The ledger checksum of a version is the SHA-256 of its revision
file's bytes, so the service can prove that the store was migrated by exactly these scripts.
Migrations are applied only by `coordinator_core.store.deployment.migrate`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Final

from alembic.config import Config
from alembic.script import ScriptDirectory

__all__ = ["MIGRATIONS_DIR", "Migration", "alembic_config", "supported_migrations"]

MIGRATIONS_DIR: Final = Path(__file__).parent


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema version this build can apply: its Alembic revision and ledger checksum."""

    version: int
    revision: str
    checksum: str


def alembic_config() -> Config:
    """A programmatic Alembic configuration (no alembic.ini, no logging set-up)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


@cache
def supported_migrations() -> tuple[Migration, ...]:
    """Every migration of this build in order; versions are 1, 2, 3, … without gaps."""
    scripts = ScriptDirectory.from_config(alembic_config())
    found: list[Migration] = []
    for script in reversed(list(scripts.walk_revisions("base", "heads"))):
        version = getattr(script.module, "VERSION", None)
        if not isinstance(version, int) or version != len(found) + 1:
            raise RuntimeError("The store migrations are not numbered 1, 2, 3, … in order.")
        digest = hashlib.sha256(Path(script.path).read_bytes()).hexdigest()
        found.append(Migration(version, script.revision, f"sha256:{digest}"))
    return tuple(found)
