"""The rules of a service process's background loops (09 §5 step 7, shared by `coordinator
serve` and `worker` in coordinator_core.shell.runtime.process), in-process and fast: the 30 s
deployment re-check stops the process on a definite failure and retries a check the store did
not let run, a worker loop that cannot reach the store backs off and never stops the process
(the loss and the recovery logged once), and a stop request ends the loops after the in-flight
tick. The process-level behaviour is in test_service.py and test_store_outage.py."""

from __future__ import annotations

import io
import json
import logging
import threading
import time
from collections.abc import Callable

import pytest

from coordinator_core.errors import CoordinatorError, Diagnostic
from coordinator_core.shell.execution.wakeup import Wakeup
from coordinator_core.shell.runtime import process
from coordinator_core.shell.runtime.outage import Backoff, StoreOutage
from coordinator_core.shell.runtime.service_log import ServiceLog


def _shutdown() -> tuple[process.Shutdown, io.StringIO]:
    stream = io.StringIO()
    return process.Shutdown(ServiceLog(stream)), stream


def _codes(stream: io.StringIO) -> list[str]:
    return [json.loads(line)["code"] for line in stream.getvalue().splitlines()]


UNAVAILABLE = "coordinator.command.store-unavailable"
AVAILABLE = "coordinator.service.store-available"


class _Store:
    """Answers the checks from a script of failure codes (None: the check passes); the check
    after the script stops the process."""

    def __init__(self, script: list[str | None], shutdown: process.Shutdown) -> None:
        self.script = script
        self.shutdown = shutdown
        self.checks = 0

    def verify(self) -> None:
        self.checks += 1
        if not self.script:
            self.shutdown.request()
            return
        failure = self.script.pop(0)
        if failure is not None:
            raise CoordinatorError(Diagnostic(failure))


@pytest.fixture(autouse=True)
def _quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process, "Backoff", lambda: Backoff(0.001, 0.004))


