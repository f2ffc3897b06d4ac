"""Envelope check and schema-driven decoding of the three authored YAML kinds.

The JSON Schemas in spec/schemas are both the editors' schemas and the decoder's rules (see
spec/README.md for the keyword subset). A member that fails to decode is left out of the decoded
tree and its pointer is remembered in `failed`, so that later rules treat it as absent without
reporting a consequence of the error (contract 02 §4.2).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib.resources import files
from typing import Any, Final

from coordinator_core import limits
from coordinator_core.authoring.yamlreader import (
    INVALID,
    NO_POSITIONS,
    SourceMap,
    YamlDocument,
    escape_pointer_token,
    read_yaml,
)
from coordinator_core.errors import Diagnostic

__all__ = [
    "AuthoredFile",
    "decode_body",
    "decode_json",
    "load_schema",
    "read_authored_file",
]

KNOWN_KINDS: Final = (limits.KIND_PROJECT, limits.KIND_RUNTIME, limits.KIND_SCENARIOS)

_EXPECTED_CODE: Final = {
    "string": "config.expected-string",
    "integer": "config.expected-integer",
    "number": "config.expected-number",
    "boolean": "config.expected-boolean",
}


@dataclass(frozen=True)
class AuthoredFile:
    """One authored YAML file after the reader, the envelope check and decoding."""

    file: str
    document: YamlDocument | None
    decoded: dict[str, Any] | None
    failed: frozenset[str]
    diagnostics: list[Diagnostic] = field(default_factory=list)
    kind: str | None = None

    def has_findings_under(self, pointer: str) -> bool:
        """Whether any diagnostic of this file concerns `pointer` or a member inside it."""
        prefix = pointer + "/"
        return any(
            d.path == pointer or d.path.startswith(prefix)
            for d in self.diagnostics
            if d.effective_severity == "error"
        )

    def position(self, pointer: str) -> tuple[int | None, int | None]:
        """Line and column of the value at `pointer` (or its nearest existing ancestor)."""
        if self.document is None:
            return None, None
        mark = self.document.mark_of(pointer)
        if mark is None:
            return None, None
        return mark.line, mark.column

    def key_position(self, pointer: str) -> tuple[int | None, int | None]:
        """Line and column of the key of the member at `pointer`, else of its value."""
        if self.document is not None:
            mark = self.document.key_positions.get(pointer)
            if mark is not None:
                return mark.line, mark.column
        return self.position(pointer)


@cache
def load_schema(name: str) -> Mapping[str, Any]:
    """The published JSON Schema `name` (project, runtime, scenarios, ctl-report)."""
    text = files("coordinator_models").joinpath("schemas", f"{name}.schema.json").read_text("utf-8")
    schema: Mapping[str, Any] = json.loads(text)
    return schema


def read_authored_file(
    data: bytes,
    *,
    file: str,
    expected_kind: str | None,
    schema: Mapping[str, Any] | None = None,
) -> AuthoredFile:
    """Read, check the envelope of, and decode one authored file.

    `expected_kind` is the kind the file is read as (by its name), or None for a YAML file of the
    project directory that is read as none of the three kinds (rule P6): its envelope is checked
    and its body is not decoded. `schema` defaults to the published schema of `expected_kind`.
    """
    artifact = expected_kind
    document, diagnostics = read_yaml(data, file=file, artifact=artifact)
    if document is None:
        return AuthoredFile(file, None, None, frozenset(), diagnostics)
    kind = _check_envelope(document, file, expected_kind, diagnostics)
    if kind is None or expected_kind is None or kind != expected_kind:
        return AuthoredFile(file, document, None, frozenset(), diagnostics, kind)
    if schema is None:
        schema = load_schema(_SCHEMA_OF_KIND[expected_kind])
    decoded, failed = decode_body(document, schema, file=file, artifact=artifact, out=diagnostics)
    return AuthoredFile(file, document, decoded, failed, diagnostics, kind)


_SCHEMA_OF_KIND: Final = {
    limits.KIND_PROJECT: "project",
    limits.KIND_RUNTIME: "runtime",
    limits.KIND_SCENARIOS: "scenarios",
}


def _check_envelope(
    document: YamlDocument, file: str, expected_kind: str | None, out: list[Diagnostic]
) -> str | None:
    """The envelope rules of contract 01 §2; returns the kind when the body may be decoded."""
    root = document.value
    artifact = expected_kind

    def at(code: str, pointer: str, *, key: bool = False) -> None:
        mark = document.key_positions.get(pointer) if key else None
        mark = mark or document.mark_of(pointer)
        out.append(
            Diagnostic(
                code,
                path=pointer,
                file=file,
                line=mark.line if mark else None,
                column=mark.column if mark else None,
                artifact=artifact,
            )
        )

    if root is INVALID:
        return None
    if not isinstance(root, dict):
        at("config.invalid-type", "")
        return None
    if "apiVersion" not in root or "kind" not in root:
        at("config.missing-envelope", "")
        return None
    kind, api_version = root["kind"], root["apiVersion"]
    if kind is INVALID or api_version is INVALID:
        return None
    if not isinstance(kind, str) or kind not in KNOWN_KINDS:
        at("config.wrong-kind", "/kind")
        return None
    if kind != expected_kind:
        at("coordinator.project.misplaced-kind", "/kind")
        return None
    if api_version != limits.API_VERSION_OF_KIND[kind]:
        at("config.unsupported-api-version", "/apiVersion")
        return None
    return kind


class _Failed:
    """Marker returned for a member that failed to decode."""


_FAILED: Final = _Failed()


def decode_body(
    document: YamlDocument,
    schema: Mapping[str, Any],
    *,
    file: str,
    artifact: str | None,
    out: list[Diagnostic],
) -> tuple[dict[str, Any] | None, frozenset[str]]:
    """Decode the document root against `schema`; failed members are left out."""
    return _decode_root(document.value, document.source_map, schema, file, artifact, out)


def decode_json(
    value: object,
    schema: Mapping[str, Any],
    *,
    file: str,
    artifact: str | None,
    out: list[Diagnostic],
) -> tuple[dict[str, Any] | None, frozenset[str]]:
    """Decode a JSON tree that was never YAML text (a snapshot's workflow) against `schema`,
    by the same rules; its diagnostics carry no line or column."""
    return _decode_root(value, NO_POSITIONS, schema, file, artifact, out)


def _decode_root(
    value: object,
    source_map: SourceMap,
    schema: Mapping[str, Any],
    file: str,
    artifact: str | None,
    out: list[Diagnostic],
) -> tuple[dict[str, Any] | None, frozenset[str]]:
    decoder = _Decoder(source_map, schema, file, artifact, out)
    decoded = decoder.decode(value, schema, "")
    if isinstance(decoded, _Failed) or not isinstance(decoded, dict):
        return None, frozenset(decoder.failed)
    return decoded, frozenset(decoder.failed)


class _Decoder:
    def __init__(
        self,
        source_map: SourceMap,
        root_schema: Mapping[str, Any],
        file: str,
        artifact: str | None,
        out: list[Diagnostic],
    ) -> None:
        self.source_map = source_map
        self.root = root_schema
        self.file = file
        self.artifact = artifact
        self.out = out
        self.failed: set[str] = set()
        self.substitution_allowed = bool(root_schema.get("x-substitution", False))

    # -- reporting -------------------------------------------------------------------------

    def report(
        self,
        code: str,
        pointer: str,
        *,
        key: bool = False,
        container: str | None = None,
        message: str | None = None,
    ) -> None:
        if container is not None:
            mark = self.source_map.mark_of(container)
        elif key:
            mark = self.source_map.key_positions.get(pointer) or self.source_map.mark_of(pointer)
        else:
            mark = self.source_map.mark_of(pointer)
        self.out.append(
            Diagnostic(
                code,
                path=pointer,
                file=self.file,
                line=mark.line if mark else None,
                column=mark.column if mark else None,
                artifact=self.artifact,
                message=message,
            )
        )

    def fail(self, pointer: str) -> _Failed:
        self.failed.add(pointer)
        return _FAILED

    # -- schema helpers --------------------------------------------------------------------

    def resolve(self, schema: Mapping[str, Any]) -> Mapping[str, Any]:
        while "$ref" in schema:
            reference = schema["$ref"]
            target: Any = self.root
            for token in reference.removeprefix("#/").split("/"):
                target = target[token]
            merged = dict(target)
            merged.update({k: v for k, v in schema.items() if k != "$ref"})
            schema = merged
        return schema

    # -- decoding --------------------------------------------------------------------------

    def decode(self, node: Any, schema: Mapping[str, Any], pointer: str) -> Any:
        schema = self.resolve(schema)
        if node is INVALID:
            return self.fail(pointer)
        if schema.get("x-foreign"):
            if _contains_invalid(node):
                return self.fail(pointer)
            return node
        if node is None:
            self.report("config.null-value", pointer)
            return self.fail(pointer)
        if "x-discriminator" in schema:
            return self.decode_union(node, schema, pointer)
        expected = schema.get("type")
        if expected == "object":
            return self.decode_object(node, schema, pointer)
        if expected == "array":
            return self.decode_array(node, schema, pointer)
        if expected in _EXPECTED_CODE:
            return self.decode_scalar(node, schema, pointer, expected)
        return node

    def type_mismatch(self, node: Any, expected: str, pointer: str) -> _Failed:
        if expected in _EXPECTED_CODE and not isinstance(node, dict | list):
            self.report(_EXPECTED_CODE[expected], pointer)
        else:
            self.report("config.invalid-type", pointer)
        return self.fail(pointer)

    def decode_union(self, node: Any, schema: Mapping[str, Any], pointer: str) -> Any:
        if not isinstance(node, dict):
            return self.type_mismatch(node, "object", pointer)
        tag_name: str = schema["x-discriminator"]
        tag_pointer = f"{pointer}/{escape_pointer_token(tag_name)}"
        if tag_name not in node:
            self.report("config.missing-key", tag_pointer, container=pointer)
            return self.fail(pointer)
        tag = node[tag_name]
        if tag is INVALID:
            return self.fail(pointer)
        if tag is None:
            self.report("config.null-value", tag_pointer)
            return self.fail(pointer)
        if not isinstance(tag, str):
            self.report(
                "config.expected-string"
                if not isinstance(tag, dict | list)
                else "config.invalid-type",
                tag_pointer,
            )
            return self.fail(pointer)
        for candidate in schema["oneOf"]:
            branch = self.resolve(candidate)
            if branch["properties"][tag_name].get("const") == tag:
                return self.decode_object(node, branch, pointer)
        self.report("config.unknown-variant", tag_pointer)
        return self.fail(pointer)

    def decode_object(self, node: Any, schema: Mapping[str, Any], pointer: str) -> Any:
        if not isinstance(node, dict):
            return self.type_mismatch(node, "object", pointer)
        properties: Mapping[str, Any] = schema.get("properties", {})
        additional = schema.get("additionalProperties", True)
        names = self.resolve(schema["propertyNames"]) if "propertyNames" in schema else None
        result: dict[str, Any] = {}
        for key, child in node.items():
            child_pointer = f"{pointer}/{escape_pointer_token(key)}"
            if child is INVALID:
                # The reader refused this member (a merge key, a non-string key, a tag, …).
                self.fail(child_pointer)
                continue
            if key in properties:
                member_schema = self.resolve(properties[key])
                if "x-removed" in member_schema:
                    self.report(
                        "config.removed-key",
                        child_pointer,
                        key=True,
                        message=member_schema["x-removed"],
                    )
                    self.fail(child_pointer)
                    continue
                if "const" in member_schema and pointer == "" and key in ("apiVersion", "kind"):
                    result[key] = child  # the envelope was checked before decoding
                    continue
                value = self.decode(child, member_schema, child_pointer)
            elif isinstance(additional, Mapping):
                if names is not None and not _name_ok(key, names):
                    self.report("config.invalid-value", child_pointer, key=True)
                    self.fail(child_pointer)
                    continue
                value = self.decode(child, additional, child_pointer)
            elif additional is False:
                self.report("config.unknown-key", child_pointer, key=True)
                self.fail(child_pointer)
                continue
            else:
                value = child
            if not isinstance(value, _Failed):
                result[key] = value
        for required in schema.get("required", ()):
            if required not in node:
                self.report(
                    "config.missing-key",
                    f"{pointer}/{escape_pointer_token(required)}",
                    container=pointer,
                )
        count = len(node)
        if count < schema.get("minProperties", 0) or count > schema.get("maxProperties", count):
            self.report("config.invalid-length", pointer)
            return self.fail(pointer)
        return result

    def decode_array(self, node: Any, schema: Mapping[str, Any], pointer: str) -> Any:
        if not isinstance(node, list):
            return self.type_mismatch(node, "array", pointer)
        owned = bool(schema.get("x-rule-owned"))
        if not owned and (
            len(node) < schema.get("minItems", 0) or len(node) > schema.get("maxItems", len(node))
        ):
            self.report("config.invalid-length", pointer)
            return self.fail(pointer)
        items = schema.get("items")
        result: list[Any] = []
        any_failed = False
        for index, child in enumerate(node):
            child_pointer = f"{pointer}/{index}"
            value = self.decode(child, items, child_pointer) if items is not None else child
            if isinstance(value, _Failed):
                any_failed = True
                continue
            result.append(value)
        if schema.get("uniqueItems") and not owned:
            seen: list[Any] = []
            for index, child in enumerate(node):
                if child in seen:
                    self.report("config.duplicate-item", f"{pointer}/{index}")
                    any_failed = True
                seen.append(child)
        unique_id = schema.get("x-unique-id")
        if unique_id is not None:
            seen_ids: set[str] = set()
            for index, child in enumerate(node):
                if isinstance(child, dict) and isinstance(child.get(unique_id), str):
                    if child[unique_id] in seen_ids:
                        self.report(
                            "config.duplicate-id",
                            f"{pointer}/{index}/{escape_pointer_token(unique_id)}",
                        )
                        any_failed = True
                    seen_ids.add(child[unique_id])
        if any_failed:
            # Positions inside a list shift when an item is dropped, so a list with a failed
            # item is failed as a whole; its findings were all reported above.
            return self.fail(pointer)
        return result

    def decode_scalar(
        self, node: Any, schema: Mapping[str, Any], pointer: str, expected: str
    ) -> Any:
        if not _is_type(node, expected):
            return self.type_mismatch(node, expected, pointer)
        if schema.get("x-rule-owned"):
            return node
        if isinstance(node, str):
            if not self.substitution_allowed and "${" in node:
                self.report("config.substitution-not-allowed", pointer)
                return self.fail(pointer)
            length = len(node)
            if length < schema.get("minLength", 0) or length > schema.get("maxLength", length):
                self.report("config.invalid-length", pointer)
                return self.fail(pointer)
            if "enum" in schema and node not in schema["enum"]:
                self.report("config.unknown-variant", pointer)
                return self.fail(pointer)
            pattern = schema.get("pattern")
            if pattern is not None and not _matches(pattern, node):
                self.report("config.invalid-value", pointer)
                return self.fail(pointer)
            return node
        if "enum" in schema and node not in schema["enum"]:
            self.report("config.unknown-variant", pointer)
            return self.fail(pointer)
        if isinstance(node, int | float) and not isinstance(node, bool):
            minimum = schema.get("minimum")
            maximum = schema.get("maximum")
            if (minimum is not None and node < minimum) or (maximum is not None and node > maximum):
                self.report("config.out-of-range", pointer)
                return self.fail(pointer)
        return node


def _is_type(node: Any, expected: str) -> bool:
    if expected == "string":
        return isinstance(node, str)
    if expected == "boolean":
        return isinstance(node, bool)
    if expected == "integer":
        return isinstance(node, int) and not isinstance(node, bool)
    if expected == "number":
        return isinstance(node, int | float) and not isinstance(node, bool)
    return True


@cache
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _matches(pattern: str, text: str) -> bool:
    """JSON Schema search semantics, except that an anchored `^…$` pattern must match the whole
    string: Python's `$` also matches before a final line feed, which would let one through."""
    compiled = _compiled(pattern)
    if pattern.startswith("^") and pattern.endswith("$"):
        return compiled.fullmatch(text) is not None
    return compiled.search(text) is not None


def _name_ok(name: str, schema: Mapping[str, Any]) -> bool:
    if "${" in name:
        return False
    if len(name) > schema.get("maxLength", len(name)) or len(name) < schema.get("minLength", 0):
        return False
    pattern = schema.get("pattern")
    return pattern is None or _matches(pattern, name)


def _contains_invalid(node: Any) -> bool:
    stack = [node]
    while stack:
        item = stack.pop()
        if item is INVALID:
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False
