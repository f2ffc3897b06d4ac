"""The chaos campaign: real `coordinator serve` / `coordinator worker` processes, the sandbox
products, a store on SQLite or on a private PostgreSQL cluster, and faults injected while runs
are admitted and worked — SIGKILL at random moments and at each write-ahead failpoint
(`shell.runtime.failpoints`), product responses lost after the product committed, PostgreSQL fast
restarts and a killed postmaster, and restore drills from backups taken at random moments.

Afterwards the campaign settles every run (an operator reconciles what is `unknown`) and counts
against the evidence — the store, the products' own records, the journal and the process logs:

* runs lost: admitted (answered 201) and not in the store, except runs admitted after a backup
  that a drill restored (the restore loses them by definition, which is why admissions stay
  held until an operator attests the admission history);
* runs stuck: neither settled nor in `attention` once the faults have stopped;
* effects duplicated: a run with more than one message delivered, or whose message requests
  used two idempotency keys, or one key with two bodies;
* effects settled without a receipt: an effect `accepted` by `reconcile` with no message at the
  product;
* false detections: a start refused with a restore-detection code when nothing was restored;
* missed detections: a plain start accepted on a store restored from a backup taken before a
  `dispatch`/`committed` journal entry (a backup taken while such an entry was being written is
  not judged either way);
* tracebacks: a Python traceback in any process's output.
"""

from __future__ import annotations

import contextlib
import random
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from e2e_support import Project

from coordinator_sandbox.testing import Sandbox, wait_for

MESSAGING = "messaging.submit-message/v1"
TERMINAL = {"finished", "failed", "cancelled", "cancelled-after-effect", "expired"}
DETECTIONS = (
    "coordinator.deployment.store-behind-journal",
    "coordinator.deployment.store-restored",
    "coordinator.audit.journal-truncated",
    "coordinator.audit.journal-altered",
)
BOUNDARIES = (
    "after-claim", "after-freeze", "after-pre-send", "after-finish", "mid-continuation",
    "after-finish-claim",
)  # fmt: skip
START_TIMEOUT = 60.0
SETTLE_TIMEOUT = 180.0


@dataclass(frozen=True)
class Profile:
    """How much of each fault one campaign (one backend) injects."""

    name: str
    runs: int
    random_kills: int
    boundary_rounds: int  # each round arms every failpoint once
    lost_responses: int
    database_faults: int  # PostgreSQL only: alternating fast restart and killed postmaster
    drills: int

    @classmethod
    def ci(cls) -> Profile:
        return cls("ci", runs=24, random_kills=4, boundary_rounds=1, lost_responses=2,
                   database_faults=2, drills=2)  # fmt: skip

    @classmethod
    def long(cls) -> Profile:
        return cls("long", runs=160, random_kills=45, boundary_rounds=2, lost_responses=8,
                   database_faults=4, drills=6)  # fmt: skip


@dataclass
class Tally:
    runs: int = 0
    kills: int = 0
    faults: int = 0
    drills: int = 0
    drills_refused: int = 0  # the plain start refused, as it had to
    drills_accepted: int = 0  # the plain start was accepted, as it had to
    lost: int = 0
    stuck: int = 0
    duplicated: int = 0
    unproven: int = 0
    false_detections: int = 0
    missed_detections: int = 0
    tracebacks: int = 0
    notes: list[str] = field(default_factory=list)

    FAILING = ("lost", "stuck", "duplicated", "unproven", "false_detections",
               "missed_detections", "tracebacks")  # fmt: skip

    def table(self, title: str) -> str:
        rows = [
            ("runs", self.runs), ("kills", self.kills), ("faults", self.faults),
            ("restore drills", f"{self.drills} ({self.drills_refused} refused and"
             f" {self.drills_accepted} accepted as they had to be,"
             f" {self.drills - self.drills_refused - self.drills_accepted - self.missed_detections - self.false_detections} not judged)"),
            ("runs lost", self.lost),
            ("runs stuck without attention", self.stuck),
            ("effects sent twice / other bytes or key", self.duplicated),
            ("unknown effects settled without a receipt", self.unproven),
            ("false restore detections", self.false_detections),
            ("missed restore detections", self.missed_detections),
            ("tracebacks", self.tracebacks),
        ]  # fmt: skip
        width = max(len(name) for name, _ in rows)
        lines = [f"chaos {title}"] + [f"  {name:<{width}}  {value}" for name, value in rows]
        lines.extend(f"  note: {note}" for note in self.notes)
        return "\n".join(lines)

    def failures(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.FAILING if getattr(self, name)}


