"""The worker: claim → advance → write-ahead → dispatch → record; one step record per tick (07 §7).

The worker drives the same `engine.advance` the scenario runner drives; only the answers to the
engine's I/O commands differ (real adapters, the store's clock). Every durable decision is taken
inside a store transaction by re-running `advance` on the run as it is locked there, overlaid
with the lease holder's own record (`codec.overlay`), so a cancel that arrived mid-attempt
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

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from coordinator_core.definition.ir import DefinitionError, EngineInvariantError
from coordinator_core.definition.snapshot import Snapshot
from coordinator_core.engine import (
    DeadlinePassed,
    Event,
    LeaseLapsed,
    advance,
    claim_record,
    unrestorable,
)
from coordinator_core.errors import CoordinatorError
from coordinator_core.shell.adapters.registry import Adapters
from coordinator_core.shell.audit import (
    AuditReferences,
    AuditWriter,
    worker_correlation,
    worker_record,
)
from coordinator_core.shell.execution.attempt import (
    Discard,
    Entry,
    RecordAttempt,
    TickRun,
    carried_entries,
    outcome_of,
)
from coordinator_core.shell.execution.codec import DefinitionCache, RunKeys, state_of, write_of
from coordinator_core.shell.execution.run_log import RunEvents
from coordinator_core.shell.execution.wakeup import Wakeup
from coordinator_core.shell.observe import metrics, tracing
from coordinator_core.shell.runtime import failpoints
from coordinator_core.shell.sealing import Sealer
from coordinator_core.shell.store import (
    FIRE_BATCH,
    LEASE_SECONDS,
    Claim,
    Recovery,
    RunRow,
    RunSnapshot,
    RunWrite,
    StaleLease,
    StepOutcome,
    Store,
    from_epoch_ms,
    to_epoch_ms,
    truncate_ms,
)

__all__ = [
    "ATTEMPT_BUDGET_SECONDS",
    "BindingCheck",
    "Worker",
    "WorkerAudit",
]

logger = logging.getLogger("coordinator.worker")

ATTEMPT_BUDGET_SECONDS: Final = 10.0
"""07 §16: claim → result."""

BindingCheck = Callable[[RunRow, Snapshot], bool]
"""Whether the binding digest recomputed for the run's snapshot equals the run's (07 §7.4
step 4); False → `binding-conflict`."""


@dataclass(frozen=True)
class WorkerAudit:
    """The journal the worker appends its `record` entries to (07 §11), and the keyed
    references it writes instead of identifiers."""

    writer: AuditWriter
    references: AuditReferences


def _utc_now() -> datetime:
    return datetime.now(UTC)


class Worker:
    """One worker loop's state: its id, the store, the sealer, the adapters and the caches.

    `tick()` processes exactly one step record (or recovers/expires one and claims nothing);
    `shell.runtime.process.worker_loop` repeats it until the process stops. A `Worker` is used by one thread at a time; several
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
        events: RunEvents | None = None,
    ) -> None:
        self.worker_id = worker_id
        self.store = store
        self.sealer = sealer
        self.adapters = adapters
        self.definitions = definitions
        self.keys_for = keys_for
        self.binding_check = binding_check
        self._audit = audit
        self._clock = clock or _utc_now
        self.lease_seconds = lease_seconds
        self._budget = attempt_budget_seconds
        self.wakeup = wakeup or Wakeup()
        self.events = events

    # -- the loop -----------------------------------------------------------------------------

    def tick(self, now: datetime | None = None) -> bool:
        """Process one claimed step record — and, where 07 §7.7 lets the run go on at once,
        the records that follow it; False when nothing was claimable (idle).

        `now` fixes the instant of every transaction of this tick (tests); by default each
        transaction reads the clock afresh (fences and lease checks use the current time).
        The sweeps of lapsed leases and overdue records run first when something can have
        lapsed, then a batch of due waits when a claim found one (`fire_due_waits`). A tick
        that finds nothing looks ahead when what the process knows may be out of date
        (`Wakeup.looks_ahead`): the poller then sleeps until the store can next have work
        (`Wakeup.learn`)."""
        fixed = None if now is None else truncate_ms(now)

        def clock() -> datetime:
            return fixed if fixed is not None else truncate_ms(self._clock())

        try:
            claim_now = clock()
            self._sweep(claim_now)
            fired = self.fire_due_waits(claim_now) if self.wakeup.take_fire() else 0
            if fired >= FIRE_BATCH:
                return True  # more waits may be due: they go first, the claims after them
            since = self.wakeup.scheduled
            started = time.monotonic()
            traced = tracing.enabled()
            began_ns = tracing.now_ns() if traced else 0
            chain = TickRun(self)
            written = self.store.claim_due_step(
                self.worker_id,
                claim_now,
                self.lease_seconds,
                decide=lambda snapshot: chain.claim(snapshot, claim_now),
            )
            if written is None:
                if self.wakeup.looks_ahead(claim_now):
                    self.wakeup.learn(self.store.next_instants(claim_now), since, claim_now)
                return fired > 0
            claimed_ns = tracing.now_ns() if traced else 0
            chain.adopt(written, claim_now)
            failpoints.reach("after-claim")
        except BaseException:
            self.wakeup.forget()
            raise
        if not traced:
            self._carry(chain, written.claim, clock, started)
            return True
        run, current = written.snapshot.run, written.snapshot.current
        with tracing.tick(
            began_ns,
            (began_ns, claimed_ns, self.store.kind),
            {
                "coordinator.run.id": str(run.run_id),
                "coordinator.workflow": run.workflow_id,
                "coordinator.step.id": current.step,
                "coordinator.step.type": current.type,
            },
        ):
            records = self._carry(chain, written.claim, clock, started)
            known = chain.known
            tracing.annotate(
                {"coordinator.tick.records": records}
                | ({} if known is None else {"coordinator.run.status": known.status})
            )
        return True

    def _carry(
        self,
        chain: TickRun,
        claim: Claim | None,
        clock: Callable[[], datetime],
        started: float,
    ) -> int:
        """The attempts of one tick from its claim: each leased record in turn, while the run
        is carried on (07 §7.7); answers how many records were attempted."""
        records = 0
        try:
            while claim is not None:
                held = claim
                records += 1
                attempt = RecordAttempt(self, held, chain, clock, started + self._budget)
                try:
                    claim = attempt.run()
                except StaleLease:
                    logger.info("worker attempt discarded: lease-stale")
                    claim = None
                except Discard:
                    logger.info("worker attempt discarded: not-applicable")
                    self.wakeup.lapses(held.lease_expires_at)  # left to its lease
                    claim = None
                else:
                    if self.events is not None:
                        metrics.attempt_finished(
                            self.events.workflow, attempt.record.type, time.monotonic() - started
                        )
                started = time.monotonic()
        except BaseException:
            if claim is not None:
                self.wakeup.lapses(claim.lease_expires_at)
            self.wakeup.forget()
            raise
        return records

    # -- waits due in batches (issue 9) ----------------------------------------------------------

    def fire_due_waits(self, now: datetime | None = None) -> int:
        """One batch of the waits due at `now` (at most `FIRE_BATCH`, one transaction): each
        through the engine's claim of pure work only (T18 and the records after it that need
        no I/O, each with its `attempt` intent and `transition` entries), leaving the record
        that needs I/O pending and due, so idle loops are rung to claim it as usual. A full
        batch asks for another (`Wakeup.fire_soon`). Answers how many waits were fired."""
        moment = truncate_ms(now if now is not None else self._clock())
        now_ms = to_epoch_ms(moment)

        def decide(snapshots: Sequence[RunSnapshot]) -> list[RunWrite | None]:
            writes: list[RunWrite | None] = []
            entries: list[Entry] = []
            for snapshot in snapshots:
                fired = self._fire(snapshot, moment, now_ms)
                writes.append(None if fired is None else fired[0])
                if fired is not None:
                    entries.extend(fired[1])
            self.journal(entries)
            return writes

        taken, written = self.store.fire_due_waits(moment, decide)
        if taken >= FIRE_BATCH and written:
            self.wakeup.fire_soon()
        for snapshot in written:
            self.after_write(snapshot, moment)
        return len(written)

    def _fire(
        self, snapshot: RunSnapshot, now: datetime, now_ms: int
    ) -> tuple[RunWrite, list[Entry]] | None:
        """One due wait of a batch through the engine; None leaves it to an ordinary claim (a
        snapshot that does not restore, T34/T35, or anything the engine refuses here)."""
        try:
            state = state_of(self.sealer, snapshot)
            try:
                _, definition = self.definitions.restore(snapshot.run)
            except (CoordinatorError, DefinitionError):
                return None
            keys = self.keys_for(snapshot.run.start_identity)
            carried = claim_record(
                definition, state, state.current_step, now_ms, keys, pure_only=True
            )
            if carried.refused is not None or carried.holding is not None:
                return None
            write = write_of(self.sealer, snapshot, state, carried.state, now)
            if write is None:
                return None
            correlation = str(uuid.uuid4())
            return write, carried_entries(correlation, snapshot.run.run_id, carried)
        except (CoordinatorError, DefinitionError, EngineInvariantError, ValueError) as error:
            logger.warning("worker fire skipped: %s", type(error).__name__)
            return None

    # -- what a write leaves for later (07 §7.7 item 4) -----------------------------------------

    def after_write(self, snapshot: RunSnapshot, now: datetime) -> None:
        """A committed write left the run's current record pending: due now, an idle loop is
        rung for it; due later, the poller wakes then, and the other processes are told when
        that is earlier than anything this one knew."""
        record = snapshot.step(snapshot.run.current_step)
        if record is None or record.state != "pending" or record.due_at is None:
            return
        self._due_again(record.due_at, now)

    def _due_again(self, due_at: datetime, now: datetime) -> None:
        if due_at <= now:
            self.wakeup.ring()
        elif self.wakeup.schedule(due_at):
            try:
                self.store.announce(due_at)
            except Exception as error:  # the others find it by looking ahead in time
                logger.warning("worker announce failed: %s", type(error).__name__)

    # -- sweeps (07 §7.2 steps 2–3), off the claim path -----------------------------------------

    def _sweep(self, now: datetime) -> None:
        if not self.wakeup.sweep_due(now):
            return
        correlation = str(uuid.uuid4())  # one per sweep that may journal
        due: list[datetime] = []
        handled = self.store.sweep(
            self.worker_id,
            now,
            lambda snapshot, kind: self._recover(snapshot, kind, now, correlation, due),
            self.lease_seconds,
        )
        if handled:
            self.wakeup.lapses(now)  # there may be more: sweep again as soon as allowed
        for due_at in due:
            self._due_again(due_at, now)

    def _recover(
        self,
        snapshot: RunSnapshot,
        kind: Recovery,
        now: datetime,
        correlation: str,
        due: list[datetime],
    ) -> RunWrite | None:
        """07 §7.2 steps 2–3 through the engine (`LeaseLapsed` → T28/T29, `DeadlinePassed` →
        T26/T27). Never raises: a run whose data cannot be read is left for its next turn."""
        try:
            previous = state_of(self.sealer, snapshot)
            record = previous.current
            now_ms = to_epoch_ms(now)
            try:
                _, definition = self.definitions.restore(snapshot.run)
            except (CoordinatorError, DefinitionError):
                if kind == "lease-lapsed" and (record.dispatched or record.uncertain):
                    return None  # T28 needs no definition, but T35 keeps the code: leave it
                result = unrestorable(previous, now_ms)
            else:
                keys = self.keys_for(snapshot.run.start_identity)
                event: Event = (
                    LeaseLapsed(record.step) if kind == "lease-lapsed" else DeadlinePassed()
                )
                result = advance(definition, previous, event, now_ms, keys)
            if result.refused is not None:
                return None
            write = write_of(self.sealer, snapshot, previous, result.state, now)
            after = result.state.record(record.step)
            current = result.state.record(result.state.current_step)
            if current is not None and current.state == "pending" and current.due_at is not None:
                due.append(from_epoch_ms(current.due_at))  # announced once committed
            self.journal(
                [
                    (
                        correlation, "transition", snapshot.run.run_id, record,
                        outcome_of(after, kind) if kind == "lease-lapsed" else outcome_of(after),
                    )
                ]
            )  # fmt: skip
            return write
        except (CoordinatorError, DefinitionError, EngineInvariantError, ValueError) as error:
            logger.warning("worker recovery skipped: %s", type(error).__name__)
            return None

    # -- audit ----------------------------------------------------------------------------------

    def journal(self, entries: Sequence[Entry]) -> None:
        """Append worker entries inside the calling transaction, all sharing one fsync (07 §7.7
        item 5); a failure raises and rolls the transaction back. The outcomes among them are
        noted with the store (`Store.note`), which tells them once the transaction commits."""
        note = self.store.note
        for _, action, run_id, record, outcome in entries:
            if action in ("transition", "observation"):
                note(StepOutcome(run_id, record.step, record.type, outcome))
        if self._audit is None or not entries:
            return
        references = self._audit.references
        records = []
        for correlation, action, run_id, record, outcome in entries:
            step_ref = references.step(str(run_id), record.step)
            records.append(
                worker_record(
                    worker_correlation(correlation, action, step_ref),
                    action,
                    references.run(str(run_id)),
                    step_ref,
                    record.generation,
                    record.attempt,
                    outcome,
                )
            )
        self._audit.writer.append_all(records)
