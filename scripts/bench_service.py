"""Benchmark: whole runs through `coordinator serve`, side by side with a peer, on PostgreSQL
and on the embedded SQLite store.

Writes a small project into a temporary directory (read a BReg record → choose on a field →
send a Messaging notice → finish; the other case finishes at once) with scenarios of its own,
packages and checks it, migrates and applies it on a fresh PostgreSQL database and on a fresh
SQLite file (the SQLite store `coordinatorctl init` writes into the runtime file), and starts
the sandbox products. Then, in one time window and in rounds, it measures these
configurations:

* `serve`: `coordinator serve` alone (its own worker loops), on PostgreSQL;
* `serve+worker`: `coordinator serve` plus one `coordinator worker` process, on PostgreSQL;
* `dbos`: the peer, DBOS Transact (`scripts/bench_peer/dbos_app.py`, in its own virtual
  environment given by `--peer-python`), doing the same job on its own PostgreSQL system
  database, in one process;
* `dbos-multi`: the same peer as `--peer-processes` processes (default 2, as many as
  `serve+worker` runs) on that one system database, sharing the port;
* `bound`: single-row INSERT+COMMIT on one PostgreSQL connection and on eight, the physical
  bound;
* `serve-sqlite`: `coordinator serve` alone on the embedded SQLite store (one process holds a
  SQLite store, so there is no `serve+worker` on it);
* `dbos-sqlite`: the peer, one process, with a SQLite system database (`sqlite:///<file>`,
  DBOS's own SQLite settings: its default rollback journal; `--peer-sqlite-journal wal` puts
  the file in WAL mode, as ours is, before DBOS opens it);
* `bound-sqlite`: single-row `BEGIN IMMEDIATE`; INSERT; COMMIT on a SQLite file with our
  store's settings (WAL, `synchronous=FULL`, the same busy timeout) on one connection, and on
  eight threads with a connection each.

Each service configuration is measured at concurrency 1 (admit a run, wait until the store
shows it finished, admit the next) and 8 (eight admissions in flight, back to back), or at the
concurrencies `--concurrencies` names. Every
window starts the configuration's processes afresh and stops them at its end, so that
PostgreSQL's statistics of their sessions are flushed (a session reports its counters at
most once a second while busy and within 10 s when idle, and always when it exits): the
PostgreSQL counters of a window span process start to process exit, the CPU figures span the
admissions. The windows of a round (configuration × concurrency) run in the order of the
previous round reversed (`--order alternate`, the default) or shuffled with a printed seed
(`--order shuffle [--seed N]`), so that a drift of the machine's load does not read as a
ratio. Per window it prints the 1-minute load average at its start and end and the
transactions other databases of the PostgreSQL server committed meanwhile, and records:

* finished runs/s; p50/p99 of admission → finished (from the start of the admission request
  to the moment the client's poll of the run's status — our `runs` table, DBOS's
  `workflow_status` — sees it finished);
* CPU ms per finished run of every process (`/proc/<pid>/stat` utime+stime), of the client
  (this process) and of the PostgreSQL server (all its processes, server-wide);
* write transactions per finished run (the advance of the next transaction id,
  `pg_snapshot_xmax(pg_current_snapshot())`, which only transactions that write consume;
  server-wide), WAL flushes per finished run (`pg_stat_wal.wal_sync`, server-wide), the WAL
  written per finished run (kilobytes of `pg_stat_wal.wal_bytes`, server-wide) and
  transactions in all per run (`xact_commit + xact_rollback` of the configuration's database,
  less the client's own status polls).

The SQLite windows have none of the PostgreSQL figures (transaction ids, WAL flushes,
transactions, the server's CPU: printed `—`; the server's CPU then counts among the other
processes'). Their client polls the status the same way as on PostgreSQL, by reading the
store, for both sides alike: it opens the SQLite file read-only (`mode=ro`) and reads our
`runs` row or DBOS's `workflow_status` row, without waiting for a lock (busy timeout 0): a poll
that finds the file locked — DBOS's rollback journal locks readers out while it commits; a
WAL reader, ours, is never locked out — is a "not yet", and the next poll comes at the usual
interval, so both sides are polled at the same pace (the window line counts such polls). The
HTTP status API would not be fair instead: a status GET costs the serving process CPU in the
very window being measured, at hundreds of polls a second, and ours costs more than the
peer's (`scripts/bench_reads.py` measures both). A reader of a WAL file never blocks its writer; in the rollback journal a poll that
holds its shared lock at the instant DBOS commits makes the commit wait (for about 1 ms,
SQLite's first busy back-off), which the poll's length (tens of microseconds every 2 or 5 ms)
makes rare.

Each printed figure is the median over the rounds; the ratios ours/peer and ours/bound are
taken within each round, then their median, each against the peer and the bound on the same
store (`serve-sqlite` against `dbos-sqlite` and `bound-sqlite`). Prints two aligned tables
(speed, cost per run) and plain `name value` lines. Loopback only, bounded in time; every
process started is stopped, every database dropped and every file removed whatever happens.
PostgreSQL is the server named by `COORDINATOR_TEST_POSTGRES_URL` (default
`postgresql://root@127.0.0.1:5432/root`); the SQLite files live in the temporary directory.

Run: `nox -s bench -- service` (which builds the peer's environment), or
`python scripts/bench_service.py --peer-python PATH [--runs N] [--rounds R]
[--configurations serve,dbos,…] [--peer-processes N] [--order alternate|shuffle]
[--peer-sqlite-journal default|wal]`; every configuration runs by default. `--smoke` runs every
configuration once at a few runs (CI: `nox -s bench_smoke`).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import os
import random
import secrets
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import httpx
import psycopg
import yaml

from coordinator_sandbox.testing import (
    KitFailure,
    Policy,
    Processes,
    Sandbox,
    ScratchPostgres,
    caller_token,
    database_url,
    deployment_block,
    free_port,
    point_at_sandbox,
    postgresql_database,
    wait_for,
    write_keys,
)

PYTHON = sys.executable
HERE = Path(__file__).resolve().parent
PEER_APP = HERE / "bench_peer" / "dbos_app.py"
DEFAULT_PEER_PYTHON = HERE.parent / ".nox" / "bench_peer" / "bin" / "python"
ADMIN_URL_VARIABLE = "COORDINATOR_TEST_POSTGRES_URL"
DEFAULT_ADMIN_URL = "postgresql://root@127.0.0.1:5432/root"
WORKFLOW = "bench-service"
READY_TIMEOUT = 60.0
COMMIT_ROWS = 2000
CONCURRENCIES = (1, 8)
CONFIGURATIONS = (
    "serve",
    "serve+worker",
    "dbos",
    "dbos-multi",
    "bound",
    "serve-sqlite",
    "dbos-sqlite",
    "bound-sqlite",
)
OURS = ("serve", "serve+worker", "serve-sqlite")
PEERS = ("dbos", "dbos-multi", "dbos-sqlite")
BOUNDS = ("bound", "bound-sqlite")
SQLITE = ("serve-sqlite", "dbos-sqlite", "bound-sqlite")  # the embedded store's windows
# What ours is compared with on each store: (peer, key of runs/s ratio, key of CPU ratio), and
# the bound.
PEER_RATIOS = {
    "postgresql": (
        ("dbos", "ratio_to_peer", "cpu_ratio_to_peer"),
        ("dbos-multi", "ratio_to_peer_multi", "cpu_ratio_to_peer_multi"),
    ),
    "sqlite": (("dbos-sqlite", "ratio_to_peer", "cpu_ratio_to_peer"),),
}
BOUND_OF = {"postgresql": "bound", "sqlite": "bound-sqlite"}
# --smoke: every configuration once, a few runs (CI runs it so that a broken bench fails).
SMOKE_RUNS = 6
SMOKE_COMMIT_ROWS = 200
WARM_UP_RUNS = 5
MAIN = "serve+worker"
# Our store's SQLite settings (coordinator_core.shell.store.dialect, 07 §14.3), which the
# SQLite bound uses too. The client's read-only polls do not wait for a lock (busy timeout 0):
# a poll that finds the file locked is a "not yet", and the next comes at the usual interval,
# so that the client polls both sides at the same pace (waiting, a poll of DBOS's rollback
# journal lost tens of ms behind each of DBOS's commits; a WAL reader is never locked out).
SQLITE_PRAGMAS = ("PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL")
SQLITE_BUSY_TIMEOUT_MS = 5000
POLL_BUSY_MS = 0
SETTLED = {"finished", "failed", "attention", "expired", "cancelled"}
DBOS_SETTLED = {"SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"}
ONE_POLL_SECONDS = 0.002  # the client's status poll of the one run in flight (concurrency 1)
MANY_POLL_SECONDS = 0.005  # the client's status poll of every run in flight (concurrency 8)
CLK_TCK = os.sysconf("SC_CLK_TCK")
# One TLS context for every client of this script: httpx builds one per client otherwise (it
# loads the CA bundle each time), which would be counted as client CPU of the windows.
TLS = httpx.create_ssl_context(trust_env=False)
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

# The project's own cases (`coordinatorctl init` writes its template's, which name steps this
# workflow does not have); `check` runs them, so the project the windows run is a checked one.
SCENARIOS_YAML = """\
apiVersion: id.registrystack.org/formats/coordinator/scenarios/v1alpha1
kind: CoordinatorScenarios
cases:
  - id: notice-sent
    admittedAt: "2026-03-02T09:00:00Z"
    input:
      applicationId: a8d12546-b2ca-46ac-b12b-06c199041bb2
    replies:
      read-application:
        - type: success
          value:
            data:
              recordIdentifier: a8d12546-b2ca-46ac-b12b-06c199041bb2
              revisionIdentifier: r-1
              revisionDigest: "sha256:8577c2e57cac170d9941cf46a3f91b4fd737b2142d11e6a052d89c266bf084de"
              domainData: {applicantName: A. Applicant, contactEmail: applicant@example.org, followUpAllowed: true}
      notify:
        - type: success
          value:
            id: eabec512-15f8-47ac-a4e6-3880b8b4ae5a
            status: queued
            links:
              self: /v1/messages/eabec512-15f8-47ac-a4e6-3880b8b4ae5a
              cancel: /v1/messages/eabec512-15f8-47ac-a4e6-3880b8b4ae5a/cancel
    expect:
      status: finished
      path: [read-application, permission, notify, accepted]
      outcome: {type: named, value: message-accepted}
      output: {messageId: eabec512-15f8-47ac-a4e6-3880b8b4ae5a}
      effects:
        - {step: notify, state: accepted}
  - id: skipped
    admittedAt: "2026-03-02T09:00:00Z"
    input:
      applicationId: a8d12546-b2ca-46ac-b12b-06c199041bb2
    replies:
      read-application:
        - type: success
          value:
            data:
              recordIdentifier: a8d12546-b2ca-46ac-b12b-06c199041bb2
              revisionIdentifier: r-2
              revisionDigest: "sha256:7ce93ea210eb931ef0ed683f9d6d95f04a248e15861e2d5e093179ead6b0f4e5"
              domainData: {applicantName: A. Applicant, contactEmail: applicant@example.org, followUpAllowed: false}
    expect:
      status: finished
      path: [read-application, permission, skipped]
      outcome: {type: named, value: no-current-permission}
      output: null
      effects: []
