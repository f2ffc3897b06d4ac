"""`Runtime`: the deployment-wide dependencies of one process — the store, the sealer, the
definitions, the keys, the adapters, the clock, the wake-up, the run events and the journal —
one value shared by the run service and the worker loops, and what every action of the run
service needs besides: run visibility, the live bindings, and the one way a service action
applies an engine event inside the store's transaction (`decide`).

The service computes every transition with `engine.advance` inside the store's transaction
(the store's `Decide` callbacks), exactly as the worker does, so the API and the worker never
hold two implementations of a rule.
"""

from __future__ import annotations

import functools
import hmac
import os
import socket
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from coordinator_core.config.model import Deployment
from coordinator_core.definition.snapshot import Snapshot
from coordinator_core.engine import (
    CallStep,
    Definition,
    DefinitionError,
    Event,
    Instant,
    RunState,
    TimingPolicy,
    advance,
)
from coordinator_core.errors import CoordinatorError
from coordinator_core.outputs import prepare_validators
from coordinator_core.shell.adapters.registry import Adapters
from coordinator_core.shell.audit import AuditWriter
from coordinator_core.shell.clock import Clock, wall_clock
from coordinator_core.shell.deployment import bound_connections
from coordinator_core.shell.execution.attempt import Ports, WorkerAudit
from coordinator_core.shell.execution.codec import DefinitionCache, RunKeys, state_of, write_of
from coordinator_core.shell.execution.run_log import RunEvents
from coordinator_core.shell.execution.wakeup import Wakeup
from coordinator_core.shell.execution.worker import Worker
from coordinator_core.shell.observe import metrics
from coordinator_core.shell.package_files import LoadedPackage
from coordinator_core.shell.sealing import AdmissionKey, Sealer
from coordinator_core.shell.secrets import Secrets
from coordinator_core.shell.service.bindings import LiveBindings
from coordinator_core.shell.service.changes import RunChanges
from coordinator_core.shell.service.model import Caller, RunStatus, ServiceRefusal
from coordinator_core.shell.service.shapes import listed_status_of, run_status_of
from coordinator_core.shell.store import (
    Committed,
    Decide,
    ListedRun,
    RunSnapshot,
    RunWrite,
    Store,
    StoredRun,
)

__all__ = ["Runtime"]


