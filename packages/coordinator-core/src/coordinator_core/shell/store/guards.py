"""The store's refusals: schema ledger, store identity, key custody, PostgreSQL role split and
namespace ownership, and the SQLite process lock (07 §6.1 step 1, §14, §15; 09 §3).

Every function here raises a `CoordinatorError` whose code is in spec/errors.yaml; none of them
writes anything.
"""

from __future__ import annotations

import fcntl
import hmac
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from sqlalchemy import inspect, select, text
from sqlalchemy.engine import Connection

from coordinator_core.errors import CoordinatorError, Diagnostic
from coordinator_core.shell.store.dialect import NAMESPACE_MARKER, StoreLocation
from coordinator_core.shell.store.migrations import supported_migrations
from coordinator_core.shell.store.records import ControlRow, DeploymentIdentity
from coordinator_core.shell.store.schema import CONTROL, LEDGER, control_of

__all__ = [
    "ProcessLock",
    "check_active_package",
    "check_identity",
    "check_known",
    "check_ledger",
    "check_runtime_role",
    "namespace_state",
    "read_control",
    "read_ledger",
    "refuse",
    "short_digest",
    "supported_version",
]

NamespaceState = Literal["absent", "foreign", "store"]
_SCHEMA_MISMATCH: Final = "coordinator.deployment.schema-mismatch"
_REFUSED: Final = "coordinator.deployment.refused"
_STATE_CUSTODY: Final = "coordinator.command.state-key-custody"
_RUN_MIGRATE: Final = "Run `coordinatorctl migrate` with the same runtime file first."
_REGRANT: Final = (
    "Run `coordinatorctl migrate` with the migration role to restore the runtime role's grants,"
    " and connect the service as `deployment.runtimeRole`."
)
_ROLE: Final = re.compile(r"[a-z_][a-z0-9_]{0,62}")

# 07 §14.2: what the runtime role may do, and nothing more.
RUNTIME_DML_TABLES: Final = (
    "runs",
    "steps",
    "admission_lock",
    "definitions",
    "live_bindings",
    "journal_heads",
    "step_attempts",
)
RUNTIME_READ_TABLES: Final = ("control", "activations", "migrations", "store_identity")
RUNTIME_CONTROL_COLUMNS: Final = (
    "restore_hold",
    "admissions_hold",
    "restore_evidence_ref",
    "admission_recovery_ref",
    "restore_hold_reason_ref",
)
_FORBIDDEN_TABLE_PRIVILEGES: Final = ("TRIGGER", "TRUNCATE", "REFERENCES")


def refuse(code: str, message: str | None = None, hint: str | None = None) -> CoordinatorError:
    """The refusal with catalogue code `code`; `message` and `hint` name what differs (identifiers,
    versions and short digests only, never a secret), else the catalogue's sentences apply."""
    return CoordinatorError(Diagnostic(code=code, message=message, hint=hint))


def short_digest(digest: str | None) -> str:
    """A digest as an operator compares it: `sha256:` and its first 12 hex digits."""
    if digest is None:
        return "none"
    algorithm, _, value = digest.partition(":")
    return f"{algorithm}:{value[:12]}" if value else digest[:19]


def supported_version() -> int:
    """The schema version this build supports (the highest migration it ships)."""
    return supported_migrations()[-1].version


def quote_role(role: str) -> str:
    if not _ROLE.fullmatch(role):
        raise refuse(
            "coordinator.deployment.refused",
            "`deployment.runtimeRole` is not a lower-case PostgreSQL role name.",
            "Name the runtime role with lower-case letters, digits and underscores.",
        )
    return f'"{role}"'


# -- namespace and ledger -----------------------------------------------------------------------


def namespace_state(conn: Connection, namespace: str) -> NamespaceState:
    """Whether the PostgreSQL schema is absent, a coordinator store (marker comment), or not."""
    row = conn.execute(
        text(
            "SELECT obj_description(oid, 'pg_namespace') AS marker"
            " FROM pg_catalog.pg_namespace WHERE nspname = :namespace"
        ),
        {"namespace": namespace},
    ).first()
    if row is None:
        return "absent"
    return "store" if row.marker == NAMESPACE_MARKER else "foreign"


