"""Bundle spec/openapi.yaml (OpenAPI 3.1 + external JSON Schema files) into two documents.

`bundle(spec_dir)` returns the text of:

* `generated/openapi.bundled.yaml`: OpenAPI 3.1, self-contained. Every `$defs` entry of every
  schema file the document references is hoisted into `components/schemas` (sorted by name; a
  name defined twice is an error) and every reference is rewritten to point there. schemathesis,
  openapi-core and the documentation read this file.
* `generated/openapi.connexion.yaml`: the same document down-converted to OpenAPI 3.0.3, because
  Connexion 3.3 refuses 3.1 (spec-first/connexion#1396). Schemas are rewritten keyword by keyword
  (`type: [X, "null"]` → `type: X` + `nullable: true`, `const` → `enum`, `examples` → `example`,
  numeric `exclusiveMinimum`/`exclusiveMaximum` → `minimum`/`maximum` + `true`, `$schema`, `$id`,
  `$comment` dropped). A keyword with no 3.0 rendering (`prefixItems`, `if`, `dependentRequired`,
  `unevaluatedProperties`, …) is an error rather than a silently weaker contract.

The function is pure: it reads the files under `spec_dir` and returns text. Output is
deterministic (source key order, sorted components/schemas, no YAML anchors, LF line ends), so
`nox -s generate_check` can compare it byte for byte with the committed files.

    python scripts/bundle_openapi.py            # write both files into generated/
    python scripts/bundle_openapi.py --check    # exit 1 when they differ from what spec/ gives
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

__all__ = ["BUNDLED_NAME", "CONNEXION_NAME", "BundleError", "bundle"]

BUNDLED_NAME = "openapi.bundled.yaml"
CONNEXION_NAME = "openapi.connexion.yaml"

_HEADER = (
    "# Generated from spec/openapi.yaml and spec/schemas/ by scripts/bundle_openapi.py"
    " ({what}).\n# Do not edit: change spec/ and run `nox -s generate`.\n"
)
_COMPONENT_PREFIX = "#/components/schemas/"
_DEFS_PREFIX = "#/$defs/"

# JSON Schema keywords that mean the same in OpenAPI 3.0.3 schema objects and are copied as they
# are (values of the ones holding subschemas are converted recursively below).
_SAME_IN_30 = frozenset(
    {
        "title", "description", "default", "enum", "format", "pattern", "multipleOf",
        "minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems", "uniqueItems",
        "minProperties", "maxProperties", "required", "readOnly", "writeOnly", "deprecated",
        "discriminator", "xml", "externalDocs", "example",
    }
)  # fmt: skip
_DROPPED_IN_30 = frozenset({"$schema", "$id", "$comment"})
_REF_SIBLINGS = frozenset({"description", "title", "$comment"})


class BundleError(ValueError):
    """The source cannot be bundled or has no faithful OpenAPI 3.0.3 rendering."""


# ---------------------------------------------------------------------------------------------
# Loading


def _refuse_non_string_keys(node: Any, where: str) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if not isinstance(key, str):
                raise BundleError(f"{where}: mapping key {key!r} is not a string; quote it")
            _refuse_non_string_keys(value, where)
    elif isinstance(node, list):
        for item in node:
            _refuse_non_string_keys(item, where)


def _load_yaml(path: Path) -> dict[str, Any]:
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(document, dict):
        raise BundleError(f"{path.name}: the document is not a mapping")
    _refuse_non_string_keys(document, path.name)
    return document


def _load_json(path: Path) -> dict[str, Any]:
    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        result = dict(pairs)
        if len(result) != len(pairs):
            raise BundleError(f"{path.name}: an object has duplicate member names")
        return result

    document = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=unique)
    if not isinstance(document, dict):
        raise BundleError(f"{path.name}: the schema file is not an object")
    return document


# ---------------------------------------------------------------------------------------------
# Hoisting external $defs into components/schemas


class _Hoister:
    """Loads referenced schema files once and collects their `$defs` under unique names."""

    def __init__(self, spec_dir: Path, taken: set[str]) -> None:
        self.spec_dir = spec_dir.resolve()
        self.taken = taken  # names already defined inline in components/schemas
        self.hoisted: dict[str, Any] = {}
        self.origin: dict[str, str] = {}
        self.documents: dict[Path, dict[str, Any]] = {}

    def _relative(self, path: Path) -> str:
        return path.relative_to(self.spec_dir).as_posix()

    def _target(self, base: Path, reference: str) -> tuple[Path, str]:
        file_part, _, fragment = reference.partition("#")
        if not fragment.startswith("/$defs/") or fragment.count("/") != 2:
            raise BundleError(
                f"{self._relative(base)}: reference {reference!r} must name `<file>#/$defs/<Name>`"
            )
        if PurePosixPath(file_part).is_absolute() or "://" in file_part:
            raise BundleError(f"{self._relative(base)}: reference {reference!r} must be relative")
        path = (base.parent / file_part).resolve()
        if self.spec_dir not in path.parents:
            raise BundleError(f"{self._relative(base)}: reference {reference!r} leaves spec/")
        return path, fragment[len("/$defs/") :]

    def _load(self, path: Path) -> None:
        if path in self.documents:
            return
        if not path.is_file():
            raise BundleError(f"referenced schema file {path.name} does not exist")
        document = _load_json(path)
        self.documents[path] = document
        definitions = document.get("$defs")
        if not isinstance(definitions, dict):
            raise BundleError(f"{self._relative(path)}: has no `$defs` object")
        for name, schema in definitions.items():
            if name in self.taken:
                raise BundleError(
                    f"{self._relative(path)}: `$defs/{name}` collides with "
                    f"components/schemas/{name} of openapi.yaml"
                )
            if name in self.hoisted:
                raise BundleError(
                    f"{self._relative(path)}: `$defs/{name}` is also defined in {self.origin[name]}"
                )
            self.origin[name] = self._relative(path)
            self.hoisted[name] = None  # reserve the name before converting (recursion)
            self.hoisted[name] = self.rewrite(schema, path, in_schema_file=True)

    def rewrite(self, node: Any, base: Path, *, in_schema_file: bool) -> Any:
        """A copy of `node` whose `$ref`s point into components/schemas."""
        if isinstance(node, list):
            return [self.rewrite(item, base, in_schema_file=in_schema_file) for item in node]
        if not isinstance(node, dict):
            return node
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                out[key] = self._reference(value, base, in_schema_file=in_schema_file)
            elif key == "$defs" and in_schema_file:
                raise BundleError(f"{self._relative(base)}: nested `$defs` are not supported")
            else:
                out[key] = self.rewrite(value, base, in_schema_file=in_schema_file)
        return out

    def _reference(self, reference: str, base: Path, *, in_schema_file: bool) -> str:
        if reference.startswith(_DEFS_PREFIX) and in_schema_file:
            name = reference[len(_DEFS_PREFIX) :]
            if name not in self.documents[base].get("$defs", {}):
                raise BundleError(f"{self._relative(base)}: dangling reference {reference!r}")
            return _COMPONENT_PREFIX + name
        if reference.startswith("#"):
            if in_schema_file:
                raise BundleError(
                    f"{self._relative(base)}: only `#/$defs/<Name>` references are supported"
                )
            return reference
        path, name = self._target(base, reference)
        self._load(path)
        if self.origin.get(name) != self._relative(path):
            raise BundleError(f"{self._relative(base)}: dangling reference {reference!r}")
        return _COMPONENT_PREFIX + name


def _bundle_31(spec_dir: Path) -> dict[str, Any]:
    source_path = spec_dir / "openapi.yaml"
    source = _load_yaml(source_path)
    if not str(source.get("openapi", "")).startswith("3.1."):
        raise BundleError("openapi.yaml: `openapi` must be 3.1.x")
    components = source.get("components", {})
    inline = dict(components.get("schemas", {}))
    hoister = _Hoister(spec_dir, set(inline))
    bundled: dict[str, Any] = hoister.rewrite(source, source_path.resolve(), in_schema_file=False)
    merged = {**inline, **hoister.hoisted}
    bundled_components = bundled.setdefault("components", {})
    schemas = {name: merged[name] for name in sorted(merged)}
    if "schemas" in bundled_components:
        bundled_components["schemas"] = schemas
    else:
        bundled["components"] = {"schemas": schemas, **bundled_components}
    _check_internal_refs(bundled)
    return bundled


def _check_internal_refs(document: dict[str, Any]) -> None:
    def resolve(pointer: str) -> None:
        node: Any = document
        for escaped in pointer[2:].split("/"):
            token = escaped.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or token not in node:
                raise BundleError(f"dangling reference {pointer!r}")
            node = node[token]

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            reference = node.get("$ref")
            if isinstance(reference, str):
                if not reference.startswith("#/"):
                    raise BundleError(f"reference {reference!r} was not bundled")
                resolve(reference)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(document)


# ---------------------------------------------------------------------------------------------
# Down-conversion to OpenAPI 3.0.3


def _schema_30(schema: Any, where: str) -> Any:
    """The OpenAPI 3.0.3 schema object equivalent to the 3.1 (2020-12) schema `schema`."""
    if schema is True:
        return {}
    if schema is False:
        return {"not": {}}
    if not isinstance(schema, dict):
        raise BundleError(f"{where}: a schema must be an object or a boolean")
    if "$ref" in schema:
        extra = set(schema) - _REF_SIBLINGS - {"$ref"}
        extra = {key for key in extra if not key.startswith("x-")}
        if extra:
            raise BundleError(f"{where}: `$ref` with sibling keywords {sorted(extra)}")
        return {key: value for key, value in schema.items() if key not in _DROPPED_IN_30}
    out: dict[str, Any] = {}
    for key, value in schema.items():
        here = f"{where}/{key}"
        if key in _DROPPED_IN_30:
            continue
        if key.startswith("x-") or key in _SAME_IN_30:
            out[key] = copy.deepcopy(value)
        elif key == "type":
            _type_30(value, out, here)
        elif key == "const":
            if "enum" in schema:
                raise BundleError(f"{here}: `const` next to `enum`")
            out["enum"] = [copy.deepcopy(value)]
        elif key == "examples":
            if not isinstance(value, list):
                raise BundleError(f"{here}: `examples` must be an array")
            if value and "example" not in schema:
                out["example"] = copy.deepcopy(value[0])
        elif key in ("exclusiveMinimum", "exclusiveMaximum"):
            bound = "minimum" if key == "exclusiveMinimum" else "maximum"
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise BundleError(f"{here}: must be a number in OpenAPI 3.1")
            if bound in schema:
                raise BundleError(f"{here}: `{key}` next to `{bound}`")
            out[bound] = value
            out[key] = True
        elif key == "properties":
            out[key] = {name: _schema_30(sub, f"{here}/{name}") for name, sub in value.items()}
        elif key == "additionalProperties":
            out[key] = value if isinstance(value, bool) else _schema_30(value, here)
        elif key in ("items", "not"):
            if isinstance(value, list):
                raise BundleError(f"{here}: the array form has no 3.0 rendering")
            out[key] = _schema_30(value, here)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [_schema_30(sub, f"{here}/{index}") for index, sub in enumerate(value)]
        elif key == "nullable":
            raise BundleError(f'{here}: `nullable` is not OpenAPI 3.1; use `type: [X, "null"]`')
        else:
            raise BundleError(f"{here}: `{key}` has no OpenAPI 3.0.3 rendering")
    return out


def _type_30(value: Any, out: dict[str, Any], where: str) -> None:
    types = value if isinstance(value, list) else [value]
    if not types or not all(isinstance(item, str) for item in types):
        raise BundleError(f"{where}: `type` must be a string or an array of strings")
    concrete = [item for item in types if item != "null"]
    if len(concrete) > 1:
        raise BundleError(f"{where}: several non-null types have no 3.0 rendering")
    if concrete:
        out["type"] = concrete[0]
    if "null" in types:
        out["nullable"] = True
        if not concrete:
            # 3.0 has no null type: a nullable schema that admits no other value.
            out["enum"] = [None]


def _map_values(
    node: dict[str, Any], key: str, convert: Callable[[Any, str], Any], where: str
) -> None:
    if isinstance(node.get(key), dict):
        node[key] = {
            name: convert(value, f"{where}/{key}/{name}") for name, value in node[key].items()
        }


def _content_30(content: Any, where: str) -> Any:
    if not isinstance(content, dict):
        return content
    out: dict[str, Any] = {}
    for media_type, media in content.items():
        converted = dict(media)
        if "schema" in converted:
            converted["schema"] = _schema_30(converted["schema"], f"{where}/{media_type}/schema")
        out[media_type] = converted
    return out


def _parameter_30(parameter: Any, where: str) -> Any:
    if not isinstance(parameter, dict) or "$ref" in parameter:
        return parameter
    out = dict(parameter)
    if "schema" in out:
        out["schema"] = _schema_30(out["schema"], f"{where}/schema")
    if "content" in out:
        out["content"] = _content_30(out["content"], f"{where}/content")
    return out


def _header_30(header: Any, where: str) -> Any:
    return _parameter_30(header, where)


def _request_body_30(body: Any, where: str) -> Any:
    if not isinstance(body, dict) or "$ref" in body:
        return body
    out = dict(body)
    if "content" in out:
        out["content"] = _content_30(out["content"], f"{where}/content")
    return out


def _response_30(response: Any, where: str) -> Any:
    if not isinstance(response, dict) or "$ref" in response:
        return response
    out = dict(response)
    _map_values(out, "headers", _header_30, where)
    if "content" in out:
        out["content"] = _content_30(out["content"], f"{where}/content")
    return out


_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def _operation_30(operation: dict[str, Any], where: str) -> dict[str, Any]:
    if "callbacks" in operation:
        raise BundleError(f"{where}: callbacks are not supported")
    out = dict(operation)
    if "parameters" in out:
        out["parameters"] = [
            _parameter_30(parameter, f"{where}/parameters/{index}")
            for index, parameter in enumerate(out["parameters"])
        ]
    if "requestBody" in out:
        out["requestBody"] = _request_body_30(out["requestBody"], f"{where}/requestBody")
    _map_values(out, "responses", _response_30, where)
    return out


def _to_30(bundled: dict[str, Any]) -> dict[str, Any]:
    document = copy.deepcopy(bundled)
    for unsupported in ("webhooks",):
        if unsupported in document:
            raise BundleError(f"`{unsupported}` has no OpenAPI 3.0.3 rendering")
    document.pop("jsonSchemaDialect", None)
    document["openapi"] = "3.0.3"
    info = document.get("info", {})
    info.pop("summary", None)
    if isinstance(info.get("license"), dict):
        info["license"].pop("identifier", None)
    paths: dict[str, Any] = document.get("paths", {})
    for path, item in paths.items():
        where = f"paths/{path}"
        if "parameters" in item:
            item["parameters"] = [
                _parameter_30(parameter, f"{where}/parameters/{index}")
                for index, parameter in enumerate(item["parameters"])
            ]
        for method in _METHODS:
            if method in item:
                item[method] = _operation_30(item[method], f"{where}/{method}")
    components: dict[str, Any] = document.get("components", {})
    if "pathItems" in components:
        raise BundleError("components/pathItems has no OpenAPI 3.0.3 rendering")
    _map_values(components, "schemas", _schema_30, "components")
    _map_values(components, "parameters", _parameter_30, "components")
    _map_values(components, "headers", _header_30, "components")
    _map_values(components, "requestBodies", _request_body_30, "components")
    _map_values(components, "responses", _response_30, "components")
    for name, scheme in components.get("securitySchemes", {}).items():
        if scheme.get("type") == "mutualTLS":
            raise BundleError(f"components/securitySchemes/{name}: mutualTLS is not 3.0")
    return document


# ---------------------------------------------------------------------------------------------
# Output


class _Dumper(yaml.SafeDumper):
    """Deterministic block YAML: no anchors, multi-line strings as literal blocks."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _represent_str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    if "\n" in text:
        return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", text)


