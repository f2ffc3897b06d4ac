"""`evolve`: a copy of a frozen dataclass with some fields changed, for the hot path.

`dataclasses.replace` re-runs the generated `__init__` (for a frozen dataclass one
`object.__setattr__` call per field, after parsing keyword arguments) and looks every field's
kind up again; the store rows and engine records have up to 39 fields and are copied dozens
of times per run. `evolve` copies through a function generated once per class, one statement
per field (7.5 → 4.2 µs for a 39-field row here). A class with a `__post_init__` (which may
check or derive fields) is still copied through `replace`, so nothing a constructor enforces
is skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields, replace
from typing import Any, Final, TypeVar

__all__ = ["evolve"]

T = TypeVar("T")

_Copier = Callable[[Any, Mapping[str, Any]], Any]
_COPIERS: Final[dict[type, tuple[_Copier, frozenset[str]] | None]] = {}


def _copier_of(cls: type) -> tuple[_Copier, frozenset[str]] | None:
    """A function that copies an instance of `cls` field by field, taking the changed ones
    from a mapping: generated once per class, one statement per field, through the field's
    own slot or attribute setter (what the frozen class's `__init__` ends up doing)."""
    if hasattr(cls, "__post_init__") or any(not field.init for field in fields(cls)):
        return None
    names = [field.name for field in fields(cls)]
    if not all(name.isidentifier() for name in names):
        return None
    namespace: dict[str, Any] = {"new": object.__new__, "cls": cls}
    slotted = "__slots__" in cls.__dict__
    lines = ["def copy(obj, changes):", "    made = new(cls)", "    get = changes.get"]
    for index, name in enumerate(names):
        if slotted:
            namespace[f"set_{index}"] = getattr(cls, name).__set__
            lines.append(f"    set_{index}(made, get({name!r}, obj.{name}))")
        else:
            lines.append(f"    object.__setattr__(made, {name!r}, get({name!r}, obj.{name}))")
    lines.append("    return made")
    exec("\n".join(lines), namespace)  # the text is made of identifiers checked above
    return namespace["copy"], frozenset(names)


def evolve(obj: T, /, **changes: Any) -> T:
    """`obj` with `changes` applied, exactly as `dataclasses.replace(obj, **changes)`."""
    cls = type(obj)
    try:
        known = _COPIERS[cls]
    except KeyError:
        known = _COPIERS[cls] = _copier_of(cls)
    if known is None:
        return replace(obj, **changes)  # type: ignore[type-var]
    copy, allowed = known
    if not changes.keys() <= allowed:
        raise TypeError("evolve() got a name that is not a field.")
    made: T = copy(obj, changes)
    return made
