"""The shared body of the product adapters: one attempt's requests and the 08 §9 default table.

`ProductAdapter` implements the `Adapter` protocol once: it checks the binding, obtains the
credential, runs the product module's handler, and turns whatever happens into exactly one of
the engine's events that answers the command, built with its step. Product modules only
describe their wire shapes and the rows of contract 08 §3–§6 that take precedence over the
defaults of §9, classifying through their `Attempt` straight into the engine's kinds.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from typing import Any, ClassVar, Final, Literal

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
from coordinator_core.operations import CATALOG
from coordinator_core.shell.adapters.base import (
    AccessToken,
    Connection,
    PreparedCommand,
    ProductConnection,
)
from coordinator_core.shell.adapters.credentials import CredentialIssuer
from coordinator_core.shell.adapters.destinations import DestinationRefused
from coordinator_core.shell.adapters.http import (
    HttpSettings,
    ProductAnswer,
    exchange,
    json_body,
    problem_of,
)
from coordinator_core.shell.adapters.transport import TransportFailure
from coordinator_core.shell.adapters.validation import ShapeError
from coordinator_core.shell.observe import tracing
from coordinator_core.values import canonical_json

__all__ = ["Attempt", "AttemptEffect", "ProductAdapter", "Stop", "receipt_lookup"]

AttemptEffect = Literal["read", "mutation"]

# 08 §5.1: the key is 1–128 characters of 0x21–0x7E (the command key is 64 hex digits).
_IDEMPOTENCY_KEY: Final = re.compile(r"[\x21-\x7e]{1,128}")
_TRACEPARENT: Final = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")


class Stop(Exception):
    """An early, already classified end of an adapter method (never leaves this package):
    a call's outcome, or an observation found pending."""

    def __init__(self, outcome: CallOutcome | ObservationOutcome) -> None:
        super().__init__("The attempt stopped with a classified outcome.")
        self.outcome = outcome


