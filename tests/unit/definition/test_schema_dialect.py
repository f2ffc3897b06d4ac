"""The JSON Schema dialect (contract 01 §12; S1 pointers of 02 §5.6): checking and validation."""

from __future__ import annotations

import subprocess
import sys

import pytest

from coordinator_core.jsonschema.dialect import (
    FORMATS,
    SCHEMA_URI,
    SchemaFinding,
    accepts_null,
    check_schema,
    compile_validator,
    format_matches,
)
from coordinator_core.limits import JSON_MAX_DEPTH, SCHEMA_ABI

BASE = "/input"


def pointers(schema: object, base: str = BASE) -> list[str]:
    return [finding.pointer for finding in check_schema(schema, base)]


def valid(schema: object, instance: object) -> bool:
    assert check_schema(schema, "") == []
    return compile_validator(schema).is_valid(instance)


# -- rule 1: Draft 2020-12; $schema, if present, is the 2020-12 URI ------------------------------


def test_rule_1_schema_uri_accepted_at_root_and_in_subschemas() -> None:
    schema = {"$schema": SCHEMA_URI, "properties": {"a": {"$schema": SCHEMA_URI}}}
    assert pointers(schema) == []


@pytest.mark.parametrize(
    "uri",
    [
        "http://json-schema.org/draft-07/schema#",
        "https://json-schema.org/draft/2019-09/schema",
        SCHEMA_URI + "#",
        5,
        None,
    ],
)
def test_rule_1_other_schema_uri_refused(uri: object) -> None:
    assert pointers({"$schema": uri}) == ["/input/$schema"]
    assert pointers({"items": {"$schema": uri}}) == ["/input/items/$schema"]


# -- rule 2: the root is an object or a boolean ----------------------------------------------------


@pytest.mark.parametrize("root", [True, False, {}])
def test_rule_2_object_or_boolean_root_accepted(root: object) -> None:
    assert pointers(root) == []


@pytest.mark.parametrize("root", [None, 7, 1.5, "string", [], [{}]])
def test_rule_2_other_root_refused(root: object) -> None:
    assert pointers(root) == ["/input"]


def test_rule_2_every_schema_position_must_be_object_or_boolean() -> None:
    schema = {
        "items": 5,
        "allOf": [{}, "x"],
        "properties": {"a": None, "b": True},
        "$defs": {"d": []},
        "not": 1.5,
    }
    assert sorted(pointers(schema)) == sorted(
        [
            "/input/items",
            "/input/allOf/1",
            "/input/properties/a",
            "/input/$defs/d",
            "/input/not",
        ]
    )


# -- rule 3: the JSON value bounds (03 §4) ---------------------------------------------------------


def test_rule_3_depth_at_limit_passes_and_one_over_fails() -> None:
    # Each `not` adds one level: the innermost schema sits at depth `levels`.
    def nested(levels: int) -> object:
        schema: object = {}
        for _ in range(levels):
            schema = {"not": schema}
        return schema

    assert pointers(nested(JSON_MAX_DEPTH)) == []
    assert pointers(nested(JSON_MAX_DEPTH + 1)) == ["/input" + "/not" * (JSON_MAX_DEPTH + 1)]


def test_rule_3_hostile_depth_is_reported_once_and_cheaply() -> None:
    schema: object = {}
    for _ in range(50_000):
        schema = {"not": schema}
    findings = check_schema(schema, BASE)
    assert [finding.pointer for finding in findings] == ["/input" + "/not" * (JSON_MAX_DEPTH + 1)]


def test_rule_3_bound_breaks_are_reported_at_their_pointer() -> None:
    assert pointers({"properties": {"a": {"description": "x" * 16_385}}}) == [
        "/input/properties/a/description"
    ]
    assert pointers({"const": 2**63 - 1}) == ["/input/const"]
    assert pointers({"enum": list(range(257))}) == ["/input/enum"]
    assert pointers({"const": 9007199254740992, "maximum": -(2**63)}) == []


def test_rule_3_non_json_values_are_refused() -> None:
    assert pointers({"const": float("nan")}) == ["/input/const"]
    assert pointers({"enum": (1, 2)}) == ["/input/enum", "/input/enum"]


