"""Benchmark: many runs parked in a wait, on PostgreSQL (issue 9, item 8).

Writes a small project with scenarios of its own into a temporary directory, checks it
(`coordinatorctl check`, which runs them), packages, migrates and applies it on a fresh
PostgreSQL database, starts the sandbox products (identity, BReg, Casework) and `coordinator
serve` (with `--worker`, one `coordinator worker` too). The workflow starts with a `choose` on the input's `kind`:

* `later` (the wait-until variant): `wait-until` the input's `wakeAt`, then read a BReg record
  (`breg.read-record/v1`), then finish;
* `review` (the wait-for variant): submit a Casework review request
  (`casework.submit-review-request/v1`), then `wait-for` its result (timeout 7 days; the
  deployment's observation floor is a day, so the wait is observed once a day), then finish;
  on a timeout or a cancel the request is withdrawn (`casework.withdraw-review-request/v1`)
  before the run finishes, as the checker asks of a wait on an open mutation (no run of the
  benchmark takes those routes).

Then:

0. measures the CPU of every process while the store is still empty, over
   `--idle-empty-seconds` (as in 3 below);
1. parks `--runs` runs (`--wait-for` of them the review variant, spread evenly; the others
   wait a day) by admitting them over HTTP, eight requests in flight, with a caller token
   minted by the sandbox; reports the admission rate overall, per tenth, and of the first
   vs the last tenth, then waits until every run is parked (its current record `pending`: a
   wait-until with its instant computed, or the wait-for);
2. `VACUUM (ANALYZE)` of the namespace's tables (what autovacuum would do after such a load;
   so the idle window measures the parked steady state and the plans below use statistics);
3. idle: with all of them parked, the CPU of serve (+ worker), of the sandbox and of the whole
   PostgreSQL server over `--idle-seconds`, as % of one core;
4. store size per parked run: `pg_total_relation_size` (heap, indexes, TOAST) of every table
   of the namespace, summed, over the number of runs;
5. `EXPLAIN (ANALYZE, BUFFERS)` of the store's own statements, compiled with SQLAlchemy's
   PostgreSQL dialect: the claim (`_DUE`) and the two sweeps (`_TAKE_LAPSED`,
   `_TOUCH_OVERDUE`), each executed three times in a transaction that is rolled back, on a
   connection whose `search_path` is the namespace; the plan, its index use and the median
   execution time;
6. fire lag: admits `--due` more runs of the wait-until variant whose `wakeAt` is one instant
   T far enough ahead to admit them all, seeds their BReg records, and once they are parked
   waits past T; the lag of each is its wait-until record's `finished_at` − T (the record
   leaving `pending`: the claim that delivers it), and "all done" is the last run's
   `completed_at` − T.

Prints a readable summary, then plain `parked.<name> value` lines. Loopback only, every wait
bounded; every process started is stopped and the database and role dropped whatever happens
(SIGINT, SIGTERM). PostgreSQL is the server named by `COORDINATOR_TEST_POSTGRES_URL` (default
`postgresql://root@127.0.0.1:5432/root`).

Run: `nox -s bench -- parked [--runs N] [--wait-for M] [--due D] [--idle-seconds S]
[--worker]`, or `python scripts/bench_parked.py …`; `--smoke` parks 20 runs and fires 10 (CI:
`nox -s bench_smoke`), so it proves the bench runs and means nothing.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import re
import secrets
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import psycopg
from bench_service import (
    ADMIN_URL_VARIABLE,
    DEFAULT_ADMIN_URL,
    READY_TIMEOUT,
    TLS,
    BenchError,
    check_project,
    ctl,
    percentile,
    postgres_cpu_seconds,
    seed,
    write_project,
    write_runtime,
)
from bench_service import cpu_seconds as process_cpu_seconds
from sqlalchemy.dialects import postgresql

from coordinator_core.shell.store.writes import hot_statements
from coordinator_sandbox.testing import (
    KitFailure,
    Processes,
    Sandbox,
    ScratchPostgres,
    caller_token,
    database_url,
    free_port,
    wait_for,
)

WORKFLOW = "bench-parked"
CONCURRENCY = 8  # admissions in flight
TOKEN_REFRESH_SECONDS = 2400.0  # caller tokens live at most an hour (coordinator_api.access)
PARK_AHEAD = timedelta(days=1)
EXPLAIN_REPEATS = 3
FIRE_EXPLAIN_AFTER = 0.3  # seconds after T
# The sizes by default, and of a smoke run (`--smoke`, CI: it proves the bench runs).
DEFAULTS = {"runs": 100_000, "due": 1000, "due_margin": 0.0, "idle_seconds": 60.0,
            "idle_empty_seconds": 30.0}  # fmt: skip
SMOKE = {"runs": 20, "due": 10, "due_margin": 8.0, "idle_seconds": 2.0,
         "idle_empty_seconds": 1.0}  # fmt: skip

WORKFLOW_YAML = """\
apiVersion: id.registrystack.org/formats/coordinator/project/v1alpha1
kind: CoordinatorProject
project:
  id: bench-parked
  version: "1"
  title: Parked-runs benchmark
input:
  type: object
  additionalProperties: false
  required: [applicationId, kind]
  properties:
    applicationId:
      type: string
      format: uuid
    kind:
      type: string
      enum: [later, review]
    wakeAt:
      type: string
      format: date-time