class Attempt:
    """One adapter method's requests: the step it answers, the connection, the budget and the
    one credential. Its outcome constructors are the engine's events for that step."""

    def __init__(
        self,
        adapter: ProductAdapter,
        connection: Connection,
        *,
        step: str,
        budget_effect: AttemptEffect,
        attempt_deadline: float,
        credential: AccessToken | None,
        traceparent: str | None,
    ) -> None:
        self.adapter = adapter
        self.connection = connection
        self.step = step
        self.budget_effect = budget_effect
        self.attempt_deadline = attempt_deadline
        self.credential = credential
        self.traceparent = (
            traceparent if traceparent and _TRACEPARENT.fullmatch(traceparent) else None
        )
        self.mutation_started = False
        self.settings = adapter.settings_for(connection)

    # -- outcomes (08 §9) ----------------------------------------------------------------------

    def success(self, output: Any) -> CallOutcome:
        """The product answered as expected; `output` is the step output (a JSON value)."""
        return CallOutcome.success(self.step, output)

    def declared_refusal(self, refusal_code: str) -> CallOutcome:
        """An owner-declared, no-effect refusal; the code matches the grammar of 01 §3."""
        return CallOutcome(self.step, "declared-refusal", refusal_code=refusal_code)

    def refused(self, code: str) -> CallOutcome:
        """Definitely not done, and asking again will not change that."""
        return CallOutcome(self.step, "refused", code=code)

    def retryable(self, code: str) -> CallOutcome:
        """Definitely not executed; a later attempt may succeed."""
        return CallOutcome(self.step, "retryable", code=code)

    def uncertain(self, code: str) -> CallOutcome:
        """The request may have executed: only the same command (or a receipt) can settle it."""
        return CallOutcome(self.step, "uncertain", code=code)

    def receipt_expired(self) -> CallOutcome:
        """The product no longer remembers the command key (`410 idempotency.expired`)."""
        return CallOutcome(self.step, "receipt-expired", code="receipt-expired")

    def pending(self) -> ObservationOutcome:
        """An observation found the awaited completion not yet available."""
        return ObservationOutcome(self.step, "pending")

    def invalid_response(self, effect: AttemptEffect) -> CallOutcome:
        """A 2xx with an invalid or unreadable body (08 §9)."""
        if effect == "mutation":
            return self.uncertain("invalid-response")
        return self.refused("invalid-response")

    def classify(self, answer: ProductAnswer, effect: AttemptEffect) -> CallOutcome:
        """The default rows of 08 §9 for an answer that is not the operation's expected success.

        Product-specific rows (declared refusals, Casework's 404/410 on results, Messaging's
        422 `template.locale-unavailable`) are the product module's, applied before this. A
        `Retry-After` is not kept: the worker's retry policy ignores it (07 §7.4).
        """
        status = answer.status
        mutation = effect == "mutation"
        problem = problem_of(answer) if status >= 400 else None
        code = problem.code if problem is not None else None
        if 200 <= status < 300:
            return self.invalid_response(effect)
        if status == 408:
            return self.retryable("transport-unavailable")
        if status == 429:
            return self.retryable("rate-limited")
        if status == 503 and code == "service.unavailable":
            return self.retryable("transport-unavailable")
        if 500 <= status < 600:
            if mutation:
                return self.uncertain("transport-uncertain")
            return self.retryable("transport-unavailable")
        if status in (400, 413):
            return self.refused("invalid-command")
        if status in (401, 403):
            return self.refused("product-forbidden")
        if status == 404:
            return self.refused("product-not-found")
        if mutation and status == 410 and code == "idempotency.expired":
            return self.receipt_expired()
        if 400 <= status < 500:
            return self.refused("product-refused")  # includes 409 idempotency.key-reused
        # 1xx, 3xx (never followed, 08 §2.1) and statuses outside the registry: an error of the
        # call. A read was not served; a mutation's request reached something that answered
        # after reading it, so whether it executed is unknown.
        return self.uncertain("remote-uncertain") if mutation else self.refused("product-refused")

    # -- requests ----------------------------------------------------------------------------------

    def token(self) -> AccessToken:
        """The attempt's credential, obtained now when the worker did not supply one."""
        if self.credential is None:
            obtained = self.adapter.fresh_credential(
                self.connection, self.step, self.attempt_deadline
            )
            if isinstance(obtained, CallOutcome):
                raise Stop(obtained)
            self.credential = obtained
        return self.credential

    def send(
        self,
        method: str,
        path: str,
        *,
        effect: AttemptEffect,
        body: bytes | None = None,
        key: str | None = None,
    ) -> ProductAnswer:
        """One request to `baseUrl + path`; transport failures stop the attempt, classified."""
        headers = self.adapter.product_headers(self)
        authorization = self.token().authorization()
        if authorization is not None:
            headers["Authorization"] = authorization
        if key is not None:
            if _IDEMPOTENCY_KEY.fullmatch(key) is None:
                raise Stop(self.refused("invalid-command"))
            headers["Idempotency-Key"] = key
        if body is not None:
            headers["Content-Type"] = "application/json"
        if self.traceparent is not None:
            headers["traceparent"] = self.traceparent
        if effect == "mutation":
            self.mutation_started = True
        try:
            answer = exchange(
                method,
                self.connection.base_url + path,
                headers=headers,
                body=body,
                attempt_deadline=self.attempt_deadline,
                settings=self.settings,
            )
        except DestinationRefused:
            raise Stop(self.refused(self.adapter.destination_refused_code)) from None
        except TransportFailure as failure:
            raise Stop(self.adapter.transport_outcome(self, failure, effect)) from None
        tracing.http_status(answer.status)  # on the product-call span, when tracing is on
        return answer

    def stop_unless(
        self, answer: ProductAnswer, status: int | tuple[int, ...], effect: AttemptEffect
    ) -> None:
        """Stop with the default classification unless the answer has an expected status."""
        expected = (status,) if isinstance(status, int) else status
        if answer.status not in expected:
            raise Stop(self.classify(answer, effect))

    def body(self, answer: ProductAnswer, effect: AttemptEffect) -> Any:
        """The strict, bounded JSON body of an expected 2xx, or stop `invalid-response`."""
        value = json_body(answer)
        if value is None:
            raise Stop(self.invalid_response(effect))
        return value

    def fallback(self) -> CallOutcome:
        """08 §9: an unexpected internal condition maps to the fallback of its kind."""
        if self.mutation_started:
            return self.uncertain("remote-uncertain")
        return self.retryable("remote-retryable")


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

    def product_headers(self, attempt: Attempt) -> dict[str, str]:
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
        self, attempt: Attempt, failure: TransportFailure, effect: AttemptEffect
    ) -> CallOutcome:
        """08 §9: budget exhausted; failure after sending began; connection not established."""
        if failure.budget:
            if attempt.budget_effect == "mutation":
                return attempt.uncertain("attempt-timeout")
            return attempt.retryable("attempt-timeout")
        if failure.sent and effect == "mutation":
            return attempt.uncertain("transport-uncertain")
        return attempt.retryable("transport-unavailable")

    def handle_call(self, attempt: Attempt, command: PreparedCommand) -> CallOutcome:
        raise Stop(attempt.refused("remote-refused"))

    def handle_prepare(self, attempt: Attempt, command: PreparedCommand) -> bytes:
        raise Stop(attempt.refused("remote-refused"))

    def handle_observe(self, attempt: Attempt, operation: str, reference: Any) -> Any:
        """Return the completion's output, or raise Stop(attempt.pending()) / Stop(outcome)."""
        raise Stop(attempt.refused("remote-refused"))

    def handle_receipt(
        self, attempt: Attempt, lookup: LookupReceipt, command: PreparedCommand
    ) -> ReceiptAnswer:
        return _unavailable(lookup)

    def credential_for(
        self, connection: Connection, step: str, attempt_deadline: float
    ) -> AccessToken | CallOutcome:
        """A fresh token for one attempt (08 §2.2); products all have an `authorization`."""
        assert isinstance(connection, ProductConnection)
        return self.credentials.obtain(
            connection.authorization, step=step, attempt_deadline=attempt_deadline
        )

    # -- the protocol -----------------------------------------------------------------------------

    def obtain_credential(
        self, connection: Connection, command: ObtainCredential, *, attempt_deadline: float
    ) -> AccessToken | CallOutcome:
        return self.fresh_credential(connection, command.step, attempt_deadline)

    def fresh_credential(
        self, connection: Connection, step: str, attempt_deadline: float
    ) -> AccessToken | CallOutcome:
        """The credential of one attempt of `step`, or its definite failure before any send."""
        if connection.product != self.product:
            return CallOutcome(step, "refused", code="operation-unbound")
        try:
            return self.credential_for(connection, step, attempt_deadline)
        except Exception:  # nothing but an outcome leaves an adapter
            return CallOutcome(step, "retryable", code="remote-retryable")

    def _attempt(
        self,
        connection: Connection,
        step: str,
        effect: AttemptEffect,
        attempt_deadline: float,
        credential: AccessToken | None,
        traceparent: str | None,
    ) -> Attempt:
        return Attempt(
            self,
            connection,
            step=step,
            budget_effect=effect,
            attempt_deadline=attempt_deadline,
            credential=credential,
            traceparent=traceparent,
        )

    def _unbound(self, connection: Connection, step: str, operation: str) -> CallOutcome | None:
        """`operation-unbound` when the connection is not this product's; `remote-refused`
        when this build's adapter does not serve the operation."""
        if operation not in self.operations or operation not in CATALOG:
            return CallOutcome(step, "refused", code="remote-refused")
        if connection.product != self.product:
            return CallOutcome(step, "refused", code="operation-unbound")
        return None

    def dispatch(
        self,
        connection: Connection,
        command: Dispatch,
        frozen: PreparedCommand,
        *,
        attempt_deadline: float,
        credential: AccessToken | None = None,
        traceparent: str | None = None,
    ) -> CallOutcome:
        step, operation = command.step, command.operation
        unbound = self._unbound(connection, step, operation)
        if unbound is not None:
            return unbound
        effect: AttemptEffect = "mutation" if CATALOG[operation].effect != "read" else "read"
        attempt = self._attempt(connection, step, effect, attempt_deadline, credential, traceparent)
        try:
            if CATALOG[operation].key_required and frozen.idempotency_key is None:
                return attempt.refused(self.invalid_command_code)
            outcome = self.handle_call(attempt, frozen)
        except Stop as stop:
            if isinstance(stop.outcome, ObservationOutcome):  # only observations are pending
                return attempt.refused("remote-refused")
            outcome = stop.outcome
        except ShapeError:
            # Commands are checked before anything is sent; after a mutation may have left,
            # a shape fault is internal, never a statement about the command.
            if attempt.mutation_started:
                return attempt.fallback()
            return attempt.refused(self.invalid_command_code)
        except Exception:  # nothing but an outcome leaves an adapter
            return attempt.fallback()
        if outcome.outcome == "declared-refusal" and not CATALOG[operation].declared_refusals:
            return attempt.refused("product-refused")
        return outcome

    def prepare(
        self,
        connection: Connection,
        command: Prepare,
        frozen: PreparedCommand,
        *,
        attempt_deadline: float,
        credential: AccessToken | None = None,
        traceparent: str | None = None,
    ) -> PreparationDone | CallOutcome:
        step = command.step
        unbound = self._unbound(connection, step, command.operation)
        if unbound is not None:
            return _definite(unbound)
        if not CATALOG[command.operation].requires_preparation:
            return CallOutcome(step, "refused", code="remote-refused")
        attempt = self._attempt(connection, step, "read", attempt_deadline, credential, traceparent)
        try:
            preparation = self.handle_prepare(attempt, frozen)
        except Stop as stop:
            return _definite(stop.outcome)
        except ShapeError:
            return attempt.refused(self.invalid_command_code)
        except Exception:  # preparation sends nothing that mutates
            return attempt.retryable("remote-retryable")
        return PreparationDone(step, preparation)

    def observe(
        self,
        connection: Connection,
        command: Observe,
        *,
        attempt_deadline: float,
        credential: AccessToken | None = None,
        traceparent: str | None = None,
    ) -> ObservationOutcome:
        step = command.step
        unbound = self._unbound(connection, step, command.operation)
        if unbound is not None:
            return _observed(_definite(unbound))
        attempt = self._attempt(connection, step, "read", attempt_deadline, credential, traceparent)
        try:
            reference = None if command.reference is None else json.loads(command.reference)
            output = self.handle_observe(attempt, command.operation, reference)
        except Stop as stop:
            if isinstance(stop.outcome, ObservationOutcome):
                return stop.outcome
            return _observed(_definite(stop.outcome))
        except ShapeError:
            return ObservationOutcome(step, "refused", code="invalid-command")
        except Exception:  # an observation is a read
            return ObservationOutcome(step, "retryable", code="remote-retryable")
        return ObservationOutcome.complete(step, output)

    def lookup_receipt(
        self,
        connection: Connection,
        command: LookupReceipt,
        frozen: PreparedCommand,
        *,
        attempt_deadline: float,
        credential: AccessToken | None = None,
        traceparent: str | None = None,
    ) -> ReceiptAnswer:
        if self._unbound(connection, command.step, command.operation) is not None:
            return _unavailable(command)
        if not CATALOG[command.operation].read_receipt:
            return _unavailable(command)  # reconcile never asks (07 §9.2)
        attempt = self._attempt(
            connection, command.step, "read", attempt_deadline, credential, traceparent
        )
        try:
            return self.handle_receipt(attempt, command, frozen)
        except Exception:  # Stop, ShapeError or a fault: a lookup never creates anything
            return _unavailable(command)


