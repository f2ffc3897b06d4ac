"""Language rules of the subset beyond the conformance vectors: limits at their exact
boundaries, compile-error reporting, scoping, value semantics, methods and the boundary."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator_core.functions import (
    INTERPRETER_ABI,
    CompiledFunctions,
    FunctionError,
    FunctionInfo,
    compile_functions,
)
from coordinator_core.functions.compiler import invoke
from coordinator_core.functions.rvalues import Ctx
from coordinator_core.limits import INTERPRETER_ABI as LIMITS_ABI

DEFINITION = "coordinator.function.definition"


def program(source: str) -> CompiledFunctions:
    result = compile_functions(source)
    assert result.program is not None, result.errors
    assert result.errors == ()
    return result.program


def run(source: str, *args: object) -> object:
    return program(source).call("f", list(args))


def code_of(source: str, *args: object) -> str:
    result = compile_functions(source)
    if result.program is None:
        return result.errors[0].code
    with pytest.raises(FunctionError) as caught:
        result.program.call("f", list(args))
    return caught.value.code


def errors(source: str) -> list[tuple[int | None, int | None]]:
    result = compile_functions(source)
    assert result.program is None
    assert all(e.code == DEFINITION for e in result.errors)
    return [(e.line, e.column) for e in result.errors]


def operations(source: str, name: str, *args: object) -> int:
    compiled = program(source)
    ctx = Ctx()
    invoke(compiled._fns[name], list(args), ctx)
    return ctx.ops


def test_interpreter_abi_is_re_exported() -> None:
    assert INTERPRETER_ABI == LIMITS_ABI
    assert INTERPRETER_ABI.startswith("coordinator/pure-rhai-py/v1;")


# ---------------------------------------------------------------------- exact limits


@pytest.mark.parametrize(("terms", "accepted"), [(61, True), (62, False), (63, False)])
def test_expression_depth_of_an_operator_chain_matches_the_reference(
    terms: int, accepted: bool
) -> None:
    source = "fn f() { " + " + ".join(["1"] * terms) + " }"
    assert (compile_functions(source).program is not None) is accepted


@pytest.mark.parametrize(
    ("opening", "closing", "deepest"),
    [("(", ")", 30), ("[", "]", 20), ("if true { ", " }", 20), ("{ ", " }", 30)],
)
def test_expression_depth_of_nesting_matches_the_reference(
    opening: str, closing: str, deepest: int
) -> None:
    def source(n: int) -> str:
        return "fn f() { " + opening * n + "1" + closing * n + " }"

    assert compile_functions(source(deepest)).program is not None
    assert compile_functions(source(deepest + 1)).program is None


def test_expression_depth_applies_to_top_level_statements_too() -> None:
    assert errors("let x = " + "(" * 40 + "1" + ")" * 40 + "; fn f() { 1 }")


def test_call_levels_allow_thirty_one_nested_helpers_and_refuse_thirty_two() -> None:
    source = "fn d(n) { if n <= 0 { 0 } else { 1 + d(n - 1) } } fn f(n) { d(n) }"
    assert run(source, 31) == 31
    assert code_of(source, 32) == "coordinator.function.resource-limit"


def test_operation_counts_track_the_reference_calibration() -> None:
    assert operations("fn f() { 1 }", "f") == 3
    per_for = operations("fn f(n) { let t = 0; for i in 0..n { t += i; } t }", "f", 1000) / 1000
    per_while = (
        operations("fn f(n) { let i = 0; let t = 0; while i < n { t += i; i += 1; } t }", "f", 1000)
        / 1000
    )
    assert 3 <= per_for <= 5
    assert 9 <= per_while <= 11


def test_operation_budget_is_one_hundred_thousand() -> None:
    source = "fn f(n) { let t = 0; for i in 0..n { t += i; } t }"
    assert run(source, 24_000) == sum(range(24_000))
    assert code_of(source, 25_100) == "coordinator.function.resource-limit"


def test_string_literal_limit_is_in_utf8_bytes() -> None:
    assert run('fn f() { "' + "é" * 8_192 + '" }') == "é" * 8_192
    assert errors('fn f() { "' + "é" * 8_193 + '" }')


def test_string_size_limit_at_run_time_is_exact() -> None:
    source = 'fn f(n) { let s = ""; for i in 0..n { s += "abcdefgh"; } s }'
    assert run(source, 2048) == "abcdefgh" * 2048
    assert code_of(source, 2049) == "coordinator.function.resource-limit"


def test_array_and_map_size_limits_are_aggregate_over_nesting() -> None:
    assert run("fn f() { let a = []; a.pad(200, 0); [a].len() }") == 1
    assert code_of("fn f() { let a = []; a.pad(200, 0); [a, a] }") == (
        "coordinator.function.resource-limit"
    )
    assert code_of("fn f(x) { #{a: x, b: x} }", {f"k{i}": i for i in range(200)}) == (
        "coordinator.function.resource-limit"
    )


def test_passing_a_large_input_through_untouched_is_fine() -> None:
    big = {f"k{i}": list(range(200)) for i in range(10)}
    assert run("fn f(x) { x }", big) == big


def test_array_literal_is_limited_at_parse_time() -> None:
    assert run("fn f() { [" + ", ".join(["0"] * 255) + "].len() }") == 255
    assert errors("fn f() { [" + ", ".join(["0"] * 256) + "] }")


def test_source_limit_is_exact() -> None:
    base = "fn f() { 1 }\n"
    assert compile_functions(base + "/" * (65_536 - len(base))).program is not None
    result = compile_functions(base + "/" * (65_537 - len(base)))
    assert [e.code for e in result.errors] == ["coordinator.function.source-limit"]


def test_one_hundred_twenty_eight_functions_compile_and_more_do_not() -> None:
    def source(n: int) -> str:
        return "".join(f"fn h{i}() {{ {i} }}\n" for i in range(n))

    assert len(program(source(128)).functions) == 128
    assert errors(source(130)) == [(129, 1)]


# --------------------------------------------------------------- compile-error reports


def test_all_independent_syntax_errors_are_reported_in_source_order() -> None:
    source = (
        "fn a() { 1 + }\n"
        "fn b() { 2 }\n"
        "fn c() { let = 3; }\n"
        "fn d() { const K = 1; K = 2; }\n"
        "fn b() { 4 }\n"
        "fn e() { if 1 { } }\n"
    )
    assert errors(source) == [(1, 14), (3, 14), (4, 23), (5, 1), (6, 13)]


def test_recovery_after_a_missing_brace_resumes_at_the_next_definition_line() -> None:
    assert errors("fn a() { if true { 1 }\nfn b() { 1 + }\n") == [(2, 1), (2, 14)]


def test_duplicate_names_are_refused_whatever_the_arity() -> None:
    assert errors("fn g(a) { a }\nfn f() { 1 }\n  private fn g() { 1 }") == [(3, 3)]


def test_function_info_locates_the_definition() -> None:
    compiled = program("fn f(a, b) { a }\n  private fn helper() { 1 }")
    assert compiled.functions["f"] == FunctionInfo("f", 2, False, 1, 1)
    assert compiled.functions["helper"] == FunctionInfo("helper", 0, True, 2, 3)
    with pytest.raises(TypeError):
        compiled.functions["x"] = compiled.functions["f"]  # type: ignore[index]


def test_helpers_may_take_more_than_sixteen_parameters() -> None:
    params = ", ".join(f"a{i}" for i in range(20))
    args = ", ".join(str(i) for i in range(20))
    assert run(f"fn h({params}) {{ a19 }} fn f() {{ h({args}) }}") == 19


def test_unknown_names_are_run_time_errors_so_dead_code_compiles() -> None:
    source = "fn f(x) { if x { nope(1) + missing } else { 1 } }"
    assert run(source, False) == 1
    assert code_of(source, True) == "coordinator.function.execution"


# ------------------------------------------------------------------ scoping and values


def test_functions_see_only_their_parameters_and_locals() -> None:
    assert code_of("fn g() { x } fn f() { let x = 1; g() }") == "coordinator.function.execution"


def test_blocks_scope_their_bindings_and_let_shadows() -> None:
    assert run(
        "fn f() { let x = 1; { let x = 2; x += 1; } let y = x; let x = x + 10; [x, y] }"
    ) == [
        11,
        1,
    ]


def test_switch_arms_and_interpolations_are_their_own_scopes() -> None:
    assert code_of("fn f() { switch 1 { 1 => let y = 5, _ => () }; y }") == (
        "coordinator.function.execution"
    )
    assert run("fn f() { let y = 1; let s = `${let y = 2; y}`; [s, y] }") == ["2", 1]


def test_arguments_and_assignments_copy_values() -> None:
    source = """
        fn grow(a) { a.push(9); a }
        fn f() { let a = [1]; let b = a; b.push(2); let c = grow(a); [a, b, c] }
    """
    assert run(source) == [[1], [1, 2], [1, 9]]


def test_function_call_syntax_passes_a_variable_first_argument_by_reference() -> None:
    assert run("fn f() { let a = [1]; push(a, 2); insert(a, 0, 0); a }") == [0, 1, 2]
    assert run("fn f() { const a = [1]; push(a, 2); a }") == [1]
    assert run("fn f() { let m = #{a: [1]}; push(m.a, 2); m }") == {"a": [1]}


def test_method_calls_mutate_paths_rooted_at_variables() -> None:
    source = (
        "fn f() { let m = #{a: [[1], [2]]}; m.a[1].push(3); m.a.pop(); m.b = #{}; m.b.c = 1; m }"
    )
    assert run(source) == {"a": [[1]], "b": {"c": 1}}


def test_mutating_methods_on_constants_are_refused_but_pure_ones_work() -> None:
    assert run("fn f() { const A = [3, 1]; [A.len(), A.order(), A.contains(1)] }") == [
        2,
        [1, 3],
        True,
    ]
    assert code_of("fn f() { const A = [1]; A.push(2); A }") == "coordinator.function.execution"
    assert code_of("fn f() { const A = #{}; A.x = 1; A }") == "coordinator.function.execution"


def test_script_methods_bind_this_and_write_it_back() -> None:
    source = """
        fn bump(by) { this.count += by; this.count }
        fn f() { let s = #{count: 1}; let r = s.bump(2); [r, s, 5.bump2()] }
        fn bump2() { this * 2 }
    """
    assert run(source) == [3, {"count": 3}, 10]
    assert code_of("fn g() { this } fn f() { g() }") == "coordinator.function.execution"


def test_script_functions_take_precedence_over_library_functions() -> None:
    assert run('fn len(x) { "mine" } fn f() { [len([1]), [1, 2].len()] }') == ["mine", 2]


def test_in_calls_contains_and_may_be_overridden_by_a_script_function() -> None:
    assert run("fn contains(a, b) { true } fn f() { 9 in [1] }") is True


# ------------------------------------------------------------------ control and errors


def test_try_catch_binds_thrown_values_and_error_maps() -> None:
    source = """
        fn f() {
            let r = [];
            try { throw #{code: 7}; } catch (e) { r.push(e.code); }
            try { let x = [1][3]; } catch (e) { r.push(e.message); r.push(type_of(e.line)); }
            try { throw; } catch (e) { r.push(e); }
            try { try { throw "in"; } catch { throw; } } catch (e) { r.push(e); }
            r
        }
    """
    assert run(source) == [7, "Index out of bounds.", "i64", None, "in"]


def test_break_continue_and_return_cross_try_blocks() -> None:
    source = """
        fn f() {
            let n = 0;
            for i in 0..10 { try { if i == 2 { continue; } if i == 5 { break; } n += i; } catch { } }
            try { return n; } catch { }
            -1
        }
    """
    assert run(source) == 0 + 1 + 3 + 4


def test_loops_yield_break_values() -> None:
    assert run(
        "fn f() { [loop { break 1; }, while true { break; }, for x in [5] { break x * 2; }, do { break 3; } while true] }"
    ) == [1, None, 10, 3]


def test_coalesce_may_jump() -> None:
    source = 'fn f(x) { let v = x.a ?? return "none"; v + 1 }'
    assert run(source, {}) == "none"
    assert run(source, {"a": 1}) == 2


def test_non_bool_conditions_are_errors() -> None:
    for condition in ["if x { }", "while x { }", "do { } while x;", "switch 1 { 1 if x => 1 }"]:
        assert code_of(f"fn f(x) {{ {condition} }}", 1) == "coordinator.function.execution"


# ---------------------------------------------------------------------- the boundary


def test_json_integers_beyond_i64_become_floats_and_floats_stay_floats() -> None:
    source = "fn f(a, b, c) { [type_of(a), type_of(b), type_of(c), c] }"
    assert run(source, 2**63, 2.0, 2) == ["f64", "f64", "i64", 2]


def test_results_convert_chars_nan_and_sorted_maps() -> None:
    result = run("fn f() { #{z: 'c', a: 0.0 / 0.0, m: [1.0 / 0.0, -0.0]} }")
    assert result == {"a": None, "m": [None, -0.0], "z": "c"}
    assert isinstance(result, dict)
    assert list(result) == ["a", "m", "z"]


@pytest.mark.parametrize(
    ("source", "args", "code"),
    [
        ("fn f() { 1..2 }", [], "coordinator.function.output"),
        ("fn f(x) { x * 2 + 1 }", [2**53], "coordinator.function.json"),
        (
            "fn f() { let a = []; for i in 0..40 { a = [a]; } a }",
            [],
            "coordinator.function.value-limit",
        ),
        ("fn f(x) { x }", [float("inf")], "coordinator.function.input"),
    ],
)
def test_boundary_failures_use_the_four_value_codes(
    source: str, args: list[Any], code: str
) -> None:
    assert code_of(source, *args) == code


def test_compiled_functions_are_reusable_and_deterministic() -> None:
    compiled = program("fn f(x) { let m = #{}; for k in x.keys() { m[k] = x[k] * 2; } m }")
    first = compiled.call("f", [{"b": 1, "a": 2}])
    assert all(compiled.call("f", [{"b": 1, "a": 2}]) == first for _ in range(5))
    assert first == {"a": 4, "b": 2}


def test_execution_errors_locate_the_failing_construct() -> None:
    compiled = program("fn g(x) {\n    let y = 1;\n    x / 0\n}\nfn f() { g(1) }")
    with pytest.raises(FunctionError) as caught:
        compiled.call("f", [])
    assert caught.value.code == "coordinator.function.execution"
    assert (caught.value.line, caught.value.column) == (3, 7)  # the `/` operator
