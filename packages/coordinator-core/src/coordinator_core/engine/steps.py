"""Entering steps (07 §5.1), admission, and the claim and work of each step kind (07 §7.2–§7.4)."""

from __future__ import annotations

import json
from typing import Any

from coordinator_core.definition.ir import (
    MISSING,
    CallStep,
    ChooseStep,
    Definition,
    EngineInvariantError,
    FinishStep,
    WaitForStep,
    WaitUntilStep,
)
from coordinator_core.engine.commands import (
    Claimed,
    Dispatch,
    Finish,
    FreezeCommand,
    FreezePreparation,
    MarkMaySend,
    Observe,
    ObtainCredential,
    Prepare,
    ScheduleDue,
    ScheduleObservation,
)
from coordinator_core.engine.detail import FailureDetail
from coordinator_core.engine.inputs import (
    Admitted,
    PreparationDone,
    ReadyToSend,
    StepDue,
    Work,
    to_canonical,
)
from coordinator_core.engine.instants import Instant, parse_instant
from coordinator_core.engine.keys import Keys
from coordinator_core.engine.state import (
    RunState,
    RunStatusValue,
    StepRecord,
    StepRoute,
)
from coordinator_core.engine.transition import (
    NOT_APPLICABLE,
    PREPARATION_MAX_BYTES,
    Advance,
    Transition,
    cancel_record,
    dead_letter,
    deadline_reached,
    live_status,
    mark_unknown,
    settle,
    unchanged,
)
from coordinator_core.evolve import evolve
from coordinator_core.functions.errors import FunctionError

# -- entering steps (07 §5.1) ---------------------------------------------------------------


def _completion_reference(tx: Transition, spec: WaitForStep) -> Any:
    """The value at the completion's reference pointer in the waited call's output, or None."""
    value: Any = tx.output_value(spec.call)
    if value is MISSING:
        return None
    for raw_token in spec.completion.reference.split("/")[1:]:
        token = raw_token.replace("~1", "/").replace("~0", "~")
        if isinstance(value, dict) and token in value:
            value = value[token]
        elif isinstance(value, list) and token.isdigit() and int(token) < len(value):
            value = value[int(token)]
        else:
            return None
    return value


def enter(tx: Transition, target: str) -> None:
    """Leave the current step for `target`: create its record `pending` (07 §5.1)."""
    if target in tx.index:
        # Guarantee 2: the graph is acyclic (G2), so no route can lead back to a step.
        raise EngineInvariantError(f"Step {target} would be entered twice.")
    spec = tx.definition.step(target)
    tx.set(current_step=target)
    now = tx.now
    if isinstance(spec, WaitForStep):
        waited = tx.definition.step(spec.call)
        assert isinstance(waited, CallStep)
        interval = max(
            tx.run.policy.observation_floor_seconds, spec.completion.default_interval_seconds
        )
        timeout_at = now + spec.timeout_seconds * 1000
        reference = _completion_reference(tx, spec)
        completion_ref = None
        if reference is not None:
            text = reference if isinstance(reference, str) else to_canonical(reference)
            completion_ref = tx.keys.completion_ref(waited.alias.connection, text)
        due = min(now + interval * 1000, timeout_at)
        record = tx.put(
            StepRecord(
                step=target,
                type="wait-for",
                state="pending",
                entered_at=now,
                due_at=due,
                wait_started_at=now,
                timeout_at=timeout_at,
                interval_seconds=interval,
                completion_ref=completion_ref,
            )
        )
        if tx.run.cancel_mode != "none":
            cancel_wait_for(tx, record)
        else:
            tx.emit(ScheduleObservation(target, due))
        return
    record = StepRecord(
        step=target,
        type=spec.type,
        state="pending",
        entered_at=now,
        due_at=now,
        pure=isinstance(spec, ChooseStep | FinishStep),
    )
    if isinstance(spec, CallStep):
        record = evolve(
            record, operation=spec.alias.operation.id, effect=spec.alias.operation.effect
        )
    record = tx.put(record)
    if tx.run.cancel_mode == "stopping":
        cancel_record(tx, record)
    else:
        tx.emit(ScheduleDue(target, now))


