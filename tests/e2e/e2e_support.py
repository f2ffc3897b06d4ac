"""Processes for the end-to-end suite: a project made by `coordinatorctl init`, the sandbox
products, `coordinator serve`/`worker`, and the CLI, each a real process on loopback.

Every process started here is registered with a `Processes` group that the fixtures stop
(SIGTERM, then SIGKILL) whatever happens, so a failing test never leaves a server behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import httpx

from coordinator_sandbox.launch import endpoints_in

PYTHON = sys.executable
ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = "delayed-follow-up"
READY_TIMEOUT = 30.0


# Below Linux's ephemeral range (32768–60999 by default): a port handed out here is never the
# one the kernel gives a later `bind(0)` (the sandbox's `--ports 0`, another test's client),
# which could take it between this probe and the service's own bind.
_LISTENER_PORTS: Final = range(20_000, 32_000)


def free_port() -> int:
    """A loopback port free now, outside the ephemeral range (for a listener bound later)."""
    for port in random.sample(_LISTENER_PORTS, 64):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free loopback port below the ephemeral range")


@dataclass
class Processes:
    """Every process a test started; `stop_all` ends them (TERM, then KILL after a grace)."""

    directory: Path
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(
        self, name: str, arguments: Sequence[str], env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        out = (self.directory / f"{name}.out").open("ab")
        err = (self.directory / f"{name}.err").open("ab")
        process = subprocess.Popen(
            [PYTHON, *arguments],
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env=dict(env) if env is not None else None,
            start_new_session=True,
        )
        out.close()
        err.close()
        self.started.append(process)
        return process

    def stop(
        self,
        process: subprocess.Popen[bytes],
        signum: signal.Signals = signal.SIGTERM,
        timeout: float = 20.0,
    ) -> int:
        if process.poll() is None:
            process.send_signal(signum)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        return process.returncode

    def stop_all(self) -> None:
        for process in reversed(self.started):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for process in reversed(self.started):
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)

    def log(self, name: str) -> str:
        parts = []
        for suffix in ("out", "err"):
            path = self.directory / f"{name}.{suffix}"
            if path.exists():
                parts.append(path.read_text(errors="replace"))
        return "".join(parts)


def descendants(pid: int) -> set[int]:
    """Every live descendant of `pid` (from /proc: children, their children, …)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    """Running, not a zombie waiting to be reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def wait_for(predicate: Any, timeout: float, what: str, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


_SANDBOX_SERVICE = {"external-http": "external"}  # the product → the sandbox service


@dataclass
class Sandbox:
    """A running `coordinator-sandbox serve` on ephemeral ports."""

    process: subprocess.Popen[bytes]
    endpoints: dict[str, str]
    state_dir: Path

    def url(self, service: str) -> str:
        return self.endpoints[service]

    def requests(self, operation: str) -> list[dict[str, Any]]:
        service = _SANDBOX_SERVICE.get(operation.split(".", 1)[0], operation.split(".", 1)[0])
        answer = httpx.get(
            self.url(service) + "/sandbox/requests", params={"operation": operation}, timeout=5
        )
        answer.raise_for_status()
        body = answer.json()
        found = body["requests"] if isinstance(body, dict) else body
        return list(found)

    def messages(self) -> list[dict[str, Any]]:
        answer = httpx.get(self.url("messaging") + "/sandbox/messages", timeout=5)
        answer.raise_for_status()
        body = answer.json()
        return list(body["messages"] if isinstance(body, dict) else body)

    def fault(self, fault: Mapping[str, Any]) -> None:
        product = str(fault["operation"]).split(".", 1)[0]
        service = _SANDBOX_SERVICE.get(product, product)
        httpx.post(self.url(service) + "/sandbox/faults", json=fault, timeout=5).raise_for_status()

    def seed_application(self, application_id: str, *, follow_up: bool = True) -> None:
        answer = httpx.put(
            f"{self.url('breg')}/sandbox/records/applications/{application_id}",
            json={
                "domainData": {
                    "followUpAllowed": follow_up,
                    "contactEmail": "applicant@example.org",
                    "applicantName": "A. Applicant",
                }
            },
            timeout=5,
        )
        answer.raise_for_status()


@dataclass
class Project:
    """A `delayed-follow-up` project made by `coordinatorctl init` (or, with `example`, the
    init'd directory with that example's project files), with its deployment."""

    root: Path
    processes: Processes
    workflow: str = WORKFLOW
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    listener_port: int = 0
    package_digest: str = ""
    revision: str = ""

    @property
    def runtime(self) -> Path:
        return self.root / "runtime.yaml"

    @property
    def secrets(self) -> Path:
        return self.root / ".coordinator" / "secrets"

    @property
    def sandbox_state(self) -> Path:
        return self.root / ".coordinator" / "sandbox"

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.listener_port}"

    def ctl(self, *arguments: str, check: bool = True) -> dict[str, Any]:
        """One `coordinatorctl` command with `--format json`; its report."""
        done = subprocess.run(
            [PYTHON, "-m", "coordinatorctl", "--format", "json", *arguments],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=60,
            check=False,
        )
        report: dict[str, Any] = json.loads(done.stdout)
        report["exitCode"] = done.returncode
        if check and done.returncode != 0:
            raise AssertionError(f"coordinatorctl {arguments[:1]} failed: {report}")
        return report

    def deploy_ctl(self, command: str, *arguments: str, check: bool = True) -> dict[str, Any]:
        return self.ctl("--runtime-config", str(self.runtime), command, *arguments, check=check)

    # -- set-up ---------------------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, processes: Processes, example: str | None = None) -> Project:
        project = cls(directory / (example or "follow-up"), processes, example or WORKFLOW)
        project.ctl("init", "--directory", str(project.root))
        if example is not None:  # keep init's keys, take the example's project files
            source = ROOT / "examples" / example
            for name in ("workflow.yaml", "functions.rhai", "scenarios.yaml"):
                (project.root / name).write_text((source / name).read_text())
            runtime = (source / "runtime.yaml").read_text()
            project.runtime.write_text(runtime.replace(f"/home/dev/{example}", str(project.root)))
        subprocess.run(
            [PYTHON, "-m", "coordinator_sandbox", "keys", "--secrets-dir", str(project.secrets)],
            check=True,
            capture_output=True,
            timeout=60,
        )
        project.listener_port = free_port()
        return project

    def start_sandbox(self, services: str = "identity,breg,messaging") -> Sandbox:
        name = "sandbox"
        process = self.processes.start(
            name,
            [
                "-m", "coordinator_sandbox", "serve",
                "--state-dir", str(self.sandbox_state),
                "--ports", "0",
                "--services", services,
                "--coordinator-url", self.origin,
            ],
        )  # fmt: skip

        def ready() -> dict[str, str] | None:
            if process.poll() is not None:
                raise AssertionError("the sandbox exited: " + self.processes.log(name))
            return endpoints_in(self.processes.log(name))

        endpoints = wait_for(ready, READY_TIMEOUT, "the sandbox")
        return Sandbox(process, endpoints, self.sandbox_state)

    def write_runtime(
        self,
        sandbox: Sandbox,
        *,
        database: str | None = None,
        runtime_role: str | None = None,
        concurrency: int = 1,
        poll_ms: int = 50,
    ) -> None:
        """Point the connections at the sandbox, set the database, add the deployment block."""
        text = self.runtime.read_text()
        text = text.replace("http://127.0.0.1:8100/oauth/token", sandbox.url("tokenEndpoint"))
        for port, service in (
            ("8101", "breg"),
            ("8103", "messaging"),
            ("8105", "external"),
            ("8106", "evaluation"),
        ):
            if service in sandbox.endpoints:
                text = text.replace(f"http://127.0.0.1:{port}", sandbox.url(service))
        if database is not None:
            start = text.index("database:\n")
            end = min(
                text.index(name)
                for name in ("connections:\n", "externalHttpConnections:\n")
                if name in text
            )
            text = text[:start] + database + text[end:]
            text = text.replace("secretProviders:\n", "secretProviders:\n  environment: {}\n")
        packaged = self.ctl(
            "package", "--project", str(self.root), "--output", str(self.root / "dist" / "package")
        )
        self.package_digest = packaged["packageDigest"]
        self.revision = packaged["revision"]
        role = f"  runtimeRole: {runtime_role}\n" if runtime_role else ""
        text += DEPLOYMENT_BLOCK.format(
            root_audit=json.dumps(str(self.root / ".coordinator" / "audit")),
            package=json.dumps(str(self.root / "dist" / "package")),
            digest=self.package_digest,
            port=self.listener_port,
            issuer=sandbox.url("issuer"),
            role=role,
            workflow=self.workflow,
            concurrency=concurrency,
            poll_ms=poll_ms,
        )
        self.runtime.write_text(text)

    def allow_starters(self) -> None:
        """A second client in the runtime file, `starter`: tokens with the `coordinator:start`
        scope get a policy that is not an operator's (start, status, inspect, cancel), so
        each caller sees and acts on the runs it started only (06 §2). After `write_runtime`."""
        text = self.runtime.read_text()
        clients = "    allowedClients: [ops-console]\n"
        assert clients in text and "    policies:\n" in text
        text = text.replace(clients, "    allowedClients: [ops-console, starter]\n")
        text = text.replace(
            "    policies:\n", "    policies:\n" + STARTER_POLICY.format(workflow=self.workflow)
        )
        self.runtime.write_text(text)

    def write_postgres_runtime(
        self,
        sandbox: Sandbox,
        *,
        runtime_url: str,
        migration_url: str,
        namespace: str,
        runtime_role: str,
        concurrency: int = 1,
    ) -> None:
        """`write_runtime` on a PostgreSQL store: the runtime role's and the migration role's
        URLs reach the runtime file as environment secrets."""
        self.env["E2E_RUNTIME_URL"] = runtime_url
        self.env["E2E_MIGRATION_URL"] = migration_url
        self.write_runtime(
            sandbox,
            database=(
                "database:\n  postgresql:\n"
                "    runtimeUrlRef: secret:env/E2E_RUNTIME_URL\n"
                "    migrationUrlRef: secret:env/E2E_MIGRATION_URL\n"
                f"    namespace: {namespace}\n"
            ),
            runtime_role=runtime_role,
            concurrency=concurrency,
        )

    # -- the service ----------------------------------------------------------------------

    def start_service(self, name: str = "serve", *extra: str) -> subprocess.Popen[bytes]:
        return self.processes.start(
            name,
            ["-m", "coordinator_api.serve", "serve", "--runtime-config", str(self.runtime), *extra],
            env=self.env,
        )

    def start_worker(self, name: str = "worker") -> subprocess.Popen[bytes]:
        return self.processes.start(
            name,
            ["-m", "coordinator_api.serve", "worker", "--runtime-config", str(self.runtime)],
            env=self.env,
        )

    def wait_healthy(self, process: subprocess.Popen[bytes], name: str = "serve") -> None:
        def healthy() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"{name} exited: " + self.processes.log(name))
            try:
                return httpx.get(self.origin + "/health", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(healthy, READY_TIMEOUT, f"{name} to answer /health", interval=0.2)

    def token_file(
        self,
        *,
        subject: str | None = None,
        client_id: str | None = None,
        scopes: tuple[str, ...] = (),
        name: str = "token",
    ) -> Path:
        """A caller token signed by the sandbox's issuer, in a file (0600) named `name`: the
        operator's (`ops-console`, `coordinator:operate`) unless a subject, client and scopes
        are given (the `starter` client of `allow_starters`, for one)."""
        options = [] if subject is None else ["--subject", subject]
        options += [] if client_id is None else ["--client-id", client_id]
        for scope in scopes:
            options += ["--scope", scope]
        token = subprocess.run(
            [PYTHON, "-m", "coordinator_sandbox", "caller-token", "--state-dir",
             str(self.sandbox_state), "--expires-in", "3600", *options],
            check=True, capture_output=True, text=True, timeout=60,
        ).stdout.strip()  # fmt: skip
        path = self.root / name
        path.write_text(token + "\n")
        path.chmod(0o600)
        return path

    def remote(self, token: Path, *arguments: str, check: bool = True) -> dict[str, Any]:
        return self.ctl("--url", self.origin, "--token-file", str(token), *arguments, check=check)

    def start_run(
        self,
        token: Path,
        application_id: str,
        *,
        key: str | None = None,
        delay: float = 1.0,
        check: bool = True,
    ) -> dict[str, Any]:
        stem = key or uuid.uuid4().hex
        input_file = self.root / f"input-{stem}.json"
        if not input_file.exists():  # a replay of the same key sends the very same input
            send_after = datetime.now(UTC) + timedelta(seconds=delay)
            moment = send_after.isoformat(timespec="milliseconds").replace("+00:00", "Z")
            input_file.write_text(
                json.dumps({"applicationId": application_id, "sendAfter": moment})
            )
        key_file = self.root / f"key-{stem}.txt"
        key_file.write_text(stem)
        return self.remote(
            token,
            "start",
            "--workflow", WORKFLOW,
            "--revision", self.revision,
            "--input", str(input_file),
            "--key-file", str(key_file),
            check=check,
        )  # fmt: skip

    # -- the API directly (for many runs; one CLI process per call would dominate the time) --

    def api_start(
        self, token: Path, application_id: str, key: str, send_after: datetime
    ) -> tuple[int, dict[str, Any]]:
        moment = send_after.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        answer = httpx.post(
            self.origin + "/v1/runs",
            headers={
                "Authorization": "Bearer " + token.read_text().strip(),
                "Idempotency-Key": key,
            },
            json={
                "workflow": WORKFLOW,
                "revision": self.revision,
                "input": {"applicationId": application_id, "sendAfter": moment},
            },
            timeout=30,
        )
        body: dict[str, Any] = answer.json()
        return answer.status_code, body

    def api_status(self, token: Path, run_id: str) -> dict[str, Any]:
        answer = httpx.get(
            f"{self.origin}/v1/runs/{run_id}",
            headers={"Authorization": "Bearer " + token.read_text().strip()},
            timeout=30,
        )
        answer.raise_for_status()
        body: dict[str, Any] = answer.json()
        return body

    def status(self, token: Path, run_id: str) -> dict[str, Any]:
        run: dict[str, Any] = self.remote(token, "status", "--run", run_id)["run"]
        return run


# The policy `allow_starters` adds: a caller of the `starter` client, not an operator.
STARTER_POLICY = """      - clientId: starter
        requiredScopes: [coordinator:start]
        workflows: [{workflow}]
        actions: [start, status, inspect, cancel]
"""

DEPLOYMENT_BLOCK = """deployment:
  databaseId: follow-up-e2e
{role}  package:
    root: {package}
    expectedDigest: "{digest}"
  listener:
    bind: 127.0.0.1:{port}
    tlsTermination: development-loopback
  authentication:
    issuer: {issuer}
    audience: coordinator
    jwksSource:
      type: static
      documentRef: secret:file/caller-jwks.json
    allowedClients: [ops-console]
    policies:
      - clientId: ops-console
        requiredScopes: [coordinator:operate]
        workflows: [{workflow}]
        actions: [start, status, inspect, cancel, retry-same, reconcile, doctor, restore-hold, release-restore-hold, release-admission-hold, retain]
        operator: true
  auditDirectory: {root_audit}
  auditKeyRef: secret:file/audit.key
  activeStateKey: 1
  stateKeys:
    "1":
      keyRef: secret:file/state-1.key
  admissionKeyRef: secret:file/admission.key
  worker:
    pollMilliseconds: {poll_ms}
    concurrency: {concurrency}
"""