# -- rule 4: $id and $vocabulary are forbidden anywhere --------------------------------------------


def test_rule_4_id_and_vocabulary_refused_anywhere() -> None:
    schema = {
        "$id": "https://example.com/s",
        "properties": {"a": {"$vocabulary": {}}, "$id": {"type": "string"}},
        "$defs": {"d": {"items": {"$id": "#x"}}},
    }
    assert pointers(schema) == [
        "/input/$id",
        "/input/properties/a/$vocabulary",
        "/input/$defs/d/items/$id",
    ]


# -- rule 5: $ref / $dynamicRef are local and resolve inside the schema ----------------------------


@pytest.mark.parametrize("keyword", ["$ref", "$dynamicRef"])
@pytest.mark.parametrize(
    "reference",
    ["other.json", "https://example.com/s#/a", "/properties/a", "properties/a", "urn:x#a"],
)
def test_rule_5_non_local_references_refused(keyword: str, reference: str) -> None:
    schema = {"properties": {"a": {keyword: reference}}}
    assert pointers(schema) == [f"/input/properties/a/{keyword}"]


@pytest.mark.parametrize(
    "reference",
    [
        "#",
        "#/$defs/name",
        "#/properties/a%20b",
        "#/properties/a~1b",
        "#/$defs/t~0x",
        "#/allOf/0",
        "#/allOf/1/items",
        "#node",
        "#dynamic",
        "#/properties/a%7E1b",  # percent-decoded first, then "~1" unescaped
    ],
)
def test_rule_5_local_references_resolve(reference: str) -> None:
    schema = {
        "$defs": {"name": {"type": "string"}, "t~x": {}, "n": {"$anchor": "node"}},
        "properties": {"a b": {}, "a/b": {}, "p": {"$ref": reference}},
        "allOf": [{"$dynamicAnchor": "dynamic"}, {"items": {}}],
    }
    assert pointers(schema) == []
    # jsonschema's resolver (referencing) agrees: the reference is followed without error.
    validator = compile_validator(schema)
    assert validator.is_valid({"p": "x"})
    assert validator.is_valid({"p": 1}) == (reference != "#/$defs/name")


@pytest.mark.parametrize(
    "reference",
    [
        "#/$defs/missing",
        "#missing",
        "#/properties",  # the map of names, not a schema
        "#/enum/0",  # a value, not a schema
        "#/x-extension",  # ignored content is not a schema
        "#/allOf/01",
        "#/allOf/-1",
        "#/allOf/2",
        "#/",
        "#/required/0",
        "#not an anchor",
        "#/properties/a%2Fb",  # percent-decoded before splitting, as `referencing` does
    ],
)
def test_rule_5_unresolvable_references_refused(reference: str) -> None:
    schema = {
        "allOf": [{}, {}],
        "enum": [{}],
        "required": ["a"],
        "x-extension": {},
        "properties": {"p": {"$ref": reference}, "a/b": {}},
    }
    assert pointers(schema) == ["/input/properties/p/$ref"]


def test_rule_5_dynamic_ref_must_resolve_too() -> None:
    assert pointers({"items": {"$dynamicRef": "#meta"}}) == ["/input/items/$dynamicRef"]
    assert pointers({"$dynamicAnchor": "meta", "items": {"$dynamicRef": "#meta"}}) == []


def test_rule_5_anchor_names_follow_the_meta_schema() -> None:
    assert pointers({"$anchor": "1abc"}) == ["/input/$anchor"]
    assert pointers({"$dynamicAnchor": "a b"}) == ["/input/$dynamicAnchor"]
    assert pointers({"$anchor": 5}) == ["/input/$anchor"]
    assert pointers({"$anchor": "_a-b.c9"}) == []


def test_rule_5_duplicate_anchor_names_refused() -> None:
    schema = {"$defs": {"a": {"$anchor": "x"}, "b": {"$dynamicAnchor": "x"}}}
    assert pointers(schema) == ["/input/$defs/b/$dynamicAnchor"]
    assert pointers({"$anchor": "x", "$dynamicAnchor": "x"}) == []


