"""The runtime file as the service and the deployment commands load it (contract 05, 09 §3, §5).

`coordinatorctl check` reads a runtime file offline, with stand-ins for environment expressions
(`coordinator_core.config.read`). `coordinator serve`/`worker` and `migrate`, `plan`,
`apply`, `deployment-status` read it differently: values are always substituted from the
environment (05 §3 item 4), the `database` and `deployment` blocks are required (09 §3), and the
secrets are resolved (05 §2.2). This module is that reading.

Public API
----------

`load_deployment(path, *, environment, require_deployment=True) -> Deployment`
    Start step 1 of 09 §5. Applies the path rules of 05 §1, then the whole check of 05 §9 with
    substitution from `environment` (the caller passes the process environment; this module
    never reads `os.environ`), then builds the typed, frozen `Deployment` with every default
    filled. Any error raises `DeploymentRefused` carrying every diagnostic found:
    `platform.runtime-config.unavailable` (exit 3) for the path rules, the reader and rule codes
    of 05 §9 (exit 1; `config.substitution` for an unset variable), and
    `coordinator.command.deployment-required` (exit 2) when `database` or (with
    `require_deployment`) `deployment` is missing.

`resolve_secrets(deployment, *, environment, database_role="runtime") -> Secrets`
    Start step 3 of 09 §5 (re-exported from `coordinator_core.shell.secrets`).

`binding_digest(deployment, workflow) -> str`
    05 §10: `"sha256:" + hex(SHA-256(JCS({name: identity})))` over the connections the
    workflow's aliases use. `connection_identity(deployment, name)` is one identity object.

The types are those of `coordinator_core.config.model`, re-exported here.
"""

from __future__ import annotations

import ipaddress
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Literal, cast

from coordinator_core import limits
from coordinator_core.authoring.yamlreader import YamlDocument, escape_pointer_token
from coordinator_core.config.model import (
    REFERENCE_PREFIX,
    Authentication,
    BearerAuthorization,
    ClientAuthorization,
    Database,
    Deployment,
    DeploymentRefused,
    DeploymentSettings,
    EvaluationAuthorization,
    EvaluationConnectionConfig,
    EventSourceConfig,
    ExternalHttpConnectionConfig,
    JwksDiscovery,
    JwksSource,
    JwksStatic,
    JwksUri,
    Listener,
    LocalAuthorization,
    PackagePin,
    Policy,
    PostgresqlDatabase,
    ProductConnectionConfig,
    SecretProviders,
    SecretRef,
    SqliteDatabase,
    WorkerSettings,
)
from coordinator_core.config.read import RuntimeCheck, check_bindings, check_runtime_file
from coordinator_core.errors import Diagnostic
from coordinator_core.shell.adapters.base import (
    ClientCredentials,
    Connection,
    EvaluationConnection,
    ExternalConnection,
    ProductConnection,
)
from coordinator_core.shell.adapters.registry import unserved_operations
from coordinator_core.shell.secrets import DatabaseUrl, Secrets, resolve_secrets
from coordinator_core.values import CanonicalJsonError, canonical_json, sha256_label

if TYPE_CHECKING:
    pass

__all__ = [
    "ADAPTER_ABI",
    "EVALUATION_ABI",
    "EXTERNAL_HTTP_ABI",
    "Authentication",
    "BearerAuthorization",
    "ClientAuthorization",
    "Database",
    "DatabaseUrl",
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
    "ProductConnectionConfig",
    "SecretProviders",
    "SecretRef",
    "Secrets",
    "SqliteDatabase",
    "WorkerSettings",
    "binding_digest",
    "bound_connections",
    "connection_identity",
    "connection_names",
    "load_deployment",
    "package_binding_problems",
    "resolve_secrets",
]

ADAPTER_ABI: Final = "coordinator-adapters/v4"
EXTERNAL_HTTP_ABI: Final = "coordinator-external-http/v1"
EVALUATION_ABI: Final = "coordinator-evaluation/v1"

_UNAVAILABLE: Final = "platform.runtime-config.unavailable"
_REQUIRED: Final = "coordinator.command.deployment-required"

# Fixed sentences (02 §1 item 2): they name no path, value or secret.
_PATH_MESSAGES: Final = {
    "relative": "The runtime file must be named by an absolute path.",
    "dot-segment": "The runtime file's path must not contain . or .. segments.",
    "missing": "The runtime file does not exist.",
    "symlink": "The runtime file is a symbolic link; name the file itself.",
    "not-regular": "The runtime file is not a regular file.",
    "empty": "The runtime file is empty.",
    "unreadable": "The runtime file cannot be read.",
}
_MISSING_BLOCK: Final = {
    "database": "The runtime file has no database block.",
    "deployment": "The runtime file has no deployment block.",
}
_UNBOUND: Final = "The workflow uses a connection that the runtime file does not bind."


