"""Tests of the strict YAML reader (contract 01 §2, rules Y1–Y19)."""

from __future__ import annotations

import copy
import math
import pickle
from collections.abc import Iterator

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator_core.authoring import yamlreader
from coordinator_core.authoring.yamlreader import (
    INVALID,
    Mark,
    YamlDocument,
    escape_pointer_token,
    read_yaml,
)
from coordinator_core.errors import Diagnostic

FILE = "workflow.yaml"

SYNTAX_CODES = {
    "yaml.tab-indentation",
    "yaml.unclosed-quote",
    "yaml.invalid-escape",
    "yaml.text-after-quote",
    "yaml.colon-in-plain-value",
    "yaml.unexpected-end",
    "yaml.syntax",
}
NON_FATAL_CODES = {
    "yaml.multiple-documents",
    "yaml.too-deep",
    "yaml.anchor",
    "yaml.alias",
    "yaml.merge-key",
    "yaml.tag",
    "yaml.duplicate-key",
    "yaml.non-string-key",
    "yaml.ambiguous-number",
    "yaml.ambiguous-scalar",
}


def read(text: str | bytes) -> tuple[YamlDocument | None, list[Diagnostic]]:
    data = text.encode("utf-8") if isinstance(text, str) else text
    return read_yaml(data, file=FILE, artifact="CoordinatorProject")


def found(diagnostics: list[Diagnostic]) -> list[tuple[str, str, int | None, int | None]]:
    return [(d.code, d.path, d.line, d.column) for d in diagnostics]


def value_of(text: str) -> object:
    document, diagnostics = read(text)
    assert diagnostics == []
    assert document is not None
    return document.value


def refused(text: str | bytes) -> tuple[str, str, int | None, int | None]:
    """The single whole-file finding of a file that yields no tree."""
    document, diagnostics = read(text)
    assert document is None
    assert len(diagnostics) == 1, found(diagnostics)
    return found(diagnostics)[0]


def one(text: str) -> tuple[YamlDocument, tuple[str, str, int | None, int | None]]:
    """The tree and the single non-fatal finding of `text`."""
    document, diagnostics = read(text)
    assert document is not None
    assert len(diagnostics) == 1, found(diagnostics)
    return document, found(diagnostics)[0]


@pytest.fixture(params=["libyaml", "python"])
def either_parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Runs a test with libyaml and again with PyYAML's pure-Python parser."""
    if request.param == "python":
        monkeypatch.setattr(yamlreader, "_Loader", yaml.SafeLoader)
    yield request.param


# --- Y1–Y2: bytes -------------------------------------------------------------------------


def test_y1_file_larger_than_one_mebibyte_is_refused() -> None:
    at_limit = b"a: " + b"x" * (1_048_576 - 4) + b"\n"
    assert len(at_limit) == 1_048_576
    document, diagnostics = read(at_limit)
    assert diagnostics == []
    assert document is not None

    document, diagnostics = read(at_limit + b" ")
    assert document is None
    assert found(diagnostics) == [("yaml.too-large", "", None, None)]
    assert diagnostics[0].file == FILE
    assert diagnostics[0].artifact == "CoordinatorProject"


def test_y2_invalid_utf8_is_refused_at_its_first_bad_byte() -> None:
    assert refused(b"a: 1\nb: caf\xc3\xa9 \xff\n") == ("yaml.not-utf8", "", 2, 9)


@pytest.mark.parametrize(
    ("data", "line", "column"),
    [
        (b"\xef\xbb\xbfa: 1\n", 1, 1),  # byte-order mark
        (b"a: 1\nb: x\x00y\n", 2, 5),  # NUL
        (b"a: \x1b[0m\n", 1, 4),  # other C0 control
        (b"a: 1\r\nb: \x0c\r\n", 2, 4),  # form feed after CRLF
        (b"a: x\x7f\n", 1, 5),  # DEL, which YAML also forbids
        ("a: x\u0090\n".encode(), 1, 5),  # C1 control
        (b"a: \xed\xa0\x80\n", 1, 4),  # encoded surrogate
        (b"a: \xc0\xaf\n", 1, 4),  # overlong form
    ],
)
def test_y2_bom_and_control_characters_are_refused(data: bytes, line: int, column: int) -> None:
    assert refused(data) == ("yaml.not-utf8", "", line, column)


def test_y2_tab_lf_and_cr_are_allowed() -> None:
    assert value_of("a: 'x\ty'\r\nb: 2\rc: 3\n") == {"a": "x\ty", "b": 2, "c": 3}


