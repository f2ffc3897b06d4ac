"""The JSON Schema dialect of input, outcome and response schemas (contract 01 §12).

`check_schema` is a hand-written walk (no jsonschema import, so `check` starts fast) that
reports every dialect violation at the pointer of the offending keyword. `compile_validator`
builds a Draft 2020-12 validator from jsonschema, imported lazily, with `format` asserted for
exactly the ten formats of 01 §12 item 7 and `pattern`/`patternProperties` using Python `re`
with the ASCII flag and search semantics.
"""

from __future__ import annotations

import importlib
import ipaddress  # lazy: only validation needs it
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final
from urllib.parse import unquote

from coordinator_core.jsonschema.violations import Violation, violations_of
from coordinator_core.limits import (
    JSON_MAX_CANONICAL_BYTES,
    JSON_MAX_DEPTH,
    JSON_MAX_MEMBERS,
    JSON_MAX_NODES,
    JSON_MAX_STRING_BYTES,
    SCHEMA_ABI,
)
from coordinator_core.values import JsonBoundsError, check_json_value, pointer_token

__all__ = [
    "FORMATS",
    "KEYWORDS",
    "SCHEMA_ABI",
    "SCHEMA_URI",
    "SchemaFinding",
    "SchemaValidator",
    "accepts_null",
    "check_schema",
    "compile_validator",
    "format_matches",
]

SCHEMA_URI: Final = "https://json-schema.org/draft/2020-12/schema"


def _lazy(pattern: str) -> Callable[[], re.Pattern[str]]:
    """A regex compiled on first use: importing this module must stay cheap for `check`."""

    @lru_cache(maxsize=1)
    def compiled() -> re.Pattern[str]:
        return re.compile(pattern)

    return compiled


# -- keyword table (01 §12 item 6) --------------------------------------------------------------

_SUBSCHEMA: Final = frozenset(
    {
        "not",
        "if",
        "then",
        "else",
        "items",
        "contains",
        "additionalProperties",
        "propertyNames",
        "unevaluatedItems",
        "unevaluatedProperties",
        "contentSchema",
    }
)
_SUBSCHEMA_ARRAY: Final = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_SUBSCHEMA_MAP: Final = frozenset({"$defs", "properties", "patternProperties", "dependentSchemas"})
_NUMBER: Final = frozenset({"maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum"})
_NON_NEGATIVE_INTEGER: Final = frozenset(
    {
        "maxLength",
        "minLength",
        "maxItems",
        "minItems",
        "maxContains",
        "minContains",
        "maxProperties",
        "minProperties",
    }
)
_BOOLEAN: Final = frozenset({"uniqueItems", "deprecated", "readOnly", "writeOnly"})
_STRING: Final = frozenset(
    {"$comment", "title", "description", "contentEncoding", "contentMediaType"}
)
_ARRAY: Final = frozenset({"enum", "examples"})
_ANY: Final = frozenset({"const", "default"})
_OTHER: Final = frozenset(
    {
        "$schema",
        "$ref",
        "$dynamicRef",
        "$anchor",
        "$dynamicAnchor",
        "type",
        "multipleOf",
        "pattern",
        "required",
        "dependentRequired",
        "format",
    }
)
KEYWORDS: Final = (
    _SUBSCHEMA
    | _SUBSCHEMA_ARRAY
    | _SUBSCHEMA_MAP
    | _NUMBER
    | _NON_NEGATIVE_INTEGER
    | _BOOLEAN
    | _STRING
    | _ARRAY
    | _ANY
    | _OTHER
)
_FORBIDDEN: Final = frozenset({"$id", "$vocabulary"})
_SIMPLE_TYPES: Final = frozenset(
    {"array", "boolean", "integer", "null", "number", "object", "string"}
)
# The 2020-12 meta-schema's anchorString.
_ANCHOR_NAME: Final = _lazy(r"[A-Za-z_][-A-Za-z0-9._]*")
# Keywords whose subschemas apply to the same instance location: a cycle through only these
# (and $ref/$dynamicRef) never terminates. `then`/`else` apply only beside `if`.
_IN_PLACE: Final = frozenset({"allOf", "anyOf", "oneOf", "not", "if", "dependentSchemas"})


@dataclass(frozen=True, slots=True)
class SchemaFinding:
    """One dialect violation: the absolute pointer of the offending keyword (or schema) and a
    fixed sentence that names at most a keyword of the dialect, never a value."""

    pointer: str
    message: str


