"""The API's typed boundary (ARCHITECTURE rule 3): the one module of coordinator-api that imports
the models generated from `spec/schemas/api.schema.json` (`coordinator_models.api`).

Every response body (06 §11) is validated as its model from the service's result shapes, so a
value outside the contract (a status word, a pattern, a bound) fails here, never on the wire.
The shapes carry the spec's member names (snake_case), so a model reads them itself
(`model_validate(shape, from_attributes=True)`); instants stay epoch milliseconds, which the
models read as such (`coordinator_models.base`). The two views that compose records, a run's
status (its stored run and engine state) and a step's (its record), are read member by member
by name from their parts (`_Reader`), with the few members the spec names otherwise said once.
Request bodies are read as their models by `bodies`.

The JSON rendering is this module's too (`encode`, pydantic's own rendering of the model):
member names are the spec's, an optional member is present only when set (an optional member's
default is None, a required one has none), and timestamps are `YYYY-MM-DDTHH:MM:SS.mmmZ` (06 §1
item 5; the generated models' `Instant` type writes them so).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from operator import attrgetter
from typing import Any
from uuid import UUID

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError

from coordinator_api.settings import WorkflowSummary
from coordinator_core.engine.state import RunState, StepRecord
from coordinator_core.jsonschema.violations import Violation
from coordinator_core.shell import service
from coordinator_core.shell.store import StoredRun
from coordinator_models import api
from coordinator_models.base import rfc3339_milliseconds

__all__ = [
    "AttemptPage",
    "Body",
    "Doctor",
    "EventAdmitted",
    "HoldState",
    "Liveness",
    "Problem",
    "Readiness",
    "ReasonRequest",
    "ReconcileResult",
    "ReleaseAdmissionHoldRequest",
    "RetentionRequest",
    "RetentionResult",
    "ReviewCompletion",
    "RunInspection",
    "RunList",
    "RunStatus",
    "StartRunRequest",
    "WorkflowInfo",
    "attempt_page_body",
    "doctor_body",
    "encode",
    "hold_state_body",
    "inspection_body",
    "instant_of",
    "problem",
    "reconcile_body",
    "run_page_body",
    "run_status_body",
    "timestamp",
    "workflow_body",
]

Body = BaseModel
AttemptPage = api.AttemptPage
Doctor = api.Doctor
EventAdmitted = api.EventAdmitted
HoldState = api.HoldState
Liveness = api.Liveness
Problem = api.Problem
Readiness = api.Readiness
ReasonRequest = api.ReasonRequest
ReconcileResult = api.ReconcileResult
ReleaseAdmissionHoldRequest = api.ReleaseAdmissionHoldRequest
RetentionRequest = api.RetentionRequest
RetentionResult = api.RetentionResult
ReviewCompletion = api.ReviewCompletion
RunInspection = api.RunInspection
RunList = api.RunList
RunStatus = api.RunStatus
StartRunRequest = api.StartRunRequest
WorkflowInfo = api.WorkflowInfo

# --------------------------------------------------------------------------------------------
# JSON


def timestamp(moment: datetime) -> str:
    """`YYYY-MM-DDTHH:MM:SS.mmmZ` (06 §1 item 5); naive datetimes are a programming error."""
    if moment.utcoffset() is None:
        raise ValueError("timestamps must be timezone-aware")
    return rfc3339_milliseconds(moment)


def _json_default(value: object) -> str:
    if isinstance(value, datetime):
        return timestamp(value)
    if isinstance(value, UUID):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def encode(body: Body) -> bytes:
    """A model's JSON: spec member names; an optional member only where it is not None (its
    default); compact UTF-8, instants as the models' `Instant` renders them. Pydantic renders
    it; a text it cannot write as UTF-8 (a lone surrogate, which a JSON input can carry) is
    written ASCII-escaped instead, so that no value can make encoding fail."""
    try:
        return body.model_dump_json(by_alias=True, exclude_defaults=True).encode("utf-8")
    except PydanticSerializationError:
        return json.dumps(
            body.model_dump(by_alias=True, exclude_defaults=True),
            separators=(",", ":"),
            allow_nan=False,
            default=_json_default,
        ).encode("ascii")


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def instant_of(moment: datetime) -> int:
    """The instant (epoch milliseconds, truncated) of an aware datetime a request carried."""
    return (moment - _EPOCH) // timedelta(milliseconds=1)


# --------------------------------------------------------------------------------------------
# Responses (06 §11)


class _Reader:
    """Reads the members of a model from a service view that composes records: each member
    from the attribute of its (snake_case) name on the first part that has one, or from the
    path `renamed` gives, resolved once; a member found nowhere is a `TypeError` at import."""

    def __init__(
        self,
        model: type[BaseModel],
        parts: Sequence[tuple[str, type]],
        *,
        renamed: Mapping[str, str] | None = None,
        computed: Iterable[str] = (),
    ) -> None:
        paths: dict[str, str] = {}
        skipped = set(computed)
        for name in model.model_fields:
            if name in skipped:
                continue
            path = (renamed or {}).get(name) or next(
                (f"{prefix}{name}" for prefix, kind in parts if hasattr(kind, name)), None
            )
            if path is None:
                raise TypeError(f"{model.__name__}.{name} is in none of {parts}")
            paths[name] = path
        self._getters = tuple((name, attrgetter(path)) for name, path in paths.items())

    def __call__(self, view: object) -> dict[str, Any]:
        return {name: get(view) for name, get in self._getters}


_RUN_STATUS = _Reader(
    api.RunStatus,
    [("", service.RunStatus), ("run.", StoredRun), ("run.state.", RunState)],
    renamed={"step": "run.state.current_step"},
)
_STEP_STATUS = _Reader(
    api.StepStatus,
    [("", service.StepStatus), ("record.", StepRecord)],
    computed=("wait", "mapping_failure"),
)
# 06 §11.3: members of a call step only, absent on other steps.
_CALL_MEMBERS = ("operation", "effect", "command_prepared", "uncertain", "receipt_expired")


def problem(
    *,
    type_uri: str,
    title: str,
    status: int,
    detail: str,
    code: str,
    suggested_action: str | None,
    reason: service.BlockReason | None = None,
    violations: Sequence[Violation] = (),
) -> api.Problem:
    """The 06 §3 problem object; `reason` and `violations` only where the caller sets them."""
    members = {
        "type": type_uri,
        "title": title,
        "status": status,
        "detail": detail,
        "code": code,
        "suggested_action": suggested_action,
        "reason": reason,
        "violations": [item.to_json() for item in violations] or None,
    }
    return api.Problem.model_validate(members)


def _step_members(step: service.StepStatus) -> dict[str, Any]:
    record = step.record
    members = _STEP_STATUS(step)
    if not (record.type == "call" and record.operation is not None and record.effect is not None):
        members.update(dict.fromkeys(_CALL_MEMBERS))
    found = step.mapping_failure
    members["mapping_failure"] = None if found is None else found.to_json()
    if record.type == "wait-until" and record.wait_until is not None:
        members["wait"] = {"until": record.wait_until}
    elif record.type == "wait-for" and None not in (record.wait_started_at, record.timeout_at):
        call, completion = step.awaits or ("", "")
        members["wait"] = {
            "call": call,
            "completion": completion,
            "started_at": record.wait_started_at,
            "timeout_at": record.timeout_at,
            "interval_seconds": record.interval_seconds or 0,
            "observations": record.observations,
            "last_observed_at": record.last_observed_at,
            "next_observation_at": step.next_due_at,
            "result": step.wait_result,
        }
    else:
        members["wait"] = None
    return members


def _inspection_members(inspection: service.RunInspection) -> dict[str, Any]:
    return {
        "run": _RUN_STATUS(inspection.run),
        "steps": [_step_members(step) for step in inspection.steps],
        "effects": inspection.effects,
        "recovery": inspection.recovery,
    }


def run_status_body(status: service.RunStatus) -> api.RunStatus:
    return api.RunStatus.model_validate(_RUN_STATUS(status))


def inspection_body(inspection: service.RunInspection) -> api.RunInspection:
    return api.RunInspection.model_validate(_inspection_members(inspection), from_attributes=True)


def reconcile_body(result: service.ReconcileResult) -> api.ReconcileResult:
    members = {"result": result.result, "inspection": _inspection_members(result.inspection)}
    return api.ReconcileResult.model_validate(members, from_attributes=True)


def run_page_body(page: service.RunList) -> api.RunList:
    members = {"runs": [_RUN_STATUS(run) for run in page.runs], "next_cursor": page.next_cursor}
    return api.RunList.model_validate(members)


def attempt_page_body(run_id: UUID, step: str, page: service.AttemptPage) -> api.AttemptPage:
    members = {
        "run_id": run_id,
        "step": step,
        "attempts": page.attempts,
        "next_cursor": page.next_cursor,
    }
    return api.AttemptPage.model_validate(members, from_attributes=True)


def doctor_body(doctor: service.Doctor) -> api.Doctor:
    return api.Doctor.model_validate(doctor, from_attributes=True)


def hold_state_body(hold: service.HoldState) -> api.HoldState:
    return api.HoldState.model_validate(hold, from_attributes=True)


def _byte_order(ids: Iterable[str]) -> tuple[str, ...]:
    """Local ids in byte order (06 §6)."""
    return tuple(sorted(ids, key=lambda item: item.encode("utf-8")))


def workflow_body(workflow: WorkflowSummary) -> api.WorkflowInfo:
    """06 §6: `title` omitted when absent; id lists sorted in byte order."""
    ordered = dataclasses.replace(
        workflow, triggers=_byte_order(workflow.triggers), outcomes=_byte_order(workflow.outcomes)
    )
    return api.WorkflowInfo.model_validate(ordered, from_attributes=True)
