"""The API's typed boundary (ARCHITECTURE rule 3): the one module of coordinator-api that imports
the models generated from `spec/schemas/api.schema.json` (`coordinator_models.api`).

Every response body (06 §11) is built as its model from the service's result shapes, so a value
outside the contract (a status word, a pattern, a bound) fails here, never on the wire; request
bodies are read as their models by `bodies`. The
JSON rendering is this module's too: member names are the spec's, optional members are present
only when set, and timestamps are `YYYY-MM-DDTHH:MM:SS.mmmZ` (06 §1 item 5).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TypeVar
from uuid import UUID

from pydantic import BaseModel

from coordinator_api.settings import WorkflowSummary
from coordinator_core.engine.detail import FailureDetail
from coordinator_core.jsonschema.violations import Violation
from coordinator_core.shell import service
from coordinator_core.shell.service import RUN_STATUSES, RunStatusValue
from coordinator_models import api

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
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("timestamps must be timezone-aware")
    utc = moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def _json_default(value: object) -> str:
    if isinstance(value, datetime):
        return timestamp(value)
    if isinstance(value, UUID):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def encode(body: Body) -> bytes:
    """A model's JSON: spec member names; optional members only where set (`_absent`); compact
    and ASCII-escaped, so that no value can make encoding fail."""
    return json.dumps(
        body.model_dump(by_alias=True, exclude_unset=True),
        separators=(",", ":"),
        allow_nan=False,
        default=_json_default,
    ).encode("ascii")


_Model = TypeVar("_Model", bound=BaseModel)


def _absent(body: _Model, *members: str) -> _Model:
    """`body` with the optional `members` that are None left out of its JSON (the spec's "omitted
    when absent"); the members a schema requires are always given, null or not."""
    for member in members:
        if getattr(body, member) is None:
            body.model_fields_set.discard(member)
    return body


# --------------------------------------------------------------------------------------------
# Responses (06 §11)


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
    body = api.Problem(
        type=type_uri,
        title=title,
        status=status,
        detail=detail,
        code=code,
        suggested_action=suggested_action,
        reason=_block_reason(reason),
        violations=[
            _absent(
                api.Violation(
                    path=item.path,
                    keyword=item.keyword,
                    members=[api.Member(name) for name in item.members] or None,
                ),
                "members",
            )
            for item in violations
        ]
        or None,
    )
    return _absent(body, "reason", "violations")


def _optional_code(code: str | None) -> api.FailureCode | None:
    return None if code is None else api.FailureCode(code)


def _optional_id(local_id: str | None) -> api.LocalId | None:
    """A nullable local id (the generator keeps `LocalId` a root model inside a union)."""
    return None if local_id is None else api.LocalId(local_id)


def _sorted_ids(ids: Iterable[str]) -> list[api.LocalId]:
    """Local ids in byte order (06 §6)."""
    return [api.LocalId(item) for item in sorted(ids, key=lambda item: item.encode("utf-8"))]


def _moment(instant: int) -> datetime:
    """The aware UTC datetime of an instant (epoch milliseconds), as the models take it."""
    return _EPOCH + timedelta(milliseconds=instant)


def _maybe(instant: int | None) -> datetime | None:
    return None if instant is None else _moment(instant)


def instant_of(moment: datetime) -> int:
    """The instant (epoch milliseconds, truncated) of an aware datetime a request carried."""
    return (moment - _EPOCH) // timedelta(milliseconds=1)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def run_status_body(status: service.RunStatus) -> api.RunStatus:
    run, state = status.run, status.run.state
    return api.RunStatus(
        run_id=run.run_id,
        workflow_id=run.workflow_id,
        workflow_version=run.workflow_version,
        revision=run.revision,
        definition_digest=run.definition_digest,
        binding_digest=run.binding_digest,
        origin=api.RunOrigin(run.origin),
        trigger=_optional_id(run.trigger),
        status=api.RunStatusValue(status.status),
        step=state.current_step,
        admitted_at=_moment(state.admitted_at),
        deadline_at=_moment(state.deadline_at),
        completed_at=_maybe(state.completed_at),
        next_due_at=_maybe(status.next_due_at),
        cancel_requested=state.cancel_requested,
        restore_review=state.restore_review,
        uncertain=status.uncertain,
        outcome=_optional_id(state.outcome),
        output=status.output,
        failure_code=_optional_code(state.failure_code),
        payload_erased=run.payload_erased,
    )


def _wait_body(step: service.StepStatus) -> api.WaitUntil | api.WaitFor | None:
    record = step.record
    if record.type == "wait-until" and record.wait_until is not None:
        return api.WaitUntil(until=_moment(record.wait_until))
    if record.type != "wait-for" or record.wait_started_at is None or record.timeout_at is None:
        return None
    call, completion = step.awaits or ("", "")
    return api.WaitFor(
        call=call,
        completion=completion,
        started_at=_moment(record.wait_started_at),
        timeout_at=_moment(record.timeout_at),
        interval_seconds=record.interval_seconds or 0,
        observations=record.observations,
        last_observed_at=_maybe(record.last_observed_at),
        next_observation_at=_maybe(step.next_due_at),
        result=api.WaitResult(step.wait_result),
    )


def _step_body(step: service.StepStatus) -> api.StepStatus:
    record = step.record
    route = None
    if record.route is not None:
        route = api.StepRoute(kind=api.RouteKind(record.route.kind), label=record.route.label)
        _absent(route, "label")
    call = record.type == "call" and record.operation is not None and record.effect is not None
    body = api.StepStatus(
        step=record.step,
        type=api.StepType(record.type),
        state=api.StepState(record.state),
        generation=record.generation,
        attempt=record.attempt,
        entered_at=_moment(record.entered_at),
        finished_at=_maybe(record.finished_at),
        next_due_at=_maybe(step.next_due_at),
        lease_expires_at=_maybe(step.lease_expires_at),
        failure_code=_optional_code(record.failure_code),
        route=route,
        attempts=[_attempt_body(attempt) for attempt in step.attempts],
        attempt_count=step.attempt_count,
        operation=record.operation if call else None,
        effect=api.OperationEffect(record.effect) if call and record.effect else None,
        command_prepared=record.command_prepared if call else None,
        uncertain=record.uncertain if call else None,
        receipt_expired=record.receipt_expired if call else None,
        wait=_wait_body(step),
        mapping_failure=_mapping_failure_body(step.mapping_failure),
    )
    return _absent(
        body,
        "operation",
        "effect",
        "command_prepared",
        "uncertain",
        "receipt_expired",
        "wait",
        "mapping_failure",
    )


def _attempt_body(attempt: service.StepAttempt) -> api.StepAttempt:
    """One ended attempt: its numbers, times, outcome word and failure code, nothing else."""
    return api.StepAttempt(
        generation=attempt.generation,
        attempt=attempt.attempt,
        started_at=_maybe(attempt.started_at),
        ended_at=_moment(attempt.ended_at),
        outcome=api.AttemptOutcome(attempt.outcome),
        failure_code=_optional_code(attempt.failure_code),
    )


def attempt_page_body(run_id: UUID, step: str, page: service.AttemptPage) -> api.AttemptPage:
    return api.AttemptPage(
        run_id=run_id,
        step=step,
        attempts=[_attempt_body(attempt) for attempt in page.attempts],
        next_cursor=page.next_cursor,
    )


def _mapping_failure_body(found: FailureDetail | None) -> api.MappingFailure | None:
    """Why a mapping stopped the step: members it has only (names, causes, positions)."""
    return None if found is None else api.MappingFailure(**found.to_json())


def _effect_body(effect: service.EffectStatus) -> api.Effect:
    settled_by = None if effect.settled_by is None else api.EffectSettlement(effect.settled_by)
    return api.Effect(
        step=effect.step,
        operation=effect.operation,
        state=api.EffectState(effect.state),
        settled_by=settled_by,
    )


def _block_reason(reason: service.BlockReason | None) -> api.BlockReason | None:
    return None if reason is None else api.BlockReason(reason)


def _recovery_body(recovery: service.Recovery) -> api.Recovery:
    operation = recovery.operation
    body = api.Recovery(
        retry_allowed=recovery.retry_allowed,
        retry_blocked_by=_block_reason(recovery.retry_blocked_by),
        reconcile_allowed=recovery.reconcile_allowed,
        reconcile_blocked_by=_block_reason(recovery.reconcile_blocked_by),
        operation=(
            None if operation is None else api.OperationIdentity.model_validate(operation.to_json())
        ),
    )
    return _absent(body, "operation")


def inspection_body(inspection: service.RunInspection) -> api.RunInspection:
    return api.RunInspection(
        run=run_status_body(inspection.run),
        steps=[_step_body(step) for step in inspection.steps],
        effects=[_effect_body(effect) for effect in inspection.effects],
        recovery=_recovery_body(inspection.recovery),
    )


def reconcile_body(result: service.ReconcileResult) -> api.ReconcileResult:
    return api.ReconcileResult(
        result=api.ReconcileOutcome(result.result),
        inspection=inspection_body(result.inspection),
    )


def run_page_body(page: service.RunList) -> api.RunList:
    return api.RunList(
        runs=[run_status_body(run) for run in page.runs], next_cursor=page.next_cursor
    )


def _counts_body(statuses: Mapping[RunStatusValue, int]) -> api.RunStatusCounts:
    """Every status, zero when absent (the members are the status words)."""
    return api.RunStatusCounts.model_validate(
        {status: int(statuses.get(status, 0)) for status in RUN_STATUSES}
    )


def doctor_body(doctor: service.Doctor) -> api.Doctor:
    state = doctor.state
    return api.Doctor(
        activation_ready=doctor.activation_ready,
        state=api.DoctorState(
            database_id=state.database_id,
            store=api.StoreKind(state.store),
            schema_version=state.schema_version,
            active_package_digest=state.active_package_digest,
            active_revision=state.active_revision,
            restore_hold=state.restore_hold,
            admissions_hold=state.admissions_hold,
            audit_ready=state.audit_ready,
            restore_review=state.restore_review,
            statuses=_counts_body(state.statuses),
            unknown_effects=state.unknown_effects,
            waits=state.waits,
            oldest_due_at=_maybe(state.oldest_due_at),
            terminal_payloads=state.terminal_payloads,
            oldest_terminal_payload_at=_maybe(state.oldest_terminal_payload_at),
            audit_head=state.audit_head,
        ),
    )


def hold_state_body(hold: service.HoldState) -> api.HoldState:
    return api.HoldState(
        restore_hold=hold.restore_hold,
        admissions_hold=hold.admissions_hold,
        restore_review=hold.restore_review,
    )


def workflow_body(workflow: WorkflowSummary) -> api.WorkflowInfo:
    """06 §6: `title` omitted when absent; id lists sorted in byte order."""
    body = api.WorkflowInfo(
        workflow_id=workflow.workflow_id,
        title=workflow.title,
        version=workflow.version,
        revision=workflow.revision,
        definition_digest=workflow.definition_digest,
        package_digest=workflow.package_digest,
        input_schema=workflow.input_schema,
        triggers=_sorted_ids(workflow.triggers),
        outcomes=_sorted_ids(workflow.outcomes),
    )
    return _absent(body, "title")
