"""End to end: restore from a backup (07 §12, §12.1) with real processes on SQLite.

A backup of the store is taken while runs are in flight; after it, the service sends a
message. The store is then put back from the backup, as an operator restoring it would, while
the audit journal stays as it is. A plain `coordinator serve` must refuse that store
(`store-behind-journal`); the restore runbook of docs/operations.md, run here command by
command as written there, reviews the runs and lets the ordinary service start again, and no
message is ever delivered twice (the product answers a resent command by its key).

Also here: a journal whose tail was deleted is refused (`journal-truncated`), both at start and
by `audit verify --runtime-config`.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from e2e_support import ROOT, Project

from coordinator_sandbox.testing import wait_for

MESSAGING = "messaging.submit-message/v1"
TIMEOUT = 60.0
RUNBOOK_SECTION = "## 8. Restore from a backup"
_PER_RUN = re.compile(r"\$RUN\b")


def _deploy(project: Project) -> None:
    assert project.deploy_ctl("migrate")["status"] == "migrated"
    assert project.deploy_ctl("apply", "--reference", "E2E-RESTORE")["status"] == "applied"


def _store_path(project: Project) -> Path:
    match = re.search(r"sqlite:\n\s+path: (\S+)", project.runtime.read_text())
    assert match is not None
    return Path(match.group(1).strip("\"'"))


def _backup(store: Path, copy: Path) -> None:
    """A consistent copy of the live SQLite store (the online backup API)."""
    with (
        contextlib.closing(sqlite3.connect(store)) as source,
        contextlib.closing(sqlite3.connect(copy)) as target,
    ):
        source.backup(target)  # closed at once: an open connection would undo the restore


def _restore(copy: Path, store: Path) -> None:
    for suffix in ("-wal", "-shm"):
        Path(str(store) + suffix).unlink(missing_ok=True)
    store.write_bytes(copy.read_bytes())


def _status(project: Project, token: Path, run_id: str) -> str:
    return str(project.api_status(token, run_id)["status"])


def _runbook_commands() -> list[str]:
    """The `$ ` lines of the console blocks of the runbook's numbered steps, in order."""
    text = (ROOT / "docs" / "operations.md").read_text()
    start = text.index(RUNBOOK_SECTION)
    end = text.find("\n## ", start + len(RUNBOOK_SECTION))
    section = text[start : end if end >= 0 else len(text)]
    section = section[section.index("\n### 1.") :]  # the numbered steps; before them, examples
    commands: list[str] = []
    for block in re.findall(r"```console\n(.*?)```", section, re.S):
        commands.extend(line[2:] for line in block.splitlines() if line.startswith("$ "))
    return commands


