"""The mapping from adapter outcomes to the engine's events (engine/events.py).

The adapters' closed outcome types and the engine's event vocabulary are the same sets under
different spellings; these functions are the only place the two meet, so the worker answers
every I/O command with exactly the event the engine expects.
"""

from __future__ import annotations

import base64

from coordinator_core.adapters.base import (
    AccessToken,
    CallOutcome,
    CredentialOutcome,
    DeclaredRefusal,
    ObservationOutcome,
    Pending,
    PreparationOutcome,
    Prepared,
    ReceiptConfirmed,
    ReceiptExpired,
    ReceiptOutcome,
    ReceiptUnavailable,
    ReceiptUnresolved,
    Refused,
    Retryable,
    Success,
    Uncertain,
)
from coordinator_core.engine import events as engine

__all__ = [
    "call_event",
    "credential_event",
    "observation_event",
    "preparation_event",
    "receipt_event",
]


def call_event(step: str, outcome: CallOutcome) -> engine.CallOutcome:
    """A `Dispatch` answered (07 §7.4 step 8)."""
    if isinstance(outcome, Success):
        return engine.CallOutcome.success(step, outcome.output)
    if isinstance(outcome, DeclaredRefusal):
        return engine.CallOutcome(step, "declared-refusal", refusal_code=outcome.code)
    if isinstance(outcome, ReceiptExpired):
        return engine.CallOutcome(step, "receipt-expired", code="receipt-expired")
    if isinstance(outcome, Refused):
        return engine.CallOutcome(step, "refused", code=outcome.failure_code)
    if isinstance(outcome, Retryable):
        return engine.CallOutcome(step, "retryable", code=outcome.failure_code)
    assert isinstance(outcome, Uncertain)
    return engine.CallOutcome(step, "uncertain", code=outcome.failure_code)


def preparation_event(
    step: str, outcome: PreparationOutcome
) -> engine.PreparationDone | engine.CallOutcome:
    """A `Prepare` answered: the base64 preparation, or a definite failure (07 §7.4 step 3)."""
    if isinstance(outcome, Prepared):
        text = base64.b64encode(outcome.preparation).decode("ascii")
        return engine.PreparationDone(step, text)
    return call_event(step, outcome)


def credential_event(
    step: str, outcome: CredentialOutcome
) -> engine.ReadyToSend | engine.CallOutcome:
    """An `ObtainCredential` answered (07 §7.4 step 5); the token itself stays with the
    worker, which hands it to the `Dispatch` that follows."""
    if isinstance(outcome, AccessToken):
        return engine.ReadyToSend(step)
    return call_event(step, outcome)


def observation_event(step: str, outcome: ObservationOutcome) -> engine.ObservationOutcome:
    """An `Observe` answered (07 §7.3 step 3)."""
    if isinstance(outcome, Success):
        return engine.ObservationOutcome.complete(step, outcome.output)
    if isinstance(outcome, Pending):
        return engine.ObservationOutcome(step, "pending")
    if isinstance(outcome, Refused):
        return engine.ObservationOutcome(step, "refused", code=outcome.failure_code)
    return engine.ObservationOutcome(step, "retryable", code=outcome.failure_code)


def receipt_event(step: str, generation: int, outcome: ReceiptOutcome) -> engine.ReceiptAnswer:
    """A `LookupReceipt` answered (07 §9.2 table)."""
    if isinstance(outcome, ReceiptConfirmed):
        return engine.ReceiptAnswer.confirmed(step, generation, outcome.receipt)
    if isinstance(outcome, ReceiptExpired):
        return engine.ReceiptAnswer(step, generation, "expired")
    if isinstance(outcome, ReceiptUnresolved):
        if outcome.reason == "key-reused":
            return engine.ReceiptAnswer(step, generation, "key-reused")
        return engine.ReceiptAnswer(step, generation, "unresolved")
    assert isinstance(outcome, ReceiptUnavailable)
    return engine.ReceiptAnswer(step, generation, "unavailable")