"""


class BenchError(Exception):
    """A step of the benchmark failed; the message says which (and carries a log tail)."""


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


def percentile(samples: Sequence[float], fraction: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))
    return ordered[index]


# -- counters: CPU from /proc, PostgreSQL's own ------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (all its threads), in seconds; 0 once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine_cpu_seconds() -> float:
    """CPU time the whole machine spent busy (all cores: user, nice, system, irq, softirq,
    steal in `/proc/stat`), in seconds."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def postgres_cpu_seconds() -> float:
    """CPU of the whole PostgreSQL server: every `postgres` process, plus what the postmaster
    reaped from sessions that ended (cutime + cstime). Server-wide: other users count too."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        if text[text.index("(") + 1 : text.rindex(")")] != "postgres":
            continue
        fields = text[text.rindex(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])
        parent = Path(f"/proc/{fields[1]}/stat")
        try:
            parent_text = parent.read_text()
        except OSError:
            continue
        if parent_text[parent_text.index("(") + 1 : parent_text.rindex(")")] != "postgres":
            total += int(fields[13]) + int(fields[14])  # the postmaster: its reaped children
    return total / CLK_TCK


@dataclass(frozen=True)
class Counters:
    """PostgreSQL's counters at one moment."""

    next_xid: int
    wal_sync: int
    wal_bytes: int
    transactions: int
    other_transactions: dict[str, int]

    def others_since(self, before: Counters) -> dict[str, int]:
        """Transactions each other database committed or rolled back in between, where there
        were any (a database created meanwhile counts from zero; one dropped meanwhile is
        missed)."""
        since = {
            name: count - before.other_transactions.get(name, 0)
            for name, count in self.other_transactions.items()
        }
        return {name: count for name, count in since.items() if count > 0}


def read_counters(admin_url: str, database: str, own: Collection[str] = ()) -> Counters:
    """Read from the admin database, so that reading adds nothing to `database`. The other
    databases' counts leave out `database`, the bench's `own` and the admin database (whose
    transactions are this script's own reads)."""
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as admin:
        row = admin.execute(
            "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint,"
            " (SELECT wal_sync FROM pg_stat_wal),"
            " (SELECT wal_bytes FROM pg_stat_wal)::bigint,"
            " (SELECT coalesce(sum(xact_commit + xact_rollback), 0) FROM pg_stat_database"
            "   WHERE datname = %s)",
            (database,),
        ).fetchone()
        others = admin.execute(
            "SELECT datname, xact_commit + xact_rollback FROM pg_stat_database"
            " WHERE datname IS NOT NULL AND datname <> ALL(%s) AND datname <> current_database()",
            ([database, *own],),
        ).fetchall()
    assert row is not None
    return Counters(
        int(row[0]),
        int(row[1]),
        int(row[2]),
        int(row[3]),
        {str(name): int(n) for name, n in others},
    )


def wait_sessions_gone(admin_url: str, database: str) -> None:
    """Wait until no session is left on `database` (each flushes its statistics on exit)."""
    query = "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()"
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as admin:

        def gone() -> bool:
            row = admin.execute(query, (database,)).fetchone()
            return row is not None and int(row[0]) == 0

        wait_for(gone, 20, f"the sessions on {database} to end", 0.05)


# -- one measured window ---------------------------------------------------------------------


@dataclass
class Sample:
    """One window: one configuration at one concurrency."""

    runs: int
    elapsed: float
    latencies: list[float]
    cpu: dict[str, float]
    # PostgreSQL's counters per window; nan on the SQLite windows, which have none of them
    write_transactions: float = math.nan
    wal_flushes: float = math.nan
    wal_kilobytes: float = math.nan
    transactions: float = math.nan
    other_databases: dict[str, int] = field(default_factory=dict)  # their transactions
    admission_latencies: list[float] = field(default_factory=list)
    load: tuple[float, float] = (math.nan, math.nan)  # 1-minute load average: start, end
    # CPU seconds the machine spent outside the measured processes (the configuration's, the
    # sandbox, the client and the PostgreSQL server) while the runs went: other users, kernel
    other_cpu: float = math.nan
    cpu_span: float = math.nan  # wall-clock seconds between the CPU readings
    executors: dict[str, int] = field(default_factory=dict)  # the peer's runs per process
    # SQLite: the client's polls that found the store locked (SqlitePoller); for the bound, the
    # transactions that found it locked after the busy timeout and were retried
    busy: int = 0

    @property
    def rate(self) -> float:
        return self.runs / self.elapsed

    @property
    def other_cpu_percent(self) -> float:
        """`other_cpu` as % of one core over the span it was measured in (CPU times come in
        10 ms ticks, so a window under a second, the bound's, reads coarsely)."""
        return 100 * self.other_cpu / self.cpu_span

    @property
    def other_transactions(self) -> int:
        """Transactions of the server's other databases during the window."""
        return sum(self.other_databases.values())

    def per_run(self, value: float) -> float:
        return value / self.runs

    def count(self, before: Counters, after: Counters, own_statements: int = 0) -> None:
        """PostgreSQL's counters over the window, less `own_statements` (the client's polls)
        from the database's transactions."""
        self.write_transactions = after.next_xid - before.next_xid
        self.wal_flushes = after.wal_sync - before.wal_sync
        self.wal_kilobytes = (after.wal_bytes - before.wal_bytes) / 1024
        self.transactions = after.transactions - before.transactions - own_statements


class Poller:
    """The client's view of run status: one connection, its statements counted (so that they
    can be taken out of the database's transaction count)."""

    def __init__(
        self, url: str, one: str, many: str, finished: str, settled: set[str], by_executor: str = ""
    ) -> None:
        self.connection = psycopg.connect(url, autocommit=True)
        self.one, self.many, self.by_executor = one, many, by_executor
        self.finished, self.settled = finished, sorted(settled)
        self.statements = 0
        self.busy = 0  # SQLite only: polls that found the file locked

    def status(self, run_id: str) -> str | None:
        self.statements += 1
        row = self.connection.execute(self.one, (run_id,)).fetchone()
        return None if row is None else str(row[0])

    def settled_among(self, run_ids: Sequence[str]) -> list[tuple[str, str]]:
        self.statements += 1
        rows = self.connection.execute(self.many, (list(run_ids), self.settled)).fetchall()
        return [(str(run_id), str(status)) for run_id, status in rows]

    def executors(self, run_ids: Sequence[str]) -> dict[str, int]:
        """The peer's runs by the process (DBOS executor) that ran them; {} for ours."""
        if not self.by_executor:
            return {}
        self.statements += 1
        rows = self.connection.execute(self.by_executor, (list(run_ids),)).fetchall()
        return {str(executor): int(count) for executor, count in sorted(rows)}

    def close(self) -> None:
        self.connection.close()


