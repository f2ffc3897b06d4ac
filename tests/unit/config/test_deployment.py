"""The runtime file as the service and the deployment commands load it (05, 09 §3, §5).

Each test is named by the rule it proves. The 05 §11.1 example (tests/data/deployment) is
rebased onto a temporary directory, and the secrets it names are generated there.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import stat
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from coordinator_core.config.model import (
    BearerAuthorization,
    Deployment,
    DeploymentRefused,
    JwksStatic,
    JwksUri,
    LocalAuthorization,
    PostgresqlDatabase,
    SqliteDatabase,
    binding_digest,
    connection_identity,
)
from coordinator_core.errors import Diagnostic
from coordinator_core.shell.deployment import load_deployment
from coordinator_core.shell.secrets import Secrets, resolve_secrets
from coordinator_core.values import canonical_json

REPO = Path(__file__).resolve().parents[3]
DATA = REPO / "tests" / "data" / "deployment"
DEVELOPMENT = DATA / "development-sqlite.yaml"
PRODUCTION = DATA / "production-postgresql.yaml"
DIRECTORY = "/home/dev/reviewed-notice"  # the 05 §11.1 example's directory
PRODUCTION_DIRECTORY = "/srv/coordinator"
WORKFLOW: dict[str, Any] = yaml.safe_load(
    (REPO / "examples" / "reviewed-notice" / "workflow.yaml").read_text("utf-8")
)

# Canaries: secret bytes and environment values that must never reach a diagnostic.
CANARY = "CANARY-7f3e"
STATE_KEY = b"CANARY-7f3e-state-key-1-32bytes!"
STATE_KEY_2 = b"CANARY-7f3e-state-key-2-32bytes!"
ADMISSION_KEY = b"CANARY-7f3e-admission-key-32byte"
AUDIT_KEY = b"CANARY-7f3e-audit-key-at-least-32-bytes"
EVENT_KEY = b"CANARY-7f3e-event-signing-key-at-least-32"
COMPLETION_TOKEN = b"CANARY-7f3e-casework-completions-token"
EVALUATION_TOKEN = "CANARY-7f3e-evaluation-bearer-token-value"
RUNTIME_URL = "postgresql://runtime:CANARY-7f3e-pw@db.example.org:5432/coordinator"
MIGRATION_URL = (
    "postgresql://migrator:CANARY-7f3e-pw@db.example.org/coordinator?sslmode=verify-full"
)
ENVIRONMENT = {
    "BREG_BASE_URL": "https://breg.example.org/",
    "IDP_TOKEN_ENDPOINT": "https://idp.example.org/oauth/token",
    "COORDINATOR_RUNTIME_DATABASE_URL": RUNTIME_URL,
    "EVALUATION_TOKEN": EVALUATION_TOKEN,
    "UNRELATED": "CANARY-7f3e-unrelated-environment-value",
}

assert all(len(key) == 32 for key in (STATE_KEY, STATE_KEY_2, ADMISSION_KEY))


# -- fixtures -------------------------------------------------------------------------------


def ec_jwk(kid: str | None = "key-1", curve: ec.EllipticCurve | None = None) -> dict[str, Any]:
    key = ec.generate_private_key(curve or ec.SECP256R1())
    jwk: dict[str, Any] = json.loads(ECAlgorithm.to_jwk(key))
    if kid is not None:
        jwk["kid"] = kid
    return jwk


_RSA_KEYS: dict[int, rsa.RSAPrivateKey] = {}


def rsa_jwk(bits: int, kid: str = "rsa-1") -> dict[str, Any]:
    if bits not in _RSA_KEYS:
        _RSA_KEYS[bits] = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    jwk: dict[str, Any] = json.loads(RSAAlgorithm.to_jwk(_RSA_KEYS[bits]))
    jwk["kid"] = kid
    return jwk


def certificate_pem() -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test root")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return certificate.public_bytes(serialization.Encoding.PEM)


def jwk_bytes(jwk: Mapping[str, Any]) -> bytes:
    return json.dumps(jwk).encode("utf-8") + b"\n"


def write_secret(directory: Path, name: str, data: bytes, mode: int = 0o600) -> Path:
    path = directory / name
    path.write_bytes(data)
    path.chmod(mode)
    return path


@dataclasses.dataclass
class Layout:
    """A runtime file and its secrets under a temporary directory."""

    runtime: Path
    secrets: Path
    environment: dict[str, str]

    @property
    def path(self) -> str:
        return str(self.runtime)

    def load(self, **options: Any) -> Deployment:
        return load_deployment(self.path, environment=self.environment, **options)

    def resolve(self, **options: Any) -> Secrets:
        return resolve_secrets(self.load(), environment=self.environment, **options)

    def edit(self, change: Callable[[str], str]) -> None:
        self.runtime.write_text(change(self.runtime.read_text("utf-8")), "utf-8")

    def secret(self, name: str, data: bytes, mode: int = 0o600) -> Path:
        path = self.secrets / name
        if path.is_symlink() or path.exists():
            path.unlink()
        return write_secret(self.secrets, name, data, mode)


def development_layout(base: Path) -> Layout:
    """05 §11.1 with the example's directory replaced by `base` and every secret in place."""
    runtime = base / "runtime.yaml"
    runtime.write_text(DEVELOPMENT.read_text("utf-8").replace(DIRECTORY, str(base)), "utf-8")
    secrets = base / ".coordinator" / "secrets"
    secrets.mkdir(parents=True, mode=0o700)
    for name in ("applications-client.jwk", "reviews-client.jwk", "notices-client.jwk"):
        write_secret(secrets, name, jwk_bytes(ec_jwk(kid=name)))
    write_secret(secrets, "casework-completions-token", COMPLETION_TOKEN + b"\n")
    write_secret(secrets, "applications-events.key", EVENT_KEY)
    write_secret(secrets, "caller-jwks.json", b'{"keys":[{"kty":"EC","crv":"P-256"}]}\n')
    write_secret(secrets, "audit.key", AUDIT_KEY)
    write_secret(secrets, "state-1.key", STATE_KEY)
    write_secret(secrets, "admission.key", ADMISSION_KEY)
    return Layout(runtime, secrets, dict(ENVIRONMENT))


def production_layout(base: Path) -> Layout:
    runtime = base / "runtime.yaml"
    runtime.write_text(
        PRODUCTION.read_text("utf-8").replace(PRODUCTION_DIRECTORY, str(base)), "utf-8"
    )
    secrets = base / "secrets"
    secrets.mkdir(mode=0o700)
    for name in (
        "applications-client.jwk",
        "reviews-client.jwk",
        "notices-client.jwk",
        "holidays-client.jwk",
    ):
        write_secret(secrets, name, jwk_bytes(ec_jwk(kid=name)))
    write_secret(secrets, "migration-database-url", MIGRATION_URL.encode() + b"\n")
    write_secret(secrets, "database-roots.pem", certificate_pem())
    write_secret(secrets, "casework-completions-token", COMPLETION_TOKEN)
    write_secret(secrets, "applications-events.key", EVENT_KEY)
    write_secret(secrets, "audit.key", AUDIT_KEY)
    write_secret(secrets, "state-1.key", STATE_KEY)
    write_secret(secrets, "state-2.key", STATE_KEY_2)
    write_secret(secrets, "admission.key", ADMISSION_KEY)
    return Layout(runtime, secrets, dict(ENVIRONMENT))


