"""The shared body of the product adapters: one attempt's requests and the §9 default table.

`ProductAdapter` implements the `Adapter` protocol once: it checks the binding, obtains the
credential, runs the product module's handler, and turns whatever happens into exactly one
member of the method's closed outcome union. Product modules only describe their wire
shapes and the rows of contract 08 §3–§6 that take precedence over the defaults of §9.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any, ClassVar, Final, Literal

from coordinator_core.adapters.base import (
    AccessToken,
    CallOutcome,
    Connection,
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
from coordinator_core.adapters.http import (
    Answer,
    DestinationRefused,
    HttpSettings,
    TransportFailure,
    exchange,
    json_body,
    problem_of,
)
from coordinator_core.adapters.validation import ShapeError
from coordinator_core.operations import CATALOG
from coordinator_core.values import canonical_json

__all__ = [
    "Attempt",
    "Effect",
    "ProductAdapter",
    "Stop",
    "classify_status",
    "invalid_response",
    "receipt_lookup",
]

Effect = Literal["read", "mutation"]

# 08 §5.1: the key is 1–128 characters of 0x21–0x7E (the command key is 64 hex digits).
_IDEMPOTENCY_KEY: Final = re.compile(r"[\x21-\x7e]{1,128}")
_TRACEPARENT: Final = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")


class Stop(Exception):
    """An early, already classified end of an adapter method (never leaves this package)."""

    def __init__(self, outcome: CallOutcome | Pending) -> None:
        super().__init__("The attempt stopped with a classified outcome.")
        self.outcome = outcome


def invalid_response(effect: Effect) -> CallOutcome:
    """A 2xx with an invalid or unreadable body (08 §9)."""
    return Uncertain("invalid-response") if effect == "mutation" else Refused("invalid-response")


def classify_status(answer: Answer, effect: Effect) -> CallOutcome:
    """The default rows of 08 §9 for an answer that is not the operation's expected success.

    Product-specific rows (declared refusals, Casework's 404/410 on results, Messaging's 422
    `template.locale-unavailable`) are the product module's, applied before this.
    """
    status = answer.status
    mutation = effect == "mutation"
    problem = problem_of(answer) if status >= 400 else None
    code = problem.code if problem is not None else None
    if 200 <= status < 300:
        return invalid_response(effect)
    if status == 408:
        return Retryable("transport-unavailable", answer.retry_after)
    if status == 429:
        return Retryable("rate-limited", answer.retry_after)
    if status == 503 and code == "service.unavailable":
        return Retryable("transport-unavailable", answer.retry_after)
    if 500 <= status < 600:
        return Uncertain("transport-uncertain") if mutation else Retryable("transport-unavailable")
    if status in (400, 413):
        return Refused("invalid-command")
    if status in (401, 403):
        return Refused("product-forbidden")
    if status == 404:
        return Refused("product-not-found")
    if mutation and status == 410 and code == "idempotency.expired":
        return ReceiptExpired()
    if 400 <= status < 500:
        return Refused("product-refused")  # includes 409 idempotency.key-reused
    # 1xx, 3xx (never followed, 08 §2.1) and statuses outside the registry: an error of the
    # call. A read was not served; a mutation's request reached something that answered
    # after reading it, so whether it executed is unknown.
    return Uncertain("remote-uncertain") if mutation else Refused("product-refused")


class Attempt:
    """One adapter method's requests: the connection, the budget and the one credential."""

    def __init__(
        self,
        adapter: ProductAdapter,
        connection: Connection,
        *,
        budget_effect: Effect,
        attempt_deadline: float,
        credential: AccessToken | None,
        traceparent: str | None,
    ) -> None:
        self.adapter = adapter
        self.connection = connection
        self.budget_effect = budget_effect
        self.attempt_deadline = attempt_deadline
        self.credential = credential
        self.traceparent = (
            traceparent if traceparent and _TRACEPARENT.fullmatch(traceparent) else None
        )
        self.mutation_started = False
        self.settings = adapter.settings_for(connection)

    def token(self) -> AccessToken:
        """The attempt's credential, obtained now when the worker did not supply one."""
        if self.credential is None:
            obtained = self.adapter.obtain_credential(
                self.connection, attempt_deadline=self.attempt_deadline
            )
            if not isinstance(obtained, AccessToken):
                raise Stop(obtained)
            self.credential = obtained
        return self.credential

    def send(
        self,
        method: str,
        path: str,
        *,
        effect: Effect,
        body: bytes | None = None,
        key: str | None = None,
    ) -> Answer:
        """One request to `baseUrl + path`; transport failures stop the attempt, classified."""
        headers = self.adapter.product_headers(self.connection)
        authorization = self.token().authorization()
        if authorization is not None:
            headers["Authorization"] = authorization
        if key is not None:
            if _IDEMPOTENCY_KEY.fullmatch(key) is None:
                raise Stop(Refused("invalid-command"))
            headers["Idempotency-Key"] = key
        if body is not None:
            headers["Content-Type"] = "application/json"
        if self.traceparent is not None:
            headers["traceparent"] = self.traceparent
        if effect == "mutation":
            self.mutation_started = True
        try:
            return exchange(
                method,
                self.connection.base_url + path,
                headers=headers,
                body=body,
                attempt_deadline=self.attempt_deadline,
                settings=self.settings,
            )
        except DestinationRefused:
            raise Stop(Refused(self.adapter.destination_refused_code)) from None
        except TransportFailure as failure:
            raise Stop(self.adapter.transport_outcome(self, failure, effect)) from None

    def stop_unless(self, answer: Answer, status: int | tuple[int, ...], effect: Effect) -> None:
        """Stop with the default classification unless the answer has an expected status."""
        expected = (status,) if isinstance(status, int) else status
        if answer.status not in expected:
            raise Stop(classify_status(answer, effect))

    @staticmethod
    def body(answer: Answer, effect: Effect) -> Any:
        """The strict, bounded JSON body of an expected 2xx, or stop `invalid-response`."""
        value = json_body(answer)
        if value is None:
            raise Stop(invalid_response(effect))
        return value


