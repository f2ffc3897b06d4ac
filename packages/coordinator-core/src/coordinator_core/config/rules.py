"""The validation rules V2–V10 of a decoded runtime file (contract 05 §9), with their grammars."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator, Mapping
from typing import Any, Final, Literal
from urllib.parse import urlsplit

from coordinator_core import limits
from coordinator_core.authoring.decode import AuthoredFile
from coordinator_core.authoring.yamlreader import YamlDocument, escape_pointer_token
from coordinator_core.errors import Diagnostic
from coordinator_core.jsonschema.dialect import check_schema

__all__ = [
    "ARTIFACT",
    "MESSAGES",
    "RuntimeRules",
    "diagnostic_at",
    "holds_stand_in",
    "is_reference_member",
]

ARTIFACT: Final = limits.KIND_RUNTIME

CONNECTION_MAPS: Final = ("connections", "externalHttpConnections", "evaluationConnections")
OPERATOR_ONLY_ACTIONS: Final = frozenset(
    {"doctor", "restore-hold", "release-restore-hold", "release-admission-hold", "retain"}
)
# Members whose secret must come from the file provider (contract 05 §2.2).
FILE_ONLY_SECRETS: Final = frozenset({"keyRef", "admissionKeyRef", "auditKeyRef", "signingKeyRef"})

# Fixed sentences where one code covers several conditions; none quotes a value.
MESSAGES: Final = {
    "malformed": (
        "The environment expression is malformed: write ${NAME}, ${NAME:-default} or "
        "${NAME:?message}."
    ),
    "undeclared-provider": (
        "The secret reference names a provider that secretProviders does not declare."
    ),
    "file-only": "This secret must come from the file provider: write secret:file/<name>.",
    "duplicate-name": "The connection name is already bound in another connection map.",
    "too-many-connections": (
        "More than 16 connections are declared across the three connection maps."
    ),
    "relative-root": "The file provider's root must be an absolute directory.",
    "missing-connection": (
        "The workflow uses this connection, but the runtime file does not bind it in this map."
    ),
    "wrong-product": "The workflow uses this connection for a different product.",
    "missing-event-source": (
        "A workflow trigger names this event source, but the runtime file does not declare it."
    ),
}

_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_SCOPE_TOKEN: Final = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")
_PROFILE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,127}")
_MODEL: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}")
_NAMESPACE: Final = re.compile(r"coordinator_[a-z0-9_]*")
_RUNTIME_ROLE: Final = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_DIGEST: Final = re.compile(r"sha256:[0-9a-f]{64}")
_PATH_SEGMENT: Final = re.compile(r"[A-Za-z0-9._~-]+")
_QUERY_NAME: Final = re.compile(r"[A-Za-z0-9._~-]{1,64}")
_LOCAL_ID: Final = re.compile(r"[a-z][a-z0-9_-]{0,63}")
_SECRET_REF: Final = re.compile(
    r"secret:(?:(env)/[A-Z_][A-Z0-9_]{0,127}|(file)/[A-Za-z0-9][A-Za-z0-9._-]{0,127})"
)
_STATE_KEY_MAX: Final = 4_294_967_295
_URI_SCHEME: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
_URI_CHARACTERS: Final = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]*")
_BAD_PERCENT: Final = re.compile(r"%(?![0-9A-Fa-f]{2})")
_HOST_LABEL: Final = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_BIND: Final = re.compile(r"(?P<host>[0-9.]+|\[[0-9A-Fa-f:.]+\]):(?P<port>[0-9]{1,5})")


def holds_stand_in(pointer: str, stand_ins: frozenset[str], incomplete: frozenset[str]) -> bool:
    """Whether `pointer` holds a stand-in or lies inside an object skipped for one (05 §3)."""
    return pointer in stand_ins or any(
        pointer == skipped or pointer.startswith(skipped + "/") for skipped in incomplete
    )


def is_reference_member(key: str) -> bool:
    """Members named `…Ref`/`…Refs` hold secret references and never an expression (05 §3)."""
    return key.endswith(("Ref", "Refs"))


def diagnostic_at(
    document: YamlDocument,
    file: str,
    code: str,
    pointer: str,
    *,
    anchor: Literal["value", "key", "container"] = "value",
    message: str | None = None,
    severity: Literal["error", "warning"] | None = None,
) -> Diagnostic:
    """A diagnostic of the runtime file at `pointer`: its value, its key, or (for an absent
    member) the object that should hold it; the nearest existing ancestor when none exists."""
    mark = None
    if anchor == "key":
        mark = document.key_positions.get(pointer)
    elif anchor == "container":
        mark = document.mark_of(pointer.rsplit("/", 1)[0])
    mark = mark or document.mark_of(pointer)
    return Diagnostic(
        code,
        path=pointer,
        file=file,
        line=mark.line if mark else None,
        column=mark.column if mark else None,
        message=message,
        severity=severity,
        artifact=ARTIFACT,
    )


# -- value grammars -----------------------------------------------------------------------


def _is_absolute_uri(text: str, *, fragment: bool = True) -> bool:
    """RFC 3986 absolute URI (scheme required), optionally with a fragment."""
    if _URI_SCHEME.match(text) is None or _URI_CHARACTERS.fullmatch(text) is None:
        return False
    if _BAD_PERCENT.search(text) is not None or text.count("#") > 1:
        return False
    return fragment or "#" not in text


def _host_ok(host: str, *, loopback_only: bool) -> bool:
    """`host` as urlsplit returns it (brackets removed): a name, IPv4 or IPv6 address."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is not None:
        return address.is_loopback or not loopback_only
    if loopback_only or not host or len(host) > 253:
        return False
    return all(_HOST_LABEL.fullmatch(label) for label in host.split("."))


