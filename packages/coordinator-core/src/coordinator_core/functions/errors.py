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


class FunctionError(Exception):
    """A refusal of the pure-function boundary: one code and a fixed sentence.

    The message never quotes a runtime value, a thrown value or source text; it may name a
    function or a construct. `line`/`column` (1-based) are set for compile-time errors.
    """

    code: str
    message: str
    line: int | None
    column: int | None

    def __init__(
        self, code: str, message: str, line: int | None = None, column: int | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.line = line
        self.column = column

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