_BOUNDS_MESSAGES: Final = {
    "depth": f"The schema is nested deeper than {JSON_MAX_DEPTH} levels (JSON value bounds).",
    "nodes": f"The schema has more than {JSON_MAX_NODES} nodes (JSON value bounds).",
    "members": f"A schema array or object has more than {JSON_MAX_MEMBERS} members (JSON value bounds).",
    "string": f"A schema string or member name is longer than {JSON_MAX_STRING_BYTES} bytes (JSON value bounds).",
    "canonical-size": f"The canonical JSON form of the schema is larger than {JSON_MAX_CANONICAL_BYTES} bytes.",
    "integer": "A schema number is an integer not exactly representable as binary64.",
    "not-json": "The schema contains a value that is not JSON.",
}


def _compiles(pattern: str) -> bool:
    try:
        _ascii_regex(pattern)
    except (re.error, OverflowError, RecursionError, ValueError):
        return False
    return True


@lru_cache(maxsize=1024)
def _ascii_regex(pattern: str) -> re.Pattern[str]:
    """The dialect's regex semantics (01 §12 item 8): Python `re` with the ASCII flag."""
    return re.compile(pattern, re.ASCII)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_non_negative_integer(value: object) -> bool:
    # JSON Schema's "integer" includes numbers with a zero fractional part, such as 2.0.
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value >= 0
    return isinstance(value, float) and value.is_integer() and value >= 0


def _is_unique_string_array(value: object) -> bool:
    return (
        isinstance(value, list)
        and all(isinstance(item, str) for item in value)
        and len(set(value)) == len(value)
    )


def _is_type_value(value: object) -> bool:
    if isinstance(value, str):
        return value in _SIMPLE_TYPES
    return (
        isinstance(value, list)
        and len(value) > 0
        and _is_unique_string_array(value)
        and all(item in _SIMPLE_TYPES for item in value)
    )


def _too_wide(value: object) -> bool:
    return isinstance(value, list | dict) and len(value) > JSON_MAX_MEMBERS


# -- the walk ------------------------------------------------------------------------------------


class _Reference:
    """A local reference: its keyword ("$ref"/"$dynamicRef"), its relative pointer, the
    relative pointer of the schema holding it, and the fragment after "#"."""

    __slots__ = ("fragment", "keyword", "pointer", "source")

    def __init__(self, keyword: str, pointer: str, source: str, fragment: str) -> None:
        self.keyword = keyword
        self.pointer = pointer
        self.source = source
        self.fragment = fragment