# --- Y3–Y10: refused constructs that still yield a tree ------------------------------------


def test_y3_second_document_is_refused_at_its_start() -> None:
    document, finding = one("a: 1\n---\nb: 2\n")
    assert finding == ("yaml.multiple-documents", "", 2, 1)
    assert document.value == {"a": 1}


def test_y3_leading_document_marker_and_end_marker_are_allowed() -> None:
    assert value_of("# comment\n---\na: 1\n...\n") == {"a": 1}


def test_y3_second_document_is_refused_whatever_it_holds() -> None:
    document, finding = one('a: 1\n...\n--- "unclosed\n')
    assert finding == ("yaml.multiple-documents", "", 3, 1)
    assert document.value == {"a": 1}
    document, finding = one("- x\n--- \n\tb: [\n")
    assert finding == ("yaml.multiple-documents", "", 2, 1)
    assert document.value == ["x"]


def _nested(depth: int) -> str:
    """`depth` nested block mappings under /a/a/…; the innermost holds `leaf: 1`."""
    lines = ["  " * level + "a:" for level in range(depth - 1)]
    lines.append("  " * (depth - 1) + "leaf: 1")
    return "\n".join(lines) + "\n"


def test_y4_nesting_deeper_than_128_is_refused_at_its_member() -> None:
    document, diagnostics = read(_nested(128))
    assert diagnostics == []
    assert document is not None

    document, finding = one(_nested(129))
    pointer = "/a" * 128
    assert finding == ("yaml.too-deep", pointer, 129, 257)
    assert document is not None
    node = document.value
    for _ in range(127):
        assert isinstance(node, dict)
        node = node["a"]
    assert node == {"a": INVALID}


def test_y4_flow_nesting_counts_and_the_deep_subtree_is_not_read_further() -> None:
    text = "x: " + "[" * 129 + "&anchor 1" + "]" * 129 + "\nz: *alias\n"
    document, diagnostics = read(text)
    assert found(diagnostics) == [
        ("yaml.too-deep", "/x" + "/0" * 127, 1, 4 + 127),
        ("yaml.alias", "/z", 2, 4),
    ]
    assert document is not None


def test_y4_nesting_beyond_the_parser_limit_is_still_too_deep() -> None:
    assert refused("[" * 1200) == ("yaml.too-deep", "", 1, 1001)
    document, diagnostics = read("- " * 1100 + "x\n")
    assert document is None
    assert found(diagnostics) == [("yaml.too-deep", "/0" * 128, 1, 257)]


def test_y5_anchor_is_refused_at_its_member() -> None:
    document, finding = one("steps:\n  a: &first 1\n  b: 2\n")
    assert finding == ("yaml.anchor", "/steps/a", 2, 6)
    assert document.value == {"steps": {"a": INVALID, "b": 2}}


def test_y5_anchor_on_a_collection_and_on_a_key() -> None:
    document, diagnostics = read("a: &m\n  b: 1\n&k c: 2\n")
    assert found(diagnostics) == [("yaml.anchor", "/a", 1, 4), ("yaml.anchor", "/c", 3, 1)]
    assert document is not None
    assert document.value == {"a": INVALID, "c": INVALID}


def test_y6_alias_is_refused_at_its_member() -> None:
    document, diagnostics = read("a: 1\nlist:\n  - x\n  - *a\n")
    assert found(diagnostics) == [("yaml.alias", "/list/1", 4, 5)]
    assert document is not None
    assert document.value == {"a": 1, "list": ["x", INVALID]}


def test_y6_alias_as_key_is_refused_at_the_mapping() -> None:
    document, finding = one("m:\n  *k : 1\n  b: 2\n")
    assert finding == ("yaml.alias", "/m", 2, 3)
    assert document.value == {"m": {"b": 2}}


def test_y7_merge_key_is_refused_at_its_member() -> None:
    document, diagnostics = read("base: &b {x: 1}\nitem:\n  <<: *b\n  z: 2\n")
    assert found(diagnostics) == [
        ("yaml.anchor", "/base", 1, 7),
        ("yaml.merge-key", "/item/<<", 3, 3),
        ("yaml.alias", "/item/<<", 3, 7),
    ]
    assert document is not None
    assert document.value == {"base": INVALID, "item": {"<<": INVALID, "z": 2}}


def test_y7_quoted_merge_key_is_an_ordinary_string() -> None:
    assert value_of('"<<": 1\n') == {"<<": 1}


