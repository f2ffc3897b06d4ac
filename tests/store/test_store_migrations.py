"""Migrations and deployment checks (07 §14.2–§14.4, §15; 09 §3), on both backends."""

from __future__ import annotations

import base64
import os
import sqlite3
import stat
from dataclasses import replace
from typing import Any, get_args
from urllib.parse import urlsplit

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import (
    CheckConstraint,
    Column,
    LargeBinary,
    MetaData,
    String,
    Table,
    insert,
    inspect,
)
from store_support import ACTIVATION, IDENTITY, SECOND, T0, Backend, admit, changed, with_user
from store_support import admission as store_admission

from coordinator_core.engine.state import TERMINAL_STATUSES as ENGINE_TERMINAL
from coordinator_core.engine.state import RunStatusValue, StepState, StepType
from coordinator_core.errors import CoordinatorError
from coordinator_core.shell.store import (
    NAMESPACE_MARKER,
    ActivationRequest,
    ProcessLock,
    Store,
    guards,
    inspect_deployment,
    locate,
    migrate,
    supported_version,
)
from coordinator_core.shell.store import deploy as store_deploy
from coordinator_core.shell.store.dialect import (
    CompactJson,
    HexKey,
    JsonDocument,
    SealedBytes,
    create_store_engine,
)
from coordinator_core.shell.store.migrations import RELOCATED_CHECKSUMS, supported_migrations
from coordinator_core.shell.store.schema import (
    DEFINITIONS,
    LIVE_BINDINGS,
    METADATA,
    RUN_STATUSES,
    RUNS,
    STEP_STATES,
    STEP_TYPES,
    STEPS,
    TERMINAL_STATUSES,
    run_values,
    step_values,
)


def _code(error: pytest.ExceptionInfo[CoordinatorError]) -> str:
    return error.value.code


def test_migrate_creates_the_store_and_a_second_run_applies_nothing(backend: Backend) -> None:
    first = backend.migrate()
    second = backend.migrate()
    assert (first.from_version, first.to_version) == (0, supported_version())
    assert (second.from_version, second.to_version) == (supported_version(), supported_version())
    state = inspect_deployment(backend.url, namespace=backend.namespace)
    versions = tuple(range(1, supported_version() + 1))
    assert state.exists and state.applied == versions and state.pending == ()
    assert state.checksums_match
    assert state.control is not None and state.control.database_id == IDENTITY.database_id
    assert state.control.restore_hold is False and state.control.admissions_hold is False
    assert state.active is None  # migrate never activates a package
    assert [row[0] for row in backend.execute("SELECT version FROM migrations")] == list(versions)


def test_the_migration_creates_exactly_the_declared_schema(backend: Backend) -> None:
    backend.migrate()
    engine = create_store_engine(locate(backend.url, namespace=backend.namespace))

    def include(_obj: Any, name: str | None, type_: str, _reflected: bool, _other: Any) -> bool:
        return not (type_ == "table" and name == "alembic_version")

    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection, opts={"include_object": include, "compare_type": True}
            )
            differences = compare_metadata(context, METADATA)
            inspector = inspect(connection)
            checks = {
                table.name: {c["name"] for c in inspector.get_check_constraints(table.name)}
                for table in METADATA.sorted_tables
            }
    finally:
        engine.dispose()
    assert differences == []
    declared = {
        table.name: {c.name for c in table.constraints if isinstance(c, CheckConstraint) and c.name}
        for table in METADATA.sorted_tables
    }
    # Boolean columns may add unnamed checks on SQLite; the named ones must be the same.
    assert {name: found & declared[name] for name, found in checks.items()} == declared


def _runs_storage(backend: Backend) -> Any:
    """PostgreSQL: the storage parameters of the namespace's `runs` table."""
    rows = backend.execute(
        "SELECT c.reloptions FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relname = 'runs'",
        backend.namespace,
    )
    assert len(rows) == 1
    return rows[0][0]


def test_postgresql_runs_pages_keep_room_for_a_carried_run(postgresql_backend: Backend) -> None:
    """Schema version 7: the `runs` table's fillfactor, as declared (the metadata comparison
    above does not compare storage parameters)."""
    postgresql_backend.migrate()
    declared = RUNS.dialect_options["postgresql"]["with"]
    assert declared == {"fillfactor": 70}
    assert _runs_storage(postgresql_backend) == ["fillfactor=70"]


