"""What every action of the run service shares: the deployment's keys, sealer, definitions,
live bindings, adapters and clock, run visibility, and the one way a service action applies an
engine event inside the store's transaction (`decide`).

The service computes every transition with `engine.advance` inside the store's transaction
(the store's `Decide` callbacks), exactly as the worker does, so the API and the worker never
hold two implementations of a rule. Store calls are synchronous; `call` and `changing` run
them in a thread for the async `RunService` methods.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from coordinator_core.definition.snapshot import Snapshot
from coordinator_core.engine import (
    Definition,
    DefinitionError,
    Event,
    RunState,
    TimingPolicy,
    advance,
)
from coordinator_core.errors import CoordinatorError
from coordinator_core.shell.adapters.registry import Adapters, bound_connections
from coordinator_core.shell.audit import AuditWriter
from coordinator_core.shell.deployment import Deployment, Secrets
from coordinator_core.shell.execution.codec import DefinitionCache, RunKeys, state_of, write_of
from coordinator_core.shell.execution.wakeup import Wakeup
from coordinator_core.shell.package_files import LoadedPackage
from coordinator_core.shell.sealing import Sealer
from coordinator_core.shell.service.bindings import LiveBindings
from coordinator_core.shell.service.model import Caller, RunStatus, ServiceRefusal
from coordinator_core.shell.service.shapes import run_status_of
from coordinator_core.shell.store import (
    RunRow,
    RunSnapshot,
    RunWrite,
    Store,
    to_epoch_ms,
    truncate_ms,
)

__all__ = ["Decide", "ServiceContext"]

Decide = Callable[[RunSnapshot], RunWrite | None]


def _utc_now() -> datetime:
    return datetime.now(UTC)


class ServiceContext:
    """The shared pieces of one deployment's run service and its workers."""

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
        settings = deployment.deployment
        if settings is None:
            raise ValueError("The runtime file has no deployment block.")
        self.deployment = deployment
        self.secrets = secrets
        self.store = store
        self.package = package
        self.clock = clock or _utc_now
        self.audit = audit
        self.database_id = settings.database_id
        self.key = secrets.admission_key
        self.sealer = Sealer(secrets.state_keys, self.database_id)
        self.definitions = DefinitionCache(self.sealer, store.definition_snapshot)
        self.stored_definitions: set[str] = set()
        """Definition digests whose sealed snapshot this process saw committed (07 §7.7:
        stored once per digest; later admissions send none)."""
        self.definition = package.definition  # restored and compiled once, at load
        self.definitions.add(package.snapshot, self.definition)
        self.adapters = adapters or Adapters(bound_connections(deployment, secrets))
        self.policy = TimingPolicy(
            observation_floor_seconds=deployment.observation_minimum_interval_seconds
        )
        self.bindings = LiveBindings(deployment, self.definitions, store)
        self.binding = self.bindings.of(package.snapshot)
        self.wakeup = Wakeup()

    # -- time, keys, owners -----------------------------------------------------------------------

    def now(self) -> datetime:
        return truncate_ms(self.clock())

    def keys_for(self, start_identity: str) -> RunKeys:
        return RunKeys(self.key, self.database_id, start_identity)

    def owner_of(self, caller: Caller) -> str:
        return self.key.owner_api(self.database_id, caller.issuer, caller.subject)

    # -- runs ---------------------------------------------------------------------------------------

    def definition_of(self, run: RunRow) -> tuple[Snapshot, Definition] | None:
        """The definition `run` is pinned to, or None when its snapshot does not restore."""
        try:
            return self.definitions.restore(run)
        except (CoordinatorError, DefinitionError, ValueError):
            return None

    def _terminal_output(self, snapshot: RunSnapshot) -> Any:
        run = snapshot.run
        assert run.terminal_output is not None
        try:
            return self.sealer.open(
                json.loads(run.terminal_output), run_id=str(run.run_id), purpose="terminal"
            )
        except (CoordinatorError, ValueError):
            return None

    def status(self, snapshot: RunSnapshot) -> RunStatus:
        return run_status_of(snapshot, self._terminal_output)

    def visible(self, caller: Caller, run: RunRow) -> bool:
        """06 §2: runs of the caller's workflows, owned by the caller unless it is an operator."""
        if run.workflow_id not in caller.workflows:
            return False
        return caller.operator or hmac.compare_digest(run.owner, self.owner_of(caller))

    def visible_snapshot(self, caller: Caller, run_id: uuid.UUID) -> RunSnapshot | None:
        snapshot = self.store.get_run_snapshot(run_id)
        if snapshot is None or not self.visible(caller, snapshot.run):
            return None
        return snapshot

    def require(self, caller: Caller, run_id: uuid.UUID) -> RunSnapshot:
        snapshot = self.visible_snapshot(caller, run_id)
        if snapshot is None:
            raise ServiceRefusal("coordinator.command.run-absent")
        return snapshot

    @staticmethod
    def lease_active(snapshot: RunSnapshot, now: datetime) -> bool:
        current = snapshot.current
        return (
            current.state == "leased"
            and current.lease_expires_at is not None
            and current.lease_expires_at > now
        )

    # -- transitions through the engine -------------------------------------------------------------

    def decide(
        self,
        now: datetime,
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
            result = advance(definition, previous, event, to_epoch_ms(now), keys)
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

    # -- running store work off the event loop ------------------------------------------------------

    @staticmethod
    async def call(work: Callable[[], Any]) -> Any:
        """Run `work` in a thread; a core refusal becomes the `ServiceRefusal` of its code."""
        try:
            return await asyncio.to_thread(work)
        except ServiceRefusal:
            raise  # already one, with its reason
        except CoordinatorError as error:
            raise ServiceRefusal(error.code) from None

    async def changing(self, work: Callable[[], Any]) -> Any:
        """`call` for an action that may make a record claimable now: the idle worker loops of
        this process are woken when it returns (07 §7.7 item 4), refused or not."""
        try:
            return await self.call(work)
        finally:
            self.wakeup.ring()