@pytest.mark.parametrize(
    ("text", "column"),
    [
        ("a: !x 1\n", 4),
        ("a: !!str 1\n", 4),
        ("a: !<tag:yaml.org,2002:str> 1\n", 4),
        ("a: ! 1\n", 4),
        ("a: !!map {b: 1}\n", 4),
        ("a: !!seq\n- 1\n", 4),
        ('a: !!binary "aGk="\n', 4),
        ("%TAG !e! tag:example.com,2000:\n---\na: !e!x 1\n", 4),
    ],
)
def test_y8_tag_is_refused_at_its_member(text: str, column: int) -> None:
    document, (code, path, line, col) = one(text)
    assert (code, path, col) == ("yaml.tag", "/a", column)
    assert line == text.count("\n", 0, text.index("a:")) + 1
    assert document.value == {"a": INVALID}


def test_y8_tag_on_a_key_is_refused_at_the_member() -> None:
    document, finding = one("!!str k: 1\n")
    assert finding == ("yaml.tag", "/k", 1, 1)
    assert document.value == {"k": INVALID}


def test_y9_duplicate_key_keeps_the_first_and_relates_it() -> None:
    text = "steps:\n  a: first\n  b: 2\n  a: second\n"
    document, diagnostics = read(text)
    assert found(diagnostics) == [("yaml.duplicate-key", "/steps/a", 4, 3)]
    (related,) = diagnostics[0].related
    assert (related.file, related.path, related.line, related.column) == (FILE, "/steps/a", 2, 3)
    assert related.message
    assert document is not None
    assert document.value == {"steps": {"a": "first", "b": 2}}
    assert document.key_positions["/steps/a"] == Mark(2, 3)
    assert document.positions["/steps/a"] == Mark(2, 6)


def test_y9_quoted_and_plain_spellings_are_the_same_key_and_each_repeat_is_reported() -> None:
    document, diagnostics = read("a: 1\n\"a\": 2\n{x: 1}: 0\n'a': 3\n")
    assert [(d.code, d.path, d.line) for d in diagnostics] == [
        ("yaml.duplicate-key", "/a", 2),
        ("yaml.non-string-key", "", 3),
        ("yaml.duplicate-key", "/a", 4),
    ]
    assert all(d.related[0].line == 1 for d in diagnostics if d.code == "yaml.duplicate-key")
    assert document is not None
    assert document.value == {"a": 1}


def test_y9_problems_inside_a_repeated_value_are_still_reported() -> None:
    document, diagnostics = read("a:\n  x: 1\na:\n  x: yes\n")
    assert found(diagnostics) == [
        ("yaml.duplicate-key", "/a", 3, 1),
        ("yaml.ambiguous-scalar", "/a/x", 4, 6),
    ]
    assert document is not None
    assert document.value == {"a": {"x": 1}}
    assert document.positions["/a/x"] == Mark(2, 6)  # the kept occurrence


@pytest.mark.parametrize("key", ["1", "-2", "1.5", "1e3", "true", "false", "null", "~"])
def test_y10_non_string_key_is_refused_at_its_member(key: str) -> None:
    document, finding = one(f"m:\n  {key}: x\n  ok: z\n")
    assert finding == ("yaml.non-string-key", f"/m/{escape_pointer_token(key)}", 2, 3)
    assert document.value == {"m": {key: INVALID, "ok": "z"}}


def test_y10_quoted_number_key_is_a_string() -> None:
    assert value_of("\"1\": x\n'true': z\n") == {"1": "x", "true": "z"}


def test_y10_empty_key_is_refused() -> None:
    document, finding = one("? \n: x\n")
    assert finding == ("yaml.non-string-key", "/", 1, 2)
    assert document.value == {"": INVALID}


def test_y10_complex_key_is_refused_at_the_mapping() -> None:
    document, diagnostics = read("m:\n  ? [1, 2]\n  : x\n  {a: 1}: y\n  ok: z\n")
    assert found(diagnostics) == [
        ("yaml.non-string-key", "/m", 2, 5),
        ("yaml.non-string-key", "/m", 4, 3),
    ]
    assert document is not None
    assert document.value == {"m": {"ok": "z"}}


def test_y10_explicit_scalar_key_is_refused_at_its_member() -> None:
    document, diagnostics = read("? a\n: 1\nb: 2\nc: [{? d : 3}]\n- e\n"[:-4])
    assert found(diagnostics) == [
        ("yaml.non-string-key", "/a", 1, 3),
        ("yaml.non-string-key", "/c/0/d", 4, 8),
    ]
    assert document is not None
    assert document.value == {"a": INVALID, "b": 2, "c": [{"d": INVALID}]}


