"""The store-backed `RunService` (06 §5): admission and its replays, ownership, status and
inspection shapes, lists, a step's attempts, doctor and holds."""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from integration_support import (
    CALLER,
    OTHER_CALLER,
    SUBMIT,
    WORKFLOW,
    Deployed,
    Products,
    deploy,
    run_input,
)
from sqlalchemy import update

from coordinator_core import outputs
from coordinator_core.definition.ir import CallStep
from coordinator_core.shell.package_files import LoadedPackage
from coordinator_core.shell.service import RunQuery, ServiceRefusal, views
from coordinator_core.shell.store.schema import RUNS


def test_a_replayed_admission_answers_the_same_run_without_a_second(deployed: Deployed) -> None:
    first = deployed.admit(run_input(), key="key-1")
    again = deployed.admit(run_input(), key="key-1")
    assert (first.created, again.created) == (True, False)
    assert again.run.run_id == first.run.run_id
    page = deployed.service.list_runs(CALLER, RunQuery())
    assert [run.run_id for run in page.runs] == [first.run.run_id]


def test_a_reused_key_with_another_input_is_refused(sqlite_deployed: Deployed) -> None:
    deployed = sqlite_deployed
    deployed.admit(run_input(), key="key-2")
    with pytest.raises(ServiceRefusal) as refused:
        deployed.admit(run_input(send_after="2021-01-01T00:00:00Z"), key="key-2")
    assert refused.value.code == "idempotency.key-reused"


def test_another_revision_is_refused_and_a_bad_input_reported(sqlite_deployed: Deployed) -> None:
    deployed = sqlite_deployed
    with pytest.raises(ServiceRefusal) as refused:
        deployed.admit(run_input(), revision="sha256:" + "9" * 64)
    assert refused.value.code == "admission.revision-mismatch"
    with pytest.raises(ServiceRefusal) as invalid:
        deployed.admit({"applicationId": "not-a-uuid"})
    assert invalid.value.code == "coordinator.definition.input"


def test_a_refused_input_names_where_it_fails_and_never_a_value(
    sqlite_deployed: Deployed,
) -> None:
    canary = "canary-value-0d1f"
    with pytest.raises(ServiceRefusal) as invalid:
        sqlite_deployed.admit({"applicationId": canary, "workflowId": canary})
    assert invalid.value.code == "coordinator.definition.input"
    assert [v.to_json() for v in invalid.value.violations] == [
        {"path": "", "keyword": "additionalProperties", "members": ["workflowId"]},
        {"path": "", "keyword": "required", "members": ["sendAfter"]},
        {"path": "/applicationId", "keyword": "format"},
    ]


def test_someone_elses_run_is_absent(sqlite_deployed: Deployed) -> None:
    deployed = sqlite_deployed
    admitted = deployed.admit(run_input())
    run_id = admitted.run.run_id
    assert deployed.status(run_id, OTHER_CALLER) is None
    assert deployed.inspect(run_id, OTHER_CALLER) is None
    with pytest.raises(ServiceRefusal) as refused:
        deployed.service.cancel(OTHER_CALLER, run_id, "case-1")
    assert refused.value.code == "coordinator.command.run-absent"
    page = deployed.service.list_runs(OTHER_CALLER, RunQuery())
    assert list(page.runs) == []
    operator = replace(OTHER_CALLER, operator=True)
    assert deployed.status(run_id, operator) is not None
    outsider = replace(CALLER, workflows=frozenset({"another"}))
    assert deployed.status(run_id, outsider) is None


def test_status_and_inspection_never_show_the_input(sqlite_deployed: Deployed) -> None:
    deployed = sqlite_deployed
    admitted = deployed.admit(run_input())
    status = admitted.run
    assert (status.run.workflow_id, status.run.workflow_version, status.run.origin) == (
        WORKFLOW,
        "1",
        "api",
    )
    assert (status.run.state.current_step, status.run.revision) == (
        "due",
        deployed.package.snapshot.revision,
    )
    assert status.next_due_at == status.run.state.admitted_at
    assert status.run.binding_digest.startswith("sha256:")
    assert (status.run.state.deadline_at - status.run.state.admitted_at) / 1000 == 2_592_000
    inspection = deployed.inspect(status.run_id)
    assert inspection is not None
    assert "a8d12546" not in repr(inspection)
    assert inspection.recovery.retry_blocked_by == "terminal"
    assert inspection.recovery.reconcile_blocked_by == "not-uncertain"


