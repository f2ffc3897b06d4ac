"""Canonical JSON (contract 02 §7, RFC 8785), JSON value bounds (03 §4) and strict parsing."""

from __future__ import annotations

import random
import struct
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator_core.limits import (
    JSON_MAX_CANONICAL_BYTES,
    JSON_MAX_DEPTH,
    JSON_MAX_MEMBERS,
    JSON_MAX_NODES,
    JSON_MAX_STRING_BYTES,
)
from coordinator_core.values import (
    CanonicalJsonError,
    JsonBoundsError,
    StrictJsonError,
    canonical_json,
    check_json_value,
    is_binary64_integer,
    parse_canonical_json,
    parse_strict_json,
    sha256_label,
)

# --------------------------------------------------------------------------------------------
# RFC 8785 test vectors
# --------------------------------------------------------------------------------------------

# RFC 8785 Appendix B: IEEE 754 bit patterns and their canonical text.
APPENDIX_B = [
    ("0000000000000000", "0"),
    ("8000000000000000", "0"),
    ("0000000000000001", "5e-324"),
    ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),
]


def _double(bits: str) -> float:
    value: float = struct.unpack(">d", bytes.fromhex(bits))[0]
    return value


@pytest.mark.parametrize(("bits", "expected"), APPENDIX_B)
def test_rfc8785_appendix_b_numbers(bits: str, expected: str) -> None:
    assert canonical_json(_double(bits)) == expected.encode()


@pytest.mark.parametrize("bits", ["7fffffffffffffff", "7ff0000000000000", "fff0000000000000"])
def test_rfc8785_appendix_b_nan_and_infinity_refused(bits: str) -> None:
    with pytest.raises(CanonicalJsonError):
        canonical_json(_double(bits))


def test_rfc8785_section_3_2_2_example() -> None:
    text = (
        '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],'
        ' "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
        ' "literals": [null, true, false]}'
    )
    expected = (
        '{"literals":[null,true,false],'
        '"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    )
    assert canonical_json(parse_strict_json(text)) == expected.encode()


def test_rfc8785_section_3_2_3_key_sorting_by_utf16_code_units() -> None:
    value = {
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\U0001f600": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis",
    }
    expected = (
        '{"\\r":"Carriage Return","1":"One","\u0080":"Control",'
        '"\u00f6":"Latin Small Letter O With Diaeresis","\u20ac":"Euro Sign",'
        '"\U0001f600":"Emoji: Grinning Face","\ufb33":"Hebrew Letter Dalet With Dagesh"}'
    )
    assert canonical_json(value) == expected.encode()


def test_non_bmp_names_sort_before_high_bmp_names() -> None:
    # By code point U+FB33 < U+1F600; by UTF-16 the surrogate 0xD83D sorts first.
    assert canonical_json({"\ufb33": 1, "\U0001f600": 2}) == '{"\U0001f600":2,"\ufb33":1}'.encode()


def test_string_escaping() -> None:
    text = '"\\\b\t\n\f\r\x00\x01\x1f\x7f/\u2028é😀'
    expected = '"\\"\\\\\\b\\t\\n\\f\\r\\u0000\\u0001\\u001f\x7f/\u2028é😀"'
    assert canonical_json(text) == expected.encode("utf-8")


def test_literals_and_empty_containers() -> None:
    assert canonical_json(None) == b"null"
    assert canonical_json(True) == b"true"
    assert canonical_json(False) == b"false"
    assert canonical_json([]) == b"[]"
    assert canonical_json({}) == b"{}"
    assert canonical_json({"a": [], "b": {}}) == b'{"a":[],"b":{}}'


# --------------------------------------------------------------------------------------------
# The contract's number rules
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (2.0, "2"),
        (2, "2"),
        (1e21, "1e+21"),
        (1e20, "100000000000000000000"),
        (1.5e-7, "1.5e-7"),
        (1e-6, "0.000001"),
        (1e-7, "1e-7"),
        (-0.0, "0"),
        (0, "0"),
        (0.5, "0.5"),
        (-1.25, "-1.25"),
        (123.456, "123.456"),
        (1.2345e-5, "0.000012345"),
        (10**20, "100000000000000000000"),
        (10**21, "1e+21"),
        (2**53, "9007199254740992"),
        (-(2**53), "-9007199254740992"),
        (2**53 - 1, "9007199254740991"),
        (2**60, "1152921504606847000"),
        (2**62, "4611686018427388000"),
        (-(2**63), "-9223372036854776000"),
        (2**70, "1.1805916207174113e+21"),
    ],
)
def test_contract_number_formatting(value: float, expected: str) -> None:
    assert canonical_json(value) == expected.encode()