class SqlitePoller(Poller):
    """The same view of a SQLite store: the file opened read-only (it never writes, never
    creates the file, never checkpoints), waiting POLL_BUSY_MS (none) for a lock; a poll that
    finds the file locked counts as "not yet" and the next one, at the usual interval, reads
    again. `key` turns
    the run id the admission answered into the table's form of it."""

    def __init__(
        self,
        path: Path,
        table: str,
        column: str,
        finished: str,
        settled: set[str],
        key: Callable[[str], str] = str,
    ) -> None:
        self.lite = sqlite3.connect(
            f"file:{path}?mode=ro",
            uri=True,
            timeout=POLL_BUSY_MS / 1000,
            isolation_level=None,
            check_same_thread=False,
        )
        self.table, self.column, self.key = table, column, key
        self.finished, self.settled = finished, sorted(settled)
        self.by_executor = ""
        self.statements = 0
        self.busy = 0  # polls that found the file locked

    def _rows(self, sql: str, parameters: Sequence[str]) -> list[tuple[Any, ...]]:
        self.statements += 1
        try:
            return self.lite.execute(sql, parameters).fetchall()
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) and "busy" not in str(error):
                raise
            self.busy += 1
            return []

    def status(self, run_id: str) -> str | None:
        sql = f"SELECT status FROM {self.table} WHERE {self.column} = ?"
        rows = self._rows(sql, (self.key(run_id),))
        return str(rows[0][0]) if rows else None

    def settled_among(self, run_ids: Sequence[str]) -> list[tuple[str, str]]:
        keys = {self.key(run_id): run_id for run_id in run_ids}
        marks = ", ".join("?" * len(keys))
        states = ", ".join("?" * len(self.settled))
        sql = (
            f"SELECT {self.column}, status FROM {self.table}"
            f" WHERE {self.column} IN ({marks}) AND status IN ({states})"
        )
        rows = self._rows(sql, [*keys, *self.settled])
        return [(keys[str(key)], str(status)) for key, status in rows]

    def executors(self, run_ids: Sequence[str]) -> dict[str, int]:
        return {}  # one process on a SQLite store

    def close(self) -> None:
        self.lite.close()


def ours_poller(url: str, namespace: str) -> Poller:
    table = f'"{namespace}".runs'
    return Poller(
        url,
        f"SELECT status FROM {table} WHERE run_id = %s",
        f"SELECT run_id, status FROM {table} WHERE run_id = ANY(%s) AND status = ANY(%s)",
        "finished",
        SETTLED,
    )


def dbos_poller(url: str) -> Poller:
    table = "dbos.workflow_status"
    return Poller(
        url,
        f"SELECT status FROM {table} WHERE workflow_uuid = %s",
        f"SELECT workflow_uuid, status FROM {table}"
        " WHERE workflow_uuid = ANY(%s) AND status = ANY(%s)",
        "SUCCESS",
        DBOS_SETTLED,
        f"SELECT executor_id, count(*) FROM {table} WHERE workflow_uuid = ANY(%s) GROUP BY 1",
    )


def ours_sqlite_poller(path: Path) -> Poller:
    # The store keeps a run id as its 32 hex digits (SQLAlchemy's Uuid type on SQLite).
    return SqlitePoller(
        path, "runs", "run_id", "finished", SETTLED, key=lambda run_id: uuid.UUID(run_id).hex
    )


def dbos_sqlite_poller(path: Path) -> Poller:
    return SqlitePoller(path, "workflow_status", "workflow_uuid", "SUCCESS", DBOS_SETTLED)


def admission(client: httpx.Client, revision: str, application: str) -> str:
    body = {"workflow": WORKFLOW, "revision": revision, "input": {"applicationId": application}}
    answer = client.post("/v1/runs", json=body, headers={"Idempotency-Key": uuid.uuid4().hex})
    if answer.status_code != 201:
        raise BenchError(f"admission answered {answer.status_code}: {answer.text[:500]}")
    run_id: str = answer.json()["runId"]
    return run_id


@dataclass
class Measured:
    """What the client saw of one window's runs."""

    elapsed: float
    latencies: list[float]
    admissions: list[float]
    run_ids: list[str]


def one_at_a_time(
    origin: str, token: str, revision: str, applications: Sequence[str], poller: Poller
) -> Measured:
    """Admit a run, wait until the store shows it finished, then the next: the latency of a
    lone run from admission to finished (what a poll interval adds shows up here)."""
    latencies: list[float] = []
    admissions: list[float] = []
    run_ids: list[str] = []
    headers = {"Authorization": "Bearer " + token}
    with httpx.Client(base_url=origin, headers=headers, timeout=30, verify=TLS) as client:
        began_all = time.perf_counter()
        for application in applications:
            began = time.perf_counter()
            run_id = admission(client, revision, application)
            admissions.append(time.perf_counter() - began)
            run_ids.append(run_id)
            deadline = time.monotonic() + 30
            while (status := poller.status(run_id)) not in poller.settled:
                if time.monotonic() > deadline:
                    raise BenchError(f"a run did not finish within 30 s (status {status})")
                time.sleep(ONE_POLL_SECONDS)
            if status != poller.finished:
                raise BenchError(f"a run settled as {status}")
            latencies.append(time.perf_counter() - began)
        return Measured(time.perf_counter() - began_all, latencies, admissions, run_ids)


def many_at_once(
    origin: str,
    token: str,
    revision: str,
    applications: Sequence[str],
    poller: Poller,
    concurrency: int,
    timeout: float,
) -> Measured:
    """`concurrency` admissions in flight, back to back, while one thread polls the status of
    every admitted run; each run's latency ends when the poll first sees it finished."""
    local = threading.local()
    headers = {"Authorization": "Bearer " + token}
    lock = threading.Lock()
    began: dict[str, float] = {}
    latencies: dict[str, float] = {}
    admissions: list[float] = []
    clients: list[httpx.Client] = []

    def admit(application: str) -> None:
        client: httpx.Client | None = getattr(local, "client", None)
        if client is None:
            client = httpx.Client(base_url=origin, headers=headers, timeout=30, verify=TLS)
            local.client = client
            with lock:
                clients.append(client)
        start = time.perf_counter()
        run_id = admission(client, revision, application)
        with lock:
            if run_id in began:
                raise BenchError("two admissions answered the same run")
            began[run_id] = start
            admissions.append(time.perf_counter() - start)

    started = time.perf_counter()
    deadline = time.monotonic() + timeout
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        futures = [pool.submit(admit, application) for application in applications]
        while len(latencies) < len(applications):
            failed = [future for future in futures if future.done() and future.exception()]
            if failed:
                raise failed[0].exception()  # type: ignore[misc]
            with lock:
                outstanding = [run_id for run_id in began if run_id not in latencies]
            if outstanding:
                for run_id, status in poller.settled_among(outstanding):
                    if status != poller.finished:
                        raise BenchError(f"a run settled as {status}")
                    latencies[run_id] = time.perf_counter() - began[run_id]
            if time.monotonic() > deadline:
                raise BenchError(
                    f"timed out after {timeout:.0f} s; {len(latencies)} of "
                    f"{len(applications)} runs finished"
                )
            time.sleep(MANY_POLL_SECONDS)
    finished = max(began[run_id] + latency for run_id, latency in latencies.items())
    for client in clients:
        client.close()
    return Measured(finished - started, list(latencies.values()), admissions, list(began))


# -- the physical bound ---------------------------------------------------------------------


def _timed_threads(
    insert: Callable[[int], None], barrier: threading.Barrier, opened: Sequence[Any]
) -> float:
    """Run `insert(index)` on a thread per connection of `opened`, all released at once by
    `barrier` (which counts them and this thread); the elapsed seconds until the last ends. The
    connections are closed whatever happens."""
    try:
        with ThreadPoolExecutor(max_workers=len(opened)) as pool:
            futures = [pool.submit(insert, index) for index in range(len(opened))]
            barrier.wait()
            began = time.perf_counter()
            for future in futures:
                future.result()
            return time.perf_counter() - began
    finally:
        for connection in opened:
            connection.close()


def postgres_commits(url: str, rows: int, connections: int) -> float:
    """Single-row INSERT then COMMIT into `bench_commit`, `rows` in all over `connections`
    connections at once; the elapsed seconds."""
    share = rows // connections
    opened = [psycopg.connect(url) for _ in range(connections)]
    barrier = threading.Barrier(connections + 1)

    def insert(index: int) -> None:
        connection = opened[index]
        barrier.wait()
        for row in range(index * share, (index + 1) * share):
            connection.execute(
                "INSERT INTO bench_commit (id, body) VALUES (%s, %s)", (row, "x" * 64)
            )
            connection.commit()

    return _timed_threads(insert, barrier, opened)


def sqlite_connect(path: Path) -> sqlite3.Connection:
    """A connection set up as our store sets up its own (07 §14.3): WAL, `synchronous=FULL`,
    the same busy timeout, transactions begun by hand (`BEGIN IMMEDIATE`)."""
    connection = sqlite3.connect(
        path, timeout=SQLITE_BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
    )
    for pragma in SQLITE_PRAGMAS:
        connection.execute(pragma)
    return connection


