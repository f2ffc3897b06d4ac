"""Restore drills (07 §12.1, docs/operations.md §8 "Which restores are detected"): each kind of
restore an operator can make, on each backend, with real processes, and what a plain
`coordinator serve` does on the result: refuse (and with which code) or start, and how many
product requests it sends before an operator releases anything.

The same history is made once per backend: run A's message is sent; the service is stopped
while run B waits to send (its instant a few seconds ahead) and a backup is taken (SQLite: a
cold copy of the file; PostgreSQL: `pg_dump` of the namespace) together with a copy of the
audit directory; the service then sends B's message and is stopped. The deployment names a
restore witness (`store.restoreWitness`) in a directory outside what is backed up. Each drill
starts from that latest state, puts back what its kind of restore puts back, and starts a
plain service (with or without the witness in its runtime file). The witness drill then runs
the runbook's holds over the API and shows the ordinary service start again, still sending
nothing until the reviewed run is retried.

Each backend prints its table (kind, detected, code, requests before release): the figures of
the guide's table. The promoted standby is `tests/chaos/test_failover.py`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psycopg
import pytest
from e2e_support import Project
from support.private_postgres import PrivatePostgres

from coordinator_sandbox.testing import Sandbox, wait_for

MESSAGING = "messaging.submit-message/v1"
RUNTIME_ROLE = "coordinator_runtime"
DATABASE = "coordinator"
NAMESPACE = "coordinator_drills"
TIMEOUT = 60.0
QUIET_SECONDS = 4.0  # how long a started plain service is watched for requests
RESTORED = "coordinator.deployment.store-restored"
BEHIND = "coordinator.deployment.store-behind-journal"


@dataclass
class Outcome:
    kind: str
    code: str | None  # the refusal, or None when the plain service started
    requests: int  # product requests sent before an operator released anything

    def row(self) -> str:
        detected = "yes" if self.code is not None else "no"
        return f"  {self.kind:<52} {detected:<4} {self.code or '-':<46} {self.requests}"


@dataclass
class Drills:
    """One backend's deployment, its saved states and the drills' outcomes."""

    project: Project
    sandbox: Sandbox
    witness: Path
    plain_runtime: Path
    token: Path
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def audit(self) -> Path:
        return self.project.root / ".coordinator" / "audit"

    def requests(self) -> int:
        return len(self.sandbox.received(MESSAGING))

    def start(self, name: str, runtime: Path, *extra: str) -> subprocess.Popen[bytes]:
        return self.project.processes.start(
            name,
            ["-m", "coordinator_api.serve", "serve", "--runtime-config", str(runtime), *extra],
            env=self.project.env,
        )

    def plain(self, kind: str, runtime: Path, expected: str | None) -> Outcome:
        """Start a plain service on what was put back; its refusal or its requests."""
        before = self.requests()
        name = "serve-" + re.sub(r"[^a-z0-9]+", "-", kind.lower()).strip("-")
        process = self.start(name, runtime)
        if expected is None:
            self.project.wait_healthy(process, name)
            deadline = time.monotonic() + QUIET_SECONDS
            while time.monotonic() < deadline and self.requests() == before:
                time.sleep(0.1)
            time.sleep(0.5)
            assert self.project.processes.stop(process) == 0
            code = None
        else:
            assert process.wait(TIMEOUT) == 1, self.project.processes.log(name)
            log = self.project.processes.log(name)
            assert expected in log, log
            assert "Traceback" not in log
            code = expected
        outcome = Outcome(kind, code, self.requests() - before)
        self.outcomes.append(outcome)
        return outcome

    def api(self, method: str, path: str, body: dict[str, object] | None = None) -> httpx.Response:
        return httpx.request(
            method,
            self.project.origin + path,
            headers={"Authorization": "Bearer " + self.token.read_text().strip()},
            json=body,
            timeout=30,
        )

    def runbook(self, runtime: Path, run_id: str) -> int:
        """07 §12 steps 2–8 over the API: the requests sent before the last release."""
        before = self.requests()
        recovery = self.start("serve-recovery", runtime, "--recovery-only")
        self.project.wait_healthy(recovery, "serve-recovery")
        held = self.api("POST", "/v1/restore-hold", {"reason": "DRILL-1"})
        assert held.status_code == 200, held.text
        assert held.json()["restoreReview"] >= 1
        assert self.api("POST", "/v1/release-restore-hold", {"reason": "FENCE-1"}).is_success
        released = self.api(
            "POST",
            "/v1/release-admission-hold",
            {
                "reason": "ADMISSIONS-OK",
                "admissionHistoryComplete": True,
                "priorDeploymentFenced": True,
            },
        )
        assert released.is_success, released.text
        assert self.project.processes.stop(recovery) == 0
        ordinary = self.start("serve-ordinary", runtime)
        self.project.wait_healthy(ordinary, "serve-ordinary")

        def ready() -> bool:
            return httpx.get(self.project.origin + "/ready", timeout=2).status_code == 200

        wait_for(ready, TIMEOUT, "the ordinary service to be ready", 0.2)
        time.sleep(1.0)
        sent_before_release = self.requests() - before  # the reviewed run is still held
        retried = self.api("POST", f"/v1/runs/{run_id}/retry-same", {"reason": "DRILL-1"})
        assert retried.is_success, retried.text
        wait_for(
            lambda: self.api("GET", f"/v1/runs/{run_id}").json()["status"] == "finished",
            TIMEOUT,
            "the reviewed run to finish",
            0.25,
        )
        assert self.project.processes.stop(ordinary) == 0
        return sent_before_release


# -- the shared history -------------------------------------------------------------------------


def _admit(project: Project, token: Path, sandbox: Sandbox, delay: float) -> str:
    application = str(uuid.uuid4())
    sandbox.seed_application(application)
    created, body = project.api_start(
        token, application, uuid.uuid4().hex, datetime.now(UTC) + timedelta(seconds=delay)
    )
    assert created == 201, body
    return str(body["runId"])


def _status(project: Project, token: Path, run_id: str) -> str:
    return str(project.api_status(token, run_id)["status"])


def _with_witness(project: Project, witness: Path) -> Path:
    """The runtime file with `store.restoreWitness`; answers the plain one (without it)."""
    plain = project.root / "runtime-without-witness.yaml"
    text = project.runtime.read_text()
    plain.write_text(text)
    plain.chmod(project.runtime.stat().st_mode & 0o777)
    block = f'store:\n  restoreWitness: "{witness}"\n'
    project.runtime.write_text(text.replace("deployment:\n", block + "deployment:\n", 1))
    return plain


def _history(
    project: Project,
    sandbox: Sandbox,
    backup: Callable[[], None],
) -> tuple[Drills, str]:
    """A sent before the backup; B waiting at the backup, sent after it. Answers the drills'
    deployment and B's run id; the service is stopped at the end."""
    witness = project.root.parent / "elsewhere" / "restore-witness"
    witness.parent.mkdir(mode=0o700)
    plain = _with_witness(project, witness)
    service = project.start_service()
    project.wait_healthy(service)
    token = project.token_file()
    drills = Drills(project, sandbox, witness, plain, token)
    run_a = _admit(project, token, sandbox, 0)
    wait_for(lambda: _status(project, token, run_a) == "finished", TIMEOUT, "A to finish", 0.25)
    run_b = _admit(project, token, sandbox, 6)
    assert project.processes.stop(service) == 0  # B waits: the cold backup is taken now
    assert drills.requests() == 1
    backup()
    shutil.copytree(drills.audit, project.root.parent / "backup" / "audit")
    service = project.start_service("serve-after-backup")
    project.wait_healthy(service, "serve-after-backup")
    wait_for(lambda: _status(project, token, run_b) == "finished", TIMEOUT, "B to finish", 0.25)
    assert project.processes.stop(service) == 0
    assert drills.requests() == 2
    return drills, run_b


