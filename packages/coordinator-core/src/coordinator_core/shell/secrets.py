"""Secret resolution for the service and the deployment commands (contract 05 §2.2, §4.1, §9 V12).

`resolve_secrets(deployment, *, environment, database_role="runtime") -> Secrets` reads every
secret the runtime file names and checks its form:

* `secret:env/NAME` is taken from `environment` (the caller passes the process environment;
  this module never reads `os.environ`): it must be set and non-empty.
* `secret:file/name` is the file `name` directly inside the file provider's root, opened
  relative to the root with `O_NOFOLLOW`, so it cannot be a symlink and cannot leave the root
  (the name grammar has no `/`, and `.`/`..` are refused). It must be a regular file owned by
  the process user, with `mode & 0o077 == 0`, of at most 65,536 bytes.
* Keys are raw bytes, taken as they are. Text secrets (URLs, bearer tokens, PEM, JSON) lose one
  trailing line feed and must be UTF-8.

A missing or unreadable secret, or a secret file that breaks the file rules, is
`coordinator.secret.unavailable` (exit 3); a secret of the wrong form is
`coordinator.secret.invalid` (exit 1); a non-loopback PostgreSQL URL that weakens TLS below
certificate and host-name verification is `coordinator.command.database-tls-required` (exit 1).
Every problem is collected and raised together as `DeploymentRefused`. A diagnostic points at
the member that holds the reference (its JSON pointer and position in the runtime file); it
never contains the secret, its file path or the reference text.

Only the database URL of `database_role` is resolved: `runtime` for `serve`, `worker`, `plan`
and `deployment-status`, `migration` for `migrate` and `apply` (09 §3 "Credentials"), so a
service never needs the migration credentials in its environment. Every other secret is
resolved for every command.
"""

from __future__ import annotations

import errno
import hmac
import ipaddress
import os
import re
import ssl
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Literal
from urllib.parse import parse_qsl, unquote, urlsplit

from coordinator_core import limits
from coordinator_core.config.model import (
    BearerAuthorization,
    ClientAuthorization,
    Deployment,
    DeploymentRefused,
    DeploymentSettings,
    JwksStatic,
    PostgresqlDatabase,
    SecretRef,
)
from coordinator_core.errors import CoordinatorError, Diagnostic
from coordinator_core.shell.adapters.credentials import SigningKeyError, load_signing_key
from coordinator_core.shell.audit import AuditReferences
from coordinator_core.shell.sealing import STATE_KEY_BYTES, AdmissionKey, StateKeyRing
from coordinator_core.values import StrictJsonError, parse_strict_json

__all__ = [
    "MAX_SECRET_FILE_BYTES",
    "DatabaseRole",
    "DatabaseTransport",
    "DatabaseUrl",
    "Secrets",
    "resolve_secrets",
]

DatabaseRole = Literal["runtime", "migration"]
DatabaseTransport = Literal["loopback", "unix-socket", "tls"]

MAX_SECRET_FILE_BYTES: Final = 65_536
MIN_SHARED_KEY_BYTES: Final = 32  # audit key, event signing key (05 §2.2)
MIN_BEARER_BYTES: Final = 32
MAX_BEARER_BYTES: Final = 4096

_UNAVAILABLE: Final = "coordinator.secret.unavailable"
_INVALID: Final = "coordinator.secret.invalid"
_TLS_REQUIRED: Final = "coordinator.command.database-tls-required"

_ENV_NAME: Final = re.compile(r"[A-Z_][A-Z0-9_]{0,127}")
_FILE_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_BEARER: Final = re.compile(rb"[\x21-\x7e]+")
_PEM_CERTIFICATE: Final = re.compile(
    r"-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\r\n]+-----END CERTIFICATE-----"
)
_VERIFIED_SSLMODE: Final = "verify-full"
_OPEN_FLAGS: Final = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
)
_DIRECTORY_FLAGS: Final = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)

