"""Where a value fails its schema, without the value (coordinator_core.jsonschema.violations):
the pointer, the keyword, the member names of `required` and `additionalProperties`, at most
ten places, and a member name that could be data (not printable, too long) left out."""

from __future__ import annotations

import json

from coordinator_core.jsonschema.dialect import compile_validator
from coordinator_core.jsonschema.violations import MAX_VIOLATIONS, Violation

CANARY = "canary-value-77c1"
SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["permitId", "holder"],
    "properties": {
        "permitId": {"type": "string", "format": "uuid"},
        "holder": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        },
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}},
        "notes": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}


def violations(instance: object) -> list[dict[str, object]]:
    return [v.to_json() for v in compile_validator(SCHEMA).violations(instance)]


def test_each_place_is_a_pointer_a_keyword_and_the_member_names() -> None:
    found = violations(
        {"permitId": CANARY, "holder": {"age": "x"}, "tags": ["ok", CANARY], "workflowId": 1}
    )
    assert found == [
        {"path": "", "keyword": "additionalProperties", "members": ["workflowId"]},
        {"path": "/holder", "keyword": "required", "members": ["name"]},
        {"path": "/holder/age", "keyword": "type"},
        {"path": "/permitId", "keyword": "format"},
        {"path": "/tags/1", "keyword": "maxLength"},
    ]
    assert CANARY not in json.dumps(found)


def test_a_member_name_that_could_be_data_is_left_out() -> None:
    long_name = "k" * 129
    found = violations(
        {"permitId": "x", "holder": {"name": "n"}, long_name: 1, "bad\nname": 2,
         "notes": {long_name: 5, "ok": 6}}
    )  # fmt: skip
    assert long_name not in json.dumps(found) and "bad\\nname" not in json.dumps(found)
    # The unknown members are not named; a place under a hidden name stops at its parent.
    assert {"path": "/notes", "keyword": "type"} in found
    assert {"path": "/permitId", "keyword": "format"} in found


def test_at_most_ten_places_in_pointer_order() -> None:
    instance = {"permitId": "x", "holder": {"name": "n"}, "tags": ["long"] * 30}
    found = compile_validator(SCHEMA).violations(instance)
    assert len(found) == MAX_VIOLATIONS and list(found) == sorted(found)


def test_a_sentence_names_the_members_and_the_keyword() -> None:
    subject = "The run input"
    assert Violation("", "required", ("a", "b")).sentence(subject) == (
        "The run input lacks the required members `a`, `b` here."
    )
    assert Violation("", "additionalProperties", ("workflowId",)).sentence(subject) == (
        "The run input has the member `workflowId` here, which its schema does not allow."
    )
    assert Violation("/x", "format").sentence(subject) == (
        "The run input fails the schema keyword `format` here."
    )