@pytest.mark.parametrize("value", [2**53 + 1, 9007199254740993, 2**63 - 1, -(2**63) - 1, 10**400])
def test_inexact_integers_refused(value: int) -> None:
    assert not is_binary64_integer(value)
    with pytest.raises(CanonicalJsonError):
        canonical_json(value)


@pytest.mark.parametrize("value", [0, 1, -1, 2**53, -(2**53), 2**62, -(2**63), 10**20, 2**1023])
def test_exact_integers_accepted(value: int) -> None:
    assert is_binary64_integer(value)


def test_bool_is_never_a_number() -> None:
    assert canonical_json([True, 1, False, 0]) == b"[true,1,false,0]"


@pytest.mark.parametrize(
    "value",
    [
        float("nan"),
        float("inf"),
        float("-inf"),
        {1: "a"},
        {"a": (1, 2)},
        {1, 2},
        b"bytes",
        "\ud800",
        {"\udc00": 1},
        ["ok", "x\udfffy"],
        object(),
    ],
)
def test_canonical_refusals(value: object) -> None:
    with pytest.raises(CanonicalJsonError):
        canonical_json(value)


def test_canonical_refuses_cycles() -> None:
    cyclic: list[object] = []
    cyclic.append(cyclic)
    with pytest.raises(CanonicalJsonError):
        canonical_json(cyclic)


def test_canonical_accepts_shared_non_cyclic_values() -> None:
    shared = {"k": 1}
    assert canonical_json([shared, shared]) == b'[{"k":1},{"k":1}]'


def test_canonical_handles_deep_nesting_without_recursion() -> None:
    value: object = 0
    for _ in range(5000):
        value = [value]
    assert canonical_json(value) == b"[" * 5000 + b"0" + b"]" * 5000


def test_sha256_label() -> None:
    assert sha256_label(b"") == (
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )


# --------------------------------------------------------------------------------------------
# JSON value bounds (contract 03 §4), each at its edge
# --------------------------------------------------------------------------------------------


def _nested(levels: int) -> object:
    """A value whose deepest node has depth `levels` (root depth 0)."""
    value: object = 0
    for _ in range(levels):
        value = [value]
    return value


def _bound_error(value: object) -> JsonBoundsError:
    with pytest.raises(JsonBoundsError) as caught:
        check_json_value(value)
    return caught.value


def test_depth_at_limit_passes_and_one_over_fails() -> None:
    check_json_value(_nested(JSON_MAX_DEPTH))
    error = _bound_error(_nested(JSON_MAX_DEPTH + 1))
    assert error.kind == "depth"
    assert error.pointer == "/0" * (JSON_MAX_DEPTH + 1)


def test_depth_counts_objects_and_reports_the_pointer() -> None:
    value: object = "leaf"
    for _ in range(JSON_MAX_DEPTH + 1):
        value = {"a/b~": value}
    error = _bound_error(value)
    assert error.kind == "depth"
    assert error.pointer == "/a~1b~0" * (JSON_MAX_DEPTH + 1)


def test_nodes_at_limit_passes_and_one_over_fails() -> None:
    # The root + 16 arrays + 15 × 255 + 254 scalars = 4096 nodes.
    at_limit = [[0] * 255 for _ in range(15)] + [[0] * 254]
    assert JSON_MAX_NODES == 1 + 16 + 15 * 255 + 254
    check_json_value(at_limit)
    over = [[0] * 255 for _ in range(16)]
    error = _bound_error(over)
    assert error.kind == "nodes"


def test_member_names_do_not_count_as_nodes() -> None:
    value = [{f"k{i}": 0 for i in range(255)} for _ in range(15)]
    value.append({f"k{i}": 0 for i in range(254)})
    check_json_value(value)  # 4096 values, 4079 names


def _array(count: int) -> object:
    return [0] * count


def _object(count: int) -> object:
    return {str(i): 0 for i in range(count)}


@pytest.mark.parametrize("make", [_array, _object])
def test_members_at_limit_passes_and_one_over_fails(make: Callable[[int], object]) -> None:
    check_json_value({"x": make(JSON_MAX_MEMBERS)})
    error = _bound_error({"x": make(JSON_MAX_MEMBERS + 1)})
    assert (error.kind, error.pointer) == ("members", "/x")


def test_string_bytes_at_limit_passes_and_one_over_fails() -> None:
    check_json_value(["a" * JSON_MAX_STRING_BYTES])
    error = _bound_error(["a" * (JSON_MAX_STRING_BYTES + 1)])
    assert (error.kind, error.pointer) == ("string", "/0")