def test_y10_question_marks_in_values_are_not_explicit_keys() -> None:
    assert value_of("a: what ?\nb: 'why? '\nc: |\n  ? not a key\nd: 1\n") == {
        "a": "what ?",
        "b": "why? ",
        "c": "? not a key\n",
        "d": 1,
    }


# --- Y11–Y17: syntax errors (whole file, no tree) -------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [
        ("a:\n\tb: 1\n", 2, 1),
        ("a:\n  b: 1\n \tc: 2\n", 3, 2),
        ("a:\n  - 1\n  -\t2\n", 3, 4),
        ("a: 1\n\t\nb: 2\n", 2, 1),
        ("a: |\n\tfoo\n", 2, 1),
        ("a: [\n\t1]\n", 2, 1),  # libyaml accepts this one; the rule does not
        ("a: {b: 1,\n  \tc: 2}\n", 2, 3),
    ],
)
def test_y11_tab_indentation_is_refused(
    either_parser: str, text: str, line: int, column: int
) -> None:
    assert refused(text) == ("yaml.tab-indentation", "", line, column)


def test_y11_tabs_that_are_not_indentation_are_allowed() -> None:
    assert value_of("a: \"x\n\ty\"\nb: |\n  keep\n  \tthis\nc: '\t'\n") == {
        "a": "x y",
        "b": "keep\n\tthis\n",
        "c": "\t",
    }


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [
        ('a: "foo\nb: 2\n', 1, 4),
        ("a: 1\nb: 'foo\n", 2, 4),
        ('a: "foo', 1, 4),
        ('a: "foo\n---\nb: 1\n', 1, 4),
        ("- 'x''\n", 1, 3),
    ],
)
def test_y12_unclosed_quote_is_refused_at_the_opening_quote(
    either_parser: str, text: str, line: int, column: int
) -> None:
    assert refused(text) == ("yaml.unclosed-quote", "", line, column)


@pytest.mark.parametrize(
    ("text", "libyaml_column"),
    [('a: "fo\\qo"\n', 7), ('a: "\\x4G"\n', 7), ('a: "\\u00"\n', 7), ('a: "\\ud800"\n', 7)],
)
def test_y13_invalid_escape_is_refused(text: str, libyaml_column: int) -> None:
    assert refused(text) == ("yaml.invalid-escape", "", 1, libyaml_column)


def test_y13_invalid_escape_with_the_python_parser(either_parser: str) -> None:
    code, path, line, _column = refused('a: 1\nb: "\\q"\n')
    assert (code, path, line) == ("yaml.invalid-escape", "", 2)


def test_y13_valid_escapes_are_decoded() -> None:
    assert value_of('a: "\\t\\n\\\\\\"\\x41\\u00e9\\U0001F600\\/\\ "\n') == {
        "a": '\t\n\\"A\u00e9\U0001f600/ '
    }


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [
        ('a: "x" y\n', 1, 8),
        ("a: 'x'y\n", 1, 7),
        ("a: 'x'@\n", 1, 7),
        ('a: ["x" y]\n', 1, 9),
        ('"a" b: c\n', 1, 5),
        ("a: 'x' b: c\n", 1, 8),
    ],
)
def test_y14_text_after_closing_quote_is_refused(
    either_parser: str, text: str, line: int, column: int
) -> None:
    assert refused(text) == ("yaml.text-after-quote", "", line, column)


def test_y14_separators_and_comments_after_a_quote_are_allowed() -> None:
    assert value_of('a: "x"  # note\nb: ["y", \'z\']\n"c" : 1\n') == {
        "a": "x",
        "b": ["y", "z"],
        "c": 1,
    }


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [
        ("a: b: c\n", 1, 5),
        ("- a: b: c\n", 1, 7),
        ("a: {b: c: d}\n", 1, 9),
        ("a: foo\n  bar: baz\n", 2, 6),
        ("a: b : c\n", 1, 6),
        ("a: value: \n", 1, 9),
    ],
)
def test_y15_colon_in_plain_value_is_refused(
    either_parser: str, text: str, line: int, column: int
) -> None:
    assert refused(text) == ("yaml.colon-in-plain-value", "", line, column)