operations:
  application-record:
    operation: breg.read-record/v1
    connection: applications
  review-request:
    operation: casework.submit-review-request/v1
    connection: reviews
  review-withdrawal:
    operation: casework.withdraw-review-request/v1
    connection: reviews
functionsFile: functions.rhai
deadlineSeconds: 2592000
start: route
steps:
  route:
    type: choose
    choose:
      function: route
      arguments:
        - type: input
    cases:
      later: wait
      review: request-review
  wait:
    type: wait-until
    waitUntil:
      function: wake_at
      arguments:
        - type: input
    next: read-application
  read-application:
    type: call
    operation: application-record
    input:
      function: read_request
      arguments:
        - type: input
    next: read
  read:
    type: finish
    outcome: read
  request-review:
    type: call
    operation: review-request
    input:
      function: review_request
      arguments:
        - type: input
    next: await-review
  await-review:
    type: wait-for
    call: request-review
    completion: result
    timeoutSeconds: 604800
    next: reviewed
    onTimeout: withdraw-after-timeout
    onCancel: withdraw-after-cancel
  reviewed:
    type: finish
    outcome: reviewed
  withdraw-after-timeout:
    type: call
    operation: review-withdrawal
    input:
      function: withdraw_request
      arguments:
        - type: step
          step: request-review
        - type: literal
          value: timeout
    next: review-timed-out
  review-timed-out:
    type: finish
    outcome: review-timed-out
  withdraw-after-cancel:
    type: call
    operation: review-withdrawal
    input:
      function: withdraw_request
      arguments:
        - type: step
          step: request-review
        - type: literal
          value: cancelled
    next: review-withdrawn
  review-withdrawn:
    type: finish
    outcome: review-withdrawn
outcomes:
  read:
    type: "null"
  reviewed:
    type: "null"
  review-timed-out:
    type: "null"
  review-withdrawn:
    type: "null"
"""

FUNCTIONS_RHAI = """\
fn route(input) {
    input.kind
}

fn wake_at(input) {
    input.wakeAt
}

fn read_request(input) {
    #{ collection: "applications", recordId: input.applicationId }
}

fn review_request(input) {
    #{
        kind: "application-review",
        subject: #{
            source: "breg:applications",
            type: "application",
            id: input.applicationId,
            version: "1",
            digest: "sha256:0000000000000000000000000000000000000000000000000000000000000000"
        },
        requesterReference: "bench-parked:" + input.applicationId,
        context: #{ strategy: "submitted", snapshot: #{ applicationId: input.applicationId } }
    }
}

fn withdraw_request(requested, reason) {
    #{ requestId: requested.requestId, subject: requested.subject, reason: reason }
}
"""

# The project's own cases (`coordinatorctl init` writes its template's, whose steps this
# workflow does not have); `coordinatorctl check` runs them before anything is measured.
SCENARIOS_YAML = """\
apiVersion: id.registrystack.org/formats/coordinator/scenarios/v1alpha1
kind: CoordinatorScenarios
cases:
  - id: woken-a-day-later
    admittedAt: "2026-03-02T09:00:00Z"
    input:
      applicationId: a8d12546-b2ca-46ac-b12b-06c199041bb2
      kind: later
      wakeAt: "2026-03-03T09:00:00.000Z"
    replies:
      read-application:
        - type: success
          value:
            data:
              recordIdentifier: a8d12546-b2ca-46ac-b12b-06c199041bb2
              revisionIdentifier: r-1
              revisionDigest: "sha256:8577c2e57cac170d9941cf46a3f91b4fd737b2142d11e6a052d89c266bf084de"
              domainData: {applicantName: A. Applicant}
    expect:
      status: finished
      path: [route, wait, read-application, read]
      outcome: {type: named, value: read}
      output: null
      effects: []
      workflowElapsedSeconds: 86400
  - id: reviewed
    admittedAt: "2026-03-02T09:00:00Z"
    input:
      applicationId: a8d12546-b2ca-46ac-b12b-06c199041bb2
      kind: review
    replies:
      request-review:
        - type: success
          value:
            requestId: feee46df-d0fd-4064-8630-f1cc2d973a2e
            subject:
              source: "breg:applications"
              type: application
              id: a8d12546-b2ca-46ac-b12b-06c199041bb2
              version: "1"
              digest: "sha256:0000000000000000000000000000000000000000000000000000000000000000"
            policy:
              id: application-review
              version: "3"
              digest: "sha256:823412d1eacb67956220e532959f0104603057c88704863ca38e7cd188fda812"
            submissionDigest: "sha256:293f1d2ee206a7cbebe633764a26ea455bd39f494a774a7289f8663da31916a2"
    observations:
      await-review:
        - type: pending
        - type: complete
          value:
            resultId: 7f9032bd-8202-4636-ae7c-c1e1ef32e6ab
            requestId: feee46df-d0fd-4064-8630-f1cc2d973a2e
            subject:
              source: "breg:applications"
              type: application
              id: a8d12546-b2ca-46ac-b12b-06c199041bb2
              version: "1"
              digest: "sha256:0000000000000000000000000000000000000000000000000000000000000000"
            policy:
              id: application-review
              version: "3"
              digest: "sha256:823412d1eacb67956220e532959f0104603057c88704863ca38e7cd188fda812"
            submissionDigest: "sha256:293f1d2ee206a7cbebe633764a26ea455bd39f494a774a7289f8663da31916a2"
            status: approved
            completedAt: "2026-03-02T09:25:00Z"
            availableUntil: "2026-06-02T09:25:00Z"
    expect:
      status: finished
      path: [route, request-review, await-review, reviewed]
      outcome: {type: named, value: reviewed}
      output: null
      effects:
        - {step: request-review, state: accepted}
