"""Sealed at rest: a dump of the store holds none of the canary strings that were in a run's
input, its prepared commands and a product's response.

A `delayed-follow-up` run goes through the live service: its input's `applicationId` (copied
into the BReg request and the Messaging command's `correlationId`), and the BReg record's
`applicantName` and `contactEmail` (the product response, copied into the Messaging command)
are canaries. After the run finishes, the SQLite file (and its `-wal`) or a plain `pg_dump` of
the PostgreSQL database, and every audit journal file, are searched for them.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

from e2e_support import Project
from support.needs import unavailable

from coordinator_sandbox.testing import Sandbox, database_url, wait_for

MESSAGING = "messaging.submit-message/v1"


def _run_with_canaries(project: Project, sandbox: Sandbox) -> list[bytes]:
    application = str(uuid.uuid4())
    name = f"Canary Applicant {uuid.uuid4().hex}"
    email = f"canary-{uuid.uuid4().hex}@example.org"
    sandbox.seed_application(application, contact=email, name=name)
    assert project.deploy_ctl("migrate")["status"] == "migrated"
    assert project.deploy_ctl("apply", "--reference", "SEALED-1")["status"] == "applied"
    service = project.start_service()
    project.wait_healthy(service)
    token = project.token_file()
    run_id = project.start_run(token, application, delay=0.5)["run"]["runId"]

    def settled() -> dict[str, object] | None:
        run = project.status(token, run_id)
        return run if run["status"] in {"finished", "failed", "attention", "expired"} else None

    run = wait_for(settled, 30, "the run to settle", 0.25)
    assert run["status"] == "finished"
    # The canaries really went through: the command carried them, the product answered them.
    sent = sandbox.received(MESSAGING)
    assert len(sent) == 1
    assert name in str(sent[0]) and email in str(sent[0]) and application in str(sent[0])
    assert project.processes.stop(service) == 0
    return [value.encode() for value in (application, name, email)]


def _audit_files(project: Project) -> list[Path]:
    files = [p for p in (project.root / ".coordinator" / "audit").rglob("*") if p.is_file()]
    assert files, "no audit journal was written"
    return files


def _assert_clean(canaries: list[bytes], sources: dict[str, bytes]) -> None:
    for label, content in sources.items():
        for canary in canaries:
            assert canary not in content, f"canary {canary!r} found in {label}"


def test_sqlite_file_and_audit_hold_no_canary(project: Project) -> None:
    sandbox = project.start_sandbox()
    project.write_runtime(sandbox)
    canaries = _run_with_canaries(project, sandbox)
    database = project.root / ".coordinator" / "coordinator.db"
    assert database.exists()
    files = [database, *_audit_files(project)]
    files += [p for p in database.parent.glob("coordinator.db-*") if p.is_file()]  # -wal, -shm
    _assert_clean(canaries, {str(path): path.read_bytes() for path in files})


def test_pg_dump_and_audit_hold_no_canary(
    project: Project, postgres_url: str, postgres_role: Callable[[], str]
) -> None:
    pg_dump = shutil.which("pg_dump")
    if pg_dump is None:
        unavailable("pg_dump is not installed", "apt-get install postgresql-client")
    sandbox = project.start_sandbox()
    role = postgres_role()
    database = postgres_url.rpartition("/")[2]
    project.write_postgres_runtime(
        sandbox,
        runtime_url=database_url(postgres_url, database, user=role),
        migration_url=postgres_url,
        namespace=f"coordinator_sealed_{uuid.uuid4().hex[:8]}",
        runtime_role=role,
    )
    canaries = _run_with_canaries(project, sandbox)
    dump = subprocess.run(
        [pg_dump, "--format=plain", "--no-owner", postgres_url],
        capture_output=True,
        check=True,
        timeout=120,
    ).stdout
    assert b"COPY " in dump or b"INSERT " in dump
    sources = {"pg_dump": dump}
    sources.update({str(path): path.read_bytes() for path in _audit_files(project)})
    _assert_clean(canaries, sources)