@pytest.fixture
def development(tmp_path: Path) -> Layout:
    return development_layout(tmp_path)


@pytest.fixture
def production(tmp_path: Path) -> Layout:
    return production_layout(tmp_path)


def refusal(action: Callable[[], object]) -> DeploymentRefused:
    with pytest.raises(DeploymentRefused) as caught:
        action()
    assert_no_canary(caught.value)
    return caught.value


def found(error: DeploymentRefused) -> list[tuple[str, str]]:
    return [(d.code, d.path) for d in error.diagnostics]


def rendered(diagnostics: tuple[Diagnostic, ...] | list[Diagnostic]) -> str:
    return json.dumps([d.to_json() for d in diagnostics])


def assert_no_canary(error: DeploymentRefused) -> None:
    """No secret, environment value or secret reference appears in what a refusal shows."""
    shown = rendered(error.diagnostics) + str(error) + repr(error)
    assert CANARY not in shown
    for diagnostic in error.diagnostics:
        assert "secret:" not in diagnostic.effective_message
        assert "secret:" not in diagnostic.effective_hint


@pytest.fixture(autouse=True)
def _no_ambient_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # The process environment must never be consulted: a variable set only here is unseen.
    monkeypatch.setenv("BREG_BASE_URL", "https://ambient.invalid")
    monkeypatch.setenv("EVALUATION_TOKEN", "x" * 64)
    yield


# -- the 05 §11.1 example -----------------------------------------------------------------


def test_development_example_loads_with_every_member_typed(development: Layout) -> None:
    deployment = development.load()
    base = str(development.runtime.parent)
    assert deployment.file == development.path
    assert deployment.warnings == ()
    assert deployment.secret_providers.environment is False
    assert deployment.secret_providers.file_root == f"{base}/.coordinator/secrets"
    assert deployment.database == SqliteDatabase(path=f"{base}/.coordinator/coordinator.db")
    assert deployment.observation_minimum_interval_seconds == 30
    assert list(deployment.connections) == ["applications", "reviews", "notices"]
    assert deployment.external_http_connections == {}
    assert deployment.evaluation_connections == {}

    applications = deployment.connections["applications"]
    assert applications.product == "breg"
    assert applications.base_url == "http://127.0.0.1:8101"
    assert applications.profile == "coordinator-reader"
    assert applications.review_completions_token_ref is None
    authorization = applications.authorization
    assert authorization.token_endpoint == "http://127.0.0.1:8100/oauth/token"
    assert authorization.client_id == "coordinator-applications"
    assert authorization.client_assertion_audience == authorization.token_endpoint  # defaulted
    assert authorization.resource == "urn:registrystack:breg:applications"
    assert authorization.scopes == ("breg:records:read",)
    assert authorization.signing_key_ref.text == "secret:file/applications-client.jwk"
    assert (
        authorization.signing_key_ref.pointer
        == "/connections/applications/authorization/signingKeyRef"
    )
    reviews = deployment.connections["reviews"]
    assert reviews.product == "casework"
    assert reviews.profile is None
    assert reviews.review_completions_token_ref is not None
    assert reviews.review_completions_token_ref.text == "secret:file/casework-completions-token"

    source = deployment.event_sources["applications"]
    assert source.source == "urn:registrystack:registry:example:instance:primary"
    assert source.maximum_clock_skew_seconds == 300  # defaulted
    assert source.signing_key_ref.text == "secret:file/applications-events.key"

    settings = deployment.deployment
    assert settings is not None
    assert settings.database_id == "reviewed-notice-dev"
    assert settings.runtime_role is None
    assert settings.package.root == f"{base}/dist/package"
    assert settings.package.expected_digest == (
        "sha256:5f1d0c3b2a1e4f6a7b8c9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c"
    )
    assert (settings.listener.host, settings.listener.port) == ("127.0.0.1", 8108)
    assert settings.listener.tls_termination == "development-loopback"
    assert settings.audit_directory == f"{base}/.coordinator/audit"
    assert settings.audit_key_ref.text == "secret:file/audit.key"
    assert settings.active_state_key == 1
    assert {v: r.text for v, r in settings.state_keys.items()} == {1: "secret:file/state-1.key"}
    assert settings.admission_key_ref.text == "secret:file/admission.key"
    assert (settings.worker.poll_milliseconds, settings.worker.concurrency) == (100, 1)

    authentication = settings.authentication
    assert authentication.issuer == "http://127.0.0.1:8100"
    assert authentication.audience == "coordinator"
    assert isinstance(authentication.jwks_source, JwksStatic)
    assert authentication.jwks_source.document_ref.text == "secret:file/caller-jwks.json"
    assert authentication.allowed_clients == frozenset({"ops-console"})
    assert authentication.assertion_issuers == frozenset()
    assert authentication.scope_claim == "registry_scopes"
    assert authentication.client_id_claim == "client_id"
    (policy,) = authentication.policies
    assert policy.client_id == "ops-console"
    assert policy.required_scopes == frozenset({"coordinator:operate"})
    assert policy.workflows == frozenset({"reviewed-notice"})
    assert len(policy.actions) == 11
    assert policy.operator is True
    assert authentication.operator_clients == frozenset({"ops-console"})


def test_development_example_secret_references_point_at_their_members(
    development: Layout,
) -> None:
    deployment = development.load()
    lines = development.runtime.read_text("utf-8").splitlines()
    refs = deployment.secret_refs()
    assert len(refs) == 9
    for ref in refs:
        assert ref.line is not None and ref.column is not None
        assert lines[ref.line - 1][ref.column - 1 :].startswith(ref.text)


def test_deployment_is_frozen_and_read_only(development: Layout) -> None:
    deployment = development.load()
    with pytest.raises(dataclasses.FrozenInstanceError):
        deployment.file = "/elsewhere"  # type: ignore[misc]
    with pytest.raises(TypeError):
        deployment.connections["extra"] = deployment.connections["notices"]  # type: ignore[index]
    assert deployment.deployment is not None
    with pytest.raises(TypeError):
        deployment.deployment.state_keys[2] = deployment.deployment.admission_key_ref  # type: ignore[index]


def test_development_example_resolves_every_secret(development: Layout) -> None:
    secrets = development.resolve()
    assert secrets.state_keys.active_version == 1
    assert secrets.state_keys.versions == (1,)
    # The ring holds exactly the file's bytes: its custody marker is the 07 §10 formula's.
    assert secrets.state_keys.custody_marker("reviewed-notice-dev", 1) == (
        _custody_marker(STATE_KEY, "reviewed-notice-dev", 1)
    )
    assert secrets.admission_key.custody_marker("reviewed-notice-dev") == (
        _commitment(ADMISSION_KEY, "admission-key-custody", ["reviewed-notice-dev"])
    )
    assert secrets.audit_references.run("run-1").startswith("hmac-sha256:")
    assert secrets.database_url is None
    assert secrets.trusted_root_certificates is None
    assert set(secrets.client_signing_keys) == {"applications", "reviews", "notices"}
    assert json.loads(secrets.client_signing_keys["reviews"])["kid"] == "reviews-client.jwk"
    assert dict(secrets.review_completion_tokens) == {"reviews": COMPLETION_TOKEN}  # LF removed
    assert dict(secrets.event_signing_keys) == {"applications": EVENT_KEY}
    assert secrets.evaluation_tokens == {}
    assert secrets.caller_jwks == b'{"keys":[{"kty":"EC","crv":"P-256"}]}'
    assert CANARY not in repr(secrets)


