"""Request bodies: media type, size, strict JSON and the 2020-12 schemas of the contract.

Connexion validates bodies with Draft 4 against the 3.0.3 rendering and before the handler runs;
06 §1 item 6 wants media type, size and body checked only after access and run visibility, and
its own codes for some members. So the edge middleware only captures the body (at most 65,536
bytes) and classifies its media type, and handlers call `read_json_body` at the right point.
Bodies are parsed strictly (duplicate members, NaN, lone surrogates refused) and validated
against the schemas of `openapi.bundled.yaml`, the same 2020-12 text clients and tests read;
`read_body` then hands the handler the body as its generated model (`wire`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from jsonschema import (  # type: ignore[import-untyped]
    Draft202012Validator,
    FormatChecker,
    ValidationError,
    validators,
)
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from coordinator_api.problems import ApiProblem
from coordinator_api.wire import BodyModel, BodyRefused, parse_request
from coordinator_core.jsonschema.violations import violations_of
from coordinator_core.values import StrictJsonError, parse_strict_json

__all__ = [
    "BodyCapture",
    "BodySchemas",
    "is_json_media_type",
    "parse_rfc3339",
    "read_body",
    "read_json_body",
]

_DOCUMENT_URI: Final = "urn:registry-coordinator:openapi"
_JSON_MEDIA_TYPE: Final = re.compile(
    r"^application/(?:json|[A-Za-z0-9!#$&^_.-]+\+json)$", re.IGNORECASE
)
_RFC3339: Final = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$"
)


def is_json_media_type(content_type: str | None) -> bool:
    """`application/json` or `application/*+json`, with at most a `charset=utf-8` parameter."""
    if content_type is None:
        return False
    media_type, *parameters = (part.strip() for part in content_type.split(";"))
    if not _JSON_MEDIA_TYPE.match(media_type):
        return False
    for parameter in parameters:
        name, _, value = parameter.partition("=")
        if name.strip().lower() != "charset" or value.strip().strip('"').lower() != "utf-8":
            return False
    return True


def parse_rfc3339(text: str) -> datetime | None:
    """An RFC 3339 date-time with an offset, as an aware datetime; None if malformed."""
    match = _RFC3339.match(text)
    if match is None:
        return None
    normalised = text.upper().replace("Z", "+00:00")
    try:
        moment = datetime.fromisoformat(normalised)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC)


@dataclass(frozen=True, slots=True)
class BodyCapture:
    """What the edge middleware read: at most the limit, and the media type verdict."""

    data: bytes
    too_large: bool
    content_type: str | None

    @property
    def json_media_type(self) -> bool:
        return is_json_media_type(self.content_type)


def ecma_pattern(pattern: str) -> str:
    """`pattern` with ECMA-262 end anchors: an unescaped `$` outside a class becomes `\\Z`.

    JSON Schema patterns are ECMA-262 regexes, where `$` matches only at the end of the input;
    Python's `$` also matches before a final line feed, so `^[^\\u0000-\\u001F]+$` would accept
    `"ref\\n"`.
    """
    out: list[str] = []
    escaped = in_class = False
    for char in pattern:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "[":
            in_class = True
        elif char == "]":
            in_class = False
        elif char == "$" and not in_class:
            out.append("\\Z")
            continue
        out.append(char)
    return "".join(out)


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(ecma_pattern(pattern))


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    if isinstance(instance, str) and not _compiled(pattern).search(instance):
        yield ValidationError(f"does not match the pattern of {schema.get('title', 'the value')}")


_Validator: Any = validators.extend(Draft202012Validator, {"pattern": _pattern})


_COMPONENT: Final = "#/components/schemas/"


def _inlined(node: Any, components: Mapping[str, Any], within: tuple[str, ...]) -> Any:
    """`node` with every `$ref` to a component schema replaced by an `allOf` of that schema
    (the same assertions and annotations in 2020-12), so that a validation looks nothing up;
    a reference back into a schema being inlined stays a reference, made absolute."""
    if isinstance(node, list):
        return [_inlined(item, components, within) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    rest = {key: _inlined(value, components, within) for key, value in node.items()}
    if isinstance(ref, str) and ref.startswith(_COMPONENT):
        name = ref.removeprefix(_COMPONENT)
        if name in within or name not in components:
            rest["$ref"] = _DOCUMENT_URI + ref
        else:
            del rest["$ref"]
            rest["allOf"] = [
                _inlined(components[name], components, (*within, name)),
                *rest.get("allOf", ()),
            ]
    return rest


class BodySchemas:
    """2020-12 validators for the request body schemas of the bundled document, each built
    once with the component schemas it refers to inlined (a `$ref` looked up through the
    registry at each validation cost as much as the validation)."""

    def __init__(self, bundled: Mapping[str, Any]) -> None:
        resource = Resource.from_contents(dict(bundled), default_specification=DRAFT202012)
        self._registry: Registry[Any] = Registry().with_resource(_DOCUMENT_URI, resource)
        self._validators: dict[str, Any] = {}
        self._components: Mapping[str, Any] = bundled.get("components", {}).get("schemas", {})

    def validator(self, name: str) -> Any:
        if name not in self._components:
            raise KeyError(name)
        if name not in self._validators:
            schema = _inlined(self._components[name], self._components, (name,))
            self._validators[name] = _Validator(
                schema, registry=self._registry, format_checker=FormatChecker()
            )
        return self._validators[name]


def _member_of(error: ValidationError) -> str | None:
    """The top-level member an error is about, or None for the object's shape itself."""
    if error.absolute_path:
        first = error.absolute_path[0]
        return first if isinstance(first, str) else None
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = [name for name in error.validator_value if name not in error.instance]
        return missing[0] if len(missing) == 1 else None
    if error.validator in ("$ref", "allOf") and error.context:
        members = {_member_of(sub) for sub in error.context}
        return members.pop() if len(members) == 1 else None
    return None