class _Walk:
    """Collects findings, schema positions, anchors, references and in-place edges."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.findings: list[SchemaFinding] = []
        self.positions: set[str] = set()
        self.order: list[str] = []
        self.anchors: dict[str, str] = {}
        self.references: list[_Reference] = []
        self.edges: dict[str, list[str]] = {}
        self.truncated = False

    def report(self, pointer: str, message: str) -> None:
        self.findings.append(SchemaFinding(self.base + pointer, message))

    def run(self, root: object) -> None:
        # (value, relative pointer, JSON depth); only schema positions are pushed.
        stack: list[tuple[object, str, int]] = [(root, "", 0)]
        visits = 0
        while stack:
            node, pointer, depth = stack.pop()
            visits += 1
            if visits > JSON_MAX_NODES or depth > JSON_MAX_DEPTH or _too_wide(node):
                # Only reachable when the value bounds already failed: stop rather than walk
                # hostile (possibly aliased or cyclic) input.
                self.truncated = True
                continue
            self.positions.add(pointer)
            self.order.append(pointer)
            if isinstance(node, bool):
                continue
            if not isinstance(node, dict):
                self.report(pointer, "A schema must be an object or a boolean.")
                continue
            children: list[tuple[object, str, int]] = []
            in_place: list[str] = []
            self.edges[pointer] = in_place
            for keyword, value in node.items():
                if not isinstance(keyword, str):
                    continue  # reported by the value bounds as not JSON
                at = f"{pointer}/{pointer_token(keyword)}"
                self.keyword(
                    node, keyword, value, at=at, depth=depth, children=children, in_place=in_place
                )
            children.reverse()
            stack.extend(children)

    def keyword(
        self,
        node: dict[Any, Any],
        keyword: str,
        value: object,
        *,
        at: str,
        depth: int,
        children: list[tuple[object, str, int]],
        in_place: list[str],
    ) -> None:
        if keyword.startswith("x-"):
            return
        if keyword in _FORBIDDEN:
            self.report(at, f"The keyword {keyword} is not allowed in this dialect.")
        elif keyword not in KEYWORDS:
            self.report(at, "This keyword is not part of the JSON Schema 2020-12 dialect.")
        elif keyword in _SUBSCHEMA:
            children.append((value, at, depth + 1))
            if keyword in _IN_PLACE or (keyword in ("then", "else") and "if" in node):
                in_place.append(at)
        elif (keyword in _SUBSCHEMA_ARRAY or keyword in _SUBSCHEMA_MAP) and _too_wide(value):
            self.truncated = True  # a members bound break, already reported; do not expand
        elif keyword in _SUBSCHEMA_ARRAY:
            if not isinstance(value, list) or not value:
                self.report(at, f"The keyword {keyword} must be a non-empty array of schemas.")
                return
            for index, item in enumerate(value):
                children.append((item, f"{at}/{index}", depth + 2))
                if keyword in _IN_PLACE:
                    in_place.append(f"{at}/{index}")
        elif keyword in _SUBSCHEMA_MAP:
            if not isinstance(value, dict):
                self.report(
                    at, f"The keyword {keyword} must be an object whose values are schemas."
                )
                return
            for name, item in value.items():
                if not isinstance(name, str):
                    continue
                child = f"{at}/{pointer_token(name)}"
                if keyword == "patternProperties" and not _compiles(name):
                    self.report(
                        child,
                        "The patternProperties name does not compile as a Python regular "
                        "expression with the ASCII flag.",
                    )
                children.append((item, child, depth + 2))
                if keyword in _IN_PLACE:
                    in_place.append(child)
        elif keyword in _NUMBER:
            if not _is_number(value):
                self.report(at, f"The keyword {keyword} must be a number.")
        elif keyword in _NON_NEGATIVE_INTEGER:
            if not _is_non_negative_integer(value):
                self.report(at, f"The keyword {keyword} must be a non-negative integer.")
        elif keyword in _BOOLEAN:
            if not isinstance(value, bool):
                self.report(at, f"The keyword {keyword} must be a boolean.")
        elif keyword in _STRING:
            if not isinstance(value, str):
                self.report(at, f"The keyword {keyword} must be a string.")
        elif keyword in _ARRAY:
            if not isinstance(value, list):
                self.report(at, f"The keyword {keyword} must be an array.")
        elif keyword in _ANY:
            pass
        else:
            self.special(keyword, value, pointer=at.rpartition("/")[0], at=at)

    def special(self, keyword: str, value: object, *, pointer: str, at: str) -> None:
        if keyword == "$schema":
            if value != SCHEMA_URI or not isinstance(value, str):
                self.report(at, f"The keyword $schema must be {SCHEMA_URI}.")
        elif keyword in ("$ref", "$dynamicRef"):
            if not isinstance(value, str):
                self.report(at, f"The keyword {keyword} must be a string.")
            elif not value.startswith("#"):
                self.report(
                    at,
                    f"The keyword {keyword} must be a local reference starting with '#'; "
                    "there is no remote or file resolution.",
                )
            else:
                self.references.append(_Reference(keyword, at, pointer, value[1:]))
        elif keyword in ("$anchor", "$dynamicAnchor"):
            if not isinstance(value, str) or _ANCHOR_NAME().fullmatch(value) is None:
                self.report(
                    at,
                    f"The keyword {keyword} must be a name: a letter or '_' followed by "
                    "letters, digits, '-', '.' or '_'.",
                )
            elif self.anchors.setdefault(value, pointer) != pointer:
                self.report(at, f"The {keyword} name is already declared in this schema.")
        elif keyword == "type":
            if not _is_type_value(value):
                self.report(
                    at,
                    "The keyword type must be a JSON Schema type name or a non-empty array of "
                    "unique type names.",
                )
        elif keyword == "multipleOf":
            if not _is_number(value) or not value > 0:  # type: ignore[operator]
                self.report(at, "The keyword multipleOf must be a number greater than 0.")
        elif keyword == "pattern":
            if not isinstance(value, str) or not _compiles(value):
                self.report(
                    at,
                    "The keyword pattern must be a string that compiles as a Python regular "
                    "expression with the ASCII flag.",
                )
        elif keyword == "required":
            if not _is_unique_string_array(value):
                self.report(at, "The keyword required must be an array of unique strings.")
        elif keyword == "dependentRequired":
            if not isinstance(value, dict) or not all(
                _is_unique_string_array(item) for item in value.values()
            ):
                self.report(
                    at,
                    "The keyword dependentRequired must be an object whose values are arrays "
                    "of unique strings.",
                )
        elif keyword == "format":
            if not isinstance(value, str):
                self.report(at, "The keyword format must be a string.")
            elif value not in FORMATS:
                self.report(
                    at,
                    "The format is not one of the formats this dialect asserts: date-time, "
                    "date, time, email, hostname, ipv4, ipv6, uri, uri-reference, uuid.",
                )

    # -- references ------------------------------------------------------------------------------

    def resolve(self, root: object, reference: _Reference) -> str | None:
        """The relative pointer of the schema a local reference names, or None."""
        fragment = reference.fragment
        if not fragment:
            return ""
        if not fragment.startswith("/"):
            return self.anchors.get(fragment)

        # As `referencing` does: percent-decode the whole fragment, then split on "/".
        node = root
        tokens: list[str] = []
        for raw in unquote(fragment[1:]).split("/"):
            if isinstance(node, list):
                # Stricter than `referencing` (which takes any int() spelling): RFC 6901 indexes.
                if not (raw == "0" or (raw.isascii() and raw.isdigit() and raw[0] != "0")):
                    return None
                index = int(raw)
                if index >= len(node):
                    return None
                node = node[index]
                tokens.append(raw)
            elif isinstance(node, dict):
                name = raw.replace("~1", "/").replace("~0", "~")
                if name not in node:
                    return None
                node = node[name]
                tokens.append(pointer_token(name))
            else:
                return None
        target = "".join("/" + token for token in tokens)
        return target if target in self.positions else None

    def check_references(self, root: object) -> None:
        """Report references that resolve to no schema here; then those on in-place cycles."""
        resolved: list[tuple[_Reference, str]] = []
        for reference in self.references:
            target = self.resolve(root, reference)
            if target is None:
                self.report(
                    reference.pointer,
                    f"The keyword {reference.keyword} does not resolve to a schema inside this "
                    "schema (a JSON pointer or an anchor declared here).",
                )
            else:
                self.edges.setdefault(reference.source, []).append(target)
                resolved.append((reference, target))
        if not resolved:
            return
        # An edge lies on a cycle iff both ends share a strongly connected component. Such a
        # cycle never moves into the instance, so evaluating it would never end (2020-12 calls
        # this undefined); jsonschema would die of RecursionError at run time.
        component = _components(self.order, self.edges)
        for reference, target in resolved:
            if component[reference.source] == component[target]:
                self.report(
                    reference.pointer,
                    f"The keyword {reference.keyword} closes a cycle of schemas that apply to "
                    "the same instance location, so validation would never end.",
                )


def _components(order: list[str], edges: dict[str, list[str]]) -> dict[str, int]:
    """Strongly connected components (Kosaraju, iterative) of the in-place graph; a node with
    a self-loop shares a component with itself, so the caller's equality test covers it."""
    seen: set[str] = set()
    finished: list[str] = []
    for start in order:
        if start in seen:
            continue
        seen.add(start)
        stack: list[tuple[str, Iterator[str]]] = [(start, iter(edges.get(start, ())))]
        while stack:
            node, successors = stack[-1]
            for successor in successors:
                if successor not in seen:
                    seen.add(successor)
                    stack.append((successor, iter(edges.get(successor, ()))))
                    break
            else:
                finished.append(node)
                stack.pop()
    reverse: dict[str, list[str]] = {}
    for source, targets in edges.items():
        for target in targets:
            reverse.setdefault(target, []).append(source)
    component: dict[str, int] = {}
    for number, start in enumerate(reversed(finished)):
        if start in component:
            continue
        component[start] = number
        pending = [start]
        while pending:
            node = pending.pop()
            for source in reverse.get(node, ()):
                if source not in component:
                    component[source] = number
                    pending.append(source)
    return component


