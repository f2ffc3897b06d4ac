"""The public FunctionError, its codes, and the interpreter's internal signals."""

from __future__ import annotations

from typing import Any, Final

CODE_DEFINITION: Final = "coordinator.function.definition"
CODE_ARITY: Final = "coordinator.function.arity"
CODE_SOURCE_LIMIT: Final = "coordinator.function.source-limit"
CODE_EXECUTION: Final = "coordinator.function.execution"
CODE_RESOURCE_LIMIT: Final = "coordinator.function.resource-limit"
CODE_VALUE_LIMIT: Final = "coordinator.function.value-limit"
CODE_INPUT: Final = "coordinator.function.input"
CODE_OUTPUT: Final = "coordinator.function.output"
CODE_JSON: Final = "coordinator.function.json"


# The repair hint of each kind of compile-time refusal: all are `coordinator.function.definition`
# (contract 02 §5.5 F2–F3), but a syntax error, a reserved word, a disabled feature and a
# duplicate definition are repaired differently. Every hint is a fixed sentence.
HINT_SYNTAX: Final = (
    "Correct the syntax at the reported position; the function language is the Rhai subset "
    "described in docs/functions.md."
)
HINT_RESERVED: Final = (
    "Rename the variable, parameter or function: reserved words of the function language "
    "cannot be used as names."
)
HINT_NOT_PERMITTED: Final = (
    "Remove the construct: pure functions cannot use `print`, `debug`, `eval`, `import`, "
    "`export`, closures or function pointers; compute the value from the parameters instead."
)
HINT_DEFINITIONS: Final = (
    "Give every function a distinct name and keep to at most 128 functions in functions.rhai."
)
HINT_SOURCE: Final = "Save functions.rhai as UTF-8 text."

_RESERVED_SUFFIX: Final = "is a reserved word of the function language; rename the variable."


def compile_hint(message: str) -> str:
    """The repair hint for a compile-time refusal with this fixed message."""
    if message.endswith(_RESERVED_SUFFIX) or message == "A reserved keyword cannot be used here.":
        return HINT_RESERVED
    if "not permitted" in message:
        return HINT_NOT_PERMITTED
    if message.startswith("More than 128 functions") or message.endswith("more than once."):
        return HINT_DEFINITIONS
    if "UTF-8" in message:
        return HINT_SOURCE
    return HINT_SYNTAX


class FunctionError(Exception):
    """A refusal of the pure-function boundary: one code and a fixed sentence.

    The message never quotes a runtime value, a thrown value or source text; it may name a
    function or a construct. `line`/`column` (1-based) are set for compile-time errors.
    """

    code: str
    message: str
    line: int | None
    column: int | None
    hint: str | None

    def __init__(
        self,
        code: str,
        message: str,
        line: int | None = None,
        column: int | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.line = line
        self.column = column
        self.hint = hint

    def __repr__(self) -> str:
        where = "" if self.line is None else f" at {self.line}:{self.column}"
        return f"FunctionError({self.code}{where}: {self.message})"


class ParseError(Exception):
    """A compile-time refusal with a position; becomes a `.definition` FunctionError."""

    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column


class ScriptError(Exception):
    """A catchable runtime error (`throw` or any non-resource failure)."""

    def __init__(self, message: str, value: Any = None, thrown: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.value = value
        self.thrown = thrown
        self.line: int | None = None
        self.column: int | None = None


class LimitError(Exception):
    """A resource limit: aborts the whole call and is never caught by script `try`."""


class OutputError(Exception):
    """A result value that has no JSON form (range, iterator)."""


# Control flow travels as exceptions so that the common path (no break/return) costs nothing.
class BreakSignal(Exception):
    def __init__(self, value: Any) -> None:
        self.value = value


class ContinueSignal(Exception):
    pass


class ReturnSignal(Exception):
    def __init__(self, value: Any) -> None:
        self.value = value
