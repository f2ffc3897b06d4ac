"""`evolve`: a copy of a frozen dataclass with some fields changed, for the hot path.

`dataclasses.replace` re-runs the generated `__init__` (for a frozen dataclass one
`object.__setattr__` call per field, after parsing keyword arguments) and looks every field's
kind up again; the store rows and engine records have up to 39 fields and are copied dozens
of times per run. A class with a `__post_init__` (which may check or derive fields) is still
copied through `replace`, so nothing a constructor enforces is skipped.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any, Final, TypeVar

__all__ = ["evolve"]

T = TypeVar("T")

_NAMES: Final[dict[type, tuple[tuple[str, ...], frozenset[str]] | None]] = {}


def _names_of(cls: type) -> tuple[tuple[str, ...], frozenset[str]] | None:
    if hasattr(cls, "__post_init__") or any(not field.init for field in fields(cls)):
        return None
    names = tuple(field.name for field in fields(cls))
    return names, frozenset(names)


def evolve(obj: T, /, **changes: Any) -> T:
    """`obj` with `changes` applied, exactly as `dataclasses.replace(obj, **changes)`."""
    cls = type(obj)
    try:
        known = _NAMES[cls]
    except KeyError:
        known = _NAMES[cls] = _names_of(cls)
    if known is None:
        return replace(obj, **changes)  # type: ignore[type-var]
    names, allowed = known
    if not changes.keys() <= allowed:
        raise TypeError("evolve() got a name that is not a field.")
    copy = object.__new__(cls)
    assign = object.__setattr__
    for name in names:
        assign(copy, name, changes[name] if name in changes else getattr(obj, name))
    return copy
