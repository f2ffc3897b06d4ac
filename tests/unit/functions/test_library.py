"""The built-in library is exactly the six packages of the profile, each function as Rhai.

One parametrised vector list per function (named by the function), plus the operators and
the functions the profile deliberately lacks (MoreStringPackage, BasicMathPackage, …).
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from coordinator_core.functions import FunctionError, compile_functions


class Err:
    """An expected FunctionError, by the last segment of its code."""

    def __init__(self, kind: str) -> None:
        self.code = f"coordinator.function.{kind}"

    def __repr__(self) -> str:
        return f"Err({self.code})"


EXEC = Err("execution")
LIMIT = Err("resource-limit")


def same_json(a: object, b: object) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        assert isinstance(b, list)
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def evaluate(body: str, *args: object) -> object:
    params = ", ".join(f"p{i}" for i in range(len(args)))
    result = compile_functions(f"fn f({params}) {{ {body} }}")
    if result.program is None:
        raise result.errors[0]
    return result.program.call("f", list(args))


def check(body: str, expected: Any, *args: object) -> None:
    if isinstance(expected, Err):
        with pytest.raises(FunctionError) as caught:
            evaluate(body, *args)
        assert caught.value.code == expected.code
    else:
        got = evaluate(body, *args)
        assert same_json(got, expected), f"{body!r} gave {got!r}, expected {expected!r}"


Cases = list[tuple[str, Any]]


def cases(*items: tuple[str, Any]) -> pytest.MarkDecorator:
    return pytest.mark.parametrize(("body", "expected"), list(items), ids=[b for b, _ in items])


# ------------------------------------------------------------------ ArithmeticPackage


@cases(
    ("(-5).abs()", 5),
    ("abs(-2.5)", 2.5),
    ("abs(0)", 0),
    ("let m = -9223372036854775807 - 1; m.abs()", EXEC),
    ('abs("x")', EXEC),
)
def test_abs(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    ("[sign(-7), sign(0), sign(9)]", [-1, 0, 1]),
    ("[sign(-0.5), sign(0.0), sign(-0.0), sign(2.5)]", [-1, 0, 0, 1]),
    ("sign(0.0 / 0.0)", EXEC),
    ("sign(true)", EXEC),
)
def test_sign(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    (
        "[0.is_zero(), 3.is_zero, 0.0.is_zero(), is_zero(-0.0), 1.5.is_zero]",
        [True, False, True, True, False],
    ),
    ('"".is_zero()', EXEC),
)
def test_is_zero(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    (
        "[3.is_odd(), 4.is_odd, is_odd(-3), 3.is_even(), 4.is_even, is_even(0)]",
        [True, False, True, False, True, True],
    ),
    ("1.5.is_odd()", EXEC),
    ("2.0.is_even", EXEC),
)
def test_is_odd_and_is_even(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    ("[-(5), -(2.5), +(3), +(1.5)]", [-5, -2.5, 3, 1.5]),
    ("let m = -9223372036854775807 - 1; -m", EXEC),
    ('-"s"', EXEC),
    ('+"s"', EXEC),
)
def test_unary_minus_and_plus(body: str, expected: Any) -> None:
    check(body, expected)


# ----------------------------------------------------------------------- LogicPackage


@cases(
    ("[min(3, 7), max(3, 7), min(-1, -2), max(-1, -2)]", [3, 7, -2, -1]),
    ("[max(1, 2.5), min(1.5, 1), max(2, 2.0), min(2.0, 2)]", [2.5, 1.0, 2.0, 2.0]),
    ('min("a", "b")', EXEC),
    ("max('a', 'b')", EXEC),
    ("max([1], [2])", EXEC),
)
def test_min_and_max(body: str, expected: Any) -> None:
    check(body, expected)


@cases(("[!true, !false]", [False, True]), ("!1", EXEC), ("!()", EXEC))
def test_not(body: str, expected: Any) -> None:
    check(body, expected)


# ----------------------------------------------------------------- BasicStringPackage


@cases(
    (
        "[to_string(()), true.to_string(), 'c'.to_string(), 42.to_string(), \"s\".to_string()]",
        ["", "true", "c", "42", "s"],
    ),
    (
        "[1.0.to_string(), 0.1.to_string(), 1e13.to_string(), 1.5e-14.to_string()]",
        ["1.0", "0.1", "1e13", "1.5e-14"],
    ),
    ("[1, \"a\", 'c', (), 2.5, [true]].to_string()", "[1, \"a\", 'c', (), 2.5, [true]]"),
    ('#{b: 1, a: "x", c: #{}}.to_string()', '#{"a": "x", "b": 1, "c": #{}}'),
    ("[(1..3).to_string(), (1..=3).to_string()]", ["1..3", "1..=3"]),
    (
        "[(1.0/0.0).to_string(), (-1.0/0.0).to_string(), (0.0/0.0).to_string()]",
        ["inf", "-inf", "NaN"],
    ),
)
def test_to_string(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    (
        "[\"q\".to_debug(), ().to_debug(), 'c'.to_debug(), 5.to_debug(), true.to_debug()]",
        ['"q"', "()", "c", "5", "true"],
    ),
    ('"a\\"b\\\\c\\nd\\te".to_debug()', '"a\\"b\\\\c\\nd\\te"'),
    ('"\\u0001é".to_debug()', '"\\u{1}é"'),
    (
        "[1.0.to_debug(), 1e16.to_debug(), 1e-5.to_debug(), 0.0001.to_debug(), 123.5.to_debug()]",
        ["1.0", "1e16", "1e-5", "0.0001", "123.5"],
    ),
    ("['\\''].to_debug()", "['\\'']"),
)
def test_to_debug(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    ("[255.to_hex(), to_hex(0), (-1).to_hex()]", ["ff", "0", "ffffffffffffffff"]),
    ("[8.to_octal(), (-8).to_octal()]", ["10", "1777777777777777777770"]),
    ("[5.to_binary(), 0.to_binary()]", ["101", "0"]),
    ("1.5.to_hex()", EXEC),
    ('"ff".to_hex()', EXEC),
)
def test_to_hex_octal_binary(body: str, expected: Any) -> None:
    check(body, expected)


@cases(("['A'.to_int(), to_int('é')]", [65, 233]), ('"A".to_int()', EXEC), ("1.5.to_int()", EXEC))
def test_to_int_is_for_chars_only(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    ('"ab" + "cd"', "abcd"),
    ("\"a\" + 'b'", "ab"),
    ("'a' + \"b\"", "ab"),
    ("'a' + 'b'", "ab"),
    ('"a" + ()', "a"),
    ('() + "a"', "a"),
    ('"a" + 1', EXEC),
    ('1 + "a"', EXEC),
    ('"a" + 1.5', EXEC),
    ('"a" + true', EXEC),
    ("'a' + 1", EXEC),
)
def test_string_concatenation(body: str, expected: Any) -> None:
    check(body, expected)


@cases(('["banana" - "an", "abca" - \'a\', "x" - ""]', ["ba", "bc", "x"]), ("'a' - 'a'", EXEC))
def test_string_minus_removes_all_occurrences(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    ('let s = "héllo"; [s[0], s[1], s[-1]]', ["h", "é", "o"]),
    ('let s = "hello"; [s[1..3], s[1..=3], s[..2], s[-3..]]', EXEC),
    ('let s = "hello"; [s[1..3], s[1..=3], s[..2], s[3..99]]', ["el", "ell", "he", "lo"]),
    ('"abc"[3]', EXEC),
    ('"abc"[-4]', EXEC),
    ("let s = \"abc\"; s[1] = 'X'; s", "aXc"),
    ('let s = "abc"; s[1] = "X"; s', EXEC),
)
def test_string_indexing(body: str, expected: Any) -> None:
    check(body, expected)


@pytest.mark.parametrize(
    "call",
    [
        '"abc".len()',
        '"abc".len',
        '"abc".is_empty()',
        'len("abc")',
        '"abc".contains("b")',
        '"b" in "abc"',
        '"abc".index_of("b")',
        '"abc".sub_string(1)',
        '"abc".split("b")',
        '"abc".trim()',
        '"abc".to_upper()',
        '"abc".to_lower()',
        '"abc".starts_with("a")',
        '"abc".ends_with("c")',
        '"abc".replace("a", "b")',
        '"abc".pad(5, " ")',
        '"abc".bytes()',
        '"abc".to_chars()',
        'parse_int("1")',
        'parse_float("1.5")',
        '"1".to_int()',
        "1.5.floor()",
        "1.5.round()",
        "1.5.ceiling()",
        "2.0.sqrt()",
        "to_float(1)",
        "1.5.to_int()",
        'parse_json("{}")',
        "timestamp()",
        "blob(1)",
        "sleep(1)",
        "5.bits()",
        "5[0]",
        '#{a: 1}.filter("f")',
        '[1].map("f")',
    ],
)
def test_functions_outside_the_profile_are_absent(call: str) -> None:
    check(call, EXEC)


# ------------------------------------------------------------------ BasicArrayPackage


@cases(
    (
        "[[1, 2].len(), len([]), [1].len, [].is_empty(), is_empty([1]), [].is_empty]",
        [2, 0, 1, True, False, True],
    ),
)
def test_len_and_is_empty_of_arrays(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    (
        "let a = [1, 2, 3]; [a.get(0), a.get(-1), a.get(3), a.get(-9), [].get(0)]",
        [1, 3, None, 1, None],
    ),
    ('[1].get("0")', EXEC),
)
def test_get_of_arrays(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    ("let a = [1, 2, 3]; a.set(0, 9); a.set(-1, 8); a.set(7, 0); a", [9, 2, 8]),
    ("let a = []; a.set(0, 1); a", []),
)
def test_set_of_arrays(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    ("let a = [1]; a.push(2); push(a, [3]); a", [1, 2, [3]]),
    ("let a = [1]; a += 2; a += [3, 4]; a", [1, 2, 3, 4]),
    ("let a = [1]; a.append([2, 3]); append(a, []); a", [1, 2, 3]),
    ("let a = [1]; a.append(2); a", EXEC),
    ("[1] + [2]", [1, 2]),
    ("[1] + 2", EXEC),
)
def test_push_append_and_concatenation(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    ("let a = [1, 2, 3]; a.insert(0, 0); a.insert(-1, 9); a.insert(99, 7); a", [0, 1, 2, 9, 3, 7]),
    ("let a = []; a.insert(5, 1); a", [1]),
    ("let a = [1, 2]; a.insert(-9, 0); a", [0, 1, 2]),
)
def test_insert(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    ("let a = [1, 2, 3]; [a.pop(), a.shift(), a, [].pop(), [].shift()]", [3, 1, [2], None, None]),
)
def test_pop_and_shift(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    ("let a = [1, 2, 3]; [a.remove(-1), a.remove(5), a.remove(-5), a]", [3, None, None, [1, 2]]),
    ('[1].remove("0")', EXEC),
)
def test_remove_from_arrays(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    ("let a = [1, 2]; a.clear(); let b = [3, 1, 2]; b.reverse(); [a, b]", [[], [2, 1, 3]]),
)
def test_clear_and_reverse(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    (
        "let a = [1, 2, 3]; a.truncate(5); let b = [1, 2, 3]; b.truncate(1); let c = [1]; c.truncate(-1); [a, b, c]",
        [[1, 2, 3], [1], []],
    ),
    (
        "let a = [1, 2, 3]; a.chop(5); let b = [1, 2, 3]; b.chop(1); let c = [1]; c.chop(0); [a, b, c]",
        [[1, 2, 3], [3], []],
    ),
)
def test_truncate_and_chop(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    ("let a = [1]; a.pad(3, 0); let b = [1, 2]; b.pad(1, 9); [a, b]", [[1, 0, 0], [1, 2]]),
    ("let a = []; a.pad(257, 0); a", LIMIT),
)
def test_pad(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    (
        "let a = [1, 2, 3, 4, 5]; [a.extract(1, 2), a.extract(3), a.extract(-2), a.extract(1..3), a.extract(1..=3)]",
        [[2, 3], [4, 5], [4, 5], [2, 3], [2, 3, 4]],
    ),
    (
        "let a = [1, 2]; [a.extract(5), a.extract(0, -1), a.extract(-9, 1), [].extract(0)]",
        [[], [], [1], []],
    ),
)
def test_extract(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    ("let a = [1, 2, 3, 4]; let b = a.split(1); [a, b]", [[1], [2, 3, 4]]),
    ("let a = [1, 2, 3]; let b = a.split(-1); [a, b]", [[1, 2], [3]]),
    ("let a = [1, 2]; let b = a.split(9); [a, b]", [[1, 2], []]),
)
def test_split_of_arrays(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    ("let a = [1, 2, 3, 4, 5]; a.splice(1, 2, [9]); a", [1, 9, 4, 5]),
    ("let a = [1, 2, 3]; a.splice(1..2, [7, 8]); a", [1, 7, 8, 3]),
    ("let a = [1, 2]; a.splice(5, 1, [3]); a", [1, 2, 3]),
    ("let a = []; a.splice(0, 0, [1]); a", [1]),
)
def test_splice(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    ("let a = [1, 2, 3, 4]; let d = a.drain(1, 2); [a, d]", [[1, 4], [2, 3]]),
    ("let a = [1, 2, 3, 4]; let d = a.drain(0..=1); [a, d]", [[3, 4], [1, 2]]),
    ("let a = [1, 2]; let d = a.drain(0, 0); [a, d]", [[1, 2], []]),
)
def test_drain(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    ("let a = [1, 2, 3, 4]; let r = a.retain(1, 2); [a, r]", [[2, 3], [1, 4]]),
    ("let a = [1, 2, 3, 4]; let r = a.retain(2..4); [a, r]", [[3, 4], [1, 2]]),
)
def test_retain(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    (
        'let a = [1, "a", 2.0]; [a.contains(1), a.contains("a"), a.contains(2), a.contains("1"), 1 in a, 3 !in a]',
        [True, True, True, False, True, True],
    ),
    ("[[1, 2]].contains([1, 2.0])", True),
)
def test_contains_of_arrays(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    (
        "let a = [1, 2, 1]; [a.index_of(1), a.index_of(1, 1), a.index_of(9), a.index_of(1, -1), [].index_of(1)]",
        [0, 2, -1, 2, -1],
    ),
)
def test_index_of(body: str, expected: Any) -> None:
    check(body, expected)


def test_index_of_refuses_a_string_naming_a_script_function() -> None:
    result = compile_functions('fn g(x) { true } fn f() { ["g"].index_of("g") }')
    assert result.program is not None
    with pytest.raises(FunctionError) as caught:
        result.program.call("f", [])
    assert caught.value.code == "coordinator.function.execution"


@cases(
    ("let a = [1, 1, 2, 1, 1]; a.dedup(); a", [1, 2, 1]), ("let a = [1, 1.0]; a.dedup(); a", [1])
)
def test_dedup(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    ("let a = [3, 1, 2]; a.sort(); a", [1, 2, 3]),
    ('let a = ["b", "B", "a"]; a.sort(); a', ["B", "a", "b"]),
    ("let a = ['b', 'a']; a.sort(); a", ["b", "a"][::-1]),
    ("let a = [true, false]; a.sort(); a", [False, True]),
    ("let a = [2.5, -1.0]; a.sort(); a", [-1.0, 2.5]),
    ("let a = [3, 1, 2]; a.sort_desc(); a", [3, 2, 1]),
    ('let a = [1, "a"]; a.sort(); a', EXEC),
    ("let a = [1, 1.5]; a.sort(); a", EXEC),
    ("let a = [[1], [0]]; a.sort(); a", EXEC),
)
def test_sort_and_sort_desc(body: str, expected: Any) -> None:
    check(body, expected)


@cases(("let a = [3, 1, 2]; [a.order(), a.order_desc(), a]", [[1, 2, 3], [3, 2, 1], [3, 1, 2]]))
def test_order_and_order_desc(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    (
        "[[1, 2] == [1, 2.0], [1] != [1, 2], [] == [], [#{a: 1}] == [#{a: 1.0}]]",
        [True, True, True, True],
    ),
    ("[1] < [2]", EXEC),
)
def test_array_equality(body: str, expected: Any) -> None:
    check(body, expected)


# -------------------------------------------------------------------- BasicMapPackage


@cases(
    (
        "let m = #{a: 1, b: 2}; [m.len(), len(#{}), m.is_empty(), #{}.is_empty(), m.len]",
        [2, 0, False, True, None],
    ),
)
def test_len_and_is_empty_of_maps_are_methods_only(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    (
        'let m = #{a: 1}; [m.contains("a"), m.contains("b"), "a" in m, "b" !in m]',
        [True, False, True, True],
    ),
    ("1 in #{}", EXEC),
    ("'a' in #{a: 1}", EXEC),
)
def test_contains_of_maps(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    ('let m = #{a: 1}; [m.get("a"), m.get("z"), get(m, "a")]', [1, None, 1]),
    ("#{a: 1}.get(1)", EXEC),
    ('let m = #{a: 1}; m.set("b", 2); set(m, "a", 0); m', {"a": 0, "b": 2}),
)
def test_get_and_set_of_maps(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    ('let m = #{a: 1, b: 2}; [m.remove("a"), m.remove("z"), m]', [1, None, {"b": 2}]),
    ("let m = #{a: 1}; m.clear(); m", {}),
)
def test_remove_and_clear_of_maps(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    (
        'let m = #{b: 1, a: 2, C: 3, "_": 4}; [m.keys(), m.values()]',
        [["C", "_", "a", "b"], [3, 4, 2, 1]],
    ),
)
def test_keys_and_values_in_byte_order(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    ("let m = #{a: 1}; m.mixin(#{a: 2, b: 3}); m", {"a": 2, "b": 3}),
    ("let m = #{a: 1}; m += #{b: 2}; m", {"a": 1, "b": 2}),
    ("#{a: 1, b: 1} + #{b: 2}", {"a": 1, "b": 2}),
    ("let m = #{a: 1}; m.fill_with(#{a: 9, b: 2}); m", {"a": 1, "b": 2}),
    ("#{a: 1} + 1", EXEC),
    ("let m = #{}; m.mixin([1]); m", EXEC),
)
def test_mixin_fill_with_and_merge(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    (
        "#{b: [1, 2], a: \"x\", c: (), d: #{e: true}, f: 1.5, g: 'c'}.to_json()",
        '{"a":"x","b":[1,2],"c":null,"d":{"e":true},"f":1.5,"g":\'c\'}',
    ),
    ("#{}.to_json()", "{}"),
    ("[1].to_json()", EXEC),
)
def test_to_json(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    ("[#{a: 1, b: 2} == #{b: 2, a: 1.0}, #{a: 1} != #{a: 1, b: 2}, #{} == #{}]", [True, True, True])
)
def test_map_equality(body: str, expected: Any) -> None:
    check(body, expected)


# --------------------------------------------------------------- BasicIteratorPackage


@cases(
    ("let r = []; for i in range(1, 4) { r.push(i); } r", [1, 2, 3]),
    ("let r = []; for i in range(10, 0, -4) { r.push(i); } r", [10, 6, 2]),
    ("let r = []; for i in range(0, 10, 4) { r.push(i); } r", [0, 4, 8]),
    ("let r = []; for i in range(0, 10, -1) { r.push(i); } r", []),
    ("let r = []; for i in range(0..10, 5) { r.push(i); } r", [0, 5]),
    ("let r = []; for x in range(0.0, 1.0, 0.5) { r.push(x); } r", [0.0, 0.5]),
    ("range(0, 5, 0)", EXEC),
    ("range(0.0, 1.0, 0.0)", EXEC),
    (
        "[type_of(range(1, 2)), type_of(range(1, 2, 1))]",
        ["range", "rhai::packages::iter_basic::StepRange<i64>"],
    ),
    ("range(1, 3, 1)", Err("output")),
)
def test_range(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    ('let r = []; for c in "héy".chars() { r.push(c); } r', ["h", "é", "y"]),
    ('let r = []; for c in "héy".chars { r.push(c); } r', ["h", "é", "y"]),
    ('let r = []; for c in chars("hello", 1) { r.push(c); } r', ["e", "l", "l", "o"]),
    ('let r = []; for c in chars("hello", -2) { r.push(c); } r', ["l", "o"]),
    ('let r = []; for c in chars("hello", 1, 2) { r.push(c); } r', ["e", "l"]),
    ('let r = []; for c in chars("hello", 1..3) { r.push(c); } r', ["e", "l"]),
    ('"abc".chars()', Err("output")),
    ("chars(5)", EXEC),
)
def test_chars(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    (
        "let r = 2..5; [r.start, r.end, r.is_inclusive, r.is_exclusive, r.is_empty, start(r), end(r)]",
        [2, 5, False, True, False, 2, 5],
    ),
    (
        "let r = 2..=5; [r.is_inclusive(), r.is_exclusive(), (5..=4).is_empty(), (5..5).is_empty()]",
        [True, False, True, True],
    ),
    (
        "[(1..3).contains(2), (1..3).contains(3), 3 in (1..=3), 0 !in (1..3)]",
        [True, False, True, True],
    ),
    ("2.5 in (1..3)", EXEC),
    ('"a".start', EXEC),
)
def test_range_properties_and_contains(body: str, expected: Any) -> None:
    check(body, expected)


# ----------------------------------------------------------------------------- type_of


@cases(
    (
        "[type_of(()), type_of(true), type_of(1), type_of(1.0), type_of(\"s\"), type_of('c'), type_of([]), type_of(#{}), type_of(1..2), type_of(1..=2)]",
        ["()", "bool", "i64", "f64", "string", "char", "array", "map", "range", "range="],
    ),
    ("1.type_of()", "i64"),
    ("type_of()", EXEC),
    ("type_of(1, 2)", EXEC),
)
def test_type_of(body: str, expected: Any) -> None:
    check(body, expected)


# ---------------------------------------------------------------------------- operators


@cases(
    (
        "[1 + 2, 5 - 7, 6 * 7, 7 / 2, -7 / 2, 7 % 3, -7 % 3, 2 ** 10]",
        [3, -2, 42, 3, -3, 1, -1, 1024],
    ),
    (
        "[1 + 0.5, 1.5 - 1, 2 * 1.5, 1 / 2.0, 7.5 % 2, 2 ** 0.5, 4.0 ** 2]",
        [1.5, 0.5, 3.0, 0.5, 1.5, 2**0.5, 16.0],
    ),
    ("9223372036854775807 + 1", EXEC),
    ("-9223372036854775807 - 2", EXEC),
    ("4611686018427387904 * 2", EXEC),
    ("1 / 0", EXEC),
    ("1 % 0", EXEC),
    ("let m = -9223372036854775807 - 1; m % -1", EXEC),
    ("2 ** -1", EXEC),
    ("2 ** 64", EXEC),
    ("10 ** 100000000000", EXEC),
    ("[1.0 / 0.0, -1.0 / 0.0, 0.0 / 0.0, 1.0 % 0.0]", [None, None, None, None]),
    ("[(-1) ** 3, 0 ** 0, 1 ** 99999, (-1) ** 100000]", [-1, 1, 1, 1]),
)
def test_arithmetic_operators(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    (
        "[6 & 3, 6 | 3, 6 ^ 3, true & false, true | false, true ^ true]",
        [2, 7, 5, False, True, False],
    ),
    (
        "[1 << 3, -16 >> 2, 8 >> -1, 1 << -1, 1 << 63, 3 << 63, -8 >> 64, 8 >> 64, 1 << 64]",
        [8, -4, 16, 0, -(2**63), -(2**63), -1, 0, 0],
    ),
    ("1 & true", EXEC),
    ("1.5 << 1", EXEC),
)
def test_bitwise_and_shift_operators(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    (
        "[1 == 1.0, 0.1 + 0.2 == 0.3, 1 != 1.0, 2 > 1.5, 1e-20 == 0.0, 1.0000000000000002 == 1.0]",
        [True, True, False, True, True, True],
    ),
    (
        '["a" < "b", "B" < "a", \'a\' == "a", "ab" > \'a\', false < true]',
        [True, True, True, True, True],
    ),
    (
        '["1" == 1, "1" != 1, 1 < "2", () < 1, () == (), () < ()]',
        [False, True, False, False, True, False],
    ),
    ("#{} < #{}", EXEC),
    ("(1..2) < (1..3)", EXEC),
)
def test_comparison_operators(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    ("let x = 1; [false && x, true || x]", [False, True]),
    ("let x = 1; true && x", EXEC),
    ("true && 1", Err("definition")),
    ("let x = 1; x || true", EXEC),
    ("[() ?? 1, false ?? 1, 0 ?? 1]", [1, False, 0]),
)
def test_logical_and_coalesce_operators(body: str, expected: Any) -> None:
    check(body, expected)


@cases(
    ("let x = 10; x += 1; x -= 2; x *= 3; x /= 2; x %= 5; x", 3),
    ("let x = 2; x **= 3; x <<= 1; x >>= 2; x |= 1; x &= 7; x ^= 2; x", 7),
    ("let x = 1; x += 1.5; x", 2.5),
    ('let s = "a"; s += \'b\'; s += "c"; s += (); s', "abc"),
    ('let s = "a"; s += 1; s', EXEC),
    ("let b = true; b &= false; b |= true; b ^= true; b", False),
)
def test_compound_assignment(body: str, expected: Any) -> None:
    check(body, expected)


def test_functions_with_parameters_take_json_arguments() -> None:
    check("p0 + p1.len()", 5, 2, [1, 2, 3])
