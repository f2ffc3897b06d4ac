"""`advance`: the one implementation of run semantics (file 07 §4–§9).

`advance(definition, state, event, now, keys)` returns the next state and the commands the
caller carries out. It is a pure function: the same definition, state, event, instant and keys
always give the same result. Transition numbers (T1…T36) refer to the table of 07 §5.

This module is the entry point: `TRANSITIONS`, one table, hands each event to its handler in
its transition group — `steps` (entering steps, admission, claims and step work), `outcomes`
(call and observation outcomes), `recovery` (time, leases, holds, cancel, retry-same,
reconcile) — all working on the transition state of `transition` (`Transition`, `Advance`, the
run-status helpers).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from coordinator_core.definition.ir import Definition
from coordinator_core.engine.inputs import (
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
)
from coordinator_core.engine.instants import Instant
from coordinator_core.engine.keys import Keys
from coordinator_core.engine.outcomes import on_call_outcome, on_observation_outcome
from coordinator_core.engine.recovery import (
    on_attempt_refused,
    on_cancel_requested,
    on_completion_notified,
    on_deadline_passed,
    on_lease_lapsed,
    on_receipt_answer,
    on_reconcile_requested,
    on_restore_hold,
    on_retry_same,
)
from coordinator_core.engine.state import RunState
from coordinator_core.engine.steps import (
    admit,
    on_preparation_done,
    on_ready_to_send,
    on_step_due,
    on_work,
)
from coordinator_core.engine.transition import NOT_APPLICABLE, Advance, Transition, unchanged

__all__ = ["TRANSITIONS", "EventHandler", "advance"]


@dataclass(frozen=True, slots=True)
class EventHandler:
    """How one type of event is applied to a run's state: `handle(transition, event)`, and
    whether the event applies to a run that has ended (`ended_too`: the operator's actions
    and the restore hold, 07 §8, §9, §12, which answer a terminal run themselves). Any other
    event leaves an ended run unchanged (`not-applicable`)."""

    handle: Callable[[Transition, Any], Advance]
    ended_too: bool = False


TRANSITIONS: Final[Mapping[type[Event], EventHandler]] = MappingProxyType(
    {
        # The operator's actions and the restore hold: they answer an ended run too.
        CancelRequested: EventHandler(on_cancel_requested, ended_too=True),
        RetrySame: EventHandler(on_retry_same, ended_too=True),
        ReconcileRequested: EventHandler(on_reconcile_requested, ended_too=True),
        ReceiptAnswer: EventHandler(on_receipt_answer, ended_too=True),
        RestoreHold: EventHandler(on_restore_hold, ended_too=True),
        # The run's own life: claims and step work, product answers, time, leases.
        StepDue: EventHandler(on_step_due),
        Work: EventHandler(on_work),
        PreparationDone: EventHandler(on_preparation_done),
        ReadyToSend: EventHandler(on_ready_to_send),
        CallOutcome: EventHandler(on_call_outcome),
        ObservationOutcome: EventHandler(on_observation_outcome),
        DeadlinePassed: EventHandler(on_deadline_passed),
        LeaseLapsed: EventHandler(on_lease_lapsed),
        CompletionNotified: EventHandler(on_completion_notified),
        AttemptRefused: EventHandler(on_attempt_refused),
    }
)
"""Every event but `Admitted` (which starts a run from no state), by its type."""


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
        return admit(definition, event, now, keys)
    if state is None:
        raise ValueError("Only Admitted starts without a state.")
    handler = TRANSITIONS.get(type(event))
    if handler is None:
        raise TypeError(f"{type(event).__name__} is not an event of the engine.")
    if state.is_terminal and not handler.ended_too:
        return unchanged(state, NOT_APPLICABLE)
    return handler.handle(Transition(definition, state, now, keys), event)