def test_y15_colons_without_a_following_space_are_allowed() -> None:
    assert value_of("a: http://example.org/x\nb: b:c\nc: 'd: e'\n") == {
        "a": "http://example.org/x",
        "b": "b:c",
        "c": "d: e",
    }


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [
        ("a: [1, 2\n", 2, 1),
        ("a: {b: 1\n", 2, 1),
        ("a: [\n", 2, 1),
        ("a: &", 1, 5),
        ("%YAML 1.1\n", 2, 1),
        ("a: [1,\n---\n", 2, 1),
        ("a: [1,  # comment\n  # more\n", 3, 1),
    ],
)
def test_y16_unexpected_end_is_refused(
    either_parser: str, text: str, line: int, column: int
) -> None:
    assert refused(text) == ("yaml.unexpected-end", "", line, column)


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [
        ("@foo\n", 1, 1),
        ("a: `x`\n", 1, 4),
        ("a:\n  b: 1\n c: 2\n", 3, 2),
        ("a: 1\n- b\n", 2, 1),
        ("a: |x\n  foo\n", 1, 5),
        ('x: "a": b\n', 1, 7),
        ("x: [a]: b\n", 1, 7),
        ("a: 1\n...\nb: 2\n", 3, 1),
    ],
)
def test_y17_other_syntax_error_is_refused(
    either_parser: str, text: str, line: int, column: int
) -> None:
    assert refused(text) == ("yaml.syntax", "", line, column)


def test_syntax_error_replaces_every_other_finding() -> None:
    assert refused("a: &x 1\nb: yes\nc: [\n") == ("yaml.unexpected-end", "", 4, 1)


# --- Y18–Y19 and scalar resolution ----------------------------------------------------------


@pytest.mark.parametrize(
    "scalar",
    [
        # ^[-+]?0[xXoObB][0-9a-fA-F_]+$
        "0x1F",
        "0o17",
        "0b101",
        "-0X1f",
        "+0B1_0",
        # ^\+[0-9.]
        "+1",
        "+1.5",
        "+.5",
        "+1abc",
        # ^-?0[0-9_]+(\.[0-9_]*)?$
        "007",
        "01.5",
        "-00",
        "0_1",
        # ^[-+]?[0-9][0-9_]*_[0-9_]*(\.[0-9_]*)?([eE][-+]?[0-9]+)?$
        "1_000",
        "-1_000.5",
        "1__0e5",
        # ^[-+]?\.[0-9]+([eE][-+]?[0-9]+)?$
        ".5",
        "-.5e3",
        # ^[-+]?[0-9]+\.([eE][-+]?[0-9]+)?$
        "5.",
        "-5.e3",
        # .inf/.nan spellings
        ".inf",
        ".Inf",
        ".INF",
        "-.inf",
        "+.Inf",
        "-.INF",
        ".nan",
        ".NaN",
        ".NAN",
        # ^[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?$
        "1:30",
        "-190:20:30",
        "1:30.5",
        # integers that binary64 cannot hold exactly, and an overflowing number
        "9007199254740993",
        "-9007199254740993",
        "1" + "0" * 400,
        "1e400",
        "-1.5e999",
    ],
)
def test_y18_ambiguous_number_is_refused_at_its_member(scalar: str) -> None:
    document, finding = one(f"v:\n  num: {scalar}\n")
    assert finding == ("yaml.ambiguous-number", "/v/num", 2, 8)
    assert document.value == {"v": {"num": INVALID}}


@pytest.mark.parametrize(
    "scalar",
    [
        "True",
        "TRUE",
        "False",
        "FALSE",
        "Null",
        "NULL",
        *yamlreader._case_variants("yes"),
        *yamlreader._case_variants("no"),
        *yamlreader._case_variants("on"),
        *yamlreader._case_variants("off"),
        "y",
        "Y",
        "n",
        "N",
    ],
)
def test_y19_ambiguous_scalar_is_refused_at_its_member(scalar: str) -> None:
    document, finding = one(f"- {scalar}\n")
    assert finding == ("yaml.ambiguous-scalar", "/0", 1, 3)
    assert document.value == [INVALID]


def test_y18_y19_apply_to_keys_too() -> None:
    document, diagnostics = read("on: push\n0x10: a\n")
    assert found(diagnostics) == [
        ("yaml.ambiguous-scalar", "/on", 1, 1),
        ("yaml.ambiguous-number", "/0x10", 2, 1),
    ]
    assert document is not None
    assert document.value == {"on": INVALID, "0x10": INVALID}


