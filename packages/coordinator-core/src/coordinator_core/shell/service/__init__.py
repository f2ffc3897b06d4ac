"""The run service (06 §4–§9, 07 §6–§13): admission, the status, list and inspection views,
cancel, retry-same and reconcile, holds, retention, doctor, event admission and review
completions, over the `Runtime` it shares with the worker loops. Plain code over the store and the
engine: the HTTP API (coordinator-api) parses, calls it and renders.
"""

from __future__ import annotations

from coordinator_core.shell.service.changes import RunChanges
from coordinator_core.shell.service.journal import (
    AuditAction,
    AuditJournal,
    AuditOutcome,
    AuditRequest,
    AuditResponse,
    AuditUnavailable,
    WriterJournal,
    durable,
)
from coordinator_core.shell.service.model import (
    INTERNAL_ERROR,
    RUN_STATUSES,
    Action,
    AdmissionRequest,
    AttemptPage,
    BlockReason,
    Caller,
    Doctor,
    DoctorState,
    EffectStatus,
    EventAdmitted,
    EventDelivery,
    HoldState,
    ReconcileResult,
    Recovery,
    RunAdmitted,
    RunInspection,
    RunList,
    RunQuery,
    RunService,
    RunStatus,
    RunStatusValue,
    ServiceRefusal,
    StepAttempt,
    StepRoute,
    StepStatus,
    WaitResult,
)
from coordinator_core.shell.service.runtime import Runtime
from coordinator_core.shell.service.service import StoreRunService
from coordinator_core.shell.store import commits_after

__all__ = [
    "INTERNAL_ERROR",
    "RUN_STATUSES",
    "Action",
    "AdmissionRequest",
    "AttemptPage",
    "AuditAction",
    "AuditJournal",
    "AuditOutcome",
    "AuditRequest",
    "AuditResponse",
    "AuditUnavailable",
    "BlockReason",
    "Caller",
    "Doctor",
    "DoctorState",
    "EffectStatus",
    "EventAdmitted",
    "EventDelivery",
    "HoldState",
    "ReconcileResult",
    "Recovery",
    "RunAdmitted",
    "RunChanges",
    "RunInspection",
    "RunList",
    "RunQuery",
    "RunService",
    "RunStatus",
    "RunStatusValue",
    "Runtime",
    "ServiceRefusal",
    "StepAttempt",
    "StepRoute",
    "StepStatus",
    "StoreRunService",
    "WaitResult",
    "WriterJournal",
    "commits_after",
    "durable",
]
