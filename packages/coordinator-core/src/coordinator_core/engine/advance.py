"""`advance`: the one implementation of run semantics (file 07 §4–§9).

`advance(definition, state, event, now, keys)` returns the next state and the commands the
caller carries out. It is a pure function: the same definition, state, event, instant and keys
always give the same result. Transition numbers (T1…T36) refer to the table of 07 §5.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any, Final

from coordinator_core.engine.clock import Instant, parse_instant
from coordinator_core.engine.codes import NON_RECOVERABLE_CODES
from coordinator_core.engine.commands import (
    Attention,
    Cancelled,
    Claimed,
    Command,
    Dispatch,
    Fail,
    Finish,
    FreezeCommand,
    FreezePreparation,
    LookupReceipt,
    MarkMaySend,
    Observe,
    ObtainCredential,
    Prepare,
    ScheduleDue,
    ScheduleObservation,
)
from coordinator_core.engine.events import (
    Admitted,
    AttemptRefused,
    CallOutcome,
    CancelRequested,
    CompletionNotified,
    DeadlinePassed,
    Event,
    LeaseLapsed,
    ObservationOutcome,
    PreparationDone,
    ReadyToSend,
    ReceiptAnswer,
    ReconcileRequested,
    RestoreHold,
    RetrySame,
    StepDue,
    Work,
    to_canonical,
)
from coordinator_core.engine.keys import Keys
from coordinator_core.engine.program import (
    CallStep,
    ChooseStep,
    Definition,
    EngineInvariantError,
    FinishStep,
    WaitForStep,
    WaitUntilStep,
)
from coordinator_core.engine.state import (
    TERMINAL_STATUSES,
    RunState,
    RunStatus,
    StepRecord,
    StepRoute,
)
from coordinator_core.evolve import evolve
from coordinator_core.functions.errors import FunctionError

__all__ = [
    "Advance",
    "advance",
    "is_settled",
    "reconcile_blocked_by",
    "retry_blocked_by",
    "unrestorable",
]

PREPARATION_MAX_BYTES: Final = 65_536

# Why an event did not apply to the state it was given (the state is returned unchanged).
NOT_APPLICABLE: Final = "not-applicable"


@dataclass(frozen=True, slots=True)
class Advance:
    """The result of one event: the next state and the commands to carry out, in order.

    `refused` is set (and nothing changed) when the event did not apply: an operator action
    refused with its reason of 07 §9 (`terminal`, `receipt-expired`, `no-receipt`, …) or a
    worker event that no longer matches the state (`not-applicable`, `restore-review`,
    `reconcile-raced`). `answer` is the reconcile answer of 07 §9.2 (`confirmed`,
    `unresolved`, `receipt-expired`, `unavailable`).
    """

    state: RunState
    commands: tuple[Command, ...] = ()
    refused: str | None = None
    answer: str | None = None


class _Tx:
    """The working copy of one transition: the run, its records and the commands so far."""

    __slots__ = ("commands", "definition", "index", "keys", "now", "records", "run")

    def __init__(self, definition: Definition, state: RunState, now: Instant, keys: Keys) -> None:
        self.definition = definition
        self.keys = keys
        self.now = now
        self.run = state
        self.records = list(state.records)
        self.index = {record.step: i for i, record in enumerate(self.records)}
        self.commands: list[Command] = []

    def get(self, step: str) -> StepRecord:
        return self.records[self.index[step]]

    def put(self, record: StepRecord) -> StepRecord:
        position = self.index.get(record.step)
        if position is None:
            self.index[record.step] = len(self.records)
            self.records.append(record)
        else:
            self.records[position] = record
        return record

    def update(self, record: StepRecord, **changes: Any) -> StepRecord:
        return self.put(evolve(record, **changes))

    def set(self, **changes: Any) -> None:
        self.run = evolve(self.run, **changes)

    def emit(self, command: Command) -> None:
        self.commands.append(command)

    def output_of(self, step: str) -> str | None:
        position = self.index.get(step)
        return None if position is None else self.records[position].output

    def done(self, *, answer: str | None = None) -> Advance:
        return Advance(
            evolve(self.run, records=tuple(self.records)), tuple(self.commands), None, answer
        )


def _unchanged(state: RunState, reason: str) -> Advance:
    return Advance(state, (), reason)


# -- run status helpers -------------------------------------------------------------------------


def _live_status(tx: _Tx) -> RunStatus:
    return "cancel-requested" if tx.run.cancel_requested else "running"


def _settle(
    tx: _Tx,
    status: RunStatus,
    failure_code: str | None,
    *,
    outcome: str | None = None,
    output: str | None = None,
) -> None:
    """Give the run a stopping status and set `completedAt` (07 §5 "settle the run")."""
    changes: dict[str, Any] = {
        "status": status,
        "failure_code": failure_code,
        "completed_at": tx.now,
    }
    if outcome is not None:
        changes["outcome"] = outcome
        changes["output"] = output
    if status in TERMINAL_STATUSES:
        # A run that reaches a terminal status is no longer under restore review (07 §8).
        changes["restore_review"] = False
    tx.set(**changes)


def _fail_run(tx: _Tx, code: str, *, stopping_cancels: bool) -> None:
    """A definite failure; a call failure of a stopping run ends it `cancelled` instead."""
    if stopping_cancels and tx.run.cancel_mode == "stopping":
        _settle(tx, "cancelled", code)
        tx.emit(Fail("cancelled", code))
    else:
        _settle(tx, "failed", code)
        tx.emit(Fail("failed", code))


def _dead_letter(
    tx: _Tx,
    record: StepRecord,
    code: str,
    *,
    detail: str | None = None,
    stopping_cancels: bool = False,
) -> None:
    tx.update(
        record,
        state="dead-lettered",
        failure_code=code,
        detail=detail,
        finished_at=tx.now,
        due_at=None,
        awaiting=None,
        dispatched=False,
    )
    _fail_run(tx, code, stopping_cancels=stopping_cancels)


def _unknown(
    tx: _Tx, record: StepRecord, code: str | None, *, receipt_expired: bool = False
) -> None:
    """T11 (and T27, T28, T32, T35): the effect is unknown; the run waits for an operator."""
    kept = code if code is not None else record.failure_code
    tx.update(
        record,
        state="unknown",
        uncertain=True,
        receipt_expired=record.receipt_expired or receipt_expired,
        failure_code=kept,
        finished_at=tx.now,
        due_at=None,
        awaiting=None,
    )
    tx.set(status="attention", failure_code=kept, completed_at=None)
    tx.emit(Attention(kept))


def _expire(tx: _Tx, record: StepRecord) -> None:
    """T26 (and T9): the deadline passed before the step completed."""
    tx.update(
        record,
        state="expired",
        failure_code="deadline-reached",
        finished_at=tx.now,
        due_at=None,
        awaiting=None,
    )
    _settle(tx, "expired", "deadline-reached")
    tx.emit(Fail("expired", "deadline-reached"))


def _deadline(tx: _Tx, record: StepRecord) -> None:
    """T26, or T27 for an `uncertain` record (only its product can settle it)."""
    if record.uncertain:
        _unknown(tx, record, None)
    else:
        _expire(tx, record)


def _cancel_record(tx: _Tx, record: StepRecord) -> None:
    """A record stopped by the cancel: `cancelled`, and the run `cancelled` (07 §8)."""
    tx.update(record, state="cancelled", finished_at=tx.now, due_at=None, awaiting=None)
    _settle(tx, "cancelled", tx.run.failure_code if tx.run.status == "failed" else None)
    tx.emit(Cancelled("cancelled"))


# -- entering steps (07 §5.1) ---------------------------------------------------------------


def _completion_reference(tx: _Tx, spec: WaitForStep) -> Any:
    """The value at the completion's reference pointer in the waited call's output, or None."""
    recorded = tx.output_of(spec.call)
    if recorded is None:
        return None
    value: Any = json.loads(recorded)
    for raw_token in spec.completion.reference.split("/")[1:]:
        token = raw_token.replace("~1", "/").replace("~0", "~")
        if isinstance(value, dict) and token in value:
            value = value[token]
        elif isinstance(value, list) and token.isdigit() and int(token) < len(value):
            value = value[int(token)]
        else:
            return None
    return value


def _enter(tx: _Tx, target: str) -> None:
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
            _cancel_wait_for(tx, record)
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
        _cancel_record(tx, record)
    else:
        tx.emit(ScheduleDue(target, now))


def _cancel_wait_for(tx: _Tx, record: StepRecord) -> None:
    """A `wait-for` under cancel: take `onCancel` at once, or the run is `cancelled`."""
    spec = tx.definition.step(record.step)
    assert isinstance(spec, WaitForStep)
    if spec.on_cancel is None:
        _cancel_record(tx, record)
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
    _enter(tx, spec.on_cancel)


def _resolve_pending_under_cancel(tx: _Tx, record: StepRecord) -> None:
    """The cancel rule (07 §5, §8): a pending record of a stopping run is resolved at once,
    except an `uncertain` call re-armed by `retry-same`, whose resend may settle its effect."""
    if record.type == "wait-for":
        _cancel_wait_for(tx, record)
    elif record.type == "call" and record.uncertain:
        tx.set(status=_live_status(tx))
        assert record.due_at is not None
        tx.emit(ScheduleDue(record.step, record.due_at))
    else:
        _cancel_record(tx, record)


def _leave_pending(tx: _Tx, record: StepRecord, due: Instant, **changes: Any) -> None:
    """Return a record to `pending` (T7, T16, T19, T24, T29), applying the cancel rule."""
    record = tx.update(
        record,
        state="pending",
        due_at=due,
        awaiting=None,
        **changes,
    )
    if tx.run.cancel_mode == "stopping":
        _resolve_pending_under_cancel(tx, record)
    elif record.type == "wait-for":
        tx.emit(ScheduleObservation(record.step, due))
    else:
        tx.emit(ScheduleDue(record.step, due))


# -- admission ----------------------------------------------------------------------------


def _admit(definition: Definition, event: Admitted, now: Instant, keys: Keys) -> Advance:
    """T1: the run is `running` at the start step, whose record is due now."""
    state = RunState(
        status="running",
        current_step=definition.start,
        admitted_at=now,
        deadline_at=now + definition.deadline_ms,
        input=event.input,
        policy=event.policy,
    )
    tx = _Tx(definition, state, now, keys)
    _enter(tx, definition.start)
    return tx.done()


# -- claims and step work (07 §7.2–§7.4) ----------------------------------------------------


def _claimable(state: RunState, record: StepRecord, now: Instant) -> bool:
    if record.state != "pending" or record.due_at is None or record.due_at > now:
        return False
    if state.restore_review or state.status not in ("running", "cancel-requested"):
        return False
    return state.cancel_mode != "stopping" or (record.type == "call" and record.uncertain)


def _step_due(tx: _Tx, event: StepDue) -> Advance:
    state = tx.run
    if event.step != state.current_step:
        return _unchanged(state, NOT_APPLICABLE)
    record = tx.get(event.step)
    if not _claimable(state, record, tx.now):
        return _unchanged(state, NOT_APPLICABLE)
    if not record.pure and tx.now >= state.deadline_at:
        _deadline(tx, record)  # claim step 5: T26 instead of leasing (T27 if uncertain)
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


def _work(tx: _Tx, event: Work) -> Advance:
    """The work of a claimed record: the `step-invalid` check, then the step by its type."""
    if event.step != tx.run.current_step:
        return _unchanged(tx.run, NOT_APPLICABLE)
    record = tx.get(event.step)
    if record.state != "leased" or record.awaiting != "work":
        return _unchanged(tx.run, NOT_APPLICABLE)
    record = tx.update(record, awaiting=None)
    spec = tx.definition.steps.get(record.step)
    if spec is None or spec.type != record.type:
        # T36: the record does not fit the snapshot; an uncertain record keeps its code.
        if record.uncertain:
            _unknown(tx, record, None)
        else:
            _dead_letter(tx, record, "step-invalid")
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


def _evaluate(tx: _Tx, spec_mapping: Any) -> Any:
    return tx.definition.evaluate(spec_mapping, run_input=tx.run.input, output_of=tx.output_of)


def _choose(tx: _Tx, record: StepRecord, spec: ChooseStep) -> None:
    try:
        label = _evaluate(tx, spec.choose)
    except FunctionError as error:
        _dead_letter(tx, record, "mapping-invalid", detail=error.code)  # T13
        return
    if not isinstance(label, str) or label not in spec.cases:
        _dead_letter(tx, record, "choice-invalid", detail="coordinator.mapping.branch")  # T13
        return
    tx.update(  # T12
        record, state="delivered", route=StepRoute("case", label), finished_at=tx.now, awaiting=None
    )
    tx.set(status=_live_status(tx))
    _enter(tx, spec.cases[label])


def _finish(tx: _Tx, record: StepRecord, spec: FinishStep) -> None:
    if spec.output is None:
        output: Any = None
    else:
        try:
            output = _evaluate(tx, spec.output)
        except FunctionError as error:
            _dead_letter(tx, record, "mapping-invalid", detail=error.code)  # T15
            return
    text = to_canonical(output)
    if not tx.definition.outcome_valid(spec.outcome, json.loads(text)):
        _dead_letter(tx, record, "outcome-invalid", detail="coordinator.mapping.outcome")  # T15
        return
    tx.update(record, state="delivered", finished_at=tx.now, awaiting=None)  # T14
    status: RunStatus = "cancelled" if tx.run.cancel_mode == "on-cancel-path" else "finished"
    _settle(tx, status, None, outcome=spec.outcome, output=text)
    tx.emit(Finish("cancelled" if status == "cancelled" else "finished", spec.outcome, text))


def _wait_until(tx: _Tx, record: StepRecord, spec: WaitUntilStep) -> None:
    if record.wait_until is not None:
        # A later claim: the instant has come (T18); the deadline case was decided at claim.
        tx.update(
            record, state="delivered", route=StepRoute("next"), finished_at=tx.now, awaiting=None
        )
        tx.set(status=_live_status(tx))
        _enter(tx, spec.next)
        return
    try:
        value = _evaluate(tx, spec.wait_until)
    except FunctionError as error:
        _dead_letter(tx, record, "mapping-invalid", detail=error.code)  # T17
        return
    instant = parse_instant(value)
    if instant is None:
        _dead_letter(tx, record, "mapping-invalid", detail="coordinator.mapping.timestamp")  # T17
        return
    due = min(max(instant, record.entered_at), tx.run.deadline_at)  # T16
    _leave_pending(tx, record, due, wait_until=instant, attempt=0)


def _wait_for_claim(tx: _Tx, record: StepRecord, spec: WaitForStep) -> None:
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
            tx.set(status=_live_status(tx))
            _enter(tx, spec.on_timeout)
        else:  # T22
            _dead_letter(tx, record, "wait-timed-out")
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


def _call_attempt(tx: _Tx, record: StepRecord, spec: CallStep) -> None:
    """07 §7.4 steps 1–5, up to the credential the shell obtains before the pre-send fence."""
    operation = spec.alias.operation
    if record.uncertain and operation.recovery == "hold-after-dispatch":
        _unknown(tx, record, "evaluation-uncertain")  # step 1: never send an uncertain evaluation
        return
    if record.command is None:  # step 2: evaluate once and freeze
        try:
            request = _evaluate(tx, spec.input)
        except FunctionError as error:
            _dead_letter(tx, record, "mapping-invalid", detail=error.code)
            return
        if not isinstance(request, dict):
            _dead_letter(tx, record, "mapping-invalid", detail="coordinator.mapping.call-shape")
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
        record = tx.update(record, command=text)
        tx.emit(FreezeCommand(record.step, text))
    assert record.command is not None
    if operation.requires_preparation and record.preparation is None:  # step 3
        tx.update(record, awaiting="preparation")
        tx.emit(Prepare(record.step, operation.id, spec.alias.connection, record.command))
        return
    _before_credential(tx, record, spec)


def _before_credential(tx: _Tx, record: StepRecord, spec: CallStep) -> None:
    """Step 4 (the frozen command still names this step's operation and connection) and
    step 5 (ask the shell for a fresh credential)."""
    assert record.command is not None
    frozen = json.loads(record.command)
    if (
        frozen.get("operation") != spec.alias.operation.id
        or frozen.get("connection") != spec.alias.connection
    ):
        if record.uncertain:
            _unknown(tx, record, None)
        else:
            _dead_letter(tx, record, "protected-state-invalid")
        return
    tx.update(record, awaiting="credential")
    tx.emit(ObtainCredential(record.step, spec.alias.connection))


def _leased_call(tx: _Tx, step: str, awaiting: str) -> tuple[StepRecord, CallStep] | None:
    if step != tx.run.current_step:
        return None
    record = tx.get(step)
    spec = tx.definition.steps.get(step)
    if record.state != "leased" or record.awaiting != awaiting or not isinstance(spec, CallStep):
        return None
    return record, spec


def _preparation_done(tx: _Tx, event: PreparationDone) -> Advance:
    found = _leased_call(tx, event.step, "preparation")
    if found is None:
        return _unchanged(tx.run, NOT_APPLICABLE)
    record, spec = found
    try:
        size = len(base64.b64decode(event.preparation, validate=True))
    except (binascii.Error, ValueError):
        _dead_letter(tx, record, "preparation-invalid", stopping_cancels=True)
        return tx.done()
    if size > PREPARATION_MAX_BYTES:
        _dead_letter(tx, record, "preparation-too-large", stopping_cancels=True)
        return tx.done()
    record = tx.update(record, preparation=event.preparation)
    tx.emit(FreezePreparation(record.step, event.preparation))
    _before_credential(tx, record, spec)
    return tx.done()


def _ready_to_send(tx: _Tx, event: ReadyToSend) -> Advance:
    """The pre-send fence (07 §7.2): refuse to send, or mark and dispatch."""
    found = _leased_call(tx, event.step, "credential")
    if found is None:
        return _unchanged(tx.run, NOT_APPLICABLE)
    record, spec = found
    if tx.run.restore_review:
        return _unchanged(tx.run, "restore-review")
    if tx.run.cancel_mode == "stopping" and not record.uncertain:
        _cancel_record(tx, record)  # not sent now: effect not-sent, or refused if sent before
        return tx.done()
    if tx.now >= tx.run.deadline_at:
        _deadline(tx, record)
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


# -- call outcomes (07 §7.4 step 8) -------------------------------------------------------------


def _call_outcome(tx: _Tx, event: CallOutcome) -> Advance:
    if event.step != tx.run.current_step:
        return _unchanged(tx.run, NOT_APPLICABLE)
    record = tx.get(event.step)
    spec = tx.definition.steps.get(event.step)
    if record.state != "leased" or not isinstance(spec, CallStep):
        return _unchanged(tx.run, NOT_APPLICABLE)
    if record.awaiting in ("preparation", "credential"):
        # Nothing was sent: only a definite failure is possible (08 §2.2, 07 §7.4 step 3).
        if event.outcome not in ("retryable", "refused") or event.code is None:
            return _unchanged(tx.run, NOT_APPLICABLE)
    elif record.awaiting != "answer":
        return _unchanged(tx.run, NOT_APPLICABLE)
    if event.outcome == "success":
        if event.value is None:
            return _unchanged(tx.run, NOT_APPLICABLE)
        settled = "retry-same" if record.generation > 1 else "response"
        _call_success(tx, record, spec, event.value, settled)  # T3/T4
        return tx.done()
    if event.outcome == "receipt-expired":
        _unknown(tx, record, "receipt-expired", receipt_expired=True)  # T11
        return tx.done()
    if event.outcome == "uncertain" or record.uncertain:
        _unknown(tx, record, event.code)  # T11: a declared refusal keeps the earlier code
        return tx.done()
    # A definite answer: this attempt did not execute (or was refused) and is over.
    record = tx.update(record, dispatched=False)
    if event.outcome == "declared-refusal":
        target = spec.on_declared_refusal.get(event.refusal_code or "")
        if target is not None and tx.run.cancel_mode != "stopping":  # T5
            tx.update(
                record,
                state="delivered",
                route=StepRoute("refusal", event.refusal_code),
                finished_at=tx.now,
                awaiting=None,
                failure_code=None,
            )
            tx.set(status=_live_status(tx))
            _enter(tx, target)
        else:  # T6 (a stopping run does not take the refusal route either)
            _dead_letter(tx, record, "product-refused", stopping_cancels=True)
        return tx.done()
    code = event.code or "remote-refused"
    if event.outcome == "retryable":
        _retryable(tx, record, code)  # T7/T8/T9
    else:
        _dead_letter(tx, record, code, stopping_cancels=True)  # T10
    return tx.done()


def _retryable(tx: _Tx, record: StepRecord, code: str) -> None:
    policy = tx.run.policy
    if record.attempt >= policy.max_attempts:  # T8
        _dead_letter(tx, record, code, stopping_cancels=True)
        return
    due = tx.now + policy.retry_delays_ms[record.attempt - 1]
    if due >= tx.run.deadline_at:  # T9: a retry at or after the deadline expires instead
        _expire(tx, record)
        return
    _leave_pending(tx, record, due, failure_code=code)  # T7


def _call_success(tx: _Tx, record: StepRecord, spec: CallStep, value: str, settled_by: Any) -> None:
    """T3/T4 (and T31 after a confirmed reconcile)."""
    tx.update(
        record,
        state="delivered",
        route=StepRoute("next"),
        output=value,
        uncertain=False,
        dispatched=False,
        awaiting=None,
        settled_by=settled_by,
        failure_code=None,
        finished_at=tx.now,
    )
    if tx.run.cancel_mode == "stopping":  # T4
        if record.dispatch_risk:
            _settle(tx, "cancelled-after-effect", None)
            tx.emit(Cancelled("cancelled-after-effect"))
        else:
            _settle(tx, "cancelled", None)
            tx.emit(Cancelled("cancelled"))
        return
    tx.set(status=_live_status(tx), failure_code=None, completed_at=None)  # T3
    _enter(tx, spec.next)


# -- observations (07 §7.3) -------------------------------------------------------------------


def _observation_outcome(tx: _Tx, event: ObservationOutcome) -> Advance:
    if event.step != tx.run.current_step:
        return _unchanged(tx.run, NOT_APPLICABLE)
    record = tx.get(event.step)
    spec = tx.definition.steps.get(event.step)
    if (
        record.state != "leased"
        or record.awaiting != "observation"
        or not isinstance(spec, WaitForStep)
    ):
        return _unchanged(tx.run, NOT_APPLICABLE)
    if event.outcome == "complete" and event.value is None:
        return _unchanged(tx.run, NOT_APPLICABLE)
    record = tx.update(
        record,
        observations=record.observations + 1,
        last_observed_at=tx.now,
        attempt=0,  # observations are not retries
        awaiting=None,
    )
    if tx.run.cancel_mode == "stopping":
        # 07 §7.3 step 1: the read is discarded; resolve as a pending wait under cancel.
        record = tx.update(record, state="pending")
        _cancel_wait_for(tx, record)
        return tx.done()
    assert record.timeout_at is not None and record.interval_seconds is not None
    if event.outcome == "complete":  # T20
        tx.update(
            record,
            state="delivered",
            route=StepRoute("next"),
            output=event.value,
            finished_at=tx.now,
        )
        tx.set(status=_live_status(tx))
        _enter(tx, spec.next)
    elif event.outcome == "pending":  # T19
        due = min(tx.now + record.interval_seconds * 1000, record.timeout_at)
        _leave_pending(tx, record, due)
    elif event.outcome == "retryable":  # T24: the next read comes after the floor
        floor = tx.run.policy.observation_floor_seconds * 1000
        _leave_pending(tx, record, min(tx.now + floor, record.timeout_at))
    else:  # T23
        _dead_letter(tx, record, event.code or "remote-refused")
    return tx.done()


# -- time, leases, holds ---------------------------------------------------------------------


def _deadline_passed(tx: _Tx) -> Advance:
    """The sweep (07 §7.2 step 3): a pending, non-pure record of an overdue run (T26/T27)."""
    record = tx.get(tx.run.current_step)
    if record.state != "pending" or record.pure or tx.now < tx.run.deadline_at:
        return _unchanged(tx.run, NOT_APPLICABLE)
    if tx.run.status in TERMINAL_STATUSES or tx.run.status == "failed":
        return _unchanged(tx.run, NOT_APPLICABLE)
    _deadline(tx, record)
    return tx.done()


def _lease_lapsed(tx: _Tx, record: StepRecord) -> None:
    """T28/T29: the attempt's lease expired before its result was recorded."""
    if record.dispatched or record.uncertain:  # T28: it may have executed
        _unknown(tx, record, "transport-uncertain")
        return
    if record.type == "call":  # T29: as a retryable attempt-timeout
        _retryable(tx, record, "attempt-timeout")
    elif record.type == "wait-for":
        floor = tx.run.policy.observation_floor_seconds * 1000
        assert record.attempt_started_at is not None
        _leave_pending(tx, record, max(tx.now, record.attempt_started_at + floor), attempt=0)
    else:
        _leave_pending(tx, record, tx.now)


def _lease_lapsed_event(tx: _Tx, event: LeaseLapsed) -> Advance:
    if event.step != tx.run.current_step or tx.get(event.step).state != "leased":
        return _unchanged(tx.run, NOT_APPLICABLE)
    _lease_lapsed(tx, tx.get(event.step))
    return tx.done()


def _completion_notified(tx: _Tx) -> Advance:
    """07 §7.6: due := max(now, lastObservedAt + floor) (now if never observed) when that is
    earlier than the current due time and than `timeoutAt`; anything else changes nothing
    (a leased observation is already in flight)."""
    record = tx.get(tx.run.current_step)
    if record.type != "wait-for" or record.state != "pending":
        return tx.done()
    assert record.due_at is not None and record.timeout_at is not None
    floor = tx.run.policy.observation_floor_seconds * 1000
    due = (
        tx.now if record.last_observed_at is None else max(tx.now, record.last_observed_at + floor)
    )
    if due < record.due_at and due < record.timeout_at:
        tx.update(record, due_at=due)
        tx.emit(ScheduleObservation(record.step, due))
    return tx.done()


def is_settled(state: RunState, now: Instant) -> bool:
    """07 §13: terminal, or `failed` with `retry-same` no longer possible — and no unknown
    effect and no restore review."""
    if state.restore_review or any(r.effect_state == "unknown" for r in state.records):
        return False
    if state.status in TERMINAL_STATUSES:
        return True
    if state.status != "failed":
        return False
    record = state.current
    return record.failure_code in NON_RECOVERABLE_CODES or (
        not record.pure and now >= state.deadline_at
    )


def _restore_hold(tx: _Tx) -> Advance:
    """T33: mark the run for review unless settled; a leased record is handled as lapsed."""
    if not is_settled(tx.run, tx.now):
        tx.set(restore_review=True)
    record = tx.get(tx.run.current_step)
    if record.state == "leased":
        _lease_lapsed(tx, record)
    return tx.done()


def _attempt_refused(tx: _Tx, event: AttemptRefused) -> Advance:
    if event.step != tx.run.current_step:
        return _unchanged(tx.run, NOT_APPLICABLE)
    record = tx.get(event.step)
    if record.state not in ("leased", "pending"):
        return _unchanged(tx.run, NOT_APPLICABLE)
    if record.uncertain:  # T35: only its product can settle an uncertain record
        _unknown(tx, record, None)
    else:  # T34, or the binding / protected-state checks of 07 §7.4 step 4
        _dead_letter(tx, record, event.code)
    return tx.done()


def unrestorable(state: RunState, now: Instant) -> Advance:
    """T34/T35 without a definition: the run's snapshot does not restore under this build."""
    record = state.current
    if record.state not in ("leased", "pending") or state.is_terminal:
        return _unchanged(state, NOT_APPLICABLE)
    records = list(state.records)
    position = records.index(record)
    if record.uncertain:
        records[position] = evolve(
            record, state="unknown", finished_at=now, due_at=None, awaiting=None
        )
        next_state = evolve(
            state, records=tuple(records), status="attention", failure_code=record.failure_code
        )
        return Advance(next_state, (Attention(record.failure_code),))
    records[position] = evolve(
        record,
        state="dead-lettered",
        failure_code="snapshot-incompatible",
        finished_at=now,
        due_at=None,
        awaiting=None,
    )
    next_state = evolve(
        state,
        records=tuple(records),
        status="failed",
        failure_code="snapshot-incompatible",
        completed_at=now,
    )
    return Advance(next_state, (Fail("failed", "snapshot-incompatible"),))


# -- cancel (07 §8) -----------------------------------------------------------------------------


def _cancel(tx: _Tx) -> Advance:
    state = tx.run
    if state.is_terminal or state.cancel_requested:
        return tx.done()  # nothing changes
    tx.set(cancel_requested=True, cancel_mode="stopping")
    record = tx.get(state.current_step)
    if record.state == "pending":
        _resolve_pending_under_cancel(tx, record)
    elif record.state == "leased":
        tx.set(status="cancel-requested")
    elif record.state == "dead-lettered":
        _settle(tx, "cancelled", state.failure_code)
        tx.emit(Cancelled("cancelled"))
    # `unknown`: the run stays in attention; only retry-same or reconcile may settle it.
    return tx.done()


# -- operator recovery (07 §9) -----------------------------------------------------------------


def retry_blocked_by(
    definition: Definition, state: RunState, event: RetrySame, now: Instant
) -> str | None:
    """The reason `retry-same` is refused (07 §9.1, in the contract's order), or None."""
    record = state.current
    if state.status in ("cancelled", "cancelled-after-effect"):
        return "cancelled"
    if state.status in ("finished", "expired"):
        return "terminal"
    if not state.restore_review:
        if state.status == "failed" and is_settled(state, now):
            return "terminal"
        if state.status in ("running", "cancel-requested") and record.state != "unknown":
            return "terminal"
    if record.state not in ("unknown", "dead-lettered") and not (
        state.restore_review and record.state == "pending"
    ):
        return "not-recoverable"
    if record.state != "pending" and record.failure_code in NON_RECOVERABLE_CODES:
        return "not-recoverable"
    if not record.pure and now >= state.deadline_at:
        return "deadline-reached"
    if record.receipt_expired:
        return "receipt-expired"
    if not event.binding_unchanged:
        return "binding-changed"
    if not event.snapshot_restores:
        return "snapshot-incompatible"
    if event.payload_erased:
        return "payload-erased"
    spec = definition.steps.get(record.step)
    if (
        isinstance(spec, CallStep)
        and spec.alias.operation.recovery == "hold-after-dispatch"
        and record.uncertain
    ):
        return "evaluation-uncertain"
    if event.lease_active:
        return "lease-active"
    return None


def _retry_same(tx: _Tx, event: RetrySame) -> Advance:
    """T30: re-arm the current record; the frozen command is resent byte for byte."""
    reason = retry_blocked_by(tx.definition, tx.run, event, tx.now)
    if reason is not None:
        return _unchanged(tx.run, reason)
    record = tx.get(tx.run.current_step)
    tx.set(restore_review=False)
    if record.state == "pending":  # under review: it simply becomes claimable again
        return tx.done()
    due = tx.now
    if record.type == "wait-until" and record.wait_until is not None:
        due = min(max(record.wait_until, record.entered_at, tx.now), tx.run.deadline_at)
    elif record.type == "wait-for" and record.timeout_at is not None:
        due = min(tx.now, record.timeout_at)
    record = tx.update(
        record,
        state="pending",
        generation=record.generation + 1,
        attempt=0,
        due_at=due,
        finished_at=None,
        awaiting=None,
        dispatched=False,
    )
    tx.set(status=_live_status(tx), completed_at=None, failure_code=None)
    if record.type == "wait-for":
        tx.emit(ScheduleObservation(record.step, due))
    else:
        tx.emit(ScheduleDue(record.step, due))
    return tx.done()


def reconcile_blocked_by(
    definition: Definition, state: RunState, event: ReconcileRequested
) -> str | None:
    """The reason `reconcile` is refused (07 §9.2, in order), or None. `no-receipt` is answered
    as `coordinator.command.reconciliation-unavailable`."""
    record = state.current
    spec = definition.steps.get(record.step)
    if record.state != "unknown" or not record.uncertain or not isinstance(spec, CallStep):
        return "not-uncertain"
    if record.receipt_expired:
        return "receipt-expired"
    operation = spec.alias.operation
    if operation.effect != "mutation" or not operation.read_receipt:
        return "no-receipt"
    if record.command is None:
        return "not-uncertain"
    if event.lease_active:
        return "lease-active"
    if not event.binding_unchanged:
        return "binding-changed"
    if event.payload_erased:
        return "payload-erased"
    return None


def _reconcile(tx: _Tx, event: ReconcileRequested) -> Advance:
    reason = reconcile_blocked_by(tx.definition, tx.run, event)
    if reason is not None:
        return _unchanged(tx.run, reason)
    record = tx.get(tx.run.current_step)
    spec = tx.definition.step(record.step)
    assert isinstance(spec, CallStep) and record.command is not None
    tx.emit(
        LookupReceipt(
            record.step,
            spec.alias.operation.id,
            spec.alias.connection,
            record.command,
            json.loads(record.command).get("idempotencyKey"),
            record.generation,
        )
    )
    return tx.done()


def _receipt_answer(tx: _Tx, event: ReceiptAnswer) -> Advance:
    """The second transaction of a reconcile: re-check, then T31, T32 or nothing."""
    if event.step != tx.run.current_step:
        return _unchanged(tx.run, "reconcile-raced")
    record = tx.get(event.step)
    spec = tx.definition.steps.get(event.step)
    if (
        record.state != "unknown"
        or not record.uncertain
        or record.receipt_expired
        or record.generation != event.generation
        or not isinstance(spec, CallStep)
    ):
        return _unchanged(tx.run, "reconcile-raced")
    if event.answer == "confirmed":
        if event.value is None:
            return _unchanged(tx.run, NOT_APPLICABLE)
        _call_success(tx, record, spec, event.value, "reconcile")  # T31
        return tx.done(answer="confirmed")
    if event.answer == "expired":
        _unknown(tx, record, "receipt-expired", receipt_expired=True)  # T32
        return tx.done(answer="receipt-expired")
    if event.answer == "unavailable":
        return Advance(tx.run, (), None, "unavailable")
    return Advance(tx.run, (), None, "unresolved")  # no receipt, or another request's key


# -- the entry point ---------------------------------------------------------------------------


def advance(
    definition: Definition,
    state: RunState | None,
    event: Event,
    now: Instant,
    keys: Keys,
) -> Advance:
    """Apply one event at instant `now` (integer milliseconds since the epoch, UTC).

    `state` is None only for `Admitted`. An event that does not apply returns the state
    unchanged with `refused` set and no commands.
    """
    if isinstance(event, Admitted):
        if state is not None:
            raise ValueError("Admitted starts a run: give no state.")
        return _admit(definition, event, now, keys)
    if state is None:
        raise ValueError("Only Admitted starts without a state.")
    tx = _Tx(definition, state, now, keys)
    if isinstance(event, CancelRequested):
        return _cancel(tx)
    if isinstance(event, RetrySame):
        return _retry_same(tx, event)
    if isinstance(event, ReconcileRequested):
        return _reconcile(tx, event)
    if isinstance(event, ReceiptAnswer):
        return _receipt_answer(tx, event)
    if isinstance(event, RestoreHold):
        return _restore_hold(tx)
    if state.is_terminal:
        return _unchanged(state, NOT_APPLICABLE)
    if isinstance(event, StepDue):
        return _step_due(tx, event)
    if isinstance(event, Work):
        return _work(tx, event)
    if isinstance(event, PreparationDone):
        return _preparation_done(tx, event)
    if isinstance(event, ReadyToSend):
        return _ready_to_send(tx, event)
    if isinstance(event, CallOutcome):
        return _call_outcome(tx, event)
    if isinstance(event, ObservationOutcome):
        return _observation_outcome(tx, event)
    if isinstance(event, DeadlinePassed):
        return _deadline_passed(tx)
    if isinstance(event, LeaseLapsed):
        return _lease_lapsed_event(tx, event)
    if isinstance(event, CompletionNotified):
        return _completion_notified(tx)
    return _attempt_refused(tx, event)