def read_json_body(
    capture: BodyCapture,
    schemas: BodySchemas,
    schema: str,
    *,
    member_codes: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Steps (4) and (5) of 06 §1 item 6 for a JSON object body.

    415 `content-type-invalid`, 413 `too-large`, then 400: `member_codes[m]` when every schema
    violation concerns member `m` (for example `reason` → `coordinator.command.reason-invalid`),
    else `coordinator.request.invalid`; the problem names where the body fails its schema
    (`violations`: pointers, keywords, member names; never a value).
    """
    if not capture.json_media_type:
        raise ApiProblem("coordinator.request.content-type-invalid")
    if capture.too_large:
        raise ApiProblem("coordinator.request.too-large")
    try:
        value = parse_strict_json(capture.data)
    except StrictJsonError:
        raise ApiProblem("coordinator.request.invalid") from None
    errors = list(schemas.validator(schema).iter_errors(value))
    if not errors:
        assert isinstance(value, dict)
        return value
    codes = member_codes or {}
    violations = violations_of(errors)
    members = {_member_of(error) for error in errors}
    if len(members) == 1:
        member = members.pop()
        if member is not None and member in codes:
            raise ApiProblem(codes[member], violations=violations)
    raise ApiProblem("coordinator.request.invalid", violations=violations)


def read_body(
    capture: BodyCapture,
    schemas: BodySchemas,
    model: type[BodyModel],
    *,
    member_codes: Mapping[str, str] | None = None,
) -> BodyModel:
    """`read_json_body` against the schema named like `model`, then the body as that model;
    a body the model refuses after the schema accepted it answers like a schema refusal."""
    value = read_json_body(capture, schemas, model.__name__, member_codes=member_codes)
    try:
        return parse_request(model, value)
    except BodyRefused as refused:
        codes = member_codes or {}
        if refused.member is not None and refused.member in codes:
            raise ApiProblem(codes[refused.member]) from None
        raise ApiProblem("coordinator.request.invalid") from None