# -- loading -------------------------------------------------------------------------------


def load_deployment(
    path: str | os.PathLike[str],
    *,
    environment: Mapping[str, str],
    require_deployment: bool = True,
) -> Deployment:
    """Read, check and build the runtime file at `path` (see the module documentation).

    `path` should be given as written on the command line: a `pathlib.Path` has already
    dropped `.` segments, so only a string lets the `.` rule of 05 §1 see them.
    """
    text = os.fspath(path)
    problem = _path_problem(text)
    if problem is not None:
        raise DeploymentRefused([_file_diagnostic(text, problem)])
    check = check_runtime_file(Path(text), display_file=text, environment=environment)
    diagnostics = list(check.diagnostics)
    if any(d.code == _UNAVAILABLE for d in diagnostics):
        # Say which rule of 05 §1 failed; the read itself stays the checker's (no race).
        reason = _unreadable_reason(text)
        diagnostics = [
            _file_diagnostic(text, reason) if d.code == _UNAVAILABLE else d for d in diagnostics
        ]
    document = check.authored.document
    written = document.value if document is not None else None
    if isinstance(written, dict):
        blocks = ["database", "deployment"] if require_deployment else ["database"]
        diagnostics.extend(
            Diagnostic(
                _REQUIRED,
                path=f"/{block}",
                file=text,
                message=_MISSING_BLOCK[block],
                artifact=limits.KIND_RUNTIME,
            )
            for block in blocks
            if block not in written
        )
    if any(d.effective_severity == "error" for d in diagnostics):
        raise DeploymentRefused(diagnostics)
    decoded = check.authored.decoded
    if decoded is None or document is None:  # pragma: no cover - an error was reported
        raise DeploymentRefused([_file_diagnostic(text, "unreadable")])
    try:
        return _Builder(text, document).build(decoded, tuple(diagnostics), check)
    except CanonicalJsonError:
        raise DeploymentRefused(
            [
                Diagnostic(
                    "coordinator.external-http.configuration",
                    path="/externalHttpConnections",
                    file=text,
                    message="A response schema has no canonical JSON form.",
                    artifact=limits.KIND_RUNTIME,
                )
            ]
        ) from None


def _path_problem(text: str) -> str | None:
    if not text.startswith("/"):
        return "relative"
    if any(segment in (".", "..") for segment in text.split("/")):
        return "dot-segment"
    return None


def _unreadable_reason(text: str) -> str:
    """Which rule of 05 §1 the file breaks, for the message only."""
    try:
        status = os.lstat(text)
    except FileNotFoundError:
        return "missing"
    except OSError:
        return "unreadable"
    if stat.S_ISLNK(status.st_mode):
        return "symlink"
    if not stat.S_ISREG(status.st_mode):
        return "not-regular"
    if status.st_size == 0:
        return "empty"
    return "unreadable"


def _file_diagnostic(text: str, reason: str) -> Diagnostic:
    return Diagnostic(
        _UNAVAILABLE,
        path="",
        file=text,
        message=_PATH_MESSAGES[reason],
        artifact=limits.KIND_RUNTIME,
    )


