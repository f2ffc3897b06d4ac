"""Run listing, API transitions, completion events, holds, retention and the settled rule
(06 §5.2; 07 §7.6, §8, §12, §13), on both backends."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import pytest
from sqlalchemy import delete, insert, select
from store_support import (
    DEFINITION,
    SECOND,
    T0,
    admission,
    admit,
    changed,
    changed_run,
    claim,
    deliver_and_finish,
    fail_run,
    stand_in_recover,
    start_step,
)

from coordinator_core.engine import is_settled
from coordinator_core.engine.state import RunState
from coordinator_core.errors import CoordinatorError, Diagnostic
from coordinator_core.shell.store import (
    Decide,
    RunPosition,
    RunSnapshot,
    RunWrite,
    Store,
    StoredRun,
    StoredStep,
    StoreInvariantError,
    supported_version,
)
from coordinator_core.shell.store.schema import CONTROL


def _snapshot(store: Store, run_id: uuid.UUID) -> RunSnapshot:
    snapshot = store.reads.get_run_snapshot(run_id)
    assert snapshot is not None
    return snapshot


def _set(store: Store, run_id: uuid.UUID, **run_changes: object) -> None:
    store.writes.update_run(run_id, T0, lambda s: RunWrite(changed_run(s.run, **run_changes)))  # type: ignore[arg-type]


def _finish(store: Store, run_id: uuid.UUID, now: int = T0) -> None:
    store.writes.update_run(run_id, now, deliver_and_finish(now))


def _all_pages(store: Store, limit: int, **filters: object) -> list[StoredRun]:
    seen: list[StoredRun] = []
    position: RunPosition | None = None
    while True:
        page = store.reads.list_runs(owner=None, after=position, limit=limit, **filters)  # type: ignore[arg-type]
        seen.extend(page.runs)
        if page.next is None:
            return seen
        position = page.next


# -- listing ------------------------------------------------------------------------------------


def test_pages_are_newest_first_and_never_repeat_or_skip(store: Store) -> None:
    for index in range(12):
        admit(store, f"k{index}", T0 + index * SECOND)
    for index in range(6):  # same admittedAt: ordered by runId DESC
        admit(store, f"tie{index}", T0 + 100 * SECOND)
    expected = sorted(
        _all_pages(store, 100), key=lambda run: (run.state.admitted_at, run.run_id), reverse=True
    )
    assert [run.run_id for run in _all_pages(store, 100)] == [run.run_id for run in expected]
    first = store.reads.list_runs(owner=None, limit=5)
    assert first.next is not None
    collected = list(first.runs)
    position: RunPosition | None = first.next
    for later in range(3):  # admitted later: never on later pages
        admit(store, f"new{later}", T0 + 1000 * SECOND)
    while position is not None:
        page = store.reads.list_runs(owner=None, after=position, limit=5)
        collected.extend(page.runs)
        position = page.next
    assert [run.run_id for run in collected] == [run.run_id for run in expected]


def test_listing_filters_by_owner_workflow_and_reported_status(store: Store) -> None:
    mine = admit(store, "a", owner="1" * 64)
    admit(store, "b", owner="2" * 64)
    reviewed = admit(store, "c", owner="1" * 64, now=T0 + SECOND)
    _set(store, reviewed.run_id, restore_review=True)
    finished = admit(store, "d", owner="1" * 64, now=T0 + 2 * SECOND)
    _finish(store, finished.run_id)
    assert {r.run_id for r in store.reads.list_runs(owner="1" * 64).runs} == {
        mine.run_id,
        reviewed.run_id,
        finished.run_id,
    }
    assert [r.run_id for r in store.reads.list_runs(owner=None, status="attention").runs] == [
        reviewed.run_id
    ]
    assert reviewed.run_id not in {r.run_id for r in _all_pages(store, 2, status="running")}
    assert store.reads.list_runs(owner=None, workflow="other").runs == ()
    assert store.reads.list_runs(owner=None, workflows=()).runs == ()
    assert len(store.reads.list_runs(owner=None, workflows=("wf",), limit=100).runs) == 4


def test_a_page_and_a_status_read_read_each_run_s_status_facts_with_its_row(store: Store) -> None:
    """The list and the status read answer a run's status (06 §11.1) from one statement: the
    run row, its current record's state and due instant, and the unknown-effect rule in SQL —
    the status a full snapshot of the run gives, without reading every record of the run."""
    from coordinator_core.shell.service.shapes import listed_status_of, run_status_of

    runs = [admit(store, f"s{index}", T0 + index * SECOND) for index in range(4)]
    _finish(store, runs[1].run_id)
    store.writes.update_run(runs[2].run_id, T0, _unknown_effect)
    page = store.reads.list_runs(owner=None, limit=10)
    assert [listed.run.run_id for listed in page.listed] == [r.run_id for r in runs[::-1]]
    for listed in page.listed:
        full = run_status_of(_snapshot(store, listed.run.run_id), lambda _: None)
        assert full.run.input is not None
        # A listed run does not read the sealed snapshot and input, which no status shows.
        assert listed.run.snapshot is None and listed.run.input is None
        unsealed = replace(full, run=replace(full.run, snapshot=None, input=None))
        assert listed_status_of(listed, lambda _: None) == unsealed
    assert [listed.uncertain for listed in page.listed] == [False, True, False, False]
    assert [listed.next_due_at is None for listed in page.listed] == [False, True, True, False]
    assert store.reads.list_runs(owner=None, workflow="other").listed == ()
    # The status read of one run (06 §5.3) is the same statement for one run id.
    for listed in page.listed:
        assert store.reads.get_run_status(listed.run.run_id) == listed
    assert store.reads.get_run_status(uuid.uuid4()) is None


# -- cancel and other API transitions -----------------------------------------------------------


def test_cancel_of_a_terminal_or_already_cancelled_run_changes_nothing(store: Store) -> None:
    finished = admit(store, "done")
    _finish(store, finished.run_id)
    called: list[uuid.UUID] = []

    def cancel(snapshot: RunSnapshot) -> RunWrite:
        called.append(snapshot.run.run_id)
        record = changed(snapshot.current, state="cancelled", finished_at=T0)
        run = changed_run(
            snapshot.run,
            cancel_requested=True,
            cancel_mode="stopping",
            status="cancelled",
            completed_at=T0,
        )
        return RunWrite(run, (record,))

    unchanged = store.writes.request_cancel(finished.run_id, T0, cancel)
    assert unchanged is not None and unchanged.run.state.status == "finished" and called == []
    running = admit(store, "running")
    cancelled = store.writes.request_cancel(running.run_id, T0, cancel)
    assert cancelled is not None and cancelled.run.state.status == "cancelled"
    assert store.writes.request_cancel(running.run_id, T0, cancel) == cancelled
    assert called == [running.run_id]
    assert store.writes.request_cancel(uuid.uuid4(), T0, cancel) is None


def test_a_cancel_must_record_cancel_requested(store: Store) -> None:
    run = admit(store, "k1")
    with pytest.raises(StoreInvariantError):
        store.writes.request_cancel(run.run_id, T0, lambda s: RunWrite(s.run))
    assert _snapshot(store, run.run_id).run.state.cancel_requested is False


def test_update_run_locks_and_writes_or_rolls_back_on_refusal(store: Store) -> None:
    run = admit(store, "k1")
    store.writes.update_run(run.run_id, T0, fail_run(T0, "product-refused"), admission_lock=True)
    assert _snapshot(store, run.run_id).run.state.status == "failed"

    def raced(snapshot: RunSnapshot) -> RunWrite:
        store_write = RunWrite(changed_run(snapshot.run, status="running"))
        assert store_write  # computed, then refused: nothing may commit
        raise CoordinatorError(Diagnostic(code="coordinator.command.reconcile-raced"))

    with pytest.raises(CoordinatorError) as refused:
        store.writes.update_run(run.run_id, T0, raced)
    assert refused.value.code == "coordinator.command.reconcile-raced"
    assert _snapshot(store, run.run_id).run.state.status == "failed"
    assert store.writes.update_run(uuid.uuid4(), T0, lambda s: None) is None


# -- completion events (07 §7.6) ----------------------------------------------------------------


def _wait_for(run_id: uuid.UUID) -> StoredStep:
    return changed(
        start_step(run_id, T0, step="await-review", type="wait-for"),
        due_at=T0 + 60 * SECOND,
        wait_started_at=T0,
        timeout_at=T0 + 600 * SECOND,
        interval_seconds=60,
        completion_ref="c" * 64,
    )


def test_a_completion_event_brings_the_next_observation_forward_but_keeps_the_floor(
    store: Store,
) -> None:
    store.writes.admit(admission("w1", first_step=_wait_for), T0)
    store.writes.admit(admission("w2", first_step=_wait_for), T0)
    observed = claim(store, T0 + 60 * SECOND)
    assert observed is not None
    store.writes.complete_step(  # the observation found nothing: observed now, next one in 60 s
        observed,
        T0 + 60 * SECOND,
        lambda s: RunWrite(
            s.run,
            (
                changed(
                    s.current,
                    state="pending",
                    due_at=T0 + 120 * SECOND,
                    observations=1,
                    last_observed_at=T0 + 60 * SECOND,
                    attempt=0,
                ),
            ),
        ),
    )
    in_flight = claim(store, T0 + 60 * SECOND)  # observing right now: left alone
    assert in_flight is not None and in_flight.run_id != observed.run_id

    def later_wait(run_id: uuid.UUID) -> StoredStep:
        return changed(_wait_for(run_id), due_at=T0 + 300 * SECOND)

    never = store.writes.admit(admission("w3", first_step=later_wait), T0 + 65 * SECOND).run
    assert store.writes.advance_completion_waits("c" * 64, T0 + 70 * SECOND, 30) == 2
    assert _snapshot(store, observed.run_id).current.record.due_at == T0 + 90 * SECOND  # floor
    assert _snapshot(store, never.run_id).current.record.due_at == T0 + 70 * SECOND  # now
    assert _snapshot(store, in_flight.run_id).current.record.state == "leased"
    assert store.writes.advance_completion_waits("c" * 64, T0 + 80 * SECOND, 30) == 0  # not earlier
    assert store.writes.advance_completion_waits("d" * 64, T0 + 80 * SECOND, 30) == 0


def test_a_completion_event_never_moves_a_wait_past_its_timeout(store: Store) -> None:
    def short(run_id: uuid.UUID) -> StoredStep:
        return changed(_wait_for(run_id), timeout_at=T0 + 5 * SECOND, due_at=T0 + 5 * SECOND)

    run = store.writes.admit(admission("w1", first_step=short), T0).run
    assert store.writes.advance_completion_waits("c" * 64, T0 + 6 * SECOND, 30) == 0
    assert _snapshot(store, run.run_id).current.record.due_at == T0 + 5 * SECOND


# -- restore hold (07 §12) ----------------------------------------------------------------------


def test_restore_hold_reviews_every_unsettled_run_and_lapses_leases(store: Store) -> None:
    pending = admit(store, "pending")
    finished = admit(store, "finished")
    _finish(store, finished.run_id)
    leased_run = admit(store, "leased", T0 - SECOND)
    leased = claim(store, T0)
    assert leased is not None and leased.run_id == leased_run.run_id
    reviewed: list[uuid.UUID] = []

    def review(snapshot: RunSnapshot) -> RunWrite:
        reviewed.append(snapshot.run.run_id)
        assert snapshot.control.restore_hold and snapshot.control.admissions_hold
        write = (
            stand_in_recover(T0)(snapshot, "lease-lapsed")
            if snapshot.current.record.state == "leased"
            else None
        )
        steps = write.steps if write else ()
        return RunWrite(changed_run(snapshot.run, restore_review=True), steps)

    holds = store.operator.set_restore_hold(T0, review)
    assert sorted(reviewed) == sorted([pending.run_id, leased_run.run_id])
    assert (holds.restore_hold, holds.admissions_hold, holds.restore_review) == (True, True, 2)
    assert _snapshot(store, leased_run.run_id).current.record.state == "pending"
    assert _snapshot(store, leased_run.run_id).run.state.reported_status == "attention"
    assert store.reads.summary(T0).statuses["attention"] == 2
    with pytest.raises(CoordinatorError) as attest:
        store.operator.release_admission_hold(
            "ref", admission_history_complete=True, prior_deployment_fenced=False
        )
    assert attest.value.code == "coordinator.command.attestation-required"
    with pytest.raises(CoordinatorError) as held:
        store.operator.release_admission_hold(
            "ref", admission_history_complete=True, prior_deployment_fenced=True
        )
    assert held.value.code == "coordinator.command.restore-hold"
    store.operator.release_restore_hold("evidence-ref")
    released = store.operator.release_admission_hold(
        "recovery-ref", admission_history_complete=True, prior_deployment_fenced=True
    )
    assert (released.restore_hold, released.admissions_hold, released.restore_review) == (
        False,
        False,
        2,
    )
    control = store.reads.control()
    assert (control.restore_evidence_ref, control.admission_recovery_ref) == (
        "evidence-ref",
        "recovery-ref",
    )
    store.operator.set_restore_hold(T0, lambda s: None)  # idempotent; evidence cleared again
    assert store.reads.control().restore_evidence_ref is None


# -- retention (07 §13) -------------------------------------------------------------------------


def _unknown_effect(snapshot: RunSnapshot) -> RunWrite:
    record = changed(
        snapshot.current,
        command=b"c",
        command_prepared=True,
        sent=True,
        uncertain=True,
        state="unknown",
    )
    return RunWrite(changed_run(snapshot.run, status="attention"), (record,))


def test_retention_erases_only_settled_runs_and_keeps_tombstones(store: Store) -> None:
    later = T0 + 3600 * SECOND
    finished = admit(store, "finished")
    store.writes.update_run(finished.run_id, T0 + 2 * SECOND, deliver_and_finish(T0 + 2 * SECOND))
    hopeless = admit(store, "hopeless")
    store.writes.update_run(hopeless.run_id, T0 + SECOND, fail_run(T0 + SECOND, "mapping-invalid"))
    recoverable = admit(store, "recoverable", deadline_seconds=86_400)
    store.writes.update_run(recoverable.run_id, T0, fail_run(T0, "product-refused"))
    unknown = admit(store, "unknown")
    store.writes.update_run(unknown.run_id, T0, _unknown_effect)
    store.writes.update_run(unknown.run_id, T0, fail_run(T0, "mapping-invalid"))
    reviewed = admit(store, "reviewed")
    store.writes.update_run(reviewed.run_id, T0, deliver_and_finish(T0))
    _set(store, reviewed.run_id, restore_review=True)
    admit(store, "running")
    assert store.operator.erase_settled_before(later, 1, later) == 1  # oldest completedAt first
    assert _snapshot(store, hopeless.run_id).run.payload_erased
    assert store.operator.erase_settled_before(later, 100, later) == 1
    assert store.operator.erase_settled_before(later, 100, later) == 0
    erased = _snapshot(store, finished.run_id)
    assert (erased.run.snapshot, erased.run.input, erased.run.terminal_output) == (None, None, None)
    assert erased.run.payload_erased_at == later
    assert (erased.run.state.status, erased.run.state.outcome, erased.run.start_identity) == (
        "finished",
        "done",
        finished.start_identity,
    )
    for kept in (recoverable, unknown, reviewed):
        assert not _snapshot(store, kept.run_id).run.payload_erased
    # A replayed start key still finds the tombstone.
    assert store.writes.admit(admission("finished"), later).run.run_id == finished.run_id
    with pytest.raises(CoordinatorError) as reused:
        store.writes.admit(admission("finished", input_digest="e" * 64), later)
    assert reused.value.code == "idempotency.key-reused"
    assert store.reads.summary(later).terminal_payloads == 0


def test_retention_respects_the_before_instant(store: Store) -> None:
    run = admit(store, "k1")
    store.writes.update_run(run.run_id, T0 + 10 * SECOND, deliver_and_finish(T0 + 10 * SECOND))
    assert store.operator.erase_settled_before(T0 + 10 * SECOND, 10, T0 + 60 * SECOND) == 0
    assert store.operator.erase_settled_before(T0 + 11 * SECOND, 10, T0 + 60 * SECOND) == 1


def test_a_definition_snapshot_is_stored_once_and_outlives_the_erasure_of_runs(
    store: Store,
) -> None:
    """Schema v2: the sealed snapshot is stored once per definition digest, in the scope of
    the run that first stored it; later runs carry none. It is the definition, not a run's
    payload, so erasing the runs' payloads (07 §13) leaves it."""
    run = admit(store, "k1")
    later = admit(store, "k2", snapshot=None)
    assert later.snapshot is None
    assert store.reads.definition_snapshot(DEFINITION) == (run.run_id, b"sealed-snapshot")
    assert store.reads.definition_snapshot("sha256:" + "0" * 64) is None
    _finish(store, run.run_id)
    store.operator.erase_settled_before(T0 + SECOND, 10, T0 + SECOND)
    assert store.reads.definition_snapshot(DEFINITION) == (run.run_id, b"sealed-snapshot")


