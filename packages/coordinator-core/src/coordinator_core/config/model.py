"""The typed, frozen runtime file as the service and the deployment commands use it (contract 05).

Every class here is a frozen dataclass built by `coordinator_core.config.build.build_deployment`
from a runtime file that passed the whole check of 05 §9 with environment substitution (the
shell loads it: `coordinator_core.shell.deployment.load_deployment`). Values are final: defaults
are filled, base URLs have their trailing `/` removed, lists whose order means nothing are
frozensets, and secret references are `SecretRef`s that know where they were written, so that a
diagnostic about a secret can point at the member that names it without quoting the reference
or the secret. Nothing in this module holds a secret: see `coordinator_core.shell.secrets`.

Each connection knows its identity object of 05 §10 (`identity()`); `binding_digest(deployment,
workflow)` is the digest over the identities of the connections a workflow uses.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Final, Literal

from coordinator_core import limits
from coordinator_core.authoring.yamlreader import escape_pointer_token
from coordinator_core.errors import CoordinatorError, Diagnostic, exit_code_of
from coordinator_core.values import canonical_json, sha256_label

if TYPE_CHECKING:
    from coordinator_core.config.read import RuntimeCheck

__all__ = [
    "Authentication",
    "BearerAuthorization",
    "ClientAuthorization",
    "Database",
    "Deployment",
    "DeploymentRefused",
    "DeploymentSettings",
    "EvaluationAuthorization",
    "EvaluationConnectionConfig",
    "EventSourceConfig",
    "ExternalHttpConnectionConfig",
    "JwksDiscovery",
    "JwksSource",
    "JwksStatic",
    "JwksUri",
    "Listener",
    "LocalAuthorization",
    "PackagePin",
    "Policy",
    "PostgresqlDatabase",
    "Product",
    "ProductConnectionConfig",
    "SecretProviders",
    "SecretRef",
    "SqliteDatabase",
    "TlsTermination",
    "WorkerSettings",
    "binding_digest",
    "connection_identity",
    "connection_names",
]

Product = Literal["breg", "casework", "messaging", "scheduling"]
TlsTermination = Literal["operator-controlled-upstream", "development-loopback"]

REFERENCE_PREFIX: Final = "secret:"
_UNBOUND: Final = "The workflow uses a connection that the runtime file does not bind."


class DeploymentRefused(CoordinatorError):
    """The runtime file (or a secret it names) cannot be used; carries every diagnostic.

    `diagnostic` (the one `CoordinatorError` carries) is the first error of the highest exit
    class; `diagnostics` holds all of them, warnings included, in the order found, and
    `exit_code` is their maximum exit class (02 §3).
    """

    def __init__(self, diagnostics: list[Diagnostic] | tuple[Diagnostic, ...]) -> None:
        found = tuple(diagnostics)
        if not found:
            raise ValueError("A refusal needs at least one diagnostic.")
        worst = exit_code_of(list(found))
        primary = next(
            (d for d in found if d.effective_severity == "error" and d.exit_code == worst),
            found[0],
        )
        super().__init__(primary)
        self.diagnostics: tuple[Diagnostic, ...] = found
        self.exit_code: int = worst


@dataclass(frozen=True, slots=True)
class SecretRef:
    """A secret reference (05 §2.1) and where it was written.

    `pointer` is the RFC 6901 pointer of the member that holds it (e.g.
    `/deployment/stateKeys/1/keyRef`); `line`/`column` are that value's position. The reference
    text is structural, but diagnostics point at the member instead of quoting it (05 §2.2:
    no message contains a secret's path).
    """

    provider: Literal["env", "file"]
    name: str
    pointer: str
    line: int | None = field(default=None, compare=False)
    column: int | None = field(default=None, compare=False)

    @property
    def text(self) -> str:
        """The reference as written: `secret:env/NAME` or `secret:file/name`."""
        return f"{REFERENCE_PREFIX}{self.provider}/{self.name}"


@dataclass(frozen=True, slots=True)
class SecretProviders:
    """`secretProviders` (05 §2.1): which providers are declared."""

    environment: bool
    file_root: str | None


@dataclass(frozen=True, slots=True)
class PostgresqlDatabase:
    """`database.postgresql` (05 §4.1). The URLs are secrets; see `Secrets.database_url`."""

    kind: ClassVar[Literal["postgresql"]] = "postgresql"
    runtime_url_ref: SecretRef
    migration_url_ref: SecretRef
    namespace: str
    trusted_root_certificate_ref: SecretRef | None = None


@dataclass(frozen=True, slots=True)
class SqliteDatabase:
    """`database.sqlite` (05 §4.2): the absolute path of the database file."""

    kind: ClassVar[Literal["sqlite"]] = "sqlite"
    path: str


Database = PostgresqlDatabase | SqliteDatabase


@dataclass(frozen=True, slots=True)
class ClientAuthorization:
    """`authorization` (05 §5.4): OAuth client credentials with a signed client assertion.

    `client_assertion_audience` is already defaulted to `token_endpoint`; `scopes` keep the
    written order (the token request sends them in that order).
    """

    token_endpoint: str
    client_id: str
    client_assertion_audience: str
    signing_key_ref: SecretRef
    resource: str
    scopes: tuple[str, ...]

    def identity(self) -> dict[str, Any]:
        """The members of the binding digest's identity (05 §10), scopes sorted."""
        return {
            "tokenEndpoint": self.token_endpoint,
            "clientId": self.client_id,
            "clientAssertionAudience": self.client_assertion_audience,
            "resource": self.resource,
            "scopes": sorted(self.scopes),
        }


@dataclass(frozen=True, slots=True)
class ProductConnectionConfig:
    """`connections.<name>` (05 §5.1). `base_url` has its trailing `/` removed."""

    abi: ClassVar[str] = "coordinator-adapters/v4"
    name: str
    product: Product
    base_url: str
    authorization: ClientAuthorization
    profile: str | None = None
    review_completions_token_ref: SecretRef | None = None

    def identity(self) -> dict[str, Any]:
        """The identity object of 05 §10 (no secret reference, no `reviewCompletions`)."""
        identity: dict[str, Any] = {"product": self.product, "baseUrl": self.base_url}
        if self.product == "breg":
            identity["profile"] = self.profile
        identity.update(self.authorization.identity())
        identity["abi"] = self.abi
        return identity


@dataclass(frozen=True, slots=True)
class ExternalHttpConnectionConfig:
    """`externalHttpConnections.<name>` (05 §5.2), defaults filled.

    `query_parameters` is empty when the member is absent (no query parameter allowed). The
    response schema is kept as its RFC 8785 bytes so that it cannot change; `response_schema`
    returns a fresh copy.
    """

    abi: ClassVar[str] = "coordinator-external-http/v1"
    name: str
    base_url: str
    paths: tuple[str, ...]
    response_schema_json: bytes
    query_parameters: tuple[str, ...] = ()
    authorization: ClientAuthorization | None = None
    attempt_timeout_milliseconds: int = 2000
    maximum_response_bytes: int = 65_536

    @property
    def response_schema(self) -> Any:
        return json.loads(self.response_schema_json)

    def identity(self) -> dict[str, Any]:
        """The identity object of 05 §10: paths and query parameters sorted, defaults filled."""
        return {
            "product": "external-http",
            "baseUrl": self.base_url,
            "paths": sorted(self.paths),
            "queryParameters": sorted(self.query_parameters),
            "authorization": (
                self.authorization.identity() if self.authorization is not None else None
            ),
            "responseSchema": self.response_schema,
            "attemptTimeoutMilliseconds": self.attempt_timeout_milliseconds,
            "maximumResponseBytes": self.maximum_response_bytes,
            "abi": self.abi,
        }


@dataclass(frozen=True, slots=True)
class BearerAuthorization:
    """`evaluationConnections.<n>.authorization.bearer` (05 §5.3)."""

    token_ref: SecretRef
    principal: str


@dataclass(frozen=True, slots=True)
class LocalAuthorization:
    """`evaluationConnections.<n>.authorization.local` (05 §5.3): no authorisation."""


EvaluationAuthorization = BearerAuthorization | LocalAuthorization


@dataclass(frozen=True, slots=True)
class EvaluationConnectionConfig:
    """`evaluationConnections.<name>` (05 §5.3), defaults filled."""

    abi: ClassVar[str] = "coordinator-evaluation/v1"
    name: str
    protocol: Literal["system-one"]
    base_url: str
    model: str
    authorization: EvaluationAuthorization
    attempt_timeout_milliseconds: int = 8000
    maximum_request_bytes: int = 65_536
    maximum_response_bytes: int = 65_536

    def identity(self) -> dict[str, Any]:
        """The identity object of 05 §10: the bearer principal, never its token."""
        authorization: dict[str, Any]
        if isinstance(self.authorization, BearerAuthorization):
            authorization = {"bearer": {"principal": self.authorization.principal}}
        else:
            authorization = {"local": {}}
        return {
            "product": "evaluation",
            "protocol": self.protocol,
            "baseUrl": self.base_url,
            "model": self.model,
            "authorization": authorization,
            "attemptTimeoutMilliseconds": self.attempt_timeout_milliseconds,
            "maximumRequestBytes": self.maximum_request_bytes,
            "maximumResponseBytes": self.maximum_response_bytes,
            "abi": self.abi,
        }


@dataclass(frozen=True, slots=True)
class EventSourceConfig:
    """`eventSources.<name>` (05 §6), defaults filled."""

    name: str
    source: str
    signing_key_ref: SecretRef
    maximum_clock_skew_seconds: int = 300


@dataclass(frozen=True, slots=True)
class Listener:
    """`deployment.listener` (05 §8); `host` is the address without IPv6 brackets."""

    bind: str
    host: str
    port: int
    tls_termination: TlsTermination
    connections_per_peer: int = 32
    heads_per_peer: int = 8
    trusted_proxies: tuple[str, ...] = ()
    """IP addresses or networks (CIDR) exempt from the per-peer caps (`trustedProxies`)."""


@dataclass(frozen=True, slots=True)
class JwksDiscovery:
    """`jwksSource: {type: discovery}`: OIDC discovery from the issuer."""

    type: ClassVar[Literal["discovery"]] = "discovery"


@dataclass(frozen=True, slots=True)
class JwksUri:
    """`jwksSource: {type: uri, uri}`."""

    type: ClassVar[Literal["uri"]] = "uri"
    uri: str


@dataclass(frozen=True, slots=True)
class JwksStatic:
    """`jwksSource: {type: static, documentRef}`; the document is `Secrets.caller_jwks`."""

    type: ClassVar[Literal["static"]] = "static"
    document_ref: SecretRef


JwksSource = JwksDiscovery | JwksUri | JwksStatic


@dataclass(frozen=True, slots=True)
class Policy:
    """One `deployment.authentication.policies[]` entry (05 §8.1), its lists as sets (the
    policies themselves keep their written order: the first that applies is the caller's)."""

    client_id: str
    required_scopes: frozenset[str]
    workflows: frozenset[str]
    actions: frozenset[str]
    operator: bool = False


@dataclass(frozen=True, slots=True)
class Authentication:
    """`deployment.authentication` (05 §8.1), defaults filled. A static key set is the secret
    `Secrets.caller_jwks`; the HTTP API verifies callers with both (06 §2)."""

    issuer: str
    audience: str
    jwks_source: JwksSource
    allowed_clients: frozenset[str]
    policies: tuple[Policy, ...]
    assertion_issuers: frozenset[str] = frozenset()
    scope_claim: str = "registry_scopes"
    client_id_claim: str = "client_id"

    @property
    def operator_clients(self) -> frozenset[str]:
        """The client ids whose policy has `operator: true`."""
        return frozenset(policy.client_id for policy in self.policies if policy.operator)


@dataclass(frozen=True, slots=True)
class PackagePin:
    """`deployment.package` (05 §8): the package to serve and its pinned digest."""

    root: str
    expected_digest: str


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """`deployment.worker` (05 §8), defaults filled."""

    poll_milliseconds: int = 100
    concurrency: int = 1


@dataclass(frozen=True, slots=True)
class DeploymentSettings:
    """`deployment` (05 §8). `state_keys` maps each version to its reference, ascending."""

    database_id: str
    package: PackagePin
    listener: Listener
    authentication: Authentication
    audit_directory: str
    audit_key_ref: SecretRef
    active_state_key: int
    state_keys: Mapping[int, SecretRef]
    admission_key_ref: SecretRef
    runtime_role: str | None = None
    worker: WorkerSettings = WorkerSettings()


@dataclass(frozen=True, slots=True)
class Deployment:
    """A runtime file that passed the check of 05 §9 with environment substitution.

    `file` is the path the diagnostics name. The three connection maps are keyed by
    connection name (names are unique across them, 05 §1); every mapping is read-only.
    `deployment` is None only when the caller did not require the block. `warnings` are the
    check's warnings (the file had no error). `runtime_check` is that check itself, kept so
    that the bindings of a package are checked against the file as it was read, without
    reading it again (the runtime file is read and checked once per process).
    """

    file: str
    secret_providers: SecretProviders
    database: Database
    connections: Mapping[str, ProductConnectionConfig]
    external_http_connections: Mapping[str, ExternalHttpConnectionConfig]
    evaluation_connections: Mapping[str, EvaluationConnectionConfig]
    event_sources: Mapping[str, EventSourceConfig]
    observation_minimum_interval_seconds: int
    deployment: DeploymentSettings | None
    restore_witness: str | None = None
    """`store.restoreWitness` (07 §12.1 item 5): the absolute path of the witness file."""
    warnings: tuple[Diagnostic, ...] = ()
    runtime_check: RuntimeCheck | None = field(default=None, repr=False, compare=False)

    def secret_refs(self) -> tuple[SecretRef, ...]:
        """Every secret reference of the file: database, connections, event sources, then the
        deployment block (caller JWKS, audit key, state keys by version, admission key)."""
        found: list[SecretRef] = []
        database = self.database
        if isinstance(database, PostgresqlDatabase):
            found += [database.runtime_url_ref, database.migration_url_ref]
            if database.trusted_root_certificate_ref is not None:
                found.append(database.trusted_root_certificate_ref)
        for product in self.connections.values():
            found.append(product.authorization.signing_key_ref)
            if product.review_completions_token_ref is not None:
                found.append(product.review_completions_token_ref)
        for external in self.external_http_connections.values():
            if external.authorization is not None:
                found.append(external.authorization.signing_key_ref)
        for evaluation in self.evaluation_connections.values():
            if isinstance(evaluation.authorization, BearerAuthorization):
                found.append(evaluation.authorization.token_ref)
        found += [source.signing_key_ref for source in self.event_sources.values()]
        settings = self.deployment
        if settings is not None:
            if isinstance(settings.authentication.jwks_source, JwksStatic):
                found.append(settings.authentication.jwks_source.document_ref)
            found.append(settings.audit_key_ref)
            found += list(settings.state_keys.values())
            found.append(settings.admission_key_ref)
        return tuple(found)


# -- the binding digest (05 §10) --------------------------------------------------------------


def connection_names(workflow: Mapping[str, Any]) -> frozenset[str]:
    """The connection names a workflow body's aliases use (`operations.<alias>.connection`).

    `workflow` is the decoded workflow body, as in `workflow.yaml` or a snapshot's `workflow`.
    """
    operations = workflow.get("operations")
    names: set[str] = set()
    if isinstance(operations, Mapping):
        for alias in operations.values():
            if isinstance(alias, Mapping) and isinstance(alias.get("connection"), str):
                names.add(alias["connection"])
    return frozenset(names)


def connection_identity(deployment: Deployment, name: str) -> dict[str, Any]:
    """The identity object of 05 §10 of the connection `name` (any of the three maps).

    Secret references, `reviewCompletions`, event sources and the observation floor are not
    part of it. Raises `DeploymentRefused` (`coordinator.runtime.workflow-binding`) when no
    map binds `name`.
    """
    connection: (
        ProductConnectionConfig | ExternalHttpConnectionConfig | EvaluationConnectionConfig | None
    ) = (
        deployment.connections.get(name)
        or deployment.external_http_connections.get(name)
        or deployment.evaluation_connections.get(name)
    )
    if connection is not None:
        return connection.identity()
    raise DeploymentRefused(
        [
            Diagnostic(
                "coordinator.runtime.workflow-binding",
                path=f"/connections/{escape_pointer_token(name)}",
                file=deployment.file,
                message=_UNBOUND,
                artifact=limits.KIND_RUNTIME,
            )
        ]
    )


def binding_digest(deployment: Deployment, workflow: Mapping[str, Any]) -> str:
    """05 §10: `"sha256:" + hex(SHA-256(JCS({name: identity})))` over the connections
    `workflow` uses.

    `workflow` is the decoded workflow body (`operations` maps each alias to its
    `{operation, connection, …}`).
    """
    identities = {
        name: connection_identity(deployment, name) for name in sorted(connection_names(workflow))
    }
    return sha256_label(canonical_json(identities))