"""

# Added to the runtime file that `coordinatorctl init` writes (before packaging).
REVIEWS_CONNECTION = """\
  reviews:
    product: casework
    baseUrl: {base_url}
    authorization:
      tokenEndpoint: {token_endpoint}
      clientId: coordinator-reviews
      signingKeyRef: secret:file/reviews-client.jwk
      resource: urn:registrystack:casework
      scopes: [casework:reviews:request]
    reviewCompletions:
      tokenRef: secret:file/casework-completions-token
"""
FLOOR_SECONDS = 86400
OBSERVATION_BLOCK = f"observation:\n  minimumIntervalSeconds: {FLOOR_SECONDS}\n"

# The current record of every run, by the run's status and the record's type and state.
SHAPE_SQL = """
SELECT r.status, s.type, s.state, s.wait_until IS NOT NULL, r.failure_code || coalesce(' ' || s.detail, ''), count(*)
FROM runs r JOIN steps s ON s.run_id = r.run_id AND s.step = r.current_step
GROUP BY 1, 2, 3, 4, 5
"""
FIRED_SQL = """
SELECT s.finished_at, r.completed_at, r.status
FROM steps s JOIN runs r ON r.run_id = s.run_id
WHERE s.step = 'wait' AND s.run_id = ANY(%s::uuid[])
"""
SIZE_SQL = """
SELECT c.relname, pg_total_relation_size(c.oid)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'm')
ORDER BY 2 DESC
"""
# Every relation of the namespace on its own: each table's heap, its TOAST table (with the
# TOAST index) and each index, so the size per run can be traced to what takes it.
RELATIONS_SQL = """
SELECT c.relname, 'heap', pg_relation_size(c.oid),
       coalesce(pg_total_relation_size(NULLIF(c.reltoastrelid, 0)), 0), c.reltuples
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %(namespace)s AND c.relkind = 'r'
UNION ALL
SELECT i.relname, t.relname, pg_relation_size(i.oid), 0, i.reltuples
FROM pg_index x
JOIN pg_class i ON i.oid = x.indexrelid
JOIN pg_class t ON t.oid = x.indrelid
JOIN pg_namespace n ON n.oid = t.relnamespace
WHERE n.nspname = %(namespace)s
ORDER BY 3 DESC
"""
_EXECUTION = re.compile(r"Execution Time: ([0-9.]+) ms")
_PLANNING = re.compile(r"Planning Time: ([0-9.]+) ms")
_SCAN = re.compile(r"((?:Parallel )?(?:Index Only Scan|Index Scan|Bitmap Index Scan|Seq Scan)"
                   r"(?: Backward)?(?: using \S+)? on \S+)")  # fmt: skip


def _truncated(moment: datetime) -> datetime:
    """`moment` to whole milliseconds (the resolution the store keeps)."""
    return moment.replace(microsecond=moment.microsecond - moment.microsecond % 1000)


def instant(moment: datetime) -> str:
    """RFC 3339 with milliseconds and `Z`, what the wait-until mapping returns."""
    return (
        moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    )


class Token:
    """The caller token, minted again before its hour is up (admissions can take longer)."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.lock = threading.Lock()
        self.value = ""
        self.minted = -math.inf

    def current(self) -> str:
        with self.lock:
            if time.monotonic() - self.minted > TOKEN_REFRESH_SECONDS:
                self.value = caller_token(self.state)
                self.minted = time.monotonic()
            return self.value


@dataclass
class Admitted:
    """One batch of admissions: run ids and the moment each admission answered."""

    run_ids: list[str]
    answered: list[float]  # seconds since the batch began, sorted
    elapsed: float
    cpu: dict[str, float]

    @property
    def rate(self) -> float:
        return len(self.run_ids) / self.elapsed

    def tenth_rates(self) -> list[float]:
        """Admissions per second within each tenth of the batch (by count)."""
        count = len(self.answered)
        bounds = [round(count * index / 10) for index in range(11)]
        rates = []
        for low, high in itertools.pairwise(bounds):
            if high <= low:
                continue
            began = self.answered[low - 1] if low > 0 else 0.0
            span = self.answered[high - 1] - began
            rates.append((high - low) / span if span > 0 else float("nan"))
        return rates