def sqlite_commits(path: Path, rows: int, connections: int) -> tuple[float, int]:
    """`BEGIN IMMEDIATE`; single-row INSERT; COMMIT into `bench_commit` of a fresh SQLite file
    at `path`, `rows` in all over `connections` threads at once, each with its own connection
    (they queue on the one writer lock, each waiting through the busy timeout, as our store's
    connections do); the elapsed seconds, and how many `BEGIN IMMEDIATE` found the file still
    locked after the busy timeout and were retried (as our store retries such a transaction:
    SQLite's busy wait is not a queue, and a loaded machine can starve one connection)."""
    with contextlib.closing(sqlite_connect(path)) as setup:
        setup.execute("CREATE TABLE bench_commit (id INTEGER PRIMARY KEY, body TEXT)")
    share = rows // connections
    opened = [sqlite_connect(path) for _ in range(connections)]
    barrier = threading.Barrier(connections + 1)
    retried = [0] * connections

    def insert(index: int) -> None:
        connection = opened[index]
        barrier.wait()
        for row in range(index * share, (index + 1) * share):
            while True:
                try:
                    connection.execute("BEGIN IMMEDIATE")
                    break
                except sqlite3.OperationalError as error:
                    if "locked" not in str(error) and "busy" not in str(error):
                        raise
                    retried[index] += 1
            connection.execute("INSERT INTO bench_commit (id, body) VALUES (?, ?)", (row, "x" * 64))
            connection.execute("COMMIT")

    return _timed_threads(insert, barrier, opened), sum(retried)


