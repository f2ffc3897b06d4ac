"""The store's public surface is explicit and pinned (ARCHITECTURE rule 7), and the pure core
never imports it (rule 2)."""

from __future__ import annotations

import subprocess
import sys

import coordinator_core.shell.store

EXPECTED = {
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
    "MigrationResult",
    "NewRun",
    "NextInstants",
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
    "Written",
    "apply_activation",
    "inspect_deployment",
    "locate",
    "migrate",
    "supported_version",
}


def test_the_store_exports_exactly_its_public_names() -> None:
    assert set(coordinator_core.shell.store.__all__) == EXPECTED
    assert all(hasattr(coordinator_core.shell.store, name) for name in EXPECTED)


def test_the_service_side_of_the_store_does_not_load_alembic() -> None:
    code = (
        "import sys\n"
        "import coordinator_core.shell.store as store\n"
        "store.supported_version()\n"
        "assert 'alembic' not in sys.modules, 'alembic loaded'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_pure_core_modules_do_not_import_the_store() -> None:
    code = (
        "import sys\n"
        "import coordinator_core.engine, coordinator_core.definition, coordinator_core.values\n"
        "assert not [m for m in sys.modules if m.startswith('coordinator_core.shell.store')]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
