"""Property tests: whatever the source and the arguments, only FunctionError comes out.

Random token soups and random well-formed programs are compiled and run on random JSON
arguments; every outcome must be a JSON result or a FunctionError with a contract code,
each call must finish (a hang reaches the test's timeout, the unit tier's), and compiling and
calling twice must agree (determinism).
"""

from __future__ import annotations

import math
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator_core.functions import FunctionError, compile_functions
from coordinator_core.functions import program as program_module
from coordinator_core.functions.errors import LimitError, ScriptError

CODES = frozenset(
    f"coordinator.function.{kind}"
    for kind in (
        "definition",
        "arity",
        "source-limit",
        "execution",
        "resource-limit",
        "value-limit",
        "input",
        "output",
        "json",
    )
)

FUZZ = settings(
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**64), max_value=2**64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=6), children, max_size=5)
    ),
    max_leaves=24,
)


def is_json(value: object) -> bool:
    if value is None or isinstance(value, bool | int | str):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(is_json(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and is_json(v) for k, v in value.items())
    return False


_real_invoke = program_module.invoke  # type: ignore[attr-defined]


def _checked_invoke(*args: Any) -> Any:
    """The entry call, failing the test on any exception the interpreter does not mean to
    raise (the boundary would otherwise report such a bug as an ordinary execution error)."""
    try:
        return _real_invoke(*args)
    except (ScriptError, LimitError, RecursionError):
        raise
    except Exception as error:  # pragma: no cover - only reached on an interpreter bug
        pytest.fail(f"internal error escaped the evaluator: {error!r}")


def run_everything(source: str, args_pool: list[Any]) -> list[tuple[str, object]]:
    """Compile, then call every public function; return the outcomes."""
    with mock.patch.object(program_module, "invoke", _checked_invoke):
        return _run_everything(source, args_pool)


def _run_everything(source: str, args_pool: list[Any]) -> list[tuple[str, object]]:
    result = compile_functions(source)
    if result.program is None:
        assert result.errors
        for error in result.errors:
            assert isinstance(error, FunctionError)
            assert error.code in CODES
        return [("compile", tuple(e.code for e in result.errors))]
    outcomes: list[tuple[str, object]] = []
    for name, info in sorted(result.program.functions.items()):
        if info.private:
            continue
        args = [args_pool[i % len(args_pool)] for i in range(info.parameters)]
        try:
            value = result.program.call(name, args)  # a hang reaches the test's timeout
        except FunctionError as error:
            assert error.code in CODES
            outcomes.append(("error", error.code))
        else:
            assert is_json(value)
            outcomes.append(("ok", value))
    return outcomes


# --------------------------------------------------------------------------- token soup

TOKENS = [
    *[
        "fn",
        "private",
        "let",
        "const",
        "if",
        "else",
        "switch",
        "do",
        "while",
        "until",
        "loop",
        "for",
        "in",
        "continue",
        "break",
        "return",
        "throw",
        "try",
        "catch",
        "this",
        "true",
        "false",
        "import",
        "export",
        "eval",
        "print",
        "Fn",
        "call",
        "curry",
        "type_of",
        "global",
        "var",
        "new",
        "null",
        "a",
        "b",
        "c",
        "x",
        "_",
        "_1",
        "__init__",
    ],
    *[
        "+",
        "-",
        "*",
        "/",
        "%",
        "**",
        "<<",
        ">>",
        "&",
        "|",
        "^",
        "==",
        "!=",
        "<",
        "<=",
        ">",
        ">=",
        "&&",
        "||",
        "!",
        "??",
        "..",
        "..=",
        "=",
        "+=",
        "-=",
        "*=",
        "/=",
        "%=",
        "**=",
        "<<=",
        ">>=",
        "&=",
        "|=",
        "^=",
        ".",
        "?.",
        "[",
        "?[",
        "]",
        "(",
        ")",
        "()",
        "{",
        "}",
        "#{",
        ",",
        ";",
        ":",
        "::",
        "=>",
        "!in",
        "++",
        "--",
        "...",
        "~",
        "#",
        "@",
        "$",
        "?",
        "->",
    ],
    "0",
    "1",
    "-1",
    "9223372036854775807",
    "-9223372036854775808",
    "0xFFFFFFFFFFFFFFFF",
    "0b2",
    "1.5",
    "2.",
    "1e400",
    "1_000",
    '"str"',
    '"esc\\n\\x41\\u00e9"',
    '"bad\\q"',
    '"unterminated',
    "'c'",
    "''",
    "'ab'",
    "`tick`",
    "`a${1}b`",
    "`${",
    '#"raw"#',
    "// comment\n",
    "/* block */",
    "/* /* nested */ */",
    "/*",
    "\n",
    "é",
    "\u2028",
    "\x00",
]


@FUZZ
@given(
    st.lists(st.sampled_from(TOKENS), max_size=60),
    st.lists(st.sampled_from([" ", "", "\n", "\t"]), min_size=60, max_size=60),
    st.lists(json_values, min_size=1, max_size=3),
    st.booleans(),
)
def test_token_soup_never_raises_anything_but_function_error(
    tokens: list[str], gaps: list[str], args: list[Any], wrap: bool
) -> None:
    soup = "".join(token + gap for token, gap in zip(tokens, gaps, strict=False))
    source = f"fn f(a, b) {{ {soup} }}" if wrap else soup
    assert run_everything(source, args) == run_everything(source, args)


# ------------------------------------------------------------- well-formed programs

LIBRARY_METHODS = [
    ("len", 0),
    ("is_empty", 0),
    ("to_string", 0),
    ("to_debug", 0),
    ("type_of", 0),
    ("abs", 0),
    ("sign", 0),
    ("keys", 0),
    ("values", 0),
    ("pop", 0),
    ("shift", 0),
    ("reverse", 0),
    ("sort", 0),
    ("order", 0),
    ("dedup", 0),
    ("to_hex", 0),
    ("to_json", 0),
    ("chars", 0),
    ("clear", 0),
    ("push", 1),
    ("contains", 1),
    ("get", 1),
    ("remove", 1),
    ("index_of", 1),
    ("extract", 1),
    ("split", 1),
    ("truncate", 1),
    ("mixin", 1),
    ("append", 1),
    ("insert", 2),
    ("set", 2),
    ("extract", 2),
    ("pad", 2),
    ("drain", 2),
    ("splice", 3),
    ("nope", 0),
]
BINARY = [
    "+", "-", "*", "/", "%", "**", "<<", ">>", "&", "|", "^",
    "==", "!=", "<", "<=", ">", ">=", "??", "..", "..=", "in", "!in",
]  # fmt: skip
NAMES = ["a", "b", "v0", "v1", "v2"]


def atoms() -> st.SearchStrategy[str]:
    return st.one_of(
        st.integers(min_value=-(2**63), max_value=2**63 - 1).map(str),
        st.sampled_from(["0", "1", "2", "-1", "3"]),
        st.floats(allow_nan=False, allow_infinity=False, width=32).map(
            lambda f: repr(float(f)) if "e" not in repr(float(f)) else "1.5"
        ),
        st.text(alphabet='abcé ${}"\\`', max_size=6).map(
            lambda s: '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
        ),
        st.sampled_from(["'c'", "'é'", "true", "false", "()", "[]", "#{}", "a", "b"]),
        st.sampled_from(NAMES),
    )


@st.composite
def expressions(draw: st.DrawFn, depth: int = 3) -> str:
    if depth <= 0 or draw(st.integers(0, 3)) == 0:
        return draw(atoms())
    sub = expressions(depth=depth - 1)
    kind = draw(st.integers(0, 11))
    if kind == 0:
        return f"({draw(sub)} {draw(st.sampled_from(BINARY))} {draw(sub)})"
    if kind == 1:
        return f"{draw(st.sampled_from(['-', '!', '+']))}({draw(sub)})"
    if kind == 2:
        return "[" + ", ".join(draw(st.lists(sub, max_size=3))) + "]"
    if kind == 3:
        items = draw(st.lists(sub, max_size=3))
        return "#{" + ", ".join(f"k{i}: {item}" for i, item in enumerate(items)) + "}"
    if kind == 4:
        return f"({draw(sub)})[{draw(sub)}]"
    if kind == 5:
        return f"({draw(sub)}).{draw(st.sampled_from(['k0', 'len', 'is_empty', 'start', 'x']))}"
    if kind == 6:
        name, arity = draw(st.sampled_from(LIBRARY_METHODS))
        args = ", ".join(draw(sub) for _ in range(arity))
        target = draw(st.sampled_from(NAMES)) if draw(st.booleans()) else f"({draw(sub)})"
        return f"{target}{draw(st.sampled_from(['.', '?.']))}{name}({args})"
    if kind == 7:
        return f"if {draw(sub)} {{ {draw(sub)} }} else {{ {draw(sub)} }}"
    if kind == 8:
        return f"`<${{{draw(sub)}}}>`"
    if kind == 9:
        return (
            f"switch {draw(sub)} {{ 1 => {draw(sub)}, \"a\" | 'c' => {draw(sub)}, "
            f"0..5 => {draw(sub)}, _ => {draw(sub)} }}"
        )
    if kind == 10:
        return f"helper({draw(sub)})"
    return f"{draw(st.sampled_from(NAMES))}.helper_method()"


@st.composite
def statements(draw: st.DrawFn, depth: int = 2) -> str:
    expr = expressions(depth=2)
    var = draw(st.sampled_from(NAMES))
    kind = draw(st.integers(0, 10 if depth > 0 else 4))
    if kind == 0:
        return f"let {var} = {draw(expr)};"
    if kind == 1:
        return f"{var} = {draw(expr)};"
    if kind == 2:
        return f"{var} {draw(st.sampled_from(['+=', '-=', '*=', '|=', '<<=']))} {draw(expr)};"
    if kind == 3:
        return f"{draw(expr)};"
    if kind == 4:
        return f"{var}[{draw(expr)}] = {draw(expr)};"
    inner = statements(depth=depth - 1)
    body = " ".join(draw(st.lists(inner, max_size=3)))
    if kind == 5:
        return f"if {draw(expr)} {{ {body} }} else {{ {body} }}"
    if kind == 6:
        return f"for {var} in {draw(expr)} {{ {body} }}"
    if kind == 7:
        return f"let n{depth} = 0; while n{depth} < 5 {{ n{depth} += 1; {body} }}"
    if kind == 8:
        return f"try {{ {body} }} catch (err) {{ {var} = err; }}"
    if kind == 9:
        return f"loop {{ {body} break {draw(expr)}; }}"
    return draw(st.sampled_from(["return a;", f"throw {draw(expr)};", "a.helper_method();"]))


@FUZZ
@given(
    st.lists(statements(), max_size=6),
    expressions(),
    st.lists(json_values, min_size=2, max_size=2),
)
def test_well_formed_programs_never_raise_anything_but_function_error(
    body: list[str], result: str, args: list[Any]
) -> None:
    source = (
        'fn helper(x) { if type_of(x) == "i64" && x > 0 { helper(x - 1) } else { x } }\n'
        "fn helper_method() { this.push(1); this }\n"
        'fn f(a, b) { let v0 = (); let v1 = [1, 2]; let v2 = #{k0: "s"}; '
        + " ".join(body)
        + f" {result} }}"
    )
    outcomes = run_everything(source, args)
    assert outcomes == run_everything(source, args)


@settings(max_examples=60)  # each example compiles and runs a program
@given(json_values)
def test_identity_returns_the_argument_or_refuses_it_at_the_boundary(value: Any) -> None:
    program = compile_functions("fn f(x) { x }").program
    assert program is not None
    try:
        result = program.call("f", [value])
    except FunctionError as error:
        assert error.code == "coordinator.function.input"
        return
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**63:
        assert result == float(value)
    else:
        assert result == value