def check_schema(schema: object, base: str) -> list[SchemaFinding]:
    """Every dialect violation of `schema` (01 §12), each at `base` + the offending pointer.

    Findings are independent and all reported: the value bounds (03 §4, at the breaking
    node), then the walk in document order (root shape, $schema, forbidden $id/$vocabulary,
    unknown keywords, ill-typed keyword values as the 2020-12 meta-schema would refuse them,
    unknown formats, patterns that do not compile), then references that are not local or do
    not resolve to a schema in this document, then references closing an in-place cycle.
    Names under properties, patternProperties, $defs, dependentSchemas and dependentRequired
    are names, not keywords. `x-*` keywords are ignored with their contents. Messages name at
    most a keyword of the dialect. Pure; never imports jsonschema.
    """
    walk = _Walk(base)
    try:
        check_json_value(schema)
    except JsonBoundsError as error:
        walk.report(error.pointer, _BOUNDS_MESSAGES[error.kind])
    walk.run(schema)
    if not walk.truncated:
        # A truncated walk saw only part of the schema; reference findings would be noise.
        walk.check_references(schema)
    return walk.findings


# -- formats (01 §12 item 7) ---------------------------------------------------------------------

# Ours rather than jsonschema's checkers, which differ from the contract's table (leap seconds, the
# year 0000, trailing newlines, absolute and non-ASCII host names, a bare "@" email, uuid.UUID's
# leniency): tests/unit/definition/test_schema_formats_jsonschema.py holds every difference.