class _Builder:
    """Turns the decoded (checked, substituted) tree into the frozen `Deployment`."""

    def __init__(self, file: str, document: YamlDocument) -> None:
        self.file = file
        self.document = document

    def build(
        self, root: Mapping[str, Any], warnings: tuple[Diagnostic, ...], check: RuntimeCheck
    ) -> Deployment:
        providers = root["secretProviders"]
        file_provider = providers.get("file")
        observation = root.get("observation") or {}
        return Deployment(
            file=self.file,
            secret_providers=SecretProviders(
                environment="environment" in providers,
                file_root=str(file_provider["root"]) if file_provider is not None else None,
            ),
            database=self.database(root["database"]),
            connections=self.entries(root, "connections", self.product),
            external_http_connections=self.entries(root, "externalHttpConnections", self.external),
            evaluation_connections=self.entries(root, "evaluationConnections", self.evaluation),
            event_sources=self.entries(root, "eventSources", self.event_source),
            observation_minimum_interval_seconds=int(observation.get("minimumIntervalSeconds", 30)),
            deployment=self.deployment(root["deployment"]) if "deployment" in root else None,
            restore_witness=_restore_witness(root.get("store")),
            warnings=warnings,
            runtime_check=check,
        )

    def ref(self, text: str, pointer: str) -> SecretRef:
        provider, _, name = text.removeprefix(REFERENCE_PREFIX).partition("/")
        mark = self.document.mark_of(pointer)
        return SecretRef(
            provider=cast(Literal["env", "file"], provider),
            name=name,
            pointer=pointer,
            line=mark.line if mark is not None else None,
            column=mark.column if mark is not None else None,
        )

    def entries(self, root: Mapping[str, Any], member: str, build: Any) -> Mapping[str, Any]:
        written: Mapping[str, Any] = root.get(member) or {}
        return MappingProxyType(
            {
                name: build(name, entry, f"/{member}/{escape_pointer_token(name)}")
                for name, entry in written.items()
            }
        )

    def database(self, database: Mapping[str, Any]) -> Database:
        if "postgresql" in database:
            postgresql = database["postgresql"]
            base = "/database/postgresql"
            trusted = postgresql.get("trustedRootCertificateRef")
            return PostgresqlDatabase(
                runtime_url_ref=self.ref(postgresql["runtimeUrlRef"], f"{base}/runtimeUrlRef"),
                migration_url_ref=self.ref(
                    postgresql["migrationUrlRef"], f"{base}/migrationUrlRef"
                ),
                namespace=str(postgresql["namespace"]),
                trusted_root_certificate_ref=(
                    self.ref(trusted, f"{base}/trustedRootCertificateRef")
                    if trusted is not None
                    else None
                ),
            )
        return SqliteDatabase(path=str(database["sqlite"]["path"]))

    def authorization(self, written: Mapping[str, Any], pointer: str) -> ClientAuthorization:
        endpoint = str(written["tokenEndpoint"])
        return ClientAuthorization(
            token_endpoint=endpoint,
            client_id=str(written["clientId"]),
            client_assertion_audience=str(written.get("clientAssertionAudience", endpoint)),
            signing_key_ref=self.ref(written["signingKeyRef"], f"{pointer}/signingKeyRef"),
            resource=str(written["resource"]),
            scopes=tuple(str(scope) for scope in written["scopes"]),
        )

    def product(self, name: str, entry: Mapping[str, Any], pointer: str) -> ProductConnectionConfig:
        completions = entry.get("reviewCompletions")
        return ProductConnectionConfig(
            name=name,
            product=entry["product"],
            base_url=_base_url(entry["baseUrl"]),
            authorization=self.authorization(entry["authorization"], f"{pointer}/authorization"),
            profile=str(entry["profile"]) if "profile" in entry else None,
            review_completions_token_ref=(
                self.ref(completions["tokenRef"], f"{pointer}/reviewCompletions/tokenRef")
                if completions is not None
                else None
            ),
        )

    def external(
        self, name: str, entry: Mapping[str, Any], pointer: str
    ) -> ExternalHttpConnectionConfig:
        authorization = entry.get("authorization")
        return ExternalHttpConnectionConfig(
            name=name,
            base_url=_base_url(entry["baseUrl"]),
            paths=tuple(str(path) for path in entry["paths"]),
            response_schema_json=canonical_json(entry["responseSchema"]),
            query_parameters=tuple(str(q) for q in entry.get("queryParameters", ())),
            authorization=(
                self.authorization(authorization, f"{pointer}/authorization")
                if authorization is not None
                else None
            ),
            attempt_timeout_milliseconds=int(entry.get("attemptTimeoutMilliseconds", 2000)),
            maximum_response_bytes=int(entry.get("maximumResponseBytes", 65_536)),
        )

    def evaluation(
        self, name: str, entry: Mapping[str, Any], pointer: str
    ) -> EvaluationConnectionConfig:
        written = entry["authorization"]
        authorization: EvaluationAuthorization
        if "bearer" in written:
            bearer = written["bearer"]
            authorization = BearerAuthorization(
                token_ref=self.ref(bearer["tokenRef"], f"{pointer}/authorization/bearer/tokenRef"),
                principal=str(bearer["principal"]),
            )
        else:
            authorization = LocalAuthorization()
        return EvaluationConnectionConfig(
            name=name,
            protocol=entry["protocol"],
            base_url=_base_url(entry["baseUrl"]),
            model=str(entry["model"]),
            authorization=authorization,
            attempt_timeout_milliseconds=int(entry.get("attemptTimeoutMilliseconds", 8000)),
            maximum_request_bytes=int(entry.get("maximumRequestBytes", 65_536)),
            maximum_response_bytes=int(entry.get("maximumResponseBytes", 65_536)),
        )

    def event_source(self, name: str, entry: Mapping[str, Any], pointer: str) -> EventSourceConfig:
        return EventSourceConfig(
            name=name,
            source=str(entry["source"]),
            signing_key_ref=self.ref(entry["signingKeyRef"], f"{pointer}/signingKeyRef"),
            maximum_clock_skew_seconds=int(entry.get("maximumClockSkewSeconds", 300)),
        )

    def deployment(self, written: Mapping[str, Any]) -> DeploymentSettings:
        base = "/deployment"
        package = written["package"]
        worker = written.get("worker") or {}
        keys = written["stateKeys"]
        return DeploymentSettings(
            database_id=str(written["databaseId"]),
            package=PackagePin(
                root=str(package["root"]), expected_digest=str(package["expectedDigest"])
            ),
            listener=_listener(written["listener"]),
            authentication=self.authentication(written["authentication"]),
            audit_directory=str(written["auditDirectory"]),
            audit_key_ref=self.ref(written["auditKeyRef"], f"{base}/auditKeyRef"),
            active_state_key=int(written["activeStateKey"]),
            state_keys=MappingProxyType(
                {
                    int(version): self.ref(
                        keys[version]["keyRef"],
                        f"{base}/stateKeys/{escape_pointer_token(version)}/keyRef",
                    )
                    for version in sorted(keys, key=int)
                }
            ),
            admission_key_ref=self.ref(written["admissionKeyRef"], f"{base}/admissionKeyRef"),
            runtime_role=str(written["runtimeRole"]) if "runtimeRole" in written else None,
            worker=WorkerSettings(
                poll_milliseconds=int(worker.get("pollMilliseconds", 100)),
                concurrency=int(worker.get("concurrency", 1)),
            ),
        )

    def authentication(self, written: Mapping[str, Any]) -> Authentication:
        source = written["jwksSource"]
        jwks: JwksSource
        if source["type"] == "uri":
            jwks = JwksUri(uri=str(source["uri"]))
        elif source["type"] == "static":
            jwks = JwksStatic(
                document_ref=self.ref(
                    source["documentRef"], "/deployment/authentication/jwksSource/documentRef"
                )
            )
        else:
            jwks = JwksDiscovery()
        return Authentication(
            issuer=str(written["issuer"]),
            audience=str(written["audience"]),
            jwks_source=jwks,
            allowed_clients=tuple(str(client) for client in written["allowedClients"]),
            policies=tuple(
                Policy(
                    client_id=str(policy["clientId"]),
                    required_scopes=tuple(str(s) for s in policy["requiredScopes"]),
                    workflows=tuple(str(w) for w in policy["workflows"]),
                    actions=tuple(str(a) for a in policy["actions"]),
                    operator=bool(policy.get("operator", False)),
                )
                for policy in written["policies"]
            ),
            assertion_issuers=tuple(str(i) for i in written.get("assertionIssuers", ())),
            scope_claim=str(written.get("scopeClaim", "registry_scopes")),
            client_id_claim=str(written.get("clientIdClaim", "client_id")),
        )


