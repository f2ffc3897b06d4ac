"""The deployment side of the store: `migrate`, `apply` and the read-only state `plan` and
`deployment-status` report (file 09 §3; 07 §14.2–§14.4). These run with the migration role
(PostgreSQL) or with the service stopped (SQLite); the service itself never migrates.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import func, insert, select, text, update
from sqlalchemy.engine import Connection, Engine

from coordinator_core.engine.instants import Instant
from coordinator_core.shell.clock import wall_clock
from coordinator_core.shell.store.dialect import (
    NAMESPACE_MARKER,
    StoreKind,
    StoreLocation,
    create_store_engine,
    locate,
    lock_rows,
    quote_namespace,
    unavailable_as_refusal,
)
from coordinator_core.shell.store.guards import (
    RUNTIME_CONTROL_COLUMNS,
    RUNTIME_DML_TABLES,
    RUNTIME_READ_TABLES,
    ProcessLock,
    check_identity,
    check_known,
    check_ledger,
    check_state_keys,
    grant_problem,
    namespace_state,
    quote_role,
    read_control,
    read_ledger,
    refuse,
    role_problem,
    supported_version,
)
from coordinator_core.shell.store.migrations import alembic_config, supported_migrations
from coordinator_core.shell.store.queries import settled
from coordinator_core.shell.store.records import (
    ActivationRequest,
    ActivationRow,
    ControlRow,
    DeploymentIdentity,
)
from coordinator_core.shell.store.schema import ACTIVATIONS, ADMISSION_LOCK, CONTROL, LEDGER, RUNS

__all__ = [
    "DeploymentState",
    "MigrationResult",
    "apply_activation",
    "inspect_deployment",
    "migrate",
]

_ROLE_MODES: Final = {"postgresql": "split", "sqlite": "embedded"}


@dataclass(frozen=True, slots=True)
class MigrationResult:
    """The result of `migrate` (09 §3: `{store, fromVersion, toVersion}`)."""

    store: StoreKind
    from_version: int
    to_version: int


@dataclass(frozen=True, slots=True)
class DeploymentState:
    """What `plan` and `deployment-status` read (never written, never created)."""

    store: StoreKind
    exists: bool
    supported: int
    applied: tuple[int, ...]
    pending: tuple[int, ...]
    checksums_match: bool
    control: ControlRow | None
    active: ActivationRow | None


def _serialise(conn: Connection, location: StoreLocation) -> None:
    """07 §14.2: `migrate` and `apply` serialise on the namespace's advisory lock
    (PostgreSQL); SQLite is serialised by the process lock and `BEGIN IMMEDIATE`."""
    if location.kind == "postgresql":
        conn.execute(
            text("SELECT pg_advisory_xact_lock(hashtext(:namespace))"),
            {"namespace": location.namespace},
        )


def _process_lock(location: StoreLocation) -> ProcessLock | None:
    if location.kind != "sqlite":
        return None
    return ProcessLock(location.lock_path).acquire()


def _create_sqlite_file(location: StoreLocation) -> None:
    """05 §4.2: `migrate` creates the database file with mode 0600 (never widening it later)."""
    assert location.path is not None
    if not location.path.parent.is_dir():
        raise refuse("coordinator.command.store-unavailable")
    try:
        fd = os.open(location.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    os.close(fd)


def migrate(
    url: str,
    identity: DeploymentIdentity,
    *,
    namespace: str | None = None,
    now: Instant | None = None,
) -> MigrationResult:
    """Create the store if absent and apply every pending migration, each in its own
    transaction (07 §14.4; 09 §3 `migrate`).

    PostgreSQL: creates the namespace with its marker comment, refuses an existing schema
    without it (`namespace-occupied`, left untouched), and grants the runtime role exactly the
    rights of 07 §14.2. SQLite: creates the file with mode 0600, refuses while a service holds
    the store (`store-busy`). On first creation it writes the control row (databaseId and the
    custody markers); on an existing store it refuses another databaseId or admission key and
    a configured state key that differs from its marker, and registers new state-key versions.
    Never activates a package. Idempotent: a second run applies nothing.
    """
    from alembic import command  # noqa: PLC0415 - only `migrate` imports Alembic; the service checks the ledger without it

    with unavailable_as_refusal():
        return _migrate(command, url, identity, namespace, now)


def _migrate(
    command: Any,
    url: str,
    identity: DeploymentIdentity,
    namespace: str | None,
    now: Instant | None,
) -> MigrationResult:
    location = locate(url, namespace=namespace)
    moment = wall_clock() if now is None else now
    lock = _process_lock(location)
    engine: Engine | None = None
    try:
        if location.kind == "sqlite":
            _create_sqlite_file(location)
        engine = create_store_engine(location, pool_size=1)
        with engine.begin() as conn:
            from_version = _bootstrap_txn(conn, location, identity)
        for migration in supported_migrations():
            with engine.begin() as conn:
                _serialise(conn, location)
                if migration.version in (read_ledger(conn, location) or {}):
                    continue
                config = alembic_config()
                config.attributes["connection"] = conn
                command.upgrade(config, migration.revision)
                conn.execute(
                    insert(LEDGER).values(
                        version=migration.version, applied_at=moment, checksum=migration.checksum
                    )
                )
        with engine.begin() as conn:
            _finish_txn(conn, location, identity, moment)
    finally:
        if engine is not None:
            engine.dispose()
        if lock is not None:
            lock.release()
    return MigrationResult(location.kind, from_version, supported_version())


def _bootstrap_txn(conn: Connection, location: StoreLocation, identity: DeploymentIdentity) -> int:
    """Claim the namespace and check an existing store before anything changes."""
    _serialise(conn, location)
    if location.kind == "postgresql":
        assert location.namespace is not None
        state = namespace_state(conn, location.namespace)
        if state == "foreign":
            raise refuse("coordinator.command.namespace-occupied")
        if state == "absent":
            quoted = quote_namespace(location.namespace)
            conn.execute(text(f"CREATE SCHEMA {quoted}"))
            conn.execute(text(f"COMMENT ON SCHEMA {quoted} IS '{NAMESPACE_MARKER}'"))
    applied = read_ledger(conn, location) or {}
    check_known(applied)
    control = read_control(conn, location)
    if control is not None:
        _check_existing(control, identity)
    return max(applied, default=0)


def _check_existing(control: ControlRow, identity: DeploymentIdentity) -> None:
    if control.database_id != identity.database_id:
        raise refuse("coordinator.deployment.database-id-mismatch")
    if control.admission_key_commitment != identity.admission_key_commitment:
        raise refuse(
            "coordinator.command.admission-key-custody",
            "The configured admission key (`deployment.admissionKeyRef`) differs from the one"
            " the store was created with.",
        )
    check_state_keys(control.state_key_commitments, identity.state_key_commitments, None)


def _finish_txn(
    conn: Connection, location: StoreLocation, identity: DeploymentIdentity, moment: Instant
) -> None:
    """Write or update the control row, the admission-lock row and the runtime grants."""
    _serialise(conn, location)
    check_ledger(read_ledger(conn, location), pending_code="coordinator.deployment.schema-pending")
    control = read_control(conn, location)
    configured = {str(v): m for v, m in sorted(identity.state_key_commitments.items())}
    if control is None:
        conn.execute(
            insert(CONTROL).values(
                id=1,
                database_id=identity.database_id,
                schema_version=supported_version(),
                restore_hold=False,
                admissions_hold=False,
                admission_key_commitment=identity.admission_key_commitment,
                state_key_commitments=configured,
                created_at=moment,
            )
        )
    else:
        _check_existing(control, identity)
        markers = {str(v): m for v, m in control.state_key_commitments.items()}
        conn.execute(
            update(CONTROL).values(
                schema_version=supported_version(),
                state_key_commitments=dict(sorted((configured | markers).items())),
            )
        )
    if conn.execute(select(ADMISSION_LOCK.c.id)).first() is None:
        conn.execute(insert(ADMISSION_LOCK).values(id=1))
    if location.kind == "postgresql" and identity.runtime_role is not None:
        assert location.namespace is not None
        _grant_runtime_role(conn, location.namespace, identity.runtime_role)


def _grant_runtime_role(conn: Connection, namespace: str, role: str) -> None:
    """07 §14.2: DML on runs, steps, admission_lock; SELECT and UPDATE of the hold and evidence
    columns on control; SELECT on activations and migrations; nothing else. Refuses a runtime
    role that could own or create objects in the namespace, or that keeps a TRIGGER (or other
    forbidden) privilege after the grants, e.g. through PUBLIC or default privileges."""
    quoted_role = quote_role(role)
    quoted_namespace = quote_namespace(namespace)
    facts = conn.execute(
        text(
            "SELECT r.rolsuper AS superuser,"
            " pg_has_role(:role, n.nspowner, 'MEMBER') AS owns_namespace"
            " FROM pg_catalog.pg_roles r, pg_catalog.pg_namespace n"
            " WHERE r.rolname = :role AND n.nspname = :namespace"
        ),
        {"role": role, "namespace": namespace},
    ).first()
    if facts is None:
        raise refuse(
            "coordinator.deployment.refused",
            f"The runtime role {role} does not exist.",
            "Create the login role named by `deployment.runtimeRole`, then run migrate again.",
        )
    problem = role_problem(
        namespace, superuser=facts.superuser, owns_namespace=facts.owns_namespace, can_create=False
    )
    if problem is not None:
        raise refuse(
            "coordinator.deployment.refused",
            f"The runtime role {role} {problem}.",
            "Use a runtime role that neither is a superuser nor owns the namespace.",
        )
    conn.execute(text(f"REVOKE ALL ON SCHEMA {quoted_namespace} FROM {quoted_role}"))
    conn.execute(text(f"GRANT USAGE ON SCHEMA {quoted_namespace} TO {quoted_role}"))
    conn.execute(text(f"REVOKE ALL ON ALL TABLES IN SCHEMA {quoted_namespace} FROM {quoted_role}"))
    conn.execute(
        text(
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON {', '.join(RUNTIME_DML_TABLES)} TO {quoted_role}"
        )
    )
    conn.execute(text(f"GRANT SELECT ON {', '.join(RUNTIME_READ_TABLES)} TO {quoted_role}"))
    conn.execute(
        text(f"GRANT UPDATE ({', '.join(RUNTIME_CONTROL_COLUMNS)}) ON control TO {quoted_role}")
    )
    can_create = bool(
        conn.execute(
            text("SELECT has_schema_privilege(:role, :namespace, 'CREATE')"),
            {"role": role, "namespace": namespace},
        ).scalar()
    )
    problem = role_problem(
        namespace, superuser=False, owns_namespace=False, can_create=can_create
    ) or grant_problem(conn, namespace, f"'{role}'")
    if problem is not None:
        raise refuse(
            "coordinator.deployment.refused",
            f"After the grants, the runtime role {role} {problem}.",
            "Revoke what the runtime role receives through PUBLIC, default privileges or role"
            " membership, then run migrate again.",
        )


def apply_activation(
    url: str,
    identity: DeploymentIdentity,
    activation: ActivationRequest,
    *,
    bindings_ok: Callable[[frozenset[tuple[str, str]]], bool],
    namespace: str | None = None,
    now: Instant | None = None,
) -> ActivationRow:
    """09 §3 `apply`, in one transaction under the admission lock: the store must be at the
    supported schema (`schema-pending` otherwise) and belong to this databaseId and keys; the
    live-binding check must pass (`bindings_ok` receives the (definition, binding) digests of
    the unsettled runs); new state-key versions are registered; an activation is appended and
    becomes the active package and revision. SQLite: the service must be stopped."""
    with unavailable_as_refusal():
        return _apply_activation(url, identity, activation, bindings_ok, namespace, now)


def _apply_activation(
    url: str,
    identity: DeploymentIdentity,
    activation: ActivationRequest,
    bindings_ok: Callable[[frozenset[tuple[str, str]]], bool],
    namespace: str | None,
    now: Instant | None,
) -> ActivationRow:
    location = locate(url, namespace=namespace)
    moment = wall_clock() if now is None else now
    if location.kind == "sqlite" and not (location.path and location.path.exists()):
        raise refuse("coordinator.deployment.schema-pending")
    lock = _process_lock(location)
    engine = create_store_engine(location, pool_size=1)
    try:
        with engine.begin() as conn:
            _serialise(conn, location)
            if location.kind == "postgresql":
                assert location.namespace is not None
                state = namespace_state(conn, location.namespace)
                if state == "foreign":
                    raise refuse("coordinator.command.namespace-occupied")
                if state == "absent":
                    raise refuse("coordinator.deployment.schema-pending")
            check_ledger(
                read_ledger(conn, location), pending_code="coordinator.deployment.schema-pending"
            )
            conn.execute(lock_rows(select(ADMISSION_LOCK.c.id)))
            control = check_identity(read_control(conn, location), identity, registering=True)
            unsettled = conn.execute(
                select(RUNS.c.definition_digest, RUNS.c.binding_digest)
                .where(~settled(moment))
                .distinct()
            )
            if not bindings_ok(frozenset((row[0], row[1]) for row in unsettled)):
                raise refuse("coordinator.command.live-binding-conflict")
            order = conn.execute(select(func.max(ACTIVATIONS.c.apply_order))).scalar()
            row = ActivationRow(
                activation_id=uuid.uuid4(),
                apply_order=int(order or 0) + 1,
                package_digest=activation.package_digest,
                workflow_id=activation.workflow_id,
                revision=activation.revision,
                definition_digest=activation.definition_digest,
                predecessor_package_digest=control.active_package_digest,
                database_id=identity.database_id,
                applied_at=moment,
                runtime_role=identity.runtime_role,
                role_mode=_ROLE_MODES[location.kind],
            )
            conn.execute(insert(ACTIVATIONS).values(**_activation_values(row)))
            markers = {str(v): m for v, m in identity.state_key_commitments.items()}
            markers |= {str(v): m for v, m in control.state_key_commitments.items()}
            conn.execute(
                update(CONTROL).values(
                    active_package_digest=activation.package_digest,
                    active_revision=activation.revision,
                    state_key_commitments=dict(sorted(markers.items())),
                )
            )
            return row
    finally:
        engine.dispose()
        if lock is not None:
            lock.release()


def _activation_values(row: ActivationRow) -> dict[str, object]:
    return {name: getattr(row, name) for name in ActivationRow.__dataclass_fields__}


def inspect_deployment(url: str, *, namespace: str | None = None) -> DeploymentState:
    """The store as `plan` and `deployment-status` see it, read-only: never creates a file,
    a namespace or a row, and takes no lock (09 §3; SQLite may be read while serving)."""
    with unavailable_as_refusal():
        return _inspect_deployment(url, namespace)


def _inspect_deployment(url: str, namespace: str | None) -> DeploymentState:
    location = locate(url, namespace=namespace)
    supported = supported_version()
    every = tuple(migration.version for migration in supported_migrations())
    absent = DeploymentState(location.kind, False, supported, (), every, True, None, None)
    if location.kind == "sqlite" and not (location.path and location.path.exists()):
        return absent
    engine = create_store_engine(location, pool_size=1, read_only_file=True)
    try:
        with engine.connect() as conn:
            if location.kind == "postgresql":
                assert location.namespace is not None
                state = namespace_state(conn, location.namespace)
                if state == "foreign":
                    raise refuse("coordinator.command.namespace-occupied")
                if state == "absent":
                    return absent
            ledger = read_ledger(conn, location) or {}
            known = {m.version: m for m in supported_migrations()}
            control = read_control(conn, location)
            active_row = None
            if ledger and control is not None:
                found = (
                    conn.execute(
                        select(ACTIVATIONS).order_by(ACTIVATIONS.c.apply_order.desc()).limit(1)
                    )
                    .mappings()
                    .first()
                )
                if found is not None:
                    active_row = ActivationRow(**dict(found))
            return DeploymentState(
                store=location.kind,
                exists=True,
                supported=supported,
                applied=tuple(sorted(ledger)),
                pending=tuple(v for v in every if v not in ledger),
                checksums_match=all(v in known and known[v].accepts(c) for v, c in ledger.items()),
                control=control,
                active=active_row,
            )
    finally:
        engine.dispose()