@dataclass
class Backup:
    """A backup taken at a random moment, with the journal's committed-dispatch count just
    before it began and just after it ended (the oracle of the drill that restores it)."""

    path: Path
    dispatches_before: int
    dispatches_after: int
    admitted_before: frozenset[str]


def committed_dispatches(audit: Path) -> int:
    """How many `dispatch`/`committed` entries the journal holds (complete lines only)."""
    count = 0
    for path in audit.glob("*.jsonl"):
        with contextlib.suppress(OSError):
            for line in path.read_bytes().split(b"\n")[:-1]:
                if b'"action":"dispatch"' in line and b'"outcome":"committed"' in line:
                    count += 1
    return count


class Backend:
    """What differs between the stores: the processes that work them, backups and restores."""

    kind: str

    def __init__(self, project: Project) -> None:
        self.project = project

    def process_names(self) -> tuple[str, ...]:
        raise NotImplementedError

    def backup(self, path: Path) -> None:
        raise NotImplementedError

    def restore(self, path: Path) -> None:
        raise NotImplementedError

    def database_fault(self, index: int) -> bool:
        return False


class SqliteBackend(Backend):
    kind = "sqlite"

    def __init__(self, project: Project, store: Path) -> None:
        super().__init__(project)
        self.store = store

    def process_names(self) -> tuple[str, ...]:
        return ("serve",)

    def backup(self, path: Path) -> None:
        # Both connections closed here, not whenever the garbage collector gets to them: a
        # connection left open on the live store would checkpoint its WAL into the file a
        # later restore wrote (the restore would silently not happen).
        with (
            contextlib.closing(sqlite3.connect(self.store)) as source,
            contextlib.closing(sqlite3.connect(path)) as target,
        ):
            source.backup(target)

    def restore(self, path: Path) -> None:
        for suffix in ("-wal", "-shm"):
            Path(str(self.store) + suffix).unlink(missing_ok=True)
        self.store.write_bytes(path.read_bytes())