@pytest.mark.parametrize(
    ("scalar", "expected"),
    [
        ("0", 0),
        ("-0", 0),
        ("7", 7),
        ("-42", -42),
        ("9007199254740992", 9007199254740992),
        ("-9007199254740992", -9007199254740992),
        ("9007199254740994", 9007199254740994),
        (str(2**100), 2**100),
        ("0.5", 0.5),
        ("-1.25", -1.25),
        ("1e3", 1000.0),
        ("1E+3", 1000.0),
        ("2.5e-3", 0.0025),
        ("-0.0", -0.0),
        ("1e-400", 0.0),
        ("null", None),
        ("~", None),
        ("", None),
        ("true", True),
        ("false", False),
        ("2026-03-01T09:00:00Z", "2026-03-01T09:00:00Z"),
        ("2026-03-01", "2026-03-01"),
        ("1.2.3", "1.2.3"),
        ("version value", "version value"),
        ("tRUE", "tRUE"),
        ("nULL", "nULL"),
        ("yess", "yess"),
        ("1a", "1a"),
        ("12:60", "12:60"),
        ("+", "+"),
        ("-inf", "-inf"),
        ("nan", "nan"),
    ],
)
def test_plain_scalar_resolution(scalar: str, expected: object) -> None:
    value = value_of(f"v: {scalar}\n")
    assert isinstance(value, dict)
    assert value["v"] == expected
    assert type(value["v"]) is type(expected)
    if isinstance(expected, float):
        assert isinstance(value["v"], float)
        assert math.copysign(1.0, value["v"]) == math.copysign(1.0, expected)


def test_quoted_and_block_scalars_are_always_strings() -> None:
    text = 'a: "yes"\nb: \'1_000\'\nc: "0x1F"\nd: |\n  true\ne: >-\n  12\nf: ""\ng: "null"\n'
    assert value_of(text) == {
        "a": "yes",
        "b": "1_000",
        "c": "0x1F",
        "d": "true\n",
        "e": "12",
        "f": "",
        "g": "null",
    }


def test_empty_values_are_null() -> None:
    assert value_of("a:\nb: ~\nc: [~, null]\n- x\n"[:-4]) == {
        "a": None,
        "b": None,
        "c": [None, None],
    }


def test_empty_file_is_a_null_document() -> None:
    for text in ("", "# just a comment\n", "---\n", "\n\n"):
        document, diagnostics = read(text)
        assert diagnostics == []
        assert document is not None
        assert document.value is None
        assert document.mark_of("") is not None


def test_multi_line_plain_scalar_is_folded() -> None:
    assert value_of("a: one\n  two\n\n  three\n") == {"a": "one two\nthree"}


# --- Several findings, positions, privacy ---------------------------------------------------


def test_every_independent_problem_is_reported() -> None:
    text = (
        "apiVersion: v1\n"
        "kind: &k CoordinatorProject\n"
        "project:\n"
        "  id: yes\n"
        "  version: 1.0.\n"
        "  enabled: !!bool true\n"
        "steps:\n"
        "  a: {next: *k, count: 0777}\n"
        "  a: again\n"
        "  1: numeric\n"
        "  <<: merged\n"
        "---\n"
        "second: document\n"
    )
    document, diagnostics = read(text)
    assert found(diagnostics) == [
        ("yaml.anchor", "/kind", 2, 7),
        ("yaml.ambiguous-scalar", "/project/id", 4, 7),
        ("yaml.tag", "/project/enabled", 6, 12),
        ("yaml.alias", "/steps/a/next", 8, 13),
        ("yaml.ambiguous-number", "/steps/a/count", 8, 24),
        ("yaml.duplicate-key", "/steps/a", 9, 3),
        ("yaml.non-string-key", "/steps/1", 10, 3),
        ("yaml.merge-key", "/steps/<<", 11, 3),
        ("yaml.multiple-documents", "", 12, 1),
    ]
    assert document is not None
    assert document.value == {
        "apiVersion": "v1",
        "kind": INVALID,
        "project": {"id": INVALID, "version": "1.0.", "enabled": INVALID},
        "steps": {"a": {"next": INVALID, "count": INVALID}, "1": INVALID, "<<": INVALID},
    }


def test_diagnostics_carry_file_and_artifact_and_no_fixed_text() -> None:
    document, diagnostics = read_yaml(
        b"a: yes\n", file="runtime.yaml", artifact="CoordinatorRuntimeConfig"
    )
    assert document is not None
    (diagnostic,) = diagnostics
    assert diagnostic.file == "runtime.yaml"
    assert diagnostic.artifact == "CoordinatorRuntimeConfig"
    assert diagnostic.message is None
    assert diagnostic.hint is None
    assert diagnostic.severity is None
    _, diagnostics = read_yaml(b"a: [", file="w.yaml")
    assert diagnostics[0].artifact is None


