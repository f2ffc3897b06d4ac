"""The typed boundary of the remote commands (09 §4): the generated models of the service API's
bodies (`coordinator_models.api`, built from spec/schemas/api.schema.json by `nox -s generate`).

This is the only module of coordinatorctl that imports `coordinator_models` (ARCHITECTURE rule 3;
describe.py reads the shipped document as package data, which is no model import). It re-exports
the model classes the other remote modules use and owns how a body crosses the boundary:

- a request body is built through its model (`request_body`) and sent as the model's JSON dump
  by alias, so it carries exactly the documented members;
- an answer body is read through its model (`answer_of`) in strict JSON mode and by alias only:
  no member beyond the documented ones (`extra="forbid"`), no snake_case spelling of a member,
  no coercion (`"1"` is not 1, 1 is not `true`); timestamps, UUIDs and enum words are accepted
  from their JSON strings. The caller has already parsed the bytes with `parse_strict_json`,
  which refuses what the model's parser would let through (duplicate members, NaN, lone
  surrogates).

A refusal never carries a value: `request_body` answers the refused members' wire names, and
`answer_of` answers None.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from coordinator_models.api import (
    AttemptPage,
    Doctor,
    HoldState,
    Problem,
    ReasonRequest,
    ReconcileResult,
    ReleaseAdmissionHoldRequest,
    RetentionRequest,
    RetentionResult,
    RunInspection,
    RunList,
    RunStatus,
    StartRunRequest,
    StepAttempt,
    Violation,
    WaitUntil,
    WorkflowInfo,
)

__all__ = [
    "AttemptPage",
    "Doctor",
    "HoldState",
    "Problem",
    "ReasonRequest",
    "ReconcileResult",
    "ReleaseAdmissionHoldRequest",
    "RetentionRequest",
    "RetentionResult",
    "RunInspection",
    "RunList",
    "RunStatus",
    "StartRunRequest",
    "StepAttempt",
    "Violation",
    "WaitUntil",
    "WorkflowInfo",
    "answer_of",
    "request_body",
]

_Answer = TypeVar("_Answer", bound=BaseModel)


def request_body(model: type[BaseModel], **members: object) -> dict[str, Any] | frozenset[str]:
    """The JSON body of one request built through `model` from `members` (by field name), as
    the model's JSON dump by alias; or, when the model refuses, the wire names of the refused
    members (never their values).

    Validation is lax so that a member the model types (an RFC 3339 `before`) is given as text;
    the local checks (remote/checks.py) have already held every value to its form.
    """
    try:
        built = model.model_validate(members)
    except ValidationError as refused:
        return frozenset(str(error["loc"][0]) if error["loc"] else "" for error in refused.errors())
    return built.model_dump(mode="json", by_alias=True)


def answer_of(model: type[_Answer], body: bytes) -> _Answer | None:
    """`body` (already known to be strict JSON) read as `model`, or None if it is not one."""
    try:
        return model.model_validate_json(body, strict=True, by_alias=True, by_name=False)
    except ValidationError:
        return None
