"""The process's Prometheus metrics (06 §14): counts, gauges and histograms with fixed-word labels.

Every family lives in one `CollectorRegistry` of the process (`REGISTRY`), served by `GET
/metrics` on `coordinator serve` and by the worker's own listener (`serve_worker_metrics`).
Labels are fixed words only: the workflow id, a step type, an operation id, an outcome, a
catalogue code, a run status, a loop state. A run id, a key, a subject or a value is never a
label, so the number of series does not grow with the number of runs.

Updates on the hot path are one child lookup and one increment or bucket search
(prometheus-client's own short lock, never held across I/O). The store gauges (runs by status,
due records, the lag of the oldest due record, parked waits, holds) are read from the store
when scraped (`StoreGauges`), in the scraping thread, never on a worker's path.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    start_http_server,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = [
    "CONTENT_TYPE",
    "REGISTRY",
    "JournalMetrics",
    "LoopState",
    "StoreGauges",
    "admission",
    "attempt_finished",
    "audit_appended",
    "audit_fsync",
    "exposition",
    "heap_settled",
    "run_finished",
    "serve",
    "status_changed",
    "step_outcome",
    "store_transaction",
    "watch_store",
]

CONTENT_TYPE: Final = CONTENT_TYPE_PLAIN_0_0_4
"""The text format every Prometheus version reads (the families' names need no escaping)."""
REGISTRY: Final = CollectorRegistry(auto_describe=False)

_FAST: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_RUN: Final = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0, 300.0, 900.0, 3600.0, 86400.0)

ADMISSIONS: Final = Counter(
    "coordinator_admissions",
    "Admissions decided by the run service, by origin, outcome and refusal code.",
    ("workflow", "origin", "outcome", "code"),
    registry=REGISTRY,
)
STATUS_CHANGES: Final = Counter(
    "coordinator_run_status_changes",
    "Committed changes of a run's status, by the status entered.",
    ("workflow", "status"),
    registry=REGISTRY,
)
STEP_ATTEMPTS: Final = Counter(
    "coordinator_step_attempts",
    "Committed step outcomes, by step type, operation id and outcome (07 §11 outcomes).",
    ("workflow", "step_type", "operation", "outcome"),
    registry=REGISTRY,
)
ATTEMPT_SECONDS: Final = Histogram(
    "coordinator_attempt_duration_seconds",
    "Claim to end of one leased step record's attempt, by step type.",
    ("workflow", "step_type"),
    buckets=_FAST,
    registry=REGISTRY,
)
RUN_SECONDS: Final = Histogram(
    "coordinator_run_duration_seconds",
    "Admission to a terminal status, by the terminal status.",
    ("workflow", "status"),
    buckets=_RUN,
    registry=REGISTRY,
)
AUDIT_APPENDS: Final = Counter(
    "coordinator_audit_appends", "Audit journal entries appended.", registry=REGISTRY
)
AUDIT_FSYNC_SECONDS: Final = Histogram(
    "coordinator_audit_fsync_duration_seconds",
    "One write and fsync of a batch of audit journal lines.",
    buckets=_FAST,
    registry=REGISTRY,
)
STORE_SECONDS: Final = Histogram(
    "coordinator_store_transaction_duration_seconds",
    "One committed store transaction, by mode (read or write).",
    ("mode",),
    buckets=_FAST,
    registry=REGISTRY,
)
WORKER_LOOPS: Final = Gauge(
    "coordinator_worker_loops",
    "Worker loops of this process by state (working, idle, backoff).",
    ("state",),
    registry=REGISTRY,
)

FROZEN_OBJECTS: Final = Gauge(
    "coordinator_process_frozen_objects",
    "Objects this process moved out of the garbage collector's way at the end of its start-up"
    " (gc.freeze): what a full collection no longer walks.",
    registry=REGISTRY,
)

_READ_MODE: Final = STORE_SECONDS.labels("read")
_WRITE_MODE: Final = STORE_SECONDS.labels("write")
for _state in ("working", "idle", "backoff"):
    WORKER_LOOPS.labels(_state)


def heap_settled(frozen: int) -> None:
    """The process's start-up heap was frozen: `frozen` objects (`process.settle_heap`)."""
    FROZEN_OBJECTS.set(frozen)


def admission(workflow: str, origin: str, outcome: str, code: str = "") -> None:
    """One admission the run service decided: `accepted`, `replayed` or `refused` (`code`)."""
    ADMISSIONS.labels(workflow, origin, outcome, code).inc()


def status_changed(workflow: str, status: str) -> None:
    STATUS_CHANGES.labels(workflow, status).inc()


def run_finished(workflow: str, status: str, seconds: float) -> None:
    RUN_SECONDS.labels(workflow, status).observe(max(0.0, seconds))


