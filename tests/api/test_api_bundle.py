"""The OpenAPI source, its bundle step and the generated documents (STACK.md §2)."""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from openapi_spec_validator import validate
from openapi_spec_validator.readers import read_from_filename

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

_bundler: Any = importlib.import_module("bundle_openapi")
BundleError: type[Exception] = _bundler.BundleError
bundle: Any = _bundler.bundle

GENERATED = ROOT / "generated"

# 06 §4: method, path, policy action (None: no bearer token), success statuses.
ENDPOINTS = [
    ("get", "/health", None, {"200"}),
    ("get", "/ready", None, {"200"}),  # 503 {"ready": false} is checked below
    ("get", "/metrics", None, {"200"}),
    ("get", "/v1/workflow", "status", {"200"}),
    ("post", "/v1/runs", "start", {"201", "200"}),
    ("get", "/v1/runs", "status", {"200"}),
    ("get", "/v1/runs/{run}", "status", {"200"}),
    ("get", "/v1/runs/{run}/inspect", "inspect", {"200"}),
    ("get", "/v1/runs/{run}/steps/{step}/attempts", "inspect", {"200"}),
    ("post", "/v1/runs/{run}/cancel", "cancel", {"200"}),
    ("post", "/v1/runs/{run}/retry-same", "retry-same", {"200"}),
    ("post", "/v1/runs/{run}/reconcile", "reconcile", {"200"}),
    ("get", "/v1/doctor", "doctor", {"200"}),
    ("post", "/v1/restore-hold", "restore-hold", {"200"}),
    ("post", "/v1/release-restore-hold", "release-restore-hold", {"200"}),
    ("post", "/v1/release-admission-hold", "release-admission-hold", {"200"}),
    ("post", "/v1/retention", "retain", {"200"}),
    ("post", "/v1/events/{workflow}/{trigger}", None, {"201", "200"}),
    ("post", "/v1/review-completions", None, {"204"}),
]
OPERATOR_ONLY = {
    "doctor",
    "restore-hold",
    "release-restore-hold",
    "release-admission-hold",
    "retain",
}


@pytest.fixture(scope="module")
def texts() -> tuple[str, str]:
    result: tuple[str, str] = bundle(ROOT / "spec")
    return result


@pytest.fixture(scope="module")
def bundled(texts: tuple[str, str]) -> dict[str, Any]:
    document = yaml.safe_load(texts[0])
    assert isinstance(document, dict)
    return document


def test_committed_documents_are_what_the_bundle_step_writes(texts: tuple[str, str]) -> None:
    assert (GENERATED / "openapi.bundled.yaml").read_text(encoding="utf-8") == texts[0]
    assert (GENERATED / "openapi.connexion.yaml").read_text(encoding="utf-8") == texts[1]


def test_the_bundle_step_is_deterministic(texts: tuple[str, str]) -> None:
    assert bundle(ROOT / "spec") == texts


@pytest.mark.parametrize(
    "path",
    [
        ROOT / "spec" / "openapi.yaml",
        GENERATED / "openapi.bundled.yaml",
        GENERATED / "openapi.connexion.yaml",
    ],
)
def test_documents_pass_the_openapi_validator(path: Path) -> None:
    document, url = read_from_filename(str(path))
    validate(document, base_uri=url)


def test_the_schema_file_is_2020_12_with_defs_only() -> None:
    validator: Any = importlib.import_module("jsonschema").Draft202012Validator
    schema = json.loads((ROOT / "spec" / "schemas" / "api.schema.json").read_text(encoding="utf-8"))
    validator.check_schema(schema)
    assert set(schema) == {"$schema", "$id", "title", "description", "$defs"}


def test_every_endpoint_of_the_contract_is_documented(bundled: dict[str, Any]) -> None:
    documented = {
        (method, path)
        for path, item in bundled["paths"].items()
        for method in item
        if method in ("get", "post", "put", "patch", "delete")
    }
    assert documented == {(method, path) for method, path, _, _ in ENDPOINTS}
    for method, path, action, statuses in ENDPOINTS:
        operation = bundled["paths"][path][method]
        assert operation.get("x-policy-action") == action, path
        assert operation.get("x-operator-only", False) == (action in OPERATOR_ONLY), path
        successes = {status for status in operation["responses"] if status < "400"}
        assert successes == statuses, path
        security = operation.get("security", bundled["security"])
        assert (security == [{"bearerAuth": []}]) == (action is not None), path


def test_not_ready_is_a_readiness_body_not_a_problem(bundled: dict[str, Any]) -> None:
    not_ready = bundled["paths"]["/ready"]["get"]["responses"]["503"]["content"]
    assert not_ready == {"application/json": {"schema": {"$ref": "#/components/schemas/Readiness"}}}


def test_every_operation_id_is_public_and_has_exactly_one_handler(bundled: dict[str, Any]) -> None:
    from coordinator_api.handlers import OPERATIONS, handler_of

    operation_ids = [
        operation["operationId"]
        for item in bundled["paths"].values()
        for operation in item.values()
        if isinstance(operation, dict) and "operationId" in operation
    ]
    assert len(operation_ids) == len(set(operation_ids))
    # Public names as generated clients spell them: lowerCamelCase, no module prefix.
    assert all(re.fullmatch(r"[a-z]+(?:[A-Z][a-z]+)*", name) for name in operation_ids)
    assert set(operation_ids) == set(OPERATIONS)
    handlers = [handler_of(name) for name in operation_ids]
    assert all(callable(handler) for handler in handlers)
    assert len({id(handler) for handler in handlers}) == len(handlers)
    with pytest.raises(ValueError, match="has no handler"):
        handler_of("runs.start_run")