@dataclass
class Parked:
    """Everything the benchmark shares."""

    arguments: argparse.Namespace
    admin_url: str
    processes: Processes
    url: str = ""
    database: str = ""
    namespace: str = ""
    env: dict[str, str] = field(default_factory=dict)
    runtime: str = ""
    revision: str = ""
    origin: str = ""
    sandbox: Sandbox | None = None
    token: Token | None = None
    pids: dict[str, int] = field(default_factory=dict)
    figures: dict[str, float] = field(default_factory=dict)
    report: list[str] = field(default_factory=list)
    autovacuum: str = ""

    def say(self, line: str = "") -> None:
        self.report.append(line)
        print(line, file=sys.stderr, flush=True)

    def connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(
            self.url,
            autocommit=True,
            connect_timeout=5,
            options=f"-c search_path={self.namespace},pg_catalog",
        )

    def load(self, moment: str) -> str:
        """The 1-minute load average now, recorded as `load.<moment>` and said."""
        value = os.getloadavg()[0]
        self.figures[f"load.{moment}"] = value
        return f"1-minute load average {value:.2f}"

    def cpu(self) -> dict[str, float]:
        figures = {name: process_cpu_seconds(pid) for name, pid in self.pids.items()}
        figures["postgres"] = postgres_cpu_seconds()
        return figures

    # -- set-up ----------------------------------------------------------------------------

    def prepare(self, directory: Path, role: str) -> None:
        env = dict(os.environ)
        env["BENCH_RUNTIME_URL"] = database_url(self.url, self.database, user=role)
        env["BENCH_MIGRATION_URL"] = self.url
        self.env = env
        root = directory / "project"
        write_project(root, env, WORKFLOW_YAML, FUNCTIONS_RHAI, SCENARIOS_YAML)
        port = free_port()
        self.origin = f"http://127.0.0.1:{port}"
        state = root / ".coordinator" / "sandbox"
        self.sandbox = sandbox = Sandbox.start(
            self.processes,
            state,
            services=("identity", "breg", "casework", "messaging"),
            coordinator_url=self.origin,
            timeout=READY_TIMEOUT,
        )
        self.pids["sandbox"] = sandbox.process.pid
        runtime = root / "runtime.yaml"
        text = runtime.read_text()
        text = text.replace(
            "connections:\n",
            "connections:\n"
            + REVIEWS_CONNECTION.format(
                base_url=sandbox.url("casework"),
                token_endpoint=sandbox.url("tokenEndpoint"),
            ),
        )
        runtime.write_text(text)
        self.namespace = f"coordinator_bench_{secrets.token_hex(4)}"
        self.revision = write_runtime(
            root,
            env,
            sandbox,
            namespace=self.namespace,
            role=role,
            port=port,
            concurrency=self.arguments.worker_concurrency,
            poll_ms=self.arguments.poll_ms,
            workflow=WORKFLOW,
        )
        # The observation floor goes in after write_runtime, which rewrites what precedes
        # `connections:`.
        text = runtime.read_text()
        if text.count("\ndeployment:\n") != 1:
            raise BenchError("the runtime file has no one deployment block")
        runtime.write_text(
            text.replace("\ndeployment:\n", "\n" + OBSERVATION_BLOCK + "deployment:\n")
        )
        self.runtime = str(runtime)
        check_project(env, root, self.runtime, self.revision)
        ctl(env, "--runtime-config", self.runtime, "migrate")
        ctl(env, "--runtime-config", self.runtime, "apply", "--reference", "BENCH-PARKED-1")
        self.token = Token(state)
        self.token.current()
        with self.connect() as connection:
            row = connection.execute("SHOW autovacuum").fetchone()
        # Without autovacuum nothing analyzes the store's tables while they fill, so the
        # planner keeps the estimates of near-empty tables until the VACUUM (ANALYZE) below.
        self.autovacuum = str(row[0]) if row else "?"

    def start_service(self) -> None:
        started = {
            "serve": self.processes.start(
                "serve",
                ["-m", "coordinator_api.serve", "serve", "--runtime-config", self.runtime],
                env=self.env,
            )
        }
        if self.arguments.worker:
            started["worker"] = self.processes.start(
                "worker",
                ["-m", "coordinator_api.serve", "worker", "--runtime-config", self.runtime],
                env=self.env,
            )

        def healthy() -> bool:
            for name, process in started.items():
                if process.poll() is not None:
                    raise BenchError(f"{name} exited: " + self.processes.log(name, tail=4000))
            try:
                return httpx.get(self.origin + "/health", timeout=1, verify=TLS).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(healthy, READY_TIMEOUT, "coordinator serve to answer /health", 0.05)
        self.pids.update({name: process.pid for name, process in started.items()})

    def check_alive(self) -> None:
        for process in self.processes.started:
            if process.poll() is not None:
                raise BenchError(f"a process exited {process.returncode}: {process.args!r}")

    # -- admissions ------------------------------------------------------------------------

    def admit(self, inputs: Sequence[dict[str, str]], timeout: float) -> Admitted:
        """Admit every input, `CONCURRENCY` requests in flight, one client per thread."""
        assert self.token is not None
        token = self.token
        local = threading.local()
        lock = threading.Lock()
        clients: list[httpx.Client] = []
        run_ids: list[str] = []
        answered: list[float] = []
        deadline = time.monotonic() + timeout
        failed = threading.Event()

        def one(run_input: dict[str, str]) -> None:
            if failed.is_set():
                return
            if time.monotonic() > deadline:
                failed.set()
                raise BenchError(f"admissions took longer than {timeout:.0f} s")
            client: httpx.Client | None = getattr(local, "client", None)
            if client is None:
                client = httpx.Client(base_url=self.origin, timeout=30, verify=TLS)
                local.client = client
                with lock:
                    clients.append(client)
            body = {"workflow": WORKFLOW, "revision": self.revision, "input": run_input}
            answer = client.post(
                "/v1/runs",
                json=body,
                headers={
                    "Authorization": "Bearer " + token.current(),
                    "Idempotency-Key": uuid.uuid4().hex,
                },
            )
            if answer.status_code != 201:
                failed.set()
                raise BenchError(f"admission answered {answer.status_code}: {answer.text[:500]}")
            moment = time.perf_counter() - began
            with lock:
                run_ids.append(str(answer.json()["runId"]))
                answered.append(moment)

        cpu_before = self.cpu()
        began = time.perf_counter()
        pool = ThreadPoolExecutor(max_workers=CONCURRENCY)
        try:
            futures = [pool.submit(one, run_input) for run_input in inputs]
            for future in futures:
                future.result()
        except BaseException:  # a refusal, a timeout, SIGINT: drop what is still queued
            failed.set()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        finally:
            pool.shutdown(wait=True)
            for client in clients:
                client.close()
        elapsed = time.perf_counter() - began
        cpu_after = self.cpu()
        cpu = {name: cpu_after[name] - cpu_before[name] for name in cpu_before}
        if len(set(run_ids)) != len(inputs):
            raise BenchError("two admissions answered the same run")
        return Admitted(run_ids, sorted(answered), elapsed, cpu)

    def shape(self) -> dict[tuple[str, str, str, bool, str | None], int]:
        with self.connect() as connection:
            rows = connection.execute(SHAPE_SQL).fetchall()
        return {(str(a), str(b), str(c), bool(d), e): int(n) for a, b, c, d, e, n in rows}

    def wait_parked(self, expected: int, timeout: float) -> float:
        """Wait until `expected` runs are parked; fail at once on a run in any other state."""
        began = time.monotonic()

        def parked() -> bool:
            self.check_alive()
            return self.parked_count() >= expected

        wait_for(parked, timeout, f"{expected} runs to be parked", 1.0)
        return time.monotonic() - began

    def check_observation_floor(self) -> None:
        """The wait-for runs are observed once a day (the deployment's floor): a shorter
        interval would make the idle window observe them, which is work, not idling."""
        with self.connect() as connection:
            row = connection.execute(
                "SELECT count(*) FROM steps WHERE type = 'wait-for' AND state = 'pending'"
                " AND interval_seconds < %s",
                (FLOOR_SECONDS,),
            ).fetchone()
        if row is None or int(row[0]) != 0:
            raise BenchError("wait-for records are observed more often than the floor")

    def parked_count(self) -> int:
        """The runs whose current record is a pending wait-until with its instant computed or a
        pending wait-for; fails on a run that settled."""
        shape = self.shape()
        settled = {key: n for key, n in shape.items() if key[0] != "running"}
        if settled:
            raise BenchError(f"runs left the wait: {settled}")
        return sum(
            n
            for (_, kind, state, has_instant, _), n in shape.items()
            if state == "pending" and (kind == "wait-for" or (kind == "wait-until" and has_instant))
        )

    def analyzer(self, every: float) -> Callable[[], int]:
        """With `every` > 0, ANALYZE the runs and steps tables every `every` seconds (what
        autovacuum would do on a server that runs it) until the answered `stop` is called; it
        answers how many times it ran."""
        stopped = threading.Event()
        count = [0]

        def loop() -> None:
            with self.connect() as connection:
                while not stopped.wait(every):
                    connection.execute("ANALYZE runs")
                    connection.execute("ANALYZE steps")
                    count[0] += 1

        thread = threading.Thread(target=loop, daemon=True)
        if every > 0:
            thread.start()

        def stop() -> int:
            stopped.set()
            if thread.is_alive():
                thread.join(60)
            return count[0]

        return stop

    # -- the measurements ------------------------------------------------------------------

    def park(self) -> None:
        arguments = self.arguments
        runs, reviews = arguments.runs, arguments.wait_for
        wake = instant(datetime.now(UTC) + PARK_AHEAD)
        every = runs / reviews if reviews else math.inf
        review_at = {min(runs - 1, int(index * every)) for index in range(reviews)}
        inputs = [
            {"applicationId": str(uuid.uuid4()), "kind": "review"}
            if index in review_at
            else {"applicationId": str(uuid.uuid4()), "kind": "later", "wakeAt": wake}
            for index in range(runs)
        ]
        self.say(f"admitting {runs} runs ({len(review_at)} wait-for), {CONCURRENCY} in flight …")
        stop_analyzer = self.analyzer(arguments.analyze_every)
        try:
            batch = self.admit(inputs, arguments.timeout)
            behind = runs - self.parked_count()
            # The claim as the service plans it now: without --analyze-every (and autovacuum
            # off) the statistics are those of the empty tables.
            with self.connect() as connection:
                self.explain_one(
                    connection, "claim_at_last_admission", hot_statements()["claim"], 1
                )
            settle = self.wait_parked(runs, arguments.timeout)
            self.check_observation_floor()
        finally:
            analyzed = stop_analyzer()
        tenths = batch.tenth_rates()
        first, last = tenths[0], tenths[-1]
        self.figures.update(
            {
                "runs": runs,
                "wait_for_runs": len(review_at),
                "admission_seconds": batch.elapsed,
                "admissions_per_second": batch.rate,
                "admissions_per_second.first_tenth": first,
                "admissions_per_second.last_tenth": last,
                "admission_last_to_first": last / first,
            }
        )
        for name, seconds in batch.cpu.items():
            self.figures[f"admission_cpu_ms_per_run.{name}"] = 1000 * seconds / runs
        self.figures["unparked_at_last_admission"] = behind
        self.figures["parked_after_admissions_seconds"] = settle
        self.say(
            f"admitted in {batch.elapsed:.1f} s: {batch.rate:.1f}/s; per tenth "
            + " ".join(f"{rate:.1f}" for rate in tenths)
            + f"; last/first {last / first:.3f}; at the last admission {behind} runs were not "
            f"parked yet, all were {settle:.1f} s later"
            + (f" (ANALYZE ran {analyzed} times meanwhile)" if arguments.analyze_every else "")
            + f"; {self.load('admissions_end')}"
        )
        self.say(
            "CPU ms per admitted run during admission: "
            + ", ".join(f"{name} {1000 * s / runs:.2f}" for name, s in batch.cpu.items())
        )

    def vacuum(self) -> None:
        began = time.monotonic()
        with self.connect() as connection:
            connection.execute("VACUUM (ANALYZE)")  # the current database; ours alone has rows
        self.say(f"VACUUM (ANALYZE) of the database took {time.monotonic() - began:.1f} s")

    def postgres_processes(self) -> dict[int, str]:
        """The server's processes that serve this database (its sessions, its autovacuum
        workers) and those that serve none (checkpointer, WAL writer, …), by pid."""
        with psycopg.connect(self.admin_url, autocommit=True, connect_timeout=5) as admin:
            rows = admin.execute(
                "SELECT pid, datname IS NULL FROM pg_stat_activity"
                " WHERE datname = %s OR datname IS NULL",
                (self.database,),
            ).fetchall()
        return {int(pid): "postgres_shared" if shared else "postgres_ours" for pid, shared in rows}

    def idle(self, seconds: float | None = None, *, parked: bool = True) -> None:
        """The CPU of every process over `seconds` of idleness, as % of one core: with the
        runs parked (`idle_cpu_percent.*`), or before anything was admitted (`parked=False`,
        `idle_empty_cpu_percent.*`)."""
        seconds = self.arguments.idle_seconds if seconds is None else seconds
        prefix = "idle_cpu_percent" if parked else "idle_empty_cpu_percent"
        time.sleep(2.0)  # the vacuum's own sessions end; the loops fall back to their polls
        backends = self.postgres_processes()
        before = self.cpu()
        backends_before = {pid: process_cpu_seconds(pid) for pid in backends}
        began = time.monotonic()
        time.sleep(seconds)
        elapsed = time.monotonic() - began
        after = self.cpu()
        for pid, kind in backends.items():
            spent = process_cpu_seconds(pid) - backends_before[pid]
            before[kind] = 0.0
            after[kind] = after.get(kind, 0.0) + max(0.0, spent)
        before.setdefault("postgres_ours", 0.0)
        after.setdefault("postgres_ours", 0.0)
        self.check_alive()
        shares = {name: 100 * (after[name] - before[name]) / elapsed for name in before}
        ours = sum(shares[name] for name in ("serve", "worker") if name in shares)
        self.figures[f"{prefix}.ours"] = ours
        # ours and what PostgreSQL spends on this database and on its own background work
        with_server = ours + shares["postgres_ours"] + shares.get("postgres_shared", 0.0)
        self.figures[f"{prefix}.ours_and_postgres"] = with_server
        for name, share in shares.items():
            self.figures[f"{prefix}.{name}"] = share
        what = f"with {self.arguments.runs} parked" if parked else "with an empty store"
        self.say(
            f"idle {elapsed:.0f} s {what}, % of one core: ours {ours:.2f}, "
            f"ours and PostgreSQL's (this database and background) {with_server:.2f} ("
            + ", ".join(f"{name} {share:.2f}" for name, share in shares.items())
            + "; postgres: the whole server, postgres_ours: the sessions and autovacuum workers"
            " of this database, postgres_shared: the server's background processes); "
            + self.load(f"{prefix}_end")
        )

    def size(self) -> None:
        with self.connect() as connection:
            rows = connection.execute(SIZE_SQL, (self.namespace,)).fetchall()
        total = sum(int(size) for _, size in rows)
        per_run = total / self.arguments.runs
        self.figures["store_bytes"] = total
        self.figures["store_bytes_per_parked_run"] = per_run
        self.say(
            f"store: {total / 1e6:.1f} MB in {len(rows)} tables, {per_run:.0f} bytes per parked "
            "run (" + ", ".join(f"{name} {int(size) / 1e6:.1f} MB" for name, size in rows[:6]) + ")"
        )
        with self.connect() as connection:
            relations = connection.execute(RELATIONS_SQL, {"namespace": self.namespace}).fetchall()
        runs = self.arguments.runs
        parts = []
        for name, kind, size, toast, tuples in relations:
            if int(size) + int(toast) < 64 * 1024:
                continue  # the one-row tables and their indexes: a few pages each
            label = f"{name} (heap)" if kind == "heap" else f"{name} (index of {kind})"
            per_run = (int(size) + int(toast)) / runs
            key = f"store_bytes_per_parked_run.{name}" + (".heap" if kind == "heap" else "")
            self.figures[key] = per_run
            parts.append(
                f"{label} {per_run:.0f}"
                + (f" + TOAST {int(toast) / runs:.0f}" if int(toast) else "")
                + f" ({int(tuples)} rows)"
            )
        self.say("    bytes per parked run by relation: " + "; ".join(parts))

    def explain(self) -> None:
        chosen = tuple(hot_statements().items())
        with self.connect() as connection:
            for name, statement in chosen:
                self.explain_one(connection, name, statement, EXPLAIN_REPEATS)

    def explain_one(
        self, connection: psycopg.Connection[Any], name: str, statement: Any, repeats: int
    ) -> None:
        """`EXPLAIN (ANALYZE, BUFFERS)` of one store statement, `repeats` times, each in a
        transaction rolled back: the figures, and the plan of the last in the report."""
        compiled = statement.compile(dialect=postgresql.dialect())  # type: ignore[no-untyped-call]
        times, plan = [], ""
        for _ in range(repeats):
            moment = _truncated(datetime.now(UTC))
            values = {
                "now": moment,
                "expires": moment + timedelta(seconds=15),
                "owner": "bench-parked-explain",
                "token": secrets.token_hex(16),
            }
            parameters = {key: values.get(key, value) for key, value in compiled.params.items()}
            with connection.transaction(force_rollback=True):
                rows = connection.execute(
                    "EXPLAIN (ANALYZE, BUFFERS) " + compiled.string, parameters
                ).fetchall()
            plan = "\n".join(str(row[0]) for row in rows)
            found = _EXECUTION.search(plan)
            if found is None:
                raise BenchError(f"no execution time in the plan of {name}:\n{plan}")
            times.append(float(found.group(1)))
        scans = _SCAN.findall(plan)
        sequential = sum(1 for scan in scans if scan.startswith(("Seq", "Parallel Seq")))
        planning = _PLANNING.search(plan)
        self.figures[f"explain.{name}.execution_ms"] = statistics.median(times)
        if planning is not None:
            self.figures[f"explain.{name}.planning_ms"] = float(planning.group(1))
        self.figures[f"explain.{name}.seq_scans"] = sequential
        self.say(
            f"EXPLAIN (ANALYZE, BUFFERS) {name}: execution "
            + ", ".join(f"{t:.3f}" for t in times)
            + f" ms; scans: {'; '.join(scans) or 'none'}"
        )
        self.say("    " + plan.replace("\n", "\n    "))

    def fire(self) -> None:
        """`--due` runs parked until one instant T; the lag of each wait-until past T."""
        arguments = self.arguments
        count = arguments.due
        rate = self.figures["admissions_per_second"]
        applications = [str(uuid.uuid4()) for _ in range(count)]
        assert self.sandbox is not None
        seed(self.sandbox, applications)  # their BReg reads, once they wake, succeed
        margin = arguments.due_margin or max(30.0, min(600.0, 15.0 + 1.5 * count / rate))
        target = _truncated(datetime.now(UTC) + timedelta(seconds=margin))
        wake = instant(target)
        inputs = [
            {"applicationId": application, "kind": "later", "wakeAt": wake}
            for application in applications
        ]
        self.say(f"admitting {count} runs due at T = now + {margin:.0f} s …")
        batch = self.admit(inputs, margin)
        self.wait_parked(
            arguments.runs + count, max(1.0, (target - datetime.now(UTC)).total_seconds())
        )
        early = (target - datetime.now(UTC)).total_seconds()
        if early <= 0:
            raise BenchError(
                f"the {count} runs were not all parked before T (margin {margin:.0f} s)"
            )
        self.say(f"admitted in {batch.elapsed:.1f} s, all parked {early:.1f} s before T")
        time.sleep(early + FIRE_EXPLAIN_AFTER)
        # The claim once while the due runs are being claimed: the plan the service gets when
        # records are due that the statistics (taken with none due) know nothing of.
        with self.connect() as connection:
            self.explain_one(connection, "claim_during_fire", hot_statements()["claim"], 1)
        deadline = time.monotonic() + arguments.timeout
        while True:
            self.check_alive()
            with self.connect() as connection:
                rows = connection.execute(FIRED_SQL, (batch.run_ids,)).fetchall()
            failed = [status for _, _, status in rows if status not in ("running", "finished")]
            if failed:
                raise BenchError(f"due runs settled as {sorted(set(failed))}")
            if len(rows) == count and all(status == "finished" for _, _, status in rows):
                break
            if time.monotonic() > deadline:
                done = sum(1 for _, _, status in rows if status == "finished")
                raise BenchError(
                    f"only {done} of {count} due runs finished in {arguments.timeout:.0f} s"
                )
            time.sleep(1.0)
        lags = [(fired - target).total_seconds() for fired, _, _ in rows]
        completed = max(done for _, done, _ in rows)
        all_done = (completed - target).total_seconds()
        self.figures.update(
            {
                "due_runs": count,
                "fire_lag_p50_ms": 1000 * statistics.median(lags),
                "fire_lag_p99_ms": 1000 * percentile(lags, 0.99),
                "fire_lag_max_ms": 1000 * max(lags),
                "fire_lag_min_ms": 1000 * min(lags),
                "due_all_finished_seconds": all_done,
            }
        )
        self.say(
            f"fire lag of {count} runs due at one instant: p50 {1000 * statistics.median(lags):.0f} ms, "
            f"p99 {1000 * percentile(lags, 0.99):.0f} ms, max {1000 * max(lags):.0f} ms; "
            f"all {count} finished {all_done:.2f} s after T; {self.load('fire_end')}"
        )