def test_string_bound_counts_utf8_bytes() -> None:
    check_json_value("é" * (JSON_MAX_STRING_BYTES // 2))
    assert _bound_error("é" * (JSON_MAX_STRING_BYTES // 2) + "a").kind == "string"
    check_json_value("😀" * (JSON_MAX_STRING_BYTES // 4))
    assert _bound_error("😀" * (JSON_MAX_STRING_BYTES // 4) + "a").kind == "string"


def test_member_name_bytes_at_limit_passes_and_one_over_fails() -> None:
    check_json_value({"n" * JSON_MAX_STRING_BYTES: 1})
    long_name = "n" * (JSON_MAX_STRING_BYTES + 1)
    error = _bound_error({"o": {long_name: 1}})
    assert (error.kind, error.pointer) == ("string", "/o/" + long_name)


def _value_of_canonical_size(size: int) -> list[str]:
    # ["aaa…","aaa…",…]: each string of n bytes costs n + 2, plus commas and brackets.
    chunk = JSON_MAX_STRING_BYTES
    strings: list[str] = []
    total = 2
    while True:
        cost = chunk + 2 + (1 if strings else 0)
        if total + cost > size:
            break
        strings.append("a" * chunk)
        total += cost
    rest = size - total - (3 if strings else 2)
    strings.append("a" * rest)
    return strings


def test_canonical_size_at_limit_passes_and_one_over_fails() -> None:
    at_limit = _value_of_canonical_size(JSON_MAX_CANONICAL_BYTES)
    assert len(canonical_json(at_limit)) == JSON_MAX_CANONICAL_BYTES
    check_json_value(at_limit)
    over = _value_of_canonical_size(JSON_MAX_CANONICAL_BYTES + 1)
    assert len(canonical_json(over)) == JSON_MAX_CANONICAL_BYTES + 1
    assert _bound_error(over).kind == "canonical-size"


def test_canonical_size_counts_escapes() -> None:
    # 8 strings of 16,384 bytes are 131,090 raw bytes; with escapes far more.
    escaped = ["\x01" * 2000] * 11  # each 2000 bytes raw, 12,000 escaped
    assert len(canonical_json(escaped)) > JSON_MAX_CANONICAL_BYTES
    assert _bound_error(escaped).kind == "canonical-size"
    plain = ["a" * 2000] * 11
    check_json_value(plain)


@pytest.mark.parametrize(
    ("value", "pointer"),
    [
        ([9007199254740993], "/0"),
        ({"n": 2**63 - 1}, "/n"),
        ({"n": [-(2**63) - 1]}, "/n/0"),
    ],
)
def test_inexact_integers_are_an_integer_bound(value: object, pointer: str) -> None:
    error = _bound_error(value)
    assert (error.kind, error.pointer) == ("integer", pointer)


@pytest.mark.parametrize("value", [-(2**63), 2**62, 2**53, 10**20, 1.0, -0.0, True])
def test_exact_numbers_pass(value: object) -> None:
    check_json_value({"n": value})


@pytest.mark.parametrize(
    ("value", "pointer"),
    [
        ({"a": (1,)}, "/a"),
        ({"a": float("nan")}, "/a"),
        ([float("inf")], "/0"),
        ({1: 2}, ""),
        ({"a": {3.5: 2}}, "/a"),
        (["\ud800"], "/0"),
        ({"\udc00": 1}, "/\udc00"),
        ({"s": {1, 2}}, "/s"),
        (b"x", ""),
        (object(), ""),
    ],
)
def test_not_json(value: object, pointer: str) -> None:
    error = _bound_error(value)
    assert (error.kind, error.pointer) == ("not-json", pointer)


def test_first_break_in_document_order_is_reported() -> None:
    error = _bound_error({"a": [1, (2,)], "b": 2**63 - 1})
    assert (error.kind, error.pointer) == ("not-json", "/a/1")


def test_bound_messages_never_quote_the_value() -> None:
    canary = "CANARY-7d1f"
    for value in ([canary * 5000], {canary: (1,)}, [canary, float("nan")]):
        error = _bound_error(value)
        assert canary not in str(error)


def test_hostile_input_is_cheap() -> None:
    wide: list[object] = [[0] * 100_000 for _ in range(10)]
    assert _bound_error(wide).kind == "members"
    deep: object = 0
    for _ in range(100_000):
        deep = [deep]
    assert _bound_error(deep).kind == "depth"
    cyclic: list[object] = []
    cyclic.append(cyclic)
    assert _bound_error(cyclic).kind in {"depth", "nodes"}


# --------------------------------------------------------------------------------------------
# Strict parsing
# --------------------------------------------------------------------------------------------


def test_parse_keeps_int_and_float_apart() -> None:
    value = parse_strict_json(b'{"i": 2, "f": 2.0, "e": 1e2, "big": 9007199254740993}')
    assert value == {"i": 2, "f": 2.0, "e": 100.0, "big": 9007199254740993}
    assert isinstance(value, dict)
    assert type(value["i"]) is int
    assert type(value["f"]) is float
    assert type(value["e"]) is float
    assert type(value["big"]) is int


def test_parse_accepts_str_and_valid_surrogate_pairs() -> None:
    assert parse_strict_json('["\\ud83d\\ude00", "\\\\ud800"]') == ["😀", "\\ud800"]


@pytest.mark.parametrize(
    "text",
    [
        b'{"a": 1, "a": 2}',
        b'{"a": {"b": 1, "b": 1}}',
        b"NaN",
        b"[Infinity]",
        b"[-Infinity]",
        b"[1e400]",
        b'"\\ud800"',
        b'{"\\udc00": 1}',
        b'["\\ude00\\ud83d"]',
        b"[1,]",
        b"{'a': 1}",
        b"",
        b"1 2",
        b"\xff",
        b"\xef\xbb\xbf{}",
        b'"\x01"',
        b"[" * 100_000,
        b"1" * 5000,
        '"\ud800"',
    ],
)
def test_parse_refusals(text: bytes | str) -> None:
    with pytest.raises(StrictJsonError):
        parse_strict_json(text)


def test_strict_json_error_is_a_value_error() -> None:
    assert issubclass(StrictJsonError, ValueError)
    assert issubclass(CanonicalJsonError, ValueError)
    assert issubclass(JsonBoundsError, ValueError)


# --------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------


def _reparses_exactly(value: float) -> bool:
    """False for numbers in [2**53, 1e21) whose ES text is a zero-padded integer token that is
    not itself exact in binary64 (see test_known_gap_padded_integer_tokens)."""
    text = canonical_json(value).decode()
    return any(c in text for c in ".e") or is_binary64_integer(int(text))


_integers = st.one_of(
    st.integers(min_value=-(2**53), max_value=2**53),
    st.integers(min_value=-1023, max_value=1023).map(lambda e: 2**e if e >= 0 else -(2**-e)),
    st.integers(min_value=0, max_value=22).map(lambda e: 10**e),
).filter(_reparses_exactly)
_floats = st.floats(allow_nan=False, allow_infinity=False)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    _integers,
    _floats.filter(_reparses_exactly),
    st.text(max_size=20),
)
json_values = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=6),
        st.dictionaries(st.text(max_size=8), children, max_size=6),
    ),
    max_leaves=40,
)


@given(json_values)
def test_canonical_round_trip_is_a_fixed_point(value: object) -> None:
    canonical = canonical_json(value)
    assert canonical_json(parse_strict_json(canonical)) == canonical
    assert parse_strict_json(canonical.decode("utf-8")) is not None or canonical == b"null"


@given(json_values)
def test_canonical_bytes_parse_as_canonical_json_to_the_value_strict_parsing_reads(
    value: object,
) -> None:
    canonical = canonical_json(value)
    parsed = parse_canonical_json(canonical)
    assert parsed == parse_strict_json(canonical)
    assert canonical_json(parsed) == canonical


def test_bytes_that_are_not_utf8_json_do_not_parse_as_canonical_json() -> None:
    for data in (b"", b"{", b"\xff", b'{"a":NaN}', b"[1,]", b"\xef\xbb\xbf1", b"1 2"):
        with pytest.raises(StrictJsonError):
            parse_canonical_json(data)


def _shuffled(value: object, rng: random.Random) -> object:
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {name: _shuffled(member, rng) for name, member in items}
    if isinstance(value, list):
        return [_shuffled(member, rng) for member in value]
    return value


@given(json_values, st.integers(min_value=0, max_value=2**32))
def test_canonical_form_ignores_member_order(value: object, seed: int) -> None:
    assert canonical_json(_shuffled(value, random.Random(seed))) == canonical_json(value)


def test_padded_integer_tokens_read_back_as_the_double_they_print() -> None:
    # ES prints these doubles as their shortest digits padded with zeros; read back, the token
    # denotes that double, so canonical bytes round-trip (02 §7 rules 4 and 5 together).
    for value, expected in [
        (6.035130739964729e16, b"60351307399647290"),
        (2**62, b"4611686018427388000"),
        (-(2**63), b"-9223372036854776000"),
    ]:
        check_json_value(value)
        text = canonical_json(value)
        assert text == expected
        reparsed = parse_strict_json(text)
        assert isinstance(reparsed, int)
        assert reparsed == int(value)
        check_json_value(reparsed)
        assert canonical_json(reparsed) == text


def test_an_inexact_integer_token_that_is_no_double_rendering_stays_refused() -> None:
    for token in (b"9007199254740993", b"9223372036854775807"):
        with pytest.raises(JsonBoundsError) as caught:
            check_json_value(parse_strict_json(token))
        assert caught.value.kind == "integer"


@given(_floats)
def test_float_text_round_trips_to_the_same_double(value: float) -> None:
    text = canonical_json(value).decode()
    assert float(text) == value
    assert "e" not in text or abs(value) >= 1e21 or abs(value) < 1e-6