_Dumper.add_representer(str, _represent_str)


def _dump(document: dict[str, Any], what: str) -> str:
    body = yaml.dump(
        document,
        Dumper=_Dumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=100,
        line_break="\n",
    )
    return _HEADER.format(what=what) + body


def bundle(spec_dir: Path | str) -> tuple[str, str]:
    """The text of (`openapi.bundled.yaml`, `openapi.connexion.yaml`) built from `spec_dir`."""
    bundled = _bundle_31(Path(spec_dir))
    connexion = _to_30(bundled)
    return (
        _dump(bundled, "OpenAPI 3.1, self-contained"),
        _dump(connexion, "OpenAPI 3.0.3 rendering for Connexion"),
    )


def main() -> int:
    root = Path(__file__).resolve().parent.parent
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail on drift instead of writing")
    arguments = parser.parse_args()
    texts = dict(zip((BUNDLED_NAME, CONNEXION_NAME), bundle(root / "spec"), strict=True))
    drift = False
    for name, text in texts.items():
        target = root / "generated" / name
        if arguments.check:
            if not target.is_file() or target.read_text(encoding="utf-8") != text:
                print(f"differs: generated/{name}")
                drift = True
        else:
            target.write_text(text, encoding="utf-8", newline="\n")
    return 1 if drift else 0


if __name__ == "__main__":
    sys.exit(main())
