"""Registry Coordinator service HTTP API (contract 06): a Connexion app over a `RunService`."""

from __future__ import annotations

import warnings

# Connexion imports starlette.testclient at module level, and starlette 1.x warns about httpx on
# every such import. The warning says nothing about this service and would be the one non-JSON
# line on `coordinator`'s stderr (09 §5: log lines carry a code and a fixed message only).
warnings.filterwarnings("ignore", message=r"Using `httpx` with `starlette\.testclient`")

from coordinator_api.app import AppState, create_app
from coordinator_api.service import (
    Admission,
    Admitted,
    AuditJournal,
    AuditRequest,
    AuditResponse,
    AuditUnavailable,
    CallDetails,
    Caller,
    Doctor,
    DoctorState,
    EffectStatus,
    EventAdmitted,
    EventDelivery,
    HoldState,
    ReconcileResult,
    Recovery,
    RunInspection,
    RunPage,
    RunQuery,
    RunService,
    RunStatus,
    ServiceRefusal,
    StepRoute,
    StepStatus,
    WaitFor,
    WaitUntil,
)
from coordinator_api.settings import (
    ApiSettings,
    AuthenticationSettings,
    EventTrigger,
    JwksUri,
    OidcDiscovery,
    Policy,
    StaticJwks,
    WorkflowSummary,
)

__all__ = [
    "Admission",
    "Admitted",
    "ApiSettings",
    "AppState",
    "AuditJournal",
    "AuditRequest",
    "AuditResponse",
    "AuditUnavailable",
    "AuthenticationSettings",
    "CallDetails",
    "Caller",
    "Doctor",
    "DoctorState",
    "EffectStatus",
    "EventAdmitted",
    "EventDelivery",
    "EventTrigger",
    "HoldState",
    "JwksUri",
    "OidcDiscovery",
    "Policy",
    "ReconcileResult",
    "Recovery",
    "RunInspection",
    "RunPage",
    "RunQuery",
    "RunService",
    "RunStatus",
    "ServiceRefusal",
    "StaticJwks",
    "StepRoute",
    "StepStatus",
    "WaitFor",
    "WaitUntil",
    "WorkflowSummary",
    "create_app",
]
