"""The 06 §11 result shapes of a stored run: `RunStatus`, `StepStatus`, `EffectStatus`.

Built from the store's rows only; nothing here opens a sealed value except the terminal output,
the one run datum the API ever returns (06 §12). Inputs, step outputs and commands never leave.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, Literal

from coordinator_core.engine.detail import FailureDetail
from coordinator_core.shell.service.model import (
    CallDetails,
    EffectStatus,
    RunStatus,
    StepRoute,
    StepStatus,
    WaitFor,
    WaitUntil,
)
from coordinator_core.shell.store import RunSnapshot, StepRow

__all__ = ["effects_of", "run_status_of", "step_status_of"]

WaitResult = Literal["waiting", "completed", "timed-out", "cancelled", "failed", "expired"]
_MAPPING_FAILURES: Final = frozenset({"mapping-invalid", "choice-invalid", "outcome-invalid"})


def run_status_of(snapshot: RunSnapshot, output: Callable[[RunSnapshot], Any]) -> RunStatus:
    """06 §11.1. `output` opens the sealed terminal output (called only when there is one)."""
    run = snapshot.run
    current = snapshot.step(run.current_step)
    next_due = current.due_at if current is not None and current.state == "pending" else None
    has_output = run.terminal_output is not None and run.outcome is not None
    return RunStatus(
        run_id=run.run_id,
        workflow_id=run.workflow_id,
        workflow_version=run.workflow_version,
        revision=run.revision,
        definition_digest=run.definition_digest,
        binding_digest=run.binding_digest,
        origin=run.origin,
        trigger=run.trigger,
        status=run.reported_status,
        step=run.current_step,
        admitted_at=run.admitted_at,
        deadline_at=run.deadline_at,
        completed_at=run.completed_at,
        next_due_at=next_due,
        cancel_requested=run.cancel_requested,
        restore_review=run.restore_review,
        uncertain=any(step.effect_state == "unknown" for step in snapshot.steps),
        outcome=run.outcome,
        output=output(snapshot) if has_output else None,
        failure_code=run.failure_code,
        payload_erased=run.payload_erased,
    )


def _wait_result(row: StepRow) -> WaitResult:
    if row.state in ("pending", "leased"):
        return "waiting"
    if row.state == "delivered":
        kind = row.route_kind
        if kind == "timeout":
            return "timed-out"
        if kind == "cancel":
            return "cancelled"
        return "completed"
    if row.state == "dead-lettered":
        return "timed-out" if row.failure_code == "wait-timed-out" else "failed"
    if row.state == "cancelled":
        return "cancelled"
    if row.state == "expired":
        return "expired"
    return "failed"


def step_status_of(row: StepRow, wait_for: Mapping[str, tuple[str, str]]) -> StepStatus:
    """06 §11.3. `wait_for` maps a `wait-for` step to its (waited call, completion name)."""
    call = None
    if row.type == "call" and row.operation is not None and row.effect_kind is not None:
        call = CallDetails(
            operation=row.operation,
            effect=row.effect_kind,
            command_prepared=row.command_prepared,
            uncertain=row.uncertain,
            receipt_expired=row.receipt_expired,
        )
    wait: WaitUntil | WaitFor | None = None
    if row.type == "wait-until" and row.wait_until is not None:
        wait = WaitUntil(until=row.wait_until)
    elif row.type == "wait-for" and row.wait_started_at is not None and row.timeout_at is not None:
        waited, completion = wait_for.get(row.step, ("", ""))
        wait = WaitFor(
            call=waited,
            completion=completion,
            started_at=row.wait_started_at,
            timeout_at=row.timeout_at,
            interval_seconds=row.interval_seconds or 0,
            observations=row.observations,
            last_observed_at=row.last_observed_at,
            next_observation_at=row.due_at if row.state == "pending" else None,
            result=_wait_result(row),
        )
    return StepStatus(
        step=row.step,
        type=row.type,
        state=row.state,
        generation=row.generation,
        attempt=row.attempt,
        entered_at=row.entered_at,
        finished_at=row.finished_at,
        next_due_at=row.due_at if row.state == "pending" else None,
        lease_expires_at=row.lease_expires_at if row.state == "leased" else None,
        failure_code=row.failure_code,
        route=None if row.route_kind is None else StepRoute(row.route_kind, row.route_label),
        call=call,
        wait=wait,
        mapping_failure=(
            FailureDetail.parse(row.detail)
            if row.detail is not None and row.failure_code in _MAPPING_FAILURES
            else None
        ),
    )


def effects_of(snapshot: RunSnapshot) -> list[EffectStatus]:
    """06 §11.4: one per prepared mutation or evaluation, in order of first attempt (records
    are entered in order and each call step is entered once)."""
    found: list[EffectStatus] = []
    for row in snapshot.steps:
        state = row.effect_state
        if state is not None and row.operation is not None:
            found.append(EffectStatus(row.step, row.operation, state, row.settled_by))
    return found
