"""The closed failure codes of a run (file 08 §10) and the recovery classes built on them."""

from __future__ import annotations

from typing import Final

__all__ = [
    "ADAPTER_CODES",
    "FAILURE_CODES",
    "FALLBACK_CODES",
    "NON_RECOVERABLE_CODES",
    "REPLY_CODES",
    "RUN_CODES",
]

ADAPTER_CODES: Final = frozenset(
    {
        "credential-unavailable",
        "credential-configuration",
        "credential-refused",
        "product-forbidden",
        "product-not-found",
        "product-refused",
        "invalid-command",
        "invalid-response",
        "transport-unavailable",
        "transport-uncertain",
        "rate-limited",
        "operation-unbound",
        "attempt-timeout",
        "action-unavailable",
        "prepared-command-mismatch",
        "completion-expired",
        "receipt-expired",
        "external-invalid-command",
        "external-destination-refused",
        "external-redirect",
        "external-invalid-response",
        "external-unavailable",
        "evaluation-invalid-command",
        "evaluation-invalid-response",
        "evaluation-unavailable",
        "evaluation-uncertain",
        "evaluation-refused",
    }
)
FALLBACK_CODES: Final = frozenset({"remote-retryable", "remote-refused", "remote-uncertain"})
RUN_CODES: Final = frozenset(
    {
        "mapping-invalid",
        "choice-invalid",
        "outcome-invalid",
        "wait-timed-out",
        "deadline-reached",
        "protected-state-invalid",
        "snapshot-incompatible",
        "binding-conflict",
        "step-invalid",
        "preparation-invalid",
        "preparation-too-large",
    }
)
FAILURE_CODES: Final = ADAPTER_CODES | FALLBACK_CODES | RUN_CODES
"""Only these are ever stored as a failure code (08 §10)."""

REPLY_CODES: Final = ADAPTER_CODES | FALLBACK_CODES
"""The codes a product outcome (and a scenario reply) may carry (08 §10, 04 §2.2)."""

NON_RECOVERABLE_CODES: Final = frozenset(
    {
        "mapping-invalid",
        "choice-invalid",
        "outcome-invalid",
        "wait-timed-out",
        "step-invalid",
        "protected-state-invalid",
        "snapshot-incompatible",
        "preparation-too-large",
    }
)
"""Failures `retry-same` can never recover (07 §9.1)."""