def test_a_version_6_store_migrates_to_version_7_with_its_runs_kept(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 7 changes a storage parameter only (PostgreSQL): a store in use at version 6
    migrates in place and reads back its runs as they were."""
    every = supported_migrations()
    assert [migration.version for migration in every[5:7]] == [6, 7]
    monkeypatch.setattr(guards, "supported_migrations", lambda: every[:6])
    monkeypatch.setattr(store_deploy, "supported_migrations", lambda: every[:6])
    assert backend.migrate().to_version == 6
    backend.apply()
    store = backend.open()
    try:
        run = admit(store, "before")
        before = store.reads.get_run_snapshot(run.run_id)
    finally:
        store.close()
    monkeypatch.undo()
    result = backend.migrate()
    assert (result.from_version, result.to_version) == (6, 7)
    if backend.kind == "postgresql":
        assert _runs_storage(backend) == ["fillfactor=70"]
    store = backend.open()
    try:
        after = store.reads.get_run_snapshot(run.run_id)
        assert before is not None and after is not None
        assert (after.run, after.steps) == (before.run, before.steps)
        assert (before.control.schema_version, after.control.schema_version) == (6, 7)
    finally:
        store.close()


def test_the_schema_vocabulary_is_the_engine_vocabulary() -> None:
    assert set(RUN_STATUSES) == set(get_args(RunStatusValue))
    assert set(STEP_STATES) == set(get_args(StepState))
    assert set(STEP_TYPES) == set(get_args(StepType))
    assert set(TERMINAL_STATUSES) == set(ENGINE_TERMINAL)


def test_inspecting_an_absent_store_creates_nothing(backend: Backend) -> None:
    state = inspect_deployment(backend.url, namespace=backend.namespace)
    assert not state.exists and state.applied == ()
    assert state.pending == tuple(range(1, supported_version() + 1))
    if backend.path is not None:
        assert not backend.path.exists()


def test_sqlite_file_is_created_owner_only(sqlite_backend: Backend) -> None:
    old = os.umask(0)
    try:
        sqlite_backend.migrate()
    finally:
        os.umask(old)
    assert sqlite_backend.path is not None
    assert stat.S_IMODE(sqlite_backend.path.stat().st_mode) == 0o600


def test_postgresql_namespace_carries_the_store_marker(postgresql_backend: Backend) -> None:
    postgresql_backend.migrate()
    with psycopg.connect(postgresql_backend.url) as connection:
        marker = connection.execute(
            "SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = %s",
            (postgresql_backend.namespace,),
        ).fetchone()
    assert marker == (NAMESPACE_MARKER,)


def test_an_existing_foreign_schema_is_refused_and_left_untouched(
    postgresql_backend: Backend,
) -> None:
    with psycopg.connect(postgresql_backend.url, autocommit=True) as connection:
        connection.execute(f'CREATE SCHEMA "{postgresql_backend.namespace}"')
        connection.execute(f'CREATE TABLE "{postgresql_backend.namespace}".precious (id int)')
    with pytest.raises(CoordinatorError) as refused:
        postgresql_backend.migrate()
    assert _code(refused) == "coordinator.command.namespace-occupied"
    with pytest.raises(CoordinatorError) as opened:
        postgresql_backend.open()
    assert _code(opened) == "coordinator.command.namespace-occupied"
    tables = postgresql_backend.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
        postgresql_backend.namespace,
    )
    assert tables == [("precious",)]


def test_migrate_refuses_another_database_id(backend: Backend) -> None:
    backend.migrate()
    with pytest.raises(CoordinatorError) as refused:
        backend.migrate(replace(IDENTITY, database_id="someone-else"))
    assert _code(refused) == "coordinator.deployment.database-id-mismatch"


def test_migrate_refuses_a_changed_admission_key(backend: Backend) -> None:
    backend.migrate()
    with pytest.raises(CoordinatorError) as refused:
        backend.migrate(replace(IDENTITY, admission_key_commitment="c" * 64))
    assert _code(refused) == "coordinator.command.admission-key-custody"


def test_migrate_and_apply_register_new_state_key_versions_but_refuse_a_changed_key(
    backend: Backend,
) -> None:
    backend.migrate()
    rotated = replace(IDENTITY, state_key_commitments={1: "b" * 64, 2: "d" * 64})
    backend.migrate(rotated)
    with pytest.raises(CoordinatorError) as refused:
        backend.migrate(replace(IDENTITY, state_key_commitments={1: "e" * 64}))
    assert _code(refused) == "coordinator.command.state-key-custody"
    backend.apply(
        ACTIVATION, replace(rotated, state_key_commitments={1: "b" * 64, 2: "d" * 64, 3: "f" * 64})
    )
    state = inspect_deployment(backend.url, namespace=backend.namespace)
    assert state.control is not None
    assert state.control.state_key_commitments == {1: "b" * 64, 2: "d" * 64, 3: "f" * 64}


def test_the_service_refuses_another_database_id_or_key(backend: Backend) -> None:
    backend.migrate()
    backend.apply()
    cases = {
        "coordinator.deployment.database-id-mismatch": replace(IDENTITY, database_id="other"),
        "coordinator.command.admission-key-custody": replace(
            IDENTITY, admission_key_commitment="c" * 64
        ),
        "coordinator.command.state-key-custody": replace(IDENTITY, active_state_key=2),
        "coordinator.deployment.refused": replace(IDENTITY, package_digest="sha256:" + "9" * 64),
    }
    for code, identity in cases.items():
        with pytest.raises(CoordinatorError) as refused:
            backend.open(identity)
        assert _code(refused) == code
    # A registered state-key version missing from the configuration is refused too.
    backend.migrate(replace(IDENTITY, state_key_commitments={1: "b" * 64, 2: "d" * 64}))
    with pytest.raises(CoordinatorError) as missing:
        backend.open(IDENTITY)
    assert _code(missing) == "coordinator.command.state-key-custody"


@pytest.mark.parametrize(
    "tamper",
    [
        "UPDATE migrations SET checksum = 'sha256:0'",
        "INSERT INTO migrations (version, applied_at, checksum)"
        f" SELECT {supported_version() + 1}, applied_at, checksum FROM migrations WHERE version = 1",
        "DELETE FROM migrations",
        f"UPDATE control SET schema_version = {supported_version() + 1}",
    ],
    ids=["checksum", "newer", "missing", "control-version"],
)
def test_a_store_at_another_schema_version_is_refused(backend: Backend, tamper: str) -> None:
    backend.migrate()
    backend.apply()
    backend.open().close()
    backend.execute(tamper)
    with pytest.raises(CoordinatorError) as refused:
        backend.open()
    assert _code(refused) == "coordinator.deployment.schema-mismatch"


def test_a_ledger_of_the_bytes_released_before_the_store_moved_still_verifies(
    backend: Backend,
) -> None:
    # Versions 1 and 2 changed one import line when the store moved under `shell/`; a store
    # migrated by their earlier bytes carries the earlier checksums, and still opens.
    backend.migrate()
    backend.apply()
    for version, (earlier,) in RELOCATED_CHECKSUMS.items():
        backend.execute(f"UPDATE migrations SET checksum = '{earlier}' WHERE version = {version}")
    backend.open().close()
    state = inspect_deployment(backend.url, namespace=backend.namespace)
    assert state.checksums_match
    # Any other checksum still refuses, the earlier one of another version included.
    backend.execute(
        f"UPDATE migrations SET checksum = '{RELOCATED_CHECKSUMS[2][0]}' WHERE version = 1"
    )
    with pytest.raises(CoordinatorError) as refused:
        backend.open()
    assert _code(refused) == "coordinator.deployment.schema-mismatch"
    assert not inspect_deployment(backend.url, namespace=backend.namespace).checksums_match


def test_an_unmigrated_store_is_refused_by_service_and_apply(backend: Backend) -> None:
    with pytest.raises(CoordinatorError) as opened:
        backend.open()
    assert _code(opened) == "coordinator.deployment.schema-mismatch"
    with pytest.raises(CoordinatorError) as applied:
        backend.apply()
    assert _code(applied) == "coordinator.deployment.schema-pending"
    if backend.path is not None:
        assert not backend.path.exists()


def test_apply_appends_activations_and_sets_the_active_package(backend: Backend) -> None:
    backend.migrate()
    first = backend.apply()
    second_package = ActivationRequest(
        "sha256:" + "5" * 64, "wf", "sha256:" + "6" * 64, "sha256:" + "7" * 64
    )
    second = backend.apply(second_package)
    assert (first.apply_order, second.apply_order) == (1, 2)
    assert second.predecessor_package_digest == ACTIVATION.package_digest
    assert first.role_mode == ("embedded" if backend.kind == "sqlite" else "split")
    state = inspect_deployment(backend.url, namespace=backend.namespace)
    assert state.active == second
    assert state.control is not None and state.control.active_revision == "sha256:" + "6" * 64


def test_apply_runs_the_live_binding_check_over_unsettled_runs(backend: Backend) -> None:
    backend.migrate()
    backend.apply()
    with backend.open() as store:
        admit(store, "k1")
    seen: list[frozenset[tuple[str, str]]] = []

    def conflict(pairs: frozenset[tuple[str, str]]) -> bool:
        seen.append(pairs)
        return False

    with pytest.raises(CoordinatorError) as refused:
        backend.apply(bindings_ok=conflict)
    assert _code(refused) == "coordinator.command.live-binding-conflict"
    assert seen == [frozenset({("sha256:" + "3" * 64, "sha256:" + "4" * 64)})]


def test_sqlite_migrate_and_apply_refuse_while_a_service_holds_the_store(
    sqlite_backend: Backend,
) -> None:
    sqlite_backend.migrate()
    sqlite_backend.apply()
    with sqlite_backend.open(exclusive=True):
        for command in (
            sqlite_backend.migrate,
            sqlite_backend.apply,
            lambda: sqlite_backend.open(exclusive=True),
        ):
            with pytest.raises(CoordinatorError) as busy:
                command()
            assert _code(busy) == "coordinator.command.store-busy"
        assert inspect_deployment(sqlite_backend.url).exists  # plan/deployment-status may read
    sqlite_backend.migrate()  # released on close


def test_process_lock_is_exclusive_between_holders(tmp_path: Any) -> None:
    path = tmp_path / "store.db.lock"
    with ProcessLock(path), pytest.raises(CoordinatorError):
        ProcessLock(path).acquire()
    ProcessLock(path).acquire().release()


def test_runtime_role_gets_exactly_its_grants(
    postgresql_backend: Backend, request: pytest.FixtureRequest
) -> None:
    role = request.getfixturevalue("postgres_role")()
    identity = replace(IDENTITY, runtime_role=role)
    postgresql_backend.migrate(identity)
    postgresql_backend.apply(ACTIVATION, identity)
    runtime_url = with_user(postgresql_backend.url, role)
    runtime = Backend("postgresql", runtime_url, postgresql_backend.namespace, None)
    with runtime.open(identity) as store:
        store.verify()
        run = admit(store, "k1")
        assert store.reads.get_run(run.run_id) is not None
        store.operator.release_restore_hold("evidence")  # hold columns are the runtime's to update
    with psycopg.connect(runtime_url, autocommit=True) as connection:
        connection.execute(f'SET search_path TO "{postgresql_backend.namespace}"')
        for forbidden in (
            "CREATE TABLE intruder (id int)",
            "UPDATE control SET database_id = 'x'",
            "UPDATE control SET active_package_digest = NULL",
            "DELETE FROM migrations",
            "INSERT INTO activations SELECT * FROM activations",
            "TRUNCATE runs CASCADE",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                connection.execute(forbidden.encode())
    # The migration role is not the runtime role: the service check refuses it.
    with pytest.raises(CoordinatorError) as refused:
        postgresql_backend.open(identity)
    assert _code(refused) == "coordinator.deployment.refused"


def test_migrate_refuses_a_runtime_role_that_owns_the_namespace(
    postgresql_backend: Backend, request: pytest.FixtureRequest
) -> None:
    with pytest.raises(CoordinatorError) as refused:
        owner = urlsplit(postgresql_backend.url).username
        postgresql_backend.migrate(replace(IDENTITY, runtime_role=owner))
    assert _code(refused) == "coordinator.deployment.refused"


def test_store_times_round_trip_identically(backend: Backend) -> None:
    backend.migrate(now=T0 + 123)
    state = inspect_deployment(backend.url, namespace=backend.namespace)
    assert state.control is not None
    assert state.control.created_at == T0 + 123
    assert type(state.control.created_at) is int


def test_an_unreachable_postgresql_is_store_unavailable() -> None:
    unreachable = "postgresql://nobody@127.0.0.1:1/none"
    for attempt in (
        lambda: Store.open(unreachable, IDENTITY, namespace="coordinator_x"),
        lambda: migrate(unreachable, IDENTITY, namespace="coordinator_x"),
        lambda: inspect_deployment(unreachable, namespace="coordinator_x"),
    ):
        with pytest.raises(CoordinatorError) as refused:
            attempt()
        assert _code(refused) == "coordinator.command.store-unavailable"


def test_a_connection_to_another_database_than_named_is_refused(
    postgresql_backend: Backend,
) -> None:
    postgresql_backend.migrate()
    location = locate(postgresql_backend.url, namespace=postgresql_backend.namespace)
    engine = create_store_engine(replace(location, database="some_other_database"))
    try:
        with pytest.raises(CoordinatorError) as refused, engine.connect():
            pass
        assert _code(refused) == "coordinator.deployment.refused"
    finally:
        engine.dispose()


def test_sqlite_connections_use_wal_full_sync_and_immediate_write_transactions(
    sqlite_backend: Backend,
) -> None:
    sqlite_backend.migrate()
    assert sqlite_backend.path is not None
    engine = create_store_engine(locate(sqlite_backend.url))
    try:
        with engine.begin() as connection:
            pragmas = {
                name: connection.exec_driver_sql(f"PRAGMA {name}").scalar()
                for name in ("journal_mode", "synchronous", "foreign_keys", "busy_timeout")
            }
            assert pragmas == {
                "journal_mode": "wal",
                "synchronous": 2,
                "foreign_keys": 1,
                "busy_timeout": 5000,
            }
            # Only reads so far, yet the write lock is held: the transaction began IMMEDIATE.
            other = sqlite3.connect(sqlite_backend.path, timeout=0, isolation_level=None)
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")
            other.close()
    finally:
        engine.dispose()


def test_postgresql_connections_search_the_namespace_first(postgresql_backend: Backend) -> None:
    postgresql_backend.migrate()
    engine = create_store_engine(
        locate(postgresql_backend.url, namespace=postgresql_backend.namespace)
    )
    try:
        with engine.connect() as connection:
            path = connection.exec_driver_sql("SHOW search_path").scalar()
    finally:
        engine.dispose()
    assert path == f'"{postgresql_backend.namespace}",pg_catalog'


# -- schema version 3: parked runs in less space (issue 9) --------------------------------------

_SEALED = (
    b'{"sealedCoordinatorV1":"AQAAAAEAAQIDBAUGBwgJCgt/0fkZ7S36igENQmmm7ZpK+xF044HwY5ws02uTe34w'
    b'pMdO2ZBWx1DmBKO59r+byvLJsH9Jtqel/3pLHHyCwNG0RljVXDctNRo="}'
)  # the stored value of the 07 §10 test vector


def _in_version_2_types(table: Table) -> Table:
    """`table` with the column types schema version 2 had (text keys, sealed bytes as given)."""
    version_2: dict[type, Any] = {
        HexKey: String(),
        SealedBytes: LargeBinary(),
        CompactJson: JsonDocument,
    }
    columns = [
        Column(column.name, version_2.get(type(column.type), column.type)) for column in table.c
    ]
    return Table(table.name, MetaData(), *columns)


def test_a_version_2_store_migrates_to_version_3_and_reads_back_every_value_the_same(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The conversion of commitments and digests to their bytes (PostgreSQL) keeps every value;
    sealed values written before stay as they were and read back the same; new ones are kept
    and read back as their envelope."""
    every = supported_migrations()
    assert [migration.version for migration in every[:3]] == [1, 2, 3]
    monkeypatch.setattr(guards, "supported_migrations", lambda: every[:2])
    monkeypatch.setattr(store_deploy, "supported_migrations", lambda: every[:2])
    assert backend.migrate().to_version == 2
    admission = store_admission("before", T0, input=_SEALED)
    admitted = admission.run
    step = changed(
        admission.steps[0],
        command=_SEALED,
        command_prepared=True,
        completion_ref="c" * 64,
    )
    run = {
        "run_id": admitted.run_id,
        "start_identity": admitted.start_identity,
        "input_digest": admitted.input_digest,
        "owner": admitted.owner,
        "origin": "api",
        "trigger": None,
        "workflow_id": "wf",
        "workflow_version": "1",
        "revision": admitted.revision,
        "definition_digest": admitted.definition_digest,
        "binding_digest": admitted.binding_digest,
        "snapshot": None,
        "input": _SEALED,
        "policy": admitted.state.policy.to_json(),
        "current_step": step.step,
        "status": "running",
        "cancel_mode": "none",
        "cancel_requested": False,
        "restore_review": False,
        "outcome": None,
        "terminal_output": None,
        "failure_code": None,
        "admitted_at": T0,
        "deadline_at": T0 + 3600 * SECOND,
        "completed_at": None,
        "payload_erased_at": None,
        "updated_at": T0,
    }
    engine = create_store_engine(locate(backend.url, namespace=backend.namespace))
    try:
        with engine.begin() as connection:
            connection.execute(insert(_in_version_2_types(RUNS)).values(run))
            connection.execute(insert(_in_version_2_types(STEPS)).values(step_values(step)))
            connection.execute(
                insert(_in_version_2_types(DEFINITIONS)).values(
                    definition_digest=admitted.definition_digest,
                    run_id=admitted.run_id,
                    snapshot=_SEALED,
                    stored_at=T0,
                )
            )
            connection.execute(
                insert(_in_version_2_types(LIVE_BINDINGS)).values(
                    definition_digest=admitted.definition_digest,
                    binding_digest=admitted.binding_digest,
                    first_admitted_at=T0,
                )
            )
    finally:
        engine.dispose()
    monkeypatch.undo()
    migrated = backend.migrate()
    assert (migrated.from_version, migrated.to_version) == (2, supported_version())
    backend.apply()
    store = backend.open()
    try:
        snapshot = store.reads.get_run_snapshot(admitted.run_id)
        assert snapshot is not None
        # the columns a later version added read as None
        added = {"operator_action": None, "operator_action_at": None, "operator_reason_ref": None}
        assert run_values(snapshot.run) == run | added
        assert snapshot.current == step
        assert store.reads.definition_snapshot(admitted.definition_digest) == (
            admitted.run_id,
            _SEALED,
        )
        assert store.reads.find_run(admitted.start_identity) == snapshot.run
        assert store.reads.unsettled_bindings(T0) == {
            (admitted.definition_digest, admitted.binding_digest)
        }
        later = store.writes.admit(store_admission("after", T0, input=_SEALED), T0).run
        # given in the stored form, kept and handed out as its envelope alone
        envelope = base64.b64decode(_SEALED[24:-2])
        assert store.reads.get_run(later.run_id) == replace(later, input=envelope)
    finally:
        store.close()
    stored = backend.execute(
        "SELECT input, start_identity FROM runs WHERE run_id = %s",
        later.run_id if backend.kind == "postgresql" else later.run_id.hex,
    )
    kept, identity = stored[0]
    assert bytes(kept) == envelope
    if backend.kind == "postgresql":
        assert bytes(identity) == bytes.fromhex(later.start_identity)
        kinds = backend.execute(
            "SELECT table_name, column_name FROM information_schema.columns"
            " WHERE table_schema = %s AND data_type = 'bytea'"
            " AND column_name NOT IN ('snapshot', 'input', 'terminal_output', 'command',"
            " 'output')",
            backend.namespace,
        )
        assert sorted(kinds) == sorted(
            (table, column) for table, columns in _V3_KEYS.items() for column in columns
        )
    else:
        assert identity == later.start_identity  # SQLite keeps the text


_V3_KEYS = {
    "runs": (
        "start_identity",
        "input_digest",
        "owner",
        "revision",
        "definition_digest",
        "binding_digest",
    ),
    "steps": ("completion_ref",),
    "definitions": ("definition_digest",),
    "live_bindings": ("definition_digest", "binding_digest"),
}
