"""Our canonical JSON (`coordinator_core.values.canonical_json`) against the `rfc8785` package
(trailofbits), an independent implementation of RFC 8785: the same bytes for every JSON value
both accept, and, where they part, exactly the differences `values.py` documents:

- integers of magnitude 2**53 and beyond that binary64 holds exactly: we print them as
  ECMAScript prints that double (contract 02 §7); `rfc8785` refuses every integer outside
  ±(2**53 − 1) (`IntegerDomainError`);
- tuples: `rfc8785` serialises them as arrays, we refuse them (not JSON values);
- a lone surrogate in a member name: we refuse with CanonicalJsonError, `rfc8785` lets a bare
  UnicodeEncodeError escape;
- nesting: ours is iterative, `rfc8785` recurses and raises RecursionError on a deep value.
"""

from __future__ import annotations

import enum
import math
import sys

import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st

from coordinator_core.values import CanonicalJsonError, canonical_json, is_binary64_integer

SAFE = 2**53 - 1

# JSON scalars inside `rfc8785`'s domain: integers within ±(2**53 − 1), every finite double
# (subnormals, -0.0, the extremes), strings of any code point but a surrogate.
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-SAFE, max_value=SAFE)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
# Member names from the whole of Unicode (astral code points sort by UTF-16 code units, which
# is where a sort by code point goes wrong) and short ASCII ones, so that names collide.
names = st.text() | st.text(alphabet="ab\u00e9\U0001f600\ufb01", max_size=3)
values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=6) | st.dictionaries(names, children, max_size=6),
    max_leaves=40,
)


@given(values)
def test_the_same_bytes_as_rfc8785_for_every_json_value_it_accepts(value: object) -> None:
    assert canonical_json(value) == rfc8785.dumps(value)


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_every_double_prints_as_rfc8785_prints_it(number: float) -> None:
    assert canonical_json(number) == rfc8785.dumps(number)


# Integers that binary64 holds exactly beyond ±(2**53 − 1): a double's integer value.
large_exact_integers = st.floats(min_value=2.0**53, max_value=1.7976931348623157e308).map(
    lambda number: int(math.copysign(1, number) * math.floor(number))
) | st.integers(min_value=53, max_value=1023).map(lambda exponent: 2**exponent)


@given(large_exact_integers, st.booleans())
def test_an_exact_integer_beyond_2_53_prints_as_its_double_where_rfc8785_refuses(
    magnitude: int, negative: bool
) -> None:
    """The documented difference: the contract accepts every integer binary64 holds exactly
    and prints it as that double; `rfc8785` refuses the integer but prints the double."""
    integer = -magnitude if negative else magnitude
    assert is_binary64_integer(integer)
    with pytest.raises(rfc8785.IntegerDomainError):
        rfc8785.dumps(integer)
    assert canonical_json(integer) == rfc8785.dumps(float(integer))
    assert canonical_json({"n": [integer]}) == rfc8785.dumps({"n": [float(integer)]})


@given(st.integers(min_value=2**53 + 1, max_value=2**1100))
def test_an_integer_binary64_cannot_hold_is_refused_by_both(magnitude: int) -> None:
    if is_binary64_integer(magnitude):
        return  # exact: the test above
    for integer in (magnitude, -magnitude):
        with pytest.raises(CanonicalJsonError):
            canonical_json(integer)
        with pytest.raises(rfc8785.IntegerDomainError):
            rfc8785.dumps(integer)


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_nan_and_infinities_are_refused_by_both(number: float) -> None:
    with pytest.raises(CanonicalJsonError):
        canonical_json([number])
    with pytest.raises(rfc8785.FloatDomainError):
        rfc8785.dumps([number])


def test_a_lone_surrogate_is_refused_by_both_but_only_ours_says_so_in_a_member_name() -> None:
    with pytest.raises(CanonicalJsonError):
        canonical_json("\ud800")
    with pytest.raises(rfc8785.CanonicalizationError):
        rfc8785.dumps("\ud800")
    with pytest.raises(CanonicalJsonError):
        canonical_json({"\udc00": 1})
    with pytest.raises(UnicodeEncodeError):
        rfc8785.dumps({"\udc00": 1})


@pytest.mark.parametrize("value", [(1, 2), {"a": (1,)}])
def test_tuples_are_refused_though_rfc8785_serialises_them(value: object) -> None:
    rfc8785.dumps(value)
    with pytest.raises(CanonicalJsonError):
        canonical_json(value)


class Colour(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


class Word(enum.StrEnum):
    YES = "yes"


def test_enums_are_treated_alike_by_both() -> None:
    """An int or str enum is the int or str it is; a plain enum is refused by both."""
    assert canonical_json([Level.HIGH, Word.YES]) == rfc8785.dumps([Level.HIGH, Word.YES])
    assert canonical_json([Level.HIGH, Word.YES]) == b'[3,"yes"]'
    with pytest.raises(CanonicalJsonError):
        canonical_json(Colour.RED)
    with pytest.raises(rfc8785.CanonicalizationError):
        rfc8785.dumps(Colour.RED)


def test_a_deep_value_is_serialised_where_rfc8785_runs_out_of_stack() -> None:
    # Deeper than the interpreter's limit, which the functions runtime raises when it loads.
    depth = 2 * sys.getrecursionlimit()
    value: list[object] = []
    for _ in range(depth):
        value = [value]
    assert canonical_json(value) == b"[" * (depth + 1) + b"]" * (depth + 1)
    with pytest.raises(RecursionError):
        rfc8785.dumps(value)