def test_links_name_operations_of_the_document(bundled: dict[str, Any]) -> None:
    operation_ids = {
        operation["operationId"]
        for item in bundled["paths"].values()
        for operation in item.values()
        if isinstance(operation, dict) and "operationId" in operation
    }
    links = bundled["components"]["links"]
    assert links and all(link["operationId"] in operation_ids for link in links.values())


def test_problem_responses_use_problem_json(bundled: dict[str, Any]) -> None:
    responses = bundled["components"]["responses"]
    for item in bundled["paths"].values():
        for operation in item.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            for status, declared in operation["responses"].items():
                response = declared
                if "$ref" in declared:
                    response = responses[declared["$ref"].rsplit("/", 1)[1]]
                if status >= "400" and not (status == "503" and "Readiness" in str(response)):
                    assert list(response["content"]) == ["application/problem+json"]


def test_every_hoisted_schema_is_sorted_and_referenced_locally(bundled: dict[str, Any]) -> None:
    names = list(bundled["components"]["schemas"])
    assert names == sorted(names)
    assert "./schemas" not in json.dumps(bundled)


# ---------------------------------------------------------------------------------------------
# The down-conversion rules, on small documents


def _spec(tmp_path: Path, schemas: dict[str, Any], inline: dict[str, Any] | None = None) -> Path:
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "x.schema.json").write_text(
        json.dumps({"$schema": "https://json-schema.org/draft/2020-12/schema", "$defs": schemas})
    )
    document = {
        "openapi": "3.1.0",
        "info": {
            "title": "t",
            "version": "1",
            "summary": "s",
            "license": {"name": "MIT", "identifier": "MIT"},
        },
        "paths": {
            "/a": {
                "get": {
                    "operationId": "a.b",
                    "responses": {
                        "200": {
                            "description": "ok",
                            "content": {
                                "application/json": {
                                    "schema": {"$ref": "./schemas/x.schema.json#/$defs/A"}
                                }
                            },
                        }
                    },
                }
            }
        },
        "components": {"schemas": inline or {}},
    }
    (tmp_path / "openapi.yaml").write_text(yaml.safe_dump(document))
    return tmp_path


def _converted(tmp_path: Path, schemas: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    bundled_text, connexion_text = bundle(_spec(tmp_path, schemas))
    return yaml.safe_load(bundled_text), yaml.safe_load(connexion_text)


def test_keywords_are_down_converted(tmp_path: Path) -> None:
    schemas = {
        "A": {
            "$comment": "dropped",
            "type": "object",
            "properties": {
                "n": {"type": ["integer", "null"], "exclusiveMinimum": 0},
                "c": {"const": "x", "examples": ["x", "y"]},
                "r": {"anyOf": [{"$ref": "#/$defs/B"}, {"type": "null"}]},
                "any": True,
            },
        },
        "B": {"type": "string", "exclusiveMaximum": 9.5},
    }
    bundled, connexion = _converted(tmp_path, schemas)
    assert bundled["components"]["schemas"]["A"]["properties"]["r"]["anyOf"][0] == {
        "$ref": "#/components/schemas/B"
    }
    a = connexion["components"]["schemas"]["A"]
    assert "$comment" not in a
    assert a["properties"]["n"] == {
        "type": "integer",
        "nullable": True,
        "minimum": 0,
        "exclusiveMinimum": True,
    }
    assert a["properties"]["c"] == {"enum": ["x"], "example": "x"}
    assert a["properties"]["r"]["anyOf"][1] == {"nullable": True, "enum": [None]}
    assert a["properties"]["any"] == {}
    assert connexion["components"]["schemas"]["B"] == {
        "type": "string",
        "maximum": 9.5,
        "exclusiveMaximum": True,
    }
    assert connexion["openapi"] == "3.0.3" and "summary" not in connexion["info"]
    assert "identifier" not in connexion["info"]["license"]


@pytest.mark.parametrize(
    ("schemas", "message"),
    [
        ({"A": {"type": "array", "prefixItems": [{"type": "string"}]}}, "prefixItems"),
        ({"A": {"if": {"type": "string"}, "then": {"minLength": 1}}}, "`if`"),
        ({"A": {"type": ["string", "integer"]}}, "several non-null types"),
        ({"A": {"type": "string", "nullable": True}}, "nullable"),
        ({"A": {"$ref": "#/$defs/Missing"}}, "dangling"),
        ({"A": {"$defs": {"B": {}}}}, "nested"),
        ({"A": {"$ref": "#/$defs/B", "minLength": 1}, "B": {"type": "string"}}, "sibling"),
    ],
)
def test_constructs_without_a_faithful_rendering_are_errors(
    tmp_path: Path, schemas: dict[str, Any], message: str
) -> None:
    with pytest.raises(BundleError, match=message):
        bundle(_spec(tmp_path, schemas))


def test_a_name_defined_twice_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="collides"):
        bundle(_spec(tmp_path, {"A": {"type": "string"}}, inline={"A": {"type": "string"}}))


def test_unquoted_status_codes_are_refused(tmp_path: Path) -> None:
    spec = _spec(tmp_path, {"A": {"type": "string"}})
    text = (spec / "openapi.yaml").read_text().replace("'200':", "200:")
    (spec / "openapi.yaml").write_text(text)
    with pytest.raises(BundleError, match="not a string"):
        bundle(spec)