# Fixed sentences (02 §1 item 2, 05 §2.2): none names the secret, its path or its reference.
_MESSAGES: Final = {
    "env-unset": "The environment variable this secret reference names is unset or empty.",
    "undeclared": "This secret reference names a provider that secretProviders does not declare.",
    "root": "The file provider's root is not a directory that can be opened.",
    "name": "This secret reference does not name a file directly inside the provider's root.",
    "missing": "The secret file this reference names does not exist.",
    "symlink": "The secret file this reference names is a symbolic link.",
    "not-regular": "The secret file this reference names is not a regular file.",
    "owner": "The secret file this reference names is not owned by the user running the process.",
    "mode": "The secret file this reference names is accessible to its group or to others.",
    "too-large": "The secret file this reference names is larger than 65,536 bytes.",
    "unreadable": "The secret file this reference names cannot be read.",
    "state-key": "The state key is not exactly 32 raw bytes, or it is all zero.",
    "admission-key": "The admission key is not exactly 32 raw bytes, or it is all zero.",
    "admission-equal": "The admission key is the same as a state key.",
    "audit-key": "The audit key is shorter than 32 bytes.",
    "event-key": "The event signing key is shorter than 32 bytes.",
    "text": "The secret is not UTF-8 text.",
    "jwk": (
        "The client signing key is not a private JWK with a kid: EC on P-256 with d, or RSA "
        "of at least 2048 bits with its private members."
    ),
    "bearer": "The bearer token is not 32 to 4,096 bytes of visible ASCII.",
    "database-url": (
        "The database URL is not of the form "
        "postgresql://user[:password]@host[:port]/dbname[?params] (several hosts, as "
        "host1:port1,host2:port2, need target_session_attrs=read-write)."
    ),
    "trusted-roots": "The trusted roots are not PEM certificates.",
    "jwks": "The caller key set is not a JWKS JSON document with at least one key.",
    "tls": (
        "The database URL names a host other than loopback or a Unix socket and sets an "
        "sslmode weaker than verify-full."
    ),
}


@dataclass(frozen=True, slots=True, repr=False)
class DatabaseUrl:
    """The resolved PostgreSQL URL of one role (05 §4.1), with TLS enforced.

    `transport` is `loopback` (a loopback address or `localhost`), `unix-socket` (a host that
    is an absolute directory), or `tls`. For `tls`, `url` carries `sslmode=verify-full`
    (added when the URL had no `sslmode`) and, when neither the URL nor
    `trustedRootCertificateRef` names roots, `sslrootcert=system` (05 §4.1: default, the system
    roots). When `Secrets.trusted_root_certificates` is set, the caller must hand those PEM
    roots to the driver (e.g. as the `sslrootcert` file). `url` holds the password: it is never
    shown by `repr`.
    """

    role: DatabaseRole
    url: str
    transport: DatabaseTransport

    def __repr__(self) -> str:
        return f"DatabaseUrl(role={self.role!r}, transport={self.transport!r}, url=<redacted>)"


@dataclass(frozen=True, slots=True, repr=False)
class Secrets:
    """Every secret of a deployment, resolved and checked (05 §2.2).

    * `state_keys`, `admission_key`: the sealing and commitment keys (07 §3, §10).
    * `audit_references`: keyed audit references under the audit key and `databaseId` (07 §11).
    * `database_url`: the URL of the resolved role (PostgreSQL), else None (SQLite).
    * `trusted_root_certificates`: `trustedRootCertificateRef` as PEM text, or None.
    * `client_signing_keys`: connection name → private JWK (JSON text) of its `authorization`,
      for product connections and external connections that have one.
    * `review_completion_tokens`: casework connection name → `reviewCompletions` token.
    * `evaluation_tokens`: evaluation connection name → bearer token (bearer ones only).
    * `event_signing_keys`: event source name → HMAC key (raw bytes).
    * `caller_jwks`: the static JWKS document (JSON bytes), or None for `discovery`/`uri`.

    `repr` never shows a secret.
    """

    state_keys: StateKeyRing
    admission_key: AdmissionKey
    audit_references: AuditReferences
    database_url: DatabaseUrl | None
    trusted_root_certificates: str | None
    client_signing_keys: Mapping[str, str]
    review_completion_tokens: Mapping[str, bytes]
    evaluation_tokens: Mapping[str, str]
    event_signing_keys: Mapping[str, bytes]
    caller_jwks: bytes | None

    def __repr__(self) -> str:
        return (
            f"Secrets(state_keys={self.state_keys!r}, database_url={self.database_url!r}, "
            "<other secrets redacted>)"
        )


