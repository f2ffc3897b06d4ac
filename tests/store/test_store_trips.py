"""`trips.Trip` on PostgreSQL: the statements of a `pipelined` block (and each statement
alone) sent on libpq's pipeline mode directly. A block's statements go in one flush with one
sync; their rows are what a cursor reads; a failed statement is raised with its SQLSTATE after
the block and its transaction rolls back whole; a statement the store prepared stays prepared
across rollbacks (psycopg prepares nothing of its own, so it never deallocates them); what runs
through SQLAlchemy inside a block goes after what the block queued; a block that raises sends
nothing; a connection keeps a bounded number of statements; a lost connection is invalidated."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import Integer, bindparam, column, exc, select, text
from sqlalchemy.engine import Connection
from store_support import T0, admit, claim, client_sent, deliver_and_finish

from coordinator_core.shell.store import Store, dialect, trips
from coordinator_core.shell.store.dialect import Prepared, pipelined, read_together
from coordinator_core.shell.store.reads import STEPS_OF
from coordinator_core.shell.store.schema import CONTROL, RUNS

_CONTROL_ROW = Prepared(select(CONTROL))
_RUN_READ = Prepared(select(RUNS).where(RUNS.c.run_id == bindparam("run_id")))
_INSERT = Prepared(text("INSERT INTO trip_rows (id) VALUES (:id)"))
_COUNT = Prepared(text("SELECT count(*) AS rows FROM trip_rows").columns(column("rows", Integer)))


@pytest.fixture
def postgresql(store: Store) -> Store:
    if store.transactor.location.kind != "postgresql":
        pytest.skip("SQLite runs each statement as it comes (no trips)")
    return store


@pytest.fixture
def table(postgresql: Store) -> Iterator[Connection]:
    """A connection with an empty temporary table `trip_rows (id int primary key)`."""
    with postgresql.transactor.engine.connect() as conn:
        conn.execute(text("CREATE TEMPORARY TABLE trip_rows (id integer PRIMARY KEY)"))
        conn.commit()
        try:
            yield conn
        finally:
            conn.rollback()
            conn.execute(text("DROP TABLE trip_rows"))
            conn.commit()


class _CountingPGconn:
    """libpq's connection, counting the calls a trip makes of it."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.calls: collections.Counter[str] = collections.Counter()

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._real, name)
        if not callable(found):
            return found

        def counted(*arguments: Any) -> Any:
            self.calls[name] += 1
            return found(*arguments)

        return counted


