"""What an idle worker waits for and how due waits are fired in batches (07 §7.7 item 4;
issue 9): the store's look-ahead, the batch transaction, the announcement of an instant to the
other processes, and the claim's plan on tables whose statistics are those of empty tables."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Sequence

import psycopg
import pytest
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql
from store_support import (
    IDENTITY,
    SECOND,
    T0,
    Backend,
    admission,
    admit,
    changed,
    claim,
    start_step,
)

from coordinator_core.shell.store import (
    LEASE_SECONDS,
    NextInstants,
    RunSnapshot,
    RunWrite,
    Store,
    StoredStep,
    StoreInvariantError,
)
from coordinator_core.shell.store.dialect import UTCDateTime
from coordinator_core.shell.store.writes import hot_statements


def _wait_until(now: int, *, instant: int | None = None) -> object:
    """A start record that is a `wait-until` due at `now` (its instant already computed when
    `instant` is given: a parked wait)."""

    def build(run_id: object) -> StoredStep:
        record = start_step(run_id, now, step="wait", type="wait-until")  # type: ignore[arg-type]
        return changed(record, wait_until=instant)

    return build


def _deliver_each(now: int, seen: list[str]) -> object:
    """A batch decision in its simplest form: each wait delivered (T18-like), nothing leased."""

    def decide(snapshots: Sequence[RunSnapshot]) -> list[RunWrite | None]:
        writes: list[RunWrite | None] = []
        for snapshot in snapshots:
            seen.append(snapshot.current.record.type)
            delivered = changed(
                snapshot.current, state="delivered", route_kind="next", finished_at=now
            )
            writes.append(RunWrite(snapshot.run, (delivered,)))
        return writes

    return decide


def test_the_look_ahead_answers_the_first_candidate_of_the_claim_and_of_each_sweep(
    store: Store,
) -> None:
    assert store.reads.next_instants(T0) == NextInstants()  # an empty store: nothing to wait for
    later = admit(store, "later", T0 + 30 * SECOND, deadline_seconds=7200)
    admit(store, "sooner", T0 + 10 * SECOND, deadline_seconds=3600)
    # the earliest record a claim could take (due or not), the earliest deadline of a live run
    # whose current record is pending and not pure
    assert store.reads.next_instants(T0) == NextInstants(
        T0 + 10 * SECOND, None, T0 + 10 * SECOND + 3600 * SECOND
    )
    leased = claim(store, T0 + 20 * SECOND)
    assert leased is not None
    instants = store.reads.next_instants(T0 + 20 * SECOND)
    assert instants.due_at == later.state.admitted_at  # the leased one is no longer a candidate
    assert instants.lapses_at == T0 + (20 + LEASE_SECONDS) * SECOND
    assert instants.overdue_at == later.state.deadline_at


def test_the_look_ahead_finds_nothing_while_a_restore_hold_holds_the_claims(
    store: Store,
) -> None:
    admit(store, "held", T0)
    store.operator.set_restore_hold(T0, lambda _snapshot: None)
    assert store.reads.next_instants(T0) == NextInstants()


def test_a_batch_takes_the_due_waits_only_in_claim_order_and_writes_each_decision(
    store: Store,
) -> None:
    for index in range(3):
        admit(
            store,
            f"wait-{index}",
            T0 + index * SECOND,
            step_type="wait-until",
            first_step=_wait_until(T0 + index * SECOND, instant=T0),
        )
    admit(store, "call", T0)  # due too, but a call is claimed as usual
    admit(store, "not-yet", T0, step_type="wait-until", first_step=_wait_until(T0 + 60 * SECOND))
    seen: list[str] = []
    taken, written = store.writes.fire_due_waits(T0 + 5 * SECOND, _deliver_each(T0, seen), limit=2)  # type: ignore[arg-type]
    assert (taken, seen) == (2, ["wait-until", "wait-until"])
    assert [snapshot.current.record.state for snapshot in written] == ["delivered", "delivered"]
    taken, written = store.writes.fire_due_waits(T0 + 5 * SECOND, _deliver_each(T0, seen))  # type: ignore[arg-type]
    assert (taken, len(written)) == (1, 1)
    assert store.writes.fire_due_waits(T0 + 5 * SECOND, _deliver_each(T0, seen)) == (0, ())  # type: ignore[arg-type]
    leased = claim(store, T0 + 5 * SECOND)
    assert leased is not None and leased.snapshot.current.record.type == "call"


def test_a_batch_never_leases_a_record_and_a_refused_decision_writes_nothing(
    store: Store,
) -> None:
    run = admit(store, "wait", T0, step_type="wait-until", first_step=_wait_until(T0, instant=T0))

    def lease(snapshots: Sequence[RunSnapshot]) -> list[RunWrite | None]:
        leased = changed(snapshots[0].current, state="leased", attempt=1, claims=1)
        return [RunWrite(snapshots[0].run, (leased,))]

    with pytest.raises(StoreInvariantError):
        store.writes.fire_due_waits(T0, lease)
    snapshot = store.reads.get_run_snapshot(run.run_id)
    assert snapshot is not None and snapshot.current.record.state == "pending"
    assert store.writes.fire_due_waits(T0, lambda snapshots: [None] * len(snapshots)) == (1, ())
    taken, written = store.writes.fire_due_waits(T0, _deliver_each(T0, []))  # type: ignore[arg-type]
    assert taken == 1 and [after.current.record.state for after in written] == ["delivered"]


def test_a_batch_whose_write_breaks_a_constraint_fails_whole_as_a_store_error(
    store: Store,
) -> None:
    """The batch's writes are sent together on PostgreSQL (one round trip); a statement that
    fails there fails the transaction exactly as it would have one by one."""
    runs = [
        admit(
            store,
            f"wait-{index}",
            T0,
            step_type="wait-until",
            first_step=_wait_until(T0, instant=T0),
        )
        for index in range(3)
    ]

    def breaks(snapshots: Sequence[RunSnapshot]) -> list[RunWrite | None]:
        writes: list[RunWrite | None] = []
        for index, snapshot in enumerate(snapshots):
            record = changed(snapshot.current, state="delivered", finished_at=T0)
            if index == 1:  # a pending record needs its due instant (ck_steps_pending)
                record = changed(snapshot.current, due_at=None)
            writes.append(RunWrite(snapshot.run, (record,)))
        return writes

    with pytest.raises(sa_exc.IntegrityError):
        store.writes.fire_due_waits(T0, breaks)
    for run in runs:
        snapshot = store.reads.get_run_snapshot(run.run_id)
        assert snapshot is not None and snapshot.current.record.state == "pending"


def test_an_announced_instant_and_an_admission_reach_another_process(
    postgresql_backend: Backend,
) -> None:
    """07 §7.7 item 4 across processes: the listener wakes on its socket (no polling) and
    hands an announced instant to `schedule`, and rings for a record claimable now."""
    backend = postgresql_backend
    backend.migrate()
    backend.apply()
    listening, other = backend.open(IDENTITY), backend.open(IDENTITY)
    stop = threading.Event()
    rings: list[None] = []
    scheduled: list[int] = []
    try:
        thread = listening.channel.listen(
            lambda: rings.append(None), stop, schedule=scheduled.append
        )
        assert thread is not None
        _eventually(lambda: len(rings) >= 1)  # it rang once it listened
        other.channel.announce(T0 + 5 * SECOND)
        _eventually(lambda: scheduled == [T0 + 5 * SECOND])
        before = len(rings)
        admit(other, "wakes", T0)
        _eventually(lambda: len(rings) > before)
        assert scheduled == [T0 + 5 * SECOND]
        # its own notifications, and an admission another process keeps to itself (one of
        # its idle loops takes the run), ring nobody here: a later one shows they came first
        heard = len(rings)
        admit(listening, "own", T0)
        other.writes.admit(admission("kept", T0), T0, announce=False)
        admit(other, "last", T0)
        _eventually(lambda: len(rings) > heard)
        time.sleep(0.2)
        assert len(rings) == heard + 1
    finally:
        stop.set()
        listening.close()
        other.close()


def _eventually(condition: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout  # a hang guard, not a measurement
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "nothing arrived"
        time.sleep(0.02)


def test_the_claim_is_planned_at_each_execution_and_stays_an_ordered_index_scan(
    postgresql_backend: Backend,
) -> None:
    """Issue 9: on a store filled from empty with no statistics taken since, a claim plan kept
    from the empty tables scanned or sorted every due record per claim. The claim is never a
    prepared statement of the server (so it is planned for the tables as they are), and that
    plan is the ordered scan of `ix_steps_due` then the run by its key, with no sort."""
    backend = postgresql_backend
    backend.migrate()
    backend.apply()
    store = backend.open(IDENTITY, pool_size=1)
    try:
        for _ in range(8):  # psycopg prepares a statement it ran five times on a connection
            assert claim(store, T0 - 3600 * SECOND) is None
        for index in range(1200):
            admit(store, f"due-{index}", T0 + index)  # a millisecond apart
        for _ in range(8):
            leased = claim(store, T0 + 3600 * SECOND)
            assert leased is not None
        raw = store.transactor.engine.raw_connection()
        try:
            cursor = raw.driver_connection.cursor()  # type: ignore[union-attr]
            prepared = [
                row[0] for row in cursor.execute("SELECT statement FROM pg_prepared_statements")
            ]
        finally:
            raw.close()
        assert not any("ORDER BY steps.due_at" in text for text in prepared), prepared
        dialect = postgresql.dialect()  # type: ignore[no-untyped-call]
        compiled = hot_statements()["claim"].compile(dialect=dialect)
        now = UTCDateTime().process_bind_param(T0 + 3600 * SECOND, dialect)
        parameters = dict(compiled.params) | {"now": now}
        with psycopg.connect(backend.url, autocommit=True) as connection:
            connection.execute(f'SET search_path TO "{backend.namespace}"')
            with connection.transaction(force_rollback=True):
                plan = "\n".join(
                    str(row[0])
                    for row in connection.execute(
                        "EXPLAIN " + compiled.string,
                        parameters,  # type: ignore[arg-type]
                    )
                )
    finally:
        store.close()
    assert re.search(r"Index Scan using ix_steps_due on steps", plan), plan
    assert re.search(r"Index Scan using runs_pkey on runs", plan), plan
    assert "Sort" not in plan and "Bitmap" not in plan, plan


def test_sqlite_has_no_channel_to_announce_on_or_listen_to(sqlite_backend: Backend) -> None:
    """One process holds a SQLite store: nothing is announced across processes, and no listener
    is started (its own loops are rung in process)."""
    sqlite_backend.migrate()
    sqlite_backend.apply()
    with sqlite_backend.open() as store:
        assert store.transactor.wake_channel is None
        store.channel.announce(T0)  # nothing to send, no transaction
        assert store.channel.listen(lambda: None, threading.Event()) is None