def _custody_marker(key: bytes, database_id: str, version: int) -> str:
    import hmac
    import struct

    message = (
        b"registry-coordinator/payload-key-custody/v1"
        + struct.pack(">Q", len(database_id))
        + database_id.encode()
        + struct.pack(">I", version)
    )
    return hmac.digest(key, message, "sha256").hex()


def _commitment(key: bytes, purpose: str, parts: list[str]) -> str:
    import hmac
    import struct

    message = b"registry-coordinator/commitment/v1"
    for part in [purpose, *parts]:
        message += struct.pack(">Q", len(part.encode())) + part.encode()
    return hmac.digest(key, message, "sha256").hex()


# -- the production layout: PostgreSQL, environment, every secret kind --------------------


def test_production_file_substitutes_the_given_environment_only(production: Layout) -> None:
    deployment = production.load()
    assert isinstance(deployment.database, PostgresqlDatabase)
    assert deployment.database.namespace == "coordinator_reviewed_notice"
    assert deployment.database.runtime_url_ref.text == "secret:env/COORDINATOR_RUNTIME_DATABASE_URL"
    applications = deployment.connections["applications"]
    assert applications.base_url == "https://breg.example.org"  # given, trailing / removed
    assert applications.authorization.token_endpoint == "https://idp.example.org/oauth/token"
    settings = deployment.deployment
    assert settings is not None
    assert settings.runtime_role == "coordinator_runtime"
    assert (settings.listener.host, settings.listener.port) == ("0.0.0.0", 8108)
    assert settings.active_state_key == 2
    assert list(settings.state_keys) == [1, 2]
    assert (settings.worker.poll_milliseconds, settings.worker.concurrency) == (250, 4)
    assert isinstance(settings.authentication.jwks_source, JwksUri)
    assert settings.authentication.operator_clients == frozenset({"ops-console"})

    holidays = deployment.external_http_connections["holidays"]
    assert holidays.base_url == "https://data.example.org/api"
    assert holidays.paths == ("holidays/2026", "holidays/2025")
    assert holidays.query_parameters == ()
    assert holidays.response_schema == {"type": "object", "required": ["status"]}
    assert (holidays.attempt_timeout_milliseconds, holidays.maximum_response_bytes) == (
        2000,
        65_536,
    )
    triage = deployment.evaluation_connections["triage"]
    assert isinstance(triage.authorization, BearerAuthorization)
    assert triage.authorization.principal == "coordinator-triage"
    assert (
        triage.attempt_timeout_milliseconds,
        triage.maximum_request_bytes,
        triage.maximum_response_bytes,
    ) == (8000, 65_536, 65_536)


def test_production_secrets_resolve_with_verified_tls_enforced(production: Layout) -> None:
    secrets = production.resolve()
    assert secrets.state_keys.active_version == 2
    assert secrets.state_keys.versions == (1, 2)
    assert secrets.database_url is not None
    assert secrets.database_url.role == "runtime"
    assert secrets.database_url.transport == "tls"
    # No sslmode written: verified TLS is added; the configured roots replace the system ones.
    assert secrets.database_url.url == RUNTIME_URL + "?sslmode=verify-full"
    assert secrets.trusted_root_certificates is not None
    assert secrets.trusted_root_certificates.startswith("-----BEGIN CERTIFICATE-----")
    assert set(secrets.client_signing_keys) == {"applications", "reviews", "notices", "holidays"}
    assert dict(secrets.evaluation_tokens) == {"triage": EVALUATION_TOKEN}
    assert CANARY not in repr(secrets) + repr(secrets.database_url)


def test_migration_role_resolves_only_the_migration_url(production: Layout) -> None:
    # 09 §3: migrate and apply use the migration URL; the runtime one need not be present.
    deployment = production.load()
    environment = dict(production.environment)
    del environment["COORDINATOR_RUNTIME_DATABASE_URL"]
    secrets = resolve_secrets(deployment, environment=environment, database_role="migration")
    assert secrets.database_url is not None
    assert secrets.database_url.role == "migration"
    assert secrets.database_url.url == MIGRATION_URL  # the LF removed, nothing added
    error = refusal(lambda: resolve_secrets(deployment, environment=environment))
    assert found(error) == [
        ("coordinator.secret.unavailable", "/database/postgresql/runtimeUrlRef")
    ]


# -- 05 §1: the path of the runtime file ---------------------------------------------------


def unavailable_file(error: DeploymentRefused) -> str:
    (diagnostic,) = error.diagnostics
    assert diagnostic.code == "platform.runtime-config.unavailable"
    assert error.exit_code == 3
    return diagnostic.effective_message