_DATE: Final = _lazy(r"([0-9]{4})-([0-9]{2})-([0-9]{2})")
_TIME: Final = _lazy(
    r"([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.[0-9]+)?(?:[Zz]|[+-]([0-9]{2}):([0-9]{2}))"
)
_IPV4: Final = _lazy(r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])")
_HOST_LABEL: Final = _lazy(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_ATEXT_ATOM: Final = _lazy(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+")
_UUID: Final = _lazy(r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}")

# RFC 3986 §3 and Appendix A, transcribed rule by rule. IP-literal content is checked apart.
_UNRESERVED: Final = r"A-Za-z0-9\-._~"
_SUB_DELIMS: Final = r"!$&'()*+,;="
_PCT: Final = r"%[0-9A-Fa-f]{2}"
_PCHAR: Final = rf"(?:[{_UNRESERVED}{_SUB_DELIMS}:@]|{_PCT})"
_SEGMENT: Final = rf"{_PCHAR}*"
_SEGMENT_NZ: Final = rf"{_PCHAR}+"
_SEGMENT_NZ_NC: Final = rf"(?:[{_UNRESERVED}{_SUB_DELIMS}@]|{_PCT})+"
_USERINFO: Final = rf"(?:[{_UNRESERVED}{_SUB_DELIMS}:]|{_PCT})*"
_REG_NAME: Final = rf"(?:[{_UNRESERVED}{_SUB_DELIMS}]|{_PCT})*"
_HOST: Final = rf"(?:\[(?P<literal>[^\]]*)\]|{_REG_NAME})"
_AUTHORITY: Final = rf"(?:{_USERINFO}@)?{_HOST}(?::[0-9]*)?"
_PATH_ABEMPTY: Final = rf"(?:/{_SEGMENT})*"
_PATH_ABSOLUTE: Final = rf"/(?:{_SEGMENT_NZ}(?:/{_SEGMENT})*)?"
_PATH_ROOTLESS: Final = rf"{_SEGMENT_NZ}(?:/{_SEGMENT})*"
_PATH_NOSCHEME: Final = rf"{_SEGMENT_NZ_NC}(?:/{_SEGMENT})*"
_QUERY: Final = rf"(?:{_PCHAR}|[/?])*"
_TAIL: Final = rf"(?:\?{_QUERY})?(?:#{_QUERY})?"
_URI: Final = _lazy(
    rf"[A-Za-z][A-Za-z0-9+\-.]*:"
    rf"(?://{_AUTHORITY}{_PATH_ABEMPTY}|{_PATH_ABSOLUTE}|{_PATH_ROOTLESS}|){_TAIL}"
)
_RELATIVE_REF: Final = _lazy(
    rf"(?://{_AUTHORITY}{_PATH_ABEMPTY}|{_PATH_ABSOLUTE}|{_PATH_NOSCHEME}|){_TAIL}"
)
_IPV_FUTURE: Final = _lazy(rf"[vV][0-9A-Fa-f]+\.[{_UNRESERVED}{_SUB_DELIMS}:]+")


def _days_in_month(year: int, month: int) -> int:
    if month == 2:
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        return 29 if leap else 28
    return 30 if month in (4, 6, 9, 11) else 31


def _is_date(text: str) -> bool:
    """RFC 3339 full-date on a valid calendar day (leap years by the Gregorian rule)."""
    match = _DATE().fullmatch(text)
    if match is None:
        return False
    year, month, day = (int(part) for part in match.groups())
    return 1 <= month <= 12 and 1 <= day <= _days_in_month(year, month)


def _is_time(text: str) -> bool:
    """RFC 3339 full-time: hh:mm:ss[.frac] with a required offset (Z, z or ±hh:mm);
    seconds 00–60 as the contract states."""
    match = _TIME().fullmatch(text)
    if match is None:
        return False
    hour, minute, second, offset_hour, offset_minute = match.groups()
    if not (int(hour) <= 23 and int(minute) <= 59 and int(second) <= 60):
        return False
    return offset_hour is None or (int(offset_hour) <= 23 and int(offset_minute) <= 59)


def _is_date_time(text: str) -> bool:
    """RFC 3339 date-time: full-date, "T" (or "t"), full-time."""
    if len(text) < 11 or text[10] not in "Tt":
        return False
    return _is_date(text[:10]) and _is_time(text[11:])


def _is_hostname(text: str) -> bool:
    """RFC 1123: dot-separated labels of 1–63 [A-Za-z0-9-], no leading or trailing "-",
    at most 253 characters in all."""
    if not text or len(text) > 253 or not text.isascii():
        return False
    return all(_HOST_LABEL().fullmatch(label) for label in text.split("."))


def _is_email(text: str) -> bool:
    """local@domain: a dot-atom of RFC 5322 atext (1–64 bytes), a hostname, ≤ 254 bytes."""
    if len(text) > 254 or not text.isascii() or text.count("@") != 1:
        return False
    local, _, domain = text.partition("@")
    if not 1 <= len(local) <= 64:
        return False
    return all(_ATEXT_ATOM().fullmatch(atom) for atom in local.split(".")) and _is_hostname(domain)


def _is_ipv4(text: str) -> bool:
    """A dotted quad, each part 0–255 without leading zeros."""
    parts = text.split(".")
    return len(parts) == 4 and all(_IPV4().fullmatch(part) for part in parts)


def _is_ipv6(text: str) -> bool:
    """RFC 4291 §2.2 text forms (incl. "::" and a trailing dotted quad); no zone id."""
    if not text.isascii() or "%" in text or not text:
        return False

    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    # ipaddress accepts a trailing dotted quad; RFC 4291 requires its parts to be decimal
    # octets without leading zeros, which IPv4Address (3.9.5+) already enforces.
    return True


def _valid_literal(match: re.Match[str]) -> bool:
    literal = match.group("literal")
    return literal is None or _is_ipv6(literal) or _IPV_FUTURE().fullmatch(literal) is not None


def _is_uri(text: str) -> bool:
    """RFC 3986 URI: scheme required; authority, path, query and fragment per the ABNF."""
    match = _URI().fullmatch(text)
    return match is not None and _valid_literal(match)


def _is_uri_reference(text: str) -> bool:
    """RFC 3986 URI-reference: a URI or a relative reference."""
    if _is_uri(text):
        return True
    match = _RELATIVE_REF().fullmatch(text)
    return match is not None and _valid_literal(match)


def _is_uuid(text: str) -> bool:
    """8-4-4-4-12 hexadecimal digits, either case (any version or variant)."""
    return _UUID().fullmatch(text) is not None


_FORMAT_CHECKS: Final[dict[str, Callable[[str], bool]]] = {
    "date-time": _is_date_time,
    "date": _is_date,
    "time": _is_time,
    "email": _is_email,
    "hostname": _is_hostname,
    "ipv4": _is_ipv4,
    "ipv6": _is_ipv6,
    "uri": _is_uri,
    "uri-reference": _is_uri_reference,
    "uuid": _is_uuid,
}
FORMATS: Final = frozenset(_FORMAT_CHECKS)


def format_matches(name: str, value: object) -> bool:
    """Whether `value` satisfies the dialect format `name`; non-strings always do (a format
    only constrains strings). `name` must be one of FORMATS."""
    if not isinstance(value, str):
        return True
    return _FORMAT_CHECKS[name](value)


# -- validation -----------------------------------------------------------------------------------


class SchemaValidator:
    """A compiled dialect schema. Instances should already obey the JSON value bounds."""

    __slots__ = ("_validator",)

    def __init__(self, validator: Any) -> None:
        self._validator = validator

    def is_valid(self, instance: object) -> bool:
        """Whether `instance` is valid under the schema (Draft 2020-12, formats asserted)."""
        return bool(self._validator.is_valid(instance))

    def error_pointers(self, instance: object) -> list[str]:
        """The instance locations (JSON pointers) of the failures, sorted and unique; never
        values. Each failure is reported where its keyword applied (e.g. the object for a
        missing required member)."""
        pointers = {
            "".join("/" + pointer_token(token) for token in error.absolute_path)
            for error in self._validator.iter_errors(instance)
        }
        return sorted(pointers)

    def violations(self, instance: object) -> tuple[Violation, ...]:
        """Where `instance` fails the schema, without its values (violations.py)."""
        return violations_of(self._validator.iter_errors(instance))


def _strip_dollar_schema(schema: object) -> object:
    """A copy of `schema` without `$schema` in any schema position.

    jsonschema's `evolve` re-selects the validator class from a subschema's `$schema`, which
    would swap our extended class for the stock Draft202012Validator (losing the ASCII
    pattern semantics) on every `$ref` to a schema that declares it. Only schema positions are
    copied; keyword values such as `const` are shared untouched.
    """
    if not isinstance(schema, dict):
        return schema
    copy: dict[str, Any] = {}
    for keyword, value in schema.items():
        if keyword == "$schema":
            continue
        if keyword in _SUBSCHEMA:
            copy[keyword] = _strip_dollar_schema(value)
        elif keyword in _SUBSCHEMA_ARRAY and isinstance(value, list):
            copy[keyword] = [_strip_dollar_schema(item) for item in value]
        elif keyword in _SUBSCHEMA_MAP and isinstance(value, dict):
            copy[keyword] = {name: _strip_dollar_schema(item) for name, item in value.items()}
        else:
            copy[keyword] = value
    return copy


def _search(pattern: str, text: str) -> bool:
    return _ascii_regex(pattern).search(text) is not None


@lru_cache(maxsize=1)
def _validator_factory() -> tuple[Any, Any]:
    """The extended validator class and the format checker, built once on first use."""
    jsonschema = importlib.import_module("jsonschema")
    validators = importlib.import_module("jsonschema.validators")
    ValidationError = importlib.import_module("jsonschema.exceptions").ValidationError

    def pattern(validator: Any, value: str, instance: Any, schema: Any) -> Iterator[Any]:
        if validator.is_type(instance, "string") and not _search(value, instance):
            yield ValidationError("The string does not match the pattern.")

    def pattern_properties(
        validator: Any, value: dict[str, Any], instance: Any, schema: Any
    ) -> Iterator[Any]:
        if not validator.is_type(instance, "object"):
            return
        for expression, subschema in value.items():
            for name, member in instance.items():
                if _search(expression, name):
                    yield from validator.descend(
                        member, subschema, path=name, schema_path=expression
                    )

    def additional_properties(
        validator: Any, value: Any, instance: Any, schema: Any
    ) -> Iterator[Any]:
        if not validator.is_type(instance, "object"):
            return
        properties = schema.get("properties", {})
        expressions = list(schema.get("patternProperties", {}))
        extras = [
            name
            for name in instance
            if name not in properties and not any(_search(e, name) for e in expressions)
        ]
        if validator.is_type(value, "object"):
            for name in extras:
                yield from validator.descend(instance[name], value, path=name)
        elif not value and extras:
            yield ValidationError("Additional properties are not allowed.")

    def evaluated_keys(validator: Any, instance: Any, schema: Any) -> list[str]:
        # jsonschema's find_evaluated_property_keys_by_schema, with the dialect's patterns.
        if validator.is_type(schema, "boolean"):
            return []
        keys: list[str] = []
        for keyword in ("$ref", "$dynamicRef"):
            reference = schema.get(keyword)
            if reference is not None:
                resolved = validator._resolver.lookup(reference)
                keys += evaluated_keys(
                    validator.evolve(schema=resolved.contents, _resolver=resolved.resolver),
                    instance,
                    resolved.contents,
                )
        properties = schema.get("properties")
        if validator.is_type(properties, "object"):
            keys += properties.keys() & instance.keys()
        for keyword in ("additionalProperties", "unevaluatedProperties"):
            subschema = schema.get(keyword)
            if subschema is None:
                continue
            keys += (
                name
                for name, member in instance.items()
                if next(validator.descend(member, subschema), None) is None
            )
        for expression in schema.get("patternProperties", {}):
            keys += (name for name in instance if _search(expression, name))
        for name, subschema in schema.get("dependentSchemas", {}).items():
            if name in instance:
                keys += evaluated_keys(validator, instance, subschema)
        for keyword in ("allOf", "oneOf", "anyOf"):
            for subschema in schema.get(keyword, []):
                if next(validator.descend(instance, subschema), None) is None:
                    keys += evaluated_keys(validator, instance, subschema)
        if "if" in schema:
            if validator.evolve(schema=schema["if"]).is_valid(instance):
                keys += evaluated_keys(validator, instance, schema["if"])
                if "then" in schema:
                    keys += evaluated_keys(validator, instance, schema["then"])
            elif "else" in schema:
                keys += evaluated_keys(validator, instance, schema["else"])
        return keys

    def unevaluated_properties(
        validator: Any, value: Any, instance: Any, schema: Any
    ) -> Iterator[Any]:
        if not validator.is_type(instance, "object"):
            return
        evaluated = set(evaluated_keys(validator, instance, schema))
        failed = False
        for name, member in instance.items():
            if name not in evaluated:
                for _ in validator.descend(member, value, path=name, schema_path=name):
                    failed = True
                    break
        if failed:
            yield ValidationError("Unevaluated properties are not allowed or not valid.")

    cls = validators.extend(
        jsonschema.Draft202012Validator,
        validators={
            "pattern": pattern,
            "patternProperties": pattern_properties,
            "additionalProperties": additional_properties,
            "unevaluatedProperties": unevaluated_properties,
        },
    )
    checker = jsonschema.FormatChecker(formats=())
    for name, check in _FORMAT_CHECKS.items():
        checker.checks(name)(_format_function(check))
    return cls, checker


def _format_function(check: Callable[[str], bool]) -> Callable[[object], bool]:
    def applies(instance: object) -> bool:
        return not isinstance(instance, str) or check(instance)

    return applies


def compile_validator(schema: object) -> SchemaValidator:
    """A validator for `schema`. Precondition: check_schema(schema, …) found nothing.

    Draft 2020-12 semantics; `format` asserted for the ten dialect formats; patterns in
    Python `re` with the ASCII flag and search semantics (also where additionalProperties and
    unevaluatedProperties consult patternProperties); annotations never asserted; booleans are
    never numbers, 1.0 is an integer. References resolve locally only: the registry retrieves
    nothing.
    """
    cls, checker = _validator_factory()
    registry = importlib.import_module("referencing").Registry()
    return SchemaValidator(
        cls(_strip_dollar_schema(schema), format_checker=checker, registry=registry)
    )


# Keywords that never constrain a null instance (they apply to other instance types only, or
# are annotations), so a schema made of these and `type`/`const`/`enum` is decided without a
# validator; that keeps `jsonschema` (about 0.3 s to import) off the `check` path.
_NULL_NEUTRAL: Final = frozenset(
    {
        "$schema", "$comment", "$defs", "$anchor", "$dynamicAnchor",
        "title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly",
        "contentEncoding", "contentMediaType", "contentSchema", "format",
        "properties", "patternProperties", "additionalProperties", "propertyNames",
        "unevaluatedProperties", "required", "dependentRequired", "dependentSchemas",
        "minProperties", "maxProperties",
        "items", "prefixItems", "contains", "minContains", "maxContains", "unevaluatedItems",
        "minItems", "maxItems", "uniqueItems",
        "minLength", "maxLength", "pattern",
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    }
)  # fmt: skip


def _accepts_null_directly(schema: object) -> bool | None:
    """Decide null acceptance for simple schemas; None when a validator is needed."""
    if isinstance(schema, bool):
        return schema
    if not isinstance(schema, dict):
        return None
    verdict = True
    for keyword, value in schema.items():
        if keyword.startswith("x-") or keyword in _NULL_NEUTRAL:
            continue
        if keyword == "type":
            names = value if isinstance(value, list) else [value]
            verdict = verdict and "null" in names
        elif keyword == "const":
            verdict = verdict and value is None
        elif keyword == "enum" and isinstance(value, list):
            verdict = verdict and any(item is None for item in value)
        else:
            return None  # $ref, allOf, anyOf, oneOf, not, if/then/else need a validator
    return verdict


def accepts_null(schema: object) -> bool:
    """Whether `schema` accepts the JSON null (rule W20). Same precondition as
    compile_validator."""
    direct = _accepts_null_directly(schema)
    if direct is not None:
        return direct
    return compile_validator(schema).is_valid(None)