# -- the settled rule: store SQL == engine ------------------------------------------------------

_STATUSES = (
    "running",
    "attention",
    "cancel-requested",
    "finished",
    "failed",
    "cancelled",
    "cancelled-after-effect",
    "expired",
)


def _cases() -> list[tuple[str, bool, bool, str | None, bool, bool]]:
    cases: list[tuple[str, bool, bool, str | None, bool, bool]] = [
        (status, review, unknown, None, False, False)
        for status, review, unknown in itertools.product(_STATUSES, (False, True), (False, True))
    ]
    cases += [
        ("failed", review, unknown, code, pure, passed)
        for review, unknown, code, pure, passed in itertools.product(
            (False, True),
            (False, True),
            ("mapping-invalid", "product-refused"),
            (False, True),
            (False, True),
        )
        if not (pure and unknown)
    ]
    return cases


def test_the_settled_rule_in_sql_matches_the_engine(store: Store) -> None:
    now = T0 + 20 * SECOND
    expected: dict[str, bool] = {}
    for number, (status, review, unknown, code, pure, passed) in enumerate(_cases()):
        binding = f"sha256:{number:064d}"
        request = admission(
            f"case-{number}",
            step_type="choose" if pure else "call",
            deadline_seconds=10 if passed else 3600,
            binding_digest=binding,
        )
        run = store.writes.admit(request, T0).run

        after = store.writes.update_run(run.run_id, T0, _shape(status, review, unknown, code))
        assert after is not None
        expected[binding] = is_settled(_engine_state(after), now)
    unsettled = {pair[1] for pair in store.reads.unsettled_bindings(now)}
    assert {binding for binding, settled in expected.items() if not settled} == unsettled
    assert any(expected.values()) and not all(expected.values())