def _base_url(text: Any) -> str:
    """05 §5.1: "a trailing `/` is removed" (one; the rules refuse empty interior segments)."""
    return str(text).removesuffix("/")


def _listener(written: Mapping[str, Any]) -> Listener:
    bind = str(written["bind"])
    host, _, port = bind.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    ipaddress.ip_address(host)  # checked by V9; a failure here is a bug, not an input error
    return Listener(
        bind=bind,
        host=host,
        port=int(port),
        tls_termination=written["tlsTermination"],
        connections_per_peer=int(written.get("connectionsPerPeer", 32)),
        heads_per_peer=int(written.get("headsPerPeer", 8)),
        trusted_proxies=tuple(str(item) for item in written.get("trustedProxies", ())),
    )


def _restore_witness(store: Mapping[str, Any] | None) -> str | None:
    witness = store.get("restoreWitness") if store is not None else None
    return str(witness) if witness is not None else None


# -- binding digest (05 §10) ---------------------------------------------------------------


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
    product = deployment.connections.get(name)
    if product is not None:
        identity: dict[str, Any] = {
            "product": product.product,
            "baseUrl": product.base_url,
        }
        if product.product == "breg":
            identity["profile"] = product.profile
        identity.update(product.authorization.identity())
        identity["abi"] = ADAPTER_ABI
        return identity
    external = deployment.external_http_connections.get(name)
    if external is not None:
        return {
            "product": "external-http",
            "baseUrl": external.base_url,
            "paths": sorted(external.paths),
            "queryParameters": sorted(external.query_parameters),
            "authorization": (
                external.authorization.identity() if external.authorization is not None else None
            ),
            "responseSchema": external.response_schema,
            "attemptTimeoutMilliseconds": external.attempt_timeout_milliseconds,
            "maximumResponseBytes": external.maximum_response_bytes,
            "abi": EXTERNAL_HTTP_ABI,
        }
    evaluation = deployment.evaluation_connections.get(name)
    if evaluation is not None:
        authorization: dict[str, Any]
        if isinstance(evaluation.authorization, BearerAuthorization):
            authorization = {"bearer": {"principal": evaluation.authorization.principal}}
        else:
            authorization = {"local": {}}
        return {
            "product": "evaluation",
            "protocol": evaluation.protocol,
            "baseUrl": evaluation.base_url,
            "model": evaluation.model,
            "authorization": authorization,
            "attemptTimeoutMilliseconds": evaluation.attempt_timeout_milliseconds,
            "maximumRequestBytes": evaluation.maximum_request_bytes,
            "maximumResponseBytes": evaluation.maximum_response_bytes,
            "abi": EVALUATION_ABI,
        }
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
    """05 §10: the digest of the identities of the connections `workflow` uses.

    `workflow` is the decoded workflow body (`operations` maps each alias to its
    `{operation, connection, …}`).
    """
    identities = {
        name: connection_identity(deployment, name) for name in sorted(connection_names(workflow))
    }
    return sha256_label(canonical_json(identities))


