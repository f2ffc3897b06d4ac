"""The store: one implementation over SQLModel for PostgreSQL (many processes) and SQLite (one
process), its migrations and its deployment commands (file 07 §14; ARCHITECTURE rule 5).

`Store` composes a `Transactor` (connections, retries, observers) with the interfaces its
consumers use: `writes` (`RunWrites`), `reads` (`RunReads`), `operator` (`OperatorActions`)
and `channel` (`Channel`). Its values (`records`) compose the engine's own: a `StoredStep` is a
`StepRecord` plus the sealed payload and the lease, a `StoredRun` a `RunState` plus the
admission facts. Instants are epoch milliseconds throughout.

This is shell: nothing in the pure core may import it.
"""

from __future__ import annotations

from coordinator_core.shell.store.channel import Channel, ConnectionWatch
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
    locate,
)
from coordinator_core.shell.store.guards import ProcessLock, supported_version
from coordinator_core.shell.store.invariants import StaleLease, StoreInvariantError
from coordinator_core.shell.store.operator import OperatorActions
from coordinator_core.shell.store.reads import RunReads
from coordinator_core.shell.store.records import (
    ActivationRequest,
    ActivationRow,
    AdmissionResult,
    Claim,
    ControlRow,
    Decide,
    DecideEach,
    DeploymentIdentity,
    HoldState,
    Lease,
    ListedRun,
    NewRun,
    NextInstants,
    OperatorAction,
    Origin,
    Recover,
    RunPage,
    RunPosition,
    RunSnapshot,
    RunWrite,
    StatusChange,
    StepAttempt,
    StepOutcome,
    StoredRun,
    StoredStep,
    StoreSummary,
    SweepKind,
    WatchedRun,
    Written,
)
from coordinator_core.shell.store.store import Store
from coordinator_core.shell.store.transactor import Committed, Transactor, commits_after
from coordinator_core.shell.store.writes import FIRE_BATCH, LEASE_SECONDS, RunWrites

__all__ = [
    "FIRE_BATCH",
    "LEASE_SECONDS",
    "NAMESPACE_MARKER",
    "ActivationRequest",
    "ActivationRow",
    "AdmissionResult",
    "Channel",
    "Claim",
    "Committed",
    "ConnectionWatch",
    "ControlRow",
    "Decide",
    "DecideEach",
    "DeploymentIdentity",
    "DeploymentState",
    "HoldState",
    "Lease",
    "ListedRun",
    "MigrationResult",
    "NewRun",
    "NextInstants",
    "OperatorAction",
    "OperatorActions",
    "Origin",
    "ProcessLock",
    "Recover",
    "RunPage",
    "RunPosition",
    "RunReads",
    "RunSnapshot",
    "RunWrite",
    "RunWrites",
    "StaleLease",
    "StatusChange",
    "StepAttempt",
    "StepOutcome",
    "Store",
    "StoreInvariantError",
    "StoreKind",
    "StoreLocation",
    "StoreSummary",
    "StoredRun",
    "StoredStep",
    "SweepKind",
    "Transactor",
    "WatchedRun",
    "Written",
    "apply_activation",
    "commits_after",
    "inspect_deployment",
    "locate",
    "migrate",
    "supported_version",
]
