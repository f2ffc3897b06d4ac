"""One validator of request bodies (coordinator_api.bodies): the strict-JSON pass, then the body's
generated model, accepts exactly what the 2020-12 schemas of the bundled document accept, and
refuses with the same problem code and the same failing places.

The reference is the schemas as `jsonschema` (in this test only) judges them, as the API judged
bodies before the models alone did: Draft 2020-12 with format assertion and ECMA-262 patterns
(`$` ends the text, where Python's also matches before a final line feed). Two deliberate
tightenings, both of which the API's second check (the model, in lax mode) already refused:

* an integer member takes an integer token: `1.0` is a number, not an integer (03 §4 keeps `2`
  and `2.0` apart; pydantic's strict integers);
* `date-time` and `uuid` are jsonschema's checkers *and* the dialect's
  (`coordinator_core.jsonschema.dialect.format_matches`), which refuse what those checkers let
  through against their RFCs: a date-time followed by a line feed, a UUID that `uuid.UUID`
  forgives (`+`, `_`, spaces, `urn:` text). tests/unit/definition/
  test_schema_formats_jsonschema.py holds every difference between the two checkers.

A refusal names the same places (`violations` paths), each with a keyword the schemas also
report there; where the schemas report several keywords at one place (`minLength` and
`pattern` of an empty reason), the model reports the first it checks.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import (  # type: ignore[import-untyped]
    Draft202012Validator,
    FormatChecker,
    ValidationError,
    validators,
)
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from coordinator_api import wire
from coordinator_api.bodies import BodyCapture, read_body
from coordinator_api.problems import ApiProblem
from coordinator_api.spec import BUNDLED_NAME, load_yaml
from coordinator_core.jsonschema.dialect import format_matches
from coordinator_core.jsonschema.violations import violations_of

GENERATED = Path(__file__).resolve().parents[2] / "generated"
DOCUMENT_URI = "urn:test:openapi"
COMPONENTS = "#/components/schemas/"

REASON = {"reason": "coordinator.command.reason-invalid"}
RETENTION = {
    "before": "coordinator.command.retention-invalid",
    "limit": "coordinator.command.retention-invalid",
}
# Each request body schema, its model, and the member codes its routes answer with.
BODIES: dict[str, tuple[type[Any], Mapping[str, str]]] = {
    "StartRunRequest": (wire.StartRunRequest, {}),
    "ReasonRequest": (wire.ReasonRequest, REASON),
    "ReleaseAdmissionHoldRequest": (wire.ReleaseAdmissionHoldRequest, REASON),
    "RetentionRequest": (wire.RetentionRequest, RETENTION),
    "ReviewCompletion": (wire.ReviewCompletion, {}),
}


@cache
def bundled() -> dict[str, Any]:
    return load_yaml(GENERATED / BUNDLED_NAME)


def component(name: str) -> dict[str, Any]:
    schema = bundled()["components"]["schemas"][name]
    assert isinstance(schema, dict)
    return schema


def resolved(schema: dict[str, Any]) -> dict[str, Any]:
    """A property schema with its `$ref` (to a component) merged in, for the strategies."""
    ref = schema.get("$ref")
    if not isinstance(ref, str):
        return schema
    return {
        **component(ref.removeprefix(COMPONENTS)),
        **{k: v for k, v in schema.items() if k != "$ref"},
    }


# -- the reference --------------------------------------------------------------------------


def ecma_pattern(pattern: str) -> str:
    """`pattern` with ECMA-262 end anchors: an unescaped `$` outside a class becomes `\\Z`."""
    out: list[str] = []
    escaped = in_class = False
    for char in pattern:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "[":
            in_class = True
        elif char == "]":
            in_class = False
        elif char == "$" and not in_class:
            out.append("\\Z")
            continue
        out.append(char)
    return "".join(out)


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    if isinstance(instance, str) and not re.search(ecma_pattern(pattern), instance):
        yield ValidationError("does not match the pattern")


def _integer_token(checker: Any, instance: Any) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


_STOCK = FormatChecker()
FORMATS = FormatChecker(())
for _name in ("date-time", "uuid"):
    FORMATS.checks(_name)(
        lambda text, name=_name: _STOCK.conforms(text, name) and format_matches(name, text)
    )

Reference: Any = validators.extend(
    Draft202012Validator,
    {"pattern": _pattern},
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _integer_token),
)


@cache
def reference(name: str) -> Any:
    resource = Resource.from_contents(bundled(), default_specification=DRAFT202012)
    registry: Registry[Any] = Registry().with_resource(DOCUMENT_URI, resource)
    return Reference(
        {"$ref": f"{DOCUMENT_URI}{COMPONENTS}{name}"}, registry=registry, format_checker=FORMATS
    )


def _member_of(error: Any) -> str | None:
    """The top-level member a schema error is about, or None for the object's shape itself."""
    if error.absolute_path:
        first = error.absolute_path[0]
        return first if isinstance(first, str) else None
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = [name for name in error.validator_value if name not in error.instance]
        return missing[0] if len(missing) == 1 else None
    if error.validator in ("$ref", "allOf") and error.context:
        members = {_member_of(sub) for sub in error.context}
        return members.pop() if len(members) == 1 else None
    return None