def cancel_wait_for(tx: Transition, record: StepRecord) -> None:
    """A `wait-for` under cancel: take `onCancel` at once, or the run is `cancelled`."""
    spec = tx.definition.step(record.step)
    assert isinstance(spec, WaitForStep)
    if spec.on_cancel is None:
        cancel_record(tx, record)
        return
    tx.update(
        record,
        state="delivered",
        route=StepRoute("cancel"),
        finished_at=tx.now,
        due_at=None,
        awaiting=None,
    )
    tx.set(cancel_mode="on-cancel-path", status="cancel-requested")
    enter(tx, spec.on_cancel)


def resolve_pending_under_cancel(tx: Transition, record: StepRecord) -> None:
    """The cancel rule (07 §5, §8): a pending record of a stopping run is resolved at once,
    except an `uncertain` call re-armed by `retry-same`, whose resend may settle its effect."""
    if record.type == "wait-for":
        cancel_wait_for(tx, record)
    elif record.type == "call" and record.uncertain:
        tx.set(status=live_status(tx))
        assert record.due_at is not None
        tx.emit(ScheduleDue(record.step, record.due_at))
    else:
        cancel_record(tx, record)


def leave_pending(tx: Transition, record: StepRecord, due: Instant, **changes: Any) -> None:
    """Return a record to `pending` (T7, T16, T19, T24, T29), applying the cancel rule."""
    record = tx.update(
        record,
        state="pending",
        due_at=due,
        awaiting=None,
        **changes,
    )
    if tx.run.cancel_mode == "stopping":
        resolve_pending_under_cancel(tx, record)
    elif record.type == "wait-for":
        tx.emit(ScheduleObservation(record.step, due))
    else:
        tx.emit(ScheduleDue(record.step, due))


# -- admission ----------------------------------------------------------------------------


def admit(definition: Definition, event: Admitted, now: Instant, keys: Keys) -> Advance:
    """T1: the run is `running` at the start step, whose record is due now."""
    state = RunState(
        status="running",
        current_step=definition.start,
        admitted_at=now,
        deadline_at=now + definition.deadline_ms,
        input=event.input,
        policy=event.policy,
    )
    tx = Transition(definition, state, now, keys)
    enter(tx, definition.start)
    return tx.done()


# -- claims and step work (07 §7.2–§7.4) ----------------------------------------------------


def _claimable(state: RunState, record: StepRecord, now: Instant) -> bool:
    if record.state != "pending" or record.due_at is None or record.due_at > now:
        return False
    if state.restore_review or state.status not in ("running", "cancel-requested"):
        return False
    return state.cancel_mode != "stopping" or (record.type == "call" and record.uncertain)


def on_step_due(tx: Transition, event: StepDue) -> Advance:
    state = tx.run
    if event.step != state.current_step:
        return unchanged(state, NOT_APPLICABLE)
    record = tx.get(event.step)
    if not _claimable(state, record, tx.now):
        return unchanged(state, NOT_APPLICABLE)
    if not record.pure and tx.now >= state.deadline_at:
        deadline_reached(tx, record)  # claim step 5: T26 instead of leasing (T27 if uncertain)
        return tx.done()
    record = tx.update(  # T2
        record,
        state="leased",
        attempt=record.attempt + 1,
        claims=record.claims + 1,
        attempt_started_at=tx.now,
        due_at=None,
        dispatched=False,
        awaiting="work",
    )
    tx.emit(Claimed(record.step, record.generation, record.attempt))
    return tx.done()


def on_work(tx: Transition, event: Work) -> Advance:
    """The work of a claimed record: the `step-invalid` check, then the step by its type."""
    if event.step != tx.run.current_step:
        return unchanged(tx.run, NOT_APPLICABLE)
    record = tx.get(event.step)
    if record.state != "leased" or record.awaiting != "work":
        return unchanged(tx.run, NOT_APPLICABLE)
    record = tx.update(record, awaiting=None)
    spec = tx.definition.steps.get(record.step)
    if spec is None or spec.type != record.type:
        # T36: the record does not fit the snapshot; an uncertain record keeps its code.
        if record.uncertain:
            mark_unknown(tx, record, None)
        else:
            dead_letter(tx, record, "step-invalid")
        return tx.done()
    if isinstance(spec, CallStep):
        _call_attempt(tx, record, spec)
    elif isinstance(spec, ChooseStep):
        _choose(tx, record, spec)
    elif isinstance(spec, FinishStep):
        _finish(tx, record, spec)
    elif isinstance(spec, WaitUntilStep):
        _wait_until(tx, record, spec)
    else:
        _wait_for_claim(tx, record, spec)
    return tx.done()