def receipt_lookup(
    attempt: Attempt,
    lookup: LookupReceipt,
    path: str,
    command: PreparedCommand,
    check: Callable[[Any], object],
) -> ReceiptAnswer:
    """The receipt lookup of 08 §5.2 (Messaging; Scheduling §6.3): the original request under
    the original key, answered by the table of §5.2. `check` raises ShapeError for a body
    that is not the operation's receipt."""
    step, generation = lookup.step, lookup.generation
    key = command.idempotency_key
    if key is None:
        return _unavailable(lookup)
    answer = attempt.send("POST", path, effect="read", body=canonical_json(command.input), key=key)
    problem = problem_of(answer) if answer.status >= 400 else None
    code = problem.code if problem is not None else None
    if answer.status == 200:
        receipt = json_body(answer)
        try:
            check(receipt)
        except ShapeError:
            return _unavailable(lookup)  # invalid-response
        return ReceiptAnswer.confirmed(step, generation, receipt)
    if answer.status == 404 and code == "receipt.unresolved":
        return ReceiptAnswer(step, generation, "unresolved")  # no submission under the key
    if answer.status == 409 and code == "idempotency.key-reused":
        return ReceiptAnswer(step, generation, "key-reused")
    if answer.status == 410 and code == "idempotency.expired":
        return ReceiptAnswer(step, generation, "expired")
    return _unavailable(lookup)  # any other answer (08 §5.2)


def _unavailable(lookup: LookupReceipt) -> ReceiptAnswer:
    """The lookup could not be answered (transport, credential, shape or any other answer)."""
    return ReceiptAnswer(lookup.step, lookup.generation, "unavailable")


def _definite(outcome: CallOutcome | ObservationOutcome) -> CallOutcome:
    """A read-only method's stop: only retryable or refused can result (nothing mutated)."""
    if isinstance(outcome, CallOutcome) and outcome.outcome in ("refused", "retryable"):
        return outcome
    return CallOutcome(outcome.step, "retryable", code=outcome.code or "remote-retryable")


def _observed(outcome: CallOutcome) -> ObservationOutcome:
    """A definite (refused or retryable) failure of an observation's read."""
    kind: Literal["refused", "retryable"] = (
        "refused" if outcome.outcome == "refused" else "retryable"
    )
    return ObservationOutcome(outcome.step, kind, code=outcome.code)