class Runbook:
    """Runs runbook lines as a shell would, with the deployment's variables; `… &` starts a
    background process, `kill %1; wait %1` stops the last one (TERM, then its exit code)."""

    def __init__(self, project: Project, variables: dict[str, str]) -> None:
        self.project = project
        self.env = dict(project.env) | variables
        bin_dir = str(Path(sys.executable).parent)
        self.env["PATH"] = bin_dir + os.pathsep + self.env.get("PATH", "")
        self.background: list[subprocess.Popen[bytes]] = []
        self.count = 0

    def run(self, line: str, **variables: str) -> subprocess.CompletedProcess[str]:
        command = line.split("  #", 1)[0].strip()
        env = self.env | variables
        if command.startswith("kill %1"):
            process = self.background.pop()
            process.terminate()
            code = process.wait(30)
            return subprocess.CompletedProcess(command, code, "", "")
        if command.endswith("&"):
            self.count += 1
            name = f"runbook-{self.count}"
            out = (self.project.processes.directory / f"{name}.log").open("ab")
            process = subprocess.Popen(
                ["bash", "-c", "exec " + command[:-1].strip()],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=out,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            self.project.processes.started.append(process)
            self.background.append(process)
            return subprocess.CompletedProcess(command, 0, "", "")
        done = subprocess.run(
            ["bash", "-c", command],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        with (self.project.processes.directory / "runbook.txt").open("a") as transcript:
            transcript.write(f"$ {command}\n{done.stdout}{done.stderr}")
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        return done


def _wait_ready(project: Project, process: subprocess.Popen[bytes], path: str = "/health") -> None:
    def answered() -> bool:
        assert process.poll() is None, "the service exited"
        try:
            return httpx.get(project.origin + path, timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(answered, TIMEOUT, "the service to answer " + path, 0.2)


def test_a_restored_store_is_refused_and_the_runbook_brings_it_back(project: Project) -> None:
    sandbox = project.start_sandbox()
    project.write_runtime(sandbox, concurrency=2)
    _deploy(project)
    store = _store_path(project)
    service = project.start_service()
    project.wait_healthy(service)
    token = project.token_file()

    # U: its message is held in flight by the product when the backup is taken; P: parked
    # until after the backup, then its message is sent (the journal's proof of that commit
    # is what the restored store cannot show).
    sandbox.fault(MESSAGING, kind="delay", delaySeconds=4)
    applications = [str(uuid.uuid4()), str(uuid.uuid4())]
    for application in applications:
        sandbox.seed_application(application)
    now = datetime.now(UTC)
    created, body = project.api_start(token, applications[0], uuid.uuid4().hex, now)
    assert created == 201, body
    unknown_run = body["runId"]
    created, body = project.api_start(
        token, applications[1], uuid.uuid4().hex, now + timedelta(seconds=8)
    )
    assert created == 201, body
    pending_run = body["runId"]
    wait_for(lambda: sandbox.received(MESSAGING), TIMEOUT, "U's message to be in flight")
    copy = project.root / "backup.sqlite"
    _backup(store, copy)
    wait_for(
        lambda: (
            len(sandbox.received(MESSAGING)) >= 2
            and _status(project, token, pending_run) == "finished"
        ),
        TIMEOUT,
        "P's message to be sent after the backup",
        0.25,
    )
    wait_for(lambda: len(sandbox.messages()) == 2, TIMEOUT, "both messages to be delivered")
    assert project.processes.stop(service) == 0

    # The forgotten steps: the store alone is put back and a plain service started on it.
    _restore(copy, store)
    plain = project.start_service("serve-plain")
    assert plain.wait(60) == 1
    log = project.processes.log("serve-plain")
    assert "coordinator.deployment.store-behind-journal" in log
    assert len(sandbox.received(MESSAGING)) == 2  # it sent nothing and admitted nothing

    # The runbook, as written.
    commands = _runbook_commands()
    assert commands, "the runbook has no commands"
    runbook = Runbook(
        project,
        {"RUNTIME": str(project.runtime), "URL": project.origin, "TOKEN": str(token)},
    )
    review_done = False
    for line in commands:
        if _PER_RUN.search(line):
            if review_done:
                continue
            review_done = True
            _review(project, runbook, [line for line in commands if _PER_RUN.search(line)], token)
            continue
        runbook.run(line)
        if line.rstrip().endswith("--recovery-only &"):
            _wait_ready(project, runbook.background[-1])
        elif line.rstrip().endswith("&"):
            _wait_ready(project, runbook.background[-1], "/ready")
    assert review_done, "the runbook reviews no run"

    # The ordinary service works the reviewed runs: U was settled by its receipt, P's
    # message was resent with its original key, which the product answered as before.
    for run_id in (unknown_run, pending_run):
        wait_for(
            lambda run_id=run_id: _status(project, token, run_id) == "finished",  # type: ignore[misc]
            TIMEOUT,
            "the reviewed run to finish",
            0.25,
        )
    assert len(sandbox.messages()) == 2
    keys = [request.get("idempotencyKey") for request in sandbox.received(MESSAGING)]
    assert len(set(keys)) == 2, keys
    admitted, body = project.api_start(token, applications[0], uuid.uuid4().hex, now)
    assert admitted == 201, body  # admissions are open again


def _review(project: Project, runbook: Runbook, lines: list[str], token: Path) -> None:
    """Step 5 for every run under review: inspect; reconcile where the inspection allows it;
    retry-same; `cancel` is the alternative for a run that must not continue (not taken)."""
    listed = runbook.run(
        next(line for line in _runbook_commands() if "list --status attention" in line)
    )
    reviewed = [run for run in re.findall(r"[0-9a-f]{8}-[0-9a-f-]{27}", listed.stdout) if run]
    assert len(reviewed) == 2, listed.stdout
    for run_id in reviewed:
        inspection = project.remote(token, "inspect", "--run", run_id)
        assert inspection["run"]["restoreReview"] is True
        for line in lines:
            command = line.split("  #", 1)[0]
            if " cancel " in command:
                continue
            if " reconcile " in command and not inspection["recovery"]["reconcileAllowed"]:
                continue
            done = runbook.run(line, RUN=run_id)
            if " reconcile " in command:
                assert "settled" in done.stdout, done.stdout
                assert "retry-same" in done.stdout  # the next action is named
    for run_id in reviewed:
        assert project.remote(token, "status", "--run", run_id)["run"]["restoreReview"] is False


def test_a_journal_missing_its_tail_is_refused_at_start_and_by_audit_verify(
    project: Project,
) -> None:
    sandbox = project.start_sandbox()
    project.write_runtime(sandbox)
    _deploy(project)
    service = project.start_service()
    project.wait_healthy(service)
    token = project.token_file()
    application = str(uuid.uuid4())
    sandbox.seed_application(application)
    created, body = project.api_start(token, application, uuid.uuid4().hex, datetime.now(UTC))
    assert created == 201, body
    run_id = body["runId"]
    wait_for(lambda: _status(project, token, run_id) == "finished", TIMEOUT, "the run", 0.25)
    assert project.processes.stop(service) == 0  # a clean stop saves the journal's last line

    audit = project.root / ".coordinator" / "audit"
    verified = project.ctl(
        "--runtime-config", str(project.runtime), "audit", "verify", "--directory", str(audit)
    )
    assert verified["exitCode"] == 0
    journal = max(audit.glob("serve-*.jsonl"), key=lambda path: path.stat().st_mtime)
    content = journal.read_bytes().splitlines(keepends=True)
    journal.write_bytes(b"".join(content[:-1]))

    plain = project.start_service("serve-truncated")
    assert plain.wait(60) == 1
    assert "coordinator.audit.journal-truncated" in project.processes.log("serve-truncated")
    report = project.ctl(
        "--runtime-config", str(project.runtime), "audit", "verify", "--directory", str(audit),
        check=False,
    )  # fmt: skip
    assert report["exitCode"] == 1
    codes = [(d["code"], d["source"]["file"], d["source"]["line"]) for d in report["diagnostics"]]
    assert codes == [("coordinator.audit.journal-truncated", journal.name, len(content))]