def _evaluate(tx: Transition, spec_mapping: Any) -> Any:
    return tx.definition.evaluate(spec_mapping, tx)


def _choose(tx: Transition, record: StepRecord, spec: ChooseStep) -> None:
    try:
        label = _evaluate(tx, spec.choose)
    except FunctionError as error:
        dead_letter(
            tx, record, "mapping-invalid", detail=FailureDetail.of_call(error).text()
        )  # T13
        return
    if not isinstance(label, str) or label not in spec.cases:
        branch = FailureDetail.of_branch(label, tuple(spec.cases))
        dead_letter(tx, record, "choice-invalid", detail=branch.text())  # T13
        return
    tx.update(  # T12
        record, state="delivered", route=StepRoute("case", label), finished_at=tx.now, awaiting=None
    )
    tx.set(status=live_status(tx))
    enter(tx, spec.cases[label])


def _finish(tx: Transition, record: StepRecord, spec: FinishStep) -> None:
    if spec.output is None:
        output: Any = None
    else:
        try:
            output = _evaluate(tx, spec.output)
        except FunctionError as error:
            dead_letter(
                tx, record, "mapping-invalid", detail=FailureDetail.of_call(error).text()
            )  # T15
            return
    text = to_canonical(output)
    if not tx.definition.outcome_valid(spec.outcome, json.loads(text)):
        dead_letter(tx, record, "outcome-invalid", detail="coordinator.mapping.outcome")  # T15
        return
    tx.update(record, state="delivered", finished_at=tx.now, awaiting=None)  # T14
    status: RunStatusValue = "cancelled" if tx.run.cancel_mode == "on-cancel-path" else "finished"
    settle(tx, status, None, outcome=spec.outcome, output=text)
    tx.emit(Finish("cancelled" if status == "cancelled" else "finished", spec.outcome, text))


def _wait_until(tx: Transition, record: StepRecord, spec: WaitUntilStep) -> None:
    if record.wait_until is not None:
        # A later claim: the instant has come (T18); the deadline case was decided at claim.
        tx.update(
            record, state="delivered", route=StepRoute("next"), finished_at=tx.now, awaiting=None
        )
        tx.set(status=live_status(tx))
        enter(tx, spec.next)
        return
    try:
        value = _evaluate(tx, spec.wait_until)
    except FunctionError as error:
        dead_letter(
            tx, record, "mapping-invalid", detail=FailureDetail.of_call(error).text()
        )  # T17
        return
    instant = parse_instant(value)
    if instant is None:
        dead_letter(tx, record, "mapping-invalid", detail="coordinator.mapping.timestamp")  # T17
        return
    due = min(max(instant, record.entered_at), tx.run.deadline_at)  # T16
    leave_pending(tx, record, due, wait_until=instant, attempt=0)


def _wait_for_claim(tx: Transition, record: StepRecord, spec: WaitForStep) -> None:
    assert record.timeout_at is not None
    if tx.now >= record.timeout_at:  # 07 §7.3 step 2: no read at the timeout instant
        if spec.on_timeout is not None:  # T21
            tx.update(
                record,
                state="delivered",
                route=StepRoute("timeout"),
                finished_at=tx.now,
                awaiting=None,
            )
            tx.set(status=live_status(tx))
            enter(tx, spec.on_timeout)
        else:  # T22
            dead_letter(tx, record, "wait-timed-out")
        return
    waited = tx.definition.step(spec.call)
    assert isinstance(waited, CallStep)
    reference = _completion_reference(tx, spec)
    tx.update(record, awaiting="observation")
    tx.emit(
        Observe(
            record.step,
            spec.completion.observe,
            waited.alias.connection,
            None if reference is None else to_canonical(reference),
        )
    )


