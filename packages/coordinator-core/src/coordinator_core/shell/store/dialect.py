"""Every difference between the PostgreSQL and SQLite stores, in one place (ARCHITECTURE rule 5).

Owned here: locating a store from its URL, engine set-up (PostgreSQL `search_path`, SQLite
pragmas and `BEGIN IMMEDIATE`), the instant type (epoch milliseconds, as timestamptz on
PostgreSQL and as the integer on SQLite, file 07 §14.3), the JSON type, row locking for claims, the namespace
marker, and which driver errors are transient. Nothing outside this module looks at a dialect
name.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import re
import sqlite3
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final, Generic, Literal, TypeVar
from urllib.parse import unquote, urlsplit, urlunsplit

from sqlalchemy import JSON, BigInteger, DateTime, LargeBinary, String, Text, event, exc
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection, Dialect, Engine, create_engine
from sqlalchemy.sql import Select
from sqlalchemy.sql.expression import FromClause
from sqlalchemy.sql.schema import Table
from sqlalchemy.types import TypeDecorator, TypeEngine

from coordinator_core.errors import CoordinatorError, Diagnostic
from coordinator_core.shell.store.trips import Trip, TripState

__all__ = [
    "NAMESPACE_MARKER",
    "CompactJson",
    "HexKey",
    "JsonDocument",
    "Prepared",
    "PreparedShapes",
    "SealedBytes",
    "StoreKind",
    "StoreLocation",
    "UTCDateTime",
    "create_store_engine",
    "is_transient",
    "is_unavailable",
    "locate",
    "lock_one",
    "lock_rows",
    "pipelined",
    "quote_namespace",
    "read_alone",
    "read_engine",
    "read_in_one_trip",
    "read_together",
    "store_unavailable",
    "unavailable_as_refusal",
]

StoreKind = Literal["postgresql", "sqlite"]

NAMESPACE_MARKER: Final = "registry-coordinator/v1 store"
"""The comment `migrate` puts on the PostgreSQL schema it owns (file 07 §14.2)."""

_NAMESPACE: Final = re.compile(r"coordinator_[a-z0-9_]*")
_NAMESPACE_MAX_BYTES: Final = 60
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MILLISECOND: Final = timedelta(milliseconds=1)

# SQLite connection settings of file 07 §14.3.
_SQLITE_BUSY_TIMEOUT_MS: Final = 5000
_SQLITE_PRAGMAS: Final = (
    "PRAGMA journal_mode=WAL",
    "PRAGMA synchronous=FULL",
    "PRAGMA foreign_keys=ON",
    f"PRAGMA busy_timeout={_SQLITE_BUSY_TIMEOUT_MS}",
)
# Execution option that makes a SQLite transaction a deferred (read) one; writes are IMMEDIATE.
READ_ONLY_OPTION: Final = "coordinator_read_only"

# PostgreSQL errors after which the server has rolled the transaction back and a retry is safe:
# serialization_failure, deadlock_detected, lock_not_available.
_PG_TRANSIENT: Final = frozenset({"40001", "40P01", "55P03"})
_SQLITE_BUSY: Final = frozenset({5, 6})  # SQLITE_BUSY, SQLITE_LOCKED


def _refuse(code: str, message: str | None = None) -> CoordinatorError:
    return CoordinatorError(Diagnostic(code=code, message=message))


# -- time ---------------------------------------------------------------------------------------


class UTCDateTime(TypeDecorator[int]):
    """An instant, exchanged as the engine keeps it — integer milliseconds since the Unix epoch
    — and stored as `timestamptz` on PostgreSQL, as the integer itself on SQLite (07 §14.3).

    The one place where an instant becomes a datetime and back (PostgreSQL's driver speaks
    datetimes): both backends therefore read back exactly the milliseconds they were given.
    (The name is the one the released migration scripts import.)
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(BigInteger())
        return dialect.type_descriptor(DateTime(timezone=True))

    def process_bind_param(self, value: int | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError("An instant column takes integer milliseconds since the epoch.")
        if dialect.name == "sqlite":
            return value
        return _EPOCH + value * _MILLISECOND

    def process_result_value(self, value: Any, dialect: Dialect) -> int | None:
        if value is None:
            return None
        if isinstance(value, int):
            return value
        if isinstance(value, datetime):
            aware = value if value.tzinfo else value.replace(tzinfo=UTC)
            return (aware - _EPOCH) // _MILLISECOND
        raise TypeError("An instant column returned a value that is not an instant.")


class HexKey(TypeDecorator[str]):
    """A commitment (64 lowercase hex characters, 07 §3) or a digest (`sha256:` and 64 of
    them): its 32 bytes (`bytea`) on PostgreSQL, where most parked-run rows and the indexes on
    these columns keep several of them (issue 9); the text itself on SQLite. Both read back
    the same text. Binds only a well-formed value: these columns never hold anything else."""

    impl = String
    cache_ok = True

    def __init__(self, prefix: str = "") -> None:
        super().__init__(len(prefix) + 64)
        self.prefix = prefix

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(LargeBinary())
        return dialect.type_descriptor(String(len(self.prefix) + 64))

    def process_bind_param(self, value: str | None, dialect: Dialect) -> Any:
        if value is None or dialect.name != "postgresql":
            return value
        digits = value[len(self.prefix) :]
        if not value.startswith(self.prefix) or _HEX.fullmatch(digits) is None:
            raise ValueError("A commitment or digest column takes only its exact text form.")
        return bytes.fromhex(digits)

    def process_result_value(self, value: Any, dialect: Dialect) -> str | None:
        if value is None or isinstance(value, str):
            return value
        return self.prefix + bytes(value).hex()


_HEX: Final = re.compile(r"[0-9a-f]{64}")


class SealedBytes(TypeDecorator[bytes]):
    """A sealed value (07 §10), kept as its envelope (a third less than the stored form
    `{"sealedCoordinatorV1":"<base64 of the envelope>"}`, issue 9) and handed out as it is
    kept: the sealer opens an envelope as it is (`Sealer.open_text`). A value given in the
    stored form is kept as its envelope too; anything else (a row written before schema
    version 3 kept the stored form's JSON text, which the sealer also opens, or bytes that are
    neither) is kept and read back as it is. An envelope begins with its format byte 0x01, the
    stored form with `{`, so the two never mix up; either way a value that was tampered with
    fails to open (`protected-state-invalid`)."""

    impl = LargeBinary
    cache_ok = True

    def process_bind_param(self, value: bytes | None, dialect: Dialect) -> Any:
        if value is None or not (value.startswith(_SEALED_HEAD) and value.endswith(_SEALED_TAIL)):
            return value
        text = value[len(_SEALED_HEAD) : -len(_SEALED_TAIL)]
        try:
            envelope = base64.b64decode(text, validate=True)
        except binascii.Error:
            return value
        if envelope[:1] != _ENVELOPE_FORMAT or base64.b64encode(envelope) != text:
            return value
        return envelope

    def process_result_value(self, value: Any, dialect: Dialect) -> bytes | None:
        return value if value is None or type(value) is bytes else bytes(value)


_SEALED_HEAD: Final = b'{"sealedCoordinatorV1":"'  # sealing.SEALED_MEMBER, canonical JSON
_SEALED_TAIL: Final = b'"}'
_ENVELOPE_FORMAT: Final = b"\x01"


class CompactJson(TypeDecorator[Any]):
    """A store-controlled JSON document kept once per run (a run's retry policy): its
    canonical text (`text`) on PostgreSQL, a third of the `jsonb` form; JSON on SQLite. It
    binds a document and reads back its text on PostgreSQL (the reader decodes it, once per
    distinct text: `schema.run_of`), the document on SQLite."""

    impl = Text
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            return Text()  # not adapted: psycopg's string type would render it VARCHAR
        return dialect.type_descriptor(JSON())

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None or dialect.name != "postgresql":
            return value
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


JsonDocument: Final[TypeEngine[Any]] = JSON().with_variant(JSONB(), "postgresql")
"""Store-controlled JSON documents only (custody markers). JSONB is safe for them:
they never hold caller data, which is always sealed bytes (`LargeBinary`), so JSONB's refusal
of `\\u0000` and lone surrogates (STACK.md §4) cannot be reached."""


# -- locating a store ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoreLocation:
    """Where a store lives: a PostgreSQL database and namespace, or a SQLite file."""

    kind: StoreKind
    url: str
    """The SQLAlchemy URL (`postgresql+psycopg://…` or `sqlite:///…`)."""
    namespace: str | None = None
    """PostgreSQL only: the schema holding the store."""
    database: str | None = None
    """PostgreSQL only: the database name the URL names (checked in every transaction)."""
    path: Path | None = None
    """SQLite only: the absolute path of the database file."""

    @property
    def lock_path(self) -> Path:
        """SQLite only: the file `coordinator serve` holds locked for its lifetime (07 §14.3)."""
        assert self.path is not None
        return self.path.with_name(self.path.name + ".lock")


def quote_namespace(namespace: str) -> str:
    """The namespace as a quoted identifier; only names of 05 §4.1 are accepted."""
    if not _NAMESPACE.fullmatch(namespace) or len(namespace.encode()) > _NAMESPACE_MAX_BYTES:
        raise ValueError("The namespace is not a valid coordinator namespace.")
    return f'"{namespace}"'


def locate(url: str, *, namespace: str | None = None) -> StoreLocation:
    """The store a URL names.

    Accepts `postgresql://user@host:port/db` (also `postgres://` and `postgresql+psycopg://`;
    a `namespace` is required; libpq's `host1:port1,host2:port2` for several hosts) and
    `sqlite:////absolute/path` (or a bare absolute path).
    """
    if url.startswith("/"):
        url = "sqlite:///" + url
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in ("postgresql", "postgres", "postgresql+psycopg"):
        if namespace is None:
            raise ValueError("A PostgreSQL store needs a namespace.")
        quote_namespace(namespace)
        database = unquote(parts.path.lstrip("/"))
        if not database:
            raise ValueError("The PostgreSQL URL must name a database.")
        userinfo, at, hosts = parts.netloc.rpartition("@")
        netloc, query = parts.netloc, parts.query
        if "," in hosts:
            # libpq's multi-host form (a primary and its standbys, with
            # target_session_attrs): SQLAlchemy takes it as repeated `host` parameters.
            netloc = userinfo + at
            listed = "&".join("host=" + item for item in hosts.split(","))
            query = listed + ("&" + query if query else "")
        normalised = urlunsplit(("postgresql+psycopg", netloc, parts.path, query, ""))
        return StoreLocation("postgresql", normalised, namespace=namespace, database=database)
    if scheme == "sqlite":
        raw = url[len("sqlite:///") :] if url.startswith("sqlite:///") else ""
        path = Path(raw)
        if not raw or not path.is_absolute() or "?" in raw:
            raise ValueError("A SQLite store is named by an absolute file path.")
        return StoreLocation("sqlite", "sqlite:///" + str(path), path=path)
    raise ValueError("The store URL is neither PostgreSQL nor SQLite.")


def create_store_engine(
    location: StoreLocation, *, pool_size: int = 10, read_only_file: bool = False
) -> Engine:
    """An engine whose every connection is set up for the store (07 §14.2, §14.3).

    PostgreSQL: `search_path TO <namespace>, pg_catalog` on every connection. SQLite: the
    pragmas of 07 §14.3, and every transaction begins `BEGIN IMMEDIATE` (the admission lock and the
    claim serialisation) unless the connection carries the read-only execution option.
    `read_only_file` opens an existing SQLite file read-only and never creates it.
    """
    if location.kind == "postgresql":
        assert location.namespace is not None
        options = f"-c search_path={quote_namespace(location.namespace)},pg_catalog"
        engine = create_engine(
            location.url,
            pool_size=pool_size,
            max_overflow=pool_size,
            # No pre-ping per checkout: a connection found dead before the commit is retried by
            # the store's transaction runner (Store._transact), which is all a ping would buy.
            # psycopg prepares nothing itself: the store's statements are prepared by its
            # trips (`trips.Trip`), and psycopg would deallocate them with its own on every
            # rollback.
            connect_args={
                "options": options,
                "application_name": "registry-coordinator",
                "prepare_threshold": None,
            },
        )

        event.listen(engine, "before_cursor_execute", _send_before_others)

        @event.listens_for(engine, "connect")
        def _check_database(dbapi_connection: Any, _record: Any) -> None:
            # 07 §14.2 "every transaction checks current_database()": a connection never
            # changes database, so checking each new connection covers all its transactions.
            cursor = dbapi_connection.cursor()
            try:
                cursor.execute("SELECT current_database()")
                row = cursor.fetchone()
            finally:
                cursor.close()
                dbapi_connection.rollback()
            if row is None or row[0] != location.database:
                raise _refuse(
                    "coordinator.deployment.refused",
                    f"The connection reached another database than {location.database},"
                    " the one its URL names.",
                )

        return engine
    url = location.url
    if read_only_file:
        url = f"sqlite:///file:{location.path}?mode=ro&uri=true"
    engine = create_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size,
        connect_args={"check_same_thread": False, "timeout": _SQLITE_BUSY_TIMEOUT_MS / 1000},
    )

    @event.listens_for(engine, "connect")
    def _configure(dbapi_connection: Any, _record: Any) -> None:
        # Hand transaction control to SQLAlchemy's `begin` event below (pysqlite would
        # otherwise open deferred transactions on its own).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            for pragma in _SQLITE_PRAGMAS:
                if read_only_file and "journal_mode" in pragma:
                    continue
                cursor.execute(pragma)
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: Connection) -> None:
        read_only = read_only_file or connection.get_execution_options().get(
            READ_ONLY_OPTION, False
        )
        connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

    return engine