def _has_table(conn: Connection, location: StoreLocation, table: str) -> bool:
    return inspect(conn).has_table(table, schema=location.namespace)


def read_ledger(conn: Connection, location: StoreLocation) -> dict[int, str] | None:
    """The ledger (version → checksum), or None when the store has no ledger table yet."""
    if not _has_table(conn, location, "migrations"):
        return None
    rows = conn.execute(select(LEDGER.c.version, LEDGER.c.checksum).order_by(LEDGER.c.version))
    return {int(row.version): str(row.checksum) for row in rows}


def check_known(applied: Mapping[int, str]) -> None:
    """The ledger holds a prefix 1‥n of this build's migrations with their exact checksums
    (`schema-mismatch` otherwise: another build's store, or an edited migration); the message
    names the version that is missing, unknown or differs."""
    known = {migration.version: migration for migration in supported_migrations()}
    supported = supported_version()
    for expected, version in enumerate(sorted(applied), start=1):
        if version != expected:
            raise refuse(
                _SCHEMA_MISMATCH,
                f"The store's migration ledger lacks version {expected} but holds"
                f" version {version}.",
            )
    for version, checksum in sorted(applied.items()):
        migration = known.get(version)
        if migration is None:
            raise refuse(
                _SCHEMA_MISMATCH,
                f"The store holds schema version {max(applied)}; this build supports {supported}.",
                "Use the build that matches the store's schema version; a store is never"
                " migrated down.",
            )
        if not migration.accepts(checksum):
            raise refuse(
                _SCHEMA_MISMATCH,
                f"The checksum of migration {version} in the store ({short_digest(checksum)})"
                f" differs from this build's ({short_digest(migration.checksum)}).",
                "Use the build that migrated this store; a migration's checksum changes only"
                " when its file was edited.",
            )


def check_ledger(applied: Mapping[int, str] | None, *, pending_code: str) -> None:
    """07 §14.4: the ledger must hold exactly this build's migrations with their checksums.

    A store missing some of them (older, or never migrated) is refused with `pending_code`
    (`schema-mismatch` for the service, `schema-pending` for `apply`); a store with a version
    this build does not know, or with a different checksum, is `schema-mismatch`.
    """
    check_known(applied or {})
    if not applied:
        raise refuse(
            pending_code,
            f"The store has no migrations applied; this build supports schema version"
            f" {supported_version()}.",
            _RUN_MIGRATE,
        )
    if max(applied) < supported_version():
        raise refuse(
            pending_code,
            f"The store is at schema version {max(applied)}; this build supports"
            f" {supported_version()}.",
            _RUN_MIGRATE,
        )


# -- the control row ----------------------------------------------------------------------------


def read_control(conn: Connection, location: StoreLocation) -> ControlRow | None:
    """The control row, or None when the store has none (never migrated, or interrupted).
    Only the columns the store has are read: the deployment commands read the control row of
    a store at any version they migrate from (a column a later version adds reads as None)."""
    if not _has_table(conn, location, "control"):
        return None
    present = {
        column["name"] for column in inspect(conn).get_columns("control", schema=location.namespace)
    }
    row = conn.execute(select(*(c for c in CONTROL.c if c.name in present))).mappings().first()
    return None if row is None else control_of(row)


def _same(left: str, right: str) -> bool:
    return hmac.compare_digest(left.encode(), right.encode())


