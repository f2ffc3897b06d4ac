"""Fixtures of the store conformance suite: one suite, both backends.

Reusable PostgreSQL fixtures (for the API and end-to-end suites too):

* `postgres_url` (session): a fresh database `coordinator_test_<random>` on the server named by
  `COORDINATOR_TEST_POSTGRES_URL` (default `postgresql://root@127.0.0.1:5432/root`, trust
  auth), created for the test session and dropped (`WITH (FORCE)`) after it. When the server
  is unreachable the test **fails** if the environment has `CI=true` and is **skipped** with
  the reason otherwise, so a laptop without PostgreSQL still runs the SQLite half.
* `postgres_role` (session): a factory creating login roles (`coordinator_rt_<random>`) in the
  cluster, each dropped after the session (`DROP OWNED` in the test database, then `DROP ROLE`).

Suite fixtures: `backend` (parametrised `sqlite` / `postgresql`: a fresh, not yet migrated store
location per test: a temporary file, or a fresh namespace in the session database),
`sqlite_backend` / `postgresql_backend` (one backend only), `migrated` (parametrised: a migrated
store with the test package active) and `store` (a `Store` opened on `migrated`).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from store_support import ACTIVATION, IDENTITY, Backend

from coordinator_core.store import Store

ADMIN_URL_VARIABLE = "COORDINATOR_TEST_POSTGRES_URL"
DEFAULT_ADMIN_URL = "postgresql://root@127.0.0.1:5432/root"


def _with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + database, parts.query, parts.fragment))


def _postgres_unavailable(reason: str) -> None:
    message = f"PostgreSQL is unavailable for the store suite: {reason}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message + " (CI=true: PostgreSQL tests must run)", pytrace=False)
    pytest.skip(message + f" (set {ADMIN_URL_VARIABLE} or start PostgreSQL; CI=true fails)")


@pytest.fixture(scope="session")
def postgres_admin_url() -> str:
    """The maintenance URL used to create and drop test databases and roles."""
    return os.environ.get(ADMIN_URL_VARIABLE, DEFAULT_ADMIN_URL)


@pytest.fixture(scope="session")
def postgres_url(postgres_admin_url: str) -> Iterator[str]:
    """A `postgresql://` URL of a fresh database for this session; dropped afterwards."""
    name = f"coordinator_test_{secrets.token_hex(6)}"
    try:
        with psycopg.connect(postgres_admin_url, autocommit=True, connect_timeout=3) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as error:
        _postgres_unavailable(type(error).__name__)
    try:
        yield _with_database(postgres_admin_url, name)
    finally:
        with psycopg.connect(postgres_admin_url, autocommit=True, connect_timeout=3) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def postgres_role(postgres_url: str, postgres_admin_url: str) -> Iterator[Callable[[], str]]:
    """Create login roles for the session (e.g. a `runtimeRole`); each is dropped afterwards."""
    created: list[str] = []

    def create() -> str:
        role = f"coordinator_rt_{secrets.token_hex(5)}"
        with psycopg.connect(postgres_admin_url, autocommit=True) as admin:
            admin.execute(f'CREATE ROLE "{role}" LOGIN')
        created.append(role)
        return role

    yield create
    for role in created:
        with psycopg.connect(postgres_url, autocommit=True) as database:
            database.execute(f'DROP OWNED BY "{role}"')
        with psycopg.connect(postgres_admin_url, autocommit=True) as admin:
            admin.execute(f'DROP ROLE IF EXISTS "{role}"')


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
    shared.execute("TRUNCATE steps, runs, activations")
    shared.execute(
        "UPDATE control SET database_id = %s, schema_version = 1, restore_hold = false,"
        " admissions_hold = false, restore_evidence_ref = NULL, admission_recovery_ref = NULL,"
        " active_package_digest = NULL, active_revision = NULL, admission_key_commitment = %s,"
        " state_key_commitments = %s::jsonb",
        IDENTITY.database_id,
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
