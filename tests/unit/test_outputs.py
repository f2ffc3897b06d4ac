"""The output schemas of the catalogue (spec/schemas/outputs.schema.json, coordinator_core.outputs):
one per operation and per completion, each a valid schema of the coordinator's dialect, read from
the installed coordinator-models package, bundled self-contained for `coordinatorctl schema
operation`, and naming failures by place and keyword only."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from coordinator_core.jsonschema.dialect import check_schema
from coordinator_core.jsonschema.violations import Violation
from coordinator_core.operations import CATALOG
from coordinator_core.outputs import (
    completion_output_failure,
    completion_output_schema,
    operation_output_schema,
    output_failure,
    outputs_document,
)

SPEC = Path(__file__).resolve().parents[2] / "spec" / "schemas" / "outputs.schema.json"


def test_the_published_document_is_the_spec_file() -> None:
    assert outputs_document() == json.loads(SPEC.read_text(encoding="utf-8"))


def test_every_operation_and_completion_names_a_definition_and_every_definition_is_used() -> None:
    definitions = set(outputs_document()["$defs"])
    named = {operation.output for operation in CATALOG.values()}
    named |= {c.output for operation in CATALOG.values() for c in operation.completions.values()}
    assert named <= definitions
    reached: set[str] = set()
    for operation in CATALOG.values():
        printable = operation_output_schema(operation.id)
        assert printable is not None
        reached |= set(printable["$defs"])
        for completion in operation.completions:
            found = completion_output_schema(operation.id, completion)
            assert found is not None
            reached |= set(found["$defs"])
    assert reached == definitions, "a definition that no operation reaches"


def test_each_definition_is_a_schema_of_the_dialect() -> None:
    for name, definition in outputs_document()["$defs"].items():
        bundle = {"$defs": outputs_document()["$defs"], "$ref": f"#/$defs/{name}"}
        assert check_schema(bundle, "") == [], name
        jsonschema.Draft202012Validator.check_schema(definition)


def test_a_bundled_schema_is_self_contained() -> None:
    printable = operation_output_schema("casework.withdraw-review-request/v1")
    assert printable is not None
    assert set(printable["$defs"]) == {
        "Policy",
        "ReviewResult",
        "ReviewWithdrawal",
        "Sha256",
        "Subject",
    }
    jsonschema.Draft202012Validator.check_schema(printable)
    assert operation_output_schema("casework.nothing/v1") is None
    assert completion_output_schema("casework.submit-review-request/v1", "other") is None
    assert completion_output_schema("breg.read-record/v1", "result") is None


def test_a_failure_names_the_place_the_keyword_and_the_missing_members_only() -> None:
    submit = CATALOG["casework.submit-review-request/v1"]
    assert output_failure(submit, {"unexpected": 1}) == Violation(
        "", "required", ("policy", "requestId", "subject", "submissionDigest")
    )
    read = CATALOG["casework.read-review-result/v1"]
    assert output_failure(read, {"state": "complete"}) == Violation("", "required", ("result",))
    assert output_failure(read, {"state": "pending"}) is None
    result = submit.completions["result"]
    failure = completion_output_failure(result, {"status": "approved"})
    assert failure is not None and failure.keyword == "required"
    assert "completedAt" in failure.members and "status" not in failure.members
    appointment = CATALOG["scheduling.create-appointment/v1"]
    failure = output_failure(
        appointment,
        {
            "appointmentId": "7d444840-9dc0-11d1-b245-5ffdce74fad2",
            "offering": "o",
            "start": "not a date",
            "end": "2026-03-02T10:00:00Z",
            "status": "booked",
        },
    )
    assert failure == Violation("/start", "format")
