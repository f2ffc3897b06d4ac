"""Adapters: HTTP calls to BReg, Casework, Messaging, Scheduling, external GET and evaluation (08).

Shell code inside core: it does I/O (httpx) and signs (PyJWT over cryptography), and nothing
in the pure half imports it. An adapter carries out the engine's own I/O commands (`Prepare`,
`ObtainCredential`, `Dispatch`, `Observe`, `LookupReceipt`) and answers each with the engine's
own event for it (architecture rule 6: that closed set, and nothing else, leaves an adapter).
"""

from __future__ import annotations

from coordinator_core.shell.adapters.base import (
    AccessToken,
    Adapter,
    ClientCredentials,
    CommandFormatError,
    Connection,
    EvaluationConnection,
    ExternalConnection,
    PreparedCommand,
    ProductConnection,
)
from coordinator_core.shell.adapters.credentials import CredentialIssuer
from coordinator_core.shell.adapters.http import HttpSettings
from coordinator_core.shell.adapters.registry import (
    SERVED_OPERATIONS,
    Adapters,
    product_adapters,
    unserved_operations,
)

__all__ = [
    "SERVED_OPERATIONS",
    "AccessToken",
    "Adapter",
    "Adapters",
    "ClientCredentials",
    "CommandFormatError",
    "Connection",
    "CredentialIssuer",
    "EvaluationConnection",
    "ExternalConnection",
    "HttpSettings",
    "PreparedCommand",
    "ProductConnection",
    "product_adapters",
    "unserved_operations",
]
