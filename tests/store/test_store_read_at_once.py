"""`Transactor.read_at_once`: a run's snapshot read, its status read and the inspection's (a
snapshot with each step's recent attempts), each in one read-only transaction whose BEGIN,
statements and COMMIT go to PostgreSQL in one round trip; the connection goes back to the
pool as it was lent, after a failed read too."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Integer, bindparam, column, exc, select, text
from store_support import T0, admit, claim, deliver_and_finish, frontend_messages

from coordinator_core.shell.store import Store
from coordinator_core.shell.store.dialect import Prepared, read_together
from coordinator_core.shell.store.reads import STEPS_OF
from coordinator_core.shell.store.schema import CONTROL, RUNS

_CONTROL_ROW = Prepared(select(CONTROL))
_RUN_READ = Prepared(select(RUNS).where(RUNS.c.run_id == bindparam("run_id")))


def _snapshot_rows(store: Store, run_id: Any) -> list[list[dict[str, Any]]]:
    key = {"run_id": run_id}
    reads = ((_CONTROL_ROW, {}), (_RUN_READ, key), (STEPS_OF, key))
    return store.transactor.transact(
        "compare", lambda conn: read_together(conn, *reads), read_only=True
    )


def test_it_reads_what_a_read_transaction_reads(store: Store) -> None:
    run = admit(store, "k1")
    leased = claim(store, T0)
    assert leased is not None
    store.writes.complete_step(leased, T0, deliver_and_finish(T0))
    key = {"run_id": run.run_id}
    once = store.transactor.read_at_once(
        "compare", (_CONTROL_ROW, {}), (_RUN_READ, key), (STEPS_OF, key)
    )
    assert once == _snapshot_rows(store, run.run_id)
    snapshot = store.reads.get_run_snapshot(run.run_id)
    assert snapshot is not None and snapshot.run.state.status == "finished"


def _lent(store: Store) -> tuple[bool, str]:
    with store.transactor.engine.connect() as conn:
        driver: Any = conn.connection.driver_connection
        return driver.autocommit, driver.info.transaction_status.name


def _postgresql(store: Store) -> None:
    if store.transactor.location.kind != "postgresql":
        pytest.skip("SQLite reads in a deferred transaction of its own (no round trips)")


_READS: dict[str, tuple[Any, int]] = {
    # the read, and its statements (with the BEGIN and the COMMIT)
    "snapshot": (lambda store, run_id: store.reads.get_run_snapshot(run_id), 5),
    "status": (lambda store, run_id: store.reads.get_run_status(run_id), 1),
    "inspection": (lambda store, run_id: store.reads.inspect_run(run_id), 6),
    "page": (
        lambda store, run_id: store.reads.list_runs(owner=None, workflows=("wf",), limit=5).runs,
        1,
    ),
}


@pytest.mark.parametrize("read", sorted(_READS))
def test_postgresql_sends_it_in_one_round_trip_and_lends_the_connection_back_as_it_was(
    store: Store, read: str
) -> None:
    """libpq's protocol trace of the connection: one Sync (one round trip) for the BEGIN, the
    reads (a snapshot: the control row, the run and its records; an inspection: a snapshot's
    and each step's recent attempts) and the COMMIT; a status read and a list page: one
    statement alone (the run, or the page's runs, with their status facts beside the control
    row)."""
    _postgresql(store)
    reader, statements = _READS[read]
    run = admit(store, "k1")
    leased = claim(store, T0)
    assert leased is not None
    store.writes.complete_step(leased, T0, deliver_and_finish(T0))  # an ended attempt
    reader(store, run.run_id)  # the statements prepared, the pool warm
    answers: list[object] = []
    frontend = frontend_messages(store, lambda: answers.append(reader(store, run.run_id)))
    assert answers[0] is not None
    assert frontend.count("Sync") == 1, frontend
    assert sum(1 for message in frontend if message == "Parse" or message == "Bind") >= statements
    if statements == 1:  # no BEGIN, no COMMIT
        assert frontend.count("Bind") == 1, frontend
    assert _lent(store) == (False, "IDLE")
    if read == "inspection":
        inspected = store.reads.inspect_run(run.run_id)
        assert inspected is not None
        snapshot, attempts = inspected
        assert snapshot == store.reads.get_run_snapshot(run.run_id)
        assert attempts == store.reads.recent_attempts(run.run_id)
        assert sum(total for _, total in attempts.values()) == 1


def test_postgresql_a_failed_read_is_rolled_back_and_raised(store: Store) -> None:
    _postgresql(store)
    failing = Prepared(text("SELECT 1 / 0 AS quotient"))
    with pytest.raises(exc.DBAPIError):
        store.transactor.read_at_once("failing", (failing, {}))
    assert _lent(store) == (False, "IDLE")
    run = admit(store, "k1")
    assert store.reads.get_run_snapshot(run.run_id) is not None


def test_postgresql_a_prepared_statement_is_sent_as_written_with_its_own_placeholders(
    store: Store,
) -> None:
    """The statements carry PostgreSQL's `$n` placeholders and go to libpq as they are
    (`trips.Trip`): psycopg's default cursor parsed every query for `%(name)s` placeholders,
    again at every execution for one of more than 50 parameters (a multi-row INSERT of
    records). A parameter used twice is one placeholder."""
    _postgresql(store)
    twice = Prepared(
        text("SELECT CAST(:value AS integer) + CAST(:value AS integer) AS total").columns(
            column("total", Integer)
        )
    )
    with store.transactor.engine.connect() as conn:
        plan = twice._plan(conn.dialect)
        assert "$1" in plan.sql and "$2" not in plan.sql and "%(" not in plan.sql
        assert plan.encoded == plan.sql.encode()
        assert twice.rows(conn, {"value": 20}) == [{"total": 40}]
        conn.rollback()
    runs = [admit(store, f"k{index}") for index in range(3)]  # records inserted several at once
    assert all(store.reads.get_run_snapshot(run.run_id) is not None for run in runs)
