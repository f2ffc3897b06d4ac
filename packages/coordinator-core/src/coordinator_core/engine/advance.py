"""`advance`: the one implementation of run semantics (file 07 §4–§9).

`advance(definition, state, event, now, keys)` returns the next state and the commands the
caller carries out. It is a pure function: the same definition, state, event, instant and keys
always give the same result. Transition numbers (T1…T36) refer to the table of 07 §5.

This module is the entry point: it hands each event to its transition group — `steps`
(entering steps, admission, claims and step work), `outcomes` (call and observation
outcomes), `recovery` (time, leases, holds, cancel, retry-same, reconcile) — all working on
the transition state of `transition` (`_Tx`, `Advance`, the run-status helpers).
"""

from __future__ import annotations

from coordinator_core.definition.ir import (
    Definition,
)
from coordinator_core.engine.clock import Instant
from coordinator_core.engine.events import (
    Admitted,
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
from coordinator_core.engine.keys import Keys
from coordinator_core.engine.outcomes import _call_outcome, _observation_outcome
from coordinator_core.engine.recovery import (
    _attempt_refused,
    _cancel,
    _completion_notified,
    _deadline_passed,
    _lease_lapsed_event,
    _receipt_answer,
    _reconcile,
    _restore_hold,
    _retry_same,
)
from coordinator_core.engine.state import (
    RunState,
)
from coordinator_core.engine.steps import (
    _admit,
    _preparation_done,
    _ready_to_send,
    _step_due,
    _work,
)
from coordinator_core.engine.transition import NOT_APPLICABLE, Advance, _Tx, _unchanged

__all__ = ["advance"]


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
