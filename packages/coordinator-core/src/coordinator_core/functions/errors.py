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


# The closed set of causes of a failed call (`coordinator.function.execution` and
# `coordinator.function.resource-limit`): each with a fixed clause for the message and a fixed
# repair hint. A cause names what went wrong by kind, never by value.
CAUSES: Final[dict[str, tuple[str, str]]] = {
    "property-of-unit": (
        "it read a property of unit `()`, the value of a missing member",
        "Read through a member that may be missing with `?.` (`x?.a?.b`), or compare it with"
        " `()` first: a missing member reads `()`, and `()` has no properties.",
    ),
    "unknown-property": (
        "it read a property that a value of this type does not have",
        'Read properties of object maps only (`m.key` or `m["key"]`); other values have only'
        " the getters of rhai-subset.md §6.5, and methods need parentheses (`a.len()`).",
    ),
    "index-out-of-range": (
        "it indexed an array or a string past its end",
        "Check the length (`a.len()`) before indexing, or read with `a.get(i)`, which gives `()`"
        " out of range.",
    ),
    "type-mismatch": (
        "an operator or a library function got a value of a type it does not take",
        "Check the type with `type_of(x)` first; there is no `string + number` (write"
        " `` `${x}` ``) and arrays and maps have no ordering.",
    ),
    "non-boolean-condition": (
        "a condition or a logical operand was not a boolean",
        "Compare explicitly (`x == true`, `x != ()`): conditions and `&&`, `||`, `!` take"
        " booleans only, and nothing is truthy.",
    ),
    "arithmetic-overflow": (
        "an integer operation overflowed 64 bits",
        "Keep integers within 64 bits, or compute in floats (`x * 1.0`) where precision allows.",
    ),
    "division-by-zero": (
        "it divided an integer by zero",
        "Check the divisor before dividing (`if d != 0 { … }`).",
    ),
    "unknown-function": (
        "it called a function that is defined neither in functions.rhai nor, for these"
        " arguments, in the function library",
        "Use the functions of the subset (rhai-subset.md §9: no clock, no math, no string"
        " library) or define the function; `coordinatorctl check` warns about such calls.",
    ),
    "unknown-variable": (
        "it read a variable that is not defined",
        "Declare the variable with `let` before reading it; a function sees only its parameters"
        " and its own variables.",
    ),
    "thrown": (
        "the script threw a value",
        "The function refused these arguments on purpose (`throw`): give it arguments it"
        " accepts, or catch the throw with `try`/`catch`.",
    ),
    "not-iterable": (
        "`for` was given a value that cannot be iterated",
        "Iterate arrays, strings and ranges; for a map iterate `m.keys()` or `m.values()`.",
    ),
    "invalid-argument": (
        "a library function refused one of its arguments",
        "Check the arguments of the library call against rhai-subset.md §9.",
    ),
    "unbound-this": (
        "it used `this` in a function that was not called as a method",
        "Call the function as a method (`value.f()`) or pass the value as a parameter.",
    ),
    "constant-assignment": (
        "it assigned to a constant",
        "Declare the variable with `let` instead of `const`.",
    ),
    "out-of-subset": (
        "it used a construct outside the function subset",
        "Remove the construct (function pointers, `call`, `curry`, …, rhai-subset.md §13).",
    ),
    "operation-budget": (
        "it used up its budget of 100,000 operations",
        "Bound the loops: iterate over the data, not over large ranges, and avoid nested loops"
        " over the same input.",
    ),
    "call-depth": (
        "its script calls nested deeper than 32 levels",
        "Replace deep recursion by a loop.",
    ),
    "data-size": (
        "a value it built exceeded 16,384 string bytes, 256 array items or 256 map entries",
        "Build smaller values: keep strings below 16,384 bytes and arrays and maps below 256"
        " entries, counted over all nesting levels.",
    ),
    "other": (
        "it failed in a way the function language reports as an execution error",
        "Reproduce the call with `coordinatorctl eval` and guard the failing statement.",
    ),
}

# The cause of each fixed runtime message (a raise site may name its cause itself).
_CAUSE_OF_MESSAGE: Final[dict[str, str]] = {
    "Property not found.": "unknown-property",
    "A value has the wrong type for this operation.": "type-mismatch",
    "These values cannot be ordered.": "type-mismatch",
    "This value cannot be indexed.": "type-mismatch",
    "An array of mixed types cannot be sorted.": "type-mismatch",
    "An array of these values cannot be sorted.": "type-mismatch",
    # A library function or operator that exists, given arguments of types it does not take
    # (a call of a name nothing defines is `unknown-function`, named where it is compiled).
    "Function not found for the given argument types.": "type-mismatch",
    "Variable not found.": "unknown-variable",
    "Index out of bounds.": "index-out-of-range",
    "Arithmetic overflow.": "arithmetic-overflow",
    "Division by zero.": "division-by-zero",
    "An integer cannot be raised to a negative power.": "invalid-argument",
    "The sign of NaN is undefined.": "invalid-argument",
    "The step of a range cannot be zero.": "invalid-argument",
    "This value cannot be iterated by 'for'.": "not-iterable",
    "A value was thrown by the script.": "thrown",
    "'this' is not bound: the function was not called as a method.": "unbound-this",
    "A constant cannot be modified.": "constant-assignment",
    "Function pointers are not permitted.": "out-of-subset",
}
_CAUSE_OF_LIMIT: Final[dict[str, str]] = {
    "operations": "operation-budget",
    "calls": "call-depth",
    "data": "data-size",
    "array": "data-size",
    "string": "data-size",
    "map": "data-size",
}


class FunctionError(Exception):
    """A refusal of the pure-function boundary: one code and a fixed sentence.

    The message never quotes a runtime value, a thrown value or source text; it may name a
    function or a construct. `line`/`column` (1-based) are set for compile-time errors and for
    an execution error (the failing statement). A failed call also carries its `cause` (a key
    of `CAUSES`) and the `function` that was running when it failed.
    """

    code: str
    message: str
    line: int | None
    column: int | None
    hint: str | None
    cause: str | None
    function: str | None

    def __init__(
        self,
        code: str,
        message: str,
        line: int | None = None,
        column: int | None = None,
        hint: str | None = None,
        *,
        cause: str | None = None,
        function: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.line = line
        self.column = column
        self.hint = hint
        self.cause = cause
        self.function = function

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
    """A catchable runtime error (`throw` or any non-resource failure). `cause` is a key of
    `CAUSES` (by default the one of its fixed message); `function`, `line` and `column` are set
    where it is raised, by the innermost script function and statement."""

    def __init__(
        self, message: str, value: Any = None, thrown: bool = False, *, cause: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.value = value
        self.thrown = thrown
        self.cause = cause or _CAUSE_OF_MESSAGE.get(message, "other")
        self.function: str | None = None
        self.line: int | None = None
        self.column: int | None = None


class LimitError(Exception):
    """A resource limit: aborts the whole call and is never caught by script `try`. Its
    argument names the limit (`operations`, `calls`, `data`, `array`, `string`, `map`)."""

    function: str | None = None

    @property
    def cause(self) -> str:
        return _CAUSE_OF_LIMIT.get(str(self.args[0]) if self.args else "", "data-size")


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
