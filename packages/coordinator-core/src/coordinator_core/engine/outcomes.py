"""Call outcomes (07 §7.4 step 8) and observation outcomes (07 §7.3)."""

from __future__ import annotations

from typing import Any

from coordinator_core.definition.ir import (
    CallStep,
    WaitForStep,
)
from coordinator_core.engine.commands import (
    Cancelled,
)
from coordinator_core.engine.inputs import (
    CallOutcome,
    ObservationOutcome,
)
from coordinator_core.engine.state import (
    StepRecord,
    StepRoute,
)
from coordinator_core.engine.steps import cancel_wait_for, enter, leave_pending
from coordinator_core.engine.transition import (
    NOT_APPLICABLE,
    Advance,
    Transition,
    dead_letter,
    expire,
    live_status,
    mark_unknown,
    settle,
    unchanged,
)

# -- call outcomes (07 §7.4 step 8) -------------------------------------------------------------


def on_call_outcome(tx: Transition, event: CallOutcome) -> Advance:
    if event.step != tx.run.current_step:
        return unchanged(tx.run, NOT_APPLICABLE)
    record = tx.get(event.step)
    spec = tx.definition.steps.get(event.step)
    if record.state != "leased" or not isinstance(spec, CallStep):
        return unchanged(tx.run, NOT_APPLICABLE)
    if record.awaiting in ("preparation", "credential"):
        # Nothing was sent: only a definite failure is possible (08 §2.2, 07 §7.4 step 3).
        if event.outcome not in ("retryable", "refused") or event.code is None:
            return unchanged(tx.run, NOT_APPLICABLE)
    elif record.awaiting != "answer":
        return unchanged(tx.run, NOT_APPLICABLE)
    if event.outcome == "success":
        if event.value is None:
            return unchanged(tx.run, NOT_APPLICABLE)
        settled = "retry-same" if record.generation > 1 else "response"
        call_succeeded(tx, record, spec, event.value, settled)  # T3/T4
        return tx.done()
    if event.outcome == "receipt-expired":
        mark_unknown(tx, record, "receipt-expired", receipt_expired=True)  # T11
        return tx.done()
    if event.outcome == "uncertain" or record.uncertain:
        mark_unknown(tx, record, event.code)  # T11: a declared refusal keeps the earlier code
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
            tx.set(status=live_status(tx))
            enter(tx, target)
        else:  # T6 (a stopping run does not take the refusal route either)
            dead_letter(tx, record, "product-refused", stopping_cancels=True)
        return tx.done()
    code = event.code or "remote-refused"
    if event.outcome == "retryable":
        retryable_failure(tx, record, code)  # T7/T8/T9
    else:
        dead_letter(tx, record, code, stopping_cancels=True)  # T10
    return tx.done()


def retryable_failure(tx: Transition, record: StepRecord, code: str) -> None:
    policy = tx.run.policy
    if record.attempt >= policy.max_attempts:  # T8
        dead_letter(tx, record, code, stopping_cancels=True)
        return
    due = tx.now + policy.retry_delays_ms[record.attempt - 1]
    if due >= tx.run.deadline_at:  # T9: a retry at or after the deadline expires instead
        expire(tx, record)
        return
    leave_pending(tx, record, due, failure_code=code)  # T7


def call_succeeded(
    tx: Transition, record: StepRecord, spec: CallStep, value: str, settled_by: Any
) -> None:
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
            settle(tx, "cancelled-after-effect", None)
            tx.emit(Cancelled("cancelled-after-effect"))
        else:
            settle(tx, "cancelled", None)
            tx.emit(Cancelled("cancelled"))
        return
    tx.set(status=live_status(tx), failure_code=None, completed_at=None)  # T3
    enter(tx, spec.next)


# -- observations (07 §7.3) -------------------------------------------------------------------


def on_observation_outcome(tx: Transition, event: ObservationOutcome) -> Advance:
    if event.step != tx.run.current_step:
        return unchanged(tx.run, NOT_APPLICABLE)
    record = tx.get(event.step)
    spec = tx.definition.steps.get(event.step)
    if (
        record.state != "leased"
        or record.awaiting != "observation"
        or not isinstance(spec, WaitForStep)
    ):
        return unchanged(tx.run, NOT_APPLICABLE)
    if event.outcome == "complete" and event.value is None:
        return unchanged(tx.run, NOT_APPLICABLE)
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
        cancel_wait_for(tx, record)
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
        tx.set(status=live_status(tx))
        enter(tx, spec.next)
    elif event.outcome == "pending":  # T19
        due = min(tx.now + record.interval_seconds * 1000, record.timeout_at)
        leave_pending(tx, record, due)
    elif event.outcome == "retryable":  # T24: the next read comes after the floor
        floor = tx.run.policy.observation_floor_seconds * 1000
        leave_pending(tx, record, min(tx.now + floor, record.timeout_at))
    else:  # T23
        dead_letter(tx, record, event.code or "remote-refused")
    return tx.done()
