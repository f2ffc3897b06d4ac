"""The worker: claim → advance → write-ahead → dispatch → record; one step record per tick (07 §7).

The worker drives the same `engine.advance` the scenario runner drives; only the answers to the
engine's I/O commands differ (real adapters, the store's clock). Every durable decision is taken
inside a store transaction by re-running `advance` on the run as it is locked there, overlaid
with the lease holder's own record (`worker_state.overlay`), so a cancel that arrived mid-attempt
is seen by the very transaction that would otherwise send or finish:

* the **claim** transaction (store) leases one record and journals the attempt intent; the same
  transaction recovers one lapsed lease (T28/T29) and expires one overdue record (T26/T27);
* the **freeze** fence commits the sealed command (and later its preparation) before anything
  is sent (guarantee 4);
* the **pre-send** fence runs `ReadyToSend` under the locks: a stopping run, a passed deadline or
  a review refuses to send; otherwise a mutation or evaluation is marked `dispatched`/`sent` and
  the dispatch intent journaled, and only after that commit does the request leave (guarantee 5);
* the **finish** transaction, fenced by (run, step, generation, attempt, lease token), records
  the outcome, the run status and the next record.

Nothing is guessed: an exception after the pre-send commit leaves the record `leased` and
`dispatched`; when its lease lapses the next claim makes it `unknown` (T28) and the run waits
for an operator. A fence that finds the lease gone (`StaleLease`) discards the attempt.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Literal

from coordinator_core.adapters import AccessToken, PreparedCommand
from coordinator_core.adapters.base import CommandFormatError
from coordinator_core.adapters.events import (
    call_event,
    credential_event,
    observation_event,
    preparation_event,
)
from coordinator_core.adapters.registry import Adapters
from coordinator_core.audit import (
    AuditReferences,
    AuditWriter,
    WorkerOutcome,
    worker_correlation,
    worker_record,
)
from coordinator_core.definition.snapshot import Snapshot
from coordinator_core.engine import (
    Advance,
    AttemptRefused,
    CallStep,
    Command,
    DeadlinePassed,
    Definition,
    Dispatch,
    Event,
    FreezeCommand,
    FreezePreparation,
    LeaseLapsed,
    MarkMaySend,
    Observe,
    ObtainCredential,
    Prepare,
    ReadyToSend,
    RunState,
    StepRecord,
    Work,
    advance,
    unrestorable,
)
from coordinator_core.engine.definition import DefinitionError, EngineInvariantError
from coordinator_core.errors import CoordinatorError
from coordinator_core.sealing import Sealer
from coordinator_core.store import (
    LEASE_SECONDS,
    Claim,
    Recovery,
    RunRow,
    RunSnapshot,
    RunWrite,
    StaleLease,
    Store,
    to_epoch_ms,
    truncate_ms,
)
from coordinator_core.worker_state import DefinitionCache, RunKeys, overlay, state_of, write_of

__all__ = ["ATTEMPT_BUDGET_SECONDS", "BindingCheck", "Wakeup", "Worker", "WorkerAudit"]

logger = logging.getLogger("coordinator.worker")

ATTEMPT_BUDGET_SECONDS: Final = 10.0
"""07 §16: claim → result."""

BindingCheck = Callable[[RunRow, Snapshot], bool]
"""Whether the binding digest recomputed for the run's snapshot equals the run's (07 §7.4
step 4); False → `binding-conflict`."""

_DURABLE: Final = (FreezeCommand, FreezePreparation, MarkMaySend)
_IO: Final = (Prepare, ObtainCredential, Dispatch, Observe)
_Mode = Literal["memory", "progress", "finish"]


@dataclass(frozen=True)
class WorkerAudit:
    """The journal the worker appends its `record` entries to (07 §11), and the keyed
    references it writes instead of identifiers."""

    writer: AuditWriter
    references: AuditReferences


class Wakeup:
    """In-process wake-ups (07 §7.7 item 4): whatever makes a record claimable now (an
    admission, a retry-same, a settled reconcile, a cancel, the stop of the process) rings it,
    and an idle worker loop waits on it rather than sleeping out its whole poll interval.

    A loop reads `generation` before its tick and waits with it, so a ring that came while
    the tick was looking (and found nothing) is not lost. Polling stays the fallback: other
    processes, and records that fall due later, are found by the next poll.
    """

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._generation = 0

    @property
    def generation(self) -> int:
        return self._generation

    def ring(self) -> None:
        with self._condition:
            self._generation += 1
            self._condition.notify_all()

    def wait(self, seen: int, timeout: float) -> bool:
        """Wait until a ring after `seen`, or `timeout` seconds; True when rung."""
        with self._condition:
            return self._condition.wait_for(lambda: self._generation != seen, timeout)


class _Discard(Exception):
    """The engine refused the event under the locks: nothing is written, the attempt ends."""


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _outcome_of(record: StepRecord | None, recovery: Recovery | None = None) -> WorkerOutcome:
    """The worker outcome (07 §11) a finished transition leaves on its record."""
    if recovery == "lease-lapsed":
        return "lease-lapsed"
    if record is None:
        return "pending"
    if record.state == "delivered":
        return (
            "timed-out"
            if record.route is not None and record.route.kind == "timeout"
            else "delivered"
        )
    if record.state == "pending":
        return "retry" if record.type == "call" else "pending"
    if record.state == "dead-lettered":
        return "timed-out" if record.failure_code == "wait-timed-out" else "dead-lettered"
    if record.state == "unknown":
        return "unknown"
    if record.state == "expired":
        return "expired"
    if record.state == "cancelled":
        return "cancelled"
    return "pending"


class Worker:
    """One worker loop's state: its id, the store, the sealer, the adapters and the caches.

    `tick()` processes exactly one step record (or recovers/expires one and claims nothing);
    `run_loop()` repeats it until stopped. A `Worker` is used by one thread at a time; several
    workers may share the store (PostgreSQL) and the `DefinitionCache`.
    """

    def __init__(
        self,
        worker_id: str,
        store: Store,
        sealer: Sealer,
        adapters: Adapters,
        definitions: DefinitionCache,
        keys_for: Callable[[str], RunKeys],
        *,
        binding_check: BindingCheck | None = None,
        audit: WorkerAudit | None = None,
        clock: Callable[[], datetime] | None = None,
        lease_seconds: int = LEASE_SECONDS,
        attempt_budget_seconds: float = ATTEMPT_BUDGET_SECONDS,
        wakeup: Wakeup | None = None,
    ) -> None:
        self.worker_id = worker_id
        self._store = store
        self._sealer = sealer
        self._adapters = adapters
        self._definitions = definitions
        self._keys_for = keys_for
        self._binding_check = binding_check
        self._audit = audit
        self._clock = clock or _utc_now
        self._lease_seconds = lease_seconds
        self._budget = attempt_budget_seconds
        self.wakeup = wakeup or Wakeup()

    # -- the loop -----------------------------------------------------------------------------

    def run_loop(self, stop: threading.Event, poll_ms: int = 100) -> None:
        """07 §7.1: tick; when a tick found no work, wait for a wake-up or `poll_ms`. Returns
        once `stop` is set (the in-flight tick finishes first; ring `wakeup` to end the wait).
        An unexpected error is logged by type only and the loop goes on after a pause (the
        record it was working on is left to its lease)."""
        pause = max(10, min(poll_ms, 10_000)) / 1000
        while not stop.is_set():
            seen = self.wakeup.generation
            try:
                worked = self.tick()
            except CoordinatorError as error:
                logger.warning("worker tick refused: %s", error.code)
                worked = False
            except Exception as error:  # the loop must survive one bad tick
                logger.error("worker tick failed: %s", type(error).__name__)
                worked = False
            if not worked and not stop.is_set():
                self.wakeup.wait(seen, pause)

    def tick(self, now: datetime | None = None) -> bool:
        """Process exactly one step record; False when nothing was claimable (idle).

        `now` fixes the instant of every transaction of this tick (tests); by default each
        transaction reads the clock afresh (fences and lease checks use the current time)."""
        fixed = None if now is None else truncate_ms(now)

        def clock() -> datetime:
            return fixed if fixed is not None else truncate_ms(self._clock())

        started = time.monotonic()
        correlation = str(uuid.uuid4())
        claim_now = clock()
        claim = self._store.claim_due_step(
            self.worker_id,
            claim_now,
            self._lease_seconds,
            recover=lambda snapshot, kind: self._recover(snapshot, kind, claim_now, correlation),
            journal=lambda leased: self._journal(
                correlation, "attempt", leased.run_id, leased.step, leased.generation,
                leased.attempt, "intent",
            ),
        )  # fmt: skip
        if claim is None:
            return False
        try:
            _Attempt(self, claim, clock, started + self._budget, correlation).run()
        except StaleLease:
            logger.info("worker attempt discarded: lease-stale")
        except _Discard:
            logger.info("worker attempt discarded: not-applicable")
        return True

    # -- recoveries inside the claim transaction ------------------------------------------------

    def _recover(
        self, snapshot: RunSnapshot, kind: Recovery, now: datetime, correlation: str
    ) -> RunWrite | None:
        """07 §7.2 steps 2–3 through the engine (`LeaseLapsed` → T28/T29, `DeadlinePassed` →
        T26/T27). Never raises: a run whose data cannot be read is left for its next turn."""
        try:
            previous = state_of(self._sealer, snapshot)
            record = previous.current
            now_ms = to_epoch_ms(now)
            try:
                _, definition = self._definitions.restore(snapshot.run)
            except (CoordinatorError, DefinitionError):
                if kind == "lease-lapsed" and (record.dispatched or record.uncertain):
                    return None  # T28 needs no definition, but T35 keeps the code: leave it
                result = unrestorable(previous, now_ms)
            else:
                keys = self._keys_for(snapshot.run.start_identity)
                event: Event = (
                    LeaseLapsed(record.step) if kind == "lease-lapsed" else DeadlinePassed()
                )
                result = advance(definition, previous, event, now_ms, keys)
            if result.refused is not None:
                return None
            write = write_of(self._sealer, snapshot, previous, result.state, now)
            after = result.state.record(record.step)
            self._journal(
                correlation, "transition", snapshot.run.run_id, record.step,
                record.generation, record.attempt,
                _outcome_of(after, kind) if kind == "lease-lapsed" else _outcome_of(after),
            )  # fmt: skip
            return write
        except (CoordinatorError, DefinitionError, EngineInvariantError, ValueError) as error:
            logger.warning("worker recovery skipped: %s", type(error).__name__)
            return None

    # -- audit ----------------------------------------------------------------------------------

    def _journal(
        self,
        correlation: str,
        action: Literal["attempt", "dispatch", "observation", "transition"],
        run_id: uuid.UUID,
        step: str,
        generation: int,
        attempt: int,
        outcome: WorkerOutcome,
    ) -> None:
        """Append one worker entry inside the calling transaction (a failure rolls it back)."""
        if self._audit is None:
            return
        references = self._audit.references
        step_ref = references.step(str(run_id), step)
        self._audit.writer.append(
            worker_record(
                worker_correlation(correlation, action, step_ref),
                action,
                references.run(str(run_id)),
                step_ref,
                generation,
                attempt,
                outcome,
            )
        )


class _Attempt:
    """The work of one claimed record, from `Work` to the finish transaction."""

    def __init__(
        self,
        worker: Worker,
        claim: Claim,
        clock: Callable[[], datetime],
        deadline: float,
        correlation: str,
    ) -> None:
        self.worker = worker
        self.claim = claim
        self.clock = clock
        self.deadline = deadline
        self.correlation = correlation
        self.sealer = worker._sealer
        self.state: RunState = state_of(self.sealer, claim.snapshot)
        self.record: StepRecord = self.state.current
        self.credential: AccessToken | None = None
        self.snapshot: Snapshot | None = None
        self.definition: Definition | None = None
        self.keys = worker._keys_for(claim.snapshot.run.start_identity)

    # -- driving the engine ---------------------------------------------------------------------

    def run(self) -> None:
        try:
            self.snapshot, self.definition = self.worker._definitions.restore(
                self.claim.snapshot.run
            )
        except (CoordinatorError, DefinitionError):
            self.unrestorable()  # T34/T35
            return
        event: Event | None = Work(self.claim.step)
        while event is not None:
            result = self.feed(event)
            record = result.state.record(self.claim.step)
            if record is None or record.state != "leased":
                return
            event = self.answer(result.commands)

    def feed(self, event: Event) -> Advance:
        """Advance on the state known so far to learn what the event leads to; then, when the
        result must be durable, take it again inside the matching fenced transaction."""
        assert self.definition is not None
        now = self.clock()
        guess = advance(self.definition, self.state, event, to_epoch_ms(now), self.keys)
        if guess.refused is not None:
            raise _Discard
        mode = self.mode(event, guess)
        if mode == "memory":
            self.adopt(guess)
            return guess
        return self.commit(event, mode)

    def mode(self, event: Event, result: Advance) -> _Mode:
        record = result.state.record(self.claim.step)
        if (
            record is None
            or record.state != "leased"
            or result.state.current_step != self.claim.step
        ):
            return "finish"
        if isinstance(event, ReadyToSend) or any(isinstance(c, _DURABLE) for c in result.commands):
            return "progress"
        return "memory"

    def commit(self, event: Event, mode: _Mode) -> Advance:
        """Re-run `event` under the locks and commit its write (freeze / pre-send fence, or the
        finish transaction); the committed result is the one the attempt continues from."""
        assert self.definition is not None
        definition = self.definition
        step = self.claim.step
        holder: list[Advance] = []
        now = self.clock()
        now_ms = to_epoch_ms(now)
        own = self.record

        def decide(snapshot: RunSnapshot) -> RunWrite | None:
            holder.clear()
            previous = state_of(self.sealer, snapshot)
            merged = overlay(previous, own)
            result = advance(definition, merged, event, now_ms, self.keys)
            if result.refused is not None:
                raise _Discard
            holder.append(result)
            after = result.state.record(step)
            if any(isinstance(command, MarkMaySend) for command in result.commands):
                self.journal("dispatch", own, "intent")
            if after is None or after.state != "leased" or result.state.current_step != step:
                self.journal(
                    "observation" if own.type == "wait-for" else "transition",
                    own,
                    _outcome_of(after),
                )
            return write_of(self.sealer, snapshot, previous, result.state, now)

        if mode == "finish":
            self.worker._store.complete_step(self.claim, now, decide)
        else:
            self.worker._store.record_step_progress(self.claim, now, decide)
        result = holder[-1]
        self.adopt(result)
        return result

    def adopt(self, result: Advance) -> None:
        self.state = result.state
        record = result.state.record(self.claim.step)
        if record is not None:
            self.record = record

    def unrestorable(self) -> None:
        """T34/T35: the run's snapshot does not restore; applied in the finish transaction."""
        now = self.clock()

        def decide(snapshot: RunSnapshot) -> RunWrite | None:
            previous = state_of(self.sealer, snapshot)
            result = unrestorable(overlay(previous, self.record), to_epoch_ms(now))
            if result.refused is not None:
                raise _Discard
            self.journal("transition", self.record, _outcome_of(result.state.current))
            return write_of(self.sealer, snapshot, previous, result.state, now)

        self.worker._store.complete_step(self.claim, now, decide)

    def journal(
        self,
        action: Literal["dispatch", "observation", "transition"],
        record: StepRecord,
        outcome: WorkerOutcome,
    ) -> None:
        self.worker._journal(
            self.correlation, action, self.claim.run_id, record.step, record.generation,
            record.attempt, outcome,
        )  # fmt: skip

    # -- answering I/O commands -----------------------------------------------------------------

    def answer(self, commands: tuple[Command, ...]) -> Event | None:
        """Carry out the one I/O command of a result and return the event that answers it."""
        for command in commands:
            if isinstance(command, ObtainCredential):
                return self.obtain_credential(command)
            if isinstance(command, Prepare):
                return self.prepare(command)
            if isinstance(command, Dispatch):
                return self.dispatch(command)
            if isinstance(command, Observe):
                return self.observe(command)
        return None

    def frozen(self, command: str, preparation: str | None) -> PreparedCommand:
        assert self.definition is not None
        spec = self.definition.steps.get(self.claim.step)
        action = spec.alias.action if isinstance(spec, CallStep) else None
        return PreparedCommand.from_frozen(command, action=action, preparation=preparation)

    def obtain_credential(self, command: ObtainCredential) -> Event:
        # 07 §7.4 step 4: the frozen command names this step's operation and connection (the
        # engine checked) and the binding recomputed for the snapshot is the run's.
        check = self.worker._binding_check
        assert self.snapshot is not None
        if check is not None and not check(self.claim.snapshot.run, self.snapshot):
            return AttemptRefused(command.step, "binding-conflict")
        outcome = self.worker._adapters.obtain_credential(
            command.connection, attempt_deadline=self.deadline
        )
        self.credential = outcome if isinstance(outcome, AccessToken) else None
        return credential_event(command.step, outcome)

    def prepare(self, command: Prepare) -> Event:
        try:
            prepared = self.frozen(command.command, None)
        except CommandFormatError:
            return AttemptRefused(command.step, "protected-state-invalid")
        outcome = self.worker._adapters.prepare(prepared, attempt_deadline=self.deadline)
        return preparation_event(command.step, outcome)

    def dispatch(self, command: Dispatch) -> Event:
        """Send the frozen command. Reached only after the pre-send fence committed; from here
        until the finish transaction nothing may be guessed (an exception leaves the record
        `dispatched`, and its lapsed lease makes it `unknown`)."""
        try:
            prepared = self.frozen(command.command, command.preparation)
        except CommandFormatError:
            prepared = None
        if prepared is None:
            # The command was marked as possibly sent but cannot be read: only an operator
            # can tell; leave it to the lapsed lease (T28) rather than guess.
            raise _Discard
        credential, self.credential = self.credential, None  # never reused across attempts
        outcome = self.worker._adapters.call(
            prepared, attempt_deadline=self.deadline, credential=credential
        )
        return call_event(command.step, outcome)

    def observe(self, command: Observe) -> Event:
        reference = None if command.reference is None else json.loads(command.reference)
        outcome = self.worker._adapters.observe(
            command.operation, command.connection, reference, attempt_deadline=self.deadline
        )
        return observation_event(command.step, outcome)