class Saved:
    """Files as they were at one moment, put back in place (same inodes) or as new files."""

    def __init__(self, paths: list[Path]) -> None:
        self.content = {path: path.read_bytes() for path in paths}

    def put_back(self, *, new_files: bool) -> None:
        for path, data in self.content.items():
            if new_files:
                temporary = path.with_name(path.name + ".restoring")
                temporary.write_bytes(data)
                temporary.chmod(0o600)
                os.replace(temporary, path)  # a restore by rename (rsync, tar): a new inode
            else:
                path.write_bytes(data)  # a copy over the file (cp, a snapshot): same inode


def _reset_audit(audit: Path, keep: Saved) -> None:
    """The audit directory exactly as `keep` saved it (a drill's process added a group)."""
    for path in audit.iterdir():
        if path not in keep.content:
            path.unlink()
    keep.put_back(new_files=False)


def _print(kind: str, outcomes: list[Outcome]) -> None:
    print(f"\nrestore drills on {kind}")
    print(f"  {'restore':<52} {'det.':<4} {'code':<46} requests before release")
    for outcome in outcomes:
        print(outcome.row())


# -- SQLite ---------------------------------------------------------------------------------------


def _store_path(project: Project) -> Path:
    match = re.search(r"sqlite:\n\s+path: (\S+)", project.runtime.read_text())
    assert match is not None
    return Path(match.group(1).strip("\"'"))


