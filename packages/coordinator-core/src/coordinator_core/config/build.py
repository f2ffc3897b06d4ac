"""The typed, frozen `Deployment` built from a runtime file that passed the whole check (05).

`build_deployment(check, *, file, warnings) -> Deployment` turns the decoded tree of a
`RuntimeCheck` (substituted values, never stand-ins: the caller checked with an environment)
into the model of `coordinator_core.config.model`: every default filled, base URLs without their
trailing `/`, and each secret reference a `SecretRef` that knows its pointer and position. Pure:
the shell reads the file, applies the path rules of 05 §1 and says which environment
substitutes (`coordinator_core.shell.deployment.load_deployment`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Literal, TypeVar, cast

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
from coordinator_core.config.read import RuntimeCheck
from coordinator_core.errors import Diagnostic
from coordinator_core.values import CanonicalJsonError, canonical_json

__all__ = ["build_deployment"]

_Entry = TypeVar("_Entry")


def build_deployment(
    check: RuntimeCheck, *, file: str, warnings: tuple[Diagnostic, ...]
) -> Deployment:
    """The `Deployment` of a runtime file whose check (`check`, with environment substitution)
    found no error. `file` is the path the diagnostics name; `warnings` are the check's
    warnings. A response schema without a canonical JSON form raises `DeploymentRefused`
    (`coordinator.external-http.configuration`)."""
    document, decoded = check.authored.document, check.authored.decoded
    if document is None or decoded is None:
        raise ValueError("The runtime file was not read and decoded without an error.")
    try:
        return _Builder(file, document).build(decoded, warnings, check)
    except CanonicalJsonError:
        raise DeploymentRefused(
            [
                Diagnostic(
                    "coordinator.external-http.configuration",
                    path="/externalHttpConnections",
                    file=file,
                    message="A response schema has no canonical JSON form.",
                    artifact=limits.KIND_RUNTIME,
                )
            ]
        ) from None


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

    def entries(
        self,
        root: Mapping[str, Any],
        member: str,
        build: Callable[[str, Mapping[str, Any], str], _Entry],
    ) -> Mapping[str, _Entry]:
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
            allowed_clients=frozenset(str(client) for client in written["allowedClients"]),
            policies=tuple(
                Policy(
                    client_id=str(policy["clientId"]),
                    required_scopes=frozenset(str(s) for s in policy["requiredScopes"]),
                    workflows=frozenset(str(w) for w in policy["workflows"]),
                    actions=frozenset(str(a) for a in policy["actions"]),
                    operator=bool(policy.get("operator", False)),
                )
                for policy in written["policies"]
            ),
            assertion_issuers=frozenset(str(i) for i in written.get("assertionIssuers", ())),
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