def test_rule_5_in_place_reference_cycles_refused() -> None:
    assert pointers({"$ref": "#"}) == ["/input/$ref"]
    assert pointers({"$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}}}) == [
        "/input/$defs/a/allOf/0/$ref"
    ]
    mutual = {
        "$defs": {
            "a": {"anyOf": [{"$ref": "#/$defs/b"}]},
            "b": {"not": {"$ref": "#/$defs/a"}},
        }
    }
    assert pointers(mutual) == ["/input/$defs/a/anyOf/0/$ref", "/input/$defs/b/not/$ref"]
    through_if = {"if": {"$ref": "#"}}
    assert pointers(through_if) == ["/input/if/$ref"]


def test_rule_5_recursion_through_the_instance_is_fine() -> None:
    tree = {
        "type": "object",
        "properties": {"children": {"type": "array", "items": {"$ref": "#"}}},
        "additionalProperties": {"$ref": "#/$defs/leaf"},
        "$defs": {"leaf": {"type": "string"}},
        "then": {"$ref": "#"},  # `then` without `if` is never applied
    }
    assert pointers(tree) == []
    validator = compile_validator(tree)
    assert validator.is_valid({"children": [{"children": []}, {"x": "leaf"}]})
    assert not validator.is_valid({"children": [{"children": [{"x": 1}]}]})


# -- rule 6: the keyword list; x-* ignored; names are not keywords --------------------------------


@pytest.mark.parametrize(
    "keyword",
    [
        "definitions",
        "dependencies",
        "$recursiveRef",
        "$recursiveAnchor",
        "additionalItems",
        "divisibleBy",
        "nullable",
        "example",
        "X-upper",
        "",
    ],
)
def test_rule_6_unknown_keywords_refused(keyword: str) -> None:
    assert pointers({"properties": {"a": {keyword: {}}}}) == [f"/input/properties/a/{keyword}"]


def test_rule_6_x_keywords_allowed_and_their_contents_ignored() -> None:
    schema = {"x-doc": {"$id": 1, "definitions": {}, "type": 7}, "x-": None}
    assert pointers(schema) == []
    assert valid(schema, "anything")


def test_rule_6_names_are_not_keywords() -> None:
    names: dict[str, object] = {"$id": {}, "definitions": {}, "type": {}, "x y/z~": {}}
    schema = {
        "properties": names,
        "patternProperties": {"^$id$": {}, "definitions": {}},
        "$defs": names,
        "dependentSchemas": names,
        "dependentRequired": {"$id": ["definitions"], "nullable": []},
    }
    assert pointers(schema) == []


def test_rule_6_pointer_tokens_are_escaped() -> None:
    assert pointers({"properties": {"a/b~c": {"bogus": 1}}}) == ["/input/properties/a~1b~0c/bogus"]


# -- ill-typed keyword values (what the 2020-12 meta-schema refuses) -------------------------------


@pytest.mark.parametrize(
    ("keyword", "value"),
    [
        ("type", 7),
        ("type", "text"),
        ("type", []),
        ("type", ["string", "string"]),
        ("type", ["string", 1]),
        ("required", "a"),
        ("required", ["a", "a"]),
        ("required", [1]),
        ("minimum", "x"),
        ("minimum", True),
        ("maximum", None),
        ("exclusiveMinimum", [1]),
        ("exclusiveMaximum", {}),
        ("multipleOf", 0),
        ("multipleOf", -1.5),
        ("multipleOf", True),
        ("minLength", -1),
        ("minLength", 1.5),
        ("minLength", True),
        ("maxLength", "3"),
        ("maxItems", None),
        ("minItems", -0.5),
        ("maxContains", False),
        ("minContains", []),
        ("maxProperties", 1.25),
        ("minProperties", "0"),
        ("uniqueItems", "yes"),
        ("deprecated", 1),
        ("readOnly", None),
        ("writeOnly", "true"),
        ("title", 1),
        ("description", None),
        ("$comment", []),
        ("contentMediaType", 1),
        ("contentEncoding", False),
        ("enum", "a"),
        ("enum", {}),
        ("examples", 1),
        ("format", 1),
        ("pattern", 1),
        ("dependentRequired", {"a": "b"}),
        ("dependentRequired", []),
        ("dependentRequired", {"a": ["b", "b"]}),
        ("dependentRequired", {"a": [1]}),
        ("allOf", []),
        ("allOf", {}),
        ("anyOf", True),
        ("oneOf", "x"),
        ("prefixItems", []),
        ("properties", []),
        ("$defs", "x"),
        ("patternProperties", 1),
        ("dependentSchemas", [{}]),
        ("$ref", 5),
        ("$dynamicRef", None),
        ("items", [{}]),
        ("items", 5),
        ("not", "x"),
        ("additionalProperties", 1),
        ("contentSchema", []),
    ],
)
def test_ill_typed_keyword_values_refused_at_the_keyword(keyword: str, value: object) -> None:
    assert pointers({"properties": {"p": {keyword: value}}}) == [f"/input/properties/p/{keyword}"]


@pytest.mark.parametrize(
    ("keyword", "value"),
    [
        ("type", "integer"),
        ("type", ["string", "null"]),
        ("required", []),
        ("minimum", -1.5),
        ("maximum", 10**20),
        ("multipleOf", 0.01),
        ("minLength", 0),
        ("minLength", 2.0),
        ("maxItems", 10),
        ("uniqueItems", False),
        ("enum", []),
        ("enum", [None, 1, "a", [], {}]),
        ("const", None),
        ("default", {"any": ["thing"]}),
        ("examples", []),
        ("dependentRequired", {"a": [], "b": ["c", "d"]}),
        ("items", False),
        ("additionalProperties", True),
        ("prefixItems", [True, {}]),
        ("contentSchema", {"type": "object"}),
    ],
)
def test_well_typed_keyword_values_accepted(keyword: str, value: object) -> None:
    assert pointers({keyword: value}) == []


# -- rule 7: format asserted, ten formats only ------------------------------------------------------


def test_rule_7_the_ten_formats() -> None:
    assert (
        frozenset(
            {
                "date-time",
                "date",
                "time",
                "email",
                "hostname",
                "ipv4",
                "ipv6",
                "uri",
                "uri-reference",
                "uuid",
            }
        )
        == FORMATS
    )


@pytest.mark.parametrize(
    "name", ["regex", "idn-email", "iri", "duration", "json-pointer", "DATE", "int32", ""]
)
def test_rule_7_unknown_format_refused(name: str) -> None:
    schema = {"properties": {"messageId": {"type": "string", "format": name}}}
    assert pointers(schema, "/outcomes/notice-sent") == [
        "/outcomes/notice-sent/properties/messageId/format"
    ]


FORMAT_CASES: dict[str, tuple[list[str], list[str]]] = {
    "date-time": (
        [
            "2024-02-29T12:00:00Z",
            "2000-02-29T00:00:00z",
            "1990-12-31T23:59:60Z",
            "2024-01-01t00:00:00.123456+05:30",
            "2024-01-01T00:00:00-00:00",
            "0000-01-01T00:00:00Z",
        ],
        [
            "2023-02-29T12:00:00Z",
            "1900-02-29T00:00:00Z",
            "2024-01-01T00:00:00",
            "2024-01-01 00:00:00Z",
            "2024-13-01T00:00:00Z",
            "2024-04-31T00:00:00Z",
            "2024-01-01T24:00:00Z",
            "2024-01-01T00:60:00Z",
            "2024-01-01T00:00:61Z",
            "2024-01-01T00:00:00+24:00",
            "2024-01-01T00:00:00+05:60",
            "2024-01-01T00:00:00+0530",
            "2024-01-01T00:00:00.Z",
            "2024-01-01T00:00Z",
            "٢٠٢٤-01-01T00:00:00Z",
            "2024-01-01T00:00:00Z\n",
            "",
        ],
    ),
    "date": (
        ["2024-02-29", "2000-02-29", "2023-12-31", "2023-01-31"],
        [
            "1900-02-29",
            "2023-02-29",
            "2024-04-31",
            "2024-00-10",
            "2024-01-00",
            "2024-1-01",
            "2024-01-01Z",
            "20240101",
            "2024-01-01T00:00:00Z",
            "2024-01-01\n",
        ],
    ),
    "time": (
        ["23:59:60Z", "00:00:00+00:00", "12:34:56.789z", "08:30:00-23:59"],
        ["12:34:56", "12:34Z", "24:00:00Z", "12:34:56+5:00", "12:34:61Z", "1:02:03Z", "12:34:56 Z"],
    ),
    "email": (
        [
            "a@example.com",
            "first.last+tag@sub.example.org",
            "!#$%&'*+/=?^_`{|}~-@x.io",
            "a@localhost",
            "x" * 64 + "@example.com",
        ],
        [
            "a",
            "@x.com",
            "a@",
            "a..b@x.com",
            ".a@x.com",
            "a.@x.com",
            "a@b@c.com",
            "a b@x.com",
            "a@-x.com",
            "é@x.com",
            "a@é.com",
            '"quoted"@x.com',
            "x" * 65 + "@example.com",
            "a@" + ".".join(["b" * 63] * 4),  # 256 bytes in all
            "a@[127.0.0.1]",
        ],
    ),
    "hostname": (
        [
            "example.com",
            "a",
            "xn--bcher-kva.example",
            "1.2.3.4",
            "a-b.c-d",
            "A" * 63 + ".com",
            ".".join(["a" * 63] * 3 + ["a" * 61]),  # exactly 253
        ],
        [
            "",
            "-a.com",
            "a-.com",
            "a..com",
            "a.com.",
            ".a.com",
            "a_b.com",
            "a" * 64 + ".com",
            ".".join(["a" * 63] * 3 + ["a" * 62]),  # 254
            "bücher.de",
            "a b",
        ],
    ),
    "ipv4": (
        ["0.0.0.0", "255.255.255.255", "192.168.0.1", "10.0.0.10"],
        [
            "256.0.0.1",
            "01.2.3.4",
            "1.2.3.00",
            "1.2.3",
            "1.2.3.4.5",
            "1.2.3.٤",
            " 1.2.3.4",
            "1.2.3.4\n",
            "1.2.3.-1",
            "0x1.2.3.4",
            "",
        ],
    ),
    "ipv6": (
        [
            "::",
            "::1",
            "2001:db8::1",
            "fe80::1:2:3:4",
            "::ffff:192.168.0.1",
            "2001:0db8:0000:0000:0000:0000:0000:0001",
            "ABCD:EF01:2345:6789:ABCD:EF01:2345:6789",
            "1::",
        ],
        [
            "fe80::1%eth0",
            "fe80::1%25eth0",
            "1:2:3:4:5:6:7:8:9",
            "12345::",
            "::ffff:01.2.3.4",
            "::ffff:256.2.3.4",
            "1::2::3",
            ":1",
            "1:",
            "g::1",
            "[::1]",
            " ::1",
            "::١",
            "",
            "1.2.3.4",
        ],
    ),
    "uri": (
        [
            "https://example.com/path?q=1#frag",
            "urn:isbn:0451450523",
            "mailto:a@b.c",
            "http://[::1]:8080/",
            "http://[v1.fe]/",
            "file:///etc/hosts",
            "a:",
            "http://user:pw@host:80/p%20q",
            "tag:example.com,2024:x",
        ],
        [
            "//example.com/path",
            "/relative",
            "example.com",
            "http://exa mple.com",
            "http://[::1%25eth0]/",
            "http://[1.2.3.4]/",
            "1http://x",
            "http://x/%zz",
            "http://é.com",
            "http://x/#a#b",
            "",
            "http://x:y/",
        ],
    ),
    "uri-reference": (
        [
            "https://example.com/path?q=1#frag",
            "//example.com",
            "/path",
            "path/to",
            "../x",
            "?q",
            "#frag",
            "",
            "a:b",
        ],
        ["a b", "%zz", "http://[::1%25eth0]/", ":x", "\\x", "#a#b", "//[::1"],
    ),
    "uuid": (
        [
            "123e4567-e89b-12d3-a456-426614174000",
            "123E4567-E89B-12D3-A456-426614174000",
            "00000000-0000-0000-0000-000000000000",
        ],
        [
            "123e4567e89b12d3a456426614174000",
            "{123e4567-e89b-12d3-a456-426614174000}",
            "123e4567-e89b-12d3-a456-42661417400g",
            "123e4567-e89b-12d3-a456-4266141740000",
            "urn:uuid:123e4567-e89b-12d3-a456-426614174000",
            "123e4567-e89b-12d3-a456-426614174000\n",
        ],
    ),
}


@pytest.mark.parametrize(
    ("name", "text"),
    [(name, text) for name, (good, _) in FORMAT_CASES.items() for text in good],
)
def test_rule_7_format_positives(name: str, text: str) -> None:
    assert format_matches(name, text)


@pytest.mark.parametrize(
    ("name", "text"),
    [(name, text) for name, (_, bad) in FORMAT_CASES.items() for text in bad],
)
def test_rule_7_format_negatives(name: str, text: str) -> None:
    assert not format_matches(name, text)


@pytest.mark.parametrize("name", sorted(FORMAT_CASES))
def test_rule_7_format_is_asserted_by_the_validator(name: str) -> None:
    good, bad = FORMAT_CASES[name]
    validator = compile_validator({"format": name})
    assert validator.is_valid(good[0])
    assert not validator.is_valid(bad[0])
    # A format only constrains strings.
    assert validator.is_valid(12)
    assert validator.is_valid(None)


# -- rule 8: Python re with the ASCII flag, search semantics ---------------------------------------


def test_rule_8_pattern_is_ascii() -> None:
    schema = {"pattern": "^\\d+$"}
    assert valid(schema, "123")
    assert not valid(schema, "١٢٣")  # Arabic-Indic digits
    assert not valid({"pattern": "^\\w+$"}, "é")
    assert not valid({"pattern": "(?i)^k$"}, "\u212a")  # Kelvin sign folds to k only in Unicode


def test_rule_8_pattern_uses_search_semantics() -> None:
    assert valid({"pattern": "b"}, "abc")
    assert not valid({"pattern": "^b"}, "abc")
    assert valid({"pattern": "b"}, 5)  # pattern only constrains strings


def test_rule_8_pattern_properties_are_ascii() -> None:
    schema = {"patternProperties": {"^\\d+$": {"type": "string"}}}
    assert valid(schema, {"١": 1})  # not matched, so not constrained
    assert not valid(schema, {"1": 1})
    assert not valid({"patternProperties": {"b": False}}, {"abc": 1})  # search


def test_rule_8_additional_and_unevaluated_properties_consult_ascii_patterns() -> None:
    additional = {"patternProperties": {"^\\d+$": True}, "additionalProperties": False}
    assert valid(additional, {"1": 0})
    assert not valid(additional, {"١": 0})
    unevaluated = {"patternProperties": {"^\\d+$": True}, "unevaluatedProperties": False}
    assert valid(unevaluated, {"1": 0})
    assert not valid(unevaluated, {"١": 0})
    nested = {"allOf": [{"patternProperties": {"^\\w$": True}}], "unevaluatedProperties": False}
    assert valid(nested, {"a": 0})
    assert not valid(nested, {"é": 0})


@pytest.mark.parametrize("pattern", ["(", "a{2,1}", "(?u)\\w", "[z-a]", "\\p{L}", "(?<name", "*"])
def test_rule_8_patterns_that_do_not_compile_are_refused(pattern: str) -> None:
    assert pointers({"items": {"pattern": pattern}}) == ["/input/items/pattern"]
    assert pointers({"patternProperties": {pattern: {}}}) == [
        "/input/patternProperties/" + pattern.replace("~", "~0").replace("/", "~1")
    ]


def test_rule_8_ascii_semantics_survive_a_ref_to_a_root_with_schema() -> None:
    # jsonschema re-selects the validator class from `$schema` on every `$ref`; the dialect
    # must keep its pattern semantics there too.
    schema = {
        "$schema": SCHEMA_URI,
        "type": "object",
        "properties": {"n": {"$ref": "#"}, "s": {"pattern": "^\\d+$"}},
    }
    assert valid(schema, {"n": {"s": "12"}})
    assert not valid(schema, {"n": {"s": "١٢"}})


# -- rule 9: annotations are never asserted ---------------------------------------------------------


def test_rule_9_annotations_never_asserted() -> None:
    schema = {
        "type": "string",
        "default": 5,
        "examples": [1, None],
        "title": "T",
        "description": "D",
        "$comment": "C",
        "deprecated": True,
        "readOnly": True,
        "writeOnly": True,
        "contentEncoding": "base64",
        "contentMediaType": "application/json",
        "contentSchema": {"type": "integer"},
    }
    assert valid(schema, "not base64, not JSON")
    assert not valid(schema, 5)


# -- rule 10: identity --------------------------------------------------------------------------------


def test_rule_10_schema_abi() -> None:
    assert SCHEMA_ABI == "coordinator/jsonschema-py/draft202012/formats-asserted/v1"


# -- validation semantics ------------------------------------------------------------------------------


def test_booleans_are_never_numbers() -> None:
    assert not valid({"type": "number"}, True)
    assert not valid({"type": "integer"}, False)
    assert not valid({"enum": [1]}, True)
    assert not valid({"const": 0}, False)
    assert not valid({"const": False}, 0)
    assert valid({"uniqueItems": True}, [1, True])


def test_integral_floats_are_integers() -> None:
    assert valid({"type": "integer"}, 1.0)
    assert valid({"type": "integer"}, 2)
    assert not valid({"type": "integer"}, 1.5)
    assert valid({"const": 1}, 1.0)


def test_anchors_and_dynamic_refs_validate() -> None:
    linked = {
        "$defs": {
            "n": {"$anchor": "node", "type": "object", "properties": {"next": {"$ref": "#node"}}}
        },
        "$ref": "#node",
    }
    assert valid(linked, {"next": {"next": {}}})
    assert not valid(linked, {"next": {"next": 1}})
    dynamic = {
        "$dynamicAnchor": "meta",
        "type": "object",
        "properties": {"c": {"$dynamicRef": "#meta"}},
    }
    assert valid(dynamic, {"c": {"c": {}}})
    assert not valid(dynamic, {"c": {"c": []}})


def test_error_pointers_are_instance_locations_only() -> None:
    schema = {
        "type": "object",
        "required": ["c"],
        "properties": {
            "a": {"type": "integer"},
            "b": {"items": {"format": "uuid"}},
            "x/y": {"maxLength": 1},
        },
    }
    canary = "CANARY-instance-4f2a"
    validator = compile_validator(schema)
    found = validator.error_pointers(
        {"a": canary, "b": [canary, "123e4567-e89b-12d3-a456-426614174000"], "x/y": canary}
    )
    assert found == ["", "/a", "/b/0", "/x~1y"]
    assert validator.error_pointers({"a": 1, "c": 0}) == []


def test_accepts_null() -> None:
    assert accepts_null(True)
    assert accepts_null({})
    assert accepts_null({"type": ["object", "null"]})
    assert accepts_null({"anyOf": [{"type": "string"}, {"const": None}]})
    assert not accepts_null(False)
    assert not accepts_null({"type": "object"})
    assert not accepts_null({"not": {"type": "null"}})


def test_validators_retrieve_nothing_remote() -> None:
    # check_schema refuses remote references; even if one slipped through, nothing is fetched.
    validator = compile_validator({"$ref": "#/$defs/a", "$defs": {"a": {"type": "string"}}})
    assert validator.is_valid("x")


# -- reporting ------------------------------------------------------------------------------------------


def test_every_violation_is_reported_in_one_pass_with_its_pointer() -> None:
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$id": "urn:x",
        "type": "strong",
        "definitions": {},
        "x-ok": {"anything": True},
        "properties": {
            "messageId": {"type": "string", "format": "regex"},
            "count": {"minimum": "0", "maxLength": -1},
            "nested": {"items": {"pattern": "(", "$vocabulary": {}}},
            "ok": {"type": "integer"},
        },
        "patternProperties": {"[": True},
        "required": ["a", "a"],
        "allOf": [{"$ref": "#/$defs/missing"}, {"$ref": "https://example.com/s"}, 3],
        "additionalProperties": {"description": "y" * 16_385},
    }
    findings = check_schema(schema, "/outcomes/notice-sent")
    assert all(isinstance(finding, SchemaFinding) for finding in findings)
    assert sorted(finding.pointer for finding in findings) == sorted(
        "/outcomes/notice-sent" + pointer
        for pointer in [
            "/additionalProperties/description",  # the value bound
            "/$schema",
            "/$id",
            "/type",
            "/definitions",
            "/properties/messageId/format",
            "/properties/count/minimum",
            "/properties/count/maxLength",
            "/properties/nested/items/pattern",
            "/properties/nested/items/$vocabulary",
            "/patternProperties/[",
            "/required",
            "/allOf/0/$ref",
            "/allOf/1/$ref",
            "/allOf/2",
        ]
    )
    assert findings[0].pointer == "/outcomes/notice-sent/additionalProperties/description"


