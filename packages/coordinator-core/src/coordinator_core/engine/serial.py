"""JSON form of the engine's frozen values: states, records, events and commands.

Field names become camelCase members; a tagged value (event or command) carries its `kind`.
Decoding follows the dataclass annotations and refuses anything else, so a stored state that
was tampered with or written by another version fails loudly instead of being half-read.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import types
import typing
from typing import Any, ClassVar, Literal, TypeVar, Union, get_args, get_origin

__all__ = ["FormatError", "decode", "encode", "member_name"]

T = TypeVar("T")


class FormatError(ValueError):
    """A JSON document is not the serialised form of the expected engine value."""


def member_name(field_name: str) -> str:
    """`retry_delays_ms` → `retryDelaysMs`."""
    head, *rest = field_name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


class Tagged:
    """Base of events and commands: a frozen dataclass whose JSON form carries its `kind`."""

    __slots__ = ()
    kind: ClassVar[str]

    def to_json(self) -> dict[str, Any]:
        result: dict[str, Any] = encode(self)
        return result


def encode(value: Any) -> Any:
    """The JSON form of an engine value (dataclasses, tuples, JSON scalars, and bytes as base64 text)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        kind = getattr(type(value), "kind", None)
        if isinstance(kind, str):
            out["kind"] = kind
        for field in dataclasses.fields(value):
            out[member_name(field.name)] = encode(getattr(value, field.name))
        return out
    if isinstance(value, tuple):
        return [encode(item) for item in value]
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    raise FormatError("The value has no JSON form.")


_HINTS: dict[str, dict[str, Any]] = {}


def _hints(cls: type[Any]) -> dict[str, Any]:
    """The resolved annotations of `cls`, computed once per class."""
    key = f"{cls.__module__}.{cls.__qualname__}"
    hints = _HINTS.get(key)
    if hints is None:
        hints = _HINTS[key] = typing.get_type_hints(cls)
    return hints


def decode(cls: type[T], data: Any) -> T:
    """The value of dataclass `cls` whose JSON form is `data`."""
    if not isinstance(data, dict):
        raise FormatError(f"{cls.__name__} must be a JSON object.")
    hints = _hints(cls)
    names = {member_name(f.name): f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    kind = getattr(cls, "kind", None)
    allowed = set(names) | ({"kind"} if isinstance(kind, str) else set())
    unknown = set(data) - allowed
    if unknown:
        raise FormatError(f"{cls.__name__} has unknown members.")
    if isinstance(kind, str) and data.get("kind") != kind:
        raise FormatError(f"{cls.__name__} has the wrong kind.")
    values: dict[str, Any] = {}
    for member, field in names.items():
        if member not in data:
            if (
                field.default is dataclasses.MISSING
                and field.default_factory is dataclasses.MISSING
            ):
                raise FormatError(f"{cls.__name__} lacks member {member}.")
            continue
        values[field.name] = _decode_as(hints[field.name], data[member], member)
    return cls(**values)


def _decode_as(hint: Any, value: Any, member: str) -> Any:
    origin = get_origin(hint)
    if origin is Union or origin is types.UnionType:
        options = get_args(hint)
        if value is None and type(None) in options:
            return None
        for option in options:
            if option is type(None):
                continue
            try:
                return _decode_as(option, value, member)
            except FormatError:
                continue
        raise FormatError(f"Member {member} has the wrong type.")
    if origin is Literal:
        if value in get_args(hint) and type(value) in {type(a) for a in get_args(hint)}:
            return value
        raise FormatError(f"Member {member} has an unknown value.")
    if origin is tuple:
        item_type = get_args(hint)[0]
        if not isinstance(value, list):
            raise FormatError(f"Member {member} must be a list.")
        return tuple(_decode_as(item_type, item, member) for item in value)
    if hint is Any:
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is str:
        if isinstance(value, str):
            return value
    elif hint is bytes:
        if isinstance(value, str):
            try:
                return base64.b64decode(value, validate=True)
            except binascii.Error:
                pass
    elif hint is type(None):
        if value is None:
            return None
    elif isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return decode(hint, value)
    raise FormatError(f"Member {member} has the wrong type.")