class ProductAdapter:
    """The `Adapter` protocol for one product; subclasses implement the `handle_*` hooks.

    Hooks may raise `Stop(outcome)` and `ShapeError` (an invalid command before anything was
    sent: refused `invalid-command`); every other exception becomes the fallback of its kind
    (`remote-uncertain` once a mutating request may have left, else `remote-retryable`).
    """

    product: str = ""
    call_operations: ClassVar[frozenset[str]] = frozenset()
    invalid_command_code: ClassVar[str] = "invalid-command"
    """The code of a command refused before anything was sent (a `ShapeError`)."""
    destination_refused_code: ClassVar[str] = "product-refused"
    """The code of a destination the client policy refuses (08 §2.1)."""

    def __init__(
        self,
        settings: HttpSettings | None = None,
        *,
        credentials: CredentialIssuer | None = None,
    ) -> None:
        self.settings = settings or HttpSettings()
        self.credentials = credentials or CredentialIssuer(self.settings)

    @property
    def operations(self) -> frozenset[str]:
        return self.call_operations

    # -- hooks ---------------------------------------------------------------------------------

    def product_headers(self, connection: Connection) -> dict[str, str]:
        """Headers every request of this product carries (BReg: its access profile)."""
        return {}

    def settings_for(self, connection: Connection) -> HttpSettings:
        """The client policy of one connection: external GET and evaluation connections
        configure their own total timeout and response maximum (08 §2.1, 05 §5.2–§5.3)."""
        if isinstance(connection, ProductConnection):
            return self.settings
        return dataclasses.replace(
            self.settings,
            total_timeout=connection.attempt_timeout_milliseconds / 1000,
            max_body_bytes=connection.maximum_response_bytes,
        )

    def transport_outcome(
        self, attempt: Attempt, failure: TransportFailure, effect: Effect
    ) -> CallOutcome:
        """08 §9: budget exhausted; failure after sending began; connection not established."""
        if failure.budget:
            if attempt.budget_effect == "mutation":
                return Uncertain("attempt-timeout")
            return Retryable("attempt-timeout")
        if failure.sent and effect == "mutation":
            return Uncertain("transport-uncertain")
        return Retryable("transport-unavailable")

    def handle_call(self, attempt: Attempt, command: PreparedCommand) -> CallOutcome:
        raise Stop(Refused("remote-refused"))

    def handle_prepare(self, attempt: Attempt, command: PreparedCommand) -> bytes:
        raise Stop(Refused("remote-refused"))

    def handle_observe(self, attempt: Attempt, operation: str, reference: Any) -> Any:
        """Return the completion's output, or raise Stop(Pending()) / Stop(outcome)."""
        raise Stop(Refused("remote-refused"))

    def handle_receipt(self, attempt: Attempt, command: PreparedCommand) -> ReceiptOutcome:
        return ReceiptUnavailable("remote-refused")

    # -- the protocol -----------------------------------------------------------------------------

    def obtain_credential(
        self, connection: Connection, *, attempt_deadline: float
    ) -> CredentialOutcome:
        if connection.product != self.product:
            return Refused("operation-unbound")
        try:
            return self.credential_for(connection, attempt_deadline)
        except Exception:  # nothing but an outcome leaves an adapter
            return Retryable("remote-retryable")

    def credential_for(self, connection: Connection, attempt_deadline: float) -> CredentialOutcome:
        """A fresh token for one attempt (08 §2.2); products all have an `authorization`."""
        assert isinstance(connection, ProductConnection)
        return self.credentials.obtain(connection.authorization, attempt_deadline=attempt_deadline)

    def _attempt(
        self,
        connection: Connection,
        effect: Effect,
        attempt_deadline: float,
        credential: AccessToken | None,
        traceparent: str | None,
    ) -> Attempt:
        return Attempt(
            self,
            connection,
            budget_effect=effect,
            attempt_deadline=attempt_deadline,
            credential=credential,
            traceparent=traceparent,
        )

    def _unbound(self, connection: Connection, operation: str) -> CallOutcome | None:
        """`operation-unbound` when the connection is not this product's; `remote-refused`
        when this build's adapter does not serve the operation."""
        if operation not in self.operations or operation not in CATALOG:
            return Refused("remote-refused")
        if connection.product != self.product:
            return Refused("operation-unbound")
        return None

    def call(
        self,
        connection: Connection,
        command: PreparedCommand,
        *,
        attempt_deadline: float,
        credential: AccessToken | None = None,
        traceparent: str | None = None,
    ) -> CallOutcome:
        unbound = self._unbound(connection, command.operation)
        if unbound is not None:
            return unbound
        effect: Effect = "mutation" if CATALOG[command.operation].effect != "read" else "read"
        attempt = self._attempt(connection, effect, attempt_deadline, credential, traceparent)
        try:
            if CATALOG[command.operation].key_required and command.idempotency_key is None:
                return Refused(self.invalid_command_code)
            outcome = self.handle_call(attempt, command)
        except Stop as stop:
            if isinstance(stop.outcome, Pending):  # only observations can be pending
                return Refused("remote-refused")
            outcome = stop.outcome
        except ShapeError:
            # Commands are checked before anything is sent; after a mutation may have left,
            # a shape fault is internal, never a statement about the command.
            if attempt.mutation_started:
                return _fallback(attempt)
            return Refused(self.invalid_command_code)
        except Exception:  # nothing but an outcome leaves an adapter
            return _fallback(attempt)
        if (
            isinstance(outcome, DeclaredRefusal)
            and not CATALOG[command.operation].declared_refusals
        ):
            return Refused("product-refused")
        return outcome

    def prepare(
        self,
        connection: Connection,
        command: PreparedCommand,
        *,
        attempt_deadline: float,
        credential: AccessToken | None = None,
        traceparent: str | None = None,
    ) -> PreparationOutcome:
        unbound = self._unbound(connection, command.operation)
        if unbound is not None:
            return _definite(unbound)
        if not CATALOG[command.operation].requires_preparation:
            return Refused("remote-refused")
        attempt = self._attempt(connection, "read", attempt_deadline, credential, traceparent)
        try:
            return Prepared(self.handle_prepare(attempt, command))
        except Stop as stop:
            return _definite(stop.outcome)
        except ShapeError:
            return Refused(self.invalid_command_code)
        except Exception:  # preparation sends nothing that mutates
            return Retryable("remote-retryable")

    def observe(
        self,
        connection: Connection,
        operation: str,
        reference: Any,
        *,
        attempt_deadline: float,
        credential: AccessToken | None = None,
        traceparent: str | None = None,
    ) -> ObservationOutcome:
        unbound = self._unbound(connection, operation)
        if unbound is not None:
            return _definite(unbound)
        attempt = self._attempt(connection, "read", attempt_deadline, credential, traceparent)
        try:
            return Success(self.handle_observe(attempt, operation, reference))
        except Stop as stop:
            if isinstance(stop.outcome, Pending):
                return stop.outcome
            return _definite(stop.outcome)
        except ShapeError:
            return Refused("invalid-command")
        except Exception:  # an observation is a read
            return Retryable("remote-retryable")

    def lookup_receipt(
        self,
        connection: Connection,
        command: PreparedCommand,
        *,
        attempt_deadline: float,
        credential: AccessToken | None = None,
        traceparent: str | None = None,
    ) -> ReceiptOutcome:
        unbound = self._unbound(connection, command.operation)
        if unbound is not None:
            return ReceiptUnavailable(_code_of(unbound))
        if not CATALOG[command.operation].read_receipt:
            return ReceiptUnavailable("remote-refused")  # reconcile never asks (07 §9.2)
        attempt = self._attempt(connection, "read", attempt_deadline, credential, traceparent)
        try:
            return self.handle_receipt(attempt, command)
        except Stop as stop:
            return ReceiptUnavailable(_code_of(stop.outcome))
        except ShapeError:
            return ReceiptUnavailable("invalid-command")
        except Exception:  # a lookup never creates anything
            return ReceiptUnavailable("remote-retryable")