@dataclass
class Runtime:
    """The dependencies of one deployment's process (see the module documentation). Build it
    with `Runtime.build`."""

    deployment: Deployment
    secrets: Secrets
    store: Store
    package: LoadedPackage
    clock: Clock
    audit: AuditWriter | None
    database_id: str
    key: AdmissionKey
    sealer: Sealer
    definitions: DefinitionCache
    definition: Definition
    adapters: Adapters
    policy: TimingPolicy
    bindings: LiveBindings
    binding: str
    """The binding digest of the served definition under this runtime file."""
    wakeup: Wakeup
    events: RunEvents
    changes: RunChanges
    """Who waits for a run's change in this process (06 §5.3); told by the store's observer."""
    stored_definitions: set[str] = field(default_factory=set)
    """Definition digests whose sealed snapshot this process saw committed (07 §7.7: stored
    once per digest; later admissions send none)."""

    @classmethod
    def build(
        cls,
        deployment: Deployment,
        secrets: Secrets,
        store: Store,
        package: LoadedPackage,
        *,
        clock: Clock | None = None,
        audit: AuditWriter | None = None,
        adapters: Adapters | None = None,
    ) -> Runtime:
        """The runtime of `deployment` over `store`, serving `package`.

        `clock` (default: the wall clock) is the instant every transaction uses; `audit` is
        the process's journal (worker `record` entries, `doctor.auditHead`, readiness),
        reporting its appends and fsyncs to the process's metrics (06 §14); `adapters`
        replaces the HTTP adapters built from the runtime file (tests). The store's observer
        tells the run events (the metrics and log lines of every committed change) and the
        run changes (the waiting reads of this process)."""
        settings = deployment.deployment
        if settings is None:
            raise ValueError("The runtime file has no deployment block.")
        if audit is not None:
            audit.observe(metrics.JournalMetrics())
        sealer = Sealer(secrets.state_keys, settings.database_id)
        definitions = DefinitionCache(sealer, store.reads.definition_snapshot)
        definition = package.definition  # restored and compiled once, at load
        definitions.add(package.snapshot, definition)
        definition.prepare_validators()  # the schemas, compiled before the first request
        for spec in definition.steps.values():
            if isinstance(spec, CallStep):
                prepare_validators(spec.alias.operation)
        bindings = LiveBindings(deployment, definitions, store)
        events = RunEvents(
            secrets.audit_references,
            definition.workflow_id,
            {
                step: spec.alias.operation.id
                for step, spec in definition.steps.items()
                if isinstance(spec, CallStep)
            },
        )
        changes = RunChanges()

        def committed(items: Sequence[Committed]) -> None:
            events.committed(items)
            changes.committed(items)

        store.observe(committed)
        return cls(
            deployment=deployment,
            secrets=secrets,
            store=store,
            package=package,
            clock=clock or wall_clock,
            audit=audit,
            database_id=settings.database_id,
            key=secrets.admission_key,
            sealer=sealer,
            definitions=definitions,
            definition=definition,
            adapters=adapters or Adapters(bound_connections(deployment, secrets)),
            policy=TimingPolicy(
                observation_floor_seconds=deployment.observation_minimum_interval_seconds
            ),
            bindings=bindings,
            binding=bindings.of(package.snapshot),
            wakeup=Wakeup(),
            events=events,
            changes=changes,
        )

    # -- the worker -----------------------------------------------------------------------------

    @functools.cached_property
    def ports(self) -> Ports:
        """What the worker loops (and their attempts, and an admission's claim) work with."""
        store = self.store
        return Ports(
            writes=store.writes,
            may_claim=store.may_claim,
            next_instants=store.reads.next_instants,
            note=store.note,
            announce=store.channel.announce,
            sealer=self.sealer,
            adapters=self.adapters,
            definitions=self.definitions,
            keys_for=self.keys_for,
            clock=self.clock,
            wakeup=self.wakeup,
            audit=(
                None
                if self.audit is None
                else WorkerAudit(self.audit, self.secrets.audit_references)
            ),
            binding_check=self.bindings.matches,
            ahead=ThreadPoolExecutor(max_workers=2, thread_name_prefix="credential-ahead"),
        )

    def worker(self, worker_id: str) -> Worker:
        """A worker loop sharing this runtime."""
        return Worker(worker_id, self.ports, events=self.events)

    @functools.cached_property
    def lease_owner(self) -> str:
        """Who holds the leases an admission of this process takes (07 §7.7 item 6)."""
        return f"{socket.gethostname()}:{os.getpid()}:admission"

    @property
    def lease_seconds(self) -> int:
        return self.ports.lease_seconds

    # -- time, keys, owners -----------------------------------------------------------------------

    def now(self) -> Instant:
        return self.clock()

    def keys_for(self, start_identity: str) -> RunKeys:
        return RunKeys(self.key, self.database_id, start_identity)

    def owner_of(self, caller: Caller) -> str:
        return self.key.owner_api(self.database_id, caller.issuer, caller.subject)

    # -- runs ---------------------------------------------------------------------------------------

    def definition_of(self, run: StoredRun) -> tuple[Snapshot, Definition] | None:
        """The definition `run` is pinned to, or None when its snapshot does not restore."""
        try:
            return self.definitions.restore(run)
        except (CoordinatorError, DefinitionError, ValueError):
            return None

    def _terminal_output(self, run: StoredRun) -> Any:
        assert run.terminal_output is not None
        try:
            return self.sealer.open(run.terminal_output, run_id=str(run.run_id), purpose="terminal")
        except (CoordinatorError, ValueError):
            return None

    def status(self, snapshot: RunSnapshot) -> RunStatus:
        return run_status_of(snapshot, self._terminal_output)

    def listed_status(self, listed: ListedRun) -> RunStatus:
        """The status of a run of a list page (`RunReads.list_runs`)."""
        return listed_status_of(listed, self._terminal_output)

    def visible(self, caller: Caller, run: StoredRun) -> bool:
        """06 §2: runs of the caller's workflows, owned by the caller unless it is an operator."""
        if run.workflow_id not in caller.workflows:
            return False
        return caller.operator or hmac.compare_digest(run.owner, self.owner_of(caller))

    def visible_snapshot(self, caller: Caller, run_id: uuid.UUID) -> RunSnapshot | None:
        snapshot = self.store.reads.get_run_snapshot(run_id)
        if snapshot is None or not self.visible(caller, snapshot.run):
            return None
        return snapshot

    def require(self, caller: Caller, run_id: uuid.UUID) -> RunSnapshot:
        snapshot = self.visible_snapshot(caller, run_id)
        if snapshot is None:
            raise ServiceRefusal("coordinator.command.run-absent")
        return snapshot

    @staticmethod
    def lease_active(snapshot: RunSnapshot, now: Instant) -> bool:
        current = snapshot.current
        return (
            current.record.state == "leased"
            and current.lease is not None
            and current.lease.expires_at > now
        )

    # -- transitions through the engine -------------------------------------------------------------

    def decide(
        self,
        now: Instant,
        event_of: Callable[[RunSnapshot, RunState], Event],
        refused: Callable[[str], ServiceRefusal | None] | None = None,
        answers: list[str | None] | None = None,
    ) -> Decide:
        """A store `Decide` that applies one engine event to the locked run."""

        def decide(snapshot: RunSnapshot) -> RunWrite | None:
            found = self.definition_of(snapshot.run)
            if found is None:
                raise ServiceRefusal("coordinator.command.retry-refused", "snapshot-incompatible")
            _, definition = found
            previous = state_of(self.sealer, snapshot)
            event = event_of(snapshot, previous)
            keys = self.keys_for(snapshot.run.start_identity)
            result = advance(definition, previous, event, now, keys)
            if answers is not None:
                answers.clear()
                answers.append(result.answer)
            if result.refused is not None:
                problem = refused(result.refused) if refused is not None else None
                if problem is not None:
                    raise problem
                return None
            return write_of(self.sealer, snapshot, previous, result.state, now)

        return decide