def _shape(status: str, review: bool, unknown: bool, code: str | None) -> Decide:
    def decide(snapshot: RunSnapshot) -> RunWrite:
        record = changed(snapshot.current, failure_code=code, state="dead-lettered")
        if unknown:
            record = changed(record, command=b"c", command_prepared=True, sent=True, uncertain=True)
        run = changed_run(snapshot.run, status=status, restore_review=review, failure_code=code)
        return RunWrite(run, (record,))

    return decide


def _engine_state(snapshot: RunSnapshot) -> RunState:
    """The engine's value of the run as the store read it: its state, with the records read
    beside it (their payload at hand: a prepared command has its text)."""
    records = tuple(
        replace(record, command="{}" if record.command_prepared else None)
        for record in snapshot.records
    )
    return replace(snapshot.run.state, input="{}", records=records)


def test_summary_counts_what_doctor_reports(store: Store) -> None:
    admit(store, "a", T0 + 5 * SECOND)
    finished = admit(store, "b")
    _finish(store, finished.run_id)
    store.writes.admit(admission("w", first_step=_wait_for), T0)
    summary = store.reads.summary(T0)
    assert summary.statuses["running"] == 2 and summary.statuses["finished"] == 1
    assert sum(summary.statuses.values()) == 3 and len(summary.statuses) == 8
    assert (summary.waits, summary.unknown_effects, summary.terminal_payloads) == (1, 0, 1)
    assert summary.oldest_due_at == T0 + 5 * SECOND
    assert summary.oldest_terminal_payload_at == T0
    assert (summary.store, summary.schema_version) == (store.kind, supported_version())