def _http_url_ok(text: str, *, base: bool) -> bool:
    """`https://…`, or `http://` with a numeric loopback host; no user info or fragment.

    A base URL (05 §5.1) also has no query and no empty interior path segment; one trailing
    `/` is allowed because it is removed.
    """
    if not _is_absolute_uri(text, fragment=False) or "\\" in text:
        return False
    if text.startswith("https://"):
        loopback_only = False
    elif text.startswith("http://"):
        loopback_only = True
    else:
        return False
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError:
        return False
    if "@" in parts.netloc or parts.netloc.endswith(":") or parts.hostname is None:
        return False
    bracketed = parts.netloc.startswith("[")
    if loopback_only and not bracketed and not _is_ipv4(parts.hostname):
        return False  # "numeric": a name such as localhost is refused
    if not _host_ok(parts.hostname, loopback_only=loopback_only):
        return False
    if base:
        if "?" in text:
            return False
        path = parts.path.removesuffix("/")
        if "//" in path:
            return False
    return True


def _is_ipv4(host: str) -> bool:
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        return False
    return True


def _issuer_ok(text: str) -> bool:
    """An absolute http(s) URL with a host and no user info or fragment."""
    if not _is_absolute_uri(text, fragment=False) or not text.startswith(("https://", "http://")):
        return False
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError:
        return False
    return "@" not in parts.netloc and bool(parts.hostname)


def _network_ok(text: str) -> bool:
    """An IP address or network in CIDR notation (host bits may be set)."""
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return True


def _bind_ok(text: str) -> tuple[bool, bool]:
    """(well formed, loopback) for a listener bind address `<ip>:<port>` / `[v6]:<port>`."""
    match = _BIND.fullmatch(text)
    if match is None:
        return False, False
    host = match.group("host")
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address
        if host.startswith("["):
            address = ipaddress.IPv6Address(host[1:-1])
        else:
            address = ipaddress.IPv4Address(host)
    except ValueError:
        return False, False
    if not 1 <= int(match.group("port")) <= 65_535:
        return False, False
    return True, address.is_loopback


def _plain_text_ok(text: str, maximum: int, *, not_blank: bool = False) -> bool:
    """1–`maximum` characters without control characters (and, optionally, not blank)."""
    if not 1 <= len(text) <= maximum or _CONTROL.search(text) is not None:
        return False
    return not (not_blank and text.strip() == "")


def _absolute_path_ok(text: str) -> bool:
    return text.startswith("/") and "\x00" not in text


