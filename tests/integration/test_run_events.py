"""A run's life in the metrics and the service log (06 §14, issue 12 item 6): one keyed JSON line
per admission, step outcome and status change, the counts that move with them, and no run id,
key or input value anywhere in either."""

from __future__ import annotations

import io
import json
import logging
import re
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from integration_support import APPLICATION_ID, Deployed, run_input

from coordinator_core.shell.execution.run_log import (
    ADMISSION_REFUSED,
    ADMITTED,
    STATUS_CHANGED,
    STEP_OUTCOME,
)
from coordinator_core.shell.observe import metrics
from coordinator_core.shell.runtime.service_log import JsonLineHandler, ServiceLog
from coordinator_core.shell.service import ServiceRefusal

REFERENCE = re.compile(r"hmac-sha256:[0-9a-f]{64}")


@pytest.fixture
def service_lines() -> Iterator[io.StringIO]:
    """The lines the service log would write for `coordinator.*` records, as written."""
    stream = io.StringIO()
    handler = JsonLineHandler(ServiceLog(stream))
    root = logging.getLogger("coordinator")
    previous = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)


def _lines(stream: io.StringIO, code: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    return [line for line in lines if line["code"] == code]


def _sample(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


def test_an_admission_its_steps_and_its_status_changes_each_leave_one_keyed_line(
    sqlite_deployed: Deployed, service_lines: io.StringIO
) -> None:
    deployed = sqlite_deployed
    workflow = deployed.workflow
    references = deployed.secrets.audit_references
    accepted = {"workflow": workflow, "origin": "api", "outcome": "accepted", "code": ""}
    replayed = accepted | {"outcome": "replayed"}
    refused = accepted | {"outcome": "refused", "code": "coordinator.definition.input"}
    delivered = {
        "workflow": workflow,
        "step_type": "call",
        "operation": "messaging.submit-message/v1",
        "outcome": "delivered",
    }
    finished = {"workflow": workflow, "status": "finished"}
    before = {
        "accepted": _sample("coordinator_admissions_total", **accepted),
        "replayed": _sample("coordinator_admissions_total", **replayed),
        "refused": _sample("coordinator_admissions_total", **refused),
        "delivered": _sample("coordinator_step_attempts_total", **delivered),
        "finished": _sample("coordinator_run_status_changes_total", **finished),
        "durations": _sample("coordinator_run_duration_seconds_count", **finished),
        "appends": _sample("coordinator_audit_appends_total"),
        "writes": _sample("coordinator_store_transaction_duration_seconds_count", mode="write"),
    }

    key = f"key-{uuid.uuid4()}"
    admitted = deployed.admit(run_input(), key=key)
    assert deployed.admit(run_input(), key=key).created is False
    with pytest.raises(ServiceRefusal):
        deployed.admit({"applicationId": 7}, key=f"key-{uuid.uuid4()}")
    run_id = admitted.run.run_id
    status, _ = deployed.drive(run_id)
    assert status.status == "finished", status

    run_ref = references.run(str(run_id))
    admissions = _lines(service_lines, ADMITTED)
    assert [(line["runRef"], line["outcome"], line["origin"]) for line in admissions] == [
        (run_ref, "accepted", "api"),
        (run_ref, "replayed", "api"),
    ]
    assert [line["refusal"] for line in _lines(service_lines, ADMISSION_REFUSED)] == [
        "coordinator.definition.input"
    ]
    outcomes = _lines(service_lines, STEP_OUTCOME)
    assert outcomes, "no step outcome was logged"
    assert {line["runRef"] for line in outcomes} == {run_ref}
    steps = {line["stepRef"]: line for line in outcomes}
    notify = references.step(str(run_id), "notify")
    assert steps[notify]["outcome"] == "delivered"
    assert steps[notify]["stepType"] == "call"
    assert steps[notify]["operation"] == "messaging.submit-message/v1"
    assert len([line for line in outcomes if line["stepRef"] == notify]) == 1
    changes = _lines(service_lines, STATUS_CHANGED)
    assert [(line["runRef"], line["previous"], line["status"]) for line in changes] == [
        (run_ref, "running", "finished")
    ]

    assert _sample("coordinator_admissions_total", **accepted) == before["accepted"] + 1
    assert _sample("coordinator_admissions_total", **replayed) == before["replayed"] + 1
    assert _sample("coordinator_admissions_total", **refused) == before["refused"] + 1
    assert _sample("coordinator_step_attempts_total", **delivered) == before["delivered"] + 1
    assert _sample("coordinator_run_status_changes_total", **finished) == before["finished"] + 1
    assert _sample("coordinator_run_duration_seconds_count", **finished) == before["durations"] + 1
    assert _sample("coordinator_audit_appends_total") > before["appends"]
    assert (
        _sample("coordinator_store_transaction_duration_seconds_count", mode="write")
        > before["writes"]
    )

    # Identifiers only as keyed references; no run id, key or input value in the clear.
    text = service_lines.getvalue()
    exposition = metrics.exposition().decode()
    for secret in (str(run_id), run_id.hex, key, APPLICATION_ID):
        assert secret not in text
        assert secret not in exposition
    for line in (*admissions, *outcomes, *changes):
        assert all(REFERENCE.fullmatch(line[name]) for name in line if name.endswith("Ref"))


def test_the_store_gauges_are_read_when_scraped(sqlite_deployed: Deployed) -> None:
    deployed = sqlite_deployed
    deployed.admit(run_input(send_after="2999-01-01T00:00:00Z"))
    metrics.watch_store(lambda: deployed.store.reads.gauges(deployed.runtime.now()))
    try:
        assert _sample("coordinator_store_gauges_available") == 1
        assert _sample("coordinator_runs", status="running") == 1
        assert _sample("coordinator_runs", status="finished") == 0
        assert _sample("coordinator_holds", hold="restore") == 0
        for _ in range(3):
            deployed.worker().tick()
        assert _sample("coordinator_parked_waits") == 1  # waiting until 2999
        assert _sample("coordinator_due_records") == 0
        assert _sample("coordinator_oldest_due_lag_seconds") == 0
    finally:
        metrics.watch_store(None)


def test_a_store_that_cannot_be_read_leaves_the_process_metrics_answering() -> None:
    def unreadable() -> metrics.StoreGauges:
        raise OSError("store away")

    metrics.watch_store(unreadable)
    try:
        text = metrics.exposition().decode()
        assert "coordinator_store_gauges_available 0.0" in text
        assert "coordinator_runs{" not in text
        assert 'coordinator_worker_loops{state="idle"}' in text
    finally:
        metrics.watch_store(None)
    assert "coordinator_store_gauges_available" not in metrics.exposition().decode()


def test_a_scrape_does_not_wait_for_another_that_is_still_reading_the_store() -> None:
    entered, release = threading.Event(), threading.Event()

    def slow() -> metrics.StoreGauges:
        entered.set()
        release.wait(30)
        return metrics.StoreGauges({"running": 4}, 0, 0.0, 0, {})

    metrics.watch_store(slow)
    first = threading.Thread(target=metrics.exposition)
    first.start()
    try:
        assert entered.wait(30)
        text = metrics.exposition().decode()  # returns although the first read still waits
        assert "coordinator_store_gauges_available 0.0" in text
    finally:
        release.set()
        first.join(30)
        metrics.watch_store(None)


def test_a_commit_of_the_worker_wakes_the_waiting_reads_of_its_run_in_this_process(
    sqlite_deployed: Deployed,
) -> None:
    # 06 §5.3, the waiting read: `RunChanges` is told by the store's observer on the committing
    # thread; a watcher of another run is not woken, an ended watch is not either, and the
    # stop wakes every watcher (and every later one at once).
    deployed = sqlite_deployed
    changes = deployed.service.changes
    run_id = deployed.admit(run_input(), key=f"key-{uuid.uuid4()}").run.run_id
    woken: list[str] = []
    unwatch = changes.watch(run_id, lambda: woken.append("run"))
    ended = changes.watch(run_id, lambda: woken.append("ended"))
    ended()
    other = changes.watch(uuid.uuid4(), lambda: woken.append("other"))
    before = deployed.service.fingerprints([run_id])[run_id]
    status, _ = deployed.drive(run_id)
    assert status.status == "finished"
    assert woken and set(woken) == {"run"}
    assert deployed.service.fingerprints([run_id]) == {run_id: status.fingerprint}
    assert status.fingerprint != before
    unwatch()
    woken.clear()
    changes.close()
    assert woken == ["other"]  # the stop wakes who still watches
    changes.watch(run_id, lambda: woken.append("late"))
    assert woken == ["other", "late"]
    other()