def test_gauges_count_what_a_scrape_reports(store: Store) -> None:
    """06 §14: runs by reported status, the records due at `now` and how long the oldest has
    waited (in seconds, from millisecond instants), parked waits and the holds."""
    admit(store, "due", T0 + 500)
    admit(store, "not-yet", T0 + 60 * SECOND)
    reviewed = admit(store, "reviewed", T0 + 2 * SECOND)
    _set(store, reviewed.run_id, restore_review=True)
    store.writes.admit(admission("w", first_step=_wait_for), T0)  # due in 60 s: parked
    gauges = store.reads.gauges(T0 + 3 * SECOND)
    assert gauges.statuses["running"] == 3 and gauges.statuses["attention"] == 1
    assert sum(gauges.statuses.values()) == 4 and len(gauges.statuses) == 8
    assert gauges.due == 2
    assert gauges.oldest_due_lag_seconds == 2.5
    assert gauges.parked_waits == 1
    assert gauges.holds == {"restore": 0, "admissions": 0, "restore-review": 1}
    quiet = store.reads.gauges(T0)
    assert (quiet.due, quiet.oldest_due_lag_seconds) == (0, 0.0)


# -- what a waiting status read follows (06 §5.3) -------------------------------------------------


def _fingerprint(store: Store, run_id: uuid.UUID) -> str:
    from coordinator_core.shell.service.shapes import run_status_of

    return run_status_of(_snapshot(store, run_id), lambda _: None).fingerprint


