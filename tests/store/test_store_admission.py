"""Admission (07 §6.1; 06 §5.1 step 10): one transaction, idempotent by start identity."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest
from sqlalchemy import select
from store_support import (
    BINDING,
    DEFINITION,
    REVISION,
    SECOND,
    T0,
    Backend,
    admission,
    admit,
    changed,
    claim,
    frontend_messages,
)

from coordinator_core.errors import CoordinatorError, Diagnostic
from coordinator_core.shell.store import ActivationRequest, Store, StoreInvariantError
from coordinator_core.shell.store.schema import STEPS


def _refusal(store: Store, *args: object, **options: object) -> str:
    with pytest.raises(CoordinatorError) as refused:
        store.writes.admit(admission(*args, **options), T0)  # type: ignore[arg-type]
    return refused.value.code


def test_admission_inserts_the_run_and_its_due_start_record(store: Store) -> None:
    request = admission("k1")
    result = store.writes.admit(request, T0)
    assert result.created
    snapshot = store.reads.get_run_snapshot(request.run.run_id)
    assert snapshot is not None
    run = snapshot.run
    state = run.state
    assert (state.status, state.cancel_mode, state.current_step) == ("running", "none", "start")
    assert (state.admitted_at, state.deadline_at) == (T0, T0 + 3600 * SECOND)
    # the snapshot is stored once for its definition digest, not in the run (schema v2)
    assert (run.snapshot, run.input) == (None, b"sealed-input")
    assert store.reads.definition_snapshot(run.definition_digest) == (
        run.run_id,
        b"sealed-snapshot",
    )
    assert (run.definition_digest, run.binding_digest, run.revision) == (
        DEFINITION,
        BINDING,
        REVISION,
    )
    assert [(r.step, r.state, r.due_at, r.generation, r.attempt) for r in snapshot.records] == [
        ("start", "pending", T0, 1, 0)
    ]
    assert result.run == run


def test_same_start_identity_and_input_answers_the_existing_run(store: Store) -> None:
    first = store.writes.admit(admission("k1"), T0)
    replaying = admission("k1", T0 + SECOND)
    again = store.writes.admit(replaying, T0 + SECOND)
    assert not again.created
    assert again.run.run_id == first.run.run_id
    assert len(store.reads.list_runs(owner=None).runs) == 1
    # the records sent with the replaying run's row went nowhere (no row of theirs was there)
    with store.transactor.engine.connect() as conn:
        owners = conn.execute(select(STEPS.c.run_id)).scalars().all()
    assert owners == [first.run.run_id]


def test_a_run_admitted_with_several_records_has_each_and_a_replay_adds_none(
    store: Store,
) -> None:
    """An admission that carried its run through pure steps inserts every record it wrote
    (one statement of as many rows); the same admission again inserts none."""
    request = admission("k1")
    (first,) = request.steps
    records = (first, changed(first, step="later", due_at=T0 + SECOND))
    several = replace(request, steps=records)
    assert store.writes.admit(several, T0).created
    assert not store.writes.admit(several, T0).created
    snapshot = store.reads.get_run_snapshot(request.run.run_id)
    assert snapshot is not None
    assert sorted(record.step for record in snapshot.records) == ["later", "start"]


def test_an_admission_sends_its_run_and_records_in_one_round_trip_before_its_commit(
    store: Store,
) -> None:
    """PostgreSQL, libpq's protocol trace: once the binding and the definition are stored, an
    admission is one pipeline (the BEGIN, the lock, the live pairs, the run's row, its records
    and the NOTIFY: one Sync) and its COMMIT."""
    if store.transactor.location.kind != "postgresql":
        pytest.skip("SQLite runs each statement as it comes (no round trips)")
    admit(store, "k1")  # the binding and the definition stored, the statements prepared
    created: list[bool] = []
    frontend = frontend_messages(
        # the service sends no snapshot once its definition's is stored
        store,
        lambda: created.append(store.writes.admit(admission("k2", snapshot=None), T0).created),
    )
    assert created == [True]
    assert frontend.count("Sync") == 1, frontend
    assert frontend[frontend.index("Sync") + 1 :] == ["Query"], frontend  # the COMMIT


def test_same_start_identity_with_other_input_is_key_reused(store: Store) -> None:
    admit(store, "k1")
    assert _refusal(store, "k1", input_digest="f" * 64) == "idempotency.key-reused"


def test_replay_is_answered_even_after_the_revision_changed(store: Store) -> None:
    admit(store, "k1")
    # the replay check comes before the revision check (06 §5.1 step 10.4–10.5)
    assert not store.writes.admit(
        admission("k1", expected_revision="sha256:" + "9" * 64), T0
    ).created
    assert (
        _refusal(store, "k2", expected_revision="sha256:" + "9" * 64)
        == "admission.revision-mismatch"
    )


def test_holds_refuse_admissions_in_order(store: Store) -> None:
    admit(store, "k0")
    store.operator.set_restore_hold(T0, lambda _snapshot: None)
    assert _refusal(store, "k1") == "coordinator.command.restore-admissions-held"
    # the holds come before the replay of an existing start identity (whose row the
    # admission's first round trip finds)
    assert _refusal(store, "k0") == "coordinator.command.restore-admissions-held"
    store.operator.release_restore_hold("evidence")
    assert _refusal(store, "k1") == "coordinator.command.restore-admissions-held"
    store.operator.release_admission_hold(
        "recovery", admission_history_complete=True, prior_deployment_fenced=True
    )
    assert store.writes.admit(admission("k1"), T0).created


def test_input_problem_and_live_binding_conflict_are_refused_after_the_replay_check(
    store: Store,
) -> None:
    problem = CoordinatorError(Diagnostic(code="coordinator.definition.input"))
    assert _refusal(store, "k1", input_problem=problem) == "coordinator.definition.input"
    admit(store, "k2")
    seen: list[frozenset[tuple[str, str]]] = []

    def conflict(pairs: frozenset[tuple[str, str]]) -> bool:
        seen.append(pairs)
        return False

    assert (
        _refusal(store, "k3", bindings_ok=conflict) == "coordinator.command.live-binding-conflict"
    )
    # the pairs recorded at admission, then (as they conflict) the exact pairs of the runs
    # that are not settled, before refusing
    assert seen == [frozenset({(DEFINITION, BINDING)})] * 2
    assert not store.writes.admit(admission("k2", bindings_ok=conflict), T0).created  # replay first
    # a refusal rolls back the run's row, inserted with the admission lock's read: the same keys
    # admit a run afterwards
    assert store.writes.admit(admission("k1"), T0).created
    assert store.writes.admit(admission("k3"), T0).created


def test_admission_is_refused_when_another_package_is_active(
    migrated: Backend, store: Store
) -> None:
    migrated.apply(ActivationRequest("sha256:" + "8" * 64, "wf", REVISION, DEFINITION))
    assert _refusal(store, "k1") == "coordinator.command.activation-changed"
    assert claim(store) is None  # the worker claims nothing either


def test_a_start_record_of_another_run_or_leased_for_nobody_is_refused(store: Store) -> None:
    request = admission("k1")
    (first,) = request.steps
    other = replace(request, steps=(replace(first, run_id=admission("x").run.run_id),))
    with pytest.raises(StoreInvariantError):
        store.writes.admit(other, T0)
    leased = replace(request, steps=(changed(first, state="leased"),))
    with pytest.raises(StoreInvariantError):  # nor one leased with no process to hold it
        store.writes.admit(leased, T0)
    assert store.reads.list_runs(owner=None).runs == ()


def test_an_admission_may_lease_its_first_record_to_the_admitting_process(store: Store) -> None:
    """07 §7.7 item 6: the admission leases the record it claimed, for the process that
    admitted it, and answers the claim; the lease lapses like any other."""
    request = admission("k1")
    (first,) = request.steps
    claimed = changed(
        first, state="leased", attempt=1, claims=1, attempt_started_at=T0, due_at=None
    )
    journaled: list[str] = []
    leasing = replace(
        request,
        steps=(claimed,),
        lease_owner="host:1:admission",
        lease_seconds=15,
        journal=lambda: journaled.append("appended"),
    )
    result = store.writes.admit(leasing, T0)
    assert result.created and journaled == ["appended"]
    assert result.claim is not None and result.claim.lease.owner == "host:1:admission"
    assert result.claim.lease.expires_at == T0 + 15 * SECOND
    stored = store.reads.get_run_snapshot(result.run.run_id)
    assert stored is not None and stored.current.lease == result.claim.lease
    assert claim(store, T0 + SECOND) is None  # leased: nobody else claims it
    replay = store.writes.admit(leasing, T0)
    assert not replay.created and replay.claim is None and journaled == ["appended"]


def test_a_start_record_that_is_not_the_runs_current_step_is_refused(store: Store) -> None:
    """The run is admitted at its start record: a run whose current step has no record would
    be one no claim, view or sweep can read."""
    request = admission("k1")
    elsewhere = replace(request, steps=(changed(request.steps[0], step="elsewhere"),))
    with pytest.raises(StoreInvariantError):
        store.writes.admit(elsewhere, T0)
    assert store.reads.list_runs(owner=None).runs == ()


def test_concurrent_admissions_of_one_key_resolve_to_one_run(store: Store) -> None:
    results: list[bool] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(6)

    def admit_once() -> None:
        barrier.wait()
        try:
            results.append(store.writes.admit(admission("same-key"), T0).created)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=admit_once) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(results) == [False] * 5 + [True]
    assert len(store.reads.list_runs(owner=None).runs) == 1