def test_runtime_path_must_be_absolute(
    development: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(development.runtime.parent)
    message = unavailable_file(refusal(lambda: load_deployment("runtime.yaml", environment={})))
    assert "absolute" in message


@pytest.mark.parametrize("segment", [".", ".."])
def test_runtime_path_must_not_hold_dot_segments(development: Layout, segment: str) -> None:
    directory = development.runtime.parent
    written = f"{directory}/{segment}/{directory.name}/runtime.yaml"
    if segment == ".":
        written = f"{directory}/./runtime.yaml"
    message = unavailable_file(refusal(lambda: load_deployment(written, environment={})))
    assert ". or .." in message


def test_runtime_file_must_not_be_a_symlink(development: Layout) -> None:
    link = development.runtime.parent / "link.yaml"
    link.symlink_to(development.runtime)
    message = unavailable_file(refusal(lambda: load_deployment(str(link), environment={})))
    assert "symbolic link" in message


def test_runtime_file_must_not_be_empty(development: Layout) -> None:
    development.runtime.write_bytes(b"")
    assert "empty" in unavailable_file(refusal(development.load))


def test_runtime_file_must_exist(development: Layout) -> None:
    development.runtime.unlink()
    assert "does not exist" in unavailable_file(refusal(development.load))


def test_runtime_file_must_be_a_regular_file(tmp_path: Path) -> None:
    message = unavailable_file(refusal(lambda: load_deployment(str(tmp_path), environment={})))
    assert "regular" in message


def test_runtime_file_over_one_mib_is_the_readers_too_large(development: Layout) -> None:
    # The same finding `check --runtime-config` reports (the reader's Y-rule), exit 1.
    development.edit(lambda text: text + "#" * (1_048_576 - len(text)) + "\n")
    error = refusal(development.load)
    assert [d.code for d in error.diagnostics] == ["yaml.too-large"]
    assert error.exit_code == 1


# -- 09 §3: database and deployment blocks are required -------------------------------------


def _drop_block(text: str, block: str) -> str:
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    dropping = False
    for line in lines:
        if line.startswith(f"{block}:"):
            dropping = True
            continue
        if dropping and (line.startswith(" ") or not line.strip()):
            continue
        dropping = False
        out.append(line)
    return "".join(out)


def test_missing_deployment_block_is_deployment_required(development: Layout) -> None:
    development.edit(lambda text: _drop_block(text, "deployment"))
    error = refusal(development.load)
    assert found(error) == [("coordinator.command.deployment-required", "/deployment")]
    assert error.exit_code == 2


def test_missing_deployment_block_loads_when_not_required(development: Layout) -> None:
    development.edit(lambda text: _drop_block(text, "deployment"))
    deployment = development.load(require_deployment=False)
    assert deployment.deployment is None
    error = refusal(lambda: resolve_secrets(deployment, environment={}))
    assert found(error) == [("coordinator.command.deployment-required", "/deployment")]


def test_missing_database_block_is_deployment_required_besides_the_schema(
    development: Layout,
) -> None:
    development.edit(lambda text: _drop_block(text, "database"))
    error = refusal(development.load)
    assert found(error) == [
        ("config.missing-key", "/database"),
        ("coordinator.command.deployment-required", "/database"),
    ]
    assert error.exit_code == 2
    assert error.code == "coordinator.command.deployment-required"


def test_missing_both_blocks_reports_both(development: Layout) -> None:
    development.edit(lambda text: _drop_block(_drop_block(text, "database"), "deployment"))
    error = refusal(development.load)
    assert ("coordinator.command.deployment-required", "/database") in found(error)
    assert ("coordinator.command.deployment-required", "/deployment") in found(error)


# -- 05 §3 item 4: substitution from the given environment ----------------------------------


def test_unset_variable_is_config_substitution(production: Layout) -> None:
    del production.environment["IDP_TOKEN_ENDPOINT"]
    error = refusal(production.load)
    assert {code for code, _ in found(error)} == {"config.substitution"}
    assert ("config.substitution", "/connections/notices/authorization/tokenEndpoint") in found(
        error
    )
    assert error.exit_code == 1


def test_empty_variable_is_config_substitution(production: Layout) -> None:
    production.environment["BREG_BASE_URL"] = ""
    error = refusal(production.load)
    assert found(error) == [("config.substitution", "/connections/applications/baseUrl")]


def test_process_environment_is_never_read(production: Layout) -> None:
    # The autouse fixture sets BREG_BASE_URL in os.environ; the mapping given lacks it.
    del production.environment["BREG_BASE_URL"]
    error = refusal(production.load)
    assert found(error) == [("config.substitution", "/connections/applications/baseUrl")]


def test_operator_message_of_required_variable_is_never_echoed(production: Layout) -> None:
    production.edit(
        lambda text: text.replace("${BREG_BASE_URL}", "${BREG_BASE_URL:?CANARY-7f3e-message}")
    )
    del production.environment["BREG_BASE_URL"]
    error = refusal(production.load)
    assert found(error) == [("config.substitution", "/connections/applications/baseUrl")]


def test_default_applies_to_an_unset_variable(production: Layout) -> None:
    production.edit(
        lambda text: text.replace("${BREG_BASE_URL}", "${BREG_BASE_URL:-https://breg.internal}")
    )
    del production.environment["BREG_BASE_URL"]
    assert production.load().connections["applications"].base_url == "https://breg.internal"


def test_substituted_value_is_checked_by_the_rules(production: Layout) -> None:
    production.environment["BREG_BASE_URL"] = "http://CANARY-7f3e.example.org"
    error = refusal(production.load)
    assert found(error) == [
        ("coordinator.connection.configuration", "/connections/applications/baseUrl")
    ]


def test_every_error_of_the_file_is_carried(production: Layout) -> None:
    del production.environment["BREG_BASE_URL"]
    production.edit(lambda text: text.replace("concurrency: 4", "concurrency: 9"))
    error = refusal(production.load)
    assert set(found(error)) == {
        ("config.substitution", "/connections/applications/baseUrl"),
        ("config.out-of-range", "/deployment/worker/concurrency"),
    }


# -- 05 §2.2: secret resolution ----------------------------------------------------------------


def secret_refusal(layout: Layout, **options: Any) -> DeploymentRefused:
    deployment = layout.load()
    return refusal(lambda: resolve_secrets(deployment, environment=layout.environment, **options))


def only(error: DeploymentRefused, code: str, path: str) -> Diagnostic:
    assert found(error) == [(code, path)]
    (diagnostic,) = error.diagnostics
    return diagnostic


def test_secret_file_missing_is_unavailable_at_the_referencing_member(
    development: Layout,
) -> None:
    (development.secrets / "state-1.key").unlink()
    error = secret_refusal(development)
    diagnostic = only(error, "coordinator.secret.unavailable", "/deployment/stateKeys/1/keyRef")
    assert error.exit_code == 3
    assert diagnostic.file == development.path
    assert diagnostic.line is not None and diagnostic.column is not None
    shown = rendered(error.diagnostics)
    assert "state-1.key" not in shown.replace(development.path, "")
    assert str(development.secrets) not in shown


def test_secret_file_that_is_a_symlink_inside_the_root_is_unavailable(
    development: Layout,
) -> None:
    target = development.secrets / "real-audit.key"
    write_secret(development.secrets, "real-audit.key", AUDIT_KEY)
    (development.secrets / "audit.key").unlink()
    (development.secrets / "audit.key").symlink_to(target)
    error = secret_refusal(development)
    diagnostic = only(error, "coordinator.secret.unavailable", "/deployment/auditKeyRef")
    assert "symbolic link" in diagnostic.effective_message


def test_secret_file_symlink_escaping_the_root_is_unavailable(
    development: Layout, tmp_path_factory: pytest.TempPathFactory
) -> None:
    outside = tmp_path_factory.mktemp("outside") / "admission.key"
    outside.write_bytes(ADMISSION_KEY)
    outside.chmod(0o600)
    (development.secrets / "admission.key").unlink()
    (development.secrets / "admission.key").symlink_to(outside)
    error = secret_refusal(development)
    only(error, "coordinator.secret.unavailable", "/deployment/admissionKeyRef")


def test_secret_that_is_not_a_regular_file_is_unavailable(development: Layout) -> None:
    (development.secrets / "state-1.key").unlink()
    (development.secrets / "state-1.key").mkdir()
    error = secret_refusal(development)
    diagnostic = only(error, "coordinator.secret.unavailable", "/deployment/stateKeys/1/keyRef")
    assert "regular" in diagnostic.effective_message


def test_secret_fifo_is_unavailable_without_blocking(development: Layout) -> None:
    (development.secrets / "audit.key").unlink()
    os.mkfifo(development.secrets / "audit.key", 0o600)
    only(secret_refusal(development), "coordinator.secret.unavailable", "/deployment/auditKeyRef")


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o610, 0o601, 0o660])
def test_secret_file_with_group_or_other_bits_is_unavailable(
    development: Layout, mode: int
) -> None:
    (development.secrets / "state-1.key").chmod(mode)
    error = secret_refusal(development)
    diagnostic = only(error, "coordinator.secret.unavailable", "/deployment/stateKeys/1/keyRef")
    assert "group" in diagnostic.effective_message


def test_secret_file_owned_by_another_user_is_unavailable(development: Layout) -> None:
    deployment = development.load()
    error = refusal(
        lambda: resolve_secrets(deployment, environment={}, process_uid=os.geteuid() + 4242)
    )
    assert {code for code, _ in found(error)} == {"coordinator.secret.unavailable"}
    assert len(error.diagnostics) == 9  # every file secret, each at its own member
    assert all("owned" in d.effective_message for d in error.diagnostics)


@pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")
def test_secret_file_chowned_away_is_unavailable(development: Layout) -> None:
    os.chown(development.secrets / "admission.key", 4242, -1)
    only(
        secret_refusal(development),
        "coordinator.secret.unavailable",
        "/deployment/admissionKeyRef",
    )


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files without read permission")
def test_secret_file_without_read_permission_is_unavailable(development: Layout) -> None:
    (development.secrets / "audit.key").chmod(0o200)
    only(secret_refusal(development), "coordinator.secret.unavailable", "/deployment/auditKeyRef")


def test_secret_file_over_65536_bytes_is_unavailable(development: Layout) -> None:
    development.secret("audit.key", AUDIT_KEY + b"x" * (65_537 - len(AUDIT_KEY)))
    error = secret_refusal(development)
    diagnostic = only(error, "coordinator.secret.unavailable", "/deployment/auditKeyRef")
    assert "65,536" in diagnostic.effective_message


def test_secret_file_of_exactly_65536_bytes_is_read(development: Layout) -> None:
    development.secret("audit.key", AUDIT_KEY + b"x" * (65_536 - len(AUDIT_KEY)))
    development.resolve()


def test_missing_provider_root_makes_every_file_secret_unavailable(development: Layout) -> None:
    for path in development.secrets.iterdir():
        path.unlink()
    development.secrets.rmdir()
    error = secret_refusal(development)
    assert len(error.diagnostics) == 9
    assert {code for code, _ in found(error)} == {"coordinator.secret.unavailable"}


def test_environment_secret_unset_or_empty_is_unavailable(production: Layout) -> None:
    production.environment["EVALUATION_TOKEN"] = ""
    only(
        secret_refusal(production),
        "coordinator.secret.unavailable",
        "/evaluationConnections/triage/authorization/bearer/tokenRef",
    )
    del production.environment["EVALUATION_TOKEN"]
    only(
        secret_refusal(production),
        "coordinator.secret.unavailable",
        "/evaluationConnections/triage/authorization/bearer/tokenRef",
    )


# -- the forms of 05 §2.2 ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        STATE_KEY[:31],
        STATE_KEY + b"!",
        STATE_KEY + b"\n",  # keys are raw bytes: no line feed is removed
        bytes(32),
        b"",
    ],
    ids=["31-bytes", "33-bytes", "trailing-line-feed", "all-zero", "empty"],
)
def test_state_key_must_be_exactly_32_raw_bytes_not_all_zero(
    development: Layout, key: bytes
) -> None:
    development.secret("state-1.key", key)
    error = secret_refusal(development)
    only(error, "coordinator.secret.invalid", "/deployment/stateKeys/1/keyRef")
    assert error.exit_code == 1


@pytest.mark.parametrize("key", [ADMISSION_KEY[:31], bytes(32)], ids=["31-bytes", "all-zero"])
def test_admission_key_must_be_exactly_32_raw_bytes_not_all_zero(
    development: Layout, key: bytes
) -> None:
    development.secret("admission.key", key)
    only(secret_refusal(development), "coordinator.secret.invalid", "/deployment/admissionKeyRef")


def test_admission_key_must_differ_from_every_state_key(production: Layout) -> None:
    production.secret("admission.key", STATE_KEY)  # equal to the non-active version 1
    error = secret_refusal(production)
    diagnostic = only(error, "coordinator.secret.invalid", "/deployment/admissionKeyRef")
    assert "same as a state key" in diagnostic.effective_message


def test_audit_key_must_be_at_least_32_bytes(development: Layout) -> None:
    development.secret("audit.key", AUDIT_KEY[:31])
    only(secret_refusal(development), "coordinator.secret.invalid", "/deployment/auditKeyRef")
    development.secret("audit.key", AUDIT_KEY[:32])
    development.resolve()


def test_event_signing_key_must_be_at_least_32_bytes(development: Layout) -> None:
    development.secret("applications-events.key", EVENT_KEY[:31])
    only(
        secret_refusal(development),
        "coordinator.secret.invalid",
        "/eventSources/applications/signingKeyRef",
    )


def _public_only(jwk: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in jwk.items() if k != "d"}


def _without_kid(jwk: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in jwk.items() if k != "kid"}


@pytest.mark.parametrize(
    "content",
    [
        lambda: b"CANARY-7f3e not json",
        lambda: b"[]",
        lambda: jwk_bytes(_public_only(ec_jwk())),
        lambda: jwk_bytes(_without_kid(ec_jwk())),
        lambda: jwk_bytes(ec_jwk(curve=ec.SECP384R1())),
        lambda: jwk_bytes(rsa_jwk(1024)),
        lambda: jwk_bytes({"kty": "oct", "k": "Q0FOQVJZLTdmM2U", "kid": "k"}),
        lambda: jwk_bytes({**ec_jwk(), "alg": "RS256"}),
        lambda: b'{"kty":"EC","kty":"EC"}',
    ],
    ids=[
        "not-json",
        "not-an-object",
        "public-only",
        "no-kid",
        "p-384",
        "rsa-1024",
        "symmetric",
        "wrong-alg",
        "duplicate-member",
    ],
)
def test_client_signing_key_must_be_a_private_jwk(
    development: Layout, content: Callable[[], bytes]
) -> None:
    development.secret("notices-client.jwk", content())
    only(
        secret_refusal(development),
        "coordinator.secret.invalid",
        "/connections/notices/authorization/signingKeyRef",
    )


def test_client_signing_key_may_be_rsa_of_2048_bits(development: Layout) -> None:
    development.secret("notices-client.jwk", jwk_bytes(rsa_jwk(2048)))
    assert json.loads(development.resolve().client_signing_keys["notices"])["kty"] == "RSA"


@pytest.mark.parametrize(
    "token",
    [b"A" * 31, b"A" * 4097, b"CANARY-7f3e token with spaces....", "é".encode() * 20],
    ids=["31-bytes", "4097-bytes", "space", "non-ascii"],
)
def test_bearer_token_must_be_32_to_4096_visible_ascii_bytes(
    development: Layout, token: bytes
) -> None:
    development.secret("casework-completions-token", token)
    only(
        secret_refusal(development),
        "coordinator.secret.invalid",
        "/connections/reviews/reviewCompletions/tokenRef",
    )


@pytest.mark.parametrize("size", [32, 4096])
def test_bearer_token_bounds_are_inclusive(development: Layout, size: int) -> None:
    development.secret("casework-completions-token", b"T" * size + b"\n")
    assert development.resolve().review_completion_tokens["reviews"] == b"T" * size


def test_only_one_trailing_line_feed_is_removed_from_text_secrets(development: Layout) -> None:
    development.secret("casework-completions-token", COMPLETION_TOKEN + b"\n\n")
    only(
        secret_refusal(development),
        "coordinator.secret.invalid",
        "/connections/reviews/reviewCompletions/tokenRef",
    )


@pytest.mark.parametrize(
    "document",
    [b"CANARY-7f3e", b"{}", b'{"keys":[]}', b'{"keys":[{"crv":"P-256"}]}', b"[]"],
    ids=["not-json", "no-keys", "empty-keys", "key-without-kty", "not-an-object"],
)
def test_static_jwks_must_be_a_jwks_document(development: Layout, document: bytes) -> None:
    development.secret("caller-jwks.json", document)
    only(
        secret_refusal(development),
        "coordinator.secret.invalid",
        "/deployment/authentication/jwksSource/documentRef",
    )