def check_state_keys(
    registered: Mapping[int, str], configured: Mapping[int, str], active: int | None
) -> None:
    """07 §10 custody: every registered version is configured with a matching key, and the
    active version is registered. (`active=None` checks only configured ∩ registered, as
    `migrate` and `apply` do before registering new versions.) The message names the version."""
    for version, marker in sorted(registered.items()):
        mine = configured.get(version)
        if mine is None:
            if active is not None:
                raise refuse(
                    _STATE_CUSTODY,
                    f"State-key version {version} is registered in the store but not configured"
                    " in `deployment.stateKeys`.",
                )
            continue
        if not _same(mine, marker):
            raise refuse(
                _STATE_CUSTODY,
                f"The configured state key of version {version} differs from the key the store"
                " registered for it.",
            )
    if active is not None and active not in registered:
        raise refuse(
            _STATE_CUSTODY,
            f"The active state-key version {active} is not registered in the store.",
        )


def check_identity(
    control: ControlRow | None, identity: DeploymentIdentity, *, registering: bool = False
) -> ControlRow:
    """The store belongs to this deployment: databaseId, admission-key and state-key custody.

    `registering` (migrate, apply) tolerates state-key versions that are configured but not
    registered yet, or registered but no longer configured; the service does not.
    """
    if control is None:
        raise refuse(
            _SCHEMA_MISMATCH, "The store has no control row: it was never migrated.", _RUN_MIGRATE
        )
    if control.schema_version != supported_version():
        raise refuse(
            _SCHEMA_MISMATCH,
            f"The store's control row records schema version {control.schema_version}; this"
            f" build supports {supported_version()}.",
        )
    if control.database_id != identity.database_id:
        raise refuse("coordinator.deployment.database-id-mismatch")
    if not _same(control.admission_key_commitment, identity.admission_key_commitment):
        raise refuse(
            "coordinator.command.admission-key-custody",
            "The configured admission key (`deployment.admissionKeyRef`) differs from the one"
            " the store was created with.",
        )
    check_state_keys(
        control.state_key_commitments,
        identity.state_key_commitments,
        None if registering else identity.active_state_key,
    )
    return control


def check_active_package(control: ControlRow, pinned: str | None) -> None:
    """07 §15: the store's active package is the pinned `deployment.package.expectedDigest`
    (`deployment.refused`, naming both short digests)."""
    if pinned is None or control.active_package_digest == pinned:
        return
    if control.active_package_digest is None:
        raise refuse(
            _REFUSED,
            f"The store has no active package; the runtime file pins {short_digest(pinned)}.",
            "Run `coordinatorctl apply` with this runtime file to activate the pinned package.",
        )
    raise refuse(
        _REFUSED,
        f"The store's active package is {short_digest(control.active_package_digest)}; the"
        f" runtime file pins {short_digest(pinned)}.",
        "Run `coordinatorctl apply` to activate the pinned package, or pin the active package's"
        " digest in `deployment.package.expectedDigest`.",
    )


# -- the PostgreSQL role split ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Privileges:
    current_user: str
    superuser: bool
    owns_namespace: bool
    can_create: bool


def check_runtime_role(conn: Connection, namespace: str, runtime_role: str) -> None:
    """07 §14.2, §15: the connection runs as `runtimeRole`, which does not own the namespace
    (directly or through membership), cannot create objects in it, holds the runtime grants
    and no TRIGGER, TRUNCATE or REFERENCES privilege on any store table. The refusal names the
    role and the first property or grant that is wrong."""
    row = conn.execute(
        text(
            "SELECT current_user AS current_user,"
            " (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user) AS superuser,"
            " pg_has_role(current_user, n.nspowner, 'MEMBER') AS owns_namespace,"
            " has_schema_privilege(current_user, n.oid, 'CREATE') AS can_create"
            " FROM pg_catalog.pg_namespace n WHERE n.nspname = :namespace"
        ),
        {"namespace": namespace},
    ).first()
    if row is None:
        raise refuse(_SCHEMA_MISMATCH, f"The namespace {namespace} does not exist.", _RUN_MIGRATE)
    facts = _Privileges(row.current_user, bool(row.superuser), row.owns_namespace, row.can_create)
    if facts.current_user != runtime_role:
        raise refuse(
            _REFUSED,
            f"The connection runs as role {facts.current_user}, not as the runtime role"
            f" {runtime_role}.",
            "Give the runtime URL the credentials of `deployment.runtimeRole`, never those of"
            " the migration role.",
        )
    problem = role_problem(
        namespace,
        superuser=facts.superuser,
        owns_namespace=facts.owns_namespace,
        can_create=facts.can_create,
    ) or grant_problem(conn, namespace, "current_user")
    if problem is not None:
        raise refuse(_REFUSED, f"The runtime role {runtime_role} {problem}.", _REGRANT)