def resolve_secrets(
    deployment: Deployment,
    *,
    environment: Mapping[str, str],
    database_role: DatabaseRole = "runtime",
    process_uid: int | None = None,
) -> Secrets:
    """Resolve and check every secret of `deployment` (see the module documentation).

    `process_uid` is the user secret files must belong to (default: the effective user id).
    Raises `DeploymentRefused` with every problem found.
    """
    settings = deployment.deployment
    if settings is None:
        raise DeploymentRefused(
            [
                Diagnostic(
                    "coordinator.command.deployment-required",
                    path="/deployment",
                    file=deployment.file,
                    message="The runtime file has no deployment block.",
                    artifact=limits.KIND_RUNTIME,
                )
            ]
        )
    resolver = _Resolver(
        deployment,
        environment,
        os.geteuid() if process_uid is None else process_uid,
    )
    try:
        return resolver.resolve(settings, database_role)
    finally:
        resolver.close()


class _Resolver:
    def __init__(self, deployment: Deployment, environment: Mapping[str, str], uid: int) -> None:
        self.deployment = deployment
        self.environment = environment
        self.uid = uid
        self.diagnostics: list[Diagnostic] = []
        self.root_fd: int | None = None
        self.root_failed = False

    # -- the whole resolution --------------------------------------------------------------

    def resolve(self, settings: DeploymentSettings, role: DatabaseRole) -> Secrets:
        deployment = self.deployment
        database_url: DatabaseUrl | None = None
        trusted: str | None = None
        if isinstance(deployment.database, PostgresqlDatabase):
            database = deployment.database
            if database.trusted_root_certificate_ref is not None:
                trusted = self.trusted_roots(database.trusted_root_certificate_ref)
            url_ref = database.runtime_url_ref if role == "runtime" else database.migration_url_ref
            database_url = self.database_url(
                url_ref, role, has_roots=database.trusted_root_certificate_ref is not None
            )

        signing: dict[str, str] = {}
        completions: dict[str, bytes] = {}
        for name, product in deployment.connections.items():
            self.signing_key(product.authorization, name, signing)
            if product.review_completions_token_ref is not None:
                token = self.bearer(product.review_completions_token_ref)
                if token is not None:
                    completions[name] = token
        for name, external in deployment.external_http_connections.items():
            if external.authorization is not None:
                self.signing_key(external.authorization, name, signing)
        evaluation_tokens: dict[str, str] = {}
        for name, evaluation in deployment.evaluation_connections.items():
            if isinstance(evaluation.authorization, BearerAuthorization):
                token = self.bearer(evaluation.authorization.token_ref)
                if token is not None:
                    evaluation_tokens[name] = token.decode("ascii")
        event_keys: dict[str, bytes] = {}
        for name, source in deployment.event_sources.items():
            key = self.shared_key(source.signing_key_ref, "event-key")
            if key is not None:
                event_keys[name] = key

        jwks: bytes | None = None
        if isinstance(settings.authentication.jwks_source, JwksStatic):
            jwks = self.jwks(settings.authentication.jwks_source.document_ref)
        audit_key = self.shared_key(settings.audit_key_ref, "audit-key")
        state_keys: dict[int, bytes] = {}
        for version, ref in settings.state_keys.items():
            state_key = self.exact_key(ref, "state-key")
            if state_key is not None:
                state_keys[version] = state_key
        admission = self.exact_key(settings.admission_key_ref, "admission-key")
        if admission is not None and any(
            hmac.compare_digest(admission, key) for key in state_keys.values()
        ):
            self.report(_INVALID, settings.admission_key_ref, "admission-equal")

        if self.diagnostics or audit_key is None or admission is None:
            raise DeploymentRefused(self.diagnostics)
        try:
            ring = StateKeyRing(settings.active_state_key, state_keys)
            admission_key = AdmissionKey(admission, state_keys=ring)
            audit_references = AuditReferences(audit_key, settings.database_id)
        except CoordinatorError as error:  # pragma: no cover - every rule was checked above
            raise DeploymentRefused([error.diagnostic]) from None
        return Secrets(
            state_keys=ring,
            admission_key=admission_key,
            audit_references=audit_references,
            database_url=database_url,
            trusted_root_certificates=trusted,
            client_signing_keys=MappingProxyType(signing),
            review_completion_tokens=MappingProxyType(completions),
            evaluation_tokens=MappingProxyType(evaluation_tokens),
            event_signing_keys=MappingProxyType(event_keys),
            caller_jwks=jwks,
        )

    def close(self) -> None:
        if self.root_fd is not None:
            os.close(self.root_fd)
            self.root_fd = None

    def report(self, code: str, ref: SecretRef, reason: str) -> None:
        self.diagnostics.append(
            Diagnostic(
                code,
                path=ref.pointer,
                file=self.deployment.file,
                line=ref.line,
                column=ref.column,
                message=_MESSAGES[reason],
                artifact=limits.KIND_RUNTIME,
            )
        )

    # -- reading ---------------------------------------------------------------------------

    def raw(self, ref: SecretRef) -> bytes | None:
        """The secret's bytes, or None after reporting why it is unavailable."""
        providers = self.deployment.secret_providers
        if ref.provider == "env":
            if not providers.environment or _ENV_NAME.fullmatch(ref.name) is None:
                self.report(_UNAVAILABLE, ref, "undeclared")
                return None
            value = self.environment.get(ref.name, "")
            if value == "":
                self.report(_UNAVAILABLE, ref, "env-unset")
                return None
            try:
                return value.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate from a non-UTF-8 environment
                self.report(_INVALID, ref, "text")
                return None
        if providers.file_root is None:
            self.report(_UNAVAILABLE, ref, "undeclared")
            return None
        return self.read_file(ref, providers.file_root)

    def open_root(self, root: str) -> int | None:
        if self.root_fd is None and not self.root_failed:
            try:
                self.root_fd = os.open(root, _DIRECTORY_FLAGS)
            except OSError:
                self.root_failed = True
        return self.root_fd

    def read_file(self, ref: SecretRef, root: str) -> bytes | None:
        if _FILE_NAME.fullmatch(ref.name) is None or ref.name in (".", ".."):
            self.report(_UNAVAILABLE, ref, "name")
            return None
        root_fd = self.open_root(root) if root.startswith("/") else None
        if root_fd is None:
            self.report(_UNAVAILABLE, ref, "root")
            return None
        try:
            descriptor = os.open(ref.name, _OPEN_FLAGS, dir_fd=root_fd)
        except FileNotFoundError:
            self.report(_UNAVAILABLE, ref, "missing")
            return None
        except OSError as error:
            self.report(
                _UNAVAILABLE, ref, "symlink" if error.errno == errno.ELOOP else "unreadable"
            )
            return None
        try:
            status = os.fstat(descriptor)
            if not stat.S_ISREG(status.st_mode):
                self.report(_UNAVAILABLE, ref, "not-regular")
                return None
            if status.st_uid != self.uid:
                self.report(_UNAVAILABLE, ref, "owner")
                return None
            if status.st_mode & 0o077:
                self.report(_UNAVAILABLE, ref, "mode")
                return None
            if status.st_size > MAX_SECRET_FILE_BYTES:
                self.report(_UNAVAILABLE, ref, "too-large")
                return None
            chunks: list[bytes] = []
            remaining = MAX_SECRET_FILE_BYTES + 1
            while remaining > 0:
                chunk = os.read(descriptor, remaining)
                if not chunk:
                    break
                chunks.append(chunk)
                remaining -= len(chunk)
        except OSError:
            self.report(_UNAVAILABLE, ref, "unreadable")
            return None
        finally:
            os.close(descriptor)
        data = b"".join(chunks)
        if len(data) > MAX_SECRET_FILE_BYTES:  # grew after fstat
            self.report(_UNAVAILABLE, ref, "too-large")
            return None
        return data

    def text(self, ref: SecretRef) -> str | None:
        """A text secret: one trailing line feed removed, UTF-8 (05 §2.2)."""
        data = self.raw(ref)
        if data is None:
            return None
        data = data.removesuffix(b"\n")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            self.report(_INVALID, ref, "text")
            return None

    # -- the forms of 05 §2.2 ----------------------------------------------------------------

    def exact_key(self, ref: SecretRef, reason: str) -> bytes | None:
        """A state or admission key: exactly 32 raw bytes, not all zero."""
        data = self.raw(ref)
        if data is None:
            return None
        if len(data) != STATE_KEY_BYTES or not any(data):
            self.report(_INVALID, ref, reason)
            return None
        return data

    def shared_key(self, ref: SecretRef, reason: str) -> bytes | None:
        """The audit key or an event signing key: at least 32 raw bytes, used as they are."""
        data = self.raw(ref)
        if data is None:
            return None
        if len(data) < MIN_SHARED_KEY_BYTES:
            self.report(_INVALID, ref, reason)
            return None
        return data

    def signing_key(
        self, authorization: ClientAuthorization, name: str, out: dict[str, str]
    ) -> None:
        """A private JWK: EC P-256 with `d`, or RSA ≥ 2048 bits with private members; `kid`."""
        ref = authorization.signing_key_ref
        text = self.text(ref)
        if text is None:
            return
        if not _private_jwk_ok(text):
            self.report(_INVALID, ref, "jwk")
            return
        out[name] = text

    def bearer(self, ref: SecretRef) -> bytes | None:
        """A bearer token: 32–4096 bytes of visible ASCII (0x21–0x7E)."""
        data = self.raw(ref)
        if data is None:
            return None
        data = data.removesuffix(b"\n")
        if not MIN_BEARER_BYTES <= len(data) <= MAX_BEARER_BYTES or _BEARER.fullmatch(data) is None:
            self.report(_INVALID, ref, "bearer")
            return None
        return data

    def trusted_roots(self, ref: SecretRef) -> str | None:
        """PEM certificates that OpenSSL accepts as trust anchors."""
        text = self.text(ref)
        if text is None:
            return None
        if not _pem_certificates_ok(text):
            self.report(_INVALID, ref, "trusted-roots")
            return None
        return text

    def jwks(self, ref: SecretRef) -> bytes | None:
        """A JWKS document: a JSON object whose `keys` is a non-empty list of JWK objects."""
        text = self.text(ref)
        if text is None:
            return None
        try:
            document = parse_strict_json(text)
        except (StrictJsonError, ValueError):
            document = None
        keys = document.get("keys") if isinstance(document, dict) else None
        if (
            not isinstance(keys, list)
            or not keys
            or not all(isinstance(key, dict) and isinstance(key.get("kty"), str) for key in keys)
        ):
            self.report(_INVALID, ref, "jwks")
            return None
        return text.encode("utf-8")

    def database_url(
        self, ref: SecretRef, role: DatabaseRole, *, has_roots: bool
    ) -> DatabaseUrl | None:
        text = self.text(ref)
        if text is None:
            return None
        parsed = _parse_database_url(text)
        if parsed is None:
            self.report(_INVALID, ref, "database-url")
            return None
        transport, sslmode, has_rootcert = parsed
        url = text
        if transport == "tls":
            if sslmode is not None and sslmode != _VERIFIED_SSLMODE:
                self.report(_TLS_REQUIRED, ref, "tls")
                return None
            added: list[str] = []
            if sslmode is None:
                added.append(f"sslmode={_VERIFIED_SSLMODE}")
            if not has_rootcert and not has_roots:
                added.append("sslrootcert=system")
            if added:
                if "?" not in url:
                    url += "?"
                elif not url.endswith("?"):
                    url += "&"
                url += "&".join(added)
        return DatabaseUrl(role=role, url=url, transport=transport)


