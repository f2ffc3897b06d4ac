"""Shape checks for product commands and answers (contract 08 §3–§6).

Commands are checked by small checks here: one that fails is refused `invalid-command` before
anything is sent. Answers are checked against the output schemas of the spec
(`output_shape`, `completion_shape`: `coordinator_core.outputs`, the schemas scenarios are held
to by C13 and `coordinatorctl schema operation` prints), plus the few facts JSON Schema cannot
state (canonical sizes, an evaluation's probabilities); one that fails is `invalid-response`. A
`ShapeError` carries a fixed message and never the offending value.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from coordinator_core.jsonschema.dialect import format_matches
from coordinator_core.operations import CATALOG
from coordinator_core.outputs import completion_output_failure, output_failure
from coordinator_core.values import CanonicalJsonError, canonical_json

__all__ = [
    "REFUSAL_CODE",
    "ShapeError",
    "canonical_size",
    "closed_object",
    "completion_shape",
    "date_time",
    "integer",
    "json_object",
    "member",
    "output_shape",
    "sha256_digest",
    "text",
    "uuid_text",
]

REFUSAL_CODE: Final = re.compile(r"[a-z][a-z0-9_.-]{0,127}")
_SHA256: Final = re.compile(r"sha256:[0-9a-fA-F]{64}")
_INSTANT: Final = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})"
)


class ShapeError(ValueError):
    """A value does not have the shape the contract gives it."""

    def __init__(self) -> None:
        super().__init__("The value does not have the required shape.")


def output_shape(operation_id: str, value: Any) -> dict[str, Any]:
    """`value` when it is an output of the operation by the spec's schema; else ShapeError."""
    if output_failure(CATALOG[operation_id], value) is not None:
        raise ShapeError()
    return json_object(value)


def completion_shape(operation_id: str, completion: str, value: Any) -> dict[str, Any]:
    """`value` when it is an output of the completion by the spec's schema; else ShapeError."""
    found = CATALOG[operation_id].completions[completion]
    if completion_output_failure(found, value) is not None:
        raise ShapeError()
    return json_object(value)


def json_object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ShapeError()
    return value


def closed_object(
    value: Any,
    required: frozenset[str] | set[str],
    optional: frozenset[str] | set[str] = frozenset(),
) -> dict[str, Any]:
    """An object with every `required` member and nothing outside `required | optional`."""
    found = json_object(value)
    names = set(found)
    if not set(required) <= names or not names <= set(required) | set(optional):
        raise ShapeError()
    return found


def member(value: dict[str, Any], name: str) -> Any:
    if name not in value:
        raise ShapeError()
    return value[name]


def text(value: Any, minimum: int = 1, maximum: int | None = None) -> str:
    """A string of `minimum`–`maximum` characters (Unicode scalar values)."""
    if not isinstance(value, str) or len(value) < minimum:
        raise ShapeError()
    if maximum is not None and len(value) > maximum:
        raise ShapeError()
    return value


def integer(value: Any, minimum: int | None = None, maximum: int | None = None) -> int:
    """A JSON integer (never a boolean); `1.0` counts, as in the schema dialect."""
    if isinstance(value, bool):
        raise ShapeError()
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int):
        raise ShapeError()
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ShapeError()
    return value


def uuid_text(value: Any) -> str:
    if not isinstance(value, str) or not format_matches("uuid", value):
        raise ShapeError()
    return value


def sha256_digest(value: Any) -> str:
    if not isinstance(value, str) or _SHA256.fullmatch(value) is None:
        raise ShapeError()
    return value


def date_time(value: Any) -> datetime:
    """An RFC 3339 date-time with an offset (01 §12 `date-time`), as an aware datetime.

    A leap second (`:60`) is read as the last representable instant of its minute, which
    keeps ordering and window checks correct to within that second.
    """
    if not isinstance(value, str) or not format_matches("date-time", value):
        raise ShapeError()
    found = _INSTANT.fullmatch(value)
    if found is None:
        raise ShapeError()
    year, month, day, hour, minute, second = (int(found.group(i)) for i in range(1, 7))
    fraction, offset = found.group(7), found.group(8)
    micro = int((fraction[1:] + "000000")[:6]) if fraction else 0
    if second == 60:
        second, micro = 59, 999_999
    if offset in ("Z", "z"):
        shift = timedelta(0)
    else:
        sign = -1 if offset[0] == "-" else 1
        shift = sign * timedelta(hours=int(offset[1:3]), minutes=int(offset[4:6]))
    try:
        local = datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)
    except ValueError as exc:
        raise ShapeError() from exc
    return local - shift


def canonical_size(value: Any) -> int:
    """The length of the canonical JSON of `value` (02 §7)."""
    try:
        return len(canonical_json(value))
    except CanonicalJsonError as exc:
        raise ShapeError() from exc
