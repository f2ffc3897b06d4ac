"""runtime.yaml: schema, environment expressions, the rules of contract 05 §9 and bindings B1–B6."""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
import yaml

from coordinator_core.config import expressions
from coordinator_core.config.read import (
    RuntimeCheck,
    check_bindings,
    check_runtime_bytes,
    check_runtime_file,
)
from coordinator_core.errors import Diagnostic, exit_code_of

REPO = Path(__file__).resolve().parents[3]
SCHEMA_PATH = REPO / "spec" / "schemas" / "runtime.schema.json"
CASES = Path(__file__).resolve().parent / "runtime_cases"
EXAMPLES = sorted(CASES.glob("*.yaml"))


# -- helpers ------------------------------------------------------------------------------


def base() -> dict[str, Any]:
    """A clean runtime document (the 05 §11.1 example) to mutate."""
    loaded: dict[str, Any] = yaml.safe_load((CASES / "development-sqlite.yaml").read_text())
    return loaded


def dump(document: Mapping[str, Any]) -> bytes:
    # A JSON round trip unshares repeated objects, which PyYAML would write as anchors.
    plain = json.loads(json.dumps(document))
    return yaml.safe_dump(plain, sort_keys=False, width=100_000).encode("utf-8")


def run(
    document: Mapping[str, Any] | str | bytes,
    environment: Mapping[str, str] | None = None,
) -> RuntimeCheck:
    if isinstance(document, str):
        data = document.encode("utf-8")
    elif isinstance(document, bytes):
        data = document
    else:
        data = dump(document)
    return check_runtime_bytes(data, display_file="runtime.yaml", environment=environment)


def codes(check: RuntimeCheck | list[Diagnostic]) -> list[tuple[str, str]]:
    diagnostics = check.diagnostics if isinstance(check, RuntimeCheck) else check
    return sorted((d.code, d.path) for d in diagnostics)


def errors(check: RuntimeCheck) -> list[tuple[str, str]]:
    return sorted((d.code, d.path) for d in check.diagnostics if d.effective_severity == "error")


def mutated(change: Callable[[dict[str, Any]], None]) -> RuntimeCheck:
    document = base()
    change(document)
    return run(document)


def connection(
    product: str = "messaging", base_url: str = "https://messaging.example.org", **extra: Any
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "product": product,
        "baseUrl": base_url,
        "authorization": {
            "tokenEndpoint": "https://idp.example.org/token",
            "clientId": "coordinator",
            "signingKeyRef": "secret:file/client.jwk",
            "resource": "urn:registrystack:messaging",
            "scopes": ["messaging:messages:submit"],
        },
    }
    if product == "breg":
        entry["profile"] = "coordinator-reader"
    entry.update(extra)
    return entry


def external(**extra: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "baseUrl": "https://data.example.org/api",
        "paths": ["holidays/2026"],
        "responseSchema": {"type": "object"},
    }
    entry.update(extra)
    return entry


def evaluation(**extra: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "protocol": "system-one",
        "baseUrl": "http://127.0.0.1:8110",
        "model": "system-one/large:2026",
        "authorization": {"local": {}},
    }
    entry.update(extra)
    return entry


def postgresql(document: dict[str, Any]) -> None:
    document["database"] = {
        "postgresql": {
            "runtimeUrlRef": "secret:file/runtime-url",
            "migrationUrlRef": "secret:file/migration-url",
            "namespace": "coordinator_app",
        }
    }
    document["deployment"]["runtimeRole"] = "coordinator_runtime"


# -- the schema ---------------------------------------------------------------------------


