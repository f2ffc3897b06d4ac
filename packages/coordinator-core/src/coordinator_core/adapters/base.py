"""The adapter protocol: closed outcome types, the frozen command, connections (contract 08 §9).

Architecture rule 6: an external call ends in exactly one of a closed set of outcomes, and
nothing else leaves an adapter. Every type here carries codes only (the closed failure codes of
08 §10, or a refusal code matching the grammar of 01 §3), never a request value, a response
body or a credential; `repr` hides the members that hold such data.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Literal, Protocol, runtime_checkable

from coordinator_core.definition.schema_dialect import compile_validator
from coordinator_core.values import StrictJsonError, check_json_value, parse_strict_json

__all__ = [
    "AccessToken",
    "Adapter",
    "CallOutcome",
    "ClientCredentials",
    "CommandFormatError",
    "Connection",
    "CredentialOutcome",
    "DeclaredRefusal",
    "EvaluationConnection",
    "ExternalConnection",
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
]

PRODUCTS: Final = frozenset({"breg", "casework", "messaging", "scheduling"})
EXTERNAL_HTTP: Final = "external-http"
EVALUATION: Final = "evaluation"


# -- outcomes (08 §9) --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Success:
    """The product answered as expected; `output` is the step output (a bounded JSON value)."""

    kind: ClassVar[Literal["success"]] = "success"
    output: Any = field(repr=False)


@dataclass(frozen=True, slots=True)
class DeclaredRefusal:
    """An owner-declared, no-effect refusal (BReg `422 action.refused`); `code` matches the
    refusal-code grammar of 01 §3."""

    kind: ClassVar[Literal["declared-refusal"]] = "declared-refusal"
    code: str


@dataclass(frozen=True, slots=True)
class Refused:
    """Definitely not done, and asking again will not change that."""

    kind: ClassVar[Literal["refused"]] = "refused"
    failure_code: str


@dataclass(frozen=True, slots=True)
class Retryable:
    """Definitely not executed; a later attempt may succeed. `retry_after` (seconds) is the
    product's hint when it gave one; the worker's retry policy ignores it (07 §7.4)."""

    kind: ClassVar[Literal["retryable"]] = "retryable"
    failure_code: str
    retry_after: float | None = None


@dataclass(frozen=True, slots=True)
class Uncertain:
    """The request may have executed: only the same command (or a receipt) can settle it."""

    kind: ClassVar[Literal["uncertain"]] = "uncertain"
    failure_code: str


@dataclass(frozen=True, slots=True)
class ReceiptExpired:
    """The product no longer remembers the command key (`410 idempotency.expired`): the
    original effect can never be confirmed or denied through it."""

    kind: ClassVar[Literal["receipt-expired"]] = "receipt-expired"


@dataclass(frozen=True, slots=True)
class Pending:
    """An observation found the awaited completion not yet available (Casework `202`)."""

    kind: ClassVar[Literal["pending"]] = "pending"


@dataclass(frozen=True, slots=True)
class Prepared:
    """A preparation succeeded; `preparation` are the bytes frozen next to the request."""

    kind: ClassVar[Literal["prepared"]] = "prepared"
    preparation: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class ReceiptConfirmed:
    """The receipt lookup returned the original answer for the original key and request."""

    kind: ClassVar[Literal["confirmed"]] = "confirmed"
    receipt: Any = field(repr=False)


@dataclass(frozen=True, slots=True)
class ReceiptUnresolved:
    """The lookup proves nothing: no submission under the key by this principal (`missing`),
    or a different request under it (`key-reused`). Never evidence that nothing happened."""

    kind: ClassVar[Literal["unresolved"]] = "unresolved"
    reason: Literal["missing", "key-reused"]


@dataclass(frozen=True, slots=True)
class ReceiptUnavailable:
    """The lookup could not be answered (transport, credential or any other answer);
    `failure_code` says why, for logs only."""

    kind: ClassVar[Literal["unavailable"]] = "unavailable"
    failure_code: str


CallOutcome = Success | DeclaredRefusal | Refused | Retryable | Uncertain | ReceiptExpired
"""What one call attempt ends in (08 §9, 07 §7.4 step 8)."""

PreparationOutcome = Prepared | Refused | Retryable
"""A preparation reads but never mutates, so it is never uncertain (07 §7.4 step 3)."""

ObservationOutcome = Success | Pending | Refused | Retryable
"""One read of an awaited completion (07 §7.3); reads are never uncertain."""

ReceiptOutcome = ReceiptConfirmed | ReceiptUnresolved | ReceiptExpired | ReceiptUnavailable
"""The answer to a reconcile's receipt lookup (08 §5.2, 07 §9.2)."""


