"""Render docs/reference/api.md (every route, body and problem code) from the bundled OpenAPI 3.1.

`render_markdown(document, codes)` is pure: it reads the bundled document (a dict) and the codes
of the error catalogue (spec/errors.yaml) and returns the page. A problem code named in a response
description that the catalogue does not define is an error, so the page cannot name a code the
service does not have. scripts/generate.py writes the page; `nox -s generate_check` compares it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from http import HTTPStatus
from typing import Any

__all__ = ["ApiDocError", "problem_codes", "render_markdown"]

_METHODS = ("get", "put", "post", "delete", "patch")
_CODE = re.compile(
    r"`((?:coordinator\.[a-z][a-z0-9-]*\.[a-z][a-z0-9-]*)|(?:idempotency|admission)\.[a-z][a-z0-9-]*)`"
)
_SCHEMA_PREFIX = "#/components/schemas/"
_COMPONENT_PREFIX = "#/components/"


class ApiDocError(ValueError):
    """The document names something the page cannot render honestly."""


def _anchor(name: str) -> str:
    return "schema-" + name.lower()


def _one_line(text: str | None) -> str:
    return " ".join((text or "").split()).replace("|", "\\|")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _resolve(document: Mapping[str, Any], node: Mapping[str, Any]) -> Mapping[str, Any]:
    """A `#/components/…` reference (responses, parameters, request bodies, headers) resolved."""
    reference = node.get("$ref")
    if not isinstance(reference, str):
        return node
    if not reference.startswith(_COMPONENT_PREFIX):
        raise ApiDocError(f"reference outside the document: {reference}")
    target: Any = document
    for part in reference.removeprefix("#/").split("/"):
        target = target[part]
    return _resolve(document, target)


def _schema_text(schema: Any) -> str:
    """A one-line summary of a schema: a link to a named schema, or its type and bounds."""
    if not isinstance(schema, Mapping) or not schema:
        return "any JSON value"
    reference = schema.get("$ref")
    if isinstance(reference, str) and reference.startswith(_SCHEMA_PREFIX):
        name = reference.removeprefix(_SCHEMA_PREFIX)
        return f"[{name}](#{_anchor(name)})"
    for keyword, joiner in (("oneOf", " or "), ("anyOf", " or ")):
        if keyword in schema:
            return joiner.join(_schema_text(option) for option in schema[keyword])
    if "const" in schema:
        return f"`{_json(schema['const'])}`"
    if "enum" in schema:
        return "one of " + ", ".join(f"`{_json(value)}`" for value in schema["enum"])
    kind = schema.get("type", "any")
    kinds = kind if isinstance(kind, list) else [kind]
    parts: list[str] = []
    for one in kinds:
        if one == "array":
            parts.append(f"array of {_schema_text(schema.get('items'))}")
        elif one == "object" and "additionalProperties" in schema and not schema.get("properties"):
            extra = schema["additionalProperties"]
            parts.append(
                "object" if extra is False or extra is True else f"map of {_schema_text(extra)}"
            )
        else:
            parts.append(str(one))
    text = " or ".join(parts)
    bounds = [
        f"{label} {schema[key]}"
        for key, label in (
            ("format", "format"),
            ("minimum", "≥"),
            ("maximum", "≤"),
            ("minLength", "length ≥"),
            ("maxLength", "length ≤"),
            ("minItems", "items ≥"),
            ("maxItems", "items ≤"),
        )
        if key in schema
    ]
    if "pattern" in schema:
        bounds.append(f"pattern `{schema['pattern']}`")
    return text + (f" ({', '.join(bounds)})" if bounds else "")


def _json(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False)


def problem_codes(text: str | None) -> list[str]:
    """The problem codes a description names, in order, each once."""
    found: list[str] = []
    for code in _CODE.findall(text or ""):
        if code not in found:
            found.append(code)
    return found


def _security(document: Mapping[str, Any], operation: Mapping[str, Any]) -> str:
    requirements = operation.get("security", document.get("security", []))
    schemes = [name for requirement in requirements for name in requirement]
    if not schemes:
        headers = {parameter.get("name") for parameter in operation.get("parameters", [])}
        if "X-Registry-Signature" in headers:
            return "the v1 delivery signature in `X-Registry-Signature` (no bearer token)"
        return "none"
    if "completionBearer" in schemes:
        return "a Casework connection's `reviewCompletions` secret as bearer token"
    action = operation.get("x-policy-action")
    text = f"bearer access token whose policy allows `{action}`"
    if operation.get("x-operator-only") is True:
        text += " (operator policies only)"
    return text


def _operations(document: Mapping[str, Any]) -> Iterable[tuple[str, str, Mapping[str, Any]]]:
    for path, item in document["paths"].items():
        for method in _METHODS:
            if method in item:
                yield path, method, item


def _body_schema(content: Mapping[str, Any] | None) -> tuple[str, str] | None:
    if not content:
        return None
    media, entry = next(iter(content.items()))
    return media, _schema_text(entry.get("schema"))


def render_markdown(document: Mapping[str, Any], catalogue_codes: Iterable[str]) -> str:
    known = set(catalogue_codes)
    lines = [
        "# Service API reference",
        "",
        "<!-- Generated from spec/openapi.yaml by `nox -s generate` (scripts/generate_api_doc.py)."
        " Do not edit. -->",
        "",
        f"{document['info']['title']}, version `{document['info']['version']}`, OpenAPI "
        f"{document['openapi']}. The running service answers this document at `GET /openapi.json`"
        " and an API explorer for it at `GET /docs`; `coordinatorctl openapi` prints the copy the"
        " build ships. Every refusal is `application/problem+json` with a stable `code`"
        " ([error codes](error-codes.md)).",
        "",
        "| Operation | Method and path | Authentication |",
        "|---|---|---|",
    ]
    sections: list[str] = []
    for path, method, item in _operations(document):
        operation = item[method]
        operation_id = operation["operationId"]
        lines.append(
            f"| [`{operation_id}`](#{operation_id.lower()}) | `{method.upper()} {path}` | "
            f"{_security(document, operation)} |"
        )
        sections.extend(_operation_section(document, path, method, item, operation, known))
    lines.extend(["", "## Operations", "", *sections, "## Schemas", ""])
    for name, schema in document["components"]["schemas"].items():
        lines.extend(_schema_section(name, schema))
    return "\n".join(lines).rstrip("\n") + "\n"


def _operation_section(
    document: Mapping[str, Any],
    path: str,
    method: str,
    item: Mapping[str, Any],
    operation: Mapping[str, Any],
    known: set[str],
) -> list[str]:
    operation_id = operation["operationId"]
    out = [
        f"### {operation_id}",
        "",
        f"`{method.upper()} {path}`: {operation.get('summary', '')}.",
        "",
    ]
    if operation.get("description"):
        out.extend([operation["description"].rstrip(), ""])
    out.extend([f"Authentication: {_security(document, operation)}.", ""])
    parameters = [
        _resolve(document, parameter)
        for parameter in [*item.get("parameters", []), *operation.get("parameters", [])]
    ]
    if parameters:
        out.extend(
            ["| Parameter | In | Required | Schema | Description |", "|---|---|---|---|---|"]
        )
        for parameter in parameters:
            out.append(
                f"| `{parameter['name']}` | {parameter['in']} | "
                f"{'yes' if parameter.get('required') else 'no'} | "
                f"{_cell(_schema_text(parameter.get('schema')))} | "
                f"{_one_line(parameter.get('description'))} |"
            )
        out.append("")
    if "requestBody" in operation:
        body = _resolve(document, operation["requestBody"])
        media_schema = _body_schema(body.get("content"))
        if media_schema is not None:
            media, schema = media_schema
            out.extend([f"Request body (`{media}`, required): {schema}.", ""])
    out.extend(["| Status | Meaning | Body | Problem codes |", "|---|---|---|---|"])
    for status, response in operation["responses"].items():
        resolved = _resolve(document, response)
        description = resolved.get("description", "")
        codes = problem_codes(description)
        unknown = [code for code in codes if code not in known]
        if unknown:
            raise ApiDocError(
                f"{method.upper()} {path} {status}: {', '.join(unknown)} not in spec/errors.yaml"
            )
        media_schema = _body_schema(resolved.get("content"))
        body_text = "none" if media_schema is None else f"`{media_schema[0]}` {media_schema[1]}"
        meaning = HTTPStatus(int(status)).phrase if codes else _one_line(description)
        code_text = ", ".join(f"`{code}`" for code in codes)
        out.append(f"| {status} | {meaning} | {_cell(body_text)} | {code_text} |")
    out.append("")
    return out


def _schema_section(name: str, schema: Mapping[str, Any]) -> list[str]:
    out = [f'<a id="{_anchor(name)}"></a>', "", f"### {name}", ""]
    if schema.get("description"):
        out.extend([_one_line(schema["description"]).replace("\\|", "|"), ""])
    properties = schema.get("properties")
    if isinstance(properties, Mapping) and properties:
        required = set(schema.get("required", []))
        out.extend(["| Member | Required | Schema | Description |", "|---|---|---|---|"])
        for member, subschema in properties.items():
            description = subschema.get("description") if isinstance(subschema, Mapping) else None
            out.append(
                f"| `{member}` | {'yes' if member in required else 'no'} | "
                f"{_cell(_schema_text(subschema))} | {_one_line(description)} |"
            )
        if schema.get("additionalProperties") is False:
            out.extend(["", "No other members."])
        out.append("")
    else:
        out.extend([_schema_text(schema) + ".", ""])
    return out
