"""The worker's one entry point to the adapters: operation → adapter, name → connection.

Every operation of the catalog that a run can contain has exactly one adapter here
(`SERVED_OPERATIONS`; a test walks the catalog, and `unserved_operations` lets a deployment
refuse a workflow before any run is admitted). A connection the runtime file does not bind,
or binds in another map or to another product, is refused `operation-unbound` (08 §9) before
any adapter runs. Each method takes the engine's I/O command and answers the engine's event for
it; like the adapters, nothing but such an event (or an attempt's credential) leaves here.
With tracing on (`shell.observe.tracing`), each call a bound adapter makes is one
`coordinator.product-call` span with its outcome word, and the product is sent that span's
`traceparent` (random identifiers only; nothing is sent while tracing is off).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, TypeVar

from coordinator_core.engine.commands import (
    Dispatch,
    LookupReceipt,
    Observe,
    ObtainCredential,
    Prepare,
)
from coordinator_core.engine.inputs import (
    CallOutcome,
    ObservationOutcome,
    PreparationDone,
    ReceiptAnswer,
)
from coordinator_core.operations import product_of
from coordinator_core.shell.adapters.base import (
    AccessToken,
    Adapter,
    Connection,
    PreparedCommand,
)
from coordinator_core.shell.adapters.breg import BregAdapter
from coordinator_core.shell.adapters.casework import CaseworkAdapter
from coordinator_core.shell.adapters.credentials import CredentialIssuer
from coordinator_core.shell.adapters.evaluation import EvaluationAdapter
from coordinator_core.shell.adapters.external import ExternalHttpAdapter
from coordinator_core.shell.adapters.http import HttpSettings
from coordinator_core.shell.adapters.messaging import MessagingAdapter
from coordinator_core.shell.adapters.scheduling import SchedulingAdapter
from coordinator_core.shell.observe import tracing

__all__ = [
    "SERVED_OPERATIONS",
    "Adapters",
    "product_adapters",
    "unserved_operations",
]

_ADAPTER_CLASSES: Final = (
    BregAdapter,
    CaseworkAdapter,
    MessagingAdapter,
    SchedulingAdapter,
    ExternalHttpAdapter,
    EvaluationAdapter,
)

SERVED_OPERATIONS: Final = frozenset().union(*(cls.call_operations for cls in _ADAPTER_CLASSES))
"""Every operation an adapter of this build calls (observations are served by the adapter of
the observed operation's product)."""


def product_adapters(
    settings: HttpSettings | None = None, *, credentials: CredentialIssuer | None = None
) -> tuple[Adapter, ...]:
    """One adapter per product of 08 §1, sharing the client policy and token issuer."""
    settings = settings or HttpSettings()
    credentials = credentials or CredentialIssuer(settings)
    return tuple(cls(settings, credentials=credentials) for cls in _ADAPTER_CLASSES)


def unserved_operations(workflow: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The `(alias, operation)` pairs of a decoded workflow that no adapter of this build
    serves (`breg.propose-action/v1` among them: `check` refuses it, and no adapter sends it)."""
    found: list[tuple[str, str]] = []
    operations = workflow.get("operations")
    if not isinstance(operations, Mapping):
        return found
    for alias, entry in sorted(operations.items()):
        operation = entry.get("operation") if isinstance(entry, Mapping) else None
        if not isinstance(operation, str):
            continue
        if operation not in SERVED_OPERATIONS:
            found.append((str(alias), operation))
    return found


class Adapters:
    """The bound product connections of one runtime file and the adapters that call them."""

    def __init__(
        self,
        connections: Mapping[str, Connection],
        *,
        settings: HttpSettings | None = None,
        adapters: Iterable[Adapter] | None = None,
    ) -> None:
        self._connections = dict(connections)
        chosen = product_adapters(settings) if adapters is None else tuple(adapters)
        self._adapters = {adapter.product: adapter for adapter in chosen}

    def _bound(
        self, step: str, operation: str, connection: str
    ) -> tuple[Adapter, Connection] | CallOutcome:
        adapter = self._adapters.get(product_of(operation))
        if adapter is None or operation not in adapter.operations:
            # No adapter of this registry serves the operation. A deployment refuses such a
            # workflow before admitting runs (`unserved_operations`); never `operation-unbound`,
            # which is reserved for a connection that really is unbound.
            return CallOutcome(step, "refused", code="remote-refused")
        bound = self._connections.get(connection)
        if bound is None or bound.product != adapter.product:
            return CallOutcome(step, "refused", code="operation-unbound")
        return adapter, bound

    def obtain_credential(
        self, command: ObtainCredential, *, attempt_deadline: float
    ) -> AccessToken | CallOutcome:
        """A fresh token for the named connection (the engine's `ObtainCredential` names only
        the connection: an identity belongs to the connection, not to an operation), or the
        definite failure that answers the command. The worker keeps the token for the
        `Dispatch` and answers `ReadyToSend` itself: a token never travels in an event."""
        bound = self._connections.get(command.connection)
        adapter = self._adapters.get(bound.product) if bound is not None else None
        if bound is None or adapter is None:
            return CallOutcome(command.step, "refused", code="operation-unbound")
        return adapter.obtain_credential(bound, command, attempt_deadline=attempt_deadline)

    def prepare(
        self,
        command: Prepare,
        frozen: PreparedCommand,
        *,
        attempt_deadline: float,
        credential: AccessToken | None = None,
        traceparent: str | None = None,
    ) -> PreparationDone | CallOutcome:
        found = self._bound(command.step, command.operation, command.connection)
        if isinstance(found, CallOutcome):
            return found
        adapter, bound = found
        return _traced(
            "prepare",
            command,
            traceparent,
            lambda span_parent: adapter.prepare(
                bound,
                command,
                frozen,
                attempt_deadline=attempt_deadline,
                credential=credential,
                traceparent=span_parent,
            ),
            _prepared,
        )

    def dispatch(
        self,
        command: Dispatch,
        frozen: PreparedCommand,
        *,
        attempt_deadline: float,
        credential: AccessToken | None = None,
        traceparent: str | None = None,
    ) -> CallOutcome:
        found = self._bound(command.step, command.operation, command.connection)
        if isinstance(found, CallOutcome):
            return found
        adapter, bound = found
        return _traced(
            "dispatch",
            command,
            traceparent,
            lambda span_parent: adapter.dispatch(
                bound,
                command,
                frozen,
                attempt_deadline=attempt_deadline,
                credential=credential,
                traceparent=span_parent,
            ),
            lambda answer: (answer.outcome, answer.code),
        )

    def observe(
        self,
        command: Observe,
        *,
        attempt_deadline: float,
        credential: AccessToken | None = None,
        traceparent: str | None = None,
    ) -> ObservationOutcome:
        found = self._bound(command.step, command.operation, command.connection)
        if isinstance(found, CallOutcome):
            return ObservationOutcome(command.step, "refused", code=found.code)
        adapter, bound = found
        return _traced(
            "observe",
            command,
            traceparent,
            lambda span_parent: adapter.observe(
                bound,
                command,
                attempt_deadline=attempt_deadline,
                credential=credential,
                traceparent=span_parent,
            ),
            lambda answer: (answer.outcome, answer.code),
        )

    def lookup_receipt(
        self,
        command: LookupReceipt,
        frozen: PreparedCommand,
        *,
        attempt_deadline: float,
        credential: AccessToken | None = None,
        traceparent: str | None = None,
    ) -> ReceiptAnswer:
        found = self._bound(command.step, command.operation, command.connection)
        if isinstance(found, CallOutcome):
            return ReceiptAnswer(command.step, command.generation, "unavailable")
        adapter, bound = found
        return _traced(
            "receipt-lookup",
            command,
            traceparent,
            lambda span_parent: adapter.lookup_receipt(
                bound,
                command,
                frozen,
                attempt_deadline=attempt_deadline,
                credential=credential,
                traceparent=span_parent,
            ),
            lambda answer: (answer.answer, None),
        )


Answer = TypeVar("Answer")


def _traced(
    call: str,
    command: Prepare | Dispatch | Observe | LookupReceipt,
    traceparent: str | None,
    send: Callable[[str | None], Answer],
    words: Callable[[Answer], tuple[str, str | None]],
) -> Answer:
    """`send(traceparent)`; while tracing is on, inside the call's product-call span, whose
    `traceparent` the product gets unless the caller gave one, and which records the outcome
    word (and failure code) that `words` reads off the answer."""
    if not tracing.enabled():
        return send(traceparent)
    with tracing.product_call(call, command.operation, command.step) as span:
        answer = send(traceparent or span.traceparent)
        span.outcome(*words(answer))
        return answer


def _prepared(answer: PreparationDone | CallOutcome) -> tuple[str, str | None]:
    """The outcome word of a preparation (its span): `prepared`, or the call outcome's."""
    if isinstance(answer, CallOutcome):
        return answer.outcome, answer.code
    return "prepared", None
