"""The store: one implementation over SQLModel for PostgreSQL (many processes) and SQLite (one
process), its migrations and its deployment commands (file 07 §14; ARCHITECTURE rule 5).

This is shell: nothing in the pure core may import it.
"""

from __future__ import annotations

from coordinator_core.shell.store.deploy import (
    DeploymentState,
    MigrationResult,
    apply_activation,
    inspect_deployment,
    migrate,
)
from coordinator_core.shell.store.dialect import (
    NAMESPACE_MARKER,
    StoreKind,
    StoreLocation,
    from_epoch_ms,
    locate,
    to_epoch_ms,
    truncate_ms,
)
from coordinator_core.shell.store.guards import ProcessLock, supported_version
from coordinator_core.shell.store.rows import (
    ActivationRequest,
    ActivationRow,
    AdmissionResult,
    Claim,
    ControlRow,
    Decide,
    DecideEach,
    DeploymentIdentity,
    HoldState,
    NewRun,
    NextInstants,
    Recover,
    Recovery,
    RunPage,
    RunPosition,
    RunRow,
    RunSnapshot,
    RunWrite,
    StatusChange,
    StepOutcome,
    StepRow,
    StoreSummary,
    Written,
)
from coordinator_core.shell.store.store import (
    FIRE_BATCH,
    LEASE_SECONDS,
    StaleLease,
    Store,
    StoreInvariantError,
)

__all__ = [
    "FIRE_BATCH",
    "LEASE_SECONDS",
    "NAMESPACE_MARKER",
    "ActivationRequest",
    "ActivationRow",
    "AdmissionResult",
    "Claim",
    "ControlRow",
    "Decide",
    "DecideEach",
    "DeploymentIdentity",
    "DeploymentState",
    "HoldState",
    "MigrationResult",
    "NewRun",
    "NextInstants",
    "ProcessLock",
    "Recover",
    "Recovery",
    "RunPage",
    "RunPosition",
    "RunRow",
    "RunSnapshot",
    "RunWrite",
    "StaleLease",
    "StatusChange",
    "StepOutcome",
    "StepRow",
    "Store",
    "StoreInvariantError",
    "StoreKind",
    "StoreLocation",
    "StoreSummary",
    "Written",
    "apply_activation",
    "from_epoch_ms",
    "inspect_deployment",
    "locate",
    "migrate",
    "supported_version",
    "to_epoch_ms",
    "truncate_ms",
]
