"""Fixtures of the store conformance suite: one suite, both backends.

PostgreSQL comes from tests/conftest.py (`postgres_url`, `postgres_role`: a fresh database per
session; fail under `CI=true` when the server is missing, skip elsewhere).

Suite fixtures: `backend` (parametrised `sqlite` / `postgresql`: a fresh, not yet migrated store
location per test: a temporary file, or a fresh namespace in the session database),
`sqlite_backend` / `postgresql_backend` (one backend only), `migrated` (parametrised: a migrated
store with the test package active) and `store` (a `Store` opened on `migrated`).
"""

from __future__ import annotations

import json
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from store_support import ACTIVATION, IDENTITY, Backend

from coordinator_core.shell.store import Store, supported_version


def _location(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if kind == "sqlite":
        yield Backend("sqlite", f"sqlite:///{tmp_path / 'store.db'}", None, tmp_path / "store.db")
        return
    url: str = request.getfixturevalue("postgres_url")
    namespace = f"coordinator_t{secrets.token_hex(6)}"
    yield Backend("postgresql", url, namespace, None)
    with psycopg.connect(url, autocommit=True) as database:
        database.execute(f'DROP SCHEMA IF EXISTS "{namespace}" CASCADE')


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A fresh, empty store location on each backend."""
    yield from _location(request.param, request, tmp_path)


@pytest.fixture
def sqlite_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A fresh SQLite location, for the rules only SQLite has (file mode, process lock)."""
    yield from _location("sqlite", request, tmp_path)


@pytest.fixture
def postgresql_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A fresh PostgreSQL namespace, for the rules only PostgreSQL has (namespace, roles)."""
    yield from _location("postgresql", request, tmp_path)


@pytest.fixture(scope="session")
def _sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("store-template") / "store.db"
    template = Backend("sqlite", f"sqlite:///{path}", None, path)
    template.migrate()
    template.apply(ACTIVATION)
    return path


@pytest.fixture(scope="session")
def _postgres_store(postgres_url: str) -> Backend:
    namespace = f"coordinator_s{secrets.token_hex(6)}"
    shared = Backend("postgresql", postgres_url, namespace, None)
    shared.migrate()
    return shared


@pytest.fixture(params=["sqlite", "postgresql"])
def migrated(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """A migrated store with the test package active, in its just-applied state.

    Migrating is what the migration tests exercise; the other tests start from a copy of a
    migrated SQLite file, or from the session's PostgreSQL namespace reset to the same state.
    """
    if request.param == "sqlite":
        path = tmp_path / "store.db"
        shutil.copy2(request.getfixturevalue("_sqlite_template"), path)
        return Backend("sqlite", f"sqlite:///{path}", None, path)
    shared: Backend = request.getfixturevalue("_postgres_store")
    shared.execute(
        "TRUNCATE step_attempts, steps, runs, activations, definitions, live_bindings, journal_heads"
    )
    shared.execute(
        "UPDATE control SET database_id = %s, schema_version = %s, restore_hold = false,"
        " admissions_hold = false, restore_evidence_ref = NULL, admission_recovery_ref = NULL,"
        " active_package_digest = NULL, active_revision = NULL, admission_key_commitment = %s,"
        " state_key_commitments = %s::jsonb",
        IDENTITY.database_id,
        supported_version(),
        IDENTITY.admission_key_commitment,
        json.dumps({str(v): m for v, m in IDENTITY.state_key_commitments.items()}),
    )
    shared.apply(ACTIVATION)
    return shared


@pytest.fixture
def store(migrated: Backend) -> Iterator[Store]:
    """A `Store` opened, as the service opens it, on the `migrated` store."""
    opened = migrated.open(IDENTITY)
    yield opened
    opened.close()