class AccessToken:
    """A bearer token obtained for one attempt. Its text never appears in `repr` or `str`.

    `AccessToken(None)` is the credential of a connection that sends none (an external GET
    without `authorization`, an evaluation connection with `local`): the attempt still has
    its credential step, and `authorization()` answers None.
    """

    __slots__ = ("_value",)

    def __init__(self, value: str | None) -> None:
        self._value = value

    def authorization(self) -> str | None:
        """The `Authorization` header value, or None when the connection sends none."""
        return None if self._value is None else "Bearer " + self._value

    def __repr__(self) -> str:
        return "AccessToken(<redacted>)"

    __str__ = __repr__


CredentialOutcome = AccessToken | Refused | Retryable
"""A token endpoint exchange (08 §2.2): a token, or a definite failure before any send."""


# -- connections (05 §5.1, §5.4) ----------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class ClientCredentials:
    """A connection's service identity (05 §5.4) with its signing key already resolved.

    `signing_key` is the private JWK: a JSON object, or its JSON text as read from the secret
    file; it is parsed when first used, so a malformed key is the attempt's refused
    `credential-configuration`, not a crash at start.
    """

    token_endpoint: str
    client_id: str
    signing_key: Mapping[str, Any] | str | bytes = field(repr=False)
    resource: str
    scopes: tuple[str, ...]
    client_assertion_audience: str | None = None

    @property
    def audience(self) -> str:
        return self.client_assertion_audience or self.token_endpoint


@dataclass(frozen=True, slots=True, eq=False)
class ProductConnection:
    """One `connections.<name>` entry of the runtime file, bound and resolved."""

    name: str
    product: str
    base_url: str
    authorization: ClientCredentials
    profile: str | None = None

    def __post_init__(self) -> None:
        # 05 §5.1: "a trailing / is removed"; operation paths are appended to it.
        object.__setattr__(self, "base_url", self.base_url.rstrip("/"))

    @classmethod
    def from_runtime(
        cls,
        name: str,
        config: Mapping[str, Any],
        *,
        signing_key: Mapping[str, Any] | str | bytes,
    ) -> ProductConnection:
        """Build a connection from its decoded runtime entry (already checked by 05 §9) and
        the resolved `signingKeyRef` secret."""
        authorization = config["authorization"]
        return cls(
            name=name,
            product=str(config["product"]),
            base_url=str(config["baseUrl"]),
            profile=config.get("profile"),
            authorization=ClientCredentials(
                token_endpoint=str(authorization["tokenEndpoint"]),
                client_id=str(authorization["clientId"]),
                signing_key=signing_key,
                resource=str(authorization["resource"]),
                scopes=tuple(str(scope) for scope in authorization["scopes"]),
                client_assertion_audience=authorization.get("clientAssertionAudience"),
            ),
        )


@dataclass(frozen=True, slots=True, eq=False)
class ExternalConnection:
    """One `externalHttpConnections.<name>` entry (05 §5.2), defaults filled, its signing key
    (when it has `authorization`) resolved. `response_schema` is the schema over the output
    `{status, body}`."""

    name: str
    base_url: str
    paths: frozenset[str]
    query_parameters: frozenset[str]
    response_schema: Any = field(repr=False)
    authorization: ClientCredentials | None = None
    attempt_timeout_milliseconds: int = 2000
    maximum_response_bytes: int = 65_536

    _validator: Any = field(init=False, repr=False, default=None)

    product: ClassVar[str] = EXTERNAL_HTTP

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_url", self.base_url.rstrip("/"))
        # Compiled once per bound connection (its dialect was checked with the runtime file,
        # 05 §9 V5), not once per request.
        object.__setattr__(self, "_validator", compile_validator(self.response_schema))

    def accepts(self, output: Any) -> bool:
        """Whether a call's output `{status, body}` satisfies `responseSchema` (08 §7)."""
        return bool(self._validator.is_valid(output))


