"""The store-backed `RunService` and the worker factory of one deployment (06 §5–§9, 07 §6–§13).

`build_service(deployment, secrets, store, package)` wires everything the service and its
workers share (`ServiceContext`: the sealer, the admission key, the restored definitions, the
live bindings, the adapters, the wake-up). Each `RunService` method runs the function of its
concern (admission, views, recovery, holds, events) in a thread.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import datetime

from coordinator_core.engine import CallStep
from coordinator_core.errors import CoordinatorError
from coordinator_core.shell.adapters.registry import Adapters
from coordinator_core.shell.audit import AuditWriter
from coordinator_core.shell.deployment import Deployment, Secrets
from coordinator_core.shell.execution.codec import DefinitionCache
from coordinator_core.shell.execution.run_log import RunEvents
from coordinator_core.shell.execution.worker import Worker, WorkerAudit
from coordinator_core.shell.observe import metrics
from coordinator_core.shell.package_files import LoadedPackage
from coordinator_core.shell.sealing import Sealer
from coordinator_core.shell.service import admission, events, holds, recovery, views
from coordinator_core.shell.service.bindings import LiveBindings
from coordinator_core.shell.service.model import (
    AdmissionRequest,
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
)
from coordinator_core.shell.service.runtime import ServiceContext
from coordinator_core.shell.store import Store

__all__ = ["StoreRunService", "build_service"]


class StoreRunService:
    """`RunService` over one `Store` (see the module documentation)."""

    def __init__(
        self,
        deployment: Deployment,
        secrets: Secrets,
        store: Store,
        package: LoadedPackage,
        *,
        clock: Callable[[], datetime] | None = None,
        audit: AuditWriter | None = None,
        adapters: Adapters | None = None,
    ) -> None:
        self._context = ServiceContext(
            deployment, secrets, store, package, clock=clock, audit=audit, adapters=adapters
        )
        self._readiness = holds.Readiness(self._context)
        definition = self._context.definition
        self.events = RunEvents(
            secrets.audit_references,
            definition.workflow_id,
            {
                step: spec.alias.operation.id
                for step, spec in definition.steps.items()
                if isinstance(spec, CallStep)
            },
        )
        store.observe(self.events.committed)

    # -- shared pieces ----------------------------------------------------------------------------

    @property
    def sealer(self) -> Sealer:
        return self._context.sealer

    @property
    def definitions(self) -> DefinitionCache:
        return self._context.definitions

    @property
    def adapters(self) -> Adapters:
        return self._context.adapters

    @property
    def bindings(self) -> LiveBindings:
        return self._context.bindings

    def now(self) -> datetime:
        return self._context.now()

    # -- readiness and doctor ---------------------------------------------------------------------

    async def ready(self) -> str | None:
        result: str | None = await asyncio.to_thread(self._readiness)
        return result

    async def doctor(self) -> Doctor:
        result: Doctor = await self._context.call(lambda: holds.doctor(self._context))
        return result

    # -- admission --------------------------------------------------------------------------------

    async def admit(self, request: AdmissionRequest) -> RunAdmitted:
        def work() -> RunAdmitted:
            try:
                admitted = admission.admit(self._context, request)
            except CoordinatorError as error:
                self.events.refused("api", error.code)
                raise
            self.events.admitted("api", admitted.run.run_id, created=admitted.created)
            return admitted

        result: RunAdmitted = await self._context.changing(work)
        return result

    async def admit_event(self, delivery: EventDelivery) -> EventAdmitted:
        def work() -> EventAdmitted:
            try:
                admitted = events.admit_event(self._context, delivery)
            except CoordinatorError as error:
                self.events.refused("event", error.code)
                raise
            self.events.admitted("event", admitted.run_id, created=admitted.created)
            return admitted

        result: EventAdmitted = await self._context.changing(work)
        return result

    # -- reads ------------------------------------------------------------------------------------

    async def get_run(self, caller: Caller, run_id: uuid.UUID) -> RunStatus | None:
        result: RunStatus | None = await self._context.call(
            lambda: views.get_run(self._context, caller, run_id)
        )
        return result

    async def list_runs(self, caller: Caller, query: RunQuery) -> RunList:
        result: RunList = await self._context.call(
            lambda: views.list_runs(self._context, caller, query)
        )
        return result

    async def inspect_run(self, caller: Caller, run_id: uuid.UUID) -> RunInspection | None:
        result: RunInspection | None = await self._context.call(
            lambda: views.inspect_run(self._context, caller, run_id)
        )
        return result

    # -- run commands -----------------------------------------------------------------------------

    async def cancel(self, caller: Caller, run_id: uuid.UUID, reason: str) -> RunStatus:
        result: RunStatus = await self._context.changing(
            lambda: recovery.cancel(self._context, caller, run_id)
        )
        return result

    async def retry_same(self, caller: Caller, run_id: uuid.UUID, reason: str) -> RunStatus:
        result: RunStatus = await self._context.changing(
            lambda: recovery.retry_same(self._context, caller, run_id)
        )
        return result

    async def reconcile(self, caller: Caller, run_id: uuid.UUID, reason: str) -> ReconcileResult:
        result: ReconcileResult = await self._context.changing(
            lambda: recovery.reconcile(self._context, caller, run_id)
        )
        return result

    # -- holds, retention, completions ------------------------------------------------------------

    async def restore_hold(self, reason: str) -> HoldState:
        result: HoldState = await self._context.call(lambda: holds.restore_hold(self._context))
        return result

    async def release_restore_hold(self, reason: str) -> HoldState:
        result: HoldState = await self._context.changing(
            lambda: holds.release_restore_hold(self._context, reason)
        )
        return result

    async def release_admission_hold(self, reason: str) -> HoldState:
        result: HoldState = await self._context.changing(
            lambda: holds.release_admission_hold(self._context, reason)
        )
        return result

    async def retain(self, before: datetime, limit: int) -> int:
        result: int = await self._context.call(lambda: holds.retain(self._context, before, limit))
        return result

    async def complete_review(self, connection: str, request_id: uuid.UUID) -> None:
        await self._context.changing(
            lambda: events.complete_review(self._context, connection, request_id)
        )

    # -- workers ----------------------------------------------------------------------------------

    def worker(self, worker_id: str) -> Worker:
        """A worker sharing this service's store, sealer, adapters, definitions, live bindings
        and wake-up."""
        context = self._context
        audit = (
            None
            if context.audit is None
            else WorkerAudit(context.audit, context.secrets.audit_references)
        )
        return Worker(
            worker_id,
            context.store,
            context.sealer,
            context.adapters,
            context.definitions,
            context.keys_for,
            binding_check=context.bindings.matches,
            audit=audit,
            clock=context.clock,
            wakeup=context.wakeup,
            events=self.events,
        )


def build_service(
    deployment: Deployment,
    secrets: Secrets,
    store: Store,
    package: LoadedPackage,
    *,
    clock: Callable[[], datetime] | None = None,
    audit: AuditWriter | None = None,
    adapters: Adapters | None = None,
) -> tuple[StoreRunService, Callable[[str], Worker]]:
    """The `RunService` of this deployment over `store`, and `worker_for(worker_id)`.

    `clock` (default: the UTC wall clock) is the instant every transaction uses; `audit` is the
    process's journal (worker `record` entries, `doctor.auditHead`, readiness); `adapters`
    replaces the HTTP adapters built from the runtime file (tests). The journal reports its
    appends and fsyncs to the process's metrics (06 §14)."""
    if audit is not None:
        audit.observe(metrics.JournalMetrics())
    service = StoreRunService(
        deployment, secrets, store, package, clock=clock, audit=audit, adapters=adapters
    )
    return service, service.worker
