"""Time, leases and holds; cancel (07 §8); operator recovery: retry-same, reconcile (07 §9)."""

from __future__ import annotations

import json

from coordinator_core.definition.ir import (
    CallStep,
    Definition,
)
from coordinator_core.engine.codes import NON_RECOVERABLE_CODES
from coordinator_core.engine.commands import (
    Attention,
    Cancelled,
    Fail,
    LookupReceipt,
    ScheduleDue,
    ScheduleObservation,
)
from coordinator_core.engine.inputs import (
    AttemptRefused,
    CancelRequested,
    CompletionNotified,
    DeadlinePassed,
    LeaseLapsed,
    ReceiptAnswer,
    ReconcileRequested,
    RestoreHold,
    RetrySame,
)
from coordinator_core.engine.instants import Instant
from coordinator_core.engine.outcomes import call_succeeded, retryable_failure
from coordinator_core.engine.state import (
    TERMINAL_STATUSES,
    RunState,
    StepRecord,
)
from coordinator_core.engine.steps import leave_pending, resolve_pending_under_cancel
from coordinator_core.engine.transition import (
    NOT_APPLICABLE,
    Advance,
    Transition,
    dead_letter,
    deadline_reached,
    live_status,
    mark_unknown,
    settle,
    unchanged,
)
from coordinator_core.evolve import evolve

# -- time, leases, holds ---------------------------------------------------------------------


def on_deadline_passed(tx: Transition, event: DeadlinePassed) -> Advance:
    """The sweep (07 §7.2 step 3): a pending, non-pure record of an overdue run (T26/T27)."""
    record = tx.get(tx.run.current_step)
    if record.state != "pending" or record.pure or tx.now < tx.run.deadline_at:
        return unchanged(tx.run, NOT_APPLICABLE)
    if tx.run.status in TERMINAL_STATUSES or tx.run.status == "failed":
        return unchanged(tx.run, NOT_APPLICABLE)
    deadline_reached(tx, record)
    return tx.done()


def _lease_lapsed(tx: Transition, record: StepRecord) -> None:
    """T28/T29: the attempt's lease expired before its result was recorded."""
    if record.dispatched or record.uncertain:  # T28: it may have executed
        mark_unknown(tx, record, "transport-uncertain")
        return
    if record.type == "call":  # T29: as a retryable attempt-timeout
        retryable_failure(tx, record, "attempt-timeout")
    elif record.type == "wait-for":
        floor = tx.run.policy.observation_floor_seconds * 1000
        assert record.attempt_started_at is not None
        leave_pending(tx, record, max(tx.now, record.attempt_started_at + floor), attempt=0)
    else:
        leave_pending(tx, record, tx.now)


def on_lease_lapsed(tx: Transition, event: LeaseLapsed) -> Advance:
    if event.step != tx.run.current_step or tx.get(event.step).state != "leased":
        return unchanged(tx.run, NOT_APPLICABLE)
    _lease_lapsed(tx, tx.get(event.step))
    return tx.done()


def on_completion_notified(tx: Transition, event: CompletionNotified) -> Advance:
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


def on_restore_hold(tx: Transition, event: RestoreHold) -> Advance:
    """T33: mark the run for review unless settled; a leased record is handled as lapsed."""
    if not is_settled(tx.run, tx.now):
        tx.set(restore_review=True)
    record = tx.get(tx.run.current_step)
    if record.state == "leased":
        _lease_lapsed(tx, record)
    return tx.done()


def on_attempt_refused(tx: Transition, event: AttemptRefused) -> Advance:
    if event.step != tx.run.current_step:
        return unchanged(tx.run, NOT_APPLICABLE)
    record = tx.get(event.step)
    if record.state not in ("leased", "pending"):
        return unchanged(tx.run, NOT_APPLICABLE)
    if record.uncertain:  # T35: only its product can settle an uncertain record
        mark_unknown(tx, record, None)
    else:  # T34, or the binding / protected-state checks of 07 §7.4 step 4
        dead_letter(tx, record, event.code)
    return tx.done()


def unrestorable(state: RunState, now: Instant) -> Advance:
    """T34/T35 without a definition: the run's snapshot does not restore under this build."""
    record = state.current
    if record.state not in ("leased", "pending") or state.is_terminal:
        return unchanged(state, NOT_APPLICABLE)
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


def on_cancel_requested(tx: Transition, event: CancelRequested) -> Advance:
    state = tx.run
    if state.is_terminal or state.cancel_requested:
        return tx.done()  # nothing changes
    tx.set(cancel_requested=True, cancel_mode="stopping")
    record = tx.get(state.current_step)
    if record.state == "pending":
        resolve_pending_under_cancel(tx, record)
    elif record.state == "leased":
        tx.set(status="cancel-requested")
    elif record.state == "dead-lettered":
        settle(tx, "cancelled", state.failure_code)
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


def on_retry_same(tx: Transition, event: RetrySame) -> Advance:
    """T30: re-arm the current record; the frozen command is resent byte for byte."""
    reason = retry_blocked_by(tx.definition, tx.run, event, tx.now)
    if reason is not None:
        return unchanged(tx.run, reason)
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
    tx.set(status=live_status(tx), completed_at=None, failure_code=None)
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


def on_reconcile_requested(tx: Transition, event: ReconcileRequested) -> Advance:
    reason = reconcile_blocked_by(tx.definition, tx.run, event)
    if reason is not None:
        return unchanged(tx.run, reason)
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


def on_receipt_answer(tx: Transition, event: ReceiptAnswer) -> Advance:
    """The second transaction of a reconcile: re-check, then T31, T32 or nothing."""
    if event.step != tx.run.current_step:
        return unchanged(tx.run, "reconcile-raced")
    record = tx.get(event.step)
    spec = tx.definition.steps.get(event.step)
    if (
        record.state != "unknown"
        or not record.uncertain
        or record.receipt_expired
        or record.generation != event.generation
        or not isinstance(spec, CallStep)
    ):
        return unchanged(tx.run, "reconcile-raced")
    if event.answer == "confirmed":
        if event.value is None:
            return unchanged(tx.run, NOT_APPLICABLE)
        call_succeeded(tx, record, spec, event.value, "reconcile")  # T31
        return tx.done(answer="confirmed")
    if event.answer == "expired":
        mark_unknown(tx, record, "receipt-expired", receipt_expired=True)  # T32
        return tx.done(answer="receipt-expired")
    if event.answer == "unavailable":
        return Advance(tx.run, (), None, "unavailable")
    return Advance(tx.run, (), None, "unresolved")  # no receipt, or another request's key