@dataclass(frozen=True, slots=True, eq=False)
class EvaluationConnection:
    """One `evaluationConnections.<name>` entry (05 §5.3), defaults filled. `bearer_token` is
    the resolved `tokenRef` secret, None for `local` (no authorisation)."""

    name: str
    base_url: str
    model: str
    bearer_token: str | None = field(default=None, repr=False)
    protocol: str = "system-one"
    attempt_timeout_milliseconds: int = 8000
    maximum_request_bytes: int = 65_536
    maximum_response_bytes: int = 65_536

    product: ClassVar[str] = EVALUATION

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_url", self.base_url.rstrip("/"))


Connection = ProductConnection | ExternalConnection | EvaluationConnection
"""A bound connection of any of the three maps of the runtime file (05 §5)."""


# -- the frozen command (07 §7.4 step 2) -----------------------------------------------------------


class CommandFormatError(ValueError):
    """A stored command or preparation is not in the form this build writes."""


@dataclass(frozen=True, slots=True)
class PreparedCommand:
    """The frozen request of a call, as the engine sealed it, plus what the worker adds.

    `operation`, `connection`, `input` and `idempotency_key` come from the sealed command
    `{alias, operation, connection, input, idempotencyKey?}`; `action` is the alias's BReg
    action id (from the snapshot); `preparation` the frozen preparation bytes, if any.
    """

    operation: str
    connection: str
    input: Any = field(repr=False)
    idempotency_key: str | None = field(default=None, repr=False)
    action: str | None = None
    preparation: bytes | None = field(default=None, repr=False)
    alias: str | None = None

    @classmethod
    def from_frozen(
        cls,
        command: str | bytes,
        *,
        action: str | None = None,
        preparation: str | bytes | None = None,
    ) -> PreparedCommand:
        """Read a sealed command text; `preparation` is the engine's base64 text (or raw
        bytes). Raises CommandFormatError, whose message never quotes the command."""
        try:
            frozen = parse_strict_json(command)
            check_json_value(frozen)
        except (StrictJsonError, ValueError) as exc:
            raise CommandFormatError("The frozen command is not strict JSON.") from exc
        if not isinstance(frozen, dict):
            raise CommandFormatError("The frozen command is not an object.")
        operation, connection = frozen.get("operation"), frozen.get("connection")
        key, alias = frozen.get("idempotencyKey"), frozen.get("alias")
        if not isinstance(operation, str) or not isinstance(connection, str):
            raise CommandFormatError("The frozen command has no operation or connection.")
        if "input" not in frozen:
            raise CommandFormatError("The frozen command has no input.")
        if key is not None and not isinstance(key, str):
            raise CommandFormatError("The frozen command key is not a string.")
        if isinstance(preparation, str):
            try:
                preparation = base64.b64decode(preparation, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise CommandFormatError("The frozen preparation is not base64.") from exc
        return cls(
            operation=operation,
            connection=connection,
            input=frozen["input"],
            idempotency_key=key,
            action=action,
            preparation=preparation,
            alias=alias if isinstance(alias, str) else None,
        )


# -- the protocol ------------------------------------------------------------------------------------


@runtime_checkable
class Adapter(Protocol):
    """One product's adapter. Every method returns one member of its closed outcome union and
    never raises: transport errors, malformed answers, bound violations, unexpected statuses
    and internal faults are all classified (08 §9).

    `attempt_deadline` is an instant on the `time.monotonic()` clock: no request runs past it.
    `credential` is the token the worker obtained for this attempt (07 §7.4 step 5); when it is
    None the adapter obtains a fresh one itself. Tokens are never reused across attempts.
    """

    product: str

    @property
    def operations(self) -> frozenset[str]: ...

    def obtain_credential(
        self, connection: Connection, *, attempt_deadline: float
    ) -> CredentialOutcome: ...

    def call(
        self,
        connection: Connection,
        command: PreparedCommand,
        *,
        attempt_deadline: float,
        credential: AccessToken | None = None,
        traceparent: str | None = None,
    ) -> CallOutcome: ...

    def prepare(
        self,
        connection: Connection,
        command: PreparedCommand,
        *,
        attempt_deadline: float,
        credential: AccessToken | None = None,
        traceparent: str | None = None,
    ) -> PreparationOutcome: ...

    def observe(
        self,
        connection: Connection,
        operation: str,
        reference: Any,
        *,
        attempt_deadline: float,
        credential: AccessToken | None = None,
        traceparent: str | None = None,
    ) -> ObservationOutcome: ...

    def lookup_receipt(
        self,
        connection: Connection,
        command: PreparedCommand,
        *,
        attempt_deadline: float,
        credential: AccessToken | None = None,
        traceparent: str | None = None,
    ) -> ReceiptOutcome: ...