def expected(name: str, body: Any) -> tuple[str, set[tuple[str, str]]] | None:
    """None when the schema accepts `body`, else the code and the (path, keyword) places."""
    errors = list(reference(name).iter_errors(body))
    if not errors:
        return None
    codes = BODIES[name][1]
    members = {_member_of(error) for error in errors}
    code = "coordinator.request.invalid"
    if len(members) == 1 and (member := members.pop()) is not None and member in codes:
        code = codes[member]
    return code, {(v.path, v.keyword) for v in violations_of(errors)}


def judged(name: str, body: Any) -> tuple[str, set[tuple[str, str]]] | None:
    model, codes = BODIES[name]
    capture = BodyCapture(json.dumps(body).encode(), False, "application/json")
    try:
        read_body(capture, model, member_codes=codes)
    except ApiProblem as refused:
        return refused.code, {(v.path, v.keyword) for v in refused.violations}
    return None


def assert_same_verdict(name: str, body: Any) -> None:
    reference_verdict, verdict = expected(name, body), judged(name, body)
    if reference_verdict is None or verdict is None:
        assert verdict == reference_verdict, body
        return
    assert verdict[0] == reference_verdict[0], body
    assert verdict[1] <= reference_verdict[1], body
    assert {path for path, _ in verdict[1]} == {path for path, _ in reference_verdict[1]}, body


# -- bodies near the schemas ----------------------------------------------------------------

WRONG_TYPES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)


def mostly(
    valid: st.SearchStrategy[Any], *faults: st.SearchStrategy[Any]
) -> st.SearchStrategy[Any]:
    """`valid` four times in five, else one of `faults` or a value of another JSON type."""
    return one_in(5).flatmap(lambda fault: st.one_of(*faults, WRONG_TYPES) if fault else valid)


def one_in(n: int) -> st.SearchStrategy[bool]:
    """True once in `n` draws, about (hypothesis draws small integers more often)."""
    return st.sampled_from([False] * (n - 1) + [True])


@st.composite
def rfc3339(draw: st.DrawFn) -> str:
    """An RFC 3339 date-time: either separator case, any fraction, any offset form."""
    moment = draw(st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)))
    digits = draw(st.text(alphabet=string.digits, max_size=12))
    offset = draw(
        st.sampled_from(["Z", "z", "+00:00", "-00:00"])
        | st.builds(
            "{}{:02d}:{:02d}".format, st.sampled_from("+-"), st.integers(0, 23), st.integers(0, 59)
        )
    )
    separator = draw(st.sampled_from("Tt"))
    return (
        moment.strftime(f"%Y-%m-%d{separator}%H:%M:%S") + ("." + digits if digits else "") + offset
    )


def date_time_faults(text: str) -> st.SearchStrategy[str]:
    return st.sampled_from(
        [
            text + "\n",
            text[:10] + " " + text[11:],
            text[:10] + "_" + text[11:],
            text[:16] + text[19:],  # no seconds
            text[:-3] + text[-2:] if text[-3] == ":" else text + "+2400",
            text[:10],
            text[:17] + "60" + text[19:],  # a leap second
            text[:17] + "61" + text[19:],
            "0000" + text[4:],
            text[:5] + "13" + text[7:],
            text[:8] + "31" + text[10:],
            text.replace(".", ",", 1),
            "1700000000",
        ]
    )