def test_trusted_roots_must_be_pem_certificates(production: Layout) -> None:
    production.secret("database-roots.pem", b"-----BEGIN CERTIFICATE-----\nCANARY7f3e\n")
    only(
        secret_refusal(production),
        "coordinator.secret.invalid",
        "/database/postgresql/trustedRootCertificateRef",
    )


def test_text_secret_must_be_utf8(development: Layout) -> None:
    development.secret("notices-client.jwk", b'{"kid":"\xff"}')
    only(
        secret_refusal(development),
        "coordinator.secret.invalid",
        "/connections/notices/authorization/signingKeyRef",
    )


# -- 05 §4.1: database URLs and the TLS rule ---------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "postgres://u:CANARY-7f3e@db.example.org/app",
        "mysql://u:CANARY-7f3e@db.example.org/app",
        "postgresql://db.example.org/app",
        "postgresql://:CANARY-7f3e@db.example.org/app",
        "postgresql://u:CANARY-7f3e@db.example.org",
        "postgresql://u:CANARY-7f3e@db.example.org/",
        "postgresql://u:CANARY-7f3e@db.example.org/app/extra",
        "postgresql://u:CANARY-7f3e@db.example.org:99999/app",
        "postgresql://u:CANARY-7f3e@db1.example.org,db2.example.org/app",
        "postgresql://u:CANARY-7f3e@db.example.org/app#fragment",
        "postgresql://u:CANARY-7f3e@db.example.org/app?sslmode=verify-full&sslmode=disable",
        "postgresql://u:CANARY-7f3e@/app",
    ],
    ids=[
        "postgres-scheme",
        "other-scheme",
        "no-user",
        "empty-user",
        "no-database",
        "empty-database",
        "path-after-database",
        "port-out-of-range",
        "several-hosts-without-target-session-attrs",
        "fragment",
        "repeated-parameter",
        "no-host",
    ],
)
def test_database_url_must_have_the_postgresql_form(production: Layout, url: str) -> None:
    production.environment["COORDINATOR_RUNTIME_DATABASE_URL"] = url
    only(
        secret_refusal(production),
        "coordinator.secret.invalid",
        "/database/postgresql/runtimeUrlRef",
    )


@pytest.mark.parametrize("mode", ["disable", "allow", "prefer", "require", "verify-ca"])
def test_remote_database_url_weakening_tls_is_database_tls_required(
    production: Layout, mode: str
) -> None:
    production.environment["COORDINATOR_RUNTIME_DATABASE_URL"] = f"{RUNTIME_URL}?sslmode={mode}"
    error = secret_refusal(production)
    only(error, "coordinator.command.database-tls-required", "/database/postgresql/runtimeUrlRef")
    assert error.exit_code == 1


def test_remote_database_behind_a_loopback_name_is_judged_by_hostaddr(production: Layout) -> None:
    production.environment["COORDINATOR_RUNTIME_DATABASE_URL"] = (
        "postgresql://u:CANARY-7f3e@localhost/app?hostaddr=192.0.2.7&sslmode=disable"
    )
    only(
        secret_refusal(production),
        "coordinator.command.database-tls-required",
        "/database/postgresql/runtimeUrlRef",
    )


@pytest.mark.parametrize(
    ("url", "transport"),
    [
        ("postgresql://u:pw@127.0.0.1:5432/app?sslmode=disable", "loopback"),
        ("postgresql://u:pw@127.8.9.10/app", "loopback"),
        ("postgresql://u:pw@[::1]:5432/app?sslmode=disable", "loopback"),
        ("postgresql://u:pw@localhost/app", "loopback"),
        ("postgresql://u@%2Fvar%2Frun%2Fpostgresql/app", "unix-socket"),
        ("postgresql://u@/app?host=/var/run/postgresql", "unix-socket"),
    ],
)
def test_loopback_and_unix_socket_database_urls_may_be_plaintext(
    production: Layout, url: str, transport: str
) -> None:
    production.environment["COORDINATOR_RUNTIME_DATABASE_URL"] = url
    database_url = production.resolve().database_url
    assert database_url is not None
    assert database_url.transport == transport
    assert database_url.url == url  # nothing added for loopback or a socket


@pytest.mark.parametrize(
    ("url", "transport"),
    [
        (
            "postgresql://u:pw@127.0.0.1:5432,127.0.0.1:5433/app?target_session_attrs=read-write",
            "loopback",
        ),
        (
            "postgresql://u:pw@db1.example.org,db2.example.org:6432/app"
            "?target_session_attrs=primary&sslmode=verify-full",
            "tls",
        ),
    ],
)
def test_a_primary_and_its_standbys_are_one_multi_host_url_that_only_writes_to_the_primary(
    production: Layout, url: str, transport: str
) -> None:
    production.environment["COORDINATOR_RUNTIME_DATABASE_URL"] = url
    database_url = production.resolve().database_url
    assert database_url is not None and database_url.transport == transport


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:CANARY-7f3e@127.0.0.1,db2.example.org/app?target_session_attrs=read-write"
        "&sslmode=disable",
        "postgresql://u:CANARY-7f3e@db1.example.org,db2.example.org/app?target_session_attrs=any",
        "postgresql://u:CANARY-7f3e@db1.example.org,,db2.example.org/app"
        "?target_session_attrs=read-write",
    ],
    ids=["a-remote-standby-in-plaintext", "any-server", "an-empty-host"],
)
def test_a_multi_host_url_that_could_write_elsewhere_or_in_plaintext_is_refused(
    production: Layout, url: str
) -> None:
    production.environment["COORDINATOR_RUNTIME_DATABASE_URL"] = url
    error = secret_refusal(production)
    assert error.diagnostics[0].code in (
        "coordinator.secret.invalid",
        "coordinator.command.database-tls-required",
    )
    assert "CANARY" not in str([d.to_json() for d in error.diagnostics])


def test_remote_database_url_without_roots_uses_verified_tls_and_the_system_roots(
    production: Layout,
) -> None:
    production.edit(
        lambda text: text.replace(
            "    trustedRootCertificateRef: secret:file/database-roots.pem\n", ""
        )
    )
    production.environment["COORDINATOR_RUNTIME_DATABASE_URL"] = (
        "postgresql://u:pw@db.example.org/app?application_name=coordinator"
    )
    database_url = production.resolve().database_url
    assert database_url is not None
    assert database_url.transport == "tls"
    assert database_url.url == (
        "postgresql://u:pw@db.example.org/app?application_name=coordinator"
        "&sslmode=verify-full&sslrootcert=system"
    )


def test_remote_database_url_with_verify_full_is_kept(production: Layout) -> None:
    url = f"{RUNTIME_URL}?sslmode=verify-full"
    production.environment["COORDINATOR_RUNTIME_DATABASE_URL"] = url
    database_url = production.resolve().database_url
    assert database_url is not None and database_url.url == url


def test_database_url_from_a_file_loses_one_line_feed(production: Layout) -> None:
    secrets = production.resolve(database_role="migration")
    assert secrets.database_url is not None
    assert secrets.database_url.url == MIGRATION_URL


# -- collecting every problem, and the canary ---------------------------------------------------