CANARY = "zq7canary"


def _canary_files() -> list[str]:
    c = CANARY
    return [
        f"{c}k: &{c}a {c}v\n{c}b: *{c}a\n",
        f"{c}: yes\n{c}: {c}\n1: {c}\n<<: {c}\n!{c} x: !{c} y\n",
        f"? [{c}]\n: {c}\n",
        f'a: "{c}\n',
        f'a: "{c}\\q{c}"\n',
        f'a: "{c}" {c}\n',
        f"a: {c}: {c}\n",
        f"a: [{c}, {c}\n",
        f"@{c}\n",
        f"a:\n\t{c}: 1\n",
        f"{c}: 1\n---\n{c}: 2\n",
        "x:\n" + "".join("  " * (i + 1) + f"{c}{i}:\n" for i in range(130)),
        f"{c}: +1{c}\n",
    ]


@pytest.mark.parametrize("text", _canary_files())
def test_canary_values_and_keys_never_reach_messages(text: str) -> None:
    _, diagnostics = read(text)
    assert diagnostics
    for diagnostic in diagnostics:
        assert CANARY not in (diagnostic.message or "")
        assert CANARY not in (diagnostic.hint or "")
        for related in diagnostic.related:
            assert CANARY not in related.message


def test_positions_of_nested_members() -> None:
    text = (
        "project:\n"
        "  id: demo\n"
        "steps:\n"
        "  first:\n"
        "    arguments:\n"
        "      - type: input\n"
        '      - {type: literal, value: [1, "two"]}\n'
        "  a/b~c: {}\n"
    )
    document, diagnostics = read(text)
    assert diagnostics == []
    assert document is not None
    positions = document.positions
    assert positions[""] == Mark(1, 1)
    assert positions["/project"] == Mark(2, 3)
    assert positions["/project/id"] == Mark(2, 7)
    assert positions["/steps/first/arguments"] == Mark(6, 7)
    assert positions["/steps/first/arguments/0"] == Mark(6, 9)
    assert positions["/steps/first/arguments/0/type"] == Mark(6, 15)
    assert positions["/steps/first/arguments/1"] == Mark(7, 9)
    assert positions["/steps/first/arguments/1/value/1"] == Mark(7, 36)
    assert positions["/steps/a~1b~0c"] == Mark(8, 10)
    keys = document.key_positions
    assert keys["/steps"] == Mark(3, 1)
    assert keys["/steps/first/arguments/1/value"] == Mark(7, 25)
    assert keys["/steps/a~1b~0c"] == Mark(8, 3)
    assert "/steps/first/arguments/0" not in keys
    assert len(positions) == 14
    assert set(keys) < set(positions)
    assert dict(positions)["/project/id"] == Mark(2, 7)


def test_positions_count_characters_and_crlf_lines() -> None:
    document, diagnostics = read("é: ü\r\nb:\r\n  - ö: yes\r\n")
    assert found(diagnostics) == [("yaml.ambiguous-scalar", "/b/0/ö", 3, 8)]
    assert document is not None
    assert document.positions["/é"] == Mark(1, 4)


def test_mark_of_falls_back_to_the_nearest_ancestor() -> None:
    document, _ = read("a:\n  b: [1, 2]\n")
    assert document is not None
    assert document.mark_of("/a/b/1") == Mark(2, 10)
    assert document.mark_of("/a/b/7/x") == Mark(2, 6)
    assert document.mark_of("/missing") == Mark(1, 1)
    assert document.mark_of("") == Mark(1, 1)


def test_failed_members_stay_present_as_invalid() -> None:
    document, diagnostics = read("project:\n  id: demo\n  version: 1_0\n")
    assert [d.code for d in diagnostics] == ["yaml.ambiguous-number"]
    assert document is not None
    project = document.value["project"]  # type: ignore[index]
    assert "version" in project
    assert project["version"] is INVALID


def test_escape_pointer_token() -> None:
    assert escape_pointer_token("plain") == "plain"
    assert escape_pointer_token("a/b") == "a~1b"
    assert escape_pointer_token("~1") == "~01"
    assert escape_pointer_token("~/") == "~0~1"
    assert escape_pointer_token("") == ""