class PostgresBackend(Backend):
    kind = "postgresql"

    def __init__(self, project: Project, cluster: Any, database: str, namespace: str) -> None:
        super().__init__(project)
        self.cluster = cluster
        self.database = database
        self.namespace = namespace

    def process_names(self) -> tuple[str, ...]:
        return ("serve", "worker")

    def _tool(self, name: str, *arguments: str, stdin: Any = None, stdout: Any = None) -> None:
        subprocess.run(
            [str(self.cluster.binaries / name), *arguments],
            check=True,
            stdin=stdin,
            stdout=stdout,
            stderr=subprocess.PIPE,
            timeout=120,
        )

    def backup(self, path: Path) -> None:
        with path.open("wb") as out:
            self._tool(
                "pg_dump", "--dbname", self.cluster.url(self.database), "--schema",
                self.namespace, "--format", "custom", stdout=out,
            )  # fmt: skip

    def restore(self, path: Path) -> None:
        import psycopg

        with psycopg.connect(self.cluster.url(self.database), autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{self.namespace}" CASCADE')
        self._tool(
            "pg_restore", "--dbname", self.cluster.url(self.database), "--exit-on-error",
            str(path),
        )  # fmt: skip

    def database_fault(self, index: int) -> bool:
        if index % 2 == 0:
            self.cluster.restart_fast()
        else:
            self.cluster.kill_postmaster()
            time.sleep(random.uniform(0.5, 3.0))
            self.cluster.start()
        return True


class Campaign:
    """One backend's campaign: admit, inject, drill, settle, count."""

    def __init__(
        self, project: Project, sandbox: Sandbox, backend: Backend, profile: Profile
    ) -> None:
        self.project = project
        self.sandbox = sandbox
        self.backend = backend
        self.profile = profile
        self.tally = Tally()
        self.random = random.Random()
        self.token = project.token_file()
        self.audit = project.root / ".coordinator" / "audit"
        self.running: dict[str, subprocess.Popen[bytes]] = {}
        self.starts = 0
        self.runs: dict[str, str] = {}  # run id → application id
        self.restore_lost: set[str] = set()  # admitted after the backup a drill restored
        self.admitting = threading.Event()
        self.backups: list[Backup] = []
        self.lock = threading.Lock()

    # -- processes --------------------------------------------------------------------------

    def start(
        self, name: str, *extra: str, failpoint: str | None = None
    ) -> subprocess.Popen[bytes]:
        """Start `serve` or `worker` (a fresh log name each time), and wait until it answers
        (serve) or has had a moment to refuse (worker); a refusal by restore detection where
        nothing was restored is a false detection."""
        self.starts += 1
        label = f"{name}-{self.starts}"
        env = dict(self.project.env)
        env.pop("COORDINATOR_FAILPOINTS", None)
        if failpoint is not None:
            env["COORDINATOR_FAILPOINTS"] = f"{failpoint}=1"
        command = "serve" if name == "serve" else "worker"
        process = self.project.processes.start(
            label,
            ["-m", "coordinator_api.serve", command, "--runtime-config",
             str(self.project.runtime), *extra],
            env=env,
        )  # fmt: skip
        self.running[name] = process
        if name == "serve":
            self._wait_answering(process, label)
        else:
            time.sleep(1.0)
            if process.poll() is not None:
                self._refused(label, process)
        return process

    def _wait_answering(self, process: subprocess.Popen[bytes], label: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if process.poll() is not None:
                self._refused(label, process)
                return
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.project.origin + "/health", timeout=1).status_code == 200:
                    return
            time.sleep(0.1)
        raise AssertionError(f"{label} did not answer: " + self.project.processes.log(label))

    def _refused(self, label: str, process: subprocess.Popen[bytes]) -> None:
        log = self.project.processes.log(label)
        if any(code in log for code in DETECTIONS):
            self.tally.false_detections += 1
            self.tally.notes.append(f"{label} refused by restore detection")
        elif process.returncode != -signal.SIGKILL:
            self.tally.notes.append(f"{label} exited {process.returncode} at start")

    def kill(self, name: str) -> None:
        process = self.running.get(name)
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.wait(30)
            self.tally.kills += 1

    def stop_all(self) -> None:
        for name, process in list(self.running.items()):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(40)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(10)
            del self.running[name]

    def ensure_running(self) -> None:
        for name in self.backend.process_names():
            process = self.running.get(name)
            if process is None or process.poll() is not None:
                self.start(name)

    # -- the workload -----------------------------------------------------------------------

    def admit_all(self, faults_done: threading.Event) -> threading.Thread:
        """Admit runs in the background until at least `profile.runs` are admitted and the
        faults are over, each retried with its own idempotency key until the service answers
        (a replay answers the same run)."""

        def admit() -> None:
            self.admitting.set()
            try:
                admitted = 0
                while admitted < self.profile.runs or not faults_done.is_set():
                    application = str(uuid.uuid4())
                    self.sandbox.seed_application(application, contact=f"{application}@example.org")
                    self._admit_one(application, uuid.uuid4().hex)
                    admitted += 1
                    time.sleep(self.random.uniform(0.1, 0.6))
            finally:
                self.admitting.clear()

        thread = threading.Thread(target=admit, name="chaos-admit", daemon=True)
        thread.start()
        return thread

    def _admit_one(self, application: str, key: str) -> None:
        send_after = datetime.now(UTC) + timedelta(seconds=self.random.uniform(0.0, 3.0))
        moment = send_after.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        body = {
            "workflow": self.project.workflow,
            "revision": self.project.revision,
            "input": {"applicationId": application, "sendAfter": moment},
        }
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            try:
                answer = httpx.post(
                    self.project.origin + "/v1/runs",
                    headers={"Authorization": "Bearer " + self._token(), "Idempotency-Key": key},
                    json=body,
                    timeout=15,
                )
            except httpx.HTTPError:
                time.sleep(0.3)
                continue
            if answer.status_code in (200, 201):
                with self.lock:
                    run_id = str(answer.json()["runId"])
                    if run_id not in self.runs:
                        self.runs[run_id] = application
                        self.tally.runs += 1
                return
            time.sleep(0.3)  # 503 while the store or the service is away, 409 under a hold
        self.tally.notes.append("an admission never got an answer")

    def _token(self) -> str:
        return self.token.read_text().strip()

    # -- faults -----------------------------------------------------------------------------

    def random_kill(self) -> None:
        time.sleep(self.random.uniform(0.2, 2.5))
        name = self.random.choice(self.backend.process_names())
        self.kill(name)
        self.start(name)

    def boundary_kill(self, boundary: str) -> None:
        """Restart the process that works the runs with the failpoint armed, wait until it
        dies there (or give up after a while: nothing reached it), start it normally."""
        name = "worker" if self.backend.kind == "postgresql" else "serve"
        current = self.running.get(name)
        if current is not None and current.poll() is None:
            current.terminate()
            current.wait(40)
        process = self.start(name, failpoint=boundary)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(25)
        if process.returncode == -signal.SIGKILL:
            self.tally.kills += 1
        elif process.poll() is None:
            where = " (test_freeze_failpoint reaches it)" if boundary == "after-freeze" else ""
            self.tally.notes.append(f"failpoint {boundary} not reached by this workflow{where}")
            process.terminate()
            process.wait(40)
        self.start(name)

    def lose_response(self) -> None:
        """The product commits the next message but its answer never arrives in time."""
        self.sandbox.fault(MESSAGING, kind="delay", delaySeconds=15)
        self.tally.faults += 1

    def database_fault(self, index: int) -> None:
        if self.backend.database_fault(index):
            self.tally.faults += 1

    # -- restore drills ---------------------------------------------------------------------

    def take_backup(self) -> Backup:
        path = self.project.root / f"backup-{len(self.backups) + 1}"
        before = committed_dispatches(self.audit)
        with self.lock:
            admitted = frozenset(self.runs)
        self.backend.backup(path)
        time.sleep(0.2)  # a proof of a commit the backup holds is on disk by now
        after = committed_dispatches(self.audit)
        backup = Backup(path, before, after, admitted)
        self.backups.append(backup)
        return backup

    def backup_and_drill(self) -> None:
        """A backup at a random moment, work going on for a few seconds, then its drill: each
        drill restores a backup of the timeline it runs in."""
        backup = self.take_backup()
        time.sleep(self.random.uniform(0.5, 5.0))
        self.drill(backup)

    def drill(self, backup: Backup) -> None:
        """Stop everything, put the store back from `backup` alone, start a plain serve: it
        must refuse exactly when a committed dispatch was journaled after the backup. Then the
        runbook (docs/operations.md section 8) brings the deployment back."""
        self.stop_all()
        self.backend.restore(backup.path)
        with self.lock:
            self.restore_lost.update(set(self.runs) - backup.admitted_before)
        now = committed_dispatches(self.audit)
        expected: bool | None = None
        if now > backup.dispatches_after:
            expected = True
        elif now == backup.dispatches_before:
            expected = False
        self.starts += 1
        label = f"serve-plain-{self.starts}"
        plain = self.project.processes.start(
            label,
            ["-m", "coordinator_api.serve", "serve", "--runtime-config", str(self.project.runtime)],
            env=self.project.env,
        )  # fmt: skip
        refused = False
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if plain.poll() is not None:
                refused = any(code in self.project.processes.log(label) for code in DETECTIONS)
                break
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.project.origin + "/health", timeout=1).status_code == 200:
                    break
            time.sleep(0.1)
        if plain.poll() is None:
            plain.terminate()
            plain.wait(40)
        self.tally.drills += 1
        if expected is True:
            if refused:
                self.tally.drills_refused += 1
            else:
                self.tally.missed_detections += 1
        if expected is False:
            if refused:
                self.tally.false_detections += 1
                self.tally.notes.append(f"drill {self.tally.drills}: refused, nothing after it")
            else:
                self.tally.drills_accepted += 1
        self.runbook()

    def runbook(self) -> None:
        """07 §12 steps 2–8 with the CLI, reviewing every run under review."""
        recovery = self.project.processes.start(
            f"serve-recovery-{self.starts}",
            ["-m", "coordinator_api.serve", "serve", "--runtime-config",
             str(self.project.runtime), "--recovery-only"],
            env=self.project.env,
        )  # fmt: skip
        self._wait_answering(recovery, f"serve-recovery-{self.starts}")
        self.remote("restore-hold", "--reason", "CHAOS-DRILL")
        self.review(under_review=True)
        self.remote("release-restore-hold", "--reason", "CHAOS-FENCE")
        self.remote(
            "release-admission-hold", "--reason", "CHAOS-ADMISSIONS",
            "--admission-history-complete", "--prior-deployment-fenced",
        )  # fmt: skip
        recovery.terminate()
        recovery.wait(40)
        self.ensure_running()

    def review(self, *, under_review: bool) -> None:
        """Every run in `attention`: reconcile where the inspection allows it, then retry-same
        where allowed (under review: cancel where it is not)."""
        for run_id in self.attention_runs():
            inspection = self.remote("inspect", "--run", run_id)
            recovery = inspection.get("recovery") or {}
            if recovery.get("reconcileAllowed"):
                self.remote("reconcile", "--run", run_id, "--reason", "CHAOS-RECONCILE")
                inspection = self.remote("inspect", "--run", run_id)
                recovery = inspection.get("recovery") or {}
            if recovery.get("retryAllowed"):
                self.remote("retry-same", "--run", run_id, "--reason", "CHAOS-RETRY")
            elif under_review and inspection["run"].get("restoreReview"):
                self.remote("cancel", "--run", run_id, "--reason", "CHAOS-CANCEL")

    def attention_runs(self) -> list[str]:
        found: list[str] = []
        cursor: str | None = None
        while True:
            arguments = ["list", "--status", "attention", "--limit", "100"]
            if cursor is not None:
                arguments += ["--cursor", cursor]
            page = self.remote(*arguments)
            found.extend(str(run["runId"]) for run in page["runs"])
            cursor = page.get("nextCursor")
            if cursor is None:
                return found

    def remote(self, *arguments: str) -> dict[str, Any]:
        report = self.project.remote(self.token, *arguments, check=False)
        if report["exitCode"] != 0:
            raise AssertionError(f"coordinatorctl {arguments[0]} failed: {report}")
        result: dict[str, Any] = report.get("result") or report
        return result

    # -- settle and count -------------------------------------------------------------------

    def status(self, run_id: str) -> dict[str, Any] | None:
        answer = httpx.get(
            f"{self.project.origin}/v1/runs/{run_id}",
            headers={"Authorization": "Bearer " + self._token()},
            timeout=15,
        )
        if answer.status_code == 404:
            return None
        answer.raise_for_status()
        body: dict[str, Any] = answer.json()
        return body

    def settle(self) -> dict[str, dict[str, Any] | None]:
        """Wait until every run is settled or in `attention`; an operator then reconciles and
        retries what waits for one, and the runs are read once more."""
        self.ensure_running()

        def read() -> dict[str, dict[str, Any] | None]:
            return {run_id: self.status(run_id) for run_id in list(self.runs)}

        def quiet(states: dict[str, dict[str, Any] | None]) -> bool:
            return all(
                state is None or state["status"] in TERMINAL | {"attention"}
                for state in states.values()
            )

        states = read()
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while not quiet(states) and time.monotonic() < deadline:
            time.sleep(1.0)
            states = read()
        for _ in range(3):
            if not any(s is not None and s["status"] == "attention" for s in states.values()):
                break
            self.review(under_review=False)
            deadline = time.monotonic() + SETTLE_TIMEOUT
            states = read()
            while not quiet(states) and time.monotonic() < deadline:
                time.sleep(1.0)
                states = read()
        return states

    def count(self, states: dict[str, dict[str, Any] | None]) -> None:
        messages = self.sandbox.messages()
        requests = self.sandbox.received(MESSAGING)
        by_application: dict[str, list[dict[str, Any]]] = {}
        for message in messages:
            application = _application_of(message.get("request"))
            by_application.setdefault(application or "?", []).append(message)
        keys: dict[str, set[str]] = {}
        bodies: dict[str, set[str]] = {}
        for request in requests:
            body = request.get("body")
            application = _application_of(body)
            if application is None or request.get("idempotencyKey") is None:
                continue
            keys.setdefault(application, set()).add(str(request["idempotencyKey"]))
            bodies.setdefault(str(request["idempotencyKey"]), set()).add(repr(body))
        for run_id, application in self.runs.items():
            state = states.get(run_id)
            if state is None:
                if run_id not in self.restore_lost:
                    self.tally.lost += 1
                continue
            if state["status"] not in TERMINAL | {"attention"}:
                self.tally.stuck += 1
            sent = by_application.get(application, [])
            if len(sent) > 1 or len(keys.get(application, ())) > 1:
                self.tally.duplicated += 1
            accepted = state["status"] == "finished" and state.get("outcome") == "message-accepted"
            if accepted and not sent:
                self.tally.unproven += 1  # finished as accepted, yet the product holds nothing
        self.tally.duplicated += sum(1 for found in bodies.values() if len(found) > 1)
        for run_id in self.runs:
            state = states.get(run_id)
            if state is None:
                continue
            inspection = self.remote("inspect", "--run", run_id)
            for effect in inspection.get("effects") or []:
                if effect.get("settledBy") == "reconcile" and not by_application.get(
                    self.runs[run_id]
                ):
                    self.tally.unproven += 1
        self.tally.tracebacks += _tracebacks(self.project.processes.directory)