def test_every_secret_problem_is_reported_at_once(production: Layout) -> None:
    (production.secrets / "state-1.key").unlink()
    production.secret("audit.key", AUDIT_KEY[:5])
    production.environment["COORDINATOR_RUNTIME_DATABASE_URL"] = f"{RUNTIME_URL}?sslmode=require"
    del production.environment["EVALUATION_TOKEN"]
    error = secret_refusal(production)
    assert set(found(error)) == {
        ("coordinator.secret.unavailable", "/deployment/stateKeys/1/keyRef"),
        ("coordinator.secret.invalid", "/deployment/auditKeyRef"),
        ("coordinator.command.database-tls-required", "/database/postgresql/runtimeUrlRef"),
        (
            "coordinator.secret.unavailable",
            "/evaluationConnections/triage/authorization/bearer/tokenRef",
        ),
    }
    assert error.exit_code == 3  # the maximum class (02 §3)
    assert error.code == "coordinator.secret.unavailable"


def test_canary_no_secret_content_or_environment_value_in_any_diagnostic(
    production: Layout,
) -> None:
    # Every secret holds the canary and every one is of the wrong form or unreadable.
    for name in [p.name for p in production.secrets.iterdir()]:
        production.secret(name, b"CANARY-7f3e" * 2)  # 22 bytes: too short for every kind
    (production.secrets / "state-2.key").chmod(0o644)
    production.environment["COORDINATOR_RUNTIME_DATABASE_URL"] = "CANARY-7f3e://nothing"
    production.environment["EVALUATION_TOKEN"] = "CANARY-7f3e with spaces"
    error = secret_refusal(production)
    assert len(error.diagnostics) == 13  # every secret the runtime role resolves
    shown = rendered(error.diagnostics) + str(error) + repr(error)
    assert CANARY not in shown
    assert "secret:" not in shown
    assert str(production.secrets) not in shown.replace(production.path, "")


# -- 05 §10: binding digest -------------------------------------------------------------------


def test_binding_digest_vector_for_one_breg_connection(development: Layout) -> None:
    # No vector in 05 §10; this pins the JCS bytes written out by hand for the §11.1 example.
    expected_jcs = (
        b'{"applications":{"abi":"coordinator-adapters/v4",'
        b'"baseUrl":"http://127.0.0.1:8101",'
        b'"clientAssertionAudience":"http://127.0.0.1:8100/oauth/token",'
        b'"clientId":"coordinator-applications",'
        b'"product":"breg","profile":"coordinator-reader",'
        b'"resource":"urn:registrystack:breg:applications",'
        b'"scopes":["breg:records:read"],'
        b'"tokenEndpoint":"http://127.0.0.1:8100/oauth/token"}}'
    )
    workflow = {
        "operations": {"record": {"operation": "breg.read-record/v1", "connection": "applications"}}
    }
    assert binding_digest(development.load(), workflow) == (
        "sha256:" + hashlib.sha256(expected_jcs).hexdigest()
    )


def test_binding_digest_of_the_reviewed_notice_example(development: Layout) -> None:
    deployment = development.load()
    digest = binding_digest(deployment, WORKFLOW)
    identities = {
        name: connection_identity(deployment, name)
        for name in ("applications", "notices", "reviews")
    }
    assert digest == "sha256:" + hashlib.sha256(canonical_json(identities)).hexdigest()
    assert "profile" not in identities["reviews"]  # breg only
    assert identities["reviews"]["abi"] == "coordinator-adapters/v4"
    assert binding_digest(development.load(), WORKFLOW) == digest  # stable across loads


def test_binding_digest_without_connections_is_that_of_the_empty_object(
    development: Layout,
) -> None:
    empty = "sha256:" + hashlib.sha256(b"{}").hexdigest()
    assert binding_digest(development.load(), {"operations": {}}) == empty


def _digest_after(layout: Layout, change: Callable[[str], str]) -> str:
    before = binding_digest(layout.load(), WORKFLOW)
    layout.edit(change)
    after = binding_digest(layout.load(), WORKFLOW)
    return "same" if after == before else "changed"


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("secret:file/notices-client.jwk", "secret:file/notices-client-2.jwk"),
        ("secret:file/casework-completions-token", "secret:file/other-token"),
        ("minimumIntervalSeconds: 30", "minimumIntervalSeconds: 60"),
        (
            "source: urn:registrystack:registry:example:instance:primary",
            "source: urn:example:other",
        ),
        ("activeStateKey: 1", "activeStateKey: 1\n  worker: {concurrency: 2}"),
        ("baseUrl: http://127.0.0.1:8103", "baseUrl: http://127.0.0.1:8103/"),
        (
            "      scopes: [breg:records:read]",
            "      scopes: [breg:records:read]\n"
            "      clientAssertionAudience: http://127.0.0.1:8100/oauth/token",
        ),
        (
            "eventSources:",
            "externalHttpConnections:\n  unused:\n    baseUrl: https://x.example.org\n"
            "    paths: [a]\n    responseSchema: {}\neventSources:",
        ),
    ],
    ids=[
        "signing-key-ref",
        "review-completions",
        "observation-floor",
        "event-source",
        "worker-settings",
        "trailing-slash",
        "audience-written-as-its-default",
        "unused-connection",
    ],
)
def test_binding_digest_ignores_what_is_not_identity(
    development: Layout, old: str, new: str
) -> None:
    assert old in development.runtime.read_text("utf-8")
    assert _digest_after(development, lambda t: t.replace(old, new)) == "same"


def test_binding_digest_ignores_scope_order(development: Layout) -> None:
    development.edit(
        lambda t: t.replace("scopes: [breg:records:read]", "scopes: [a:b, breg:records:read]")
    )
    before = binding_digest(development.load(), WORKFLOW)
    development.edit(
        lambda t: t.replace("scopes: [a:b, breg:records:read]", "scopes: [breg:records:read, a:b]")
    )
    assert binding_digest(development.load(), WORKFLOW) == before


def test_binding_digest_ignores_key_rotation(development: Layout) -> None:
    before = binding_digest(development.load(), WORKFLOW)
    development.edit(
        lambda t: t.replace(
            '  activeStateKey: 1\n  stateKeys:\n    "1":\n      keyRef: secret:file/state-1.key\n',
            '  activeStateKey: 2\n  stateKeys:\n    "1":\n      keyRef: secret:file/state-1.key\n'
            '    "2":\n      keyRef: secret:file/state-2.key\n',
        )
    )
    deployment = development.load()
    assert deployment.deployment is not None and deployment.deployment.active_state_key == 2
    assert binding_digest(deployment, WORKFLOW) == before


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("baseUrl: http://127.0.0.1:8103", "baseUrl: http://127.0.0.1:8104"),
        ("clientId: coordinator-notices", "clientId: coordinator-notices-2"),
        ("resource: urn:registrystack:messaging", "resource: urn:registrystack:messaging:2"),
        ("scopes: [messaging:messages:submit]", "scopes: [messaging:messages:submit, x:y]"),
        ("profile: coordinator-reader", "profile: coordinator-reader-2"),
        (
            "      clientId: coordinator-notices\n",
            "      clientId: coordinator-notices\n"
            "      clientAssertionAudience: urn:example:assertion\n",
        ),
        (
            "tokenEndpoint: http://127.0.0.1:8100/oauth/token\n      clientId: coordinator-reviews",
            "tokenEndpoint: http://127.0.0.1:8109/oauth/token\n      clientId: coordinator-reviews",
        ),
    ],
    ids=[
        "base-url",
        "client-id",
        "resource",
        "scopes",
        "profile",
        "assertion-audience",
        "token-endpoint",
    ],
)
def test_binding_digest_changes_with_endpoint_or_identity(
    development: Layout, old: str, new: str
) -> None:
    assert old in development.runtime.read_text("utf-8")
    assert _digest_after(development, lambda t: t.replace(old, new, 1)) == "changed"