def read_engine(engine: Engine) -> Engine:
    """The engine for consistent read-only transactions over the same pool.

    PostgreSQL: `REPEATABLE READ READ ONLY` (one snapshot for an inspection, 06 §5.4).
    SQLite: a deferred `BEGIN` (one read transaction; WAL lets it run beside the writer).
    """
    if engine.dialect.name == "postgresql":
        return engine.execution_options(isolation_level="REPEATABLE READ", postgresql_readonly=True)
    return engine.execution_options(**{READ_ONLY_OPTION: True})


# -- locking ------------------------------------------------------------------------------------


def lock_one(statement: Select[Any], of: FromClause) -> Select[Any]:
    """Lock the selected row of `of`, skipping rows other transactions hold.

    PostgreSQL renders `FOR UPDATE OF … SKIP LOCKED`. SQLAlchemy drops the clause on SQLite,
    where it is not needed: every write transaction there is `BEGIN IMMEDIATE`, so exactly one
    writer runs at a time. Use it only inside `UPDATE … WHERE key IN (<this>) RETURNING`, never
    as a bare `SELECT … FOR UPDATE` whose result is written later (STACK.md §4).
    """
    return statement.with_for_update(skip_locked=True, of=of)


def insert_ignoring(table: Table, kind: StoreKind, on: Sequence[str] | None = None) -> Any:
    """`INSERT … ON CONFLICT DO NOTHING` for the backend: a row whose key exists is kept
    (with `on`, only a conflict on those columns' unique index; any other still raises)."""
    if kind == "postgresql":
        return postgresql_insert(table).on_conflict_do_nothing(index_elements=on)
    return sqlite_insert(table).on_conflict_do_nothing(index_elements=on)


