"""Benchmark: whole runs through `coordinator serve` on PostgreSQL, next to PostgreSQL's own bound.

Writes a small project into a temporary directory (read a BReg record → choose on a field →
send a Messaging notice → finish; the other case finishes at once), packages it, migrates and
applies it on a fresh PostgreSQL database, starts the sandbox products and `coordinator serve`
(plus `--workers` `coordinator worker` processes), admits `--runs` runs over HTTP at
`--concurrency` and waits until every run is `finished`. In the same run it measures the raw
single-row INSERT+COMMIT rate of one psycopg connection on the same server: the physical bound.

Prints plain `name value` lines. Loopback only; every process started is stopped and the
database dropped whatever happens. PostgreSQL is the server named by
`COORDINATOR_TEST_POSTGRES_URL` (default `postgresql://root@127.0.0.1:5432/root`).

Run: `nox -s bench -- service` or `python scripts/bench_service.py [--runs N]`.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg

from coordinator_sandbox.launch import endpoints_in

PYTHON = sys.executable
ADMIN_URL_VARIABLE = "COORDINATOR_TEST_POSTGRES_URL"
DEFAULT_ADMIN_URL = "postgresql://root@127.0.0.1:5432/root"
WORKFLOW = "bench-service"
READY_TIMEOUT = 30.0
COMMIT_ROWS = 2000
SETTLED = {"finished", "failed", "attention", "expired", "cancelled"}
T = TypeVar("T")

WORKFLOW_YAML = """\
apiVersion: id.registrystack.org/formats/coordinator/project/v1alpha1
kind: CoordinatorProject
project:
  id: bench-service
  version: "1"
  title: Service benchmark
input:
  type: object
  additionalProperties: false
  required: [applicationId]
  properties:
    applicationId:
      type: string
      format: uuid
operations:
  application-record:
    operation: breg.read-record/v1
    connection: applications
  notice:
    operation: messaging.submit-message/v1
    connection: notices
functionsFile: functions.rhai
deadlineSeconds: 86400
start: read-application
steps:
  read-application:
    type: call
    operation: application-record
    input:
      function: read_request
      arguments:
        - type: input
    next: permission
  permission:
    type: choose
    choose:
      function: notice_route
      arguments:
        - type: step
          step: read-application
    cases:
      send: notify
      skip: skipped
  notify:
    type: call
    operation: notice
    input:
      function: notice_request
      arguments:
        - type: input
        - type: step
          step: read-application
    next: accepted
  accepted:
    type: finish
    outcome: message-accepted
    output:
      function: receipt_result
      arguments:
        - type: step
          step: notify
  skipped:
    type: finish
    outcome: no-current-permission
outcomes:
  message-accepted:
    type: object
    additionalProperties: false
    required: [messageId]
    properties:
      messageId:
        type: string
        format: uuid
  no-current-permission:
    type: "null"
"""

FUNCTIONS_RHAI = """\
fn read_request(input) {
    #{ collection: "applications", recordId: input.applicationId }
}

fn notice_route(application) {
    if application.data.domainData.followUpAllowed == true { "send" } else { "skip" }
}

fn notice_request(input, application) {
    let data = application.data.domainData;
    #{
        senderProfile: "applicant-notices",
        to: #{ email: data.contactEmail },
        template: #{ id: "follow-up", version: "1" },
        locale: "en",
        data: #{ applicantName: data.applicantName },
        correlationId: input.applicationId
    }
}

fn receipt_result(receipt) {
    #{ messageId: receipt.id }
}
"""

DEPLOYMENT_BLOCK = """deployment:
  databaseId: bench-service
  runtimeRole: {role}
  package:
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
        workflows: [bench-service]
        actions: [start, status, inspect]
        operator: true
  auditDirectory: {audit}
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


class BenchError(Exception):
    """A step of the benchmark failed; the message says which (and carries a log tail)."""


def with_database(url: str, database: str, user: str | None = None) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc
    if user is not None:
        netloc = user + "@" + netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, "/" + database, parts.query, parts.fragment))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_for(predicate: Callable[[], T | None], timeout: float, what: str, interval: float) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


