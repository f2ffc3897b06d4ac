"""`StoreRunService`: the `RunService` of one deployment over its `Runtime` (06 §5–§9, 07 §6–§13).

A plain class with real methods: each runs the function of its concern (admission, views,
interventions, holds, deliveries) on the runtime and returns the 06 §11 shape. The methods are
synchronous (they run store transactions); the HTTP edge calls them from a thread
(`coordinator_api`). A core refusal leaves a method as the `ServiceRefusal` of its code, and an
action that may make a record claimable now wakes the idle worker loops of this process when it
returns (07 §7.7 item 4), refused or not.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Collection, Iterator

from coordinator_core.engine import Instant
from coordinator_core.errors import CoordinatorError
from coordinator_core.shell.service import admission, deliveries, holds, interventions, views
from coordinator_core.shell.service.changes import RunChanges
from coordinator_core.shell.service.model import (
    AdmissionRequest,
    AfterAnswer,
    AttemptPage,
    Caller,
    Doctor,
    EventAdmitted,
    EventDelivery,
    HoldState,
    ReconcileResult,
    RunAdmitted,
    RunInspection,
    RunList,
    RunQuery,
    RunStatus,
    ServiceRefusal,
)
from coordinator_core.shell.service.runtime import Runtime

__all__ = ["StoreRunService"]


@contextlib.contextmanager
def _refusals() -> Iterator[None]:
    """A core refusal becomes the `ServiceRefusal` of its code."""
    try:
        yield
    except ServiceRefusal:
        raise  # already one, with its reason
    except CoordinatorError as error:
        raise ServiceRefusal(error.code) from None


class StoreRunService:
    """`RunService` over one `Runtime` (see the module documentation)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._readiness = holds.Readiness(runtime)

    @contextlib.contextmanager
    def _changing(self, after_answer: AfterAnswer | None = None) -> Iterator[None]:
        """An action that may make a record claimable now: the loops are rung after it (or,
        with `after_answer`, the ring is handed to it, for once the caller has answered)."""
        try:
            with _refusals():
                yield
        finally:
            if after_answer is None:
                self.runtime.wakeup.ring()
            else:
                after_answer(self.runtime.wakeup.ring)

    # -- readiness and doctor ---------------------------------------------------------------------

    def ready(self) -> str | None:
        return self._readiness()

    def doctor(self) -> Doctor:
        with _refusals():
            return holds.doctor(self.runtime)

    # -- admission --------------------------------------------------------------------------------

    def admit(
        self, request: AdmissionRequest, *, after_answer: AfterAnswer | None = None
    ) -> RunAdmitted:
        run_events = self.runtime.events
        with self._changing(after_answer):
            try:
                admitted = admission.admit(self.runtime, request)
            except CoordinatorError as error:
                run_events.refused("api", error.code)
                raise
            run_events.admitted("api", admitted.run.run_id, created=admitted.created)
            return admitted

    def admit_event(
        self, delivery: EventDelivery, *, after_answer: AfterAnswer | None = None
    ) -> EventAdmitted:
        run_events = self.runtime.events
        with self._changing(after_answer):
            try:
                admitted = deliveries.admit_event(self.runtime, delivery)
            except CoordinatorError as error:
                run_events.refused("event", error.code)
                raise
            run_events.admitted("event", admitted.run_id, created=admitted.created)
            return admitted

    # -- reads ------------------------------------------------------------------------------------

    def get_run(self, caller: Caller, run_id: uuid.UUID) -> RunStatus | None:
        with _refusals():
            return views.get_run(self.runtime, caller, run_id)

    @property
    def changes(self) -> RunChanges:
        return self.runtime.changes

    def fingerprints(self, run_ids: Collection[uuid.UUID]) -> dict[uuid.UUID, str]:
        with _refusals():
            watched = self.runtime.store.reads.watched_runs(run_ids)
        return {run_id: run.fingerprint(run_id) for run_id, run in watched.items()}

    def list_runs(self, caller: Caller, query: RunQuery) -> RunList:
        with _refusals():
            return views.list_runs(self.runtime, caller, query)

    def inspect_run(self, caller: Caller, run_id: uuid.UUID) -> RunInspection | None:
        with _refusals():
            return views.inspect_run(self.runtime, caller, run_id)

    def step_attempts(
        self, caller: Caller, run_id: uuid.UUID, step: str, cursor: str | None, limit: int
    ) -> AttemptPage | None:
        with _refusals():
            return views.step_attempts(self.runtime, caller, run_id, step, cursor, limit)

    # -- run commands -----------------------------------------------------------------------------

    def cancel(self, caller: Caller, run_id: uuid.UUID, reason: str) -> RunStatus:
        with self._changing():
            return interventions.cancel(self.runtime, caller, run_id, reason)

    def retry_same(self, caller: Caller, run_id: uuid.UUID, reason: str) -> RunStatus:
        with self._changing():
            return interventions.retry_same(self.runtime, caller, run_id, reason)

    def reconcile(self, caller: Caller, run_id: uuid.UUID, reason: str) -> ReconcileResult:
        with self._changing():
            return interventions.reconcile(self.runtime, caller, run_id, reason)

    # -- holds, retention, completions ------------------------------------------------------------

    def restore_hold(self, reason: str) -> HoldState:
        with _refusals():
            return holds.restore_hold(self.runtime, reason)

    def release_restore_hold(self, reason: str) -> HoldState:
        with self._changing():
            return holds.release_restore_hold(self.runtime, reason)

    def release_admission_hold(self, reason: str) -> HoldState:
        with self._changing():
            return holds.release_admission_hold(self.runtime, reason)

    def retain(self, before: Instant, limit: int) -> int:
        with _refusals():
            return holds.retain(self.runtime, before, limit)

    def complete_review(self, connection: str, request_id: uuid.UUID) -> None:
        with self._changing():
            deliveries.complete_review(self.runtime, connection, request_id)
