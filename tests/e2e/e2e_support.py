"""Processes for the end-to-end suite: a project made by `coordinatorctl init`, the sandbox
products, `coordinator serve`/`worker`, and the CLI, each a real process on loopback.

The process group, the sandbox, caller tokens and the runtime file's pieces are the test kit's
(`coordinator_sandbox.testing`, shared with the demo and the benchmarks); this module holds the
project a test deploys. Every process started is registered with a `Processes` group that the
fixtures stop (SIGTERM, then SIGKILL) whatever happens, so a failing test never leaves a server
behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from coordinator_sandbox.testing import (
    PYTHON,
    Policy,
    Processes,
    Sandbox,
    caller_token,
    deployment_block,
    free_port,
    point_at_sandbox,
    postgresql_database,
    wait_for,
    write_keys,
    write_token,
)

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = "delayed-follow-up"
READY_TIMEOUT = 30.0


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


def starter_policy(workflow: str = WORKFLOW) -> Policy:
    """A caller of the `starter` client, not an operator: tokens with the `coordinator:start`
    scope start runs and see and act on the ones they started only (06 §2)."""
    return Policy(
        [workflow],
        client_id="starter",
        required_scopes=("coordinator:start",),
        actions=("start", "status", "inspect", "cancel"),
        operator=False,
    )


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
        write_keys(project.secrets)
        project.listener_port = free_port()
        return project

    def start_sandbox(self, services: Sequence[str] = ("identity", "breg", "messaging")) -> Sandbox:
        return Sandbox.start(
            self.processes,
            self.sandbox_state,
            services=services,
            coordinator_url=self.origin,
            timeout=READY_TIMEOUT,
        )

    def write_runtime(
        self,
        sandbox: Sandbox,
        *,
        runtime_role: str | None = None,
        concurrency: int = 1,
        poll_ms: int = 50,
        policies: Sequence[Policy] = (),
    ) -> None:
        """Point the connections at the sandbox, package, add the deployment block: the
        operator's policy (`ops-console`) and `policies`."""
        text = point_at_sandbox(self.runtime.read_text(), sandbox.endpoints)
        package = self.root / "dist" / "package"
        packaged = self.ctl("package", "--project", str(self.root), "--output", str(package))
        self.package_digest = packaged["packageDigest"]
        self.revision = packaged["revision"]
        text += deployment_block(
            database_id="follow-up-e2e",
            package=package,
            digest=self.package_digest,
            port=self.listener_port,
            issuer=sandbox.url("issuer"),
            policies=[Policy([self.workflow]), *policies],
            audit_directory=self.root / ".coordinator" / "audit",
            runtime_role=runtime_role,
            poll_ms=poll_ms,
            concurrency=concurrency,
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
        policies: Sequence[Policy] = (),
    ) -> None:
        """`write_runtime` on a PostgreSQL store: the runtime role's and the migration role's
        URLs reach the runtime file as environment secrets."""
        self.env["E2E_RUNTIME_URL"] = runtime_url
        self.env["E2E_MIGRATION_URL"] = migration_url
        text = postgresql_database(
            self.runtime.read_text(),
            namespace=namespace,
            runtime_url_variable="E2E_RUNTIME_URL",
            migration_url_variable="E2E_MIGRATION_URL",
        )
        self.runtime.write_text(text)
        self.write_runtime(
            sandbox, runtime_role=runtime_role, concurrency=concurrency, policies=policies
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
        are given (the `starter` client of `starter_policy`, for one)."""
        token = caller_token(
            self.sandbox_state, subject=subject, client_id=client_id, scopes=scopes
        )
        return write_token(self.root / name, token)

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