# -- forms --------------------------------------------------------------------------------


def _private_jwk_ok(text: str) -> bool:
    """05 §2.2 client signing key, loaded the way the adapters will load it."""
    try:
        document = parse_strict_json(text)
    except (StrictJsonError, ValueError):
        return False
    if not isinstance(document, dict):
        return False

    try:
        load_signing_key(document)
    except SigningKeyError:
        return False
    return True


def _pem_certificates_ok(text: str) -> bool:
    if _PEM_CERTIFICATE.search(text) is None:
        return False
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_verify_locations(cadata=text)
    except (ssl.SSLError, ValueError):
        return False
    return True


def _parse_database_url(text: str) -> tuple[DatabaseTransport, str | None, bool] | None:
    """(transport, sslmode, whether sslrootcert is set) of a `postgresql://` URL, or None.

    The form of 05 §4.1: `postgresql://user[:password]@host[:port]/dbname[?params]`, with an
    explicit database name, no fragment and no repeated parameter (a libpq `host` parameter
    overrides the host; an absolute directory is a Unix socket). For a primary and its
    standbys, libpq's multi-host form `…@host1[:port1],host2[:port2]/dbname` is accepted with
    `target_session_attrs=read-write` (or `primary`), so that only the writable server is ever
    used (docs/operations.md, high availability); every host must then be loopback for a plain
    connection, else TLS applies to all.
    """
    if not text.startswith("postgresql://") or any(c.isspace() for c in text):
        return None
    try:
        parts = urlsplit(text)
        pairs = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        return None
    userinfo, at, hostports = parts.netloc.rpartition("@")
    if not at or not userinfo or not parts.username or parts.fragment or "#" in text:
        return None
    database = unquote(parts.path.removeprefix("/"))
    if not parts.path.startswith("/") or not database or "/" in database:
        return None
    params: dict[str, str] = {}
    for key, value in pairs:
        if key in params:
            return None
        params[key] = value
    hosts = _netloc_hosts(hostports)
    if hosts is None or "," in params.get("host", "") or "," in params.get("hostaddr", ""):
        return None
    if len(hosts) > 1 and (
        "host" in params
        or "hostaddr" in params
        or params.get("target_session_attrs") not in ("read-write", "primary")
    ):
        return None
    host = params.get("host", hosts[0])
    sslmode = params.get("sslmode")
    has_rootcert = "sslrootcert" in params
    if not host:
        return None
    if len(hosts) == 1 and host.startswith("/") and "hostaddr" not in params:
        return "unix-socket", sslmode, has_rootcert
    targets = ([host] if "host" in params else hosts) + (
        [params["hostaddr"]] if "hostaddr" in params else []
    )
    if all(_is_loopback(target) for target in targets):
        return "loopback", sslmode, has_rootcert
    return "tls", sslmode, has_rootcert


def _netloc_hosts(hostports: str) -> list[str] | None:
    """The hosts of `host[:port][,host[:port]…]` (percent-decoded, case kept, IPv6 brackets
    removed), each port 0–65535; None when one is malformed."""
    hosts: list[str] = []
    for item in hostports.split(","):
        if item.startswith("["):
            close = item.find("]")
            if close < 0:
                return None
            host, rest = item[1:close], item[close + 1 :]
            if rest and not rest.startswith(":"):
                return None
            port = rest[1:]
        else:
            host, _, port = item.partition(":")
            host = unquote(host)
        if port and not (port.isdigit() and int(port) <= 65_535):
            return None
        if len(hostports.split(",")) > 1 and not host:
            return None
        hosts.append(host)
    return hosts


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