def test_findings_are_independent_of_each_other() -> None:
    # A broken sibling does not hide or cause another finding.
    assert pointers({"type": 7, "properties": {"a": {"format": "nope"}}}) == [
        "/input/type",
        "/input/properties/a/format",
    ]
    # A reference to a schema that has its own error still resolves.
    assert pointers({"$defs": {"a": {"type": 7}}, "items": {"$ref": "#/$defs/a"}}) == [
        "/input/$defs/a/type"
    ]


def test_canary_values_never_appear_in_findings() -> None:
    canary = "CANARY-9b1e"
    schema = {
        "$schema": canary,
        "enum": [canary, {canary: canary}],
        "const": canary,
        "default": canary,
        "examples": [canary],
        "description": canary * 5000,
        "pattern": canary + "(",
        "required": [canary, canary],
        "minimum": canary,
        "x-note": canary,
        "properties": {
            "p": {
                "pattern": "(" + canary,
                "format": canary,
                "type": canary,
                "$ref": canary,
                "$anchor": canary + " x",
                "title": 5,
                "dependentRequired": {"a": canary},
            },
            "q": {"$ref": "#" + canary, "enum": canary, "const": float("nan")},
        },
    }
    findings = check_schema(schema, BASE)
    assert len(findings) >= 12
    for finding in findings:
        assert canary not in finding.message
        assert canary not in finding.pointer


