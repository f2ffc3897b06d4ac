"""A failed call carries its cause class, the function that was running and the failing
statement (issue 26; 03 §6: no value ever crosses the boundary). And a call that nothing
defines is known at compile time, for `check` to warn about."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator_core.functions import FunctionError, UnresolvedCall, compile_functions
from coordinator_core.functions.errors import CAUSES

CANARY = "CANARY-cause-17"


def _failure(source: str, name: str, *args: Any) -> FunctionError:
    compiled = compile_functions(source)
    assert compiled.program is not None, compiled.errors
    with pytest.raises(FunctionError) as caught:
        compiled.program.call(name, list(args))
    return caught.value


@pytest.mark.parametrize(
    ("body", "args", "code", "cause", "column"),  # a binary expression: at its operator
    [
        ("x.a.b", [{}], "execution", "property-of-unit", 11),
        ('x["a"]["b"]', [{}], "execution", "property-of-unit", 11),
        ("x.len", [5], "execution", "unknown-property", 11),
        ("x[3]", [[1]], "execution", "index-out-of-range", 11),
        ("x + 1", ["s"], "execution", "type-mismatch", 13),
        ("if x { 1 } else { 2 }", [1], "execution", "non-boolean-condition", 11),
        ("x * 4611686018427387904", [4], "execution", "arithmetic-overflow", 13),
        ("x / 0", [1], "execution", "division-by-zero", 13),
        ("timestamp()", [1], "execution", "unknown-function", 11),
        ("y", [1], "execution", "unknown-variable", 11),
        ("throw x;", [CANARY], "execution", "thrown", 11),
        ("for i in x { }", [{}], "execution", "not-iterable", 11),
        ("let t = 0; loop { t += 1; }", [1], "resource-limit", "operation-budget", None),
        ('let s = "aaaaaaaaaaaaaaaa"; loop { s += s; }', [1], "resource-limit", "data-size", None),
    ],
)
def test_each_failure_names_its_cause(
    body: str, args: list[Any], code: str, cause: str, column: int | None
) -> None:
    error = _failure(f"fn f(x) {{ {body} }}", "f", *args)
    assert error.code == f"coordinator.function.{code}"
    assert (error.cause, error.function) == (cause, "f")
    assert (error.line, error.column) == ((1, column) if column is not None else (None, None))
    clause, hint = CAUSES[cause]
    assert clause in error.message and error.message.startswith("Function f ")
    assert error.hint == hint
    assert CANARY not in error.message


def test_the_innermost_function_and_statement_are_named() -> None:
    source = "fn outer(x) {\n    let y = 1;\n    inner(x)\n}\nprivate fn inner(x) {\n    x.a.b\n}\n"
    error = _failure(source, "outer", {})
    assert (error.function, error.line, error.column) == ("inner", 6, 5)
    deep = _failure("fn f(n) { f(n + 1) }", "f", 0)
    assert (deep.code, deep.cause, deep.function) == (
        "coordinator.function.resource-limit",
        "call-depth",
        "f",
    )


def test_a_caught_failure_is_not_a_failure() -> None:
    compiled = compile_functions("fn f(x) { try { x.a.b } catch { } ; 1 }")
    assert compiled.program is not None and compiled.program.call("f", [{}]) == 1


def test_calls_that_nothing_defines_are_listed_at_compile_time() -> None:
    compiled = compile_functions(
        "fn f(x) {\n"
        "    let now = timestamp();\n"
        "    let n = x.size();\n"
        "    helper(1, 2);\n"
        "    type_of(x, x)\n"
        "}\n"
        "fn helper(a) { a }\n"
        'let never = parse_int("1");\n'  # top level: parsed, never run
    )
    assert compiled.program is not None
    assert compiled.program.unresolved_calls == (
        UnresolvedCall("timestamp", 0, 2, 15),
        UnresolvedCall("size", 1, 3, 15),
        UnresolvedCall("helper", 2, 4, 5),
        UnresolvedCall("type_of", 2, 5, 5),
    )
    fine = compile_functions("fn f(x) { x.len() + [1].len() + abs(-1) + max(1, 2) }")
    assert fine.program is not None and fine.program.unresolved_calls == ()
