"""Product adapters: HTTP calls to BReg, Casework, Messaging and Scheduling (contract 08).

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
    CredentialOutcome,
    DeclaredRefusal,
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
from coordinator_core.adapters.registry import Adapters, product_adapters

__all__ = [
    "AccessToken",
    "Adapter",
    "Adapters",
    "CallOutcome",
    "ClientCredentials",
    "CommandFormatError",
    "CredentialIssuer",
    "CredentialOutcome",
    "DeclaredRefusal",
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
    "call_event",
    "credential_event",
    "observation_event",
    "preparation_event",
    "product_adapters",
    "receipt_event",
]