def test_watched_runs_fingerprint_as_the_full_status_does_in_one_read(store: Store) -> None:
    running = admit(store, "watched-running").run_id
    finished = admit(store, "watched-finished").run_id
    _finish(store, finished)
    reviewed = admit(store, "watched-reviewed").run_id
    absent = uuid.uuid4()
    before = store.reads.watched_runs([running, finished, reviewed, absent])
    assert set(before) == {running, finished, reviewed}
    for run_id, watched in before.items():
        assert watched.fingerprint(run_id) == _fingerprint(store, run_id)
    assert before[finished].status == "finished"
    _set(store, reviewed, restore_review=True)  # reads `attention`
    after = store.reads.watched_runs([running, reviewed])
    assert after[reviewed].status == "attention"
    assert after[reviewed].fingerprint(reviewed) == _fingerprint(store, reviewed)
    assert after[reviewed].fingerprint(reviewed) != before[reviewed].fingerprint(reviewed)
    assert after[running] == before[running]
    assert store.reads.watched_runs([]) == {}


def test_a_status_read_tells_an_absent_run_from_a_store_without_its_control_row(
    store: Store,
) -> None:
    """The status read is one statement (the run beside the control row): an absent run reads
    None, and a store whose control row is gone is refused as one this version does not read,
    whether or not the run is there."""
    run = admit(store, "k1")
    assert store.reads.get_run_status(uuid.uuid4()) is None
    found = store.reads.get_run_status(run.run_id)
    assert found is not None and found.run.run_id == run.run_id
    with _control_row_gone(store):
        for run_id in (run.run_id, uuid.uuid4()):
            with pytest.raises(CoordinatorError) as refused:
                store.reads.get_run_status(run_id)
            assert refused.value.code == "coordinator.deployment.schema-mismatch"


def test_a_page_is_read_beside_the_control_row(store: Store) -> None:
    """A list page is one statement too: an empty page reads as one, and a store whose control
    row is gone is refused, whether or not it has runs."""
    assert store.reads.list_runs(owner=None).runs == ()
    admit(store, "k1")
    assert len(store.reads.list_runs(owner=None).runs) == 1
    with _control_row_gone(store):
        for workflow in (None, "absent"):
            with pytest.raises(CoordinatorError) as refused:
                store.reads.list_runs(owner=None, workflow=workflow)
            assert refused.value.code == "coordinator.deployment.schema-mismatch"


@contextmanager
def _control_row_gone(store: Store) -> Iterator[None]:
    """The store without its control row meanwhile (put back after: the PostgreSQL
    namespace is the session's)."""
    with store.transactor.engine.begin() as conn:
        row = dict(conn.execute(select(CONTROL)).mappings().one())
        conn.execute(delete(CONTROL))
    try:
        yield
    finally:
        with store.transactor.engine.begin() as conn:
            conn.execute(insert(CONTROL).values(row))