def remove_sqlite(path: Path) -> None:
    """The SQLite file and whatever journal, WAL or shared-memory file it left."""
    for suffix in ("", "-journal", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


# -- the service and its peer -------------------------------------------------------------------


def project_texts(extra_reads: int) -> tuple[str, str]:
    """The workflow and scenarios of the project, with `extra_reads` more BReg reads of the
    same record between the first read and the choose (`--extra-reads`: what one more call
    step costs a run); 0 gives WORKFLOW_YAML and SCENARIOS_YAML as they are."""
    if extra_reads == 0:
        return WORKFLOW_YAML, SCENARIOS_YAML
    workflow = yaml.safe_load(WORKFLOW_YAML)
    steps = workflow["steps"]
    names = [f"read-again-{index}" for index in range(1, extra_reads + 1)]
    following = [*names, steps["read-application"]["next"]]
    steps["read-application"]["next"] = following[0]
    for name, after in zip(names, following[1:], strict=True):
        steps[name] = {**copy.deepcopy(steps["read-application"]), "next": after}
    scenarios = yaml.safe_load(SCENARIOS_YAML)
    for case in scenarios["cases"]:
        replies = case["replies"]
        for name in names:
            replies[name] = copy.deepcopy(replies["read-application"])
        path = case["expect"]["path"]
        case["expect"]["path"] = [path[0], *names, *path[1:]]
    return (
        yaml.safe_dump(workflow, sort_keys=False),
        yaml.safe_dump(scenarios, sort_keys=False),
    )


def prefill_store(url: str, namespace: str, count: int) -> float:
    """`--prefill`: `count` finished runs more in our PostgreSQL store, each a copy of its
    newest finished run (its row, records and ended attempts) under a new run id and start
    identity, admitted a second apart before it; then VACUUM ANALYZE of those tables, so
    that the windows do not meet autovacuum's work on them. The copies' sealed values are
    bound to the template's run id and are never opened (no window reads them: a finished
    run is never claimed, swept or listed before the newest). Answers the seconds taken."""
    schema = f'"{namespace}"'
    tables = ("runs", "steps", "step_attempts")
    began = time.monotonic()
    with psycopg.connect(url) as connection:
        found = connection.execute(
            f"SELECT run_id FROM {schema}.runs WHERE status = 'finished'"
            " ORDER BY admitted_at DESC LIMIT 1"
        ).fetchone()
        if found is None:
            raise BenchError("--prefill: no finished run in the store to copy")
        connection.execute(
            "CREATE TEMP TABLE prefill ON COMMIT DROP AS"
            " SELECT gen_random_uuid() AS run_id, g FROM generate_series(1, %s) AS g",
            (count,),
        )
        replaced = {
            "run_id": "p.run_id",
            "start_identity": "sha256(uuid_send(p.run_id))",
            "admitted_at": "t.admitted_at - p.g * interval '1 second'",
        }
        for table in tables:
            columns = [
                name
                for (name,) in connection.execute(
                    "SELECT column_name FROM information_schema.columns"
                    " WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
                    (namespace, table),
                )
            ]
            own = replaced if table == "runs" else {"run_id": replaced["run_id"]}
            chosen = [own.get(name, f't."{name}"') for name in columns]
            listed = ", ".join(f'"{name}"' for name in columns)
            inserted = connection.execute(
                f"INSERT INTO {schema}.{table} ({listed}) SELECT {', '.join(chosen)}"
                f" FROM prefill p, {schema}.{table} t WHERE t.run_id = %s",
                found,
            ).rowcount
            if table == "runs" and inserted != count:
                raise BenchError(f"--prefill: {inserted} runs copied, not {count}")
        connection.commit()
    with psycopg.connect(url, autocommit=True) as connection:
        for table in tables:
            connection.execute(f"VACUUM ANALYZE {schema}.{table}")
    return time.monotonic() - began


def write_project(
    root: Path,
    env: Mapping[str, str],
    workflow: str = WORKFLOW_YAML,
    functions: str = FUNCTIONS_RHAI,
    scenarios: str = SCENARIOS_YAML,
) -> None:
    """`coordinatorctl init`, then the bench's own workflow, functions and scenarios (the
    template's scenarios name the template's steps), and the sandbox's keys."""
    ctl(env, "init", "--directory", str(root))
    (root / "workflow.yaml").write_text(workflow, encoding="utf-8")
    (root / "functions.rhai").write_text(functions, encoding="utf-8")
    (root / "scenarios.yaml").write_text(scenarios, encoding="utf-8")
    write_keys(root / ".coordinator" / "secrets")


def check_project(env: Mapping[str, str], root: Path, runtime: str, revision: str) -> None:
    """`coordinatorctl check` of the project with its runtime file (its scenarios run too):
    no diagnostic but the warning for `dist/`, where write_runtime put the package, and the
    revision that was packaged."""
    checked = ctl(env, "check", "--project", str(root), "--runtime-config", runtime)
    unexpected = [
        diagnostic
        for diagnostic in checked.get("diagnostics", [])
        if diagnostic.get("code") != "coordinator.project.unread-directory"
        or diagnostic.get("source", {}).get("file") != "dist"
    ]
    if unexpected or checked.get("revision") != revision:
        raise BenchError(f"coordinatorctl check: {json.dumps(checked)}")


def write_runtime(
    root: Path,
    env: Mapping[str, str],
    sandbox: Sandbox,
    *,
    namespace: str,
    role: str,
    port: int,
    concurrency: int,
    poll_ms: int = 20,
    sqlite_runtime: Path | None = None,
    workflow: str = WORKFLOW,
) -> str:
    """Point runtime.yaml at the sandbox and PostgreSQL, package, add the deployment block.
    With `sqlite_runtime`, write that runtime file too: the same, on the SQLite store `init`
    wrote into runtime.yaml (no runtime role there), with an audit directory of its own."""
    runtime = root / "runtime.yaml"
    text = point_at_sandbox(runtime.read_text(), sandbox.endpoints)
    sqlite_text = text  # init's `database: {sqlite: {path: …}}`
    text = postgresql_database(
        text,
        namespace=namespace,
        runtime_url_variable="BENCH_RUNTIME_URL",
        migration_url_variable="BENCH_MIGRATION_URL",
    )
    package = root / "dist" / "package"
    packaged = ctl(env, "package", "--project", str(root), "--output", str(package))

    def deployment(runtime_role: str | None, audit: str) -> str:
        return deployment_block(
            database_id="bench-service",
            package=package,
            digest=packaged["packageDigest"],
            port=port,
            issuer=sandbox.url("issuer"),
            policies=[Policy([workflow], actions=("start", "status", "inspect"))],
            audit_directory=root / ".coordinator" / audit,
            runtime_role=runtime_role,
            poll_ms=poll_ms,
            concurrency=concurrency,
        )

    runtime.write_text(text + deployment(role, "audit"))
    if sqlite_runtime is not None:
        sqlite_runtime.write_text(sqlite_text + deployment(None, "audit-sqlite"))
    revision: str = packaged["revision"]
    return revision


def write_peer_config(
    path: Path,
    runtime: Path,
    sandbox: Sandbox,
    *,
    port: int,
    url: str,
    start: str,
    concurrency: int,
    poll_ms: int,
) -> None:
    """The peer's configuration, from the runtime file our service runs with: the same
    connections, client ids, keys, scopes and resources, the same caller policy."""
    document = yaml.safe_load(runtime.read_text())
    root = Path(document["secretProviders"]["file"]["root"])
    deployment = document["deployment"]["authentication"]
    connections = {}
    for name, connection in document["connections"].items():
        authorization = connection["authorization"]
        connections[name] = {
            "baseUrl": connection["baseUrl"],
            "profile": connection.get("profile"),
            "tokenEndpoint": authorization["tokenEndpoint"],
            "clientId": authorization["clientId"],
            "signingKeyFile": str(root / authorization["signingKeyRef"].partition("/")[2]),
            "resource": authorization["resource"],
            "scopes": authorization["scopes"],
        }
    policy = deployment["policies"][0]
    config = {
        "port": port,
        "systemDatabaseUrl": url,
        "issuer": deployment["issuer"],
        "jwksUri": sandbox.url("jwksUri"),
        "audience": deployment["audience"],
        "allowedClients": deployment["allowedClients"],
        "requiredScopes": policy["requiredScopes"],
        "workflow": WORKFLOW,
        "start": start,
        "queueConcurrency": concurrency,
        "pollMilliseconds": poll_ms,
        "connections": connections,
    }
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")


def seed(sandbox: Sandbox, applications: Sequence[str]) -> None:
    for application in applications:
        sandbox.seed_application(application)


@dataclass
class Bench:
    """Everything the windows share: the server, the project, the sandbox, the caller."""

    arguments: argparse.Namespace
    admin_url: str
    processes: Processes
    url: str = ""
    database: str = ""
    peer_url: str = ""
    peer_database: str = ""
    env: dict[str, str] = field(default_factory=dict)
    runtime: str = ""
    revision: str = ""
    namespace: str = ""
    origin: str = ""
    peer_origin: str = ""
    peer_config: Path = Path()
    sqlite_runtime: str = ""  # the runtime file on the SQLite store
    sqlite_store: Path = Path()  # our SQLite store (the file that runtime names)
    peer_sqlite_config: Path = Path()
    peer_sqlite_store: Path = Path()  # the peer's SQLite system database
    bound_file: Path = Path()  # the SQLite bound's file, made afresh for each window
    token: str = ""
    sandbox_pid: int = 0
    applications: list[str] = field(default_factory=list)

    @property
    def own_databases(self) -> tuple[str, ...]:
        return tuple(name for name in (self.database, self.peer_database) if name)

    def peer_processes(self, configuration: str) -> int:
        return self.arguments.peer_processes if configuration == "dbos-multi" else 1

    def start_configuration(self, configuration: str) -> dict[str, subprocess.Popen[bytes]]:
        """Start the processes of one configuration and wait until every one is ready."""
        started: dict[str, subprocess.Popen[bytes]] = {}
        log_offsets: dict[str, int] = {}  # where each peer's log stood before it started
        if configuration in PEERS:
            for index in range(1, self.peer_processes(configuration) + 1):
                # DBOS's documented way to run several processes on one system database: an
                # executor id of its own for each (DBOS__VMID).
                name = "peer" if index == 1 else f"peer.{index}"
                log_offsets[name] = self.processes.log_size(name)
                config = self.peer_sqlite_config if configuration in SQLITE else self.peer_config
                started[name] = self.processes.start(
                    name,
                    [str(PEER_APP), "--config", str(config)],
                    env={**os.environ, "DBOS__VMID": f"peer-{index}"},
                    python=self.arguments.peer_python,
                )
            origin = self.peer_origin
        else:
            runtime = self.sqlite_runtime if configuration in SQLITE else self.runtime
            started["serve"] = self.processes.start(
                "serve",
                ["-m", "coordinator_api.serve", "serve", "--runtime-config", runtime],
                env=self.env,
            )
            if configuration == "serve+worker":
                started["worker"] = self.processes.start(
                    "worker",
                    ["-m", "coordinator_api.serve", "worker", "--runtime-config", self.runtime],
                    env=self.env,
                )
            origin = self.origin
        # Each peer process says when it listens (the port is shared, so /health answers from
        # any one of them); ours answer /health once serve listens (a worker has no port).

        def healthy() -> bool:
            for name, process in started.items():
                if process.poll() is not None:
                    raise BenchError(f"{name} exited: " + self.processes.log(name, tail=4000))
            if any(
                "bench-peer ready" not in self.processes.log_since(name, offset)
                for name, offset in log_offsets.items()
            ):
                return False
            try:
                answer = httpx.get(origin + "/health", timeout=1, verify=TLS)
                return answer.status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(healthy, READY_TIMEOUT, f"{configuration} to answer /health", 0.05)
        return started

    def poller(self, configuration: str) -> Poller:
        """The client's status poll of the configuration's store."""
        if configuration == "serve-sqlite":
            return ours_sqlite_poller(self.sqlite_store)
        if configuration == "dbos-sqlite":
            return dbos_sqlite_poller(self.peer_sqlite_store)
        if configuration in PEERS:
            return dbos_poller(self.peer_url)
        return ours_poller(self.url, self.namespace)

    def window(self, configuration: str, concurrency: int, applications: Sequence[str]) -> Sample:
        """One measured window of a service configuration, processes started and stopped."""
        peer = configuration in PEERS
        sqlite = configuration in SQLITE
        # On SQLite the PostgreSQL server is someone else's: only its other databases are read.
        database = self.peer_database if peer and not sqlite else self.database
        before = read_counters(self.admin_url, database, self.own_databases)
        started = self.start_configuration(configuration)
        poller = self.poller(configuration)
        pids = {name: process.pid for name, process in started.items()}
        pids["sandbox"] = self.sandbox_pid
        try:
            load_before = os.getloadavg()[0]
            cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
            client_before, postgres_before = time.process_time(), postgres_cpu_seconds()
            machine_before, span_began = machine_cpu_seconds(), time.monotonic()
            origin = self.peer_origin if peer else self.origin
            if concurrency == 1:
                measured = one_at_a_time(origin, self.token, self.revision, applications, poller)
            else:
                measured = many_at_once(
                    origin,
                    self.token,
                    self.revision,
                    applications,
                    poller,
                    concurrency,
                    self.arguments.timeout,
                )
            spent = {name: cpu_seconds(pid) - cpu_before[name] for name, pid in pids.items()}
            cpu = {name: seconds for name, seconds in spent.items() if not name.startswith("peer")}
            if peer:  # the peer's processes together
                cpu["peer"] = sum(v for name, v in spent.items() if name.startswith("peer"))
            cpu["client"] = time.process_time() - client_before
            if not sqlite:  # on SQLite the server's CPU is other processes' CPU
                cpu["postgres"] = postgres_cpu_seconds() - postgres_before
            other_cpu = machine_cpu_seconds() - machine_before - sum(cpu.values())
            cpu_span = time.monotonic() - span_began
            load = (load_before, os.getloadavg()[0])
            executors = poller.executors(measured.run_ids)
        finally:
            poller.close()
            self.processes.stop_all(started.values(), grace=20)
        for name, process in started.items():
            if process.returncode not in (0, -signal.SIGTERM):
                log = self.processes.log(name, tail=4000)
                raise BenchError(f"{name} exited {process.returncode}: {log}")
        if not sqlite:
            wait_sessions_gone(self.admin_url, database)
        after = read_counters(self.admin_url, database, self.own_databases)
        sample = Sample(
            runs=len(measured.latencies),
            elapsed=measured.elapsed,
            latencies=measured.latencies,
            cpu=cpu,
            other_databases=after.others_since(before),
            admission_latencies=measured.admissions,
            load=load,
            other_cpu=other_cpu,
            cpu_span=cpu_span,
            executors=executors,
            busy=poller.busy,
        )
        if not sqlite:
            sample.count(before, after, poller.statements)
        return sample

    def bound(self, configuration: str, connections: int) -> Sample:
        """The raw commit rate on `connections` connections, with the same counters (on SQLite
        the client's CPU and the other databases' transactions only)."""
        sqlite = configuration == "bound-sqlite"
        if sqlite:
            remove_sqlite(self.bound_file)
        else:
            with psycopg.connect(self.url, autocommit=True) as connection:
                connection.execute("CREATE TABLE bench_commit (id bigint PRIMARY KEY, body text)")
            wait_sessions_gone(self.admin_url, self.database)
        before = read_counters(self.admin_url, self.database, self.own_databases)
        load_before = os.getloadavg()[0]
        client_before, postgres_before = time.process_time(), postgres_cpu_seconds()
        machine_before, span_began = machine_cpu_seconds(), time.monotonic()
        rows, retried = self.arguments.commit_rows, 0
        if sqlite:
            elapsed, retried = sqlite_commits(self.bound_file, rows, connections)
        else:
            elapsed = postgres_commits(self.url, rows, connections)
        cpu = {"client": time.process_time() - client_before}
        if not sqlite:
            cpu["postgres"] = postgres_cpu_seconds() - postgres_before
        other_cpu = machine_cpu_seconds() - machine_before - sum(cpu.values())
        cpu_span = time.monotonic() - span_began
        load = (load_before, os.getloadavg()[0])
        if sqlite:
            remove_sqlite(self.bound_file)
        else:
            wait_sessions_gone(self.admin_url, self.database)
        after = read_counters(self.admin_url, self.database, self.own_databases)
        if not sqlite:
            with psycopg.connect(self.url, autocommit=True) as connection:
                connection.execute("DROP TABLE bench_commit")
        sample = Sample(
            runs=rows // connections * connections,
            elapsed=elapsed,
            latencies=[],
            cpu=cpu,
            other_databases=after.others_since(before),
            load=load,
            other_cpu=other_cpu,
            cpu_span=cpu_span,
            busy=retried,
        )
        if not sqlite:
            sample.count(before, after)
        return sample


# -- rounds ---------------------------------------------------------------------------------


def prepare(bench: Bench, directory: Path, role: str) -> None:
    """The project, the sandbox, the store, the seeded records, the caller's token."""
    arguments = bench.arguments
    env = dict(os.environ)
    env["BENCH_RUNTIME_URL"] = database_url(bench.url, bench.database, user=role)
    env["BENCH_MIGRATION_URL"] = bench.url
    bench.env = env
    root = directory / "project"
    workflow, scenarios = project_texts(arguments.extra_reads)
    write_project(root, env, workflow=workflow, scenarios=scenarios)
    port = free_port()
    bench.origin = f"http://127.0.0.1:{port}"
    state = root / ".coordinator" / "sandbox"
    services = ("identity", "breg", "messaging")
    sandbox = Sandbox.start(bench.processes, state, services=services, coordinator_url=bench.origin)
    bench.sandbox_pid = sandbox.process.pid
    bench.namespace = f"coordinator_bench_{secrets.token_hex(4)}"
    selected = set(arguments.configurations)
    sqlite_runtime = directory / "runtime-sqlite.yaml" if "serve-sqlite" in selected else None
    bench.revision = write_runtime(
        root,
        env,
        sandbox,
        namespace=bench.namespace,
        role=role,
        port=port,
        concurrency=arguments.worker_concurrency,
        poll_ms=arguments.poll_ms,
        sqlite_runtime=sqlite_runtime,
    )
    bench.runtime = str(root / "runtime.yaml")
    check_project(env, root, bench.runtime, bench.revision)
    ctl(env, "--runtime-config", bench.runtime, "migrate")
    ctl(env, "--runtime-config", bench.runtime, "apply", "--reference", "BENCH-1")
    if sqlite_runtime is not None:
        bench.sqlite_runtime = str(sqlite_runtime)
        bench.sqlite_store = Path(
            yaml.safe_load(sqlite_runtime.read_text())["database"]["sqlite"]["path"]
        )
        ctl(env, "--runtime-config", bench.sqlite_runtime, "migrate")
        ctl(env, "--runtime-config", bench.sqlite_runtime, "apply", "--reference", "BENCH-1")
    bench.bound_file = directory / "bound.sqlite"
    bench.applications = [str(uuid.uuid4()) for _ in range(arguments.runs)]
    seed(sandbox, bench.applications)  # every window reads the same records
    bench.token = caller_token(state)
    if selected & set(PEERS):
        peer_port = free_port()
        bench.peer_origin = f"http://127.0.0.1:{peer_port}"
        bench.peer_config = directory / "peer.json"
        bench.peer_sqlite_config = directory / "peer-sqlite.json"
        bench.peer_sqlite_store = directory / "dbos.sqlite"
        for config, url in (
            (bench.peer_config, bench.peer_url),
            (bench.peer_sqlite_config, f"sqlite:///{bench.peer_sqlite_store}"),
        ):
            write_peer_config(
                config,
                Path(bench.runtime),
                sandbox,
                port=peer_port,
                url=url,
                start=arguments.peer_start,
                concurrency=arguments.peer_concurrency or arguments.worker_concurrency,
                poll_ms=arguments.poll_ms,
            )
        if arguments.peer_sqlite_journal == "wal":
            # journal_mode=WAL is a property of the file: DBOS's connections find it so.
            with contextlib.closing(sqlite3.connect(bench.peer_sqlite_store)) as lite:
                lite.execute("PRAGMA journal_mode=WAL")


Results = dict[str, dict[int, list[Sample]]]
Window = tuple[str, int]


def round_orders(
    windows: Sequence[Window], rounds: int, order: str, seed: int
) -> list[list[Window]]:
    """The order of the windows in each round: `alternate` runs them forward, then reversed,
    then forward…; `shuffle` draws each round's order from a generator seeded with `seed`."""
    if order == "shuffle":
        generator = random.Random(seed)
        orders = []
        for _ in range(rounds):
            shuffled = list(windows)
            generator.shuffle(shuffled)
            orders.append(shuffled)
        return orders
    return [list(windows) if index % 2 == 0 else list(reversed(windows)) for index in range(rounds)]


def describe(configuration: str, concurrency: int, sample: Sample) -> str:
    """One window's line: its rate, the machine's load around it, who else used the server."""
    shares = ""
    if len(sample.executors) > 1:
        shares = "; runs per peer process " + "/".join(
            str(count) for count in sample.executors.values()
        )
    if sample.busy and configuration in BOUNDS:
        shares += f"; {sample.busy} transactions retried after the busy timeout"
    elif sample.busy:
        shares += f"; {sample.busy} polls found the store locked"
    unit = "commits/s" if configuration in BOUNDS else "runs/s"
    others = ", ".join(
        f"{name} {count}"
        for name, count in sorted(sample.other_databases.items(), key=lambda item: -item[1])[:3]
    )
    return (
        f"{configuration} c={concurrency}: {sample.rate:.1f} {unit}; 1-min load "
        f"{sample.load[0]:.2f} -> {sample.load[1]:.2f}; other processes "
        f"{sample.other_cpu_percent:.0f}% of a core; other databases "
        f"{sample.other_transactions} transactions{f' ({others})' if others else ''}{shares}"
    )


def run_rounds(bench: Bench) -> Results:
    arguments = bench.arguments
    selected = [name for name in CONFIGURATIONS if name in arguments.configurations]
    # Not measured: DBOS creates its system tables at its first launch (in one process, before
    # several launch at once); both sides pay their first-use costs (imports from a cold
    # cache, the sandbox's first tokens, a store's first pages) here, on each store.
    warm_ups = []
    if any(name in ("serve", "serve+worker") for name in selected):
        warm_ups.append("serve")
    if any(name in ("dbos", "dbos-multi") for name in selected):
        warm_ups.append("dbos")
    warm_ups += [name for name in ("serve-sqlite", "dbos-sqlite") if name in selected]
    for configuration in warm_ups:
        bench.window(configuration, 1, bench.applications[:WARM_UP_RUNS])
    if arguments.prefill and "serve" in warm_ups:
        seconds = prefill_store(bench.url, bench.namespace, arguments.prefill)
        print(
            f"# the PostgreSQL store prefilled with {arguments.prefill} finished runs in "
            f"{seconds:.0f} s",
            flush=True,
        )
    windows = [
        (configuration, concurrency)
        for configuration in selected
        for concurrency in arguments.concurrencies
    ]
    orders = round_orders(windows, arguments.rounds, arguments.order, arguments.seed)
    results: Results = {name: {} for name in selected}
    began = time.monotonic()
    for round_index, order in enumerate(orders):
        print(
            f"# round {round_index + 1}/{arguments.rounds}, order: "
            + ", ".join(f"{name} c={concurrency}" for name, concurrency in order),
            flush=True,
        )
        for number, (configuration, concurrency) in enumerate(order, 1):
            if configuration in BOUNDS:
                sample = bench.bound(configuration, concurrency)
            else:
                sample = bench.window(configuration, concurrency, bench.applications)
            results[configuration].setdefault(concurrency, []).append(sample)
            print(
                f"#   window {number}/{len(order)} "
                f"({time.monotonic() - began:.0f} s): {describe(configuration, concurrency, sample)}",
                flush=True,
            )
    return results


def bench(admin_url: str, arguments: argparse.Namespace) -> Results:
    return with_bench(admin_url, arguments, run_rounds)


def with_bench(admin_url: str, arguments: argparse.Namespace, measure: Callable[[Bench], T]) -> T:
    """Create the databases and the runtime role, `prepare` a Bench in a temporary directory,
    and return what `measure` makes of it; every process is stopped, the databases and role
    dropped and the directory removed whatever happens (`scripts/bench_reads.py` measures
    with it too)."""
    with ScratchPostgres(admin_url, "coordinator_bench") as postgres:
        try:
            url, peer_url = postgres.database(), postgres.database("dbos")
            role = postgres.role()
        except psycopg.Error as error:
            raise BenchError(f"PostgreSQL is unavailable at {admin_url}: {error}") from error
        with tempfile.TemporaryDirectory(prefix="bench-service-") as scratch:
            directory = Path(scratch)
            processes = Processes(directory)
            state = Bench(
                arguments,
                admin_url,
                processes,
                url=url,
                database=url.rpartition("/")[2],
                peer_url=peer_url,
                peer_database=peer_url.rpartition("/")[2],
            )
            try:
                prepare(state, directory, role)
                return measure(state)
            except (BenchError, KitFailure):
                for log in sorted(path.stem for path in directory.glob("*.log")):
                    tail = processes.log(log, tail=1500)
                    if tail:
                        sys.stderr.write(f"--- {log} (tail) ---\n{tail}\n")
                raise
            finally:
                processes.stop_all(grace=20)


# -- report ---------------------------------------------------------------------------------


PROCESSES = ("serve", "worker", "peer", "sandbox", "client", "postgres")
OWN_PROCESSES = ("serve", "worker", "peer")


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


@dataclass
class Row:
    configuration: str
    concurrency: int
    figures: dict[str, float]


def summarise(results: Results) -> list[Row]:
    """Medians over the rounds; ratios within each round, then their median."""
    rows = []
    for configuration, by_concurrency in results.items():
        for concurrency, samples in sorted(by_concurrency.items()):
            figures: dict[str, float] = {
                "runs_per_second": median([s.rate for s in samples]),
                "p50_ms": median([1000 * median(s.latencies) for s in samples if s.latencies]),
                "p99_ms": median(
                    [1000 * percentile(s.latencies, 0.99) for s in samples if s.latencies]
                ),
                "admission_p50_ms": median(
                    [1000 * median(s.admission_latencies) for s in samples if s.latencies]
                ),
                "admission_p99_ms": median(
                    [1000 * percentile(s.admission_latencies, 0.99) for s in samples if s.latencies]
                ),
                "write_transactions": median([s.per_run(s.write_transactions) for s in samples]),
                "wal_flushes": median([s.per_run(s.wal_flushes) for s in samples]),
                "wal_kilobytes": median([s.per_run(s.wal_kilobytes) for s in samples]),
                "transactions": median([s.per_run(s.transactions) for s in samples]),
                "load": median([s.load[1] for s in samples]),
                "load_max": max(max(s.load) for s in samples),
                "other_transactions": median([s.other_transactions for s in samples]),
                "other_cpu_percent": median([s.other_cpu_percent for s in samples]),
            }
            for process in PROCESSES:
                if all(process in s.cpu for s in samples):
                    figures["cpu." + process] = median(
                        [1000 * s.per_run(s.cpu[process]) for s in samples]
                    )
            if configuration not in BOUNDS:
                figures["cpu.ours"] = median([1000 * s.per_run(_own_cpu(s)) for s in samples])
            if configuration in OURS:
                store = "sqlite" if configuration in SQLITE else "postgresql"
                for peer, rate_key, cpu_key in PEER_RATIOS[store]:
                    theirs = results.get(peer, {}).get(concurrency)
                    if theirs is None:
                        continue
                    pairs = list(zip(samples, theirs, strict=True))
                    figures[rate_key] = median([s.rate / t.rate for s, t in pairs])
                    figures[cpu_key] = median(
                        [s.per_run(_own_cpu(s)) / t.per_run(_own_cpu(t)) for s, t in pairs]
                    )
                bound = results.get(BOUND_OF[store], {}).get(concurrency)
                if bound is not None:
                    figures["ratio_to_bound"] = median(
                        [s.rate / t.rate for s, t in zip(samples, bound, strict=True)]
                    )
            rows.append(Row(configuration, concurrency, figures))
    return rows


def _own_cpu(sample: Sample) -> float:
    """CPU seconds of the configuration's own processes: serve (+ worker), or the peer's."""
    return sum(sample.cpu.get(name, 0.0) for name in OWN_PROCESSES)


Column = tuple[str, str, str]
SPEED_COLUMNS: tuple[Column, ...] = (
    ("runs/s", "runs_per_second", "{:.1f}"),
    ("p50 ms", "p50_ms", "{:.1f}"),
    ("p99 ms", "p99_ms", "{:.1f}"),
    ("adm p50", "admission_p50_ms", "{:.1f}"),
    ("ours/peer", "ratio_to_peer", "{:.3f}"),
    ("ours/peerN", "ratio_to_peer_multi", "{:.3f}"),
    ("ours/bound", "ratio_to_bound", "{:.4f}"),
    ("load", "load", "{:.2f}"),
    ("load max", "load_max", "{:.2f}"),
    ("other cpu%", "other_cpu_percent", "{:.0f}"),
    ("other xact", "other_transactions", "{:.0f}"),
)
COST_COLUMNS: tuple[Column, ...] = (
    ("serve", "cpu.serve", "{:.1f}"),
    ("worker", "cpu.worker", "{:.1f}"),
    ("peer", "cpu.peer", "{:.1f}"),
    ("own", "cpu.ours", "{:.1f}"),
    ("own/peer", "cpu_ratio_to_peer", "{:.2f}"),
    ("own/peerN", "cpu_ratio_to_peer_multi", "{:.2f}"),
    ("sandbox", "cpu.sandbox", "{:.1f}"),
    ("client", "cpu.client", "{:.1f}"),
    ("pg*", "cpu.postgres", "{:.1f}"),
    ("wxact*", "write_transactions", "{:.2f}"),
    ("walsync*", "wal_flushes", "{:.2f}"),
    ("walkB*", "wal_kilobytes", "{:.1f}"),
    ("xact", "transactions", "{:.1f}"),
)


def labels(peer_processes: int) -> dict[str, str]:
    return {
        "serve": "ours: serve",
        "serve+worker": "ours: serve + 1 worker",
        "dbos": "peer: DBOS 3.4.0",
        "dbos-multi": f"peer: DBOS 3.4.0 x {peer_processes} processes",
        "bound": "bound: INSERT+COMMIT",
        "serve-sqlite": "ours: serve, SQLite",
        "dbos-sqlite": "peer: DBOS 3.4.0, SQLite",
        "bound-sqlite": "bound: SQLite INSERT+COMMIT",
    }


def table(rows: Sequence[Row], columns: Sequence[Column], names: Mapping[str, str]) -> str:
    header = ["configuration", "c", *(title for title, _, _ in columns)]
    lines = [header]
    for row in rows:
        cells = [names[row.configuration], str(row.concurrency)]
        for _, key, form in columns:
            value = row.figures.get(key)
            cells.append("—" if value is None or math.isnan(value) else form.format(value))
        lines.append(cells)
    widths = [max(len(line[index]) for line in lines) for index in range(len(header))]
    text = []
    for line in lines:
        first = line[0].ljust(widths[0])
        rest = [cell.rjust(width) for cell, width in zip(line[1:], widths[1:], strict=True)]
        text.append("  ".join([first, *rest]))
    return "\n".join(text)


def plain_lines(rows: Sequence[Row], runs: int) -> list[str]:
    lines = []
    for row in rows:
        name = row.configuration.replace("+", "_").replace("-", "_")
        prefix = f"service.{name}.c{row.concurrency}"
        for key, value in row.figures.items():
            name = key
            if row.configuration in BOUNDS and key == "runs_per_second":
                name = "commits_per_second"
            elif key in ("p50_ms", "p99_ms"):
                name = "finished_" + key
            elif key.startswith("cpu."):
                name = "cpu_ms_per_run." + key[4:]
            elif key in ("write_transactions", "wal_flushes", "wal_kilobytes", "transactions"):
                name = key + "_per_run"
            elif key == "other_transactions":
                name = "other_database_transactions_per_window"
            elif key == "other_cpu_percent":
                name = "other_processes_cpu_percent"
            if math.isnan(value):  # no such figure for this configuration
                continue
            shown = f"{value:.1f}" if abs(value) >= 10 else f"{value:.4g}"
            lines.append(f"{prefix}.{name} {shown}")
    by_key = {(row.configuration, row.concurrency): row.figures for row in rows}
    main = by_key.get((MAIN, 8)) or next(
        (by_key[(name, 8)] for name in ("serve", "serve+worker") if (name, 8) in by_key), None
    )
    if main is not None:
        # The names the earlier script printed, for the main configuration (serve + 1 worker,
        # eight admissions in flight); the ratio is against one connection's commits, as before.
        lines.append(f"service.runs {runs}")
        lines.append(f"service.finished_runs_per_second {main['runs_per_second']:.1f}")
        lines.append(f"service.admission_p50_ms {main['admission_p50_ms']:.1f}")
        lines.append(f"service.admission_p99_ms {main['admission_p99_ms']:.1f}")
        lines.append(f"service.finished_p50_ms {main['p50_ms']:.1f}")
        lines.append(f"service.finished_p99_ms {main['p99_ms']:.1f}")
    bound = by_key.get(("bound", 1))
    if bound is not None:
        lines.append(f"service.postgres_commits_per_second {bound['runs_per_second']:.0f}")
        if main is not None:
            ratio = main["runs_per_second"] / bound["runs_per_second"]
            lines.append(f"service.ratio_runs_to_commits {ratio:.4f}")
    sqlite_bound = by_key.get(("bound-sqlite", 1))
    if sqlite_bound is not None:
        lines.append(f"service.sqlite_commits_per_second {sqlite_bound['runs_per_second']:.0f}")
    return lines


LEGEND = """\
c: concurrency (1: admit, wait until finished, admit the next; 8: eight admissions in flight).
runs/s: finished runs per second (bound: commits per second on c connections); p50/p99:
admission request start -> the client's poll sees the run finished; adm p50: the admission
request alone. ours/peer, ours/peerN, ours/bound: runs/s over the peer's in one process, over
the peer's in N processes, over the bound's commits/s, at the same c and on the same store
(SQLite: serve-sqlite over dbos-sqlite and bound-sqlite; per round, then the median). load:
the 1-minute load average at the end of the windows (median; load max: the highest at any
window's start or end; both count the benchmark's own processes too); other
cpu%: CPU the machine spent outside the measured processes during a window, in % of one core
(other users, the kernel; median); other xact: transactions other databases of the server
committed or rolled back during a window (median; each peer process's DBOS launch reads the
`postgres` database, 3 of them). serve … pg*: CPU ms per finished run of
each process (peer: all the peer's processes; client: this script; pg*: the whole PostgreSQL
server); own: serve + worker, or the peer's; own/peer, own/peerN: ours over the peer's (a
machine's speed cancels out). wxact*: write transactions (transaction ids consumed), walsync*:
WAL flushes, walkB*: kilobytes of WAL written, xact: transactions of the configuration's
database less the client's polls, all per finished run (per commit for the bound).
* server-wide: whatever else the server runs counts too. —: no such figure (the SQLite windows have no PostgreSQL counters, and there the
PostgreSQL server's CPU counts in other cpu%)."""


def _stop(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # so that every `finally` stops processes and drops databases


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=None, help="runs per window (default 150)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 3)")
    parser.add_argument(
        "--configurations",
        default=",".join(CONFIGURATIONS),
        help=f"comma-separated subset of {','.join(CONFIGURATIONS)} (default all)",
    )
    parser.add_argument(
        "--concurrencies",
        default=",".join(str(c) for c in CONCURRENCIES),
        help="comma-separated concurrencies of the windows (default 1,8; e.g. 1,8,32 to see "
        "where the commits per finished run fall below 1)",
    )
    parser.add_argument(
        "--order",
        choices=("alternate", "shuffle"),
        default="alternate",
        help="the order of the windows in each round: the previous round's reversed (default) "
        "or shuffled from --seed",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="with --order shuffle: the generator's seed (default: drawn, and printed)",
    )
    parser.add_argument(
        "--poll-ms",
        type=int,
        default=20,
        help="deployment.worker.pollMilliseconds, and the peer queue's poll (default 20)",
    )
    parser.add_argument(
        "--worker-concurrency",
        type=int,
        default=4,
        help="deployment.worker.concurrency: loops per process (default 4)",
    )
    parser.add_argument(
        "--peer-python",
        default=str(DEFAULT_PEER_PYTHON),
        help="the Python of the peer's environment (default .nox/bench_peer/bin/python)",
    )
    parser.add_argument(
        "--peer-processes",
        type=int,
        default=2,
        help="processes of the dbos-multi configuration, on one system database (default 2, "
        "as many as serve + 1 worker)",
    )
    parser.add_argument(
        "--peer-start",
        choices=("direct", "queue"),
        default="direct",
        help="how the peer starts a run: DBOS.start_workflow at once (default) or a DBOS "
        "queue (scripts/bench_peer/dbos_app.py says why)",
    )
    parser.add_argument(
        "--peer-concurrency",
        type=int,
        default=0,
        help="with --peer-start queue: the queue's worker_concurrency per process "
        "(default: --worker-concurrency)",
    )
    parser.add_argument(
        "--peer-sqlite-journal",
        choices=("default", "wal"),
        default="default",
        help="dbos-sqlite's journal: DBOS's own (SQLite's rollback journal, the default) or WAL, "
        "as our store's, set on the file before DBOS opens it",
    )
    parser.add_argument(
        "--commit-rows",
        type=int,
        default=None,
        help=f"rows of the bound's INSERT+COMMIT windows (default {COMMIT_ROWS})",
    )
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds for the runs of one window"
    )
    parser.add_argument(
        "--extra-reads",
        type=int,
        default=0,
        help="call steps more per run: BReg reads of the same record between the first read and "
        "the choose (default 0; ours only, the peer's workflow has the one shape)",
    )
    parser.add_argument(
        "--prefill",
        type=int,
        default=0,
        help="finished runs copied into our PostgreSQL store before the windows, to see that "
        "a store's size does not change a run's cost (default 0)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"a smoke run: {SMOKE_RUNS} runs per window, one round, {SMOKE_COMMIT_ROWS} "
        "commits for the bound (what is not given); it proves the bench runs, its figures "
        "mean nothing",
    )
    arguments = parser.parse_args(argv)
    defaults = (SMOKE_RUNS, 1, SMOKE_COMMIT_ROWS) if arguments.smoke else (150, 3, COMMIT_ROWS)
    for name, default in zip(("runs", "rounds", "commit_rows"), defaults, strict=True):
        if getattr(arguments, name) is None:
            setattr(arguments, name, default)
    if arguments.runs < 1 or arguments.rounds < 1 or arguments.commit_rows < 8:
        parser.error("--runs and --rounds must be at least 1, --commit-rows at least 8")
    if arguments.peer_processes < 2:
        parser.error("--peer-processes must be at least 2 (the dbos configuration is one)")
    if arguments.seed is None:
        arguments.seed = random.SystemRandom().randrange(2**32)
    arguments.configurations = [part.strip() for part in arguments.configurations.split(",")]
    try:
        arguments.concurrencies = [int(part) for part in arguments.concurrencies.split(",")]
    except ValueError:
        arguments.concurrencies = []
    if not arguments.concurrencies or min(arguments.concurrencies) < 1:
        parser.error("--concurrencies takes positive whole numbers, comma-separated")
    unknown = set(arguments.configurations) - set(CONFIGURATIONS)
    if unknown or not arguments.configurations:
        parser.error(f"--configurations takes names of {', '.join(CONFIGURATIONS)}")
    peers = [name for name in arguments.configurations if name in PEERS]
    if arguments.extra_reads < 0 or arguments.prefill < 0:
        parser.error("--extra-reads and --prefill take whole numbers from 0")
    if arguments.prefill and not {"serve", "serve+worker"} & set(arguments.configurations):
        parser.error("--prefill fills our PostgreSQL store: choose serve or serve+worker")
    if arguments.extra_reads and peers:
        parser.error("--extra-reads measures ours alone: leave the peer's configurations out")
    if peers and not Path(arguments.peer_python).exists():
        parser.error(f"no peer environment at {arguments.peer_python} (nox -s bench -- service)")
    admin_url = os.environ.get(ADMIN_URL_VARIABLE, DEFAULT_ADMIN_URL)
    signal.signal(signal.SIGTERM, _stop)
    began = time.monotonic()
    order = "alternating" if arguments.order == "alternate" else f"shuffled, seed {arguments.seed}"
    print(
        f"# bench_service: {arguments.runs} runs per window, {arguments.rounds} rounds, window "
        f"order {order}; 1-minute load average at the start {os.getloadavg()[0]:.2f}"
        + (f"; {arguments.extra_reads} extra reads per run" if arguments.extra_reads else "")
        + (f"; store prefilled with {arguments.prefill} runs" if arguments.prefill else "")
        + ("; SMOKE RUN: the figures mean nothing" if arguments.smoke else ""),
        flush=True,
    )
    try:
        results = bench(admin_url, arguments)
    except (BenchError, KitFailure) as error:
        print(f"bench_service: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench_service: interrupted; processes stopped, databases dropped", file=sys.stderr)
        return 130
    rows = summarise(results)
    names = labels(arguments.peer_processes)
    print(
        f"# {arguments.runs} runs per window, {arguments.rounds} rounds ({order}), medians over "
        f"the rounds; worker concurrency {arguments.worker_concurrency}, poll "
        f"{arguments.poll_ms} ms; peer start {arguments.peer_start}, peerN: "
        f"{arguments.peer_processes} peer processes; dbos-sqlite journal "
        f"{'WAL' if arguments.peer_sqlite_journal == 'wal' else 'DBOS default (rollback)'}"
    )
    print(table(rows, SPEED_COLUMNS, names))
    print("# CPU ms and transactions per finished run:")
    print(table(rows, COST_COLUMNS, names))
    print("\n".join("# " + line for line in LEGEND.splitlines()))
    samples = [s for by in results.values() for ss in by.values() for s in ss]
    other = sum(s.other_transactions for s in samples)
    loads = [value for s in samples for value in s.load]
    other_cpu = [s.other_cpu_percent for s in samples]
    print(
        f"# other databases of the server committed {other} transactions during the windows; "
        f"1-minute load average {min(loads):.2f}-{max(loads):.2f} over the windows; other "
        f"processes {min(other_cpu):.0f}-{max(other_cpu):.0f}% of a core; the whole "
        f"benchmark took {time.monotonic() - began:.0f} s"
    )
    print("\n".join(plain_lines(rows, arguments.runs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