def upsert_advancing(
    table: Table, kind: StoreKind, key: Sequence[str], order: str, values: Sequence[str]
) -> Any:
    """`INSERT … ON CONFLICT (key) DO UPDATE` for the backend, updating `values` only when the
    new row's `order` column is greater than the stored one (a row only moves forward)."""
    build = postgresql_insert if kind == "postgresql" else sqlite_insert
    statement = build(table)
    return statement.on_conflict_do_update(
        index_elements=list(key),
        set_={name: statement.excluded[name] for name in values},
        where=table.c[order] < statement.excluded[order],
    )


def lock_rows(
    statement: Select[Any], of: FromClause | tuple[FromClause, ...] | None = None
) -> Select[Any]:
    """Lock the selected rows, waiting for other holders (PostgreSQL `FOR UPDATE`).

    On SQLite the enclosing `BEGIN IMMEDIATE` transaction already excludes every other writer.
    """
    return statement.with_for_update(of=of) if of is not None else statement.with_for_update()


# -- statements on the hot path -----------------------------------------------------------------


class Prepared:
    """A statement compiled once per backend and run straight on the driver connection of the
    caller's transaction: the SQL text, the order of its parameters, the literal values the
    statement carries, and the type conversions of its parameters and result columns are
    worked out at the first use, so an execution costs the driver's call and the conversions,
    not SQLAlchemy's per-execution set-up (issue 9: it was most of the store's CPU).

    The statement must have no expanding (`IN` list) parameters. Rows come back as dicts keyed
    by the statement's column keys (labels included).

    `planned_each_time` keeps the statement from being prepared on the server (`trips.Trip`
    prepares a statement at its first execution on a connection, and PostgreSQL may then keep
    one generic plan for the connection's life): such a statement is sent unnamed and planned
    at every execution for its parameters and the tables as they are then. The claim and the
    idle look-ahead use it (issue 9): a generic plan made while the tables were small (a fresh
    store, or statistics that no `ANALYZE` refreshed) kept scanning every due record per claim
    once they were not. Driver errors are raised as SQLAlchemy's
    `DBAPIError` classes, and a lost connection is invalidated, exactly as SQLAlchemy would, so
    the store's retry rules (`is_transient`, `connection_invalidated`) see no difference.
    """

    __slots__ = ("_column_keys", "_planned_each_time", "_plans", "_statement")

    def __init__(
        self,
        statement: Any,
        *,
        column_keys: Sequence[str] | None = None,
        planned_each_time: bool = False,
    ) -> None:
        self._statement = statement
        self._column_keys = list(column_keys) if column_keys is not None else None
        self._planned_each_time = planned_each_time
        self._plans: dict[str, _Plan] = {}

    @property
    def statement(self) -> Any:
        """The SQLAlchemy statement (for EXPLAIN and for callers that need the expression)."""
        return self._statement

    def _plan(self, dialect: Dialect) -> _Plan:
        plan = self._plans.get(dialect.name)
        if plan is None:
            plan = _Plan.build(self._statement, dialect, self._column_keys)
            if self._planned_each_time and dialect.name == "postgresql":
                plan = replace(plan, prepare=False)
            self._plans[dialect.name] = plan
        return plan

    def rows(
        self, conn: Connection, params: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """Every row, as dicts."""
        plan = self._plan(conn.dialect)
        return plan.read(plan.execute(conn, params or {}).fetchall())

    def first(
        self, conn: Connection, params: Mapping[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """The first row as a dict, or None."""
        plan = self._plan(conn.dialect)
        # Read to the end (these are key lookups and LIMIT 1 reads), so no statement is left
        # open on the kept cursor (SQLite would keep its read snapshot).
        rows = plan.execute(conn, params or {}).fetchall()
        return plan.read(rows[:1])[0] if rows else None

    def rows_of_each(
        self, conn: Connection, params: Sequence[Mapping[str, Any]]
    ) -> list[list[dict[str, Any]]]:
        """Every row for each parameter set, in order, the statements sent together
        (`pipelined`: one round trip on PostgreSQL)."""
        return read_together(conn, *((self, one) for one in params))

    def run(
        self, conn: Connection, params: Mapping[str, Any] | Sequence[Mapping[str, Any]] = ()
    ) -> None:
        """Execute for its effect: once with a mapping, once per mapping with a sequence."""
        plan = self._plan(conn.dialect)
        if isinstance(params, Mapping):
            plan.execute(conn, params)
        elif len(params) == 1:  # the driver's batch protocol costs more than one statement
            plan.execute(conn, params[0])
        elif params:
            plan.execute_many(conn, params)


def read_together(
    conn: Connection,
    *reads: tuple[Prepared, Mapping[str, Any]],
    then: Callable[[], None] | None = None,
) -> list[list[dict[str, Any]]]:
    """Every row of each of `reads` (statement and parameters), in order, the statements sent
    together (`pipelined`: one round trip on PostgreSQL); `then` executes statements whose
    answer is not read after them, in the same trip."""
    if conn.dialect.name != "postgresql":
        rows = [statement.rows(conn, params) for statement, params in reads]
        if then is not None:
            then()
        return rows
    return _pipelined_reads(conn, reads, bracketed=False, then=then)


def read_in_one_trip(
    conn: Connection, reads: Sequence[tuple[Prepared, Mapping[str, Any]]]
) -> list[list[dict[str, Any]]]:
    """PostgreSQL: `reads` in a repeatable-read, read-only transaction of their own, sent in
    one round trip: BEGIN, the statements and COMMIT in one pipeline (`_on_its_own`, so that
    psycopg sends no BEGIN of its own, which would cost a round trip by itself, and its commit
    finds nothing to do). A failed statement leaves the transaction aborted and the COMMIT
    skipped: it is rolled back here, and the error raised as `pipelined` raises it."""
    with _on_its_own(conn):
        return _pipelined_reads(conn, reads, bracketed=True)


def read_alone(conn: Connection, read: tuple[Prepared, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """PostgreSQL: every row of one statement sent alone, outside any transaction
    (`_on_its_own`): a statement reads one snapshot by itself, so it needs neither a BEGIN
    nor a COMMIT, nor a pipeline to send them with it."""
    statement, params = read
    with _on_its_own(conn):
        return statement.rows(conn, params)


@contextmanager
def _on_its_own(conn: Connection) -> Iterator[None]:
    """The driver connection of `conn` in autocommit mode meanwhile (what it sends begins and
    ends its own transaction, if any); whatever is left open is rolled back after, and the
    connection goes back to the pool as it was lent."""
    driver: Any = conn.connection.driver_connection
    driver.autocommit = True
    try:
        yield
    finally:
        if not driver.closed:
            with suppress(Exception):  # a lost connection is the caller's error already
                if driver.info.transaction_status.name != "IDLE":
                    driver.rollback()
                driver.autocommit = False


def _pipelined_reads(
    conn: Connection,
    reads: Sequence[tuple[Prepared, Mapping[str, Any]]],
    *,
    bracketed: bool,
    then: Callable[[], None] | None = None,
) -> list[list[dict[str, Any]]]:
    """The statements of `reads` in one trip, their rows read once it is sent; `bracketed`,
    between a read-only BEGIN and a COMMIT of their own; `then` queues more after them."""
    cursors: list[tuple[_Plan, Any]] = []
    try:
        with pipelined(conn):
            trip = conn.info[_TRIP]
            if bracketed:
                trip.command(_BEGIN_READ)
            for statement, params in reads:
                plan = statement._plan(conn.dialect)
                cursors.append((plan, plan.execute(conn, params)))
            if then is not None:
                then()
            if bracketed:
                trip.command(_COMMIT)
        return [plan.read(cursor.fetchall()) for plan, cursor in cursors]
    finally:
        for _, cursor in cursors:
            cursor.close()


_TEXT_DIALECTS: dict[type[Dialect], Dialect] = {}


def _text_dialect(dialect: Dialect) -> Dialect:
    """The dialect a `Prepared` statement's text is compiled for: PostgreSQL's with the
    `numeric_dollar` parameter style (`$1`, `$2`…, one per distinct parameter), SQLite's as
    it is. Only the text comes from it; the type conversions are the real dialect's."""
    if dialect.name != "postgresql":
        return dialect
    found = _TEXT_DIALECTS.get(type(dialect))
    if found is None:
        dialect_class: Any = type(dialect)
        found = _TEXT_DIALECTS[type(dialect)] = dialect_class(paramstyle="numeric_dollar")
    return found


Shape = TypeVar("Shape", bound=Hashable)


class PreparedShapes(Generic[Shape]):
    """A family of statements that differ only by their shape — a multi-row `INSERT`'s row
    count, an `UPDATE`'s changed columns, a list page's filters —, each shape's `Prepared`
    built by `build` at its first use and kept (at most `kept`: a family meets few shapes,
    and past that number they are built again as they come)."""

    __slots__ = ("_build", "_kept", "_made")

    def __init__(self, build: Callable[[Shape], Any], *, kept: int = 256) -> None:
        self._build = build
        self._kept = kept
        self._made: dict[Shape, Prepared] = {}

    def __call__(self, shape: Shape) -> Prepared:
        made = self._made.get(shape)
        if made is None:
            made = Prepared(self._build(shape))
            if len(self._made) >= self._kept:
                self._made.clear()
            self._made[shape] = made
        return made


_BEGIN_READ: Final = b"BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
_COMMIT: Final = b"COMMIT"
_CURSOR: Final = "coordinator_cursor"


def _cursor_of(conn: Connection) -> tuple[Any, Any]:
    """SQLite: the driver connection of `conn` and the one cursor kept with it: statements
    run on it one after another (a pooled connection serves one thread at a time, and each
    execution replaces the previous result), so none is opened and closed per statement. A
    connection that was replaced gets a new cursor. (PostgreSQL's statements go by
    `trips.Trip`.)"""
    return _kept(conn, _CURSOR, lambda driver: driver.cursor())


Kept = TypeVar("Kept")


def _kept(conn: Connection, key: str, make: Callable[[Any], Kept]) -> tuple[Any, Kept]:
    """The driver connection of `conn` and what `make` made of it, kept in the pooled
    connection's `info` under `key`; made again for a driver connection that replaced it."""
    driver: Any = conn.connection.driver_connection
    assert driver is not None
    kept: tuple[Any, Kept] | None = conn.info.get(key)
    if kept is None or kept[0] is not driver:
        kept = conn.info[key] = (driver, make(driver))
    return kept


@contextmanager
def pipelined(conn: Connection) -> Iterator[None]:
    """PostgreSQL: the `Prepared` statements executed inside are kept and sent together when
    the block ends (a `trips.Trip`: one pipeline, one sync, one flush), so many small
    statements of one transaction cost one round trip and one wake-up of the server; a
    statement's failure is raised there, as SQLAlchemy raises it (`DBAPIError`, a lost
    connection invalidated), and fails the transaction as it would have. Rows read inside
    the block (`fetchall`) send what is queued first, and so does any statement executed
    through SQLAlchemy meanwhile (`create_store_engine`), so nothing runs out of order. Inside
    a block already, the statements join its trip. Nothing changes on SQLite."""
    if conn.dialect.name != "postgresql":
        yield
        return
    info = conn.info
    if info.get(_TRIP) is not None:
        yield
        return
    trip = info[_TRIP] = Trip(_trip_state(conn), functools.partial(_send, conn))
    try:
        try:
            yield
        except BaseException:
            trip.discard()  # nothing of it was sent; the transaction fails with the error
            raise
        _send(conn, trip)
    finally:
        info.pop(_TRIP, None)


def _trip_state(conn: Connection) -> TripState:
    """What trips keep of the driver connection of `conn` (`_kept`)."""
    return _kept(conn, _TRIP_STATE, TripState)[1]


def _send(conn: Connection, trip: Trip, statement: str = "(pipelined statements)") -> None:
    """Send `trip`; a driver error as SQLAlchemy raises it (`DBAPIError`, a lost connection
    invalidated)."""
    dbapi_error = conn.dialect.loaded_dbapi.Error
    try:
        trip.send()
    except dbapi_error as error:
        driver: Any = conn.connection.driver_connection
        invalidated = bool(conn.dialect.is_disconnect(error, driver, None))
        if invalidated:
            conn.invalidate(error)
        raise exc.DBAPIError.instance(
            statement,
            None,
            error,
            dbapi_error,
            hide_parameters=True,
            connection_invalidated=invalidated,
            dialect=conn.dialect,
        ) from error


def _send_before_others(
    conn: Connection, cursor: Any, statement: Any, parameters: Any, context: Any, many: bool
) -> None:
    """SQLAlchemy's `before_cursor_execute`: a statement executed through SQLAlchemy inside a
    `pipelined` block goes after what the block has queued, never before it."""
    trip = conn.info.get(_TRIP)
    if trip is not None and trip.pending:
        _send(conn, trip)


_TRIP: Final = "coordinator_trip"
_TRIP_STATE: Final = "coordinator_trip_state"


@dataclass(frozen=True, slots=True)
class _Plan:
    sql: str
    names: tuple[str, ...]
    defaults: Mapping[str, Any]
    binds: tuple[tuple[str, Callable[[Any], Any]], ...]
    keys: tuple[str, ...]
    results: tuple[tuple[int, Callable[[Any], Any]], ...]
    positional: bool
    dbapi_error: type[Exception]
    prepare: bool | None = None
    """PostgreSQL: False sends the statement unnamed, planned at every execution; otherwise
    `trips.Trip` prepares it on a connection at its first execution there."""
    encoded: bytes = b""
    """PostgreSQL: `sql`, encoded once for `trips.Trip` (empty on SQLite)."""

    @classmethod
    def build(cls, statement: Any, dialect: Dialect, column_keys: list[str] | None) -> _Plan:
        # PostgreSQL: the text has the server's own `$n` placeholders, run by psycopg's
        # `RawCursor` (`_cursor_of`), which sends it as it is: psycopg's default cursor parses
        # every query for its `%(name)s` placeholders, and does it again at every execution
        # for a statement of more than 50 parameters (a multi-row INSERT of records).
        compiled = statement.compile(dialect=_text_dialect(dialect), column_keys=column_keys)
        sql = compiled.string
        if "POSTCOMPILE" in sql:
            raise ValueError("A prepared statement cannot have expanding parameters.")
        types = {name: bind.type for bind, name in compiled.bind_names.items()}
        binds = []
        for name, type_ in types.items():
            processor = type_.dialect_impl(dialect).bind_processor(dialect)
            if processor is not None:
                binds.append((name, processor))
        columns = list(getattr(statement, "exported_columns", ()))
        results = []
        for index, column in enumerate(columns):
            processor = column.type.dialect_impl(dialect).result_processor(dialect, None)
            if processor is not None:
                results.append((index, processor))
        positional = bool(compiled.positional)
        return cls(
            sql=sql,
            names=tuple(compiled.positiontup or ()) if positional else tuple(types),
            defaults={k: v for k, v in compiled.params.items() if v is not None},
            binds=tuple(binds),
            keys=tuple(getattr(statement, "exported_columns", {}).keys()) if columns else (),
            results=tuple(results),
            positional=positional,
            dbapi_error=dialect.loaded_dbapi.Error,
            encoded=sql.encode() if dialect.name == "postgresql" else b"",
        )

    def _parameters(self, params: Mapping[str, Any]) -> Any:
        values = dict(self.defaults)
        values.update(params)
        for name, processor in self.binds:
            value = values.get(name)
            if value is not None:
                values[name] = processor(value)
        if self.positional:
            return tuple(values.get(name) for name in self.names)
        return values

    def execute(self, conn: Connection, params: Mapping[str, Any]) -> Any:
        if self.encoded:  # PostgreSQL: a statement is a trip of its own, or joins the block's
            prepare = self.prepare is not False
            trip = conn.info.get(_TRIP)
            if trip is not None:
                return trip.add(self.encoded, self._parameters(params), prepare=prepare)
            alone = Trip(_trip_state(conn))
            rows = alone.add(self.encoded, self._parameters(params), prepare=prepare)
            _send(conn, alone, self.sql)
            return rows
        driver, cursor = _cursor_of(conn)
        parameters = self._parameters(params)
        try:
            cursor.execute(self.sql, parameters)
        except self.dbapi_error as error:
            raise self._raise(conn, driver, cursor, error, parameters) from error
        return cursor

    def execute_many(self, conn: Connection, params: Sequence[Mapping[str, Any]]) -> None:
        if self.encoded:  # PostgreSQL: one trip for all of them
            with pipelined(conn):
                for one in params:
                    self.execute(conn, one)
            return
        driver, cursor = _cursor_of(conn)
        parameters = [self._parameters(one) for one in params]
        try:
            cursor.executemany(self.sql, parameters)
        except self.dbapi_error as error:
            raise self._raise(conn, driver, cursor, error, parameters) from error

    def _raise(
        self, conn: Connection, driver: Any, cursor: Any, error: Exception, parameters: Any
    ) -> exc.DBAPIError:
        invalidated = bool(conn.dialect.is_disconnect(error, driver, cursor))  # type: ignore[arg-type]
        if invalidated:
            conn.invalidate(error)
        return exc.DBAPIError.instance(  # type: ignore[return-value]
            self.sql,
            parameters,
            error,
            self.dbapi_error,
            hide_parameters=True,
            connection_invalidated=invalidated,
            dialect=conn.dialect,
        )

    def read(self, rows: Sequence[Sequence[Any]]) -> list[dict[str, Any]]:
        keys, results = self.keys, self.results
        if not keys:
            raise ValueError("Only a statement with named columns answers rows.")
        out = []
        for raw in rows:
            values = list(raw)
            for index, processor in results:
                value = values[index]
                if value is not None:  # every processor here reads None as None
                    values[index] = processor(value)
            out.append(dict(zip(keys, values, strict=True)))
        return out


# -- errors -------------------------------------------------------------------------------------


def is_transient(error: BaseException) -> bool:
    """A driver error after which the transaction was rolled back and may simply be retried.

    PostgreSQL: serialization failure, deadlock, lock not available. SQLite: the database stayed
    busy or locked beyond `busy_timeout`. Anything else (lost connections included, where a
    commit's outcome may be unknown) is not retried.
    """
    if not isinstance(error, exc.DBAPIError):
        return False
    original = error.orig
    sqlstate = getattr(original, "sqlstate", None)
    if isinstance(sqlstate, str):
        return sqlstate in _PG_TRANSIENT
    if isinstance(original, sqlite3.OperationalError):
        code = getattr(original, "sqlite_errorcode", None)
        if isinstance(code, int):
            return code & 0xFF in _SQLITE_BUSY
        return "locked" in str(original) or "busy" in str(original)
    return False


def is_unavailable(error: BaseException) -> bool:
    """A driver error that means the store cannot be reached or a commit's outcome is unknown."""
    return isinstance(error, exc.OperationalError | exc.InterfaceError)


def store_unavailable() -> CoordinatorError:
    return _refuse("coordinator.command.store-unavailable")


@contextmanager
def unavailable_as_refusal() -> Iterator[None]:
    """Map an unreachable store, or a commit whose outcome is unknown, to
    `coordinator.command.store-unavailable` (09 §3, §7; exit 3)."""
    try:
        yield
    except exc.DBAPIError as error:
        if is_unavailable(error):
            raise store_unavailable() from error
        raise
