"""The identity of the database a store lives in (07 §12.1 item 5): what a restore does not
bring back.

A restore puts back the store *and* its journal together (07 §12 step 1), so the journal alone
cannot see it. What the backup cannot carry is the database it was taken from:

* PostgreSQL: the cluster's system identifier (a new cluster, `initdb`, `pg_upgrade`), its
  current timeline (a point-in-time recovery and a promoted standby start a new one) and the
  database's OID (`pg_dump` into a new database, `pg_restore` after a drop);
* SQLite: the file's device and inode (a file put back by `rsync`, `tar`, `mv`, a copy into a
  new file);
* both: the random `store_identity.instance_id` written when the store was created (another
  store copied over this one).

What none of them sees is a restore of the same database in place with its identity: a
file copied over the same inode, a volume or virtual-machine snapshot rolled back, a cold copy
of the PostgreSQL data directory started on the same timeline. The restore witness
(`store.restoreWitness`, `shell/audit/witness.py`) is for those.

`read_identity` reads the identity in a store transaction; `DatabaseWatch` checks every new
connection of the process against the identity it opened the store with, so that a process
whose connections fail over to a promoted standby (a multi-host URL) or to a restored file
never works the new database: the connection is refused with
`coordinator.deployment.store-restored` before any statement of it runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import event, select, text
from sqlalchemy.engine import Connection, Engine

from coordinator_core.errors import CoordinatorError, Diagnostic
from coordinator_core.shell.store.dialect import StoreKind, StoreLocation
from coordinator_core.shell.store.schema import STORE_IDENTITY
from coordinator_core.values import sha256_label

__all__ = ["PART_NAMES", "DatabaseWatch", "StoreIdentity", "read_identity", "store_restored"]

STORE_RESTORED: Final = "coordinator.deployment.store-restored"

# Each part's name as the identity text spells it, and as an operator reads it.
PART_NAMES: Final = {
    "system": "the PostgreSQL system identifier",
    "timeline": "the PostgreSQL timeline",
    "database": "the database OID",
    "device": "the store file's device",
    "inode": "the store file's inode",
    "instance": "the store's instance id",
}
_CAUSES: Final = {
    "system": "another cluster (a restore into a new cluster, pg_upgrade)",
    "timeline": "a promoted standby or a point-in-time recovery",
    "database": "a pg_dump restored into a new database",
    "device": "the file put back or moved to another file system",
    "inode": "the file put back from a copy",
    "instance": "another store copied over this one",
}
_POSTGRESQL_CLUSTER: Final = (
    "SELECT (SELECT system_identifier FROM pg_catalog.pg_control_system())::text,"
    " CASE WHEN pg_catalog.pg_is_in_recovery()"
    " THEN (SELECT lpad(to_hex(timeline_id), 8, '0') FROM pg_catalog.pg_control_checkpoint())"
    " ELSE substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 1, 8) END,"
    " (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())::text"
)


@dataclass(frozen=True, slots=True)
class StoreIdentity:
    """The identity of the database a store lives in: its kind and named parts, in a fixed
    order. `text` is what a journal head keeps; `digest` what a journal entry names."""

    kind: StoreKind
    parts: tuple[tuple[str, str], ...]

    @property
    def text(self) -> str:
        return ";".join([self.kind, *(f"{name}={value}" for name, value in self.parts)])

    @property
    def digest(self) -> str:
        return sha256_label(self.text.encode("utf-8"))

    @classmethod
    def parse(cls, text: str) -> StoreIdentity | None:
        """The identity `text` spells, or None when it is not one."""
        kind, *rest = text.split(";")
        if kind not in ("postgresql", "sqlite"):
            return None
        parts: list[tuple[str, str]] = []
        for item in rest:
            name, equals, value = item.partition("=")
            if not equals or name not in PART_NAMES:
                return None
            parts.append((name, value))
        return cls(kind, tuple(parts))  # type: ignore[arg-type]

    def cluster(self) -> tuple[tuple[str, str], ...]:
        """The parts a new connection can read before any table: all but the instance id."""
        return tuple(part for part in self.parts if part[0] != "instance")

    def differences(self, earlier: StoreIdentity) -> tuple[str, ...]:
        """The names of the parts that differ from `earlier` (every part for another kind)."""
        if self.kind != earlier.kind:
            return tuple(name for name, _ in self.parts)
        before = dict(earlier.parts)
        return tuple(name for name, value in self.parts if before.get(name) != value)


def store_restored(
    now: StoreIdentity, earlier: StoreIdentity | None, where: str
) -> CoordinatorError:
    """`coordinator.deployment.store-restored`: the store's database is not `where` (a fixed
    phrase: "the one its journal heads name", …); the message says which parts changed and
    what usually changes them, never a value."""
    changed = now.differences(earlier) if earlier is not None else ()
    if changed:
        named = ", ".join(PART_NAMES[name] for name in changed)
        causes = "; ".join(dict.fromkeys(_CAUSES[name] for name in changed))
        message = (
            f"The store's database is not {where}: {named} changed ({causes}). "
            "It was restored from a backup or its standby promoted."
        )
    else:
        message = (
            f"The store's database is not {where}: it was restored from a backup or its"
            " standby promoted."
        )
    return CoordinatorError(Diagnostic(code=STORE_RESTORED, message=message))


def _cluster_parts(
    location: StoreLocation, run: Callable[[str], Any]
) -> tuple[tuple[str, str], ...]:
    if location.kind == "postgresql":
        row = run(_POSTGRESQL_CLUSTER)
        system, timeline_hex, database = row
        return (
            ("system", str(system)),
            ("timeline", str(int(str(timeline_hex), 16))),
            ("database", str(database)),
        )
    assert location.path is not None
    info = os.stat(location.path)
    return (("device", str(info.st_dev)), ("inode", str(info.st_ino)))


def read_identity(conn: Connection, location: StoreLocation) -> StoreIdentity:
    """The store's identity, read in the caller's transaction (schema version 5 or later)."""
    cluster = _cluster_parts(location, lambda sql: conn.execute(text(sql)).one())
    instance = conn.execute(select(STORE_IDENTITY.c.instance_id)).scalar_one()
    return StoreIdentity(location.kind, (*cluster, ("instance", str(instance))))


def _raw_cluster_parts(
    location: StoreLocation, dbapi_connection: Any
) -> tuple[tuple[str, str], ...]:
    """`_cluster_parts` on a driver connection that SQLAlchemy does not manage yet."""
    if location.kind != "postgresql":
        return _cluster_parts(location, lambda _sql: None)
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(_POSTGRESQL_CLUSTER)
        row = cursor.fetchone()
    finally:
        cursor.close()
        dbapi_connection.rollback()
    return _cluster_parts(location, lambda _sql: row)


class DatabaseWatch:
    """Every connection the engine opens from now on must reach the database of `identity`
    (its cluster parts): otherwise the connection is refused with
    `coordinator.deployment.store-restored` (a failover to a promoted standby, a file put back
    under a running process) and nothing runs on it."""

    def __init__(self, engine: Engine, location: StoreLocation, identity: StoreIdentity) -> None:
        self.identity = identity
        self._location = location
        self._expected = identity.cluster()
        event.listen(engine, "connect", self._check)

    def _check(self, dbapi_connection: Any, _record: Any) -> None:
        found = StoreIdentity(
            self._location.kind, _raw_cluster_parts(self._location, dbapi_connection)
        )
        if found.parts != self._expected:
            raise store_restored(
                found,
                StoreIdentity(self.identity.kind, self._expected),
                "the one this process opened",
            )
