"""Where a value fails its schema, said without the value: the `violations` of a refusal.

A refused request body or run input names at most `MAX_VIOLATIONS` places, each the failing
instance location (a JSON pointer), the keyword that failed and, for `required`,
`additionalProperties` and `unevaluatedProperties`, the member names concerned (a missing
member's name comes from the schema; an unknown member's name is the caller's own key, which is
a name and not a value, and is shown only when printable and at most `MAX_NAME_CHARS` long;
a pointer stops at the parent of a member name that is not). Nothing here reads a value.

`violations_of` reads the errors of a `jsonschema` validator's `iter_errors` (the dialect's);
the API's body validator (pydantic) builds its violations with `Violation.at` and
`first_violations`, so both name places alike. Neither imports a validator here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from coordinator_core.values import pointer_token

__all__ = ["MAX_NAME_CHARS", "MAX_VIOLATIONS", "Violation", "first_violations", "violations_of"]

MAX_VIOLATIONS: Final = 10
MAX_MEMBERS: Final = 10
MAX_NAME_CHARS: Final = 128
_KEYWORD: Final = re.compile(r"[$A-Za-z][A-Za-z0-9]{0,63}")
_MEMBER_KEYWORDS: Final = frozenset({"additionalProperties", "unevaluatedProperties"})


@dataclass(frozen=True, slots=True, order=True)
class Violation:
    """One failing place: instance pointer, keyword, member names (never a value)."""

    path: str
    keyword: str
    members: tuple[str, ...] = ()

    @classmethod
    def at(cls, location: Iterable[Any], keyword: str, members: Iterable[str] = ()) -> Violation:
        """The violation at an instance location (member names and array indexes): its pointer
        stops before a member name that is not shown; the shown `members`, sorted, at most
        `MAX_MEMBERS`."""
        shown = sorted({name for name in members if _shown(name)})
        return cls(_pointer(location), keyword, tuple(shown[:MAX_MEMBERS]))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "keyword": self.keyword}
        if self.members:
            out["members"] = list(self.members)
        return out

    def sentence(self, subject: str) -> str:
        """A fixed sentence about this place, for a diagnostic: `subject` is what failed
        (`The run input`, `The request body`); the place itself is the diagnostic's path."""
        names = ", ".join(f"`{name}`" for name in self.members)
        noun = "member" if len(self.members) == 1 else "members"
        if self.keyword == "required" and names:
            return f"{subject} lacks the required {noun} {names} here."
        if self.keyword in _MEMBER_KEYWORDS and names:
            return f"{subject} has the {noun} {names} here, which its schema does not allow."
        return f"{subject} fails the schema keyword `{self.keyword}` here."


def _shown(name: str) -> bool:
    return 0 < len(name) <= MAX_NAME_CHARS and name.isprintable()


def _pointer(tokens: Iterable[Any]) -> str:
    """The JSON pointer of an instance location, cut before a member name not shown."""
    path = ""
    for token in tokens:
        if isinstance(token, int) and not isinstance(token, bool):
            path += f"/{token}"
        elif isinstance(token, str) and _shown(token):
            path += "/" + pointer_token(token)
        else:
            break
    return path


def _members(error: Any) -> list[str]:
    keyword, instance, schema = error.validator, error.instance, error.schema
    names: list[str] = []
    if keyword == "required" and isinstance(instance, dict) and isinstance(schema, Mapping):
        names = [n for n in schema.get("required", ()) if isinstance(n, str) and n not in instance]
    elif keyword in _MEMBER_KEYWORDS and isinstance(instance, dict) and isinstance(schema, Mapping):
        declared = schema.get("properties") or {}
        patterns = [p for p in (schema.get("patternProperties") or {}) if isinstance(p, str)]
        for name in instance:
            if name in declared or any(_search(p, name) for p in patterns):
                continue
            names.append(name)
    return names


def _search(pattern: str, name: str) -> bool:
    try:
        return re.search(pattern, name) is not None
    except re.error:
        return False


def first_violations(found: Iterable[Violation]) -> tuple[Violation, ...]:
    """At most `MAX_VIOLATIONS` distinct violations, in pointer order."""
    return tuple(sorted(set(found))[:MAX_VIOLATIONS])


def violations_of(errors: Iterable[Any]) -> tuple[Violation, ...]:
    """At most `MAX_VIOLATIONS` distinct violations of `jsonschema` errors, in pointer order."""
    return first_violations(
        Violation.at(error.absolute_path, error.validator, _members(error))
        for error in errors
        if isinstance(error.validator, str) and _KEYWORD.fullmatch(error.validator) is not None
    )
