"""Issue 26: why a mapping stopped a step survives the store and reaches `inspect`: the step
row's `detail` (the engine's `FailureDetail` text) becomes the step's `mappingFailure`, on both
backends; a bare detailed code (as older rows hold it) still reads as that code."""

from __future__ import annotations

from dataclasses import replace

from store_support import T0, admit

from coordinator_core.engine.detail import FailureDetail
from coordinator_core.shell.service.shapes import step_status_of
from coordinator_core.shell.store import RunSnapshot, RunWrite, Store


def _stopped(store: Store, name: str, code: str, detail: str) -> FailureDetail | None:
    admitted = admit(store, name)

    def decide(snapshot: RunSnapshot) -> RunWrite:
        record = replace(
            snapshot.current,
            state="dead-lettered",
            failure_code=code,
            detail=detail,
            finished_at=T0,
        )
        run = replace(snapshot.run, status="failed", failure_code=code, completed_at=T0)
        return RunWrite(run, (record,))

    store.update_run(admitted.run_id, T0, decide)
    snapshot = store.get_run_snapshot(admitted.run_id)
    assert snapshot is not None
    return step_status_of(snapshot.current, {}).mapping_failure


def test_a_stored_failure_detail_is_the_inspected_mapping_failure(store: Store) -> None:
    failed = FailureDetail(
        "coordinator.function.execution", "property-of-unit", "eligibility_route", 3, 5
    )
    assert _stopped(store, "call", "mapping-invalid", failed.text()) == failed
    branch = FailureDetail.of_branch("renewl", ("renew", "new"))
    assert _stopped(store, "branch", "choice-invalid", branch.text()) == branch
    bare = _stopped(store, "bare", "mapping-invalid", "coordinator.mapping.timestamp")
    assert bare == FailureDetail("coordinator.mapping.timestamp")
