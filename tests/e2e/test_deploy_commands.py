"""The deployment commands of 09 §3 as processes, on SQLite: results, codes and the `ctl` audit
journal, and what a refused `deployment-status` names (the role cases on PostgreSQL).
(PostgreSQL runs the same commands in test_service.py.)"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from e2e_support import Project

from coordinator_core.shell.store.migrations import supported_migrations
from coordinator_sandbox.testing import PYTHON, Processes, Sandbox

# The connections only need well-formed endpoints: nothing here talks to a product.
OFFLINE_SANDBOX = Sandbox(
    process=None,  # type: ignore[arg-type]
    endpoints={
        "tokenEndpoint": "http://127.0.0.1:9/oauth/token",
        "breg": "http://127.0.0.1:9",
        "messaging": "http://127.0.0.1:9",
        "issuer": "http://127.0.0.1:9",
    },
    state_dir=Path("/nonexistent"),
)


def _codes(report: dict[str, Any]) -> list[str]:
    return [d["code"] for d in report["diagnostics"]]


def _journal(project: Project) -> list[dict[str, Any]]:
    audit = project.root / ".coordinator" / "audit"
    entries: list[dict[str, Any]] = []
    for path in sorted(audit.glob("ctl-*.jsonl")):
        entries += [json.loads(line) for line in path.read_text().splitlines()]
    return entries


@pytest.fixture
def deployed(project: Project) -> Project:
    project.write_runtime(OFFLINE_SANDBOX)
    return project


def test_every_command_needs_a_runtime_file_with_a_deployment(project: Project) -> None:
    for command in ("migrate", "plan", "apply", "deployment-status"):
        report = project.ctl(command, check=False)
        assert (report["exitCode"], _codes(report)) == (
            2,
            ["coordinator.command.runtime-config-required"],
        )
        # init's runtime.yaml has a database block but no deployment block.
        report = project.deploy_ctl(command, check=False)
        assert report["exitCode"] == 2
        assert "coordinator.command.deployment-required" in _codes(report)


def test_migrate_plan_apply_status_results_and_journal(deployed: Project) -> None:
    project = deployed
    plan = project.deploy_ctl("plan")
    assert plan["status"] == "planned"
    assert plan["store"] == "sqlite"
    assert plan["schema"]["applied"] == [] and plan["schema"]["pending"]
    assert plan["package"]["digest"] == project.package_digest
    assert plan["active"] is None
    assert plan["changes"] == {"activation": True, "newStateKeys": [1]}
    assert not (project.root / ".coordinator" / "coordinator.db").exists()  # read-only

    early = project.deploy_ctl("apply", check=False)
    assert (early["exitCode"], _codes(early)) == (1, ["coordinator.deployment.schema-pending"])
    status = project.deploy_ctl("deployment-status", check=False)
    assert status["exitCode"] == 1

    migrated = project.deploy_ctl("migrate")
    assert (migrated["store"], migrated["fromVersion"]) == ("sqlite", 0)
    assert (project.root / ".coordinator" / "coordinator.db").stat().st_mode & 0o777 == 0o600
    again = project.deploy_ctl("migrate")
    assert again["fromVersion"] == again["toVersion"] == migrated["toVersion"]

    refused = project.deploy_ctl("apply", "--reference", "x" * 257, check=False)
    assert (refused["exitCode"], _codes(refused)) == (1, ["coordinator.command.input-invalid"])
    applied = project.deploy_ctl("apply", "--reference", "CHG-7")
    assert applied["status"] == "applied"
    assert applied["packageDigest"] == project.package_digest
    assert applied["revision"] == project.revision

    checked = project.deploy_ctl("deployment-status")
    assert checked["status"] == "checked"
    assert checked["schemaVersion"] == migrated["toVersion"]
    assert checked["active"]["activationId"] == applied["activationId"]
    planned = project.deploy_ctl("plan")
    assert planned["changes"] == {"activation": False, "newStateKeys": []}

    entries = _journal(project)
    records = [(e["phase"], e["record"]) for e in entries]
    migrate_entry = {
        "action": "store.migrate",
        "fromVersion": 0,
        "toVersion": migrated["toVersion"],
    }
    assert ("request", migrate_entry) in records
    assert (
        "response",
        {
            "action": "activation.apply",
            "outcome": "refused",
            "code": early["diagnostics"][0]["code"],
        },
    ) in records
    applies = [r for p, r in records if p == "request" and r["action"] == "activation.apply"]
    assert any("reasonRef" in r for r in applies)
    assert ("response", {"outcome": "applied", "activationId": applied["activationId"]}) in records
    assert "CHG-7" not in json.dumps(entries)


def test_every_secret_problem_is_reported_at_once(deployed: Project) -> None:
    project = deployed
    (project.secrets / "audit.key").unlink()
    (project.secrets / "state-1.key").write_bytes(b"short")
    report = project.deploy_ctl("migrate", check=False)
    codes = _codes(report)
    assert "coordinator.secret.unavailable" in codes
    assert "coordinator.secret.invalid" in codes
    assert report["exitCode"] == 3
    text = subprocess.run(
        [PYTHON, "-m", "coordinatorctl", "--runtime-config", str(project.runtime), "plan"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert text.returncode == 3
    assert "2 errors" in text.stderr


def test_a_changed_admission_key_is_refused(deployed: Project, processes: Processes) -> None:
    project = deployed
    project.deploy_ctl("migrate")
    key = project.secrets / "admission.key"
    key.write_bytes(bytes(range(1, 33)))
    report = project.deploy_ctl("migrate", check=False)
    assert (report["exitCode"], _codes(report)) == (
        1,
        ["coordinator.command.admission-key-custody"],
    )


def test_a_connection_rebound_under_an_unsettled_run_is_a_live_binding_conflict(
    project: Project,
) -> None:
    """05 §10 from the command line: with a run admitted and still waiting, a runtime file
    that binds its BReg connection elsewhere fails `deployment-status` and `apply`
    (`live-binding-conflict`), through the service's own check; bound back, both pass."""
    sandbox = project.start_sandbox()
    project.write_runtime(sandbox)
    application = "b6c3c0a4-6f0e-4d5a-9b53-3c1f7f6c2a10"
    sandbox.seed_application(application)
    project.deploy_ctl("migrate")
    project.deploy_ctl("apply", "--reference", "E2E-LB")
    service = project.start_service()
    project.wait_healthy(service)
    token = project.token_file()
    started = project.start_run(token, application, delay=3600.0)  # waits an hour: unsettled
    assert started["status"] == "admitted"
    assert project.processes.stop(service, signal.SIGINT) == 0

    bound = project.runtime.read_text()
    breg = sandbox.url("breg")
    assert bound.count(breg) == 1
    project.runtime.write_text(bound.replace(breg, breg.replace("127.0.0.1", "127.0.0.2")))
    for command in ("deployment-status", "apply"):
        refused = project.deploy_ctl(command, check=False)
        assert (refused["exitCode"], _codes(refused)) == (
            1,
            ["coordinator.command.live-binding-conflict"],
        ), (command, refused)
    project.runtime.write_text(bound)
    assert project.deploy_ctl("deployment-status")["status"] == "checked"