def test_invalid_is_one_value_through_copies() -> None:
    assert repr(INVALID) == "INVALID"
    assert copy.copy(INVALID) is INVALID
    assert copy.deepcopy({"a": [INVALID]})["a"][0] is INVALID
    assert pickle.loads(pickle.dumps(INVALID)) is INVALID


def test_document_is_immutable() -> None:
    document, _ = read("a: 1\n")
    assert document is not None
    with pytest.raises(AttributeError):
        document.value = None  # type: ignore[misc]
    with pytest.raises(TypeError):
        document.positions["/a"] = Mark(9, 9)  # type: ignore[index]


def _workflow(steps: int = 64) -> str:
    lines = [
        "apiVersion: id.registrystack.org/formats/coordinator/project/v1alpha1",
        "kind: CoordinatorProject",
        "project:",
        "  id: big-flow",
        '  version: "1"',
        "  description: |",
        "    Many steps. Why? Because.",
        "input:",
        "  type: object",
        "  required: [applicant]",
        "operations:",
        "  reviews: {operation: casework.submit-review-request/v1, connection: casework}",
        "functionsFile: functions.rhai",
        "deadlineSeconds: 86400",
        "start: s0",
        "steps:",
    ]
    for i in range(steps - 1):
        lines += [
            f"  s{i}:",
            "    type: call",
            f"    title: Step number {i}",
            "    operation: reviews",
            "    input:",
            f"      function: build_{i}",
            "      arguments:",
            "        - type: input",
            "        - type: literal",
            "          value:",
            f"            label: 'step {i}'",
            "            count: 12",
            "            ratio: 0.25",
            "            enabled: true",
            "            tags: [a, b, c]",
            "        - type: step",
            f"          step: s{max(i - 1, 0)}",
            f"    next: s{i + 1}",
            "    onDeclaredRefusal:",
            f"      refused.code: s{steps - 1}",
            "    # a comment line",
            "",
        ]
    lines += [f"  s{steps - 1}:", "    type: finish", "    outcome: done"]
    lines += ["outcomes:", "  done:", "    type: 'null'"]
    return "\n".join(lines) + "\n"


def test_a_64_step_workflow_is_read_without_findings() -> None:
    # Its speed is measured by `nox -s bench -- check`, not asserted here.
    data = _workflow().encode()
    assert 1_300 < data.count(b"\n") < 1_600
    document, diagnostics = read_yaml(data, file=FILE)
    assert diagnostics == []
    assert document is not None


# --- Robustness -----------------------------------------------------------------------------


def _check_outcome(document: YamlDocument | None, diagnostics: list[Diagnostic]) -> None:
    assert all(isinstance(d, Diagnostic) for d in diagnostics)
    if document is None:
        assert len(diagnostics) >= 1
        assert all(d.code.startswith("yaml.") for d in diagnostics)
    else:
        assert isinstance(document, YamlDocument)
        assert {d.code for d in diagnostics} <= NON_FATAL_CODES
    for diagnostic in diagnostics:
        if diagnostic.line is not None:
            assert diagnostic.line >= 1
            assert diagnostic.column is not None
            assert diagnostic.column >= 1
        if diagnostic.code in SYNTAX_CODES:
            assert diagnostic.path == ""


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400))
def test_random_bytes_only_produce_diagnostics(data: bytes) -> None:
    _check_outcome(*read_yaml(data, file=FILE))


YAMLISH = st.text(
    alphabet=st.sampled_from(list("ab:- \n\t'\"[]{},#&*!|>?%@`\\~.019eEyYnN<_+\r\u00e9")),
    max_size=120,
)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(YAMLISH)
def test_random_yaml_like_text_only_produces_diagnostics(text: str) -> None:
    _check_outcome(*read_yaml(text.encode(), file=FILE))


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(
    st.recursive(
        st.sampled_from(
            ["a", "yes", "1_0", "'q'", '"d"', "*x", "&y z", "!t v", "null", "0.5", "~"]
        ),
        lambda inner: st.one_of(
            st.lists(inner, max_size=3).map(lambda items: "[" + ", ".join(items) + "]"),
            st.lists(
                st.tuples(st.sampled_from(["k", "k", "1", "<<", "on", '"s"']), inner), max_size=3
            ).map(lambda pairs: "{" + ", ".join(f"{k}: {v}" for k, v in pairs) + "}"),
        ),
        max_leaves=12,
    )
)
def test_random_flow_documents_yield_a_tree(text: str) -> None:
    document, diagnostics = read_yaml(f"root: {text}\n".encode(), file=FILE)
    _check_outcome(document, diagnostics)
    assert document is not None
