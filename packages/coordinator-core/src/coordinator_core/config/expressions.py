"""Environment expressions of runtime.yaml (contract 05 §3): grammar, substitution, stand-ins."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "Expression",
    "ExpressionSyntaxError",
    "StandIns",
    "UnsetVariableError",
    "contains_expression",
    "parse_expressions",
    "substitute",
]

_OPENER: Final = "${"
_NAME: Final = re.compile(r"[A-Z_][A-Z0-9_]*")

Operator = Literal["", ":-", ":?"]


@dataclass(frozen=True, slots=True)
class Expression:
    """One `${…}` occurrence: `text[start:end]` is the whole expression."""

    name: str
    operator: Operator
    argument: str
    start: int
    end: int


class ExpressionSyntaxError(ValueError):
    """A `${` that does not start a well-formed expression (the text is never quoted)."""


class UnsetVariableError(LookupError):
    """A `${VAR}` or `${VAR:?…}` whose variable is unset or empty.

    Carries only the variable's name, which is structural; the `:?` message is the operator's
    and never leaves this module.
    """

    def __init__(self, name: str) -> None:
        super().__init__("an environment variable the runtime file needs is unset or empty")
        self.name = name


def contains_expression(text: str) -> bool:
    """Whether `text` holds at least one `${` (well formed or not)."""
    return _OPENER in text


def parse_expressions(text: str) -> list[Expression]:
    """Every expression of `text`, left to right.

    An expression runs from `${` to the first `}`: there is no nesting and no escape syntax, so
    a `${` inside an expression's default or message is refused rather than guessed at.
    """
    found: list[Expression] = []
    position = 0
    while True:
        start = text.find(_OPENER, position)
        if start < 0:
            return found
        close = text.find("}", start + 2)
        if close < 0:
            raise ExpressionSyntaxError("an environment expression is not closed")
        body = text[start + 2 : close]
        if _OPENER in body:
            raise ExpressionSyntaxError("environment expressions do not nest")
        name_match = _NAME.match(body)
        if name_match is None:
            raise ExpressionSyntaxError("an environment expression does not start with a name")
        name = name_match.group(0)
        rest = body[name_match.end() :]
        operator: Operator
        if rest == "":
            operator, argument = "", ""
        elif rest.startswith(":-"):
            operator, argument = ":-", rest[2:]
        elif rest.startswith(":?"):
            operator, argument = ":?", rest[2:]
        else:
            raise ExpressionSyntaxError("an environment expression has an unknown operator")
        found.append(Expression(name, operator, argument, start, close + 1))
        position = close + 1


def substitute(text: str, environment: Mapping[str, str]) -> str:
    """`text` with every expression replaced once from `environment`.

    Substituted text is never scanned again, so a value that itself contains `${` stays as it
    is. Raises ExpressionSyntaxError or UnsetVariableError (for the first unset variable).
    """
    pieces: list[str] = []
    position = 0
    for expression in parse_expressions(text):
        pieces.append(text[position : expression.start])
        value = environment.get(expression.name, "")
        if value == "":
            if expression.operator != ":-":
                raise UnsetVariableError(expression.name)
            value = expression.argument
        pieces.append(value)
        position = expression.end
    pieces.append(text[position:])
    return "".join(pieces)


# Stand-ins by the last segment of the member's pointer (contract 05 §3, item 3). Each is a
# value every offline rule would accept, so nothing is reported about text nobody can see yet.
_STAND_IN_BY_MEMBER: Final[Mapping[str, str]] = {
    "baseUrl": "https://stand-in.invalid",
    "tokenEndpoint": "https://stand-in.invalid",
    "issuer": "https://stand-in.invalid",
    "uri": "https://stand-in.invalid",
    "resource": "urn:example:stand-in",
    "clientAssertionAudience": "urn:example:stand-in",
    "audience": "urn:example:stand-in",
    "source": "urn:example:stand-in",
    "namespace": "coordinator_stand_in",
    "root": "/stand-in",
    "path": "/stand-in",
    "auditDirectory": "/stand-in",
    "restoreWitness": "/stand-in",
    "bind": "127.0.0.1:9",
    "expectedDigest": "sha256:" + "0" * 64,
}


class StandIns:
    """Chooses the offline stand-in of each string that holds an expression.

    One instance serves one document: the generic stand-ins are numbered in the order their
    distinct texts are first met (`deferred`, `deferred-2`, …), so equal texts get equal
    stand-ins and uniqueness rules still see two copies of one expression as duplicates.
    """

    def __init__(self) -> None:
        self._generic: dict[str, str] = {}

    def for_member(self, pointer: str, text: str) -> str:
        """The stand-in of `text` held by the member at `pointer`."""
        last = pointer.rsplit("/", 1)[-1]
        specific = _STAND_IN_BY_MEMBER.get(last)
        if specific is not None:
            return specific
        existing = self._generic.get(text)
        if existing is not None:
            return existing
        count = len(self._generic) + 1
        stand_in = "deferred" if count == 1 else f"deferred-{count}"
        self._generic[text] = stand_in
        return stand_in