def role_problem(
    namespace: str, *, superuser: bool, owns_namespace: bool, can_create: bool
) -> str | None:
    """What makes a role unfit to be the runtime role, as the end of a sentence, or None."""
    if superuser:
        return "is a superuser"
    if owns_namespace:
        return f"owns the namespace {namespace} (directly or through membership)"
    if can_create:
        return f"may create objects in the namespace {namespace}"
    return None


def _grant_checks(namespace: str) -> list[tuple[str, str]]:
    """(SQL that is true when the grant is right, what is wrong when it is false), in the order
    of 07 §14.2: the grants the runtime role needs, then the privileges it must not hold."""
    checks: list[tuple[str, str]] = []
    for table in RUNTIME_DML_TABLES:
        for privilege in ("SELECT", "INSERT", "UPDATE", "DELETE"):
            checks.append(
                (
                    f"has_table_privilege({{role}}, '{namespace}.{table}', '{privilege}')",
                    f"lacks {privilege} on {table}",
                )
            )
    for table in RUNTIME_READ_TABLES:
        checks.append(
            (
                f"has_table_privilege({{role}}, '{namespace}.{table}', 'SELECT')",
                f"lacks SELECT on {table}",
            )
        )
    for column in RUNTIME_CONTROL_COLUMNS:
        checks.append(
            (
                f"has_column_privilege({{role}}, '{namespace}.control', '{column}', 'UPDATE')",
                f"lacks UPDATE of control.{column}",
            )
        )
    for table in RUNTIME_DML_TABLES + RUNTIME_READ_TABLES:
        for privilege in _FORBIDDEN_TABLE_PRIVILEGES:
            checks.append(
                (
                    f"NOT has_table_privilege({{role}}, '{namespace}.{table}', '{privilege}')",
                    f"holds {privilege} on {table}",
                )
            )
    for table in RUNTIME_READ_TABLES:
        for privilege in ("INSERT", "DELETE"):
            checks.append(
                (
                    f"NOT has_table_privilege({{role}}, '{namespace}.{table}', '{privilege}')",
                    f"holds {privilege} on {table}",
                )
            )
    checks.append(
        (
            f"NOT has_column_privilege({{role}}, '{namespace}.control', 'database_id', 'UPDATE')",
            "holds UPDATE of control.database_id",
        )
    )
    return checks


def grant_problem(conn: Connection, namespace: str, role_expression: str) -> str | None:
    """The first grant of 07 §14.2 the role lacks, or forbidden privilege it holds, as the end
    of a sentence ("lacks SELECT on runs"); None when its grants are exact. One statement."""
    checks = _grant_checks(namespace)
    columns = ", ".join(
        f"{sql.replace('{role}', role_expression)} AS c{index}"
        for index, (sql, _) in enumerate(checks)
    )
    row = conn.execute(text(f"SELECT {columns}")).one()
    for (_, wrong), right in zip(checks, row, strict=True):
        if not right:
            return wrong
    return None


# -- SQLite: one process ------------------------------------------------------------------------


class ProcessLock:
    """The exclusive lock on `<path>.lock` that `coordinator serve` holds for its lifetime and
    `migrate`/`apply` take for theirs (07 §14.3; `coordinator.command.store-busy` if taken)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._fd: int | None = None

    def acquire(self) -> ProcessLock:
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(fd)
            raise refuse("coordinator.command.store-busy") from error
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> ProcessLock:
        return self.acquire()

    def __exit__(self, *_: object) -> None:
        self.release()