def bench(admin_url: str, arguments: argparse.Namespace) -> Parked:
    with ScratchPostgres(admin_url, "coordinator_bench") as postgres:
        try:
            url, role = postgres.database("parked"), postgres.role()
        except psycopg.Error as error:
            raise BenchError(f"PostgreSQL is unavailable at {admin_url}: {error}") from error
        with tempfile.TemporaryDirectory(prefix="bench-parked-") as scratch:
            directory = Path(scratch)
            processes = Processes(directory)
            state = Parked(
                arguments, admin_url, processes, url=url, database=url.rpartition("/")[2]
            )
            try:
                state.prepare(directory, role)
                state.start_service()
                if arguments.idle_empty_seconds:
                    state.idle(arguments.idle_empty_seconds, parked=False)
                began = time.monotonic()
                state.park()
                state.vacuum()
                state.idle()
                state.size()
                state.explain()
                if arguments.due:
                    state.fire()
                state.figures["measured_seconds"] = time.monotonic() - began
                return state
            except (BenchError, KitFailure):
                for log in ("serve", "worker", "sandbox"):
                    tail = processes.log(log, tail=1500)
                    if tail:
                        sys.stderr.write(f"--- {log} (tail) ---\n{tail}\n")
                raise
            finally:
                processes.stop_all(grace=20)