def _call_attempt(tx: Transition, record: StepRecord, spec: CallStep) -> None:
    """07 §7.4 steps 1–5, up to the credential the shell obtains before the pre-send fence."""
    operation = spec.alias.operation
    if record.uncertain and operation.recovery == "hold-after-dispatch":
        mark_unknown(
            tx, record, "evaluation-uncertain"
        )  # step 1: never send an uncertain evaluation
        return
    if record.command is None:  # step 2: evaluate once and freeze
        try:
            request = _evaluate(tx, spec.input)
        except FunctionError as error:
            dead_letter(tx, record, "mapping-invalid", detail=FailureDetail.of_call(error).text())
            return
        if not isinstance(request, dict):
            dead_letter(tx, record, "mapping-invalid", detail="coordinator.mapping.call-shape")
            return
        command: dict[str, Any] = {
            "alias": spec.alias.name,
            "operation": operation.id,
            "connection": spec.alias.connection,
            "input": request,
        }
        if operation.key_required:
            command["idempotencyKey"] = tx.keys.command_key(record.step)
        text = to_canonical(command)
        record = tx.update(record, command=text, command_prepared=True)
        tx.emit(FreezeCommand(record.step, text))
    assert record.command is not None
    if operation.requires_preparation and record.preparation is None:  # step 3
        tx.update(record, awaiting="preparation")
        tx.emit(Prepare(record.step, operation.id, spec.alias.connection, record.command))
        return
    _before_credential(tx, record, spec)


def _before_credential(tx: Transition, record: StepRecord, spec: CallStep) -> None:
    """Step 4 (the frozen command still names this step's operation and connection) and
    step 5 (ask the shell for a fresh credential)."""
    assert record.command is not None
    frozen = json.loads(record.command)
    if (
        frozen.get("operation") != spec.alias.operation.id
        or frozen.get("connection") != spec.alias.connection
    ):
        if record.uncertain:
            mark_unknown(tx, record, None)
        else:
            dead_letter(tx, record, "protected-state-invalid")
        return
    tx.update(record, awaiting="credential")
    tx.emit(ObtainCredential(record.step, spec.alias.connection))


def _leased_call(tx: Transition, step: str, awaiting: str) -> tuple[StepRecord, CallStep] | None:
    if step != tx.run.current_step:
        return None
    record = tx.get(step)
    spec = tx.definition.steps.get(step)
    if record.state != "leased" or record.awaiting != awaiting or not isinstance(spec, CallStep):
        return None
    return record, spec


def on_preparation_done(tx: Transition, event: PreparationDone) -> Advance:
    found = _leased_call(tx, event.step, "preparation")
    if found is None:
        return unchanged(tx.run, NOT_APPLICABLE)
    record, spec = found
    if len(event.preparation) > PREPARATION_MAX_BYTES:
        dead_letter(tx, record, "preparation-too-large", stopping_cancels=True)
        return tx.done()
    record = tx.update(record, preparation=event.preparation)
    tx.emit(FreezePreparation(record.step, event.preparation))
    _before_credential(tx, record, spec)
    return tx.done()


def on_ready_to_send(tx: Transition, event: ReadyToSend) -> Advance:
    """The pre-send fence (07 §7.2): refuse to send, or mark and dispatch."""
    found = _leased_call(tx, event.step, "credential")
    if found is None:
        return unchanged(tx.run, NOT_APPLICABLE)
    record, spec = found
    if tx.run.restore_review:
        return unchanged(tx.run, "restore-review")
    if tx.run.cancel_mode == "stopping" and not record.uncertain:
        cancel_record(tx, record)  # not sent now: effect not-sent, or refused if sent before
        return tx.done()
    if tx.now >= tx.run.deadline_at:
        deadline_reached(tx, record)
        return tx.done()
    command = record.command
    assert command is not None
    if record.dispatch_risk:
        record = tx.update(record, dispatched=True, sent=True, awaiting="answer")
        tx.emit(MarkMaySend(record.step, record.generation, record.attempt))
    else:
        record = tx.update(record, awaiting="answer")
    key = json.loads(command).get("idempotencyKey")
    tx.emit(
        Dispatch(
            record.step,
            spec.alias.operation.id,
            spec.alias.connection,
            command,
            key,
            record.preparation,
            record.generation,
            record.attempt,
        )
    )
    return tx.done()
