"""06 §11 JSON renderings of the service's result shapes: the one place timestamps, run ids and
member names are formatted."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from coordinator_api.settings import WorkflowSummary
from coordinator_core.shell.service import (
    RUN_STATUSES,
    Doctor,
    EffectStatus,
    HoldState,
    ReconcileResult,
    Recovery,
    RunInspection,
    RunList,
    RunStatus,
    RunStatusValue,
    StepStatus,
    WaitFor,
    WaitUntil,
)

__all__ = [
    "doctor_json",
    "dumps",
    "hold_state_json",
    "inspection_json",
    "reconcile_json",
    "run_page_json",
    "run_status_json",
    "timestamp",
    "workflow_json",
]


def dumps(value: object) -> bytes:
    """Compact JSON bytes; ASCII-escaped so that no value can make encoding fail."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode("ascii")


def timestamp(moment: datetime) -> str:
    """`YYYY-MM-DDTHH:MM:SS.mmmZ` (06 §1 item 5); naive datetimes are a programming error."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("timestamps must be timezone-aware")
    utc = moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def _optional_timestamp(moment: datetime | None) -> str | None:
    return None if moment is None else timestamp(moment)


def run_status_json(run: RunStatus) -> dict[str, Any]:
    return {
        "runId": str(run.run_id),
        "workflowId": run.workflow_id,
        "workflowVersion": run.workflow_version,
        "revision": run.revision,
        "definitionDigest": run.definition_digest,
        "bindingDigest": run.binding_digest,
        "origin": run.origin,
        "trigger": run.trigger,
        "status": run.status,
        "step": run.step,
        "admittedAt": timestamp(run.admitted_at),
        "deadlineAt": timestamp(run.deadline_at),
        "completedAt": _optional_timestamp(run.completed_at),
        "nextDueAt": _optional_timestamp(run.next_due_at),
        "cancelRequested": run.cancel_requested,
        "restoreReview": run.restore_review,
        "uncertain": run.uncertain,
        "outcome": run.outcome,
        "output": run.output,
        "failureCode": run.failure_code,
        "payloadErased": run.payload_erased,
    }


def _wait_json(wait: WaitUntil | WaitFor) -> dict[str, Any]:
    if isinstance(wait, WaitUntil):
        return {"until": timestamp(wait.until)}
    return {
        "call": wait.call,
        "completion": wait.completion,
        "startedAt": timestamp(wait.started_at),
        "timeoutAt": timestamp(wait.timeout_at),
        "intervalSeconds": wait.interval_seconds,
        "observations": wait.observations,
        "lastObservedAt": _optional_timestamp(wait.last_observed_at),
        "nextObservationAt": _optional_timestamp(wait.next_observation_at),
        "result": wait.result,
    }


def _step_json(step: StepStatus) -> dict[str, Any]:
    out: dict[str, Any] = {
        "step": step.step,
        "type": step.type,
        "state": step.state,
        "generation": step.generation,
        "attempt": step.attempt,
        "enteredAt": timestamp(step.entered_at),
        "finishedAt": _optional_timestamp(step.finished_at),
        "nextDueAt": _optional_timestamp(step.next_due_at),
        "leaseExpiresAt": _optional_timestamp(step.lease_expires_at),
        "failureCode": step.failure_code,
        "route": None,
    }
    if step.route is not None:
        route: dict[str, Any] = {"kind": step.route.kind}
        if step.route.label is not None:
            route["label"] = step.route.label
        out["route"] = route
    if step.call is not None:
        out["operation"] = step.call.operation
        out["effect"] = step.call.effect
        out["commandPrepared"] = step.call.command_prepared
        out["uncertain"] = step.call.uncertain
        out["receiptExpired"] = step.call.receipt_expired
    if step.wait is not None:
        out["wait"] = _wait_json(step.wait)
    return out


def _effect_json(effect: EffectStatus) -> dict[str, Any]:
    return {
        "step": effect.step,
        "operation": effect.operation,
        "state": effect.state,
        "settledBy": effect.settled_by,
    }


def _recovery_json(recovery: Recovery) -> dict[str, Any]:
    out: dict[str, Any] = {
        "retryAllowed": recovery.retry_allowed,
        "retryBlockedBy": recovery.retry_blocked_by,
        "reconcileAllowed": recovery.reconcile_allowed,
        "reconcileBlockedBy": recovery.reconcile_blocked_by,
    }
    if recovery.operation is not None:
        out["operation"] = recovery.operation.to_json()
    return out


def inspection_json(inspection: RunInspection) -> dict[str, Any]:
    return {
        "run": run_status_json(inspection.run),
        "steps": [_step_json(step) for step in inspection.steps],
        "effects": [_effect_json(effect) for effect in inspection.effects],
        "recovery": _recovery_json(inspection.recovery),
    }


def reconcile_json(result: ReconcileResult) -> dict[str, Any]:
    return {"result": result.result, "inspection": inspection_json(result.inspection)}


def run_page_json(page: RunList) -> dict[str, Any]:
    return {
        "runs": [run_status_json(run) for run in page.runs],
        "nextCursor": page.next_cursor,
    }


def _counts_json(statuses: Mapping[RunStatusValue, int]) -> dict[str, int]:
    return {status: int(statuses.get(status, 0)) for status in RUN_STATUSES}


def doctor_json(doctor: Doctor) -> dict[str, Any]:
    state = doctor.state
    return {
        "activationReady": doctor.activation_ready,
        "state": {
            "databaseId": state.database_id,
            "store": state.store,
            "schemaVersion": state.schema_version,
            "activePackageDigest": state.active_package_digest,
            "activeRevision": state.active_revision,
            "restoreHold": state.restore_hold,
            "admissionsHold": state.admissions_hold,
            "auditReady": state.audit_ready,
            "restoreReview": state.restore_review,
            "statuses": _counts_json(state.statuses),
            "unknownEffects": state.unknown_effects,
            "waits": state.waits,
            "oldestDueAt": _optional_timestamp(state.oldest_due_at),
            "terminalPayloads": state.terminal_payloads,
            "oldestTerminalPayloadAt": _optional_timestamp(state.oldest_terminal_payload_at),
            "auditHead": state.audit_head,
        },
    }


def hold_state_json(hold: HoldState) -> dict[str, Any]:
    return {
        "restoreHold": hold.restore_hold,
        "admissionsHold": hold.admissions_hold,
        "restoreReview": hold.restore_review,
    }


def workflow_json(workflow: WorkflowSummary) -> dict[str, Any]:
    """06 §6: `title` omitted when absent; id lists sorted in byte order."""
    out: dict[str, Any] = {"workflowId": workflow.workflow_id}
    if workflow.title is not None:
        out["title"] = workflow.title
    out.update(
        {
            "version": workflow.version,
            "revision": workflow.revision,
            "definitionDigest": workflow.definition_digest,
            "packageDigest": workflow.package_digest,
            "inputSchema": workflow.input_schema,
            "triggers": sorted(workflow.triggers, key=lambda item: item.encode("utf-8")),
            "outcomes": sorted(workflow.outcomes, key=lambda item: item.encode("utf-8")),
        }
    )
    return out