def test_deployment_status_names_what_differs(deployed: Project) -> None:
    """09 §3 / 07 §15: a refused `deployment-status` names the cause in its message (short
    digests, versions, the key version), keeps the stable code, and never prints a key."""
    project = deployed
    project.deploy_ctl("migrate")
    project.deploy_ctl("apply")
    store = project.root / ".coordinator" / "coordinator.db"
    pinned = project.package_digest.removeprefix("sha256:")

    def refusal() -> tuple[int, str, str]:
        report = project.deploy_ctl("deployment-status", check=False)
        (diagnostic,) = report["diagnostics"]
        return report["exitCode"], diagnostic["code"], diagnostic["message"]

    with sqlite3.connect(store) as lite:
        lite.execute("UPDATE control SET active_package_digest = ?", ("sha256:" + "ab" * 32,))
    lite.close()
    assert refusal() == (
        1,
        "coordinator.deployment.refused",
        f"The store's active package is sha256:abababababab; the runtime file pins"
        f" sha256:{pinned[:12]}.",
    )
    text = subprocess.run(
        [
            PYTHON,
            "-m",
            "coordinatorctl",
            "--runtime-config",
            str(project.runtime),
            "deployment-status",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert text.returncode == 1
    assert f"the runtime file pins sha256:{pinned[:12]}." in text.stderr
    with sqlite3.connect(store) as lite:
        lite.execute("UPDATE control SET active_package_digest = ?", (project.package_digest,))
        lite.execute("UPDATE migrations SET checksum = 'sha256:00000000000000' WHERE version = 2")
    lite.close()
    exit_code, code, message = refusal()
    assert (exit_code, code) == (1, "coordinator.deployment.schema-mismatch")
    assert message.startswith(
        "The checksum of migration 2 in the store (sha256:000000000000) differs from this build's"
    )
    (second,) = [m for m in supported_migrations() if m.version == 2]
    with sqlite3.connect(store) as lite:
        lite.execute("UPDATE migrations SET checksum = ? WHERE version = 2", (second.checksum,))
    lite.close()

    key = project.secrets / "state-1.key"
    original = key.read_bytes()
    key.write_bytes(bytes(range(32)))
    try:
        assert refusal() == (
            1,
            "coordinator.command.state-key-custody",
            "The configured state key of version 1 differs from the key the store registered"
            " for it.",
        )
    finally:
        key.write_bytes(original)
    assert project.deploy_ctl("deployment-status")["status"] == "checked"


def test_deployment_status_names_the_runtime_role_and_its_wrong_grant(
    project: Project, postgres_url: str, postgres_role: Callable[[], str]
) -> None:
    """On PostgreSQL: the runtime URL connecting as another role, and a runtime role missing a
    grant of 07 §14.2, are each refused naming the role (and the grant)."""
    role = postgres_role()
    namespace = f"coordinator_ds_{uuid.uuid4().hex[:8]}"
    parts = urlsplit(postgres_url)
    runtime_url = urlunsplit(parts._replace(netloc=role + "@" + parts.netloc.rpartition("@")[2]))
    project.write_postgres_runtime(
        OFFLINE_SANDBOX,
        runtime_url=runtime_url,
        migration_url=postgres_url,
        namespace=namespace,
        runtime_role=role,
    )
    project.deploy_ctl("migrate")
    project.deploy_ctl("apply")
    assert project.deploy_ctl("deployment-status")["runtimeRole"] == role

    def refusal() -> tuple[int, str, str]:
        report = project.deploy_ctl("deployment-status", check=False)
        (diagnostic,) = report["diagnostics"]
        return report["exitCode"], diagnostic["code"], diagnostic["message"]

    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f'REVOKE DELETE ON "{namespace}".steps FROM "{role}"'.encode())
    assert refusal() == (
        1,
        "coordinator.deployment.refused",
        f"The runtime role {role} lacks DELETE on steps.",
    )
    project.deploy_ctl("migrate")  # restores the grants
    project.env["E2E_RUNTIME_URL"] = postgres_url  # the migration role's credentials
    exit_code, code, message = refusal()
    assert (exit_code, code) == (1, "coordinator.deployment.refused")
    assert message.endswith(f", not as the runtime role {role}.")
    assert postgres_url not in message
    project.env["E2E_RUNTIME_URL"] = runtime_url
    assert project.deploy_ctl("deployment-status")["status"] == "checked"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f'DROP SCHEMA "{namespace}" CASCADE'.encode())
