"""The worker's one entry point to the product adapters: operation → adapter, name → connection.

A connection the runtime file does not bind, or binds to another product, is refused
`operation-unbound` (08 §9) before any adapter runs; a frozen command that cannot be read is
refused `prepared-command-mismatch`. Like the adapters, nothing but an outcome leaves here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from coordinator_core.adapters.base import (
    AccessToken,
    Adapter,
    CallOutcome,
    CredentialOutcome,
    ObservationOutcome,
    PreparationOutcome,
    PreparedCommand,
    ProductConnection,
    ReceiptOutcome,
    ReceiptUnavailable,
    Refused,
)
from coordinator_core.adapters.breg import BregAdapter
from coordinator_core.adapters.casework import CaseworkAdapter
from coordinator_core.adapters.credentials import CredentialIssuer
from coordinator_core.adapters.http import HttpSettings
from coordinator_core.adapters.messaging import MessagingAdapter
from coordinator_core.adapters.scheduling import SchedulingAdapter
from coordinator_core.operations import product_of

__all__ = ["Adapters", "product_adapters"]


def product_adapters(
    settings: HttpSettings | None = None, *, credentials: CredentialIssuer | None = None
) -> tuple[Adapter, ...]:
    """One adapter per product of 05 §5.1, sharing the client policy and token issuer."""
    settings = settings or HttpSettings()
    credentials = credentials or CredentialIssuer(settings)
    return tuple(
        cls(settings, credentials=credentials)
        for cls in (BregAdapter, CaseworkAdapter, MessagingAdapter, SchedulingAdapter)
    )


class Adapters:
    """The bound product connections of one runtime file and the adapters that call them."""

    def __init__(
        self,
        connections: Mapping[str, ProductConnection],
        *,
        settings: HttpSettings | None = None,
        adapters: Iterable[Adapter] | None = None,
    ) -> None:
        self._connections = dict(connections)
        chosen = product_adapters(settings) if adapters is None else tuple(adapters)
        self._adapters = {adapter.product: adapter for adapter in chosen}

    def _bound(
        self, operation: str, connection: str
    ) -> tuple[Adapter, ProductConnection] | Refused:
        adapter = self._adapters.get(product_of(operation))
        if adapter is None or operation not in adapter.operations:
            return Refused("remote-refused")  # this build serves no such operation here
        bound = self._connections.get(connection)
        if bound is None or bound.product != adapter.product:
            return Refused("operation-unbound")
        return adapter, bound

    def obtain_credential(self, connection: str, *, attempt_deadline: float) -> CredentialOutcome:
        """A fresh token for the named connection (the engine's `ObtainCredential` names only
        the connection: an identity belongs to the connection, not to an operation)."""
        bound = self._connections.get(connection)
        adapter = self._adapters.get(bound.product) if bound is not None else None
        if bound is None or adapter is None:
            return Refused("operation-unbound")
        return adapter.obtain_credential(bound, attempt_deadline=attempt_deadline)

    def call(
        self,
        command: PreparedCommand,
        *,
        attempt_deadline: float,
        credential: AccessToken | None = None,
        traceparent: str | None = None,
    ) -> CallOutcome:
        found = self._bound(command.operation, command.connection)
        if isinstance(found, Refused):
            return found
        adapter, bound = found
        return adapter.call(
            bound,
            command,
            attempt_deadline=attempt_deadline,
            credential=credential,
            traceparent=traceparent,
        )

    def prepare(
        self,
        command: PreparedCommand,
        *,
        attempt_deadline: float,
        credential: AccessToken | None = None,
        traceparent: str | None = None,
    ) -> PreparationOutcome:
        found = self._bound(command.operation, command.connection)
        if isinstance(found, Refused):
            return found
        adapter, bound = found
        return adapter.prepare(
            bound,
            command,
            attempt_deadline=attempt_deadline,
            credential=credential,
            traceparent=traceparent,
        )

    def observe(
        self,
        operation: str,
        connection: str,
        reference: Any,
        *,
        attempt_deadline: float,
        credential: AccessToken | None = None,
        traceparent: str | None = None,
    ) -> ObservationOutcome:
        found = self._bound(operation, connection)
        if isinstance(found, Refused):
            return found
        adapter, bound = found
        return adapter.observe(
            bound,
            operation,
            reference,
            attempt_deadline=attempt_deadline,
            credential=credential,
            traceparent=traceparent,
        )

    def lookup_receipt(
        self,
        command: PreparedCommand,
        *,
        attempt_deadline: float,
        credential: AccessToken | None = None,
        traceparent: str | None = None,
    ) -> ReceiptOutcome:
        found = self._bound(command.operation, command.connection)
        if isinstance(found, Refused):
            return ReceiptUnavailable(found.failure_code)
        adapter, bound = found
        return adapter.lookup_receipt(
            bound,
            command,
            attempt_deadline=attempt_deadline,
            credential=credential,
            traceparent=traceparent,
        )
