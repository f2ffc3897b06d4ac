"""Request bodies: media type, size, strict JSON, then the body's generated model, once.

Connexion validates bodies with Draft 4 against the 3.0.3 rendering and before the handler runs;
06 §1 item 6 wants media type, size and body checked only after access and run visibility, and
its own codes for some members. So the edge middleware only captures the body (at most 65,536
bytes) and classifies its media type, and handlers call `read_body` at the right point.

A body is parsed strictly (`parse_strict_json`: duplicate members, NaN, lone surrogates, what
pydantic cannot refuse) and validated by its model generated from spec/schemas (`wire`), in
Python mode on the parsed value, by the spec's member names only. The models say the rest of
the 2020-12 schemas: closed objects (`extra="forbid"`), required members, patterns (pydantic's
Rust regexes, whose `$` is the end of the text as in ECMA-262), lengths and bounds, and no
coercion (the generator's strict types: "1" is not 1, 1.0 is not an integer token). One assertion
they cannot hold is checked here beside them, from the formats the model declares: pydantic
parses date-times and UUIDs more leniently than RFC 3339 and RFC 4122 (`2026-03-02 09:00Z`, an
integer, `{…}`, `urn:uuid:…`), so a `date-time` or `uuid` member must also be a string the
dialect's format checker accepts (`format_matches`, the checker of authored schemas).
tests/api/test_api_bodies.py proves that the result accepts exactly what the 2020-12 schemas
accept (integer tokens for integers, RFC forms for formats).

A refusal names the places the schemas would (`violations`: pointers, keywords, member names;
never a value), with the first keyword the model checks at each.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, TypeVar

from pydantic import BaseModel, ValidationError

from coordinator_api.problems import ApiProblem
from coordinator_core.jsonschema.dialect import FORMATS, format_matches
from coordinator_core.jsonschema.violations import Violation, first_violations
from coordinator_core.values import StrictJsonError, parse_strict_json

__all__ = [
    "BodyCapture",
    "BodyModel",
    "is_json_media_type",
    "parse_rfc3339",
    "read_body",
]

BodyModel = TypeVar("BodyModel", bound=BaseModel)

_JSON_MEDIA_TYPE: Final = re.compile(
    r"^application/(?:json|[A-Za-z0-9!#$&^_.-]+\+json)$", re.IGNORECASE
)
_RFC3339: Final = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$"
)

# The JSON Schema keyword each pydantic error type of a request model stands for.
_KEYWORDS: Final[Mapping[str, str]] = {
    "missing": "required",
    "extra_forbidden": "additionalProperties",
    "model_type": "type",
    "model_attributes_type": "type",
    "dict_type": "type",
    "string_type": "type",
    "int_type": "type",
    "bool_type": "type",
    "list_type": "type",
    "uuid_type": "type",
    "datetime_type": "type",
    "literal_error": "const",
    "enum": "enum",
    "string_pattern_mismatch": "pattern",
    "string_too_short": "minLength",
    "string_too_long": "maxLength",
    "too_short": "minItems",
    "too_long": "maxItems",
    "greater_than_equal": "minimum",
    "less_than_equal": "maximum",
    "greater_than": "exclusiveMinimum",
    "less_than": "exclusiveMaximum",
    "uuid_parsing": "format",
    "uuid_version": "format",
    "datetime_parsing": "format",
    "datetime_from_date_parsing": "format",
    "datetime_object_invalid": "format",
    "timezone_aware": "format",
}


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


@dataclass(frozen=True, slots=True)
class BodyCapture:
    """What the edge middleware read: at most the limit, and the media type verdict."""

    data: bytes
    too_large: bool
    content_type: str | None

    @property
    def json_media_type(self) -> bool:
        return is_json_media_type(self.content_type)


@functools.cache
def _formats(model: type[BaseModel]) -> tuple[tuple[str, str], ...]:
    """(member, format) of the model's string members with a format the dialect checks."""
    properties = model.model_json_schema(by_alias=True).get("properties", {})
    return tuple(
        (name, schema["format"])
        for name, schema in properties.items()
        if schema.get("type") == "string" and schema.get("format") in FORMATS
    )


def _format_refusals(model: type[BaseModel], value: object) -> Iterator[tuple[str, str]]:
    """(member, keyword) where a formatted member is not a string of its format."""
    if not isinstance(value, dict):
        return
    for name, format_name in _formats(model):
        if name not in value:
            continue
        if not isinstance(value[name], str):
            yield name, "type"
        elif not format_matches(format_name, value[name]):
            yield name, "format"


def _refused(
    refusal: ValidationError | None, formats: list[tuple[str, str]]
) -> tuple[tuple[Violation, ...], set[str | None]]:
    """The violations of a refusal, and the top-level members it concerns (None for the shape
    of the body itself: a wrong type, an unknown member)."""
    places: dict[tuple[tuple[Any, ...], str], set[str]] = {}
    members: set[str | None] = set()
    for name, failed in formats:
        places.setdefault(((name,), failed), set())
        members.add(name)
    for error in () if refusal is None else refusal.errors():
        location, kind = tuple(error["loc"]), error["type"]
        if any(location == (name,) for name, _ in formats):
            continue  # the member's format check has said what it fails (an int is no date)
        keyword = _KEYWORDS.get(kind)
        if kind in ("missing", "extra_forbidden") and location:
            # Where the schema's `required` / `additionalProperties` fails: the object, naming
            # the member.
            places.setdefault((location[:-1], str(keyword)), set()).add(str(location[-1]))
        elif keyword is not None:
            places.setdefault((location, keyword), set())
        top = location[0] if location and isinstance(location[0], str) else None
        members.add(None if kind == "extra_forbidden" else top)
    violations = first_violations(
        Violation.at(location, keyword, names) for (location, keyword), names in places.items()
    )
    return violations, members


def read_body(
    capture: BodyCapture,
    model: type[BodyModel],
    *,
    member_codes: Mapping[str, str] | None = None,
) -> BodyModel:
    """Steps (4) and (5) of 06 §1 item 6: the body as its model.

    415 `content-type-invalid`, 413 `too-large`, then 400: `member_codes[m]` when every
    violation concerns member `m` (for example `reason` → `coordinator.command.reason-invalid`),
    else `coordinator.request.invalid`; the problem names where the body fails its schema.
    """
    if not capture.json_media_type:
        raise ApiProblem("coordinator.request.content-type-invalid")
    if capture.too_large:
        raise ApiProblem("coordinator.request.too-large")
    try:
        value = parse_strict_json(capture.data)
    except StrictJsonError:
        raise ApiProblem("coordinator.request.invalid") from None
    formats = list(_format_refusals(model, value))
    try:
        body = model.model_validate(value, by_alias=True, by_name=False)
    except ValidationError as refusal:
        violations, members = _refused(refusal, formats)
    else:
        if not formats:
            return body
        violations, members = _refused(None, formats)
    codes = member_codes or {}
    if len(members) == 1:
        member = members.pop()
        if member is not None and member in codes:
            raise ApiProblem(codes[member], violations=violations)
    raise ApiProblem("coordinator.request.invalid", violations=violations)