def _application_of(body: object) -> str | None:
    """The application a message is about: the campaign seeds each application with a contact
    address made of its id, and the workflow sends the message to that address."""
    text = repr(body)
    found = re.search(r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})@", text)
    return found.group(1) if found else None


def _tracebacks(directory: Path) -> int:
    count = 0
    for path in directory.glob("*.log"):
        with contextlib.suppress(OSError):
            count += path.read_text(errors="replace").count("Traceback (most recent call last)")
    return count


def run_campaign(campaign: Campaign) -> Tally:
    """The schedule: faults in a shuffled order while the runs are admitted, backups taken
    between them, drills after; then settle and count."""
    profile = campaign.profile
    actions: list[Callable[[], None]] = []
    actions += [campaign.random_kill] * profile.random_kills
    for _ in range(profile.boundary_rounds):
        actions += [lambda b=b: campaign.boundary_kill(b) for b in BOUNDARIES]  # type: ignore[misc]
    actions += [campaign.lose_response] * profile.lost_responses
    if campaign.backend.kind == "postgresql":
        actions += [
            lambda i=i: campaign.database_fault(i)  # type: ignore[misc]
            for i in range(profile.database_faults)
        ]
    actions += [campaign.backup_and_drill] * profile.drills
    campaign.random.shuffle(actions)
    campaign.ensure_running()
    faults_done = threading.Event()
    admitting = campaign.admit_all(faults_done)
    time.sleep(2.0)  # some runs in flight before the first fault
    for action in actions:
        action()
        campaign.ensure_running()
        time.sleep(campaign.random.uniform(0.1, 1.0))
    faults_done.set()
    admitting.join(900)
    wait_for(lambda: not campaign.admitting.is_set(), 60, "the admissions to end")
    states = campaign.settle()
    campaign.count(states)
    campaign.stop_all()
    return campaign.tally


@contextlib.contextmanager
def printed(tally: Tally, title: str) -> Iterator[None]:
    try:
        yield
    finally:
        sys.stdout.write("\n" + tally.table(title) + "\n")
        sys.stdout.flush()