class _CountingDriver:
    """A driver connection whose libpq connection counts its calls; it is the driver of the
    pooled connection as far as `_trip_state` can tell."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.pgconn = _CountingPGconn(real.pgconn)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def _count(conn: Connection) -> int:
    return int(_COUNT.rows(conn)[0]["rows"])


def test_a_block_is_one_flush_and_one_sync_and_reads_what_statements_alone_read(
    postgresql: Store,
) -> None:
    run = admit(postgresql, "k1")
    leased = claim(postgresql, T0)
    assert leased is not None
    postgresql.writes.complete_step(leased, T0, deliver_and_finish(T0))
    key = {"run_id": run.run_id}
    reads = ((_CONTROL_ROW, {}), (_RUN_READ, key), (STEPS_OF, key))
    with postgresql.transactor.engine.connect() as conn:
        with conn.begin():
            alone = [statement.rows(conn, params) for statement, params in reads]
        counting = _CountingDriver(dialect._trip_state(conn).driver)
        counted = trips.TripState(counting)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(dialect, "_trip_state", lambda _conn: counted)
            with conn.begin():
                together = read_together(conn, *reads)
    calls = counting.pgconn.calls
    assert calls["flush"] == 1, calls  # psycopg's pipeline flushed after every statement
    assert calls["pipeline_sync"] == 1, calls
    assert calls["send_query_prepared"] == 3, calls
    assert calls["send_query_params"] == 1, calls  # the transaction's BEGIN, sent with them
    assert together == alone
    assert together[2] and together[1][0]["run_id"] == run.run_id


def test_a_failed_statement_is_raised_after_the_block_and_its_transaction_rolls_back(
    table: Connection,
) -> None:
    transaction = table.begin()
    with pytest.raises(exc.IntegrityError) as raised, pipelined(table):
        _INSERT.run(table, {"id": 1})
        _INSERT.run(table, {"id": 2})
        _INSERT.run(table, {"id": 1})
        _INSERT.run(table, {"id": 3})
    assert isinstance(raised.value.orig, psycopg.errors.UniqueViolation)
    transaction.rollback()
    with table.begin():
        assert _count(table) == 0
        with pipelined(table):
            _INSERT.run(table, {"id": 1})
        assert _count(table) == 1


def test_a_failure_met_by_reading_rows_inside_a_block_is_raised_as_sqlalchemy_raises_it(
    table: Connection,
) -> None:
    transaction = table.begin()
    with pytest.raises(exc.IntegrityError), pipelined(table):
        _INSERT.run(table, {"id": 1})
        _INSERT.run(table, {"id": 1})
        _COUNT.rows(table)  # sends what is queued: the duplicate fails here
    transaction.rollback()
    with table.begin():
        assert _count(table) == 0


def _frontend_messages(conn: Connection, action: Any) -> list[str]:
    pgconn: Any = conn.connection.driver_connection.pgconn  # type: ignore[union-attr]
    # "Parse" of a named statement, "Parse-" of an unnamed one (a BEGIN)
    return [
        fields[3] + ("-" if fields[3] == "Parse" and fields[4].lstrip().startswith('""') else "")
        for fields in client_sent(pgconn, action)
        if len(fields) > 4
    ]


def test_a_statement_stays_prepared_across_rollbacks(table: Connection) -> None:
    """A rollback (a savepoint's too) leaves the connection's prepared statements in place;
    psycopg would deallocate all of them at a rollback if it had prepared any of its own."""
    transaction = table.begin()
    first = _frontend_messages(table, lambda: _INSERT.run(table, {"id": 1}))
    assert first.count("Parse") == 1, first
    transaction.rollback()
    with table.begin():
        _INSERT.run(table, {"id": 2})
        nested = table.begin_nested()
        _INSERT.run(table, {"id": 3})
        nested.rollback()
        again = _frontend_messages(table, lambda: _INSERT.run(table, {"id": 4}))
        assert again.count("Parse") == 0 and again.count("Bind") == 1, again
        assert _count(table) == 2
    driver: Any = table.connection.driver_connection
    assert driver.prepare_threshold is None


def test_a_statement_planned_each_time_is_never_prepared(table: Connection) -> None:
    """A claim's statements (`planned_each_time`) go unnamed: PostgreSQL plans them for their
    parameters and the tables as they are at every execution, never with a generic plan kept
    for the connection's life."""
    each_time = Prepared(
        text("SELECT count(*) AS rows FROM trip_rows WHERE id > :above").columns(
            column("rows", Integer)
        ),
        planned_each_time=True,
    )
    with table.begin():
        for _ in range(7):  # past psycopg's old threshold of five
            sent = _frontend_messages(table, lambda: each_time.rows(table, {"above": 0}))
            # unnamed, every time (the first trip also carries the transaction's BEGIN)
            assert "Parse-" in sent and sent.count("Parse") == 0, sent
        kept = table.execute(
            text("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE '%id > $1%'")
        ).scalar_one()
        assert kept == 0


def test_sqlalchemy_inside_a_block_runs_after_what_the_block_queued(table: Connection) -> None:
    with table.begin():
        with pipelined(table):
            _INSERT.run(table, {"id": 1})
            seen = table.execute(text("SELECT count(*) FROM trip_rows")).scalar_one()
            _INSERT.run(table, {"id": 2})
            rows = _COUNT.rows(table)  # reading a queued statement's rows sends the trip
            _INSERT.run(table, {"id": 3})
        assert seen == 1
        assert rows == [{"rows": 2}]
        assert _count(table) == 3


def test_a_block_that_raises_sends_nothing(table: Connection) -> None:
    driver: Any = table.connection.driver_connection
    with pytest.raises(ValueError), pipelined(table):
        _INSERT.run(table, {"id": 1})
        raise ValueError("the work failed")
    assert driver.info.transaction_status.name == "IDLE"  # not even its BEGIN
    with table.begin():
        assert _count(table) == 0


def test_past_its_bound_a_connection_deallocates_and_prepares_again(
    table: Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trips, "MAX_PREPARED", 2)
    with table.begin():
        for index in range(5):
            statement = Prepared(text(f"SELECT {index} AS n").columns(column("n", Integer)))
            assert statement.rows(table) == [{"n": index}]
        kept = table.execute(text("SELECT count(*) FROM pg_prepared_statements")).scalar_one()
        assert kept <= 2
        _INSERT.run(table, {"id": 1})
        assert _count(table) == 1


def test_a_connection_lost_before_a_trip_is_invalidated(postgresql: Store) -> None:
    engine = postgresql.transactor.engine
    with engine.connect() as conn:
        pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        conn.rollback()
        with engine.connect() as other:
            other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            other.commit()
        with pytest.raises(exc.DBAPIError) as raised:
            _CONTROL_ROW.rows(conn)
        assert raised.value.connection_invalidated
    assert postgresql.reads.get_run_status  # the store goes on with a new connection
    with engine.connect() as conn:
        assert len(_CONTROL_ROW.rows(conn)) == 1