def test_schema_is_valid_draft_2020_12() -> None:
    schema = json.loads(SCHEMA_PATH.read_text("utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$id"] == (
        "https://id.registrystack.org/schemas/coordinator/runtime/runtime.v1alpha1.schema.json"
    )
    assert schema["x-substitution"] is True


def test_schema_describes_every_property() -> None:
    schema = json.loads(SCHEMA_PATH.read_text("utf-8"))
    missing: list[str] = []

    def walk(node: Any, pointer: str) -> None:
        if isinstance(node, dict):
            for name, member in node.get("properties", {}).items():
                if "description" not in member:
                    missing.append(f"{pointer}/properties/{name}")
            for key, child in node.items():
                walk(child, f"{pointer}/{key}")
        elif isinstance(node, list):
            for index, child in enumerate(node):
                walk(child, f"{pointer}/{index}")

    walk(schema, "")
    assert missing == []


def test_schema_marks_response_schema_foreign() -> None:
    schema = json.loads(SCHEMA_PATH.read_text("utf-8"))
    member = schema["$defs"]["ExternalHttpConnection"]["properties"]["responseSchema"]
    assert member["x-foreign"] is True


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.stem)
def test_examples_validate_against_the_published_schema(example: Path) -> None:
    # Editors validate with plain JSON Schema; the contract's examples must pass there too.
    schema = json.loads(SCHEMA_PATH.read_text("utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    assert list(validator.iter_errors(yaml.safe_load(example.read_text()))) == []


# -- the examples of 05 §11 ---------------------------------------------------------------


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.stem)
def test_examples_check_clean_offline(example: Path) -> None:
    check = check_runtime_file(example, display_file="runtime.yaml", environment=None)
    assert codes(check) == []
    assert check.ok_for_bindings


def test_production_example_checks_clean_with_environment() -> None:
    environment = {
        "BREG_BASE_URL": "https://breg.example.org/",
        "IDP_TOKEN_ENDPOINT": "https://idp.example.org/oauth/token",
    }
    check = check_runtime_file(
        CASES / "production-postgresql.yaml", display_file="runtime.yaml", environment=environment
    )
    assert codes(check) == []
    assert check.stand_ins == frozenset()
    assert check.authored.decoded is not None
    applications = check.authored.decoded["connections"]["applications"]
    assert applications["baseUrl"] == "https://breg.example.org/"


def test_production_example_holds_stand_ins_offline() -> None:
    check = check_runtime_file(
        CASES / "production-postgresql.yaml", display_file="runtime.yaml", environment=None
    )
    assert "/connections/applications/baseUrl" in check.stand_ins
    assert check.authored.decoded is not None
    applications = check.authored.decoded["connections"]["applications"]
    assert applications["baseUrl"] == "https://stand-in.invalid"
    assert applications["authorization"]["tokenEndpoint"] == "https://stand-in.invalid"


# -- reading the file (05 §1) -------------------------------------------------------------


def test_unavailable_when_missing(tmp_path: Path) -> None:
    check = check_runtime_file(
        tmp_path / "absent.yaml", display_file="/x/runtime.yaml", environment=None
    )
    assert codes(check) == [("platform.runtime-config.unavailable", "")]
    assert check.diagnostics[0].file == "/x/runtime.yaml"
    assert exit_code_of(check.diagnostics) == 3
    assert not check.ok_for_bindings


def test_unavailable_when_symlink(tmp_path: Path) -> None:
    target = tmp_path / "real.yaml"
    target.write_bytes((CASES / "development-sqlite.yaml").read_bytes())
    link = tmp_path / "runtime.yaml"
    link.symlink_to(target)
    check = check_runtime_file(link, display_file=str(link), environment=None)
    assert codes(check) == [("platform.runtime-config.unavailable", "")]


def test_unavailable_when_directory_or_empty(tmp_path: Path) -> None:
    assert codes(check_runtime_file(tmp_path, display_file="d", environment=None)) == [
        ("platform.runtime-config.unavailable", "")
    ]
    empty = tmp_path / "empty.yaml"
    empty.write_bytes(b"")
    assert codes(check_runtime_file(empty, display_file="e", environment=None)) == [
        ("platform.runtime-config.unavailable", "")
    ]


def test_unavailable_when_fifo_does_not_block(tmp_path: Path) -> None:
    fifo = tmp_path / "runtime.yaml"
    os.mkfifo(fifo)
    assert codes(check_runtime_file(fifo, display_file="f", environment=None)) == [
        ("platform.runtime-config.unavailable", "")
    ]


def test_too_large_is_the_reader_finding(tmp_path: Path) -> None:
    big = tmp_path / "runtime.yaml"
    big.write_bytes(b"#" * (1_048_576 + 10))
    assert codes(check_runtime_file(big, display_file="runtime.yaml", environment=None)) == [
        ("yaml.too-large", "")
    ]


def test_diagnostics_carry_file_artifact_and_position() -> None:
    check = run(
        "apiVersion: id.registrystack.org/formats/coordinator/runtime/v1alpha1\n"
        "kind: CoordinatorRuntimeConfig\n"
        "secretProviders:\n"
        "  file: {root: /run/secrets}\n"
        "database:\n"
        "  sqlite:\n"
        "    path: relative.db\n"
    )
    [diagnostic] = check.diagnostics
    assert diagnostic.code == "coordinator.database.configuration"
    assert diagnostic.path == "/database/sqlite/path"
    assert (diagnostic.file, diagnostic.line, diagnostic.column) == ("runtime.yaml", 7, 11)
    assert diagnostic.artifact == "CoordinatorRuntimeConfig"


def test_wrong_kind_stops_before_the_body() -> None:
    document = base()
    document["kind"] = "CoordinatorProject"
    document["database"] = {}
    check = run(document)
    assert codes(check) == [("coordinator.project.misplaced-kind", "/kind")]
    assert not check.ok_for_bindings


# -- 05 §3: environment expressions (pure) ------------------------------------------------


def test_expression_forms_parse() -> None:
    parsed = expressions.parse_expressions("a${A}b${B_1:-x y}c${_C:?say}")
    assert [(e.name, e.operator, e.argument) for e in parsed] == [
        ("A", "", ""),
        ("B_1", ":-", "x y"),
        ("_C", ":?", "say"),
    ]


@pytest.mark.parametrize(
    "text", ["${a}", "${A", "${A:x}", "${A-x}", "${}", "${1A}", "${A:-${B}}", "x${A }"]
)
def test_malformed_expressions_are_refused(text: str) -> None:
    with pytest.raises(expressions.ExpressionSyntaxError):
        expressions.parse_expressions(text)


def test_dollar_without_brace_is_text() -> None:
    assert expressions.parse_expressions("$A $ {B} $$") == []
    assert not expressions.contains_expression("$A")


def test_substitution_uses_value_default_and_refuses_unset() -> None:
    environment = {"A": "one", "EMPTY": ""}
    assert expressions.substitute("x${A}y", environment) == "xoney"
    assert expressions.substitute("${B:-dflt}", environment) == "dflt"
    assert expressions.substitute("${EMPTY:-dflt}", environment) == "dflt"
    with pytest.raises(expressions.UnsetVariableError):
        expressions.substitute("${EMPTY}", environment)
    with pytest.raises(expressions.UnsetVariableError) as raised:
        expressions.substitute("${B:?operator message}", environment)
    assert "operator message" not in str(raised.value)


def test_substituted_text_is_not_scanned_again() -> None:
    assert expressions.substitute("${A}", {"A": "${B}", "B": "no"}) == "${B}"


def test_stand_ins_follow_the_last_pointer_segment() -> None:
    names = expressions.StandIns()
    assert names.for_member("/connections/a/baseUrl", "${X}") == "https://stand-in.invalid"
    assert names.for_member("/eventSources/a/source", "${X}") == "urn:example:stand-in"
    assert names.for_member("/database/postgresql/namespace", "${X}") == "coordinator_stand_in"
    assert names.for_member("/database/sqlite/path", "${X}") == "/stand-in"
    assert names.for_member("/deployment/listener/bind", "${X}") == "127.0.0.1:9"
    assert names.for_member("/deployment/package/expectedDigest", "${X}") == "sha256:" + "0" * 64


def test_generic_stand_ins_are_distinct_per_text() -> None:
    names = expressions.StandIns()
    assert names.for_member("/a/clientId", "${A}") == "deferred"
    assert names.for_member("/b/clientId", "${B}") == "deferred-2"
    assert names.for_member("/c/model", "${A}") == "deferred"
    assert names.for_member("/d/model", "x-${A}") == "deferred-3"


# -- 05 §3: expressions in the document ---------------------------------------------------


def test_stand_in_suppresses_value_findings() -> None:
    document = base()
    postgresql(document)
    document["database"]["postgresql"]["namespace"] = "${NAMESPACE}"
    document["deployment"]["runtimeRole"] = "${ROLE}"
    document["connections"]["applications"]["profile"] = "${PROFILE}"
    check = run(document)
    assert codes(check) == []
    assert "/database/postgresql/namespace" in check.stand_ins


def test_environment_substitution_is_checked() -> None:
    document = base()
    postgresql(document)
    document["database"]["postgresql"]["namespace"] = "${NAMESPACE}"
    assert codes(run(document, {"NAMESPACE": "coordinator_prod"})) == []
    assert codes(run(document, {"NAMESPACE": "public"})) == [
        ("coordinator.database.configuration", "/database/postgresql/namespace")
    ]


def test_environment_default_applies() -> None:
    document = base()
    document["deployment"]["databaseId"] = "${DATABASE_ID:-reviewed-notice-dev}"
    check = run(document, {})
    assert codes(check) == []
    assert check.authored.decoded is not None
    assert check.authored.decoded["deployment"]["databaseId"] == "reviewed-notice-dev"


@pytest.mark.parametrize("text", ["${DATABASE_ID}", "${DATABASE_ID:?set it}", "x-${DATABASE_ID}"])
def test_unset_variable_is_substitution_error(text: str) -> None:
    document = base()
    document["deployment"]["databaseId"] = text
    check = run(document, {"DATABASE_ID": ""})
    assert codes(check) == [("config.substitution", "/deployment/databaseId")]
    assert not check.ok_for_bindings


def test_unset_variable_is_fine_offline() -> None:
    document = base()
    document["deployment"]["databaseId"] = "${DATABASE_ID:?set it}"
    assert codes(run(document)) == []


@pytest.mark.parametrize("environment", [None, {}])
def test_malformed_expression_is_substitution_error(environment: dict[str, str] | None) -> None:
    document = base()
    document["deployment"]["databaseId"] = "${database_id}"
    assert codes(run(document, environment)) == [("config.substitution", "/deployment/databaseId")]


@pytest.mark.parametrize(
    ("pointer", "change"),
    [
        (
            "/deployment/admissionKeyRef",
            lambda d: d["deployment"].__setitem__("admissionKeyRef", "secret:file/${KEY}"),
        ),
        (
            "/connections/reviews/reviewCompletions/tokenRef",
            lambda d: d["connections"]["reviews"]["reviewCompletions"].__setitem__(
                "tokenRef", "${TOKEN}"
            ),
        ),
        (
            "/secretProviders/file/root",
            lambda d: d["secretProviders"]["file"].__setitem__("root", "${SECRETS}"),
        ),
    ],
)
def test_expression_refused_in_references_and_providers(
    pointer: str, change: Callable[[dict[str, Any]], None]
) -> None:
    document = base()
    change(document)
    for environment in (None, {"KEY": "k", "TOKEN": "t", "SECRETS": "/s"}):
        assert codes(run(document, environment)) == [("config.substitution-not-allowed", pointer)]


@pytest.mark.parametrize("member", ["apiVersion", "kind"])
def test_expression_refused_in_envelope(member: str) -> None:
    document = base()
    document[member] = "${VALUE}"
    check = run(document, {"VALUE": document[member] if member == "kind" else "x"})
    assert codes(check) == [("config.substitution-not-allowed", f"/{member}")]


def test_expression_in_integer_member_is_a_type_error() -> None:
    document = base()
    document["observation"]["minimumIntervalSeconds"] = "${INTERVAL}"
    assert codes(run(document, {"INTERVAL": "60"})) == [
        ("config.expected-integer", "/observation/minimumIntervalSeconds")
    ]


def test_expression_in_foreign_value_is_data() -> None:
    document = base()
    document["externalHttpConnections"] = {
        "holidays": external(responseSchema={"type": "object", "description": "${NOT_ONE}"})
    }
    check = run(document, {})
    assert codes(check) == []
    assert check.authored.decoded is not None
    schema = check.authored.decoded["externalHttpConnections"]["holidays"]["responseSchema"]
    assert schema["description"] == "${NOT_ONE}"


def test_keys_are_never_substituted() -> None:
    document = base()
    document["connections"]["${NAME}"] = document["connections"].pop("notices")
    assert codes(run(document, {"NAME": "notices"})) == [
        ("config.invalid-value", "/connections/${NAME}")
    ]


def test_equal_expressions_get_equal_stand_ins() -> None:
    document = base()
    document["deployment"]["authentication"]["allowedClients"] = ["${CLIENT}", "${CLIENT}"]
    assert ("config.duplicate-item", "/deployment/authentication/allowedClients/1") in codes(
        run(document)
    )


def test_different_expressions_get_different_stand_ins() -> None:
    document = base()
    authentication = document["deployment"]["authentication"]
    authentication["allowedClients"] = ["${FIRST}", "${SECOND}"]
    authentication["policies"][0]["clientId"] = "${FIRST}"
    authentication["policies"].append({**authentication["policies"][0], "clientId": "${SECOND}"})
    assert codes(run(document)) == []


def test_undecodable_stand_in_warns_and_skips_the_object() -> None:
    document = base()
    document["connections"]["applications"]["product"] = "${PRODUCT}"
    document["connections"]["applications"]["reviewCompletions"] = {"tokenRef": "secret:file/t"}
    check = run(document)
    assert codes(check) == [
        ("platform.runtime-config.check-incomplete", "/connections/applications/product")
    ]
    warning = check.diagnostics[0]
    assert warning.effective_severity == "warning"
    assert exit_code_of(check.diagnostics) == 0
    assert check.incomplete == frozenset({"/connections/applications"})
    assert check.ok_for_bindings


def test_undecodable_stand_in_decodes_with_environment() -> None:
    document = base()
    document["connections"]["applications"]["product"] = "${PRODUCT}"
    assert codes(run(document, {"PRODUCT": "breg"})) == []
    assert codes(run(document, {"PRODUCT": "ledger"})) == [
        ("config.unknown-variant", "/connections/applications/product")
    ]


def test_stand_in_tls_termination_skips_listener() -> None:
    document = base()
    document["deployment"]["listener"] = {"bind": "0.0.0.0:8108", "tlsTermination": "${TLS}"}
    check = run(document)
    assert codes(check) == [
        ("platform.runtime-config.check-incomplete", "/deployment/listener/tlsTermination")
    ]
    assert check.incomplete == frozenset({"/deployment/listener"})


def test_stand_in_discriminator_warns() -> None:
    document = base()
    document["deployment"]["authentication"]["jwksSource"] = {
        "type": "${JWKS_TYPE}",
        "uri": "https://idp.example.org/jwks",
    }
    check = run(document)
    assert codes(check) == [
        (
            "platform.runtime-config.check-incomplete",
            "/deployment/authentication/jwksSource/type",
        )
    ]
    environment_check = run(document, {"JWKS_TYPE": "uri"})
    assert codes(environment_check) == []


def test_stand_in_enum_item_skips_its_policy() -> None:
    document = base()
    document["deployment"]["authentication"]["policies"][0]["actions"] = ["${ACTION}"]
    document["deployment"]["authentication"]["policies"][0]["operator"] = False
    check = run(document)
    assert codes(check) == [
        (
            "platform.runtime-config.check-incomplete",
            "/deployment/authentication/policies/0/actions/0",
        )
    ]
    assert check.incomplete == frozenset({"/deployment/authentication/policies/0"})


# -- V1: reader, envelope and decoding ----------------------------------------------------


def test_v1_unknown_and_missing_members() -> None:
    document = base()
    document["connections"]["notices"]["retries"] = 3
    del document["connections"]["notices"]["authorization"]["resource"]
    assert codes(run(document)) == [
        ("config.missing-key", "/connections/notices/authorization/resource"),
        ("config.unknown-key", "/connections/notices/retries"),
    ]


def test_v1_missing_key_is_positioned_at_its_container() -> None:
    check = run(
        "apiVersion: id.registrystack.org/formats/coordinator/runtime/v1alpha1\n"
        "kind: CoordinatorRuntimeConfig\n"
        "secretProviders:\n"
        "  environment: {}\n"
    )
    [diagnostic] = check.diagnostics
    assert (diagnostic.code, diagnostic.path) == ("config.missing-key", "/database")
    assert diagnostic.line == 1


def test_v1_ranges_and_lengths() -> None:
    document = base()
    document["observation"]["minimumIntervalSeconds"] = 10
    document["eventSources"]["applications"]["maximumClockSkewSeconds"] = 901
    document["deployment"]["worker"] = {"pollMilliseconds": 5, "concurrency": 9}
    document["deployment"]["authentication"]["allowedClients"] = []
    assert codes(run(document)) == [
        ("config.invalid-length", "/deployment/authentication/allowedClients"),
        ("config.out-of-range", "/deployment/worker/concurrency"),
        ("config.out-of-range", "/deployment/worker/pollMilliseconds"),
        ("config.out-of-range", "/eventSources/applications/maximumClockSkewSeconds"),
        ("config.out-of-range", "/observation/minimumIntervalSeconds"),
    ]


def test_v1_secret_reference_grammar() -> None:
    document = base()
    document["deployment"]["auditKeyRef"] = "secret:file/../audit.key"
    document["deployment"]["admissionKeyRef"] = "file/admission.key"
    assert codes(run(document)) == [
        ("config.invalid-value", "/deployment/admissionKeyRef"),
        ("config.invalid-value", "/deployment/auditKeyRef"),
    ]


def test_v1_removed_jwks_kind() -> None:
    document = base()
    document["deployment"]["authentication"]["jwksSource"] = {
        "type": "discovery",
        "kind": "discovery",
    }
    assert codes(run(document)) == [
        ("config.removed-key", "/deployment/authentication/jwksSource/kind")
    ]


def test_v1_at_least_one_provider() -> None:
    document = base()
    document["secretProviders"] = {}
    # The references cannot be judged against an empty block: no cascade.
    assert codes(run(document)) == [("config.invalid-length", "/secretProviders")]


# -- V2: secret providers -----------------------------------------------------------------


def test_v2_undeclared_provider() -> None:
    document = base()
    document["connections"]["reviews"]["reviewCompletions"]["tokenRef"] = "secret:env/TOKEN"
    assert codes(run(document)) == [
        ("coordinator.runtime-config.refused", "/connections/reviews/reviewCompletions/tokenRef")
    ]
    document["secretProviders"]["environment"] = {}
    assert codes(run(document)) == []


def test_v2_undeclared_file_provider() -> None:
    document = base()
    document["secretProviders"] = {"environment": {}}
    check = run(document)
    refused = {path for code, path in codes(check) if code == "coordinator.runtime-config.refused"}
    assert "/deployment/admissionKeyRef" in refused
    assert "/connections/applications/authorization/signingKeyRef" in refused
    assert {code for code, _ in codes(check)} == {"coordinator.runtime-config.refused"}


@pytest.mark.parametrize(
    "pointer",
    [
        "/deployment/admissionKeyRef",
        "/deployment/auditKeyRef",
        "/deployment/stateKeys/1/keyRef",
        "/eventSources/applications/signingKeyRef",
        "/connections/notices/authorization/signingKeyRef",
    ],
)
def test_v2_file_only_secrets(pointer: str) -> None:
    document = base()
    document["secretProviders"]["environment"] = {}
    *parents, last = pointer.split("/")[1:]
    target = document
    for token in parents:
        target = target[token]
    target[last] = "secret:env/SECRET"
    assert codes(run(document)) == [("coordinator.runtime-config.refused", pointer)]


def test_v2_any_provider_secrets_accept_environment() -> None:
    document = base()
    postgresql(document)
    document["secretProviders"]["environment"] = {}
    document["database"]["postgresql"]["runtimeUrlRef"] = "secret:env/DATABASE_URL"
    document["deployment"]["authentication"]["jwksSource"]["documentRef"] = "secret:env/JWKS"
    assert codes(run(document)) == []


def test_v2_file_root_must_be_absolute() -> None:
    document = base()
    document["secretProviders"]["file"]["root"] = "secrets"
    assert codes(run(document)) == [
        ("coordinator.runtime-config.refused", "/secretProviders/file/root")
    ]


# -- V3 and B5: connection names -----------------------------------------------------------


def test_b5_name_bound_twice_is_refused_at_the_later_occurrence() -> None:
    document = base()
    document["evaluationConnections"] = {"notices": evaluation()}
    check = run(document)
    assert codes(check) == [
        ("coordinator.runtime-config.refused", "/evaluationConnections/notices")
    ]
    later = check.diagnostics[0]
    assert check.authored.document is not None
    key = check.authored.document.key_positions["/evaluationConnections/notices"]
    assert (later.line, later.column) == (key.line, key.column)


def test_v3_at_most_sixteen_connections() -> None:
    document = base()
    document["externalHttpConnections"] = {f"source-{n:02d}": external() for n in range(13)}
    assert codes(run(document)) == []  # 3 + 13 = 16
    document["evaluationConnections"] = {"judge": evaluation()}
    assert codes(run(document)) == [
        ("coordinator.runtime-config.refused", "/evaluationConnections/judge")
    ]


def test_event_source_may_share_a_connection_name() -> None:
    assert "applications" in base()["eventSources"]
    assert codes(run(base())) == []


# -- V4 and 05 §5.4: product connections --------------------------------------------------


def test_v4_profile_required_for_breg() -> None:
    document = base()
    del document["connections"]["applications"]["profile"]
    check = run(document)
    assert codes(check) == [
        ("coordinator.connection.configuration", "/connections/applications/profile")
    ]
    assert check.authored.document is not None
    container = check.authored.document.mark_of("/connections/applications")
    assert container is not None
    assert check.diagnostics[0].line == container.line


def test_v4_profile_forbidden_otherwise() -> None:
    document = base()
    document["connections"]["notices"]["profile"] = "reader"
    assert codes(run(document)) == [
        ("coordinator.connection.configuration", "/connections/notices/profile")
    ]


@pytest.mark.parametrize("profile", ["9reader", "reader/control", "", "a" * 129])
def test_v4_profile_grammar(profile: str) -> None:
    document = base()
    document["connections"]["applications"]["profile"] = profile
    assert codes(run(document)) == [
        ("coordinator.connection.configuration", "/connections/applications/profile")
    ]


def test_v4_profile_grammar_accepts_examples() -> None:
    document = base()
    document["connections"]["applications"]["profile"] = "_reader-1.2"
    assert codes(run(document)) == []


def test_v4_review_completions_only_for_casework() -> None:
    document = base()
    document["connections"]["notices"]["reviewCompletions"] = {"tokenRef": "secret:file/t"}
    assert codes(run(document)) == [
        ("coordinator.connection.configuration", "/connections/notices/reviewCompletions")
    ]


@pytest.mark.parametrize(
    "url",
    [
        "http://messaging.example.org",
        "http://localhost:8103",
        "http://10.0.0.1:8103",
        "https://user:pw@messaging.example.org",
        "https://messaging.example.org/?q=1",
        "https://messaging.example.org/#top",
        "https://messaging.example.org/a//b",
        "ftp://messaging.example.org",
        "https://",
        "https://messaging.example.org:99999",
        "https://messaging example.org",
        "https://messaging.example.org\\api",
        "HTTPS://messaging.example.org",
        "messaging.example.org",
    ],
)
def test_v4_base_url_rules(url: str) -> None:
    document = base()
    document["connections"]["notices"]["baseUrl"] = url
    assert codes(run(document)) == [
        ("coordinator.connection.configuration", "/connections/notices/baseUrl")
    ]


@pytest.mark.parametrize(
    "url",
    [
        "https://messaging.example.org",
        "https://messaging.example.org/",
        "https://messaging.example.org/api/v2/",
        "https://messaging.example.org:8443/api",
        "https://10.1.2.3",
        "http://127.0.0.1:8103",
        "http://127.8.9.10",
        "http://[::1]:8103/",
    ],
)
def test_v4_base_url_accepted(url: str) -> None:
    document = base()
    document["connections"]["notices"]["baseUrl"] = url
    assert codes(run(document)) == []


@pytest.mark.parametrize(
    ("member", "value"),
    [
        ("tokenEndpoint", "http://idp.example.org/token"),
        ("tokenEndpoint", "https://idp.example.org/token#x"),
        ("clientId", "   "),
        ("clientId", "client\u0007id"),
        ("clientId", "c" * 257),
        ("clientAssertionAudience", "not a uri"),
        ("resource", "urn:registrystack:messaging#part"),
        ("resource", "relative/resource"),
    ],
)
def test_54_authorization_rules(member: str, value: str) -> None:
    document = base()
    document["connections"]["notices"]["authorization"][member] = value
    assert codes(run(document)) == [
        ("coordinator.connection.configuration", f"/connections/notices/authorization/{member}")
    ]


def test_54_scope_tokens() -> None:
    document = base()
    scopes = document["connections"]["notices"]["authorization"]["scopes"]
    scopes[:] = ["ok:scope", 'bad"scope', "bad\\scope", "s" * 257]
    assert codes(run(document)) == [
        ("coordinator.connection.configuration", "/connections/notices/authorization/scopes/1"),
        ("coordinator.connection.configuration", "/connections/notices/authorization/scopes/2"),
        ("coordinator.connection.configuration", "/connections/notices/authorization/scopes/3"),
    ]


def test_54_scopes_joined_at_most_1024_bytes() -> None:
    document = base()
    scopes = document["connections"]["notices"]["authorization"]["scopes"]
    scopes[:] = [f"{n}" + "s" * 200 for n in range(5)]  # 5 × 201 + 4 = 1009
    assert codes(run(document)) == []
    scopes.append("t" * 20)  # 1030
    assert codes(run(document)) == [
        ("coordinator.connection.configuration", "/connections/notices/authorization/scopes")
    ]


def test_54_scopes_bounds_and_uniqueness_are_reader_findings() -> None:
    document = base()
    document["connections"]["notices"]["authorization"]["scopes"] = ["a", "a"]
    assert codes(run(document)) == [
        ("config.duplicate-item", "/connections/notices/authorization/scopes/1")
    ]


# -- V5: external HTTP connections --------------------------------------------------------


def test_v5_external_connection_accepted() -> None:
    document = base()
    document["externalHttpConnections"] = {
        "holidays": external(
            queryParameters=["year", "region.code"],
            authorization=connection()["authorization"],
            attemptTimeoutMilliseconds=1500,
            maximumResponseBytes=4096,
        )
    }
    assert codes(run(document)) == []


@pytest.mark.parametrize(
    "path", ["/holidays", "holidays/", "a//b", "a/../b", "./a", "a/b c", "a?b", "p" * 257]
)
def test_v5_paths(path: str) -> None:
    document = base()
    document["externalHttpConnections"] = {"holidays": external(paths=["ok", path])}
    assert codes(run(document)) == [
        ("coordinator.external-http.configuration", "/externalHttpConnections/holidays/paths/1")
    ]


def test_v5_query_parameter_names() -> None:
    document = base()
    document["externalHttpConnections"] = {
        "holidays": external(queryParameters=["year", "bad name", "q" * 65])
    }
    assert codes(run(document)) == [
        (
            "coordinator.external-http.configuration",
            "/externalHttpConnections/holidays/queryParameters/1",
        ),
        (
            "coordinator.external-http.configuration",
            "/externalHttpConnections/holidays/queryParameters/2",
        ),
    ]


def test_v5_base_url() -> None:
    document = base()
    document["externalHttpConnections"] = {"holidays": external(baseUrl="http://example.org")}
    assert codes(run(document)) == [
        ("coordinator.external-http.configuration", "/externalHttpConnections/holidays/baseUrl")
    ]


def test_v5_response_schema_dialect() -> None:
    document = base()
    document["externalHttpConnections"] = {
        "holidays": external(
            responseSchema={
                "$id": "https://x.example/s",
                "properties": {"body": {"definitions": {}}},
            }
        )
    }
    found = codes(run(document))
    assert found
    assert {code for code, _ in found} == {"coordinator.external-http.configuration"}
    assert all(
        path.startswith("/externalHttpConnections/holidays/responseSchema") for _, path in found
    )


def test_v5_limits_are_reader_findings() -> None:
    document = base()
    document["externalHttpConnections"] = {
        "holidays": external(attemptTimeoutMilliseconds=2001, paths=[])
    }
    assert codes(run(document)) == [
        ("config.invalid-length", "/externalHttpConnections/holidays/paths"),
        ("config.out-of-range", "/externalHttpConnections/holidays/attemptTimeoutMilliseconds"),
    ]


def test_v5_authorization_uses_the_connection_code() -> None:
    document = base()
    authorization = connection()["authorization"]
    authorization["tokenEndpoint"] = "http://idp.example.org"
    document["externalHttpConnections"] = {"holidays": external(authorization=authorization)}
    assert codes(run(document)) == [
        (
            "coordinator.connection.configuration",
            "/externalHttpConnections/holidays/authorization/tokenEndpoint",
        )
    ]


# -- V6: evaluation connections -----------------------------------------------------------


def test_v6_evaluation_connection_accepted() -> None:
    document = base()
    document["secretProviders"]["environment"] = {}
    document["evaluationConnections"] = {
        "judge": evaluation(
            baseUrl="https://eval.example.org",
            authorization={"bearer": {"tokenRef": "secret:env/EVAL", "principal": "judge svc"}},
        ),
        "local-judge": evaluation(),
    }
    assert codes(run(document)) == []


@pytest.mark.parametrize(
    "authorization", [{}, {"local": {}, "bearer": {"tokenRef": "secret:file/t", "principal": "p"}}]
)
def test_v6_exactly_one_authorization(authorization: dict[str, Any]) -> None:
    document = base()
    document["evaluationConnections"] = {"judge": evaluation(authorization=authorization)}
    assert codes(run(document)) == [
        ("coordinator.evaluation.configuration", "/evaluationConnections/judge/authorization")
    ]


@pytest.mark.parametrize("url", ["https://eval.example.org", "http://[::1]:1"])
def test_v6_local_needs_numeric_loopback(url: str) -> None:
    document = base()
    document["evaluationConnections"] = {"judge": evaluation(baseUrl=url)}
    expected = (
        []
        if url.startswith("http://")
        else [
            (
                "coordinator.evaluation.configuration",
                "/evaluationConnections/judge/authorization/local",
            )
        ]
    )
    assert codes(run(document)) == expected


def test_v6_model_and_principal() -> None:
    document = base()
    document["evaluationConnections"] = {
        "judge": evaluation(
            model="-model",
            baseUrl="https://eval.example.org",
            authorization={"bearer": {"tokenRef": "secret:file/t", "principal": "p\nq"}},
        )
    }
    assert codes(run(document)) == [
        (
            "coordinator.evaluation.configuration",
            "/evaluationConnections/judge/authorization/bearer/principal",
        ),
        ("coordinator.evaluation.configuration", "/evaluationConnections/judge/model"),
    ]


def test_v6_protocol_is_an_enum() -> None:
    document = base()
    document["evaluationConnections"] = {"judge": evaluation(protocol="system-two")}
    assert codes(run(document)) == [
        ("config.unknown-variant", "/evaluationConnections/judge/protocol")
    ]


# -- V7: event sources --------------------------------------------------------------------


@pytest.mark.parametrize("source", ["not a uri", "relative/path", "urn:" + "x" * 509])
def test_v7_source(source: str) -> None:
    document = base()
    document["eventSources"]["applications"]["source"] = source
    assert codes(run(document)) == [
        ("coordinator.event-source.configuration", "/eventSources/applications/source")
    ]


@pytest.mark.parametrize("source", ["https://breg.example.org/instances/1", "urn:x:y"])
def test_v7_source_accepted(source: str) -> None:
    document = base()
    document["eventSources"]["applications"]["source"] = source
    assert codes(run(document)) == []


def test_v7_at_most_sixteen_sources() -> None:
    document = base()
    template = document["eventSources"]["applications"]
    document["eventSources"] = {f"source-{n}": template for n in range(17)}
    assert codes(run(document)) == [("config.invalid-length", "/eventSources")]


# -- V8: database -------------------------------------------------------------------------


def test_v8_exactly_one_database_kind() -> None:
    document = base()
    document["database"]["postgresql"] = {
        "runtimeUrlRef": "secret:file/r",
        "migrationUrlRef": "secret:file/m",
        "namespace": "coordinator_app",
    }
    assert codes(run(document)) == [("coordinator.database.configuration", "/database")]
    document["database"] = {}
    assert codes(run(document)) == [("coordinator.database.configuration", "/database")]


@pytest.mark.parametrize(
    "namespace", ["public", "coordinator-app", "Coordinator_x", "coordinator_" + "a" * 49]
)
def test_v8_namespace(namespace: str) -> None:
    document = base()
    postgresql(document)
    document["database"]["postgresql"]["namespace"] = namespace
    assert codes(run(document)) == [
        ("coordinator.database.configuration", "/database/postgresql/namespace")
    ]


def test_v8_namespace_at_most_60_bytes() -> None:
    document = base()
    postgresql(document)
    document["database"]["postgresql"]["namespace"] = "coordinator_" + "a" * 48
    assert codes(run(document)) == []


def test_v8_sqlite_path_absolute() -> None:
    document = base()
    document["database"]["sqlite"]["path"] = "data/coordinator.db"
    assert codes(run(document)) == [("coordinator.database.configuration", "/database/sqlite/path")]


# -- V9: deployment -----------------------------------------------------------------------


def test_v9_runtime_role_with_postgresql_only() -> None:
    document = base()
    postgresql(document)
    assert codes(run(document)) == []
    del document["deployment"]["runtimeRole"]
    assert codes(run(document)) == [
        ("coordinator.deployment.configuration", "/deployment/runtimeRole")
    ]
    document = base()
    document["deployment"]["runtimeRole"] = "coordinator_runtime"
    assert codes(run(document)) == [
        ("coordinator.deployment.configuration", "/deployment/runtimeRole")
    ]


def test_v9_runtime_role_grammar() -> None:
    document = base()
    postgresql(document)
    document["deployment"]["runtimeRole"] = "Runtime"
    assert codes(run(document)) == [
        ("coordinator.deployment.configuration", "/deployment/runtimeRole")
    ]


def test_v9_active_state_key_in_state_keys() -> None:
    document = base()
    document["deployment"]["activeStateKey"] = 2
    assert codes(run(document)) == [
        ("coordinator.deployment.configuration", "/deployment/activeStateKey")
    ]
    document["deployment"]["stateKeys"]["2"] = {"keyRef": "secret:file/state-2.key"}
    assert codes(run(document)) == []


def test_v9_state_key_versions() -> None:
    document = base()
    keys = document["deployment"]["stateKeys"]
    keys["4294967295"] = {"keyRef": "secret:file/a"}
    keys["4294967296"] = {"keyRef": "secret:file/b"}
    keys["01"] = {"keyRef": "secret:file/c"}
    assert codes(run(document)) == [
        ("config.invalid-value", "/deployment/stateKeys/01"),
        ("coordinator.deployment.configuration", "/deployment/stateKeys/4294967296"),
    ]


@pytest.mark.parametrize(
    ("bind", "tls"),
    [
        ("localhost:8108", "operator-controlled-upstream"),
        ("127.0.0.1", "operator-controlled-upstream"),
        ("127.0.0.1:70000", "operator-controlled-upstream"),
        ("::1:8108", "operator-controlled-upstream"),
        ("0.0.0.0:8108", "development-loopback"),
        ("[2001:db8::1]:8108", "development-loopback"),
    ],
)
def test_v9_listener(bind: str, tls: str) -> None:
    document = base()
    document["deployment"]["listener"] = {"bind": bind, "tlsTermination": tls}
    assert codes(run(document)) == [
        ("coordinator.deployment.configuration", "/deployment/listener/bind")
    ]


@pytest.mark.parametrize(
    ("bind", "tls"),
    [
        ("0.0.0.0:8108", "operator-controlled-upstream"),
        ("[::]:8108", "operator-controlled-upstream"),
        ("[::1]:8108", "development-loopback"),
        ("127.0.0.2:8108", "development-loopback"),
    ],
)
def test_v9_listener_accepted(bind: str, tls: str) -> None:
    document = base()
    document["deployment"]["listener"] = {"bind": bind, "tlsTermination": tls}
    assert codes(run(document)) == []


def test_v9_paths_digest_and_database_id() -> None:
    document = base()
    deployment = document["deployment"]
    deployment["package"]["root"] = "dist/package"
    deployment["package"]["expectedDigest"] = "sha256:" + "A" * 64
    deployment["auditDirectory"] = "audit"
    deployment["databaseId"] = "db\tid"
    assert codes(run(document)) == [
        ("coordinator.deployment.configuration", "/deployment/auditDirectory"),
        ("coordinator.deployment.configuration", "/deployment/databaseId"),
        ("coordinator.deployment.configuration", "/deployment/package/expectedDigest"),
        ("coordinator.deployment.configuration", "/deployment/package/root"),
    ]


def test_v9_deployment_is_optional() -> None:
    document = base()
    del document["deployment"]
    assert codes(run(document)) == []


# -- V10: authentication and policies -----------------------------------------------------


def test_v10_unrestricted_client_is_refused() -> None:
    document = base()
    authentication = document["deployment"]["authentication"]
    authentication["allowedClients"] = ["ops-console", "unrestricted"]
    assert codes(run(document)) == [
        ("coordinator.access.configuration", "/deployment/authentication/allowedClients/1")
    ]


def test_v10_policy_for_unknown_client() -> None:
    document = base()
    authentication = document["deployment"]["authentication"]
    authentication["policies"].append({**authentication["policies"][0], "clientId": "stranger"})
    assert codes(run(document)) == [
        ("coordinator.access.configuration", "/deployment/authentication/policies/1/clientId")
    ]


def test_v10_every_client_has_a_policy() -> None:
    document = base()
    document["deployment"]["authentication"]["allowedClients"].append("batch")
    assert codes(run(document)) == [
        ("coordinator.access.configuration", "/deployment/authentication/allowedClients/1")
    ]


def test_v10_at_most_one_policy_per_client() -> None:
    document = base()
    authentication = document["deployment"]["authentication"]
    authentication["policies"].append(copy.deepcopy(authentication["policies"][0]))
    assert codes(run(document)) == [
        ("coordinator.access.configuration", "/deployment/authentication/policies/1/clientId")
    ]


def test_v10_operator_only_actions_need_operator() -> None:
    document = base()
    policy = document["deployment"]["authentication"]["policies"][0]
    policy["actions"] = ["start", "doctor", "status", "retain"]
    policy["operator"] = False
    assert codes(run(document)) == [
        ("coordinator.access.configuration", "/deployment/authentication/policies/0/actions/1"),
        ("coordinator.access.configuration", "/deployment/authentication/policies/0/actions/3"),
    ]
    del policy["operator"]
    assert len(run(document).diagnostics) == 2
    policy["actions"] = ["start", "status"]
    assert codes(run(document)) == []


def test_v10_issuer_and_jwks_uri() -> None:
    document = base()
    authentication = document["deployment"]["authentication"]
    authentication["issuer"] = "idp.example.org"
    authentication["jwksSource"] = {"type": "uri", "uri": "http://idp.example.org/jwks"}
    authentication["assertionIssuers"] = ["https://issuer.example.org", "not a url"]
    assert codes(run(document)) == [
        ("coordinator.access.configuration", "/deployment/authentication/assertionIssuers/1"),
        ("coordinator.access.configuration", "/deployment/authentication/issuer"),
        ("coordinator.access.configuration", "/deployment/authentication/jwksSource/uri"),
    ]


def test_v10_required_scopes() -> None:
    document = base()
    document["deployment"]["authentication"]["policies"][0]["requiredScopes"] = ["ok", "no way"]
    assert codes(run(document)) == [
        (
            "coordinator.access.configuration",
            "/deployment/authentication/policies/0/requiredScopes/1",
        )
    ]


def test_v10_actions_are_unique_enum_values() -> None:
    document = base()
    document["deployment"]["authentication"]["policies"][0]["actions"] = ["start", "start", "fly"]
    assert codes(run(document)) == [
        ("config.duplicate-item", "/deployment/authentication/policies/0/actions/1"),
        ("config.unknown-variant", "/deployment/authentication/policies/0/actions/2"),
    ]


# -- bindings B1–B6 (02 §5.8) -------------------------------------------------------------


def workflow(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "operations": {
            "read-application": {"operation": "breg.read-record/v1", "connection": "applications"},
            "request-review": {
                "operation": "casework.submit-review-request/v1",
                "connection": "reviews",
            },
            "send-notice": {"operation": "messaging.submit-message/v1", "connection": "notices"},
        },
        "triggers": {
            "application-submitted": {
                "source": "applications",
                "event": "application-submitted-v1",
                "input": {"function": "f", "arguments": []},
            }
        },
        "steps": {
            "request": {"type": "call", "operation": "request-review", "next": "await"},
            "await": {
                "type": "wait-for",
                "call": "request",
                "completion": "result",
                "timeoutSeconds": 60,
                "next": "done",
            },
            "done": {"type": "finish", "outcome": "ok"},
        },
    }
    body.update(overrides)
    return body


def test_bindings_of_the_example_are_clean() -> None:
    assert check_bindings(workflow(), run(base())) == []


def test_b1_missing_product_connection() -> None:
    document = base()
    del document["connections"]["notices"]
    check = run(document)
    found = check_bindings(workflow(), check)
    assert codes(found) == [("coordinator.runtime.workflow-binding", "/connections/notices")]
    assert check.authored.document is not None
    container = check.authored.document.mark_of("/connections")
    assert container is not None
    assert (found[0].line, found[0].column) == (container.line, container.column)
    assert found[0].file == "runtime.yaml"
    assert found[0].artifact == "CoordinatorRuntimeConfig"


def test_b1_anchored_at_root_without_connections() -> None:
    document = base()
    del document["connections"]
    found = check_bindings(workflow(steps={}), run(document))
    assert codes(found) == [
        ("coordinator.runtime.workflow-binding", "/connections/applications"),
        ("coordinator.runtime.workflow-binding", "/connections/notices"),
        ("coordinator.runtime.workflow-binding", "/connections/reviews"),
    ]
    assert all(d.line == 1 for d in found)


def test_b1_wrong_product() -> None:
    document = base()
    document["connections"]["notices"]["product"] = "scheduling"
    found = check_bindings(workflow(), run(document))
    assert codes(found) == [("coordinator.runtime.workflow-binding", "/connections/notices")]


def test_b1_reported_once_per_connection() -> None:
    operations = workflow()["operations"]
    operations["send-reminder"] = {"operation": "messaging.submit-message/v1", "connection": "mail"}
    operations["send-receipt"] = {"operation": "messaging.submit-message/v1", "connection": "mail"}
    found = check_bindings(workflow(operations=operations), run(base()))
    assert codes(found) == [("coordinator.runtime.workflow-binding", "/connections/mail")]


def test_b2_external_connection() -> None:
    operations = {"fetch": {"operation": "external-http.get/v1", "connection": "notices"}}
    # Bound as a product connection is not bound as an external one.
    found = check_bindings(workflow(operations=operations, steps={}), run(base()))
    assert codes(found) == [
        ("coordinator.runtime.workflow-binding", "/externalHttpConnections/notices")
    ]
    document = base()
    document["externalHttpConnections"] = {"holidays": external()}
    operations = {"fetch": {"operation": "external-http.get/v1", "connection": "holidays"}}
    assert check_bindings(workflow(operations=operations, steps={}), run(document)) == []


def test_b3_evaluation_connection() -> None:
    operations = {"judge": {"operation": "evaluation.evaluate/v1", "connection": "judge"}}
    found = check_bindings(workflow(operations=operations, steps={}), run(base()))
    assert codes(found) == [
        ("coordinator.runtime.workflow-binding", "/evaluationConnections/judge")
    ]
    document = base()
    document["evaluationConnections"] = {"judge": evaluation()}
    assert check_bindings(workflow(operations=operations, steps={}), run(document)) == []


def test_b4_trigger_source() -> None:
    document = base()
    del document["eventSources"]
    found = check_bindings(workflow(), run(document))
    assert codes(found) == [("coordinator.runtime.workflow-binding", "/eventSources/applications")]


def test_b6_review_completions_unconfigured_is_a_warning() -> None:
    document = base()
    del document["connections"]["reviews"]["reviewCompletions"]
    found = check_bindings(workflow(), run(document))
    assert codes(found) == [
        ("coordinator.runtime.completion-events-unconfigured", "/connections/reviews")
    ]
    assert found[0].effective_severity == "warning"
    assert exit_code_of(found) == 0


def test_b6_only_for_awaited_reviews() -> None:
    document = base()
    del document["connections"]["reviews"]["reviewCompletions"]
    steps = {"request": {"type": "call", "operation": "request-review", "next": "done"}}
    assert check_bindings(workflow(steps=steps), run(document)) == []


def test_bindings_skip_stand_ins() -> None:
    document = base()
    document["connections"]["notices"]["product"] = "${NOTICES_PRODUCT}"
    check = run(document)
    assert check_bindings(workflow(), check) == []
    # With the variable set the connection is judged.
    substituted = run(document, {"NOTICES_PRODUCT": "casework"})
    assert codes(check_bindings(workflow(), substituted)) == [
        ("coordinator.runtime.workflow-binding", "/connections/notices")
    ]


def test_bindings_skipped_when_the_runtime_file_did_not_decode() -> None:
    document = base()
    del document["connections"]["notices"]
    document["deployment"]["activeStateKey"] = "one"
    check = run(document)
    assert not check.ok_for_bindings
    assert check_bindings(workflow(), check) == []


def test_bindings_ignore_operations_outside_the_catalog_products() -> None:
    operations = {"x": {"operation": "ledger.post/v1", "connection": "ledger"}}
    assert check_bindings(workflow(operations=operations, steps={}), run(base())) == []


def test_rule_findings_do_not_block_bindings() -> None:
    document = base()
    document["database"]["sqlite"]["path"] = "relative.db"
    check = run(document)
    assert check.ok_for_bindings
    del document["eventSources"]
    assert codes(check_bindings(workflow(), run(document))) == [
        ("coordinator.runtime.workflow-binding", "/eventSources/applications")
    ]


# -- canaries: no value ever leaves a diagnostic ------------------------------------------

CANARY = "CANARY7f3a"


def rendered(diagnostics: list[Diagnostic]) -> str:
    return json.dumps([d.to_json() for d in diagnostics]) + "".join(
        f"{d.effective_message}{d.effective_hint}" for d in diagnostics
    )


def test_canary_environment_value_default_and_message() -> None:
    document = base()
    postgresql(document)
    document["database"]["postgresql"]["namespace"] = "${NAMESPACE}"
    document["deployment"]["databaseId"] = f"${{DATABASE_ID:?{CANARY}-message}}"
    document["deployment"]["runtimeRole"] = f"${{ROLE:-{CANARY}-default}}"
    document["connections"]["notices"]["baseUrl"] = f"${{NOTICES_URL:-http://{CANARY}.example}}"
    environment = {"NAMESPACE": f"{CANARY}-namespace"}
    check = run(document, environment)
    assert {d.path for d in check.diagnostics} == {
        "/database/postgresql/namespace",
        "/deployment/databaseId",
        "/deployment/runtimeRole",
        "/connections/notices/baseUrl",
    }
    assert CANARY not in rendered(check.diagnostics)
    assert CANARY.lower() not in rendered(check.diagnostics).lower()


def test_canary_secret_paths_and_urls() -> None:
    document = base()
    document["deployment"]["admissionKeyRef"] = f"secret:env/{CANARY.upper()}"
    document["connections"]["notices"]["authorization"]["signingKeyRef"] = (
        f"secret:file/${{{CANARY.upper()}}}"
    )
    document["connections"]["notices"]["baseUrl"] = f"http://{CANARY}.example.org"
    document["connections"]["notices"]["authorization"]["clientId"] = f"{CANARY}\u0001"
    document["externalHttpConnections"] = {
        "holidays": external(
            responseSchema={"$id": f"https://{CANARY}.example"}, paths=[f"/{CANARY}"]
        )
    }
    check = run(document)
    assert len(check.diagnostics) >= 6
    assert CANARY.lower() not in rendered(check.diagnostics).lower()


def test_canary_bindings() -> None:
    operations = {"x": {"operation": "messaging.submit-message/v1", "connection": "canary7f3a"}}
    found = check_bindings(workflow(operations=operations, steps={}), run(base()))
    # The pointer and the message name the connection and the alias (structural identifiers,
    # contract 02 §1 item 2); the fixed hint does not, and nothing bound in the runtime file that
    # is not close to it is suggested.
    assert [d.path for d in found] == ["/connections/canary7f3a"]
    assert [d.effective_message for d in found] == [
        "Operation alias x uses connection canary7f3a, which is not bound under `connections`."
    ]
    assert all("canary7f3a" not in d.effective_hint for d in found)
    assert [d.suggestion for d in found] == [None]


def test_an_unbound_connection_suggests_the_closest_bound_name() -> None:
    operations = {"x": {"operation": "messaging.submit-message/v1", "connection": "notice"}}
    found = check_bindings(
        workflow(operations=operations, steps={}), run(base()), lambda pointer: (7, 17)
    )
    assert [(d.path, d.suggestion) for d in found] == [("/connections/notice", "notices")]
    assert [r.to_json() for r in found[0].related] == [
        {
            "file": "workflow.yaml",
            "line": 7,
            "column": 17,
            "path": "/operations/x/connection",
            "message": "connection notice is used here",
        }
    ]


def test_nothing_inside_a_skipped_object_is_reported() -> None:
    document = base()
    applications = document["connections"]["applications"]
    applications["product"] = "${PRODUCT}"
    applications["baseUrl"] = "http://example.org"
    applications["retries"] = 3
    applications["authorization"]["signingKeyRef"] = "secret:env/KEY"
    applications["authorization"]["clientId"] = "${bad expression}"
    check = run(document)
    assert codes(check) == [
        ("platform.runtime-config.check-incomplete", "/connections/applications/product")
    ]
    # With the environment, the object is checked completely.
    assert codes(run(document, {"PRODUCT": "breg"})) == [
        ("config.substitution", "/connections/applications/authorization/clientId"),
        ("config.unknown-key", "/connections/applications/retries"),
        ("coordinator.connection.configuration", "/connections/applications/baseUrl"),
        (
            "coordinator.runtime-config.refused",
            "/connections/applications/authorization/signingKeyRef",
        ),
    ]


def test_v1_secret_reference_with_final_line_feed_is_refused() -> None:
    document = base()
    document["deployment"]["auditKeyRef"] = "secret:file/audit.key\n"
    assert codes(run(document)) == [("config.invalid-value", "/deployment/auditKeyRef")]


def test_public_surface() -> None:
    from coordinator_core.config import read as runtime

    assert runtime.__all__ == [
        "RuntimeCheck",
        "check_bindings",
        "check_runtime_bytes",
        "check_runtime_file",
    ]