def _relative_path_ok(text: str) -> bool:
    """An exact relative path of external-http (05 §5.2)."""
    if len(text.encode("utf-8")) > 256:
        return False
    segments = text.split("/")
    return all(
        _PATH_SEGMENT.fullmatch(segment) is not None and segment not in (".", "..")
        for segment in segments
    )


# -- the rules of 05 §9 -------------------------------------------------------------------


class RuntimeRules:
    """V2–V10 over the decoded runtime file; each rule skips failed members and stand-ins."""

    def __init__(
        self, authored: AuthoredFile, stand_ins: frozenset[str], incomplete: frozenset[str]
    ) -> None:
        assert authored.document is not None
        assert authored.decoded is not None
        self.authored = authored
        self.stand_ins = stand_ins
        self.incomplete = incomplete
        self.document: YamlDocument = authored.document
        self.root: dict[str, Any] = authored.decoded
        self.raw: Any = self.document.value
        self.out: list[Diagnostic] = []

    def run(self) -> list[Diagnostic]:
        self.secret_references()
        self.connection_names()
        self.product_connections()
        self.external_connections()
        self.evaluation_connections()
        self.event_sources()
        self.database()
        self.store()
        self.deployment()
        return self.out

    # -- helpers ---------------------------------------------------------------------------

    def report(
        self,
        code: str,
        pointer: str,
        *,
        anchor: Literal["value", "key", "container"] = "value",
        message: str | None = None,
    ) -> None:
        self.out.append(
            diagnostic_at(
                self.document, self.authored.file, code, pointer, anchor=anchor, message=message
            )
        )

    def holds_stand_in(self, pointer: str) -> bool:
        return holds_stand_in(pointer, self.stand_ins, self.incomplete)

    def usable(self, pointer: str) -> bool:
        """Whether a rule may look at the member: decoded, and no stand-in in or around it."""
        return pointer not in self.authored.failed and not self.holds_stand_in(pointer)

    def text(self, container: Mapping[str, Any], member: str, pointer: str) -> str | None:
        """The string member `member` of `container`, when present and usable."""
        value = container.get(member)
        if not isinstance(value, str) or not self.usable(f"{pointer}/{member}"):
            return None
        return value

    def entries(self, map_name: str) -> Iterator[tuple[str, str, dict[str, Any]]]:
        """(name, pointer, decoded entry) of a decoded map, skipping incomplete entries."""
        entries = self.root.get(map_name)
        if not isinstance(entries, dict):
            return
        for name, entry in entries.items():
            pointer = f"/{map_name}/{escape_pointer_token(name)}"
            if isinstance(entry, dict) and not self.holds_stand_in(pointer):
                yield name, pointer, entry

    def absent(self, container: Mapping[str, Any], member: str, pointer: str) -> bool:
        """Absent as written (a member that failed to decode is not absent, only unusable)."""
        return member not in container and f"{pointer}/{member}" not in self.authored.failed

    # -- V2 --------------------------------------------------------------------------------

    def secret_references(self) -> None:
        """V2: every reference names a declared provider; some secrets are file-only (05 §2.2)."""
        providers = self.root.get("secretProviders")
        file_provider = providers.get("file") if isinstance(providers, dict) else None
        if isinstance(file_provider, dict):
            root_dir = file_provider.get("root")
            if isinstance(root_dir, str) and not _absolute_path_ok(root_dir):
                self.report(
                    "coordinator.runtime-config.refused",
                    "/secretProviders/file/root",
                    message=MESSAGES["relative-root"],
                )
        declared: set[str] | None = None
        if isinstance(providers, dict) and "/secretProviders" not in self.authored.failed:
            declared = {
                name
                for name in ("environment", "file")
                if name in providers or f"/secretProviders/{name}" in self.authored.failed
            }
        for pointer, member, reference in _references(self.root, ""):
            if self.holds_stand_in(pointer):
                continue
            match = _SECRET_REF.fullmatch(reference)
            if match is None:
                # The schema's pattern is matched with search semantics, where `$` also
                # accepts a final line feed; the same finding at the same place is deduplicated.
                self.report("config.invalid-value", pointer)
                continue
            provider = "environment" if match.group(1) == "env" else "file"
            if member in FILE_ONLY_SECRETS and provider != "file":
                self.report(
                    "coordinator.runtime-config.refused", pointer, message=MESSAGES["file-only"]
                )
            elif declared is not None and provider not in declared:
                self.report(
                    "coordinator.runtime-config.refused",
                    pointer,
                    message=MESSAGES["undeclared-provider"],
                )

    # -- V3 / B5 ---------------------------------------------------------------------------

    def connection_names(self) -> None:
        """V3 and B5: connection names unique across the three maps, at most 16 in total."""
        raw = self.raw if isinstance(self.raw, dict) else {}
        written: list[tuple[tuple[int, int], str, str]] = []
        for map_name in CONNECTION_MAPS:
            entries = raw.get(map_name)
            if not isinstance(entries, dict) or f"/{map_name}" in self.authored.failed:
                continue
            for name in entries:
                if not isinstance(name, str) or _LOCAL_ID.fullmatch(name) is None:
                    continue  # an invalid name was reported by the decoder
                pointer = f"/{map_name}/{escape_pointer_token(name)}"
                mark = self.document.key_positions.get(pointer) or self.document.mark_of(pointer)
                order = (mark.line, mark.column) if mark else (0, 0)
                written.append((order, name, pointer))
        written.sort()
        seen: set[str] = set()
        for index, (_, name, pointer) in enumerate(written):
            if name in seen:
                self.report(
                    "coordinator.runtime-config.refused",
                    pointer,
                    anchor="key",
                    message=MESSAGES["duplicate-name"],
                )
            seen.add(name)
            if index == limits.MAX_CONNECTIONS:
                self.report(
                    "coordinator.runtime-config.refused",
                    pointer,
                    anchor="key",
                    message=MESSAGES["too-many-connections"],
                )

    # -- V4 and 05 §5.4 --------------------------------------------------------------------

    def product_connections(self) -> None:
        code = "coordinator.connection.configuration"
        for _, pointer, entry in self.entries("connections"):
            product = entry.get("product")
            if not isinstance(product, str):
                product = None
            if product == "breg":
                if self.absent(entry, "profile", pointer):
                    self.report(code, f"{pointer}/profile", anchor="container")
            elif product is not None and "profile" in entry:
                self.report(code, f"{pointer}/profile", anchor="key")
            profile = self.text(entry, "profile", pointer)
            if profile is not None and _PROFILE.fullmatch(profile) is None:
                self.report(code, f"{pointer}/profile")
            if product is not None and product != "casework" and "reviewCompletions" in entry:
                self.report(code, f"{pointer}/reviewCompletions", anchor="key")
            self.base_url(entry, pointer, code)
            authorization = entry.get("authorization")
            if isinstance(authorization, dict):
                self.authorization(authorization, f"{pointer}/authorization")

    def base_url(self, entry: Mapping[str, Any], pointer: str, code: str) -> None:
        """05 §5.1 URL rules; the URI character set already refuses backslash and whitespace."""
        base_url = self.text(entry, "baseUrl", pointer)
        if base_url is not None and not _http_url_ok(base_url, base=True):
            self.report(code, f"{pointer}/baseUrl")

    def authorization(self, authorization: Mapping[str, Any], pointer: str) -> None:
        """05 §5.4: the connection's client-credentials identity."""
        code = "coordinator.connection.configuration"
        endpoint = self.text(authorization, "tokenEndpoint", pointer)
        if endpoint is not None and not _http_url_ok(endpoint, base=False):
            self.report(code, f"{pointer}/tokenEndpoint")
        client_id = self.text(authorization, "clientId", pointer)
        if client_id is not None and not _plain_text_ok(client_id, 256, not_blank=True):
            self.report(code, f"{pointer}/clientId")
        audience = self.text(authorization, "clientAssertionAudience", pointer)
        if audience is not None and not _is_absolute_uri(audience):
            self.report(code, f"{pointer}/clientAssertionAudience")
        resource = self.text(authorization, "resource", pointer)
        if resource is not None and not _is_absolute_uri(resource, fragment=False):
            self.report(code, f"{pointer}/resource")
        self.scope_tokens(authorization.get("scopes"), f"{pointer}/scopes", code)

    def scope_tokens(self, scopes: Any, pointer: str, code: str) -> None:
        """RFC 6749 scope tokens, each ≤ 256 bytes, joined with spaces ≤ 1,024 bytes."""
        if not isinstance(scopes, list) or not self.usable(pointer):
            return
        complete = True
        for index, scope in enumerate(scopes):
            item = f"{pointer}/{index}"
            if not isinstance(scope, str) or not self.usable(item):
                complete = False
                continue
            if _SCOPE_TOKEN.fullmatch(scope) is None or len(scope) > 256:
                self.report(code, item)
                complete = False
        if complete and len(" ".join(scopes).encode("utf-8")) > 1024:
            self.report(code, pointer)

    # -- V5 --------------------------------------------------------------------------------

    def external_connections(self) -> None:
        code = "coordinator.external-http.configuration"
        for _, pointer, entry in self.entries("externalHttpConnections"):
            self.base_url(entry, pointer, code)
            paths = entry.get("paths")
            if isinstance(paths, list):
                for index, path in enumerate(paths):
                    item = f"{pointer}/paths/{index}"
                    if isinstance(path, str) and self.usable(item) and not _relative_path_ok(path):
                        self.report(code, item)
            names = entry.get("queryParameters")
            if isinstance(names, list):
                for index, name in enumerate(names):
                    item = f"{pointer}/queryParameters/{index}"
                    if (
                        isinstance(name, str)
                        and self.usable(item)
                        and _QUERY_NAME.fullmatch(name) is None
                    ):
                        self.report(code, item)
            authorization = entry.get("authorization")
            if isinstance(authorization, dict):
                self.authorization(authorization, f"{pointer}/authorization")
            if "responseSchema" in entry:
                self.response_schema(entry["responseSchema"], f"{pointer}/responseSchema")

    def response_schema(self, schema: Any, pointer: str) -> None:
        """The schema dialect of 01 §12, reported with the external connection's code."""
        for finding in check_schema(schema, pointer):
            self.report(
                "coordinator.external-http.configuration", finding.pointer, message=finding.message
            )

    # -- V6 --------------------------------------------------------------------------------

    def evaluation_connections(self) -> None:
        code = "coordinator.evaluation.configuration"
        for _, pointer, entry in self.entries("evaluationConnections"):
            self.base_url(entry, pointer, code)
            model = self.text(entry, "model", pointer)
            if model is not None and _MODEL.fullmatch(model) is None:
                self.report(code, f"{pointer}/model")
            authorization = entry.get("authorization")
            auth_pointer = f"{pointer}/authorization"
            if not isinstance(authorization, dict) or not self.usable(auth_pointer):
                continue
            written = self.raw_at(auth_pointer)
            kinds = [k for k in ("bearer", "local") if isinstance(written, dict) and k in written]
            if len(kinds) != 1:
                self.report(code, auth_pointer)
                continue
            bearer = authorization.get("bearer")
            if isinstance(bearer, dict):
                principal = self.text(bearer, "principal", f"{auth_pointer}/bearer")
                if principal is not None and not _plain_text_ok(principal, 256):
                    self.report(code, f"{auth_pointer}/bearer/principal")
            if "local" in authorization:
                base_url = self.text(entry, "baseUrl", pointer)
                if base_url is not None and not self.numeric_loopback(base_url):
                    self.report(code, f"{auth_pointer}/local", anchor="key")

    @staticmethod
    def numeric_loopback(url: str) -> bool:
        if not _http_url_ok(url, base=True):
            return True  # the base URL itself is reported; nothing follows from it
        host = urlsplit(url).hostname or ""
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False

    def raw_at(self, pointer: str) -> Any:
        node: Any = self.raw
        for token in pointer.split("/")[1:]:
            key = token.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict):
                node = node.get(key)
            elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
                node = node[int(key)]
            else:
                return None
        return node

    # -- V7 --------------------------------------------------------------------------------

    def event_sources(self) -> None:
        code = "coordinator.event-source.configuration"
        for _, pointer, entry in self.entries("eventSources"):
            source = self.text(entry, "source", pointer)
            if source is not None and (len(source) > 512 or not _is_absolute_uri(source)):
                self.report(code, f"{pointer}/source")

    # -- V8 --------------------------------------------------------------------------------

    def database_kind(self) -> str | None:
        """The one database kind written, or None when there is not exactly one."""
        written = self.raw_at("/database")
        if not isinstance(written, dict) or "/database" in self.authored.failed:
            return None
        kinds = [kind for kind in ("postgresql", "sqlite") if kind in written]
        return kinds[0] if len(kinds) == 1 else None

    def database(self) -> None:
        code = "coordinator.database.configuration"
        database = self.root.get("database")
        if not isinstance(database, dict):
            return
        if self.database_kind() is None:
            self.report(code, "/database")
        postgresql = database.get("postgresql")
        if isinstance(postgresql, dict):
            namespace = self.text(postgresql, "namespace", "/database/postgresql")
            if namespace is not None and (
                _NAMESPACE.fullmatch(namespace) is None or len(namespace.encode("utf-8")) > 60
            ):
                self.report(code, "/database/postgresql/namespace")
        sqlite = database.get("sqlite")
        if isinstance(sqlite, dict):
            path = self.text(sqlite, "path", "/database/sqlite")
            if path is not None and not _absolute_path_ok(path):
                self.report(code, "/database/sqlite/path")

    # -- V9 and V10 ------------------------------------------------------------------------

    def deployment(self) -> None:
        deployment = self.root.get("deployment")
        if not isinstance(deployment, dict):
            return
        code = "coordinator.deployment.configuration"
        base = "/deployment"
        database_id = self.text(deployment, "databaseId", base)
        if database_id is not None and not _plain_text_ok(database_id, 128):
            self.report(code, f"{base}/databaseId")
        kind = self.database_kind()
        if kind == "postgresql" and self.absent(deployment, "runtimeRole", base):
            self.report(code, f"{base}/runtimeRole", anchor="container")
        if kind == "sqlite" and "runtimeRole" in deployment:
            self.report(code, f"{base}/runtimeRole", anchor="key")
        role = self.text(deployment, "runtimeRole", base)
        if role is not None and _RUNTIME_ROLE.fullmatch(role) is None:
            self.report(code, f"{base}/runtimeRole")
        package = deployment.get("package")
        if isinstance(package, dict):
            root = self.text(package, "root", f"{base}/package")
            if root is not None and not _absolute_path_ok(root):
                self.report(code, f"{base}/package/root")
            digest = self.text(package, "expectedDigest", f"{base}/package")
            if digest is not None and _DIGEST.fullmatch(digest) is None:
                self.report(code, f"{base}/package/expectedDigest")
        audit = self.text(deployment, "auditDirectory", base)
        if audit is not None and not _absolute_path_ok(audit):
            self.report(code, f"{base}/auditDirectory")
        self.listener(deployment.get("listener"), f"{base}/listener", code)
        self.state_keys(deployment, base, code)
        authentication = deployment.get("authentication")
        if isinstance(authentication, dict) and not self.holds_stand_in(f"{base}/authentication"):
            self.authentication(authentication, f"{base}/authentication")

    def listener(self, listener: Any, pointer: str, code: str) -> None:
        if not isinstance(listener, dict) or self.holds_stand_in(pointer):
            return
        proxies = listener.get("trustedProxies")
        if isinstance(proxies, list):
            for index, item in enumerate(proxies):
                item_pointer = f"{pointer}/trustedProxies/{index}"
                if isinstance(item, str) and self.usable(item_pointer) and not _network_ok(item):
                    self.report(code, item_pointer)
        bind = self.text(listener, "bind", pointer)
        if bind is None:
            return
        well_formed, loopback = _bind_ok(bind)
        development = listener.get("tlsTermination") == "development-loopback"
        if not well_formed or (development and not loopback):
            self.report(code, f"{pointer}/bind")

    def store(self) -> None:
        """`store` (07 §12.1 item 5): the restore witness is an absolute path."""
        store = self.root.get("store")
        if not isinstance(store, dict):
            return
        witness = self.text(store, "restoreWitness", "/store")
        if witness is not None and not _absolute_path_ok(witness):
            self.report("coordinator.deployment.configuration", "/store/restoreWitness")

    def state_keys(self, deployment: Mapping[str, Any], base: str, code: str) -> None:
        # Versions as written: an entry that failed inside still names its version.
        keys = self.raw_at(f"{base}/stateKeys")
        if not isinstance(deployment.get("stateKeys"), dict) or not isinstance(keys, dict):
            return
        for version in keys:
            if version.isdigit() and int(version) > _STATE_KEY_MAX:
                self.report(code, f"{base}/stateKeys/{escape_pointer_token(version)}", anchor="key")
        active = deployment.get("activeStateKey")
        if isinstance(active, int) and str(active) not in keys:
            self.report(code, f"{base}/activeStateKey")

    def authentication(self, authentication: Mapping[str, Any], pointer: str) -> None:
        """V10 (05 §8.1): caller authentication and the one-policy-per-client rule."""
        code = "coordinator.access.configuration"
        issuer = self.text(authentication, "issuer", pointer)
        if issuer is not None and not _issuer_ok(issuer):
            self.report(code, f"{pointer}/issuer")
        jwks = authentication.get("jwksSource")
        if isinstance(jwks, dict) and not self.holds_stand_in(f"{pointer}/jwksSource"):
            uri = self.text(jwks, "uri", f"{pointer}/jwksSource")
            if uri is not None and not _http_url_ok(uri, base=False):
                self.report(code, f"{pointer}/jwksSource/uri")
        issuers = authentication.get("assertionIssuers")
        if isinstance(issuers, list):
            for index, item in enumerate(issuers):
                item_pointer = f"{pointer}/assertionIssuers/{index}"
                if isinstance(item, str) and self.usable(item_pointer) and not _issuer_ok(item):
                    self.report(code, item_pointer)

        clients: dict[str, int] = {}
        clients_complete = False
        allowed = authentication.get("allowedClients")
        if isinstance(allowed, list):
            clients_complete = True
            for index, client in enumerate(allowed):
                item_pointer = f"{pointer}/allowedClients/{index}"
                if not isinstance(client, str) or not self.usable(item_pointer):
                    clients_complete = False
                    continue
                if client == "unrestricted":
                    self.report(code, item_pointer)
                clients.setdefault(client, index)

        policies = authentication.get("policies")
        if not isinstance(policies, list):
            return
        policy_count: dict[str, int] = {}
        policies_complete = True
        for index, policy in enumerate(policies):
            policy_pointer = f"{pointer}/policies/{index}"
            if not isinstance(policy, dict) or self.holds_stand_in(policy_pointer):
                policies_complete = False
                continue
            client = self.text(policy, "clientId", policy_pointer)
            if client is None:
                policies_complete = False
            else:
                if clients_complete and client not in clients:
                    self.report(code, f"{policy_pointer}/clientId")
                policy_count[client] = policy_count.get(client, 0) + 1
                if policy_count[client] > 1:
                    self.report(code, f"{policy_pointer}/clientId")
            self.scope_tokens(
                policy.get("requiredScopes"), f"{policy_pointer}/requiredScopes", code
            )
            actions = policy.get("actions")
            operator_failed = f"{policy_pointer}/operator" in self.authored.failed
            if (
                isinstance(actions, list)
                and not operator_failed
                and policy.get("operator") is not True
            ):
                for action_index, action in enumerate(actions):
                    if action in OPERATOR_ONLY_ACTIONS:
                        self.report(code, f"{policy_pointer}/actions/{action_index}")
        if policies_complete and "/deployment/authentication/policies" not in self.authored.failed:
            for client, index in clients.items():
                if client != "unrestricted" and client not in policy_count:
                    self.report(code, f"{pointer}/allowedClients/{index}")


def _references(node: Any, pointer: str) -> Iterator[tuple[str, str, str]]:
    """(pointer, member name, value) of every decoded secret reference member."""
    if isinstance(node, dict):
        for key, child in node.items():
            child_pointer = f"{pointer}/{escape_pointer_token(key)}"
            if key == "responseSchema":
                continue  # a foreign value: its members are data, not references
            if isinstance(child, str) and is_reference_member(key):
                yield child_pointer, key, child
            else:
                yield from _references(child, child_pointer)
    elif isinstance(node, list):
        for index, child in enumerate(node):
            yield from _references(child, f"{pointer}/{index}")
