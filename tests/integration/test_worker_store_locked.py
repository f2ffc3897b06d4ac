"""SQLite: a store that stays `database is locked` beyond its busy timeout is ridden out by the
worker loop like any unreachable store (09 §5 step 7): the ticks fail with
`coordinator.command.store-unavailable`, the loop backs off, the process is never stopped, the
loss and the recovery are logged once each, and the run finishes once the lock is gone."""

from __future__ import annotations

import io
import json
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from integration_support import Deployed, Products, deploy, run_input
from support.instants import ms

from coordinator_core.engine import format_instant
from coordinator_core.shell.clock import wall_clock
from coordinator_core.shell.package_files import LoadedPackage
from coordinator_core.shell.runtime.outage import StoreOutage
from coordinator_core.shell.runtime.process import Shutdown, worker_loop
from coordinator_core.shell.runtime.service_log import ServiceLog
from coordinator_core.shell.store import dialect

BUSY_MS = 100  # the store's busy timeout, shortened so that a tick gives up within a second


@pytest.fixture
def quickly_busy(
    monkeypatch: pytest.MonkeyPatch, products: Products, package: LoadedPackage, tmp_path: Path
) -> Deployed:
    pragmas = tuple(
        f"PRAGMA busy_timeout={BUSY_MS}" if pragma.startswith("PRAGMA busy_timeout") else pragma
        for pragma in dialect._SQLITE_PRAGMAS
    )
    monkeypatch.setattr(dialect, "_SQLITE_PRAGMAS", pragmas)
    monkeypatch.setattr(dialect, "_SQLITE_BUSY_TIMEOUT_MS", BUSY_MS)
    return deploy(products, package, tmp_path)


class CountedOutage(StoreOutage):
    """The process's outage record, counting the looks that could not reach the store."""

    def __init__(self, log: ServiceLog) -> None:
        super().__init__(log)
        self.failures = 0

    def lost(self, began: float) -> None:
        self.failures += 1
        super().lost(began)


def _wait_for(condition: Callable[[], bool], seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _lines(stream: io.StringIO) -> list[dict[str, str]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_locked_sqlite_store_never_ends_the_loop_and_the_run_finishes_after(
    quickly_busy: Deployed,
) -> None:
    deployed = quickly_busy
    try:
        stream = io.StringIO()
        shutdown = Shutdown(ServiceLog(stream))
        outage = CountedOutage(shutdown.log)
        due = format_instant(wall_clock() + ms(seconds=1))
        admitted = deployed.admit(run_input(send_after=due))
        path = deployed.store.location.path
        assert path is not None
        # Another writer holds the write lock for longer than several ticks' retries.
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        loop = threading.Thread(
            target=worker_loop,
            args=(deployed.worker("locked"), 10, shutdown, shutdown.log, outage),
        )
        loop.start()
        try:
            assert _wait_for(lambda: outage.unreachable), "no tick found the store locked"
            # The lock stays: ticks keep failing, more than three in a row, and back off.
            assert _wait_for(lambda: outage.failures > 3), f"{outage.failures} failed ticks"
            assert loop.is_alive()
            assert not shutdown.stop.is_set()
            holder.rollback()
            deadline = time.monotonic() + 30
            while (status := deployed.status(admitted.run.run_id)) is not None:
                if status.status != "running" or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        finally:
            holder.close()
            shutdown.request()
            loop.join(timeout=20)
        assert status is not None and status.status == "finished"
        assert shutdown.exit_code == 0
        lines = _lines(stream)
        codes = [line["code"] for line in lines]
        assert codes.count("coordinator.command.store-unavailable") == 1, lines
        assert codes.count("coordinator.service.store-available") == 1, lines
        assert "coordinator.command.worker-unavailable" not in codes
    finally:
        deployed.store.close()
        deployed.audit.close()
