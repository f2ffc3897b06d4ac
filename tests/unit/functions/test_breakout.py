"""Trying to break out: hostile scripts and inputs are refused with the right category.

Nothing reaches Python objects or builtins, nothing runs unbounded, no Python exception
escapes, and no refusal message repeats a runtime value, a thrown value or source text. A script
that ran unbounded would reach the test's timeout (the unit tier's, tests/conftest.py), far
above anything a bounded interpreter needs: a hang detector, not a speed measure.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

from coordinator_core.functions import FunctionError, compile_functions

DEFINITION = "coordinator.function.definition"
EXECUTION = "coordinator.function.execution"
RESOURCE = "coordinator.function.resource-limit"
SOURCE_LIMIT = "coordinator.function.source-limit"
INPUT = "coordinator.function.input"
OUTPUT = "coordinator.function.output"
VALUE_LIMIT = "coordinator.function.value-limit"
JSON = "coordinator.function.json"


def nested_list(depth: int) -> list[object]:
    value: list[object] = []
    for _ in range(depth):
        value = [value]
    return value


def outcome(source: str, *args: object, name: str = "f") -> tuple[str, Any]:
    """("ok", result) or ("error", code); compile errors come back as their first code."""
    result = compile_functions(source)
    if result.program is None:
        return "error", result.errors[0].code
    try:
        return "ok", result.program.call(name, list(args))
    except FunctionError as error:
        return "error", error.code


def refused(source: str, code: str, *args: object) -> None:
    assert outcome(source, *args) == ("error", code)


# ------------------------------------------------------------- Python attribute access


@pytest.mark.parametrize(
    "expression",
    [
        '"".__class__',
        "1.__class__",
        "1.5.__class__",
        "[].__class__",
        "(1..2).__class__",
        "'c'.__class__",
        '"".__class__.__bases__',
        "[].__len__()",
        '"a".__add__("b")',
        "[].__setitem__(0, 1)",
        "#{}.__init__()",
        "this.__dict__",
        "this.__class__.__subclasses__()",
        "1.real",
        "1.5.is_integer()",
        '"a".upper()',
        '"a".join([])',
        "[].append",
        "#{}.items()",
    ],
)
def test_python_attributes_are_never_reachable(expression: str) -> None:
    refused(f"fn f() {{ {expression} }}", EXECUTION)


def test_dunder_property_of_a_map_is_just_a_missing_key() -> None:
    assert outcome("fn f(x) { [x.__class__, x.__dict__, x?.__init__] }", {"a": 1}) == (
        "ok",
        [None, None, None],
    )
    assert outcome('fn f(x) { x.__class__ = 1; x["__dict__"] = 2; x }', {}) == (
        "ok",
        {"__class__": 1, "__dict__": 2},
    )


def test_this_dunder_inside_a_method_reads_only_map_keys() -> None:
    assert outcome("fn probe() { this.__dict__ } fn f(x) { x.probe() }", {"a": 1}) == ("ok", None)
    refused('fn probe() { this.__dict__ } fn f() { "s".probe() }', EXECUTION)


# --------------------------------------------------------------------- Python builtins


@pytest.mark.parametrize(
    "call",
    [
        '__import__("os")',
        'open("/etc/passwd")',
        'exec("1")',
        'compile("1", "f", "eval")',
        'getattr(1, "real")',
        'setattr(1, "a", 2)',
        "globals()",
        "locals()",
        "vars()",
        "dir()",
        "breakpoint()",
        "input()",
        "id(1)",
        "hash(1)",
        "object()",
        "type(1)",
        "bytes(1)",
        "memoryview(1)",
        "__builtins__",
        "os",
        "sys",
    ],
)
def test_python_builtins_are_unknown_names(call: str) -> None:
    refused(f"fn f() {{ {call} }}", EXECUTION)


@pytest.mark.parametrize(
    "source",
    [
        'fn f() { eval("1 + 1") }',
        "fn f() { print(1) }",
        "fn f() { debug(1) }",
        'import "os" as os; fn f() { 1 }',
        "export const X = 1; fn f() { 1 }",
        "fn f(x) { x.print() }",
        "fn f() { let eval = 1; eval }",
        "fn f() { #{print: 1} }",
        "fn f() { exit() }",
        'fn f() { Fn("f") }',
        'fn f() { call("f") }',
        "fn f() { curry(1) }",
        'fn f() { is_def_fn("f", 0) }',
        'fn f() { is_def_var("x") }',
        "fn f() { is_shared(1) }",
        "fn f(x) { x.call(1) }",
        "fn f(x) { x.curry(1) }",
        "fn f() { |x| x }",
        "fn f() { || 1 }",
        "fn f() { global::x }",
        "fn f() { os::system() }",
        "fn f() { g!(1) } fn g(x) { x }",
        "fn f() { fn g() { 1 } 1 }",
        "fn f() { let x = try { 1 } catch { 2 }; x }",
    ],
)
def test_disabled_symbols_closures_and_out_of_subset_forms_do_not_compile(source: str) -> None:
    refused(source, DEFINITION)


def test_bare_function_name_as_a_value_is_an_unknown_variable() -> None:
    refused("fn g() { 1 } fn f() { let p = g; p }", EXECUTION)


# ------------------------------------------------------------------------- blow-ups


@pytest.mark.parametrize(
    "source",
    [
        "fn f() { 2 ** 9223372036854775807 }",
        "fn f() { 10 ** 4294967295 }",
        "fn f() { 3 ** 40 }",
        "fn f() { let x = 2; loop { x *= x; } }",
        "fn f() { 9223372036854775807 + 1 }",
        "fn f() { (-9223372036854775807 - 1) / -1 }",
    ],
)
def test_integer_blowups_overflow_before_computing(source: str) -> None:
    refused(source, EXECUTION)


def test_float_blowups_saturate_to_infinity_and_return_null() -> None:
    assert outcome("fn f() { [2.0 ** 1e308, 10.0 ** 400, 1e308 * 10.0, -1e308 * 10.0] }") == (
        "ok",
        [None, None, None, None],
    )


@pytest.mark.parametrize(
    "source",
    [
        'fn f() { let s = "x"; loop { s += s; } }',
        'fn f() { let s = "0123456789abcdef"; for i in 0..2000 { s = s + s; } }',
        'fn f() { let s = "ab"; loop { s = `${s}${s}`; } }',
        "fn f() { let s = \"ab\"; loop { s = s + 'c' + s; } }",
        "fn f() { let a = [1]; loop { a += a; } }",
        "fn f() { let a = []; loop { a.push(a); } }",
        "fn f() { let a = []; loop { a = [a]; } }",
        "fn f() { let a = []; loop { a = [a, a]; } }",
        "fn f() { let m = #{}; loop { m = #{x: m, y: m}; } }",
        "fn f() { let m = #{}; let i = 0; loop { m[`k${i}`] = i; i += 1; m.len(); } }",
        "fn f() { let a = []; a.pad(1000000, 0); a }",
        'fn f() { let a = []; a.pad(256, "x".to_string() + "y"); a += a; a }',
        "fn f() { let a = [0]; loop { a[0] = a; } }",
    ],
)
def test_data_growth_hits_the_size_limits(source: str) -> None:
    refused(source, RESOURCE)


def test_string_repetition_does_not_exist_in_the_profile() -> None:
    refused('fn f() { "x" * 1000000000 }', EXECUTION)


# ---------------------------------------------------------------------- runaway code


@pytest.mark.parametrize(
    "source",
    [
        "fn f() { loop { } }",
        "fn f() { while true { } }",
        "fn f() { do { } while true; }",
        "fn f() { let i = 0; loop { i += 1; continue; } }",
        "fn f() { for i in 0..9223372036854775807 { } }",
        "fn f() { for i in range(0, 9223372036854775807, 1) { } }",
        "fn f() { for x in range(0.0, 1e300, 1e-300) { } }",
        "fn r(n) { r(n + 1) } fn f() { r(0) }",
        "fn a(n) { b(n) } fn b(n) { a(n) } fn f() { a(0) }",
        "fn r() { try { r() } catch { r() } } fn f() { r() }",
        "fn f() { try { loop { } } catch { 1 } }",
        "fn f() { let r = 0; try { f() } catch (e) { r = e; } r }",
        "fn w() { loop { } } fn f() { [1, 2, 3].index_of(w()) }",
    ],
)
def test_runaway_code_hits_the_operation_or_call_limit(source: str) -> None:
    refused(source, RESOURCE)


def test_recursion_to_the_call_level_limit_with_maximal_nesting_runs() -> None:
    """31 nested calls, each nested as deep as the parser allows, need far more Python frames
    than the default recursion limit; the interpreter must still answer, not crash."""
    body = "if true { " * 19 + "d(n - 1)" + " }" * 19
    source = "fn d(n) { if n <= 0 { return 0; } " + body + " }\nfn f(n) { d(n) }"
    limit = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(1000)
        assert outcome(source, 31) == ("ok", 0)
        assert outcome(source, 32) == ("error", RESOURCE)
    finally:
        sys.setrecursionlimit(max(limit, sys.getrecursionlimit()))


@pytest.mark.parametrize(
    "loop",
    [
        "if x == y { n += 1; }",
        "if x.to_string() != () { n += 1; }",
        "if x in [y, y] { n += 1; }",
        "switch x { [1] => 1, _ => 2 }",
        "let s = x.to_debug(); n += 1;",
        "if [x, y, x].index_of(y, 1) >= 0 { n += 1; }",
    ],
)
def test_builtin_work_on_large_inputs_is_charged(loop: str) -> None:
    """Built-ins that walk a whole value cost operations in proportion, so comparing or
    formatting the largest admissible input in a loop stays bounded in time."""
    big: list[object] = [{"k": "v" * 30, "n": [1.5, 2, True, None]} for _ in range(200)]
    refused(
        f"fn f(x, y) {{ let n = 0; loop {{ {loop} }} }}",
        RESOURCE,
        big,
        big,
    )


# ------------------------------------------------------------------- huge / deep source


def test_source_over_the_byte_limit_is_a_source_limit_without_position() -> None:
    result = compile_functions("fn f() { 1 }\n" + "// padding\n" * 6000)
    assert [(e.code, e.line, e.column) for e in result.errors] == [(SOURCE_LIMIT, None, None)]


def test_source_limit_counts_utf8_bytes_not_characters() -> None:
    text = "fn f() { 1 } // " + "é" * 32_761
    assert len(text) < 65_536 < len(text.encode())
    assert compile_functions(text).errors[0].code == SOURCE_LIMIT


def test_string_literal_over_the_string_limit_does_not_compile() -> None:
    assert outcome('fn f() { "' + "x" * 16_384 + '" }')[0] == "ok"
    refused('fn f() { "' + "x" * 16_385 + '" }', DEFINITION)
    refused("fn f() { `" + "é" * 8_193 + "` }", DEFINITION)


def test_huge_number_literals() -> None:
    assert outcome("fn f() { " + "9" * 5000 + " }") == ("ok", None)  # decimal overflow → inf
    refused("fn f() { 0x" + "f" * 17 + " }", DEFINITION)
    refused("fn f() { 0b" + "1" * 65 + " }", DEFINITION)


@pytest.mark.parametrize(
    ("opening", "closing"),
    [
        ("(", ")"),
        ("[", "]"),
        ("{", "}"),
        ("#{a:", "}"),
        ("if true {", "}"),
        ("`${", "}`"),
        ("-", ""),
        ("!", ""),
    ],
)
def test_ten_thousand_nested_constructs_are_a_depth_error(opening: str, closing: str) -> None:
    source = "fn f() { " + opening * 10_000 + "1" + closing * 10_000 + " }"
    if len(source.encode()) > 65_536:
        source = "fn f() { " + opening * 3_000 + "1" + closing * 3_000 + " }"
    refused(source, DEFINITION)


@pytest.mark.parametrize(
    "source",
    [
        "[" * 65_000,
        "(" * 65_000,
        "{" * 65_000,
        "fn f() { x" + ".a" * 30_000 + " }",
        "fn f() { x" + "[0]" * 20_000 + " }",
        "fn f() { 1" + " + 1" * 16_000 + " }",
        "fn f() { 2" + " ** 2" * 13_000 + " }",
        "fn f() { " + "/*" * 16_000 + "*/" * 15_999 + " }",
        '"' + "\\" * 60_000,
        "fn f() { `" + "${`" * 15_000,
    ],
)
def test_deep_or_degenerate_sources_fail_fast_without_python_errors(source: str) -> None:
    result = compile_functions(source)
    assert result.program is None
    assert all(error.code == DEFINITION for error in result.errors)


# ------------------------------------------------------------------- the JSON boundary


@pytest.mark.parametrize(
    "argument",
    [
        float("nan"),
        float("inf"),
        2**63 - 1,
        9007199254740993,
        (1, 2),
        {1, 2},
        {1: "a"},
        object(),
        b"bytes",
        "\ud800",
        {"\udfff": 1},
        nested_list(33),
        list(range(257)),
        "x" * 16_385,
        {"a": "x" * 16_000, "b": "x" * 16_000, "c": ["y" * 16_000] * 7},
    ],
)
def test_arguments_outside_the_json_bounds_are_input_errors(argument: object) -> None:
    refused("fn f(x) { 1 }", INPUT, argument)


def test_arguments_are_never_mutated_and_calls_share_no_state() -> None:
    program = compile_functions(
        "fn f(x) { x.items.push(9); x.count += 1; x.items[0] = 0; x }"
    ).program
    assert program is not None
    argument = {"items": [1, 2], "count": 1}
    first = program.call("f", [argument])
    second = program.call("f", [argument])
    assert first == second == {"items": [0, 2, 9], "count": 2}
    assert argument == {"items": [1, 2], "count": 1}


@pytest.mark.parametrize(
    ("source", "args", "code"),
    [
        ("fn f() { 0..3 }", (), OUTPUT),
        ("fn f() { [1, 1..=2] }", (), OUTPUT),
        ("fn f() { #{a: range(1, 5, 2)} }", (), OUTPUT),
        ('fn f() { "s".chars() }', (), OUTPUT),
        ("fn f(x) { x + 1 }", (9007199254740992,), JSON),
        ("fn f() { 9223372036854775807 }", (), JSON),
        ("fn f() { let a = []; for i in 0..33 { a = [a]; } a }", (), VALUE_LIMIT),
        # map keys do not count towards the string limit, so long keys can outgrow the
        # canonical-size bound while every interpreter limit holds
        (
            "fn f(x) { let m = #{}; for i in 0..250 { m[`${x}${i}`] = i; } m }",
            ("k" * 600,),
            VALUE_LIMIT,
        ),
    ],
)
def test_results_outside_the_json_bounds_map_to_their_codes(
    source: str, args: tuple[object, ...], code: str
) -> None:
    refused(source, code, *args)


# ----------------------------------------------------------------- nothing leaks out


def test_messages_never_contain_thrown_values_or_runtime_values() -> None:
    secret = "s3cr3t-value"
    scripts = [
        f'fn f() {{ throw "{secret}"; }}',
        f'fn f() {{ throw #{{code: "{secret}"}}; }}',
        f'fn f() {{ "{secret}" + 1 }}',
        f'fn f() {{ #{{a: "{secret}"}}.b.c }}',
        f'fn f() {{ let x = "{secret}"; x[99] }}',
        "fn f(x) { x.nope() }",
        f'fn f() {{ try {{ 1 / 0 }} catch (e) {{ throw e.message + "{secret}"; }} }}',
    ]
    for source in scripts:
        result = compile_functions(source)
        assert result.program is not None
        with pytest.raises(FunctionError) as caught:
            result.program.call("f", [secret] if "(x)" in source else [])
        text = f"{caught.value} {caught.value.message!r} {caught.value!r}"
        assert secret not in text
        assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_compile_messages_never_quote_source_text() -> None:
    for source in [
        'fn f() { "secret\\q" }',
        "fn f() { _1secret }",
        "fn f() { secret secret }",
        "fn f() { 0xsecret }",
        "fn f() { #{secret: 1, secret: 2} }",
        "fn f() { let secret = 1; const secret2 = 2; secret2 = 3; }",
        "fn f(secret, secret) {}",
    ]:
        for error in compile_functions(source).errors:
            assert "secret" not in error.message


def test_catch_sees_fixed_messages_only() -> None:
    assert outcome("fn f() { try { [1][5] } catch (e) { return e.message; } }") == (
        "ok",
        "Index out of bounds.",
    )


# ------------------------------------------------------------------ no escape hatches


@pytest.mark.parametrize("count", [0, 1, 16])
def test_public_entry_with_up_to_sixteen_arguments(count: int) -> None:
    params = ", ".join(f"a{i}" for i in range(count))
    program = compile_functions(f"fn f({params}) {{ {count} }}").program
    assert program is not None
    assert program.call("f", [0] * count) == count


def test_arity_and_definition_refusals_at_the_entry() -> None:
    params = ", ".join(f"a{i}" for i in range(17))
    program = compile_functions(
        f"fn f({params}) {{ 1 }} fn g(a) {{ a }} private fn h() {{ 1 }}"
    ).program
    assert program is not None
    for name, args, code in [
        ("f", [0] * 17, "coordinator.function.arity"),
        ("g", [], "coordinator.function.arity"),
        ("g", [1, 2], "coordinator.function.arity"),
        ("h", [], DEFINITION),
        ("nope", [], DEFINITION),
        ("__init__", [], DEFINITION),
    ]:
        with pytest.raises(FunctionError) as caught:
            program.call(name, args)
        assert caught.value.code == code


def test_top_level_statements_never_run() -> None:
    assert outcome('loop { } throw "x"; let y = 1 / 0; fn f() { 1 }') == ("ok", 1)