def uuid_faults(text: str) -> st.SearchStrategy[str]:
    return st.sampled_from(
        [
            text.replace("-", ""),
            "{" + text + "}",
            "urn:uuid:" + text,
            "+" + text[1:],
            text[:4] + "_" + text[5:],
            " " + text[1:],
            text + "\n",
            text[:-1],
            text[:-1] + "g",
        ]
    )


def member_values(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    schema = resolved(schema)
    if "const" in schema:
        const = schema["const"]
        return mostly(st.just(const), st.sampled_from([const + "\n", const.upper(), ""]))
    kind = schema.get("type")
    if kind is None:
        return JSON_VALUES
    if kind == "boolean":
        return mostly(st.booleans(), st.sampled_from([0, 1, "true", "false", None]))
    if kind == "integer":
        low, high = schema.get("minimum", -1000), schema.get("maximum", 1000)
        near = st.integers(low - 2, high + 2)
        return mostly(
            st.integers(low, high),
            near,
            near.map(float),
            near.map(str),
            st.integers(-(2**70), 2**70),
        )
    assert kind == "string", schema
    if schema.get("format") == "date-time":
        return mostly(rfc3339(), rfc3339().flatmap(date_time_faults))
    if schema.get("format") == "uuid":
        texts = st.uuids().map(str)
        return mostly(texts | texts.map(str.upper), texts.flatmap(uuid_faults))
    pattern = schema.get("pattern")
    valid = st.from_regex(ecma_pattern(pattern), fullmatch=True) if pattern else st.text()
    lengths = st.integers(schema.get("minLength", 0), schema.get("maxLength", 64) + 2)
    return mostly(
        valid.filter(lambda text: len(text) <= schema.get("maxLength", len(text))),
        valid.map(lambda text: text + "\n"),
        valid.map(str.upper),
        lengths.map(lambda n: "x" * n),
        lengths.map(lambda n: "é" * n),
        st.text(alphabet=string.printable + "\x00\x7f\x85é\U0001f600", max_size=300),
    )


def snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name)


@st.composite
def bodies(draw: st.DrawFn, name: str) -> Any:
    """A body near the schema: now and then not an object, a member missing or one too many."""
    schema = component(name)
    properties: dict[str, Any] = schema["properties"]
    if draw(one_in(30)):
        return draw(WRONG_TYPES)
    body: dict[str, Any] = {}
    for member, member_schema in properties.items():
        if not draw(one_in(16)):
            body[member] = draw(member_values(member_schema))
        elif draw(st.booleans()):  # under its Python name, which a model would also take
            body[snake(member)] = draw(member_values(member_schema))
    if draw(one_in(6)):
        unknown = st.sampled_from([snake(member) for member in properties] + ["\x01", "y" * 200])
        for extra in draw(st.lists(unknown | st.text(max_size=5), min_size=1, max_size=2)):
            body.setdefault(extra, draw(WRONG_TYPES))
    return body


def test_the_bodies_tested_are_the_request_bodies_of_the_document() -> None:
    found = set()
    for item in bundled()["paths"].values():
        for operation in item.values():
            if isinstance(operation, dict) and "requestBody" in operation:
                request = operation["requestBody"]
                if "$ref" in request:
                    request = bundled()["components"]["requestBodies"][
                        request["$ref"].split("/")[-1]
                    ]
                for media in request["content"].values():
                    # A signed event's body is any JSON value (06 §8), read by no model.
                    ref = media["schema"].get("$ref", "")
                    if ref.startswith(COMPONENTS):
                        found.add(ref.removeprefix(COMPONENTS))
    assert set(BODIES) == found
    assert all(model.__name__ == name for name, (model, _) in BODIES.items())