def receipt_lookup(
    attempt: Attempt,
    path: str,
    command: PreparedCommand,
    check: Callable[[Any], object],
) -> ReceiptOutcome:
    """The receipt lookup of 08 §5.2 (Messaging; Scheduling §6.3): the original request under
    the original key, answered by the table of §5.2. `check` raises ShapeError for a body
    that is not the operation's receipt."""
    key = command.idempotency_key
    if key is None:
        return ReceiptUnavailable("invalid-command")
    answer = attempt.send("POST", path, effect="read", body=canonical_json(command.input), key=key)
    problem = problem_of(answer) if answer.status >= 400 else None
    code = problem.code if problem is not None else None
    if answer.status == 200:
        receipt = json_body(answer)
        try:
            check(receipt)
        except ShapeError:
            return ReceiptUnavailable("invalid-response")
        return ReceiptConfirmed(receipt)
    if answer.status == 404 and code == "receipt.unresolved":
        return ReceiptUnresolved("missing")
    if answer.status == 409 and code == "idempotency.key-reused":
        return ReceiptUnresolved("key-reused")
    if answer.status == 410 and code == "idempotency.expired":
        return ReceiptExpired()
    return ReceiptUnavailable(_code_of(classify_status(answer, "read")))


def _fallback(attempt: Attempt) -> CallOutcome:
    """08 §9: an unexpected internal condition maps to the fallback of its kind."""
    if attempt.mutation_started:
        return Uncertain("remote-uncertain")
    return Retryable("remote-retryable")


def _definite(outcome: CallOutcome | Pending) -> Refused | Retryable:
    """A read-only method's stop: only retryable or refused can result (nothing mutated)."""
    if isinstance(outcome, Refused | Retryable):
        return outcome
    return Retryable(_code_of(outcome))


def _code_of(outcome: CallOutcome | Pending) -> str:
    if isinstance(outcome, Refused | Retryable | Uncertain):
        return outcome.failure_code
    if isinstance(outcome, ReceiptExpired):
        return "receipt-expired"
    return "remote-retryable"
