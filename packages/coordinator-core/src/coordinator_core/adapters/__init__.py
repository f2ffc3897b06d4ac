"""Adapters: HTTP calls to BReg, Casework, Messaging, Scheduling, external GET and evaluation (08).

Shell code inside core: it does I/O (httpx) and signs (PyJWT over cryptography), and nothing
in the pure half imports it. Every call ends in one member of a closed outcome set
(architecture rule 6); `events` maps those outcomes onto the engine's events.
"""

from __future__ import annotations

from coordinator_core.adapters.base import (
    AccessToken,
    Adapter,
    CallOutcome,
    ClientCredentials,
    CommandFormatError,
    Connection,
    CredentialOutcome,
    DeclaredRefusal,
    EvaluationConnection,
    ExternalConnection,
    ObservationOutcome,
    Pending,
    PreparationOutcome,
    Prepared,
    PreparedCommand,
    ProductConnection,
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
from coordinator_core.adapters.credentials import CredentialIssuer
from coordinator_core.adapters.events import (
    call_event,
    credential_event,
    observation_event,
    preparation_event,
    receipt_event,
)
from coordinator_core.adapters.http import HttpSettings
from coordinator_core.adapters.registry import (
    SERVED_OPERATIONS,
    Adapters,
    bound_connections,
    product_adapters,
    unserved_operations,
)

__all__ = [
    "SERVED_OPERATIONS",
    "AccessToken",
    "Adapter",
    "Adapters",
    "CallOutcome",
    "ClientCredentials",
    "CommandFormatError",
    "Connection",
    "CredentialIssuer",
    "CredentialOutcome",
    "DeclaredRefusal",
    "EvaluationConnection",
    "ExternalConnection",
    "HttpSettings",
    "ObservationOutcome",
    "Pending",
    "PreparationOutcome",
    "Prepared",
    "PreparedCommand",
    "ProductConnection",
    "ReceiptConfirmed",
    "ReceiptExpired",
    "ReceiptOutcome",
    "ReceiptUnavailable",
    "ReceiptUnresolved",
    "Refused",
    "Retryable",
    "Success",
    "Uncertain",
    "bound_connections",
    "call_event",
    "credential_event",
    "observation_event",
    "preparation_event",
    "product_adapters",
    "receipt_event",
    "unserved_operations",
]
