"""The adapter protocol: the frozen command, connections, the credential (contract 08 §9).

Architecture rule 6: an external call ends in exactly one of a closed set of outcomes, and
nothing else leaves an adapter. That set is the engine's own answers to its I/O commands
(`engine.inputs`: `CallOutcome`, `PreparationDone`, `ObservationOutcome`, `ReceiptAnswer`),
built with the step of the command they answer; there is no second spelling of it here. They
carry closed codes (the failure codes of 08 §10, or a refusal code matching the grammar of 01 §3)
and, for a success, the step output as canonical JSON; never a request value, a response body
or a credential in a message, and `repr` hides every member that holds such data.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Protocol, runtime_checkable

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
from coordinator_core.jsonschema.dialect import compile_validator
from coordinator_core.values import StrictJsonError, check_json_value, parse_strict_json

__all__ = [
    "AccessToken",
    "Adapter",
    "ClientCredentials",
    "CommandFormatError",
    "Connection",
    "EvaluationConnection",
    "ExternalConnection",
    "PreparedCommand",
    "ProductConnection",
]

PRODUCTS: Final = frozenset({"breg", "casework", "messaging", "scheduling"})
EXTERNAL_HTTP: Final = "external-http"
EVALUATION: Final = "evaluation"


# -- the credential of one attempt (08 §2.2) -------------------------------------------------


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
        preparation: bytes | None = None,
    ) -> PreparedCommand:
        """Read a sealed command text; `preparation` is the frozen preparation's bytes.
        Raises CommandFormatError, whose message never quotes the command."""
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
        parsed = cls(
            operation=operation,
            connection=connection,
            input=frozen["input"],
            idempotency_key=key,
            action=action,
            alias=alias if isinstance(alias, str) else None,
        )
        return parsed.with_preparation(preparation)

    def with_preparation(self, preparation: bytes | None) -> PreparedCommand:
        """This command with the frozen preparation next to it, so a `Dispatch` after its
        `Prepare` reuses the command parsed for it."""
        if preparation == self.preparation:
            return self
        return dataclasses.replace(self, preparation=preparation)


# -- the protocol ------------------------------------------------------------------------------------


@runtime_checkable
class Adapter(Protocol):
    """One product's adapter. Each method takes the engine's I/O command it carries out (and,
    for a frozen request, that command parsed once per attempt) and returns the engine's event
    that answers it, built with the command's step. It never raises: transport errors,
    malformed answers, bound violations, unexpected statuses and internal faults are all
    classified (08 §9).

    `attempt_deadline` is an instant on the `time.monotonic()` clock: no request runs past it.
    `credential` is the token the worker obtained for this attempt (07 §7.4 step 5); when it is
    None the adapter obtains a fresh one itself. Tokens are never reused across attempts, and
    never travel in an event: `obtain_credential` answers the token itself, or the engine's
    definite failure (`ReadyToSend` is the worker's, which keeps the token for the dispatch).
    """

    product: str

    @property
    def operations(self) -> frozenset[str]: ...

    def obtain_credential(
        self, connection: Connection, command: ObtainCredential, *, attempt_deadline: float
    ) -> AccessToken | CallOutcome: ...

    def prepare(
        self,
        connection: Connection,
        command: Prepare,
        frozen: PreparedCommand,
        *,
        attempt_deadline: float,
        credential: AccessToken | None = None,
        traceparent: str | None = None,
    ) -> PreparationDone | CallOutcome: ...

    def dispatch(
        self,
        connection: Connection,
        command: Dispatch,
        frozen: PreparedCommand,
        *,
        attempt_deadline: float,
        credential: AccessToken | None = None,
        traceparent: str | None = None,
    ) -> CallOutcome: ...

    def observe(
        self,
        connection: Connection,
        command: Observe,
        *,
        attempt_deadline: float,
        credential: AccessToken | None = None,
        traceparent: str | None = None,
    ) -> ObservationOutcome: ...

    def lookup_receipt(
        self,
        connection: Connection,
        command: LookupReceipt,
        frozen: PreparedCommand,
        *,
        attempt_deadline: float,
        credential: AccessToken | None = None,
        traceparent: str | None = None,
    ) -> ReceiptAnswer: ...