class Processes:
    """Every process this script started; `stop_all` ends them (TERM, then KILL)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.started: list[subprocess.Popen[bytes]] = []

    def start(
        self, name: str, arguments: Sequence[str], env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        with (self.directory / f"{name}.log").open("ab") as log:
            process = subprocess.Popen(
                [PYTHON, *arguments],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(env) if env is not None else None,
                start_new_session=True,
            )
        self.started.append(process)
        return process

    def log(self, name: str, tail: int = 4000) -> str:
        path = self.directory / f"{name}.log"
        return path.read_text(errors="replace")[-tail:] if path.exists() else ""

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


def run_tool(arguments: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    done = subprocess.run(
        [PYTHON, *arguments],
        capture_output=True,
        text=True,
        env=dict(env) if env is not None else None,
        timeout=90,
        check=False,
    )
    if done.returncode != 0:
        output = done.stdout[-2000:] + done.stderr[-2000:]
        raise BenchError(f"{' '.join(arguments[:3])} failed: {output}")
    return done.stdout


def ctl(env: Mapping[str, str], *arguments: str) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(
        run_tool(["-m", "coordinatorctl", "--format", "json", *arguments], env)
    )
    return report


# -- the physical bound ---------------------------------------------------------------------


def postgres_commits_per_second(url: str, rows: int) -> float:
    """Single-row INSERT then COMMIT, `rows` times, on one connection."""
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("CREATE TABLE bench_commit (id bigint PRIMARY KEY, body text)")
    with psycopg.connect(url) as connection:
        began = time.perf_counter()
        for index in range(rows):
            connection.execute(
                "INSERT INTO bench_commit (id, body) VALUES (%s, %s)", (index, "x" * 64)
            )
            connection.commit()
        elapsed = time.perf_counter() - began
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("DROP TABLE bench_commit")
    return rows / elapsed


# -- the service ----------------------------------------------------------------------------


def write_project(root: Path, env: Mapping[str, str]) -> None:
    ctl(env, "init", "--directory", str(root))
    (root / "workflow.yaml").write_text(WORKFLOW_YAML, encoding="utf-8")
    (root / "functions.rhai").write_text(FUNCTIONS_RHAI, encoding="utf-8")
    secrets_dir = str(root / ".coordinator" / "secrets")
    run_tool(["-m", "coordinator_sandbox", "keys", "--secrets-dir", secrets_dir])


def start_sandbox(processes: Processes, state: Path, origin: str) -> dict[str, str]:
    process = processes.start(
        "sandbox",
        [
            "-m", "coordinator_sandbox", "serve",
            "--state-dir", str(state),
            "--ports", "0",
            "--services", "identity,breg,messaging",
            "--coordinator-url", origin,
        ],
    )  # fmt: skip

    def ready() -> dict[str, str] | None:
        if process.poll() is not None:
            raise BenchError("the sandbox exited: " + processes.log("sandbox"))
        return endpoints_in(processes.log("sandbox", tail=100_000))

    return wait_for(ready, READY_TIMEOUT, "the sandbox", 0.1)


def write_runtime(
    root: Path,
    env: Mapping[str, str],
    endpoints: Mapping[str, str],
    *,
    namespace: str,
    role: str,
    port: int,
    concurrency: int,
    poll_ms: int = 20,
) -> str:
    """Point runtime.yaml at the sandbox and PostgreSQL, package, add the deployment block."""
    runtime = root / "runtime.yaml"
    text = runtime.read_text()
    text = text.replace("http://127.0.0.1:8100/oauth/token", endpoints["tokenEndpoint"])
    text = text.replace("http://127.0.0.1:8101", endpoints["breg"])
    text = text.replace("http://127.0.0.1:8103", endpoints["messaging"])
    start, end = text.index("database:\n"), text.index("connections:\n")
    text = (
        text[:start]
        + "database:\n  postgresql:\n"
        + "    runtimeUrlRef: secret:env/BENCH_RUNTIME_URL\n"
        + "    migrationUrlRef: secret:env/BENCH_MIGRATION_URL\n"
        + f"    namespace: {namespace}\n"
        + text[end:]
    )
    text = text.replace("secretProviders:\n", "secretProviders:\n  environment: {}\n")
    package = root / "dist" / "package"
    packaged = ctl(env, "package", "--project", str(root), "--output", str(package))
    text += DEPLOYMENT_BLOCK.format(
        role=role,
        package=json.dumps(str(package)),
        digest=packaged["packageDigest"],
        port=port,
        issuer=endpoints["issuer"],
        audit=json.dumps(str(root / ".coordinator" / "audit")),
        poll_ms=poll_ms,
        concurrency=concurrency,
    )
    runtime.write_text(text)
    revision: str = packaged["revision"]
    return revision


def seed(endpoints: Mapping[str, str], applications: Sequence[str]) -> None:
    with httpx.Client(timeout=10) as client:
        for application in applications:
            client.put(
                f"{endpoints['breg']}/sandbox/records/applications/{application}",
                json={
                    "domainData": {
                        "followUpAllowed": True,
                        "contactEmail": "applicant@example.org",
                        "applicantName": "A. Applicant",
                    }
                },
            ).raise_for_status()


def admit_all(
    origin: str, token: str, revision: str, applications: Sequence[str], concurrency: int
) -> tuple[float, list[float], list[str]]:
    """Admit one run per application; the start moment, each latency (s) and the run ids."""
    local = threading.local()
    headers = {"Authorization": "Bearer " + token}

    def admit(application: str) -> tuple[float, str]:
        client: httpx.Client | None = getattr(local, "client", None)
        if client is None:
            client = httpx.Client(base_url=origin, headers=headers, timeout=30)
            local.client = client
        body = {"workflow": WORKFLOW, "revision": revision, "input": {"applicationId": application}}
        began = time.perf_counter()
        answer = client.post("/v1/runs", json=body, headers={"Idempotency-Key": uuid.uuid4().hex})
        latency = time.perf_counter() - began
        if answer.status_code != 201:
            raise BenchError(f"admission answered {answer.status_code}: {answer.text[:500]}")
        run_id: str = answer.json()["runId"]
        return latency, run_id

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        started = time.perf_counter()
        answers = list(pool.map(admit, applications))
    return started, [latency for latency, _ in answers], [run_id for _, run_id in answers]


def wait_finished(url: str, namespace: str, count: int, timeout: float) -> float:
    """Poll the runs table until `count` runs are settled; the moment it was seen, or fail."""
    deadline = time.monotonic() + timeout
    query = f'SELECT status, count(*) FROM "{namespace}".runs GROUP BY status'
    with psycopg.connect(url, autocommit=True) as connection:
        while True:
            counts = {str(status): int(n) for status, n in connection.execute(query).fetchall()}
            seen = time.perf_counter()
            if sum(n for status, n in counts.items() if status in SETTLED) >= count:
                if counts.get("finished", 0) != count:
                    raise BenchError(f"runs settled other than finished: {counts}")
                return seen
            if time.monotonic() > deadline:
                raise BenchError(f"timed out after {timeout:.0f} s; runs by status: {counts}")
            time.sleep(0.02)


def one_at_a_time(
    origin: str,
    token: str,
    revision: str,
    applications: Sequence[str],
    url: str,
    namespace: str,
) -> dict[str, float]:
    """Admit a run, wait until the store shows it finished, then the next: the latency of a
    lone run from admission to `finished` (what a poll interval adds shows up here)."""
    query = f'SELECT status FROM "{namespace}".runs WHERE run_id = %s'
    latencies: list[float] = []
    headers = {"Authorization": "Bearer " + token}
    with (
        httpx.Client(base_url=origin, headers=headers, timeout=30) as client,
        psycopg.connect(url, autocommit=True) as connection,
    ):
        for application in applications:
            body = {
                "workflow": WORKFLOW,
                "revision": revision,
                "input": {"applicationId": application},
            }
            began = time.perf_counter()
            answer = client.post(
                "/v1/runs", json=body, headers={"Idempotency-Key": uuid.uuid4().hex}
            )
            if answer.status_code != 201:
                raise BenchError(f"admission answered {answer.status_code}: {answer.text[:500]}")
            run_id = answer.json()["runId"]
            deadline = time.monotonic() + 30
            while True:
                row = connection.execute(query, (run_id,)).fetchone()
                if row is not None and row[0] in SETTLED:
                    if row[0] != "finished":
                        raise BenchError(f"a run settled as {row[0]}")
                    break
                if time.monotonic() > deadline:
                    raise BenchError("a run did not finish within 30 s")
                time.sleep(0.002)
            latencies.append(time.perf_counter() - began)
    total = sum(latencies)
    return {
        "runs_per_second": len(latencies) / total,
        "p50": statistics.median(latencies),
        "p99": percentile(latencies, 0.99),
    }


def percentile(samples: Sequence[float], fraction: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))
    return ordered[index]


def bench(admin_url: str, arguments: argparse.Namespace) -> dict[str, float]:
    name = f"coordinator_bench_{secrets.token_hex(6)}"
    role = f"coordinator_bench_rt_{secrets.token_hex(5)}"
    try:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=3) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as error:
        raise BenchError(f"PostgreSQL is unavailable at {admin_url}: {error}") from error
    url = with_database(admin_url, name)
    figures: dict[str, float] = {}
    try:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=3) as admin:
            admin.execute(f'CREATE ROLE "{role}" LOGIN')
        with tempfile.TemporaryDirectory(prefix="bench-service-") as scratch:
            directory = Path(scratch)
            processes = Processes(directory)
            try:
                figures = run_service(directory, processes, url, role, arguments)
            except BenchError:
                for log in ("serve", "worker-0", "sandbox"):
                    tail = processes.log(log, tail=1500)
                    if tail:
                        sys.stderr.write(f"--- {log} (tail) ---\n{tail}\n")
                raise
            finally:
                processes.stop_all()
        figures["commits"] = postgres_commits_per_second(url, COMMIT_ROWS)
    finally:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=3) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.execute(f'DROP ROLE IF EXISTS "{role}"')
    return figures


def run_service(
    directory: Path, processes: Processes, url: str, role: str, arguments: argparse.Namespace
) -> dict[str, float]:
    env = dict(os.environ)
    env["BENCH_RUNTIME_URL"] = with_database(url, url.rpartition("/")[2], user=role)
    env["BENCH_MIGRATION_URL"] = url
    root = directory / "project"
    write_project(root, env)
    port = free_port()
    origin = f"http://127.0.0.1:{port}"
    state = root / ".coordinator" / "sandbox"
    endpoints = start_sandbox(processes, state, origin)
    namespace = f"coordinator_bench_{secrets.token_hex(4)}"
    revision = write_runtime(
        root,
        env,
        endpoints,
        namespace=namespace,
        role=role,
        port=port,
        concurrency=arguments.worker_concurrency,
        poll_ms=arguments.poll_ms,
    )
    runtime = str(root / "runtime.yaml")
    ctl(env, "--runtime-config", runtime, "migrate")
    ctl(env, "--runtime-config", runtime, "apply", "--reference", "BENCH-1")

    applications = [str(uuid.uuid4()) for _ in range(arguments.runs)]
    seed(endpoints, applications)
    serve = processes.start(
        "serve",
        ["-m", "coordinator_api.serve", "serve", "--runtime-config", runtime],
        env=env,
    )
    for index in range(arguments.workers):
        processes.start(
            f"worker-{index}",
            ["-m", "coordinator_api.serve", "worker", "--runtime-config", runtime],
            env=env,
        )

    def healthy() -> bool:
        if serve.poll() is not None:
            raise BenchError("coordinator serve exited: " + processes.log("serve"))
        try:
            return httpx.get(origin + "/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(healthy, READY_TIMEOUT, "coordinator serve to answer /health", 0.2)
    token = run_tool(
        ["-m", "coordinator_sandbox", "caller-token", "--state-dir", str(state),
         "--expires-in", "3600"]
    ).strip()  # fmt: skip

    if arguments.one_at_a_time:
        return one_at_a_time(origin, token, revision, applications, url, namespace)
    started, latencies, run_ids = admit_all(
        origin, token, revision, applications, arguments.concurrency
    )
    if len(set(run_ids)) != arguments.runs:
        raise BenchError("admissions answered fewer distinct runs than were admitted")
    finished = wait_finished(url, namespace, arguments.runs, arguments.timeout)
    # Spot-check through the API that the store's view is the service's.
    answer = httpx.get(
        f"{origin}/v1/runs/{run_ids[-1]}",
        headers={"Authorization": "Bearer " + token},
        timeout=10,
    )
    answer.raise_for_status()
    if answer.json()["status"] != "finished":
        raise BenchError(f"the API reports the last run as {answer.json()['status']}")
    return {
        "runs_per_second": arguments.runs / (finished - started),
        "p50": statistics.median(latencies),
        "p99": percentile(latencies, 0.99),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=200, help="runs to admit (default 200)")
    parser.add_argument("--concurrency", type=int, default=8, help="admissions in flight")
    parser.add_argument("--workers", type=int, default=1, help="extra `coordinator worker`s")
    parser.add_argument(
        "--worker-concurrency", type=int, default=4, help="deployment.worker.concurrency"
    )
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to finish all runs")
    parser.add_argument(
        "--poll-ms", type=int, default=20, help="deployment.worker.pollMilliseconds (default 20)"
    )
    parser.add_argument(
        "--one-at-a-time",
        action="store_true",
        help="admit each run only after the previous one finished; p50/p99 are then "
        "admission -> finished",
    )
    arguments = parser.parse_args(argv)
    if arguments.runs < 1:
        parser.error("--runs must be at least 1")
    admin_url = os.environ.get(ADMIN_URL_VARIABLE, DEFAULT_ADMIN_URL)
    try:
        figures = bench(admin_url, arguments)
    except BenchError as error:
        print(f"bench_service: {error}", file=sys.stderr)
        return 1
    runs_per_second, commits = figures["runs_per_second"], figures["commits"]
    print(f"service.runs {arguments.runs}")
    print(f"service.finished_runs_per_second {runs_per_second:.1f}")
    latency = "finished" if arguments.one_at_a_time else "admission"
    print(f"service.{latency}_p50_ms {figures['p50'] * 1000:.1f}")
    print(f"service.{latency}_p99_ms {figures['p99'] * 1000:.1f}")
    print(f"service.postgres_commits_per_second {commits:.0f}")
    print(f"service.ratio_runs_to_commits {runs_per_second / commits:.4f}")
    print(
        "# one run costs several commits (admission; each step's claim, freeze, mark; the "
        "finish), so the ratio sits well below 1 even with no overhead"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