def package_binding_problems(
    deployment: Deployment, workflow: Mapping[str, Any]
) -> list[Diagnostic]:
    """What refuses a package's workflow under this runtime file before any run is admitted
    (`apply`, `deployment-status`, the service start): the bindings of 02 §5.8 as
    `load_deployment` read and checked the file (it is not read again), and every alias's
    operation served by an adapter of this build (`coordinator.runtime.operation-unserved`, at
    the alias in the workflow)."""
    checked = deployment.runtime_check
    if checked is None:
        raise ValueError("The deployment was not built by load_deployment.")
    problems = [d for d in check_bindings(workflow, checked) if d.exit_code != 0]
    for alias, operation in unserved_operations(workflow):
        problems.append(
            Diagnostic(
                "coordinator.runtime.operation-unserved",
                path=f"/operations/{escape_pointer_token(alias)}/operation",
                message=f"The alias `{alias}` uses `{operation}`, which no adapter of this "
                "build serves.",
                artifact=limits.KIND_PROJECT,
            )
        )
    return problems


def bound_connections(deployment: Deployment, secrets: Secrets) -> dict[str, Connection]:
    """Every connection of the runtime file's three maps (05 §5), with its resolved secret:
    the signing key of an `authorization`, or an evaluation connection's bearer token."""

    def credentials(name: str, authorization: Any) -> ClientCredentials:
        return ClientCredentials(
            token_endpoint=authorization.token_endpoint,
            client_id=authorization.client_id,
            signing_key=secrets.client_signing_keys.get(name, ""),
            resource=authorization.resource,
            scopes=tuple(authorization.scopes),
            client_assertion_audience=authorization.client_assertion_audience,
        )

    found: dict[str, Connection] = {}
    for name, product in deployment.connections.items():
        found[name] = ProductConnection(
            name=name,
            product=product.product,
            base_url=product.base_url,
            profile=product.profile,
            authorization=credentials(name, product.authorization),
        )
    for name, external in deployment.external_http_connections.items():
        found[name] = ExternalConnection(
            name=name,
            base_url=external.base_url,
            paths=frozenset(external.paths),
            query_parameters=frozenset(external.query_parameters),
            response_schema=external.response_schema,
            authorization=(
                None
                if external.authorization is None
                else credentials(name, external.authorization)
            ),
            attempt_timeout_milliseconds=external.attempt_timeout_milliseconds,
            maximum_response_bytes=external.maximum_response_bytes,
        )
    for name, evaluation in deployment.evaluation_connections.items():
        found[name] = EvaluationConnection(
            name=name,
            base_url=evaluation.base_url,
            model=evaluation.model,
            bearer_token=secrets.evaluation_tokens.get(name),
            protocol=evaluation.protocol,
            attempt_timeout_milliseconds=evaluation.attempt_timeout_milliseconds,
            maximum_request_bytes=evaluation.maximum_request_bytes,
            maximum_response_bytes=evaluation.maximum_response_bytes,
        )
    return found