def test_a_settled_run_s_recovery_is_read_without_opening_its_sealed_payloads(
    sqlite_deployed: Deployed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """07 §9.1 checks `cancelled` and `terminal` first, §9.2 an uncertain `unknown` call: no
    payload takes part. The inspection of a finished run answers them without opening its
    input, commands and outputs — and so answers `terminal` even when a payload no longer
    opens (a later condition's reason must not come first)."""
    deployed = sqlite_deployed
    run_id = deployed.admit(run_input()).run.run_id
    status, _ = deployed.drive(run_id)
    assert status.run.state.status == "finished"
    opened: list[object] = []
    real = views.state_of
    monkeypatch.setattr(views, "state_of", lambda *args: opened.append(args) or real(*args))
    with deployed.store.transactor.engine.begin() as conn:
        conn.execute(update(RUNS).where(RUNS.c.run_id == run_id).values(input=b"{}"))
    inspection = deployed.inspect(run_id)
    assert inspection is not None
    assert inspection.recovery.retry_blocked_by == "terminal" and opened == []
    assert inspection.recovery.reconcile_blocked_by == "not-uncertain"
    # Each record's one attempt was recorded, the two a finish ends in one statement among them.
    assert [(step.record.step, step.attempt_count) for step in inspection.steps] == [
        (step.record.step, 1) for step in inspection.steps
    ]
    assert len(inspection.steps) >= 4


def test_the_run_list_pages_newest_first_with_a_verified_cursor(sqlite_deployed: Deployed) -> None:
    deployed = sqlite_deployed
    admitted = [deployed.admit(run_input()).run.run_id for _ in range(5)]
    seen: list[uuid.UUID] = []
    cursor = None
    while True:
        page = deployed.service.list_runs(CALLER, RunQuery(limit=2, cursor=cursor))
        seen.extend(run.run_id for run in page.runs)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert sorted(seen) == sorted(admitted) and len(seen) == 5
    assert seen[0] == admitted[-1]
    first = deployed.service.list_runs(CALLER, RunQuery(limit=2))
    assert first.next_cursor is not None
    # The last MAC character changed (to one it is not), and a cursor of another shape.
    last = first.next_cursor[-1]
    tampered = first.next_cursor[:-1] + ("1" if last == "0" else "0")
    for forged in (tampered, "x." + "0" * 32):
        with pytest.raises(ServiceRefusal) as refused:
            deployed.service.list_runs(CALLER, RunQuery(limit=2, cursor=forged))
        assert refused.value.code == "coordinator.request.cursor-invalid"
    with pytest.raises(ServiceRefusal):
        deployed.service.list_runs(
            CALLER, RunQuery(limit=2, cursor=first.next_cursor, status="finished")
        )


def test_doctor_ready_and_the_restore_hold(sqlite_deployed: Deployed) -> None:
    deployed = sqlite_deployed
    service = deployed.service
    admitted = deployed.admit(run_input())
    assert service.ready() is None
    doctor = service.doctor()
    assert doctor.activation_ready
    assert doctor.state.statuses["running"] == 1 and len(doctor.state.statuses) == 8
    assert doctor.state.audit_head == deployed.audit.head
    held = service.restore_hold("case-2")
    assert (held.restore_hold, held.admissions_hold, held.restore_review) == (True, True, 1)
    assert service.ready() == "coordinator.command.restore-hold"
    status = deployed.status(admitted.run.run_id)
    assert status is not None and (status.status, status.run.state.restore_review) == (
        "attention",
        True,
    )
    assert not deployed.worker().tick()
    with pytest.raises(ServiceRefusal) as refused:
        deployed.admit(run_input())
    assert refused.value.code == "coordinator.command.restore-admissions-held"
    released = service.release_restore_hold("evidence-1")
    assert (released.restore_hold, released.admissions_hold) == (False, True)
    retried = service.retry_same(CALLER, admitted.run.run_id, "case-3")
    assert (retried.status, retried.run.state.restore_review) == ("running", False)
    status, _ = deployed.drive(admitted.run.run_id)
    assert status.status == "finished"


def test_the_live_binding_check_restores_a_definition_it_does_not_hold_from_a_run(
    sqlite_deployed: Deployed,
) -> None:
    """One live-binding check, one way to open a snapshot: a process that does not hold a
    run's definition restores it from the run's sealed snapshot through its DefinitionCache."""
    from coordinator_core.shell.execution.codec import DefinitionCache
    from coordinator_core.shell.service.bindings import UNBOUND, LiveBindings

    deployed = sqlite_deployed
    admitted = deployed.admit(run_input())
    digest = admitted.run.run.definition_digest
    definitions = DefinitionCache(deployed.runtime.sealer, deployed.store.reads.definition_snapshot)
    bindings = LiveBindings(deployed.deployment, definitions, deployed.store)
    assert definitions.known(digest) is None
    assert bindings.unsettled_match(deployed.runtime.now())
    assert definitions.known(digest) is not None  # restored once, kept for the process
    recorded = admitted.run.run.binding_digest
    assert recorded != UNBOUND
    assert not bindings.all_match(frozenset({("sha256:" + "0" * 64, recorded)}))
    assert not bindings.all_match(frozenset({(digest, "sha256:" + "1" * 64)}))


def test_a_steps_attempts_are_paged_newest_first_with_a_cursor_bound_to_run_step_and_caller(
    deployed: Deployed,
) -> None:
    deployed.products.inject("messaging", operation=SUBMIT, kind="fail", status=503)
    admitted = deployed.admit(run_input())
    run_id = admitted.run.run_id
    status, _ = deployed.drive(run_id)
    assert status.status == "finished", status
    inspection = deployed.inspect(run_id)
    assert inspection is not None
    notify = next(step for step in inspection.steps if step.record.step == "notify")
    assert notify.attempt_count == 2
    assert [(a.generation, a.attempt, a.outcome) for a in notify.attempts] == [
        (1, 2, "delivered"),
        (1, 1, "retry"),
    ]
    retried, delivered = notify.attempts[1], notify.attempts[0]
    assert retried.failure_code is not None and delivered.failure_code is None
    assert retried.started_at is not None and retried.started_at <= retried.ended_at
    assert retried.ended_at <= (delivered.started_at or 0) <= delivered.ended_at

    service = deployed.service
    first = service.step_attempts(CALLER, run_id, "notify", None, 1)
    assert first is not None and first.next_cursor is not None
    assert [a.attempt for a in first.attempts] == [2]
    second = service.step_attempts(CALLER, run_id, "notify", first.next_cursor, 1)
    assert second is not None
    assert ([a.attempt for a in second.attempts], second.next_cursor) == ([1], None)
    whole = service.step_attempts(CALLER, run_id, "notify", None, 100)
    assert whole is not None and list(whole.attempts) == list(notify.attempts)

    # The cursor verifies only for its run, its step and its caller.
    operator = replace(OTHER_CALLER, operator=True)
    for caller, step in ((CALLER, "permission"), (operator, "notify")):
        with pytest.raises(ServiceRefusal) as refused:
            service.step_attempts(caller, run_id, step, first.next_cursor, 1)
        assert refused.value.code == "coordinator.request.cursor-invalid"
    for forged in ("x", first.next_cursor + "0", "." + first.next_cursor.partition(".")[2]):
        with pytest.raises(ServiceRefusal) as refused:
            service.step_attempts(CALLER, run_id, "notify", forged, 1)
        assert refused.value.code == "coordinator.request.cursor-invalid"
    # Another owner sees no run; a step the definition lacks is absent; an operator sees it.
    assert service.step_attempts(OTHER_CALLER, run_id, "notify", None, 10) is None
    assert service.step_attempts(CALLER, uuid.uuid4(), "notify", None, 10) is None
    for unknown in ("no-such-step", "Not A Step"):
        with pytest.raises(ServiceRefusal) as absent:
            service.step_attempts(CALLER, run_id, unknown, None, 10)
        assert absent.value.code == "coordinator.command.step-absent"
    seen = service.step_attempts(operator, run_id, "notify", None, 10)
    assert seen is not None and len(seen.attempts) == 2


def test_a_runtime_compiles_the_schemas_its_runs_need_when_it_is_built(
    products: Products, package: LoadedPackage, tmp_path: Path
) -> None:
    """The workflow's schemas and the outputs of the operations it calls are compiled at the
    service's start, not by its first admission and its first answers."""
    outputs._validator.cache_clear()
    package.definition._validators.clear()
    deployed = deploy(products, package, tmp_path)
    try:
        definition = package.definition
        assert set(definition._validators) == set(definition._schemas)
        called = {
            spec.alias.operation.output
            for spec in definition.steps.values()
            if isinstance(spec, CallStep)
        }
        assert called
        compiled = outputs._validator.cache_info().currsize
        assert compiled >= len(called)
        for operation in called:
            outputs._validator(operation)
        assert outputs._validator.cache_info().currsize == compiled, "none compiled later"
    finally:
        deployed.store.close()
        deployed.audit.close()