@pytest.mark.parametrize("name", sorted(BODIES))
@settings(suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_model_accepts_exactly_what_the_schema_accepts(name: str, data: st.DataObject) -> None:
    assert_same_verdict(name, data.draw(bodies(name)))


VALID = {
    "StartRunRequest": {
        "workflow": "reviewed-notice",
        "revision": "sha256:" + "5" * 64,
        "input": None,
    },
    "ReasonRequest": {"reason": "T-1"},
    "ReleaseAdmissionHoldRequest": {
        "reason": "T-1",
        "admissionHistoryComplete": True,
        "priorDeploymentFenced": False,
    },
    "RetentionRequest": {"before": "2026-03-02T09:00:00Z", "limit": 100},
    "ReviewCompletion": {
        "type": "review.completed",
        "eventId": "0b8f4f5e-8a0a-4c55-9d3b-3b2f4f9a7d10",
        "requestId": "0B8F4F5E-8A0A-4C55-9D3B-3B2F4F9A7D10",
        "resultId": "00000000-0000-0000-0000-000000000000",
        "completedAt": "2026-03-02t10:00:00.123456789+01:00",
    },
}
LENIENT_UUIDS = [
    "0b8f4f5e8a0a4c559d3b3b2f4f9a7d10", "{0b8f4f5e-8a0a-4c55-9d3b-3b2f4f9a7d10}",
    "urn:uuid:0b8f4f5e-8a0a-4c55-9d3b-3b2f4f9a7d10", "+b8f4f5e-8a0a-4c55-9d3b-3b2f4f9a7d10", 7,
]  # fmt: skip
# Where pydantic alone is laxer than the schemas, by member: each value is refused.
LENIENT = {
    ("StartRunRequest", "workflow"): ["reviewed-notice\n"],
    ("StartRunRequest", "revision"): ["sha256:" + "5" * 64 + "\n"],
    ("ReasonRequest", "reason"): ["T-1\n", 1],
    ("ReleaseAdmissionHoldRequest", "admissionHistoryComplete"): ["true", 1],
    ("RetentionRequest", "limit"): ["1", 1.0, True],
    ("RetentionRequest", "before"): [
        "2026-03-02 09:00:00Z", "2026-03-02T09:00Z", "2026-03-02T09:00:00+0100",
        "2026-03-02T09:00:00,5Z", "1700000000", 1_700_000_000, "2026-03-02T09:00:00Z\n",
        "2026-03-02T23:59:60Z", "0000-01-01T00:00:00Z",
    ],
    ("ReviewCompletion", "eventId"): LENIENT_UUIDS,
    ("ReviewCompletion", "requestId"): LENIENT_UUIDS,
    ("ReviewCompletion", "resultId"): LENIENT_UUIDS,
    ("ReviewCompletion", "completedAt"): ["2026-03-02 09:00:00Z", 1_700_000_000],
}  # fmt: skip


@pytest.mark.parametrize(
    ("name", "member", "value"), [(n, m, v) for (n, m), vs in LENIENT.items() for v in vs]
)
def test_what_pydantic_alone_would_coerce_is_refused(name: str, member: str, value: Any) -> None:
    body = {**VALID[name], member: value}
    assert judged(name, VALID[name]) is None
    verdict = judged(name, body)
    assert verdict is not None and {path for path, _ in verdict[1]} == {f"/{member}"}
    assert_same_verdict(name, body)


def test_every_formatted_member_of_a_request_body_is_probed() -> None:
    formatted = {
        (name, member)
        for name in BODIES
        for member, schema in component(name)["properties"].items()
        if "format" in resolved(schema)
    }
    assert formatted <= set(LENIENT)


@pytest.mark.parametrize("name", ["ReleaseAdmissionHoldRequest", "ReviewCompletion"])
def test_members_are_read_by_their_spec_names_only(name: str) -> None:
    """The models also answer to their Python names (to build answers); a body may not."""
    model = BODIES[name][0]
    renamed = {snake(member): value for member, value in VALID[name].items()}
    verdict = judged(name, renamed)
    assert verdict is not None and verdict[0] == "coordinator.request.invalid"
    assert ("", "additionalProperties") in verdict[1] and ("", "required") in verdict[1]
    assert model.model_validate(renamed) is not None  # what `by_name=False` turns down


def test_a_body_is_its_model_with_the_run_input_as_the_strict_pass_read_it() -> None:
    deep = json.loads("[" * 300 + "]" * 300)
    big = 4611686018427388000  # how RFC 8785 prints 2**62: the strict pass reads the double
    body = {**VALID["StartRunRequest"], "input": {"deep": deep, "big": big, "two": 2.0}}
    capture = BodyCapture(json.dumps(body).encode(), False, "application/json")
    read = read_body(capture, wire.StartRunRequest)
    assert read.input["deep"] == deep and read.input["big"] == 2**62
    assert type(read.input["two"]) is float
    retention = read_body(
        BodyCapture(
            b'{"before": "2026-03-02t10:00:00.5+01:00", "limit": 3}', False, "application/json"
        ),
        wire.RetentionRequest,
    )
    assert retention.before == datetime(2026, 3, 2, 9, 0, 0, 500_000, tzinfo=UTC)
    assert retention.limit == 3