def test_messages_are_fixed_sentences() -> None:
    first = check_schema({"type": "aaa"}, "")
    second = check_schema({"type": "bbb"}, "")
    assert [f.message for f in first] == [f.message for f in second]
    assert all(f.message.endswith(".") for f in first)


# -- cost ---------------------------------------------------------------------------------------------


def test_check_schema_does_not_import_jsonschema() -> None:
    code = (
        "import sys\n"
        "from coordinator_core.jsonschema.dialect import check_schema\n"
        "assert check_schema({'type': 'object', 'format': 'uuid', 'pattern': 'a'}, '') == []\n"
        "assert check_schema({'format': 'nope'}, '') != []\n"
        "loaded = [m for m in ('jsonschema', 'referencing') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_hostile_width_is_bounded() -> None:
    schema: object = {"allOf": [{"allOf": [{} for _ in range(300)]} for _ in range(300)]}
    found = pointers(schema)
    assert found[0] == "/input/allOf"  # members bound first, and the walk stops early
    assert len(found) == 1


def test_hostile_aliasing_is_bounded() -> None:
    # The same wide list shared everywhere (as YAML aliases could build): bounded work.
    wide: list[object] = [{}] * 100_000
    shared = {"allOf": wide}
    schema = {"allOf": [shared] * 100_000, "properties": {"a": {"type": 7}}}
    found = pointers(schema)
    assert found[0] == "/input/allOf"
    assert "/input/properties/a/type" in found


def test_wide_values_do_not_hide_reference_findings() -> None:
    schema = {"enum": list(range(300)), "items": {"$ref": "#/nowhere"}}
    assert pointers(schema) == ["/input/enum", "/input/items/$ref"]