def step_outcome(workflow: str, step_type: str, operation: str, outcome: str) -> None:
    STEP_ATTEMPTS.labels(workflow, step_type, operation, outcome).inc()


def attempt_finished(workflow: str, step_type: str, seconds: float) -> None:
    ATTEMPT_SECONDS.labels(workflow, step_type).observe(max(0.0, seconds))


def audit_appended(count: int) -> None:
    AUDIT_APPENDS.inc(count)


def audit_fsync(seconds: float) -> None:
    AUDIT_FSYNC_SECONDS.observe(seconds)


class JournalMetrics:
    """The journal's observer (`AuditWriter.observe`): lines appended and fsync latency."""

    def appended(self, count: int) -> None:
        audit_appended(count)

    def flushed(self, seconds: float) -> None:
        audit_fsync(seconds)


def store_transaction(seconds: float, *, read_only: bool) -> None:
    (_READ_MODE if read_only else _WRITE_MODE).observe(seconds)


class LoopState:
    """One worker loop's state in `coordinator_worker_loops`: moving it is a decrement of the
    old state and an increment of the new one."""

    __slots__ = ("_state",)

    def __init__(self) -> None:
        self._state: str | None = None

    def enter(self, state: str) -> None:
        if state == self._state:
            return
        if self._state is not None:
            WORKER_LOOPS.labels(self._state).dec()
        WORKER_LOOPS.labels(state).inc()
        self._state = state

    def leave(self) -> None:
        if self._state is not None:
            WORKER_LOOPS.labels(self._state).dec()
            self._state = None


# -- gauges read from the store when scraped --------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoreGauges:
    """What one scrape reads from the store: runs by reported status, due records (pending and
    due now), the age of the oldest of them, parked waits and the holds."""

    statuses: dict[str, int]
    due: int
    oldest_due_lag_seconds: float
    parked_waits: int
    holds: dict[str, int]


class _StoreCollector(Collector):
    """Yields the store gauges of the store being watched; nothing while none is, or while it
    cannot be read or another scrape is reading it (then `coordinator_store_gauges_available`
    is 0)."""

    def __init__(self) -> None:
        self._read: Callable[[], StoreGauges] | None = None
        self._lock = threading.Lock()  # one scrape reads the store at a time

    def watch(self, read: Callable[[], StoreGauges] | None) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        read = self._read
        if read is None:
            return
        gauges: StoreGauges | None = None
        # A scrape while another still reads (a store that is slow or away) does not wait for
        # it, so scrapes never pile up on the threads the service's own calls use.
        if self._lock.acquire(blocking=False):
            try:
                gauges = read()
            except Exception:  # a store away: the scrape still answers the process metrics
                gauges = None
            finally:
                self._lock.release()
        available = GaugeMetricFamily(
            "coordinator_store_gauges_available",
            "1 when this scrape could read the store gauges, else 0.",
            value=0 if gauges is None else 1,
        )
        yield available
        if gauges is None:
            return
        runs = GaugeMetricFamily(
            "coordinator_runs", "Runs in the store by reported status.", labels=("status",)
        )
        for status, count in sorted(gauges.statuses.items()):
            runs.add_metric((status,), count)
        yield runs
        yield GaugeMetricFamily(
            "coordinator_due_records",
            "Step records pending and due now (claimable).",
            value=gauges.due,
        )
        yield GaugeMetricFamily(
            "coordinator_oldest_due_lag_seconds",
            "How long the oldest due record has been due (0 when none is).",
            value=gauges.oldest_due_lag_seconds,
        )
        yield GaugeMetricFamily(
            "coordinator_parked_waits",
            "Wait records (wait-until, wait-for) pending or leased.",
            value=gauges.parked_waits,
        )
        holds = GaugeMetricFamily(
            "coordinator_holds",
            "Holds on the store: restore and admissions 1 when set, else 0; restore-review the "
            "runs under restore review.",
            labels=("hold",),
        )
        for hold, value in sorted(gauges.holds.items()):
            holds.add_metric((hold,), value)
        yield holds


_STORE_COLLECTOR: Final = _StoreCollector()
REGISTRY.register(_STORE_COLLECTOR)


def watch_store(read: Callable[[], StoreGauges] | None) -> None:
    """Read the store gauges with `read` at every scrape (None: none are exposed)."""
    _STORE_COLLECTOR.watch(read)


def exposition() -> bytes:
    """The text exposition of every family (reads the store gauges: call it off the event
    loop)."""
    return generate_latest(REGISTRY)


def serve(host: str, port: int) -> tuple[WSGIServer, threading.Thread]:
    """`coordinator worker --metrics-bind`: a listener answering the exposition on its own
    daemon thread (prometheus-client's server); raises OSError when it cannot bind."""
    server, thread = start_http_server(port, addr=host, registry=REGISTRY)
    return server, thread