def plain_lines(figures: Mapping[str, float]) -> list[str]:
    lines = []
    for key, value in figures.items():
        if isinstance(value, float) and math.isnan(value):
            continue
        if float(value).is_integer() and abs(value) >= 1:
            shown = str(int(value))
        elif abs(value) >= 10:
            shown = f"{value:.1f}"
        else:
            shown = f"{value:.4g}"
        lines.append(f"parked.{key} {shown}")
    return lines


def _stop(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # so that every `finally` stops processes and drops the database


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=None, help="runs to park (default 100000)")
    parser.add_argument(
        "--wait-for",
        type=int,
        default=None,
        help="how many of them are the wait-for variant (default: a tenth of --runs)",
    )
    parser.add_argument(
        "--due",
        type=int,
        default=None,
        help="runs falling due at one instant (default 1000; 0: none)",
    )
    parser.add_argument(
        "--due-margin",
        type=float,
        default=None,
        help="seconds from the due batch's first admission to its instant (default: from the "
        "measured admission rate, 30–600)",
    )
    parser.add_argument(
        "--idle-seconds", type=float, default=None, help="the idle window (default 60)"
    )
    parser.add_argument(
        "--idle-empty-seconds",
        type=float,
        default=None,
        help="an idle window with the store still empty, before the admissions (default 30; "
        "0: none)",
    )
    parser.add_argument(
        "--analyze-every",
        type=float,
        default=0.0,
        help="ANALYZE the runs and steps tables every this many seconds while the runs are "
        "being parked, as autovacuum would (default 0: never; left to the server)",
    )
    parser.add_argument(
        "--worker", action="store_true", help="run one `coordinator worker` beside serve"
    )
    parser.add_argument(
        "--poll-ms",
        type=int,
        default=100,
        help="deployment.worker.pollMilliseconds (default 100, the product's default)",
    )
    parser.add_argument(
        "--worker-concurrency",
        type=int,
        default=4,
        help="deployment.worker.concurrency: loops per process (default 4)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=3600.0,
        help="seconds allowed for the admissions, for parking and for the due runs (default 3600)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a smoke run: "
        + ", ".join(f"--{k.replace('_', '-')} {v:g}" for k, v in SMOKE.items())
        + " (what is not given); it proves the bench runs, its figures mean nothing",
    )
    arguments = parser.parse_args(argv)
    for name, default in (SMOKE if arguments.smoke else DEFAULTS).items():
        if getattr(arguments, name) is None:
            setattr(arguments, name, type(default)(default))
    if arguments.wait_for is None:
        arguments.wait_for = arguments.runs // 10
    if arguments.runs < 10 or not 0 <= arguments.wait_for <= arguments.runs:
        parser.error("--runs must be at least 10 and --wait-for between 0 and --runs")
    if arguments.due < 0 or arguments.idle_seconds <= 0:
        parser.error("--due must be at least 0 and --idle-seconds positive")
    admin_url = os.environ.get(ADMIN_URL_VARIABLE, DEFAULT_ADMIN_URL)
    signal.signal(signal.SIGTERM, _stop)
    began = time.monotonic()
    load = os.getloadavg()[0]
    smoke = "; SMOKE RUN: the figures mean nothing" if arguments.smoke else ""
    print(f"# bench_parked: 1-minute load average at the start {load:.2f}{smoke}", flush=True)
    try:
        state = bench(admin_url, arguments)
    except (BenchError, KitFailure) as error:
        print(f"bench_parked: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench_parked: interrupted; processes stopped, database dropped", file=sys.stderr)
        return 130
    state.figures["total_seconds"] = time.monotonic() - began
    print(
        f"# {arguments.runs} parked runs ({arguments.wait_for} wait-for), "
        f"{'serve + 1 worker' if arguments.worker else 'serve'}, worker concurrency "
        f"{arguments.worker_concurrency}, poll {arguments.poll_ms} ms; PostgreSQL autovacuum "
        f"{state.autovacuum}; the whole benchmark took {state.figures['total_seconds']:.0f} s; "
        f"1-minute load average {load:.2f} at the start{smoke}"
    )
    print("\n".join(state.report))
    print("# arguments: " + json.dumps(vars(arguments)))
    print("\n".join(plain_lines(state.figures)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
