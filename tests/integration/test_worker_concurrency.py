"""Two workers on one PostgreSQL store (07 §7.2, §14.2): every step record is carried out by
exactly one of them, so the sandbox receives exactly one submission per run."""

from __future__ import annotations

import threading
import time
from collections import Counter

from integration_support import Deployed, run_input

from coordinator_core.shell.execution.worker import Worker
from coordinator_core.shell.service import Runtime
from coordinator_core.shell.store import Store

RUNS = 12


def test_two_workers_never_both_carry_out_one_step(postgres_deployed: Deployed) -> None:
    deployed = postgres_deployed
    admitted = [deployed.admit(run_input()) for _ in range(RUNS)]
    # A second "process": its own store connection pool and its own service and caches.
    second = Store.open(deployed.runtime_url, deployed.identity, namespace=deployed.namespace)
    try:
        other = Runtime.build(deployed.deployment, deployed.secrets, second, deployed.package)
        workers = [deployed.runtime.worker("worker-a"), other.worker("worker-b")]
        worked: Counter[str] = Counter()
        errors: list[BaseException] = []
        stop = threading.Event()
        start = threading.Barrier(len(workers))

        def loop(worker: Worker) -> None:
            try:
                start.wait(timeout=10)
                idle_since = time.monotonic()
                while not stop.is_set():
                    if worker.tick():
                        worked[worker.worker_id] += 1
                        idle_since = time.monotonic()
                    elif time.monotonic() - idle_since > 2.0:
                        return
                    else:
                        time.sleep(0.01)
            except BaseException as error:  # reported to the test thread
                errors.append(error)

        threads = [threading.Thread(target=loop, args=(worker,)) for worker in workers]
        began = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        stop.set()
        elapsed = time.monotonic() - began
        assert not errors, errors
        statuses = [deployed.status(item.run.run_id) for item in admitted]
        assert [s.status if s else None for s in statuses] == ["finished"] * RUNS
        for item in admitted:
            submissions = deployed.products.submissions(deployed.command_key(item))
            assert len(submissions) == 1, submissions
        # One claim per run: it carries the run on to its end (07 §7.7), by one worker.
        assert sum(worked.values()) == RUNS
        assert all(worked[worker.worker_id] > 0 for worker in workers), worked
        print(f"{RUNS} runs, {dict(worked)} ticks, {elapsed:.2f}s")
    finally:
        second.close()
