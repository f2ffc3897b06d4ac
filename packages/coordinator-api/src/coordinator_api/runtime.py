"""The store-backed `RunService` and the worker factory of one deployment (06 §5–§9, 07 §6–§13).

`build_service(deployment, secrets, store, package)` wires everything the service and its
workers share: the sealer, the admission key, the restored definitions, the adapters. The
service computes every transition with `engine.advance` inside the store's transaction (the
store's `Decide` callbacks), exactly as the worker does, so the API and the worker never hold
two implementations of a rule. Store calls are synchronous; the async methods run them in a
thread.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Final, cast

from coordinator_api.runtime_shapes import effects_of, run_status_of, step_status_of
from coordinator_api.service import (
    RUN_STATUSES,
    Admission,
    Admitted,
    BlockReason,
    Caller,
    Doctor,
    DoctorState,
    EventAdmitted,
    EventDelivery,
    HoldState,
    ReconcileResult,
    Recovery,
    RunInspection,
    RunPage,
    RunQuery,
    RunService,
    RunStatus,
    ServiceRefusal,
)
from coordinator_core.adapters import PreparedCommand
from coordinator_core.adapters.base import CommandFormatError
from coordinator_core.adapters.events import receipt_event
from coordinator_core.adapters.registry import Adapters, bound_connections
from coordinator_core.audit import ZERO_HASH, AuditWriter
from coordinator_core.definition.package import LoadedPackage, restore_snapshot
from coordinator_core.definition.snapshot import Snapshot
from coordinator_core.deployment import Deployment, DeploymentRefused, Secrets, binding_digest
from coordinator_core.engine import (
    Admitted as AdmittedEvent,
)
from coordinator_core.engine import (
    CallStep,
    CancelRequested,
    Definition,
    DefinitionError,
    EngineInvariantError,
    Event,
    LookupReceipt,
    Policy,
    ReconcileRequested,
    RestoreHold,
    RetrySame,
    RunState,
    WaitForStep,
    advance,
    reconcile_blocked_by,
    retry_blocked_by,
    to_canonical,
)
from coordinator_core.errors import CoordinatorError
from coordinator_core.functions.errors import FunctionError
from coordinator_core.sealing import Sealer
from coordinator_core.store import (
    Admission as StoreAdmission,
)
from coordinator_core.store import (
    RunPosition,
    RunRow,
    RunSnapshot,
    RunWrite,
    Store,
    from_epoch_ms,
    to_epoch_ms,
    truncate_ms,
)
from coordinator_core.values import JsonBoundsError, canonical_json, check_json_value
from coordinator_core.worker import Wakeup, Worker, WorkerAudit
from coordinator_core.worker_state import (
    DefinitionCache,
    RunKeys,
    row_of,
    seal_value,
    sealed_snapshot,
    state_of,
    write_of,
)

__all__ = ["StoreRunService", "build_service"]

RECONCILE_BUDGET_SECONDS: Final = 10.0
READY_CACHE_SECONDS: Final = 30.0
_UNBOUND: Final = "unbound"
_EVENT_HOLD_CODES: Final = frozenset(
    {"coordinator.command.restore-admissions-held", "coordinator.command.restore-hold"}
)


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _refusal(error: CoordinatorError) -> ServiceRefusal:
    return ServiceRefusal(error.code)


@dataclass(frozen=True)
class _Cursor:
    admitted_at: int
    run_id: uuid.UUID


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
        settings = deployment.deployment
        if settings is None:
            raise ValueError("The runtime file has no deployment block.")
        self._deployment = deployment
        self._secrets = secrets
        self._store = store
        self._package = package
        self._clock = clock or _utc_now
        self._audit = audit
        self._database_id = settings.database_id
        self._key = secrets.admission_key
        self._sealer = Sealer(secrets.state_keys, self._database_id)
        self._definitions = DefinitionCache(self._sealer)
        self._definition = Definition.from_snapshot(package.snapshot)
        self._definitions.add(package.snapshot, self._definition)
        self._adapters = adapters or Adapters(bound_connections(deployment, secrets))
        self._policy = Policy(
            observation_floor_seconds=deployment.observation_minimum_interval_seconds
        )
        self._bindings: dict[str, str] = {}
        self._bindings_lock = threading.Lock()
        self._ready_until = 0.0
        self._ready_bindings = False
        self._ready_lock = threading.Lock()
        self._wakeup = Wakeup()
        self._binding = self._binding_for_snapshot(package.snapshot)

    # -- shared pieces ----------------------------------------------------------------------------

    @property
    def sealer(self) -> Sealer:
        return self._sealer

    @property
    def definitions(self) -> DefinitionCache:
        return self._definitions

    @property
    def adapters(self) -> Adapters:
        return self._adapters

    def now(self) -> datetime:
        return truncate_ms(self._clock())

    def keys_for(self, start_identity: str) -> RunKeys:
        return RunKeys(self._key, self._database_id, start_identity)

    def owner_of(self, caller: Caller) -> str:
        return self._key.owner_api(self._database_id, caller.issuer, caller.subject)

    def _binding_for_snapshot(self, snapshot: Snapshot) -> str:
        """05 §10 for a snapshot under the current runtime file; `unbound` when a connection
        it uses is no longer bound (never equal to a recorded digest)."""
        digest = snapshot.definition_digest
        with self._bindings_lock:
            known = self._bindings.get(digest)
        if known is not None:
            return known
        try:
            computed = binding_digest(self._deployment, snapshot.workflow)
        except DeploymentRefused:
            computed = _UNBOUND
        with self._bindings_lock:
            self._bindings[digest] = computed
        return computed

    def binding_matches(self, run: RunRow, snapshot: Snapshot) -> bool:
        return self._binding_for_snapshot(snapshot) == run.binding_digest

    def _binding_for_digest(self, definition_digest: str) -> str:
        found = self._definitions.known(definition_digest)
        if found is not None:
            return self._binding_for_snapshot(found[0])
        stored = self._store.definition_snapshot(definition_digest)
        if stored is None:
            return _UNBOUND
        run_id, sealed = stored
        try:
            document = self._sealer.open(json.loads(sealed), run_id=str(run_id), purpose="snapshot")
            snapshot = restore_snapshot(canonical_json(document))
            self._definitions.add(snapshot)
        except (CoordinatorError, DefinitionError, ValueError):
            return _UNBOUND
        return self._binding_for_snapshot(snapshot)

    def _bindings_ok(self, pairs: frozenset[tuple[str, str]]) -> bool:
        """The live-binding check (05 §10): every unsettled run's recorded binding digest still
        equals the digest recomputed from the current runtime file."""
        return all(self._binding_for_digest(ddigest) == bdigest for ddigest, bdigest in pairs)

    def _definition_of(self, run: RunRow) -> tuple[Snapshot, Definition] | None:
        try:
            return self._definitions.restore(run)
        except (CoordinatorError, DefinitionError, ValueError):
            return None

    def _terminal_output(self, snapshot: RunSnapshot) -> Any:
        run = snapshot.run
        assert run.terminal_output is not None
        try:
            return self._sealer.open(
                json.loads(run.terminal_output), run_id=str(run.run_id), purpose="terminal"
            )
        except (CoordinatorError, ValueError):
            return None

    def _status(self, snapshot: RunSnapshot) -> RunStatus:
        return run_status_of(snapshot, self._terminal_output)

    def _visible(self, caller: Caller, run: RunRow) -> bool:
        """06 §2: runs of the caller's workflows, owned by the caller unless it is an operator."""
        if run.workflow_id not in caller.workflows:
            return False
        return caller.operator or hmac.compare_digest(run.owner, self.owner_of(caller))

    def _visible_snapshot(self, caller: Caller, run_id: uuid.UUID) -> RunSnapshot | None:
        snapshot = self._store.get_run_snapshot(run_id)
        if snapshot is None or not self._visible(caller, snapshot.run):
            return None
        return snapshot

    def _require(self, caller: Caller, run_id: uuid.UUID) -> RunSnapshot:
        snapshot = self._visible_snapshot(caller, run_id)
        if snapshot is None:
            raise ServiceRefusal("coordinator.command.run-absent")
        return snapshot

    @staticmethod
    async def _call(work: Callable[[], Any]) -> Any:
        try:
            return await asyncio.to_thread(work)
        except CoordinatorError as error:
            raise _refusal(error) from None

    async def _changing(self, work: Callable[[], Any]) -> Any:
        """`_call` for an action that may make a record claimable now: the idle worker loops of
        this process are woken when it returns (07 §7.7 item 4), refused or not."""
        try:
            return await self._call(work)
        finally:
            self._wakeup.ring()

    # -- readiness and doctor ---------------------------------------------------------------------

    def _ready(self) -> bool:
        try:
            control = self._store.verify()
        except CoordinatorError:
            return False
        if control.restore_hold or control.admissions_hold:
            return False
        if self._audit is not None and not self._audit.ready:
            return False
        with self._ready_lock:
            if time.monotonic() >= self._ready_until:
                try:
                    self._ready_bindings = self._bindings_ok(
                        self._store.unsettled_bindings(self.now())
                    )
                except CoordinatorError:
                    self._ready_bindings = False
                self._ready_until = time.monotonic() + READY_CACHE_SECONDS
            return self._ready_bindings

    async def ready(self) -> bool:
        result: bool = await asyncio.to_thread(self._ready)
        return result

    def _doctor(self) -> Doctor:
        summary = self._store.summary(self.now())
        state = DoctorState(
            database_id=summary.database_id,
            store="postgresql" if summary.store == "postgresql" else "sqlite",
            schema_version=summary.schema_version,
            active_package_digest=summary.active_package_digest or "",
            active_revision=summary.active_revision or "",
            restore_hold=summary.restore_hold,
            admissions_hold=summary.admissions_hold,
            audit_ready=self._audit.ready if self._audit is not None else True,
            restore_review=summary.restore_review,
            statuses={status: int(summary.statuses.get(status, 0)) for status in RUN_STATUSES},
            unknown_effects=summary.unknown_effects,
            waits=summary.waits,
            oldest_due_at=summary.oldest_due_at,
            terminal_payloads=summary.terminal_payloads,
            oldest_terminal_payload_at=summary.oldest_terminal_payload_at,
            audit_head=self._audit.head if self._audit is not None else ZERO_HASH,
        )
        ready = summary.active_package_digest == self._package.package_digest
        return Doctor(activation_ready=ready, state=state)

    async def doctor(self) -> Doctor:
        result: Doctor = await self._call(self._doctor)
        return result

    # -- admission (06 §5.1, 07 §6.1) -------------------------------------------------------------

    def _store_admission(
        self,
        *,
        run_input: Any,
        owner: str,
        start_identity: str,
        input_digest: str,
        origin: str,
        trigger: str | None,
        expected_revision: str | None,
        input_problem: Exception | None,
        now: datetime,
    ) -> StoreAdmission:
        snapshot = self._package.snapshot
        definition = self._definition
        run_id = uuid.uuid4()
        keys = self.keys_for(start_identity)
        admitted = advance(
            definition, None, AdmittedEvent.of(run_input, self._policy), to_epoch_ms(now), keys
        )
        first = admitted.state.current
        return StoreAdmission(
            run_id=run_id,
            start_identity=start_identity,
            input_digest=input_digest,
            owner=owner,
            origin="event" if origin == "event" else "api",
            trigger=trigger,
            workflow_id=definition.workflow_id,
            workflow_version=str(snapshot.workflow["project"]["version"]),
            revision=definition.revision,
            definition_digest=definition.definition_digest,
            binding_digest=self._binding,
            snapshot=sealed_snapshot(self._sealer, snapshot, run_id),
            input=seal_value(self._sealer, run_input, run_id, "input"),
            policy=self._policy.to_json(),
            deadline_seconds=definition.deadline_seconds,
            first_step=row_of(self._sealer, run_id, first, None, None, now),
            bindings_ok=self._bindings_ok,
            expected_revision=expected_revision,
            input_problem=input_problem,
        )

    def _admit(self, admission: Admission) -> Admitted:
        caller = admission.caller
        owner = self.owner_of(caller)
        start = self._key.start_identity(
            self._database_id, owner, admission.workflow, admission.idempotency_key
        )
        digest = self._key.input_digest_api(start, admission.revision, admission.input)
        problem = (
            None
            if self._definition.input_valid(admission.input)
            else ServiceRefusal("coordinator.definition.input")
        )
        now = self.now()
        prepared = self._store_admission(
            run_input=admission.input,
            owner=owner,
            start_identity=start,
            input_digest=digest,
            origin="api",
            trigger=None,
            expected_revision=admission.revision,
            input_problem=problem,
            now=now,
        )
        result = self._store.admit(prepared, now)
        snapshot = self._store.get_run_snapshot(result.run.run_id)
        assert snapshot is not None
        return Admitted(self._status(snapshot), result.created)

    async def admit(self, admission: Admission) -> Admitted:
        result: Admitted = await self._changing(lambda: self._admit(admission))
        return result

    def _admit_event(self, delivery: EventDelivery) -> EventAdmitted:
        holds = self._store.hold_state()
        if holds.restore_hold or holds.admissions_hold:
            raise ServiceRefusal("coordinator.event.admissions-held")
        owner = self._key.owner_event(self._database_id, delivery.source_name, delivery.trigger)
        start = self._key.start_identity(
            self._database_id, owner, delivery.workflow, delivery.event_id
        )
        digest = self._key.input_digest_event(start, delivery.body)
        existing = self._store.find_run(start)
        if existing is not None:
            if existing.input_digest != digest:
                raise ServiceRefusal("idempotency.key-reused")
            return EventAdmitted(existing.run_id, created=False)
        definition = self._definition
        trigger = definition.triggers.get(delivery.trigger)
        source = self._deployment.event_sources.get(delivery.source_name)
        if trigger is None or source is None:
            raise ServiceRefusal("coordinator.event.trigger-unknown")
        # TODO(event time): EventDelivery carries no ce-time; the argument omits `time`.
        argument = {
            "id": delivery.event_id,
            "source": source.source,
            "type": trigger.event,
            "data": delivery.body,
        }
        try:
            mapped = definition.evaluate(trigger.input, event=argument)
        except FunctionError:
            raise ServiceRefusal("coordinator.event.mapping-invalid") from None
        try:
            check_json_value(mapped)
        except JsonBoundsError:
            raise ServiceRefusal("coordinator.event.input-invalid") from None
        if not definition.input_valid(mapped):
            raise ServiceRefusal("coordinator.event.input-invalid")
        now = self.now()
        prepared = self._store_admission(
            run_input=mapped,
            owner=owner,
            start_identity=start,
            input_digest=digest,
            origin="event",
            trigger=delivery.trigger,
            expected_revision=None,
            input_problem=None,
            now=now,
        )
        try:
            result = self._store.admit(prepared, now)
        except CoordinatorError as error:
            if error.code in _EVENT_HOLD_CODES:
                raise ServiceRefusal("coordinator.event.admissions-held") from None
            raise
        return EventAdmitted(result.run.run_id, result.created)

    async def admit_event(self, delivery: EventDelivery) -> EventAdmitted:
        result: EventAdmitted = await self._changing(lambda: self._admit_event(delivery))
        return result

    # -- reads (06 §5.2–§5.4) ---------------------------------------------------------------------

    async def get_run(self, caller: Caller, run_id: uuid.UUID) -> RunStatus | None:
        def work() -> RunStatus | None:
            snapshot = self._visible_snapshot(caller, run_id)
            return None if snapshot is None else self._status(snapshot)

        result: RunStatus | None = await self._call(work)
        return result

    def _cursor_mac(self, payload: str, caller: Caller) -> str:
        return self._key.commitment("cursor", [self._database_id, payload, self.owner_of(caller)])[
            :32
        ]

    def _encode_cursor(self, position: RunPosition, query: RunQuery, caller: Caller) -> str:
        payload = to_canonical(
            {
                "v": 1,
                "a": to_epoch_ms(position.admitted_at),
                "r": str(position.run_id),
                "s": query.status,
                "w": query.workflow,
            }
        )
        text = base64.urlsafe_b64encode(payload.encode()).rstrip(b"=").decode("ascii")
        return f"{text}.{self._cursor_mac(payload, caller)}"

    def _decode_cursor(self, cursor: str, query: RunQuery, caller: Caller) -> RunPosition:
        invalid = ServiceRefusal("coordinator.request.cursor-invalid")
        text, _, mac = cursor.partition(".")
        try:
            payload = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode("utf-8")
            data = json.loads(payload)
        except (binascii.Error, ValueError):
            raise invalid from None
        if not hmac.compare_digest(mac, self._cursor_mac(payload, caller)):
            raise invalid
        if not isinstance(data, dict) or data.get("v") != 1:
            raise invalid
        if data.get("s") != query.status or data.get("w") != query.workflow:
            raise invalid
        try:
            return RunPosition(from_epoch_ms(int(data["a"])), uuid.UUID(str(data["r"])))
        except (KeyError, TypeError, ValueError):
            raise invalid from None

    def _list_runs(self, caller: Caller, query: RunQuery) -> RunPage:
        after = None if query.cursor is None else self._decode_cursor(query.cursor, query, caller)
        page = self._store.list_runs(
            owner=None if caller.operator else self.owner_of(caller),
            workflows=caller.workflows,
            status=query.status,
            workflow=query.workflow,
            after=after,
            limit=query.limit,
        )
        statuses: list[RunStatus] = []
        for run in page.runs:
            snapshot = self._store.get_run_snapshot(run.run_id)
            if snapshot is not None:
                statuses.append(self._status(snapshot))
        cursor = None if page.next is None else self._encode_cursor(page.next, query, caller)
        return RunPage(statuses, cursor)

    async def list_runs(self, caller: Caller, query: RunQuery) -> RunPage:
        result: RunPage = await self._call(lambda: self._list_runs(caller, query))
        return result

    def _lease_active(self, snapshot: RunSnapshot, now: datetime) -> bool:
        current = snapshot.current
        return (
            current.state == "leased"
            and current.lease_expires_at is not None
            and current.lease_expires_at > now
        )

    def _recovery(self, snapshot: RunSnapshot, now: datetime) -> Recovery:
        run = snapshot.run
        found = self._definition_of(run)
        if found is None:
            reason: BlockReason = (
                "cancelled"
                if run.status in ("cancelled", "cancelled-after-effect")
                else "terminal"
                if run.status in ("finished", "expired")
                else "snapshot-incompatible"
            )
            return Recovery(False, reason, False, reason)
        snap, definition = found
        try:
            state = state_of(self._sealer, snapshot)
        except CoordinatorError:
            return Recovery(False, "snapshot-incompatible", False, "snapshot-incompatible")
        binding = self.binding_matches(run, snap)
        lease = self._lease_active(snapshot, now)
        retry = retry_blocked_by(
            definition,
            state,
            RetrySame(
                binding_unchanged=binding,
                payload_erased=run.payload_erased,
                lease_active=lease,
            ),
            to_epoch_ms(now),
        )
        reconcile = reconcile_blocked_by(
            definition,
            state,
            ReconcileRequested(
                binding_unchanged=binding, payload_erased=run.payload_erased, lease_active=lease
            ),
        )
        spec = definition.steps.get(run.current_step)
        operation = spec.alias.operation if isinstance(spec, CallStep) else None
        return Recovery(
            retry_allowed=retry is None,
            retry_blocked_by=cast(BlockReason | None, retry),
            reconcile_allowed=reconcile is None,
            reconcile_blocked_by=cast(BlockReason | None, reconcile),
            operation=operation,
        )

    def _inspection(self, snapshot: RunSnapshot) -> RunInspection:
        found = self._definition_of(snapshot.run)
        waits: dict[str, tuple[str, str]] = {}
        if found is not None:
            snap, definition = found
            raw_steps = snap.workflow.get("steps") or {}
            for step_id, spec in definition.steps.items():
                if isinstance(spec, WaitForStep):
                    raw = raw_steps.get(step_id) or {}
                    waits[step_id] = (spec.call, str(raw.get("completion", "")))
        return RunInspection(
            run=self._status(snapshot),
            steps=[step_status_of(row, waits) for row in snapshot.steps],
            effects=effects_of(snapshot),
            recovery=self._recovery(snapshot, self.now()),
        )

    async def inspect_run(self, caller: Caller, run_id: uuid.UUID) -> RunInspection | None:
        def work() -> RunInspection | None:
            snapshot = self._visible_snapshot(caller, run_id)
            return None if snapshot is None else self._inspection(snapshot)

        result: RunInspection | None = await self._call(work)
        return result

    # -- transitions through the engine -----------------------------------------------------------

    def _decide(
        self,
        now: datetime,
        event_of: Callable[[RunSnapshot, RunState], Event],
        refused: Callable[[str], ServiceRefusal | None] | None = None,
        answers: list[str | None] | None = None,
    ) -> Callable[[RunSnapshot], RunWrite | None]:
        """A store `Decide` that applies one engine event to the locked run."""

        def decide(snapshot: RunSnapshot) -> RunWrite | None:
            found = self._definition_of(snapshot.run)
            if found is None:
                raise ServiceRefusal("coordinator.command.retry-refused", "snapshot-incompatible")
            _, definition = found
            previous = state_of(self._sealer, snapshot)
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
            return write_of(self._sealer, snapshot, previous, result.state, now)

        return decide

    async def cancel(self, caller: Caller, run_id: uuid.UUID, reason: str) -> RunStatus:
        def work() -> RunStatus:
            self._require(caller, run_id)
            now = self.now()
            snapshot = self._store.request_cancel(
                run_id, now, self._decide(now, lambda _s, _p: CancelRequested())
            )
            if snapshot is None:
                raise ServiceRefusal("coordinator.command.run-absent")
            return self._status(snapshot)

        result: RunStatus = await self._changing(work)
        return result

    async def retry_same(self, caller: Caller, run_id: uuid.UUID, reason: str) -> RunStatus:
        def event_of(snapshot: RunSnapshot, _previous: RunState) -> Event:
            found = self._definition_of(snapshot.run)
            return RetrySame(
                binding_unchanged=found is not None
                and self.binding_matches(snapshot.run, found[0]),
                snapshot_restores=found is not None,
                payload_erased=snapshot.run.payload_erased,
                lease_active=self._lease_active(snapshot, now),
            )

        def refused(reason: str) -> ServiceRefusal:
            return ServiceRefusal("coordinator.command.retry-refused", cast(BlockReason, reason))

        def work() -> RunStatus:
            self._require(caller, run_id)
            snapshot = self._store.update_run(
                run_id, now, self._decide(now, event_of, refused), admission_lock=True
            )
            if snapshot is None:
                raise ServiceRefusal("coordinator.command.run-absent")
            return self._status(snapshot)

        now = self.now()
        result: RunStatus = await self._changing(work)
        return result

    def _reconcile(self, caller: Caller, run_id: uuid.UUID) -> ReconcileResult:
        snapshot = self._require(caller, run_id)
        run = snapshot.run
        now = self.now()
        found = self._definition_of(run)
        if found is None:
            raise ServiceRefusal("coordinator.command.reconcile-refused", "not-uncertain")
        snap, definition = found
        previous = state_of(self._sealer, snapshot)
        request = ReconcileRequested(
            binding_unchanged=self.binding_matches(run, snap),
            payload_erased=run.payload_erased,
            lease_active=self._lease_active(snapshot, now),
        )
        asked = advance(
            definition, previous, request, to_epoch_ms(now), self.keys_for(run.start_identity)
        )
        if asked.refused is not None:
            if asked.refused == "no-receipt":
                raise ServiceRefusal("coordinator.command.reconciliation-unavailable")
            raise ServiceRefusal(
                "coordinator.command.reconcile-refused", cast(BlockReason, asked.refused)
            )
        lookup = next(c for c in asked.commands if isinstance(c, LookupReceipt))
        spec = definition.steps.get(lookup.step)
        action = spec.alias.action if isinstance(spec, CallStep) else None
        record = previous.current
        try:
            prepared = PreparedCommand.from_frozen(
                lookup.command, action=action, preparation=record.preparation
            )
        except CommandFormatError:
            raise ServiceRefusal("coordinator.command.reconcile-refused", "not-uncertain") from None
        outcome = self._adapters.lookup_receipt(
            prepared, attempt_deadline=time.monotonic() + RECONCILE_BUDGET_SECONDS
        )
        answer_event = receipt_event(lookup.step, lookup.generation, outcome)
        answers: list[str | None] = []

        def event_of(locked: RunSnapshot, fresh: RunState) -> Event:
            current = fresh.current
            if (
                current.step != lookup.step
                or current.command != lookup.command
                or self._lease_active(locked, later)
            ):
                raise ServiceRefusal("coordinator.command.reconcile-raced")
            return answer_event

        def refused(_reason: str) -> ServiceRefusal:
            return ServiceRefusal("coordinator.command.reconcile-raced")

        later = self.now()
        after = self._store.update_run(
            run_id, later, self._decide(later, event_of, refused, answers)
        )
        if after is None:
            raise ServiceRefusal("coordinator.command.run-absent")
        answer = answers[-1] if answers else None
        result = {
            "confirmed": "settled",
            "receipt-expired": "receipt-expired",
            "unavailable": "unavailable",
        }.get(answer or "", "unresolved")
        return ReconcileResult(cast(Any, result), self._inspection(after))

    async def reconcile(self, caller: Caller, run_id: uuid.UUID, reason: str) -> ReconcileResult:
        result: ReconcileResult = await self._changing(lambda: self._reconcile(caller, run_id))
        return result

    # -- holds, retention, completions (06 §7, §9) ------------------------------------------------

    def _review(self, now: datetime) -> Callable[[RunSnapshot], RunWrite | None]:
        inner = self._decide(now, lambda _s, _p: RestoreHold())

        def review(snapshot: RunSnapshot) -> RunWrite | None:
            try:
                return inner(snapshot)
            except (ServiceRefusal, EngineInvariantError):
                # Without a definition the run is still held for review (07 §12 step 3).
                previous = state_of(self._sealer, snapshot)
                held = replace(previous, restore_review=True)
                return write_of(self._sealer, snapshot, previous, held, now)

        return review

    @staticmethod
    def _hold(state: Any) -> HoldState:
        return HoldState(state.restore_hold, state.admissions_hold, state.restore_review)

    async def restore_hold(self, reason: str) -> HoldState:
        def work() -> HoldState:
            now = self.now()
            return self._hold(self._store.set_restore_hold(now, self._review(now)))

        result: HoldState = await self._call(work)
        return result

    async def release_restore_hold(self, reason: str) -> HoldState:
        def work() -> HoldState:
            evidence = self._secrets.audit_references.restore_evidence(reason)
            return self._hold(self._store.release_restore_hold(evidence))

        result: HoldState = await self._changing(work)
        return result

    async def release_admission_hold(self, reason: str) -> HoldState:
        def work() -> HoldState:
            evidence = self._secrets.audit_references.admission_recovery(reason)
            return self._hold(
                self._store.release_admission_hold(
                    evidence, admission_history_complete=True, prior_deployment_fenced=True
                )
            )

        result: HoldState = await self._changing(work)
        return result

    async def retain(self, before: datetime, limit: int) -> int:
        def work() -> int:
            return self._store.erase_settled_before(before, limit, self.now())

        result: int = await self._call(work)
        return result

    async def complete_review(self, connection: str, request_id: uuid.UUID) -> None:
        def work() -> None:
            reference = self._key.completion_reference(
                self._database_id, connection, str(request_id)
            )
            self._store.advance_completion_waits(
                reference, self.now(), self._policy.observation_floor_seconds
            )

        await self._changing(work)

    # -- workers ----------------------------------------------------------------------------------

    def worker(self, worker_id: str) -> Worker:
        """A worker sharing this service's store, sealer, adapters and definition cache."""
        audit = (
            None
            if self._audit is None
            else WorkerAudit(self._audit, self._secrets.audit_references)
        )
        return Worker(
            worker_id,
            self._store,
            self._sealer,
            self._adapters,
            self._definitions,
            self.keys_for,
            binding_check=self.binding_matches,
            audit=audit,
            clock=self._clock,
            wakeup=self._wakeup,
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
) -> tuple[RunService, Callable[[str], Worker]]:
    """The `RunService` of this deployment over `store`, and `worker_for(worker_id)`.

    `clock` (default: the UTC wall clock) is the instant every transaction uses; `audit` is the
    process's journal (worker `record` entries, `doctor.auditHead`, readiness); `adapters`
    replaces the HTTP adapters built from the runtime file (tests)."""
    service = StoreRunService(
        deployment, secrets, store, package, clock=clock, audit=audit, adapters=adapters
    )
    return service, service.worker