def test_restore_drills_on_sqlite(project: Project) -> None:
    sandbox = project.start_sandbox()
    project.write_runtime(sandbox, concurrency=1)
    assert project.deploy_ctl("migrate")["status"] == "migrated"
    assert project.deploy_ctl("apply", "--reference", "DRILLS")["status"] == "applied"
    store = _store_path(project)
    backup_file = project.root.parent / "backup" / "store.sqlite"
    backup_file.parent.mkdir()

    def cold_copy() -> None:
        assert not Path(str(store) + "-wal").exists()
        shutil.copyfile(store, backup_file)

    drills, run_b = _history(project, sandbox, cold_copy)
    audit_files = sorted(drills.audit.iterdir())
    latest = Saved([store, drills.witness, *audit_files])
    backup_audit = project.root.parent / "backup" / "audit"

    def restore(*, journal: bool, new_files: bool) -> None:
        _reset_audit(drills.audit, latest)  # the latest state, in place (its inodes kept)
        for suffix in ("-wal", "-shm"):
            Path(str(store) + suffix).unlink(missing_ok=True)
        chosen = Saved([])
        chosen.content = {store: backup_file.read_bytes()}
        if journal:
            for path in audit_files:
                copy = backup_audit / path.name
                if copy.exists():
                    chosen.content[path] = copy.read_bytes()
                else:
                    path.unlink()  # a group begun after the backup is not in it
        chosen.put_back(new_files=new_files)

    restore(journal=False, new_files=False)
    drills.plain("store alone (copied over the file)", drills.plain_runtime, BEHIND)
    restore(journal=True, new_files=False)
    undetected = drills.plain(
        "store + journal copied over the same files", drills.plain_runtime, None
    )
    restore(journal=True, new_files=False)
    drills.plain("store + journal over the same files, witness", project.runtime, RESTORED)
    released = drills.runbook(project.runtime, run_b)
    restore(journal=True, new_files=True)  # last: the store file is a new inode from here on
    drills.plain("store + journal, cold copy into new files", drills.plain_runtime, RESTORED)
    _print("sqlite", drills.outcomes)
    print(f"  runbook after the witness drill: {released} requests before release")
    assert [outcome.requests for outcome in drills.outcomes] == [0, undetected.requests, 0, 0]
    assert undetected.requests == 1  # undetected: B's message went out again (same key)
    assert released == 0
    assert len(sandbox.messages()) == 2  # the resends were answered from the receipts


# -- PostgreSQL -----------------------------------------------------------------------------------


@pytest.fixture
def cluster() -> Iterator[PrivatePostgres]:
    with PrivatePostgres.running_with(DATABASE, RUNTIME_ROLE) as running:
        yield running


def _tool(
    cluster: PrivatePostgres, name: str, *arguments: str, stdin: bytes | None = None
) -> bytes:
    done = subprocess.run(
        [str(cluster.binaries / name), *arguments],
        input=stdin,
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    return done.stdout


def test_restore_drills_on_postgresql(project: Project, cluster: PrivatePostgres) -> None:
    sandbox = project.start_sandbox()
    project.write_postgres_runtime(
        sandbox,
        runtime_url=cluster.url(DATABASE, RUNTIME_ROLE),
        migration_url=cluster.url(DATABASE),
        namespace=NAMESPACE,
        runtime_role=RUNTIME_ROLE,
    )
    assert project.deploy_ctl("migrate")["status"] == "migrated"
    assert project.deploy_ctl("apply", "--reference", "DRILLS")["status"] == "applied"
    dump: dict[str, bytes] = {}

    def pg_dump() -> None:
        dump["backup"] = _tool(
            cluster, "pg_dump", "--dbname", cluster.url(DATABASE), "--schema", NAMESPACE,
            "--format", "custom",
        )  # fmt: skip

    drills, run_b = _history(project, sandbox, pg_dump)
    audit_files = sorted(drills.audit.iterdir())
    latest = Saved([drills.witness, *audit_files])
    backup_audit = project.root.parent / "backup" / "audit"
    runtime_url = project.env["E2E_RUNTIME_URL"]

    def restore(*, journal: bool, database: str = DATABASE) -> None:
        _reset_audit(drills.audit, latest)
        with psycopg.connect(cluster.url(DATABASE), autocommit=True) as admin:
            if database == DATABASE:
                admin.execute(f'DROP SCHEMA IF EXISTS "{NAMESPACE}" CASCADE')
            else:
                admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
                admin.execute(f'CREATE DATABASE "{database}"')
        _tool(
            cluster, "pg_restore", "--dbname", cluster.url(database), "--exit-on-error",
            stdin=dump["backup"],
        )  # fmt: skip
        project.env["E2E_RUNTIME_URL"] = cluster.url(database, RUNTIME_ROLE)
        if journal:
            for path in audit_files:
                copy = backup_audit / path.name
                if copy.exists():
                    path.write_bytes(copy.read_bytes())
                else:
                    path.unlink()

    try:
        restore(journal=False)
        drills.plain("store alone (pg_restore into its database)", drills.plain_runtime, BEHIND)
        restore(journal=True, database="coordinator_restored")
        drills.plain(
            "store + journal, pg_restore into a new database", drills.plain_runtime, RESTORED
        )
        restore(journal=True)
        undetected = drills.plain(
            "store + journal, pg_restore into its database", drills.plain_runtime, None
        )
        restore(journal=True)
        drills.plain("store + journal into its database, witness", project.runtime, RESTORED)
        released = drills.runbook(project.runtime, run_b)
    finally:
        project.env["E2E_RUNTIME_URL"] = runtime_url
    _print("postgresql", drills.outcomes)
    print(f"  runbook after the witness drill: {released} requests before release")
    assert [outcome.requests for outcome in drills.outcomes] == [0, 0, undetected.requests, 0]
    assert undetected.requests == 1
    assert released == 0
    assert len(sandbox.messages()) == 2
