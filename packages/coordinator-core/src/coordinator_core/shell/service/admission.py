"""Admission (06 §5.1, 07 §6.1): a new run's first state from `engine.advance`, sealed and
handed to the store's one admission transaction, which also runs the live-binding check."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from coordinator_core.engine import Admitted, Instant, advance
from coordinator_core.shell.execution.attempt import TickRun
from coordinator_core.shell.execution.codec import seal_text, sealed_snapshot, stored_step
from coordinator_core.shell.execution.worker import ATTEMPT_BUDGET_SECONDS
from coordinator_core.shell.service.model import AdmissionRequest, RunAdmitted, ServiceRefusal
from coordinator_core.shell.service.runtime import Runtime
from coordinator_core.shell.store import AdmissionResult, NewRun, RunSnapshot, StoredRun, Written

__all__ = ["admit", "insert_run", "store_admission", "taking"]


def store_admission(
    context: Runtime,
    *,
    run_input: Any,
    owner: str,
    start_identity: str,
    input_digest: str,
    origin: str,
    trigger: str | None,
    expected_revision: str | None,
    input_problem: Exception | None,
    now: Instant,
    taking: TickRun | None = None,
) -> NewRun:
    """The store's admission of a run of the served definition (API or event origin). With
    `taking` (the tick an idle loop of this process will work the run in), the run's first
    record is claimed by the admission itself (07 §7.7 item 6): the engine leases and works it
    in memory (freezing a call's request, carrying through pure steps), and the admission
    transaction commits that with the claim's journal entries."""
    snapshot = context.package.snapshot
    definition = context.definition
    sealer = context.sealer
    run_id = uuid.uuid4()
    keys = context.keys_for(start_identity)
    admitted = advance(definition, None, Admitted.of(run_input, context.policy), now, keys)
    state = admitted.state
    input_text = state.input  # the engine's canonical text of `run_input`
    assert input_text is not None
    journal = None
    if taking is not None and input_problem is None:
        claimed = taking.admitted(run_id, definition.definition_digest, state, now, keys)
        if claimed is not None:
            state, journal = claimed
            taking.obtain_ahead(ATTEMPT_BUDGET_SECONDS)
    run = StoredRun(
        run_id=run_id,
        start_identity=start_identity,
        input_digest=input_digest,
        owner=owner,
        origin="event" if origin == "event" else "api",
        trigger=trigger,
        workflow_id=definition.workflow_id,
        workflow_version=str(snapshot.workflow["project"]["version"]),
        revision=definition.revision,
        definition_digest=definition.definition_digest,
        binding_digest=context.binding,
        state=replace(state, input=None, output=None, records=()),
        snapshot=(
            None
            if definition.definition_digest in context.stored_definitions
            else sealed_snapshot(sealer, snapshot, run_id)
        ),
        input=seal_text(sealer, input_text, run_id, "input"),
        terminal_output=(
            None if state.output is None else seal_text(sealer, state.output, run_id, "terminal")
        ),
        updated_at=now,
    )
    return NewRun(
        run=run,
        steps=tuple(
            stored_step(sealer, run_id, record, None, None, now) for record in state.records
        ),
        bindings_ok=context.bindings.all_match,
        expected_revision=expected_revision,
        input_problem=input_problem,
        lease_owner=None if journal is None else context.lease_owner,
        lease_seconds=context.lease_seconds,
        journal=journal,
    )


def insert_run(
    context: Runtime, prepared: NewRun, now: Instant, taking: TickRun | None
) -> AdmissionResult:
    """The store's admission transaction for a prepared run (API or event origin). An idle
    loop of this process (`taking`) takes the new run at once — handed the claim the admission
    took, or rung for its record — so the other processes are told only when none is free
    (07 §7.7 item 4); once created, its definition's snapshot is known stored."""
    result = context.store.writes.admit(prepared, now, announce=taking is None)
    if result.created:  # its definition's snapshot is stored (inserted or already there)
        context.stored_definitions.add(prepared.run.definition_digest)
    if taking is None or not result.created:
        return result
    if result.claim is not None:
        taking.adopt(
            Written(
                RunSnapshot(result.claim.snapshot.control, result.run, result.steps), result.claim
            ),
            now,
        )
        context.wakeup.hand(taking, result.claim)
    elif result.control is not None:
        # The admission's claim left the first record pending, due later (a wait-until not yet
        # due): nothing is handed over, and nobody was told, so its instant is scheduled here
        # (and announced to the other processes when earlier than anything this one knew).
        context.ports.after_write(RunSnapshot(result.control, result.run, result.steps), now)
    return result


def taking(context: Runtime) -> TickRun | None:
    """The tick of an idle loop of this process that takes the run about to be admitted, or
    None when none is free (the run is then announced to the other processes)."""
    if not context.wakeup.take_idle_loop():
        return None
    return TickRun(context.ports)


def admit(context: Runtime, admission: AdmissionRequest) -> RunAdmitted:
    """06 §5.1 steps 8–10: identity, one admission transaction, the new or replayed run."""
    caller = admission.caller
    key, database_id = context.key, context.database_id
    owner = context.owner_of(caller)
    start = key.start_identity(database_id, owner, admission.workflow, admission.idempotency_key)
    digest = key.input_digest_api(start, admission.revision, admission.input)
    problem = (
        None
        if context.definition.input_valid(admission.input)
        else ServiceRefusal(
            "coordinator.definition.input",
            violations=context.definition.input_violations(admission.input),
        )
    )
    now = context.now()
    taken = taking(context)
    prepared = store_admission(
        context,
        run_input=admission.input,
        owner=owner,
        start_identity=start,
        input_digest=digest,
        origin="api",
        trigger=None,
        expected_revision=admission.revision,
        input_problem=problem,
        now=now,
        taking=taken,
    )
    result = insert_run(context, prepared, now, taken)
    if result.created and result.control is not None:  # the run as inserted: no read back
        snapshot = RunSnapshot(result.control, result.run, result.steps)
    else:
        found = context.store.reads.get_run_snapshot(result.run.run_id)
        assert found is not None
        snapshot = found
    return RunAdmitted(context.status(snapshot), result.created)