def test_binding_digest_of_external_and_evaluation_connections(production: Layout) -> None:
    deployment = production.load()
    holidays = connection_identity(deployment, "holidays")
    assert holidays == {
        "product": "external-http",
        "baseUrl": "https://data.example.org/api",
        "paths": ["holidays/2025", "holidays/2026"],
        "queryParameters": [],
        "authorization": {
            "tokenEndpoint": "https://idp.example.org/oauth/token",
            "clientId": "coordinator-holidays",
            "clientAssertionAudience": "https://idp.example.org/oauth/token",
            "resource": "urn:example:holidays",
            "scopes": ["holidays:read"],
        },
        "responseSchema": {"type": "object", "required": ["status"]},
        "attemptTimeoutMilliseconds": 2000,
        "maximumResponseBytes": 65_536,
        "abi": "coordinator-external-http/v1",
    }
    assert connection_identity(deployment, "triage") == {
        "product": "evaluation",
        "protocol": "system-one",
        "baseUrl": "https://evaluation.example.org",
        "model": "system-one/large:2026",
        "authorization": {"bearer": {"principal": "coordinator-triage"}},
        "attemptTimeoutMilliseconds": 8000,
        "maximumRequestBytes": 65_536,
        "maximumResponseBytes": 65_536,
        "abi": "coordinator-evaluation/v1",
    }
    workflow = {
        "operations": {
            "h": {"operation": "external-http.get/v1", "connection": "holidays"},
            "t": {"operation": "evaluation.evaluate/v1", "connection": "triage"},
        }
    }
    before = binding_digest(deployment, workflow)
    # Defaults written explicitly and the bearer secret renamed: same identity.
    production.edit(
        lambda t: t.replace(
            "    responseSchema:\n",
            "    attemptTimeoutMilliseconds: 2000\n    responseSchema:\n",
        ).replace("secret:env/EVALUATION_TOKEN", "secret:env/OTHER_TOKEN")
    )
    assert binding_digest(production.load(), workflow) == before
    production.edit(lambda t: t.replace("principal: coordinator-triage", "principal: other"))
    assert binding_digest(production.load(), workflow) != before


def test_evaluation_local_identity(production: Layout) -> None:
    production.edit(
        lambda t: t.replace(
            "    baseUrl: https://evaluation.example.org\n", "    baseUrl: http://127.0.0.1:8110\n"
        ).replace(
            "      bearer:\n        tokenRef: secret:env/EVALUATION_TOKEN\n"
            "        principal: coordinator-triage\n",
            "      local: {}\n",
        )
    )
    deployment = production.load()
    assert isinstance(deployment.evaluation_connections["triage"].authorization, LocalAuthorization)
    assert connection_identity(deployment, "triage")["authorization"] == {"local": {}}


def test_binding_digest_of_an_unbound_connection_is_refused(development: Layout) -> None:
    workflow = {"operations": {"x": {"operation": "breg.read-record/v1", "connection": "absent"}}}
    error = refusal(lambda: binding_digest(development.load(), workflow))
    assert found(error) == [("coordinator.runtime.workflow-binding", "/connections/absent")]


# -- the refusal type -------------------------------------------------------------------------


def test_refusal_needs_a_diagnostic() -> None:
    with pytest.raises(ValueError, match="at least one"):
        DeploymentRefused([])


def test_refusal_primary_diagnostic_is_the_first_of_the_highest_class() -> None:
    error = DeploymentRefused(
        [
            Diagnostic("config.substitution", path="/a"),
            Diagnostic("coordinator.command.deployment-required", path="/deployment"),
            Diagnostic("coordinator.command.deployment-required", path="/database"),
        ]
    )
    assert error.exit_code == 2
    assert error.diagnostic.path == "/deployment"
    assert len(error.diagnostics) == 3


def test_secret_files_are_created_owner_only_in_these_tests(development: Layout) -> None:
    # Guards the fixtures: a umask that widened modes would turn every test into "mode".
    for path in development.secrets.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0


def test_a_bound_workflow_with_served_operations_has_no_deployment_problems(
    development: Layout,
) -> None:
    from coordinator_core.shell.deployment import package_binding_problems

    assert package_binding_problems(development.load(), WORKFLOW) == []


def test_the_bindings_are_checked_against_the_file_as_loaded_without_reading_it_again(
    development: Layout,
) -> None:
    """The runtime file is read and checked once per process: the package's bindings are
    checked against the check `load_deployment` made, even when the file is gone since."""
    from coordinator_core.shell.deployment import package_binding_problems

    deployment = development.load()
    assert deployment.runtime_check is not None
    development.runtime.unlink()
    assert package_binding_problems(deployment, WORKFLOW) == []


def test_an_operation_no_adapter_serves_is_refused_at_its_alias(
    development: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build whose adapters lost an operation refuses the workflow (apply,
    deployment-status and serve all ask this function) instead of failing every run."""
    from coordinator_core.shell.adapters import registry
    from coordinator_core.shell.deployment import package_binding_problems

    monkeypatch.setattr(
        registry,
        "SERVED_OPERATIONS",
        registry.SERVED_OPERATIONS - {"messaging.submit-message/v1"},
    )
    problems = package_binding_problems(development.load(), WORKFLOW)
    notices = [
        alias
        for alias, entry in WORKFLOW["operations"].items()
        if entry["operation"] == "messaging.submit-message/v1"
    ]
    assert [(d.code, d.path) for d in problems] == [
        ("coordinator.runtime.operation-unserved", f"/operations/{alias}/operation")
        for alias in notices
    ]
    assert all(
        d.effective_hint and "messaging.submit-message/v1" in d.effective_message for d in problems
    )


def test_an_unbound_connection_is_still_the_binding_code_not_unserved(
    development: Layout,
) -> None:
    from coordinator_core.shell.deployment import package_binding_problems

    workflow = {"operations": {"x": {"operation": "breg.read-record/v1", "connection": "absent"}}}
    problems = package_binding_problems(development.load(), workflow)
    assert [d.code for d in problems] == ["coordinator.runtime.workflow-binding"]


def test_every_connection_map_becomes_an_adapter_connection(production: Layout) -> None:
    from coordinator_core.shell.adapters import (
        EvaluationConnection,
        ExternalConnection,
        ProductConnection,
    )
    from coordinator_core.shell.deployment import bound_connections

    deployment = production.load()
    bound = bound_connections(deployment, production.resolve())
    assert set(bound) == {"applications", "reviews", "notices", "holidays", "triage"}
    holidays, triage = bound["holidays"], bound["triage"]
    assert isinstance(holidays, ExternalConnection)
    assert holidays.paths == frozenset({"holidays/2026", "holidays/2025"})
    assert holidays.response_schema == {"type": "object", "required": ["status"]}
    assert holidays.authorization is not None
    assert holidays.authorization.signing_key  # the resolved private JWK
    assert isinstance(triage, EvaluationConnection)
    assert (triage.model, triage.bearer_token) == (
        deployment.evaluation_connections["triage"].model,
        EVALUATION_TOKEN,
    )
    assert EVALUATION_TOKEN not in repr(triage)
    assert all(isinstance(bound[name], ProductConnection) for name in ("applications", "notices"))