@pytest.mark.parametrize(
    "failure",
    [
        "coordinator.deployment.refused",
        "coordinator.deployment.schema-mismatch",
        "coordinator.command.state-key-custody",
    ],
)
def test_a_definite_failure_of_the_periodic_check_stops_the_process(
    monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    monkeypatch.setattr(process, "RECHECK_SECONDS", 0.01)
    shutdown, stream = _shutdown()
    store = _Store([None, failure, None], shutdown)
    process.recheck_loop(store, shutdown, shutdown.log)
    assert store.checks == 2
    assert shutdown.stop.is_set()
    assert shutdown.exit_code == 1
    assert failure in _codes(stream)


def test_a_periodic_check_the_store_did_not_let_run_is_retried_not_failed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(process, "RECHECK_SECONDS", 0.01)
    shutdown, stream = _shutdown()
    store = _Store([None, *[UNAVAILABLE] * 5, None], shutdown)
    process.recheck_loop(store, shutdown, shutdown.log)
    assert store.checks == 8
    assert shutdown.exit_code == 0
    assert _codes(stream) == [UNAVAILABLE, AVAILABLE, "coordinator.service.stopping"]


def test_the_periodic_check_ends_with_the_process() -> None:
    shutdown, _ = _shutdown()
    store = _Store([None] * 1000, shutdown)
    thread = threading.Thread(target=process.recheck_loop, args=(store, shutdown, shutdown.log))
    thread.start()
    shutdown.request()
    thread.join(5)
    assert not thread.is_alive()
    assert shutdown.exit_code == 0


class _Worker:
    def __init__(self, outcomes: list[object], shutdown: process.Shutdown) -> None:
        self.outcomes = outcomes
        self.shutdown = shutdown
        self.ticks = 0
        self.wakeup = Wakeup()

    holding = False

    def tick(self, *, seen: int | None = None) -> bool:
        self.ticks += 1
        if not self.outcomes:
            self.shutdown.request()
            return False
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return bool(outcome)

    def rests(self, seen: int) -> bool:
        return False

    def stop(self) -> None:
        pass


def _unavailable() -> CoordinatorError:
    return CoordinatorError(Diagnostic("coordinator.command.store-unavailable"))


def test_unreachable_ticks_never_stop_the_process_and_the_outage_is_logged_once() -> None:
    shutdown, stream = _shutdown()
    worker = _Worker([*[_unavailable()] * 6, True, False], shutdown)
    process.worker_loop(worker, 1, shutdown, shutdown.log)
    assert worker.ticks == 9  # every failed tick was followed by another, after a backoff
    assert shutdown.exit_code == 0
    assert _codes(stream) == [UNAVAILABLE, AVAILABLE, "coordinator.service.stopping"]


class _SharedStore:
    """One store for several loops: unreachable while `down` is set."""

    def __init__(self) -> None:
        self.down = threading.Event()
        self.lock = threading.Lock()
        self.failed: dict[int, int] = {}
        self.answered: dict[int, int] = {}

    def tick(self, loop: int) -> bool:
        with self.lock:
            if self.down.is_set():
                self.failed[loop] = self.failed.get(loop, 0) + 1
                raise _unavailable()
            self.answered[loop] = self.answered.get(loop, 0) + 1
        return False


class _LoopOf:
    def __init__(self, store: _SharedStore, loop: int, wakeup: Wakeup) -> None:
        self.store, self.loop, self.wakeup = store, loop, wakeup

    holding = False

    def tick(self, *, seen: int | None = None) -> bool:
        return self.store.tick(self.loop)

    def rests(self, seen: int) -> bool:
        return False

    def stop(self) -> None:
        pass


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def test_the_loops_of_a_process_log_one_outage_between_them() -> None:
    """Per process, not per loop: the loops that lose and regain the store share one
    `StoreOutage`, so the process logs one loss and one recovery."""
    shutdown, stream = _shutdown()
    outage = StoreOutage(shutdown.log)
    store = _SharedStore()
    store.down.set()
    wakeup = Wakeup()
    threads = [
        threading.Thread(
            target=process.worker_loop,
            args=(_LoopOf(store, loop, wakeup), 1, shutdown, shutdown.log, outage),
        )
        for loop in range(3)
    ]
    for thread in threads:
        thread.start()
    try:
        _until(lambda: all(store.failed.get(loop, 0) >= 3 for loop in range(3)), "failures")
        store.down.clear()
        _until(lambda: len(store.answered) == 3, "every loop to reach the store again")
    finally:
        shutdown.request()
        for thread in threads:
            thread.join(10)
    assert shutdown.exit_code == 0
    assert _codes(stream) == [UNAVAILABLE, AVAILABLE, "coordinator.service.stopping"]


def test_other_failed_ticks_are_logged_and_the_loop_goes_on() -> None:
    shutdown, stream = _shutdown()
    refused = CoordinatorError(Diagnostic("coordinator.deployment.refused"))
    worker = _Worker([refused, RuntimeError("canary-secret-value"), True, False], shutdown)
    process.worker_loop(worker, 1, shutdown, shutdown.log)
    assert worker.ticks == 5
    assert shutdown.exit_code == 0
    assert "canary-secret-value" not in stream.getvalue()
    assert "coordinator.deployment.refused" in _codes(stream)


def test_logging_records_lose_their_arguments() -> None:
    stream = io.StringIO()
    handler = serve_log_handler(stream)
    record = logging.LogRecord(
        "coordinator.worker", logging.WARNING, __file__, 1, "tick refused: %s", ("canary",), None
    )
    handler.emit(record)
    line = json.loads(stream.getvalue())
    assert set(line) == {"time", "level", "code", "message"}
    assert "canary" not in line["message"]
    assert line["level"] == "warning"


def serve_log_handler(stream: io.StringIO) -> logging.Handler:
    from coordinator_core.shell.runtime.service_log import JsonLineHandler

    return JsonLineHandler(ServiceLog(stream))


class _ScriptedWakeup(Wakeup):
    """Answers each idle wait from a script (True: rung, False: the poll ran out) at once, and
    counts the loop's calls for company."""

    def __init__(self, waits: list[bool]) -> None:
        super().__init__()
        self.waits = waits
        self.company = 0

    def idle(self, seen: int, poll: float) -> bool:
        return self.waits.pop(0) if self.waits else True

    def found_work(self) -> None:
        self.company += 1


def test_a_loop_asks_for_company_only_when_there_is_more_than_one_record() -> None:
    """Issue 9: a ring is for one record, and the loop it wakes works alone (at one run at a
    time, another loop woken with it only ran an empty claim per run). A loop that finds a
    second record in a row, or that found work by polling, wakes the other idle loops."""
    shutdown, _ = _shutdown()
    worker = _Worker([True, False, True, True, True, False, True, False, True, False], shutdown)
    wakeup = _ScriptedWakeup([True, False, True, True])
    worker.wakeup = wakeup
    process.worker_loop(worker, 1, shutdown, shutdown.log)
    # rung → one record (alone) · rung → three in a row (company at the second) · polled →
    # one record (company) · rung → one record (alone)
    assert wakeup.company == 2


class _HandedWorker(_Worker):
    """Ticks from a script of (worked, rests after it)."""

    def __init__(self, outcomes: list[tuple[bool, bool]], shutdown: process.Shutdown) -> None:
        super().__init__([worked for worked, _ in outcomes], shutdown)
        self.resting = [rests for _, rests in outcomes]
        self.asked: list[int] = []

    def rests(self, seen: int) -> bool:
        self.asked.append(seen)
        return self.resting.pop(0)


class _CountingWakeup(_ScriptedWakeup):
    def __init__(self, waits: list[bool]) -> None:
        super().__init__(waits)
        self.idles = 0

    def idle(self, seen: int, poll: float) -> bool:
        self.idles += 1
        return super().idle(seen, poll)


def test_a_loop_that_worked_a_handed_run_waits_for_a_ring_instead_of_claiming_again() -> None:
    """Issue 25: after the run an admission handed it, a loop that knows of nothing else
    claimable waits for the next ring (`Worker.rests`) rather than running a claim that
    finds nothing; when it may not rest, it ticks again at once, as before."""
    shutdown, _ = _shutdown()
    # handed run, rests → idle · handed run, may not rest → ticks at once · nothing → idle
    worker = _HandedWorker([(True, True), (True, False), (False, False)], shutdown)
    wakeup = _CountingWakeup([True, True, True])
    worker.wakeup = wakeup
    process.worker_loop(worker, 1, shutdown, shutdown.log)
    assert worker.ticks == 4  # the fourth finds the script empty and stops the process
    assert len(worker.asked) == 2  # asked after each tick that worked
    assert wakeup.idles == 2  # after the rest and after the tick that found nothing
    assert wakeup.company == 0
