"""The rules of a service process's background loops (09 §5 step 7, shared by `coordinator
serve` and `worker` in coordinator_core.shell.process), in-process and fast: the 30 s
deployment re-check stops the process on failure, a worker loop that cannot reach the store
three ticks in a row stops it with `worker-unavailable`, and a stop request ends the loops
after the in-flight tick. The process-level behaviour is in test_service.py."""

from __future__ import annotations

import io
import json
import logging
import threading

import pytest

from coordinator_core.errors import CoordinatorError, Diagnostic
from coordinator_core.shell import process
from coordinator_core.shell.service_log import ServiceLog
from coordinator_core.shell.wakeup import Wakeup


def _shutdown() -> tuple[process.Shutdown, io.StringIO]:
    stream = io.StringIO()
    return process.Shutdown(ServiceLog(stream)), stream


def _codes(stream: io.StringIO) -> list[str]:
    return [json.loads(line)["code"] for line in stream.getvalue().splitlines()]


class _Store:
    def __init__(self, failure: str | None) -> None:
        self.failure = failure
        self.checks = 0

    def verify(self) -> None:
        self.checks += 1
        if self.failure is not None and self.checks >= 2:
            raise CoordinatorError(Diagnostic(self.failure))


@pytest.mark.parametrize(
    ("failure", "exit_code"),
    [("coordinator.deployment.refused", 1), ("coordinator.command.store-unavailable", 3)],
)
def test_a_failed_periodic_check_stops_the_process(
    monkeypatch: pytest.MonkeyPatch, failure: str, exit_code: int
) -> None:
    monkeypatch.setattr(process, "RECHECK_SECONDS", 0.01)
    shutdown, stream = _shutdown()
    store = _Store(failure)
    process.recheck_loop(store, shutdown, shutdown.log)
    assert shutdown.stop.is_set()
    assert shutdown.exit_code == exit_code
    assert failure in _codes(stream)


def test_the_periodic_check_ends_with_the_process() -> None:
    shutdown, _ = _shutdown()
    store = _Store(None)
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

    def tick(self) -> bool:
        self.ticks += 1
        if not self.outcomes:
            self.shutdown.request()
            return False
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return bool(outcome)


def _unavailable() -> CoordinatorError:
    return CoordinatorError(Diagnostic("coordinator.command.store-unavailable"))


def test_three_unreachable_ticks_in_a_row_stop_the_process() -> None:
    shutdown, stream = _shutdown()
    worker = _Worker([_unavailable(), _unavailable(), True, *[_unavailable()] * 3], shutdown)
    process.worker_loop(worker, 1, shutdown, shutdown.log)
    assert worker.ticks == 6
    assert shutdown.exit_code == 3
    assert _codes(stream).count("coordinator.command.worker-unavailable") == 1


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
    from coordinator_core.shell.service_log import JsonLineHandler

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
