"""W20's null acceptance: the validator-free fast path agrees with the real validator."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from coordinator_core.jsonschema.dialect import (
    _accepts_null_directly,
    accepts_null,
    check_schema,
    compile_validator,
)

SAFE_INTEGERS = st.integers(min_value=-(2**53), max_value=2**53)
TYPES = ["null", "object", "string", "integer", "number", "boolean", "array"]

keyword = st.one_of(
    st.builds(lambda t: {"type": t}, st.sampled_from(TYPES)),
    st.builds(
        lambda ts: {"type": ts},
        st.lists(st.sampled_from(TYPES), min_size=1, max_size=3, unique=True),
    ),
    st.builds(lambda v: {"const": v}, st.one_of(st.none(), SAFE_INTEGERS, st.text(max_size=3))),
    st.builds(
        lambda vs: {"enum": vs},
        st.lists(st.one_of(st.none(), SAFE_INTEGERS), min_size=1, max_size=3),
    ),
    st.just({"required": ["a"]}),
    st.just({"minLength": 2}),
    st.just({"properties": {"a": {"type": "string"}}}),
    st.just({"title": "x", "description": "y"}),
    st.just({"format": "date-time"}),
    st.just({"anyOf": [{"type": "null"}, {"type": "string"}]}),
    st.just({"not": {"type": "null"}}),
)


@st.composite
def schemas(draw: st.DrawFn) -> Any:
    if draw(st.booleans()) and draw(st.booleans()):
        return draw(st.booleans())
    merged: dict[str, Any] = {}
    for part in draw(st.lists(keyword, max_size=4)):
        merged.update(part)
    return merged


@given(schemas())
def test_fast_path_agrees_with_the_validator(schema: Any) -> None:
    assert not check_schema(schema, "")
    expected = compile_validator(schema).is_valid(None)
    direct = _accepts_null_directly(schema)
    assert direct is None or direct == expected
    assert accepts_null(schema) == expected
