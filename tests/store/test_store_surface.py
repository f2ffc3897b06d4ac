"""The store's public surface is explicit and pinned (ARCHITECTURE rule 7), and the pure core
never imports it (rule 2)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import coordinator_core.shell.store
from coordinator_core.shell.store import (
    Channel,
    OperatorActions,
    RunReads,
    RunWrites,
    Store,
)

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
    "WatchedRun",
    "Transactor",
    "Written",
    "apply_activation",
    "commits_after",
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


INTERFACES = {
    "Store": {
        "open",
        "verify",
        "close",
        "kind",
        "location",
        "may_claim",
        "observe",
        "note",
        "follow_journal",
        "save_journal_head",
        "store_identity",
    },
    "RunWrites": {
        "before_commit",
        "kind",
        "admit",
        "claim_due_step",
        "fire_due_waits",
        "sweep",
        "record_step_progress",
        "complete_step",
        "request_cancel",
        "update_run",
        "advance_completion_waits",
    },
    "RunReads": {
        "control",
        "get_run",
        "find_run",
        "get_run_snapshot",
        "get_run_status",
        "watched_runs",
        "list_runs",
        "hold_state",
        "unsettled_bindings",
        "definition_snapshot",
        "summary",
        "gauges",
        "journal_heads",
        "head_identities",
        "inspect_run",
        "recent_attempts",
        "attempts",
        "run_ids",
        "next_instants",
    },
    "OperatorActions": {
        "set_restore_hold",
        "release_restore_hold",
        "release_admission_hold",
        "erase_settled_before",
    },
    "Channel": {"announce", "listen"},
}


@pytest.mark.parametrize("name", sorted(INTERFACES))
def test_each_interface_of_the_store_offers_exactly_its_operations(name: str) -> None:
    """The store is a transactor and the narrow interfaces its consumers use: `store.writes`,
    `store.reads`, `store.operator` and `store.channel`, each with its own operations and
    nothing of the others'."""
    interface = getattr(coordinator_core.shell.store, name)
    public = {member for member in vars(interface) if not member.startswith("_")}
    assert public == INTERFACES[name]


def test_a_store_composes_its_interfaces_over_one_transactor(store: Store) -> None:
    parts = {"writes": RunWrites, "reads": RunReads, "operator": OperatorActions}
    for attribute, kind in {**parts, "channel": Channel}.items():
        part = getattr(store, attribute)
        assert type(part) is kind
        assert part._tx is store.transactor  # every transaction runs on the store's one transactor
