"""Compiling a functions file and calling its functions across the JSON boundary (03 §4–§6)."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from coordinator_core.functions.compiler import CompiledFn, Compiler, invoke
from coordinator_core.functions.errors import (
    CAUSES,
    CODE_ARITY,
    CODE_DEFINITION,
    CODE_EXECUTION,
    CODE_INPUT,
    CODE_JSON,
    CODE_OUTPUT,
    CODE_RESOURCE_LIMIT,
    CODE_SOURCE_LIMIT,
    CODE_VALUE_LIMIT,
    HINT_SOURCE,
    FunctionError,
    LimitError,
    OutputError,
    ParseError,
    ScriptError,
    compile_hint,
)
from coordinator_core.functions.lexer import tokenize
from coordinator_core.functions.parser import Parser
from coordinator_core.functions.rvalues import MAX_I64, MIN_I64, Char, Ctx
from coordinator_core.limits import (
    FUNCTION_MAX_ARGUMENTS,
    FUNCTION_MAX_FUNCTIONS,
    FUNCTION_MAX_SOURCE_BYTES,
    JSON_MAX_DEPTH,
    JSON_MAX_NODES,
)
from coordinator_core.values import JsonBoundsError, check_json_value

# Python frames needed in the worst case: 33 script call levels, each nesting at most 64
# parse levels of blocks and expressions (a few frames each), plus deep values. The limit is
# only ever raised, never lowered, and a RecursionError still maps to a resource limit.
RECURSION_LIMIT: Final = 10_000

MSG_SOURCE_LIMIT: Final = f"The functions source is larger than {FUNCTION_MAX_SOURCE_BYTES} bytes."
MSG_NOT_UTF8: Final = "The functions source is not valid UTF-8 text."
MSG_TOO_MANY: Final = f"More than {FUNCTION_MAX_FUNCTIONS} functions are defined."
MSG_TOO_MANY_ARGUMENTS: Final = f"A call may pass at most {FUNCTION_MAX_ARGUMENTS} arguments."
MSG_ARITY: Final = "The number of arguments differs from the function's parameter count."
MSG_INPUT: Final = "An argument breaks the JSON value bounds."
MSG_EXECUTION: Final = "The function failed during execution."
MSG_RESOURCE: Final = "The function exceeded an operation, call-depth or data-size limit."
MSG_OUTPUT: Final = "The result has no JSON form (a range, iterator or function pointer)."
MSG_VALUE_LIMIT: Final = "The result breaks the JSON value bounds."
MSG_JSON: Final = "The result contains an integer that binary64 cannot represent exactly."
MSG_INTERNAL: Final = "The functions source could not be compiled."


@dataclass(frozen=True)
class FunctionInfo:
    """One defined function; `line`/`column` locate its `fn` (or `private`) keyword."""

    name: str
    parameters: int
    private: bool
    line: int
    column: int


@dataclass(frozen=True)
class CompileResult:
    program: CompiledFunctions | None
    errors: tuple[FunctionError, ...]


class _ValueLimit(Exception):
    pass


def _from_json(v: Any) -> Any:
    """JSON argument → interpreter value (rhai-subset §11); bounds already checked."""
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, int):
        n = int(v)
        return n if MIN_I64 <= n <= MAX_I64 else float(n)
    if isinstance(v, float):
        return float(v)
    if isinstance(v, str):
        return str(v)
    if isinstance(v, list):
        return [_from_json(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _from_json(x) for k, x in v.items()}
    raise _ValueLimit  # pragma: no cover - check_json_value refuses every other type


def _to_json(v: Any, depth: int, nodes: list[int]) -> Any:
    """Interpreter value → JSON (maps with keys in byte order, NaN/inf → null)."""
    nodes[0] += 1
    if nodes[0] > JSON_MAX_NODES or depth > JSON_MAX_DEPTH:
        raise _ValueLimit
    t = type(v)
    if v is None or t is bool or t is int or t is str:
        return v
    if t is float:
        return v if v - v == 0.0 else None
    if t is Char:
        return v.c
    if t is list:
        return [_to_json(x, depth + 1, nodes) for x in v]
    if t is dict:
        return {k: _to_json(v[k], depth + 1, nodes) for k in sorted(v)}
    raise OutputError


def _ensure_recursion_limit() -> None:
    if sys.getrecursionlimit() < RECURSION_LIMIT:
        sys.setrecursionlimit(RECURSION_LIMIT)


# Raised once at import so that the limit does not change under a caller mid-way (and again
# per call, in case someone lowered it since).
_ensure_recursion_limit()


@dataclass(frozen=True)
class UnresolvedCall:
    """A call of `name` with `arguments` arguments (a method call counts its receiver) that
    nothing defines: it fails whenever it runs. `line`/`column` locate it."""

    name: str
    arguments: int
    line: int
    column: int


class CompiledFunctions:
    """An immutable compiled functions file; every call gets a fresh scope and budgets.
    `unresolved_calls` lists the calls of the file that always fail when reached."""

    __slots__ = ("_fn_names", "_fns", "functions", "unresolved_calls")

    def __init__(
        self, fns: dict[str, CompiledFn], unresolved: tuple[UnresolvedCall, ...] = ()
    ) -> None:
        self._fns = dict(fns)
        self._fn_names = frozenset(fns)
        self.unresolved_calls = unresolved
        self.functions: Mapping[str, FunctionInfo] = MappingProxyType(
            {
                name: FunctionInfo(name, fn.nparams, fn.private, fn.line, fn.column)
                for name, fn in fns.items()
            }
        )

    def call(self, name: str, arguments: Sequence[object]) -> object:
        """Run public function `name` on JSON arguments; return its JSON result.

        Refusals, in the order checked: `.definition` (no public function of that name),
        `.arity` (more than 16 arguments, or not the parameter count), `.input` (an argument
        breaks the JSON bounds), `.execution` / `.resource-limit` (during the call), then
        `.output` / `.value-limit` / `.json` for the result (03 §5–§6).
        """
        fn = self._fns.get(name)
        if fn is None or fn.private:
            raise FunctionError(CODE_DEFINITION, f"No public function named '{name}' is defined.")
        args = list(arguments)
        if len(args) > FUNCTION_MAX_ARGUMENTS:
            raise FunctionError(CODE_ARITY, MSG_TOO_MANY_ARGUMENTS)
        if len(args) != fn.nparams:
            raise FunctionError(CODE_ARITY, MSG_ARITY)

        converted: list[Any] = []
        for arg in args:
            try:
                check_json_value(arg)
                converted.append(_from_json(arg))
            except (JsonBoundsError, _ValueLimit, RecursionError):
                raise FunctionError(CODE_INPUT, MSG_INPUT) from None

        _ensure_recursion_limit()
        ctx = Ctx(self._fn_names)
        try:
            result = invoke(fn, converted, ctx)
        except LimitError as error:
            raise _failed(CODE_RESOURCE_LIMIT, error.cause, error.function or name) from None
        except ScriptError as error:
            # The cause, the function that was running and the failing statement's position
            # (03 §10 recommends it; never a value).
            raise _failed(
                CODE_EXECUTION, error.cause, error.function or name, error.line, error.column
            ) from None
        except RecursionError:
            raise _failed(CODE_RESOURCE_LIMIT, "call-depth", name) from None
        except MemoryError:
            raise _failed(CODE_RESOURCE_LIMIT, "data-size", name) from None
        except Exception:
            raise _failed(CODE_EXECUTION, "other", name) from None

        try:
            output = _to_json(result, 0, [0])
        except OutputError:
            raise FunctionError(CODE_OUTPUT, MSG_OUTPUT) from None
        except (_ValueLimit, RecursionError):
            raise FunctionError(CODE_VALUE_LIMIT, MSG_VALUE_LIMIT) from None
        try:
            check_json_value(output)
        except JsonBoundsError as error:
            if error.kind == "integer":
                raise FunctionError(CODE_JSON, MSG_JSON) from None
            raise FunctionError(CODE_VALUE_LIMIT, MSG_VALUE_LIMIT) from None
        return output


def _failed(
    code: str,
    cause: str,
    function: str,
    line: int | None = None,
    column: int | None = None,
) -> FunctionError:
    """The FunctionError of a failed call: its cause in a fixed clause, the function that was
    running, the statement's position when known, and the cause's repair hint."""
    clause, hint = CAUSES.get(cause, CAUSES["other"])
    if code == CODE_EXECUTION:
        message = f"Function {function} failed during execution: {clause}."
    else:
        message = f"Function {function} exceeded a limit: {clause}."
    return FunctionError(code, message, line, column, hint, cause=cause, function=function)


def _position(source: str, offset: int) -> tuple[int, int]:
    line = source.count("\n", 0, offset) + 1
    start = source.rfind("\n", 0, offset) + 1
    return line, offset - start + 1


def compile_functions(source: str) -> CompileResult:
    """Compile a functions file: every compile error found, in source order, or a program."""
    try:
        size = len(source.encode("utf-8"))
    except UnicodeEncodeError as error:
        line, column = _position(source, error.start)
        return CompileResult(
            None, (FunctionError(CODE_DEFINITION, MSG_NOT_UTF8, line, column, HINT_SOURCE),)
        )
    if size > FUNCTION_MAX_SOURCE_BYTES:
        return CompileResult(None, (FunctionError(CODE_SOURCE_LIMIT, MSG_SOURCE_LIMIT),))
    try:
        errors, fns, unresolved = _compile(source)
    except (RecursionError, MemoryError):
        return CompileResult(None, (FunctionError(CODE_DEFINITION, MSG_INTERNAL, 1, 1),))
    if errors:
        ordered = sorted(errors, key=lambda e: (e.line, e.column))
        unique: list[FunctionError] = []
        seen: set[tuple[int, int, str]] = set()
        for e in ordered:
            key = (e.line, e.column, e.message)
            if key not in seen:
                seen.add(key)
                unique.append(
                    FunctionError(
                        CODE_DEFINITION, e.message, e.line, e.column, compile_hint(e.message)
                    )
                )
        return CompileResult(None, tuple(unique))
    return CompileResult(CompiledFunctions(fns, unresolved), ())


def _compile(
    source: str,
) -> tuple[list[ParseError], dict[str, CompiledFn], tuple[UnresolvedCall, ...]]:
    parser = Parser(tokenize(source))
    parser.parse_file()
    errors = list(parser.errors)
    seen: set[str] = set()
    for index, header in enumerate(parser.headers):
        if index == FUNCTION_MAX_FUNCTIONS:
            errors.append(ParseError(MSG_TOO_MANY, header.line, header.column))
        if header.name in seen:
            errors.append(
                ParseError(
                    f"The function '{header.name}' is defined more than once.",
                    header.line,
                    header.column,
                )
            )
        seen.add(header.name)
    fns: dict[str, CompiledFn] = {}
    compiled: list[tuple[CompiledFn, Any]] = []
    for definition in parser.functions:
        fn = CompiledFn(definition)
        fns.setdefault(definition.name, fn)
        compiled.append((fn, definition))
    compiler = Compiler(fns)
    for fn, definition in compiled:
        compiler.compile_function(definition, fn)
    compiler.compile_top_level(parser.top)
    errors.extend(compiler.errors)
    unresolved = tuple(
        UnresolvedCall(name, arguments, line, column)
        for name, arguments, line, column in sorted(
            compiler.unknown_calls, key=lambda call: (call[2], call[3])
        )
    )
    return errors, fns, unresolved
