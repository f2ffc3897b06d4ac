"""HTTP handlers, and `OPERATIONS`: the public operationId of each (spec/openapi.yaml) → its handler."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from coordinator_api.handlers import completions, events, health, operator, runs, workflow

__all__ = ["OPERATIONS", "handler_of"]

# The Connexion routing resolves every operationId of the document through this table
# (`coordinator_api.app`); the app refuses to start when the document and the table differ.
OPERATIONS: Final[Mapping[str, Callable[..., Any]]] = {
    "getHealth": health.get_health,
    "getReady": health.get_ready,
    "getMetrics": health.get_metrics,
    "getWorkflow": workflow.get_workflow,
    "startRun": runs.start_run,
    "listRuns": runs.list_runs,
    "getRun": runs.get_run,
    "inspectRun": runs.inspect_run,
    "listStepAttempts": runs.list_step_attempts,
    "cancelRun": runs.cancel_run,
    "retrySame": runs.retry_same,
    "reconcileRun": runs.reconcile_run,
    "getDoctor": operator.get_doctor,
    "setRestoreHold": operator.restore_hold,
    "releaseRestoreHold": operator.release_restore_hold,
    "releaseAdmissionHold": operator.release_admission_hold,
    "retainRuns": operator.retain,
    "admitEvent": events.admit_event,
    "reviewCompleted": completions.review_completed,
}


def handler_of(operation_id: str) -> Callable[..., Any]:
    """The handler of one operationId (Connexion's `function_resolver`)."""
    handler = OPERATIONS.get(operation_id)
    if handler is None:
        raise ValueError(f"operationId {operation_id} has no handler in coordinator_api.handlers")
    return handler
