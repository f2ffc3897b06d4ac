"""Issue 26: why a mapping stopped a step survives the store and reaches `inspect`: the record's
`detail` (the engine's `FailureDetail` text) is kept, and the step's view names it as its
`mapping_failure`, on both backends; a bare detailed code (as older rows hold it) still reads
as that code."""

from __future__ import annotations

from store_support import T0, admit, changed, changed_run

from coordinator_core.engine.detail import FailureDetail
from coordinator_core.shell.service.shapes import step_status_of
from coordinator_core.shell.store import RunSnapshot, RunWrite, Store


def _stopped(store: Store, name: str, code: str, detail: str) -> FailureDetail | None:
    admitted = admit(store, name)

    def decide(snapshot: RunSnapshot) -> RunWrite:
        record = changed(
            snapshot.current,
            state="dead-lettered",
            failure_code=code,
            detail=detail,
            finished_at=T0,
        )
        run = changed_run(snapshot.run, status="failed", failure_code=code, completed_at=T0)
        return RunWrite(run, (record,))

    store.writes.update_run(admitted.run_id, T0, decide)
    snapshot = store.reads.get_run_snapshot(admitted.run_id)
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
