"""The worker: claim → advance → write-ahead → dispatch → record; one step record per tick (07 §7).

The worker drives the same `engine.advance` the scenario runner drives; only the answers to the
engine's I/O commands differ (real adapters, the store's clock). Every durable decision is taken
inside a store transaction by `advance` on the run as it is locked there, overlaid with the
lease holder's own record (`codec.overlay`), so a cancel that arrived mid-attempt is seen by the
very transaction that would otherwise send or finish:

* the **claim** transaction leases one record and journals the attempt intent, and works it at
  once as far as 07 §7.7 allows (the call's request frozen with the claim, pure records
  applied);
* the **freeze** fence commits the sealed command's preparation before anything is sent
  (guarantee 4);
* the **pre-send** fence runs `ReadyToSend` under the locks: a stopping run, a passed deadline or
  a review refuses to send; otherwise a mutation or evaluation is marked `dispatched`/`sent` and
  the dispatch intent journaled, and only after that commit does the request leave (guarantee 5);
* the **finish** transaction, fenced by (run, step, generation, attempt, lease token), records
  the outcome, the run status and the next record, and may carry the run on.

Nothing is guessed: an exception after the pre-send commit leaves the record `leased` and
`dispatched`; when its lease lapses a sweep makes it `unknown` (T28) and the run waits for an
operator. A fence that finds the lease gone (`StaleLease`) discards the attempt. The attempt of
one leased record is `shell.execution.attempt`'s; this module is the loop around it: the tick,
the batches of due waits and the sweeps.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Final

from coordinator_core.definition.ir import DefinitionError, EngineInvariantError
from coordinator_core.engine import (
    DeadlinePassed,
    Event,
    Instant,
    LeaseLapsed,
    advance,
    claim_record,
    unrestorable,
)
from coordinator_core.errors import CoordinatorError
from coordinator_core.shell.execution.attempt import (
    Discard,
    Entry,
    Ports,
    RecordAttempt,
    TickRun,
    carried_entries,
    outcome_of,
)
from coordinator_core.shell.execution.codec import state_of, write_of
from coordinator_core.shell.execution.run_log import RunEvents
from coordinator_core.shell.execution.wakeup import Wakeup
from coordinator_core.shell.observe import metrics, tracing
from coordinator_core.shell.runtime import failpoints
from coordinator_core.shell.store import (
    FIRE_BATCH,
    Claim,
    RunSnapshot,
    RunWrite,
    StaleLease,
    SweepKind,
)

__all__ = ["ATTEMPT_BUDGET_SECONDS", "Worker"]

logger = logging.getLogger("coordinator.worker")

ATTEMPT_BUDGET_SECONDS: Final = 10.0
"""07 §16: claim → result."""


class Worker:
    """One worker loop's state: its id and its ports.

    `tick()` processes exactly one step record (or recovers/expires one and claims nothing);
    `shell.runtime.process.worker_loop` repeats it until the process stops. A `Worker` is used
    by one thread at a time; the workers of a process share their ports (the store, the
    definitions, the wake-up).
    """

    def __init__(
        self,
        worker_id: str,
        ports: Ports,
        *,
        attempt_budget_seconds: float = ATTEMPT_BUDGET_SECONDS,
        events: RunEvents | None = None,
    ) -> None:
        self.worker_id = worker_id
        self.ports = ports
        self._budget = attempt_budget_seconds
        self.events = events
        self._handed = False  # the last tick worked a run an admission handed over
        self._probed = False  # the last tick's finish looked for a next claim: none
        self._seen = 0  # the wake-up's generation when the tick began
        self._followed: tuple[TickRun, Claim] | None = None  # claimed by the last finish
        self._stopping = False

    def rests(self, seen: int) -> bool:
        """Whether the loop, after this tick, waits for a ring instead of ticking again:
        the tick worked the run an admission handed it, or its last finish looked for a
        claimable record and found none, and the process knows of nothing claimable since
        it read `seen` (`Wakeup.rests`). Saves the claim transaction that would find
        nothing: at one run at a time, one per run."""
        return (
            (self._handed or self._probed)
            and self._followed is None
            and self.wakeup.rests(seen, self.ports.clock())
        )

    @property
    def holding(self) -> bool:
        """Whether the last tick's finish claimed a record this loop works next (its lease
        is live): the loop works it even when the process is stopping."""
        return self._followed is not None

    def stop(self) -> None:
        """The process is stopping: no finish claims another run any more."""
        self._stopping = True

    @property
    def wakeup(self) -> Wakeup:
        """What the loops of the process share (the ports')."""
        return self.ports.wakeup

    # -- the loop -----------------------------------------------------------------------------

    def tick(self, now: Instant | None = None, *, seen: int | None = None) -> bool:
        """Process one claimed step record — and, where 07 §7.7 lets the run go on at once,
        the records that follow it; False when nothing was claimable (idle).

        `now` fixes the instant of every transaction of this tick (tests); by default each
        transaction reads the clock afresh (fences and lease checks use the current time).
        The sweeps of lapsed leases and overdue records run first when something can have
        lapsed, then a batch of due waits when a claim found one (`fire_due_waits`). A tick
        that finds nothing looks ahead when what the process knows may be out of date
        (`Wakeup.looks_ahead`): the poller then sleeps until the store can next have work
        (`Wakeup.learn`). `seen` is the wake-up's generation the loop read before the tick
        (by default, read now): a finish of a handed run claims nothing more unless
        something rang since (`_then`)."""
        ports = self.ports
        clock: Callable[[], Instant] = ports.clock if now is None else (lambda: now)
        wakeup = self.wakeup
        self._seen = wakeup.generation if seen is None else seen
        self._probed = False
        handed = wakeup.take_handed()
        self._handed = handed is not None
        if handed is not None:  # an admission of this process claimed a run for this loop
            run, claim = handed
            began_ns = tracing.now_ns() if tracing.enabled() else 0
            self._traced(run, claim, time.monotonic(), began_ns, None)
            return True
        try:
            claim_now = clock()
            self._sweep(claim_now)
            fired = self.fire_due_waits(claim_now) if wakeup.take_fire() else 0
            if fired >= FIRE_BATCH:
                return True  # more waits may be due: they go first, the claims after them
            followed = self._followed
        except BaseException:
            wakeup.forget()
            raise
        if followed is not None:  # the last finish claimed this run's record for this loop
            self._followed = None
            began_ns = tracing.now_ns() if tracing.enabled() else 0
            self._traced(*followed, time.monotonic(), began_ns, None)
            return True
        try:
            since = wakeup.scheduled
            started = time.monotonic()
            traced = tracing.enabled()
            began_ns = tracing.now_ns() if traced else 0
            run = TickRun(ports if now is None else _fixed(ports, clock))
            written = ports.writes.claim_due_step(
                self.worker_id,
                claim_now,
                ports.lease_seconds,
                decide=lambda snapshot: run.claim(snapshot, claim_now),
            )
            if written is None:
                if wakeup.looks_ahead(claim_now):
                    wakeup.learn(ports.next_instants(claim_now), since, claim_now)
                return fired > 0
            claimed_ns = tracing.now_ns() if traced else 0
            run.adopt(written, claim_now)
            failpoints.reach("after-claim")
        except BaseException:
            wakeup.forget()
            raise
        if written.claim is None:  # the claim ended the record instead (07 §7.2 step 5)
            return True
        self._traced(
            run, written.claim, started, began_ns, (began_ns, claimed_ns, ports.writes.kind)
        )
        return True

    def _traced(
        self,
        run: TickRun,
        claim: Claim,
        started: float,
        began_ns: int,
        claimed: tuple[int, int, str] | None,
    ) -> None:
        """Carry the run from `claim`, inside the tick's span when tracing is on (`began_ns`
        its start; `claimed` the claim transaction's span, None for a run its admission
        claimed)."""
        if not tracing.enabled():
            self._carry(run, claim, started)
            return
        stored, current = claim.snapshot.run, claim.held.record
        with tracing.tick(
            began_ns,
            claimed,
            {
                "coordinator.run.id": str(stored.run_id),
                "coordinator.workflow": stored.workflow_id,
                "coordinator.step.id": current.step,
                "coordinator.step.type": current.type,
            },
        ):
            records = self._carry(run, claim, started)
            known = run.known
            tracing.annotate(
                {"coordinator.tick.records": records}
                | ({} if known is None else {"coordinator.run.status": known.state.status})
            )

    def _carry(self, run: TickRun, claim: Claim | None, started: float) -> int:
        """The attempts of one tick from its claim: each leased record in turn, while the run
        is carried on (07 §7.7); answers how many records were attempted."""
        records = 0
        try:
            while claim is not None:
                held = claim
                records += 1
                attempt = RecordAttempt(run, held, started + self._budget, self._then(run))
                try:
                    claim = attempt.go()
                    if attempt.followed is not None and attempt.followed[1].claim is not None:
                        self._followed = (attempt.followed[0], attempt.followed[1].claim)
                    self._probed = attempt.probed
                except StaleLease:
                    logger.info("worker attempt discarded: lease-stale")
                    claim = None
                except Discard:
                    logger.info("worker attempt discarded: not-applicable")
                    self.wakeup.lapses(held.lease.expires_at)  # left to its lease
                    claim = None
                else:
                    if self.events is not None:
                        metrics.attempt_finished(
                            self.events.workflow, attempt.record.type, time.monotonic() - started
                        )
                started = time.monotonic()
        except BaseException:
            if claim is not None:
                self.wakeup.lapses(claim.lease.expires_at)
            self.wakeup.forget()
            raise
        return records

    def _then(self, run: TickRun) -> Callable[[], TickRun | None]:
        """What a finish asks before it carries nothing on: the run this loop would claim
        next (fresh, with the tick's ports), or None when the loop would not claim — the
        process is stopping, the loop holds a claim already (an admission's handed run was
        worked first), or this tick worked a run an admission handed it and nothing
        claimable is known since it began (`rests`: the loop then waits for a ring)."""

        def then() -> TickRun | None:
            if self._stopping or self._followed is not None:
                return None  # stopping, or holding a claim already (a handed run went first)
            if self._handed and self.wakeup.rests(self._seen, run.ports.clock()):
                return None
            return TickRun(run.ports)

        return then

    # -- waits due in batches ------------------------------------------------------------------

    def fire_due_waits(self, now: Instant | None = None) -> int:
        """One batch of the waits due at `now` (at most `FIRE_BATCH`, one transaction): each
        through the engine's claim of pure work only (T18 and the records after it that need
        no I/O, each with its `attempt` intent and `transition` entries), leaving the record
        that needs I/O pending and due, so idle loops are rung to claim it as usual. A full
        batch asks for another (`Wakeup.fire_soon`). Answers how many waits were fired."""
        ports = self.ports
        moment = ports.clock() if now is None else now

        def decide(snapshots: Sequence[RunSnapshot]) -> list[RunWrite | None]:
            writes: list[RunWrite | None] = []
            entries: list[Entry] = []
            for snapshot in snapshots:
                fired = self._fire(snapshot, moment)
                writes.append(None if fired is None else fired[0])
                if fired is not None:
                    entries.extend(fired[1])
            ports.journal(entries)
            return writes

        taken, written = ports.writes.fire_due_waits(moment, decide)
        if taken >= FIRE_BATCH and written:
            self.wakeup.fire_soon()
        for snapshot in written:
            ports.after_write(snapshot, moment)
        return len(written)

    def _fire(self, snapshot: RunSnapshot, now: Instant) -> tuple[RunWrite, list[Entry]] | None:
        """One due wait of a batch through the engine; None leaves it to an ordinary claim (a
        snapshot that does not restore, T34/T35, or anything the engine refuses here)."""
        ports = self.ports
        try:
            state = state_of(ports.sealer, snapshot)
            try:
                _, definition = ports.definitions.restore(snapshot.run)
            except (CoordinatorError, DefinitionError):
                return None
            keys = ports.keys_for(snapshot.run.start_identity)
            carried = claim_record(definition, state, state.current_step, now, keys, pure_only=True)
            if carried.refused is not None or carried.holding is not None:
                return None
            write = write_of(ports.sealer, snapshot, state, carried.state, now)
            if write is None:
                return None
            correlation = str(uuid.uuid4())
            return write, carried_entries(correlation, snapshot.run.run_id, carried)
        except (CoordinatorError, DefinitionError, EngineInvariantError, ValueError) as error:
            logger.warning("worker fire skipped: %s", type(error).__name__)
            return None

    # -- sweeps (07 §7.2 steps 2–3), off the claim path -----------------------------------------

    def _sweep(self, now: Instant) -> None:
        if not self.wakeup.sweep_due(now):
            return
        correlation = str(uuid.uuid4())  # one per sweep that may journal
        due: list[Instant] = []
        handled = self.ports.writes.sweep(
            self.worker_id,
            now,
            lambda snapshot, kind: self._recover(snapshot, kind, now, correlation, due),
            self.ports.lease_seconds,
        )
        if handled:
            self.wakeup.lapses(now)  # there may be more: sweep again as soon as allowed
        for due_at in due:
            self.ports.due_again(due_at, now)

    def _recover(
        self,
        snapshot: RunSnapshot,
        kind: SweepKind,
        now: Instant,
        correlation: str,
        due: list[Instant],
    ) -> RunWrite | None:
        """07 §7.2 steps 2–3 through the engine (`LeaseLapsed` → T28/T29, `DeadlinePassed` →
        T26/T27). Never raises: a run whose data cannot be read is left for its next turn."""
        ports = self.ports
        try:
            previous = state_of(ports.sealer, snapshot)
            record = previous.current
            try:
                _, definition = ports.definitions.restore(snapshot.run)
            except (CoordinatorError, DefinitionError):
                if kind == "lease-lapsed" and (record.dispatched or record.uncertain):
                    return None  # T28 needs no definition, but T35 keeps the code: leave it
                result = unrestorable(previous, now)
            else:
                keys = ports.keys_for(snapshot.run.start_identity)
                event: Event = (
                    LeaseLapsed(record.step) if kind == "lease-lapsed" else DeadlinePassed()
                )
                result = advance(definition, previous, event, now, keys)
            if result.refused is not None:
                return None
            write = write_of(ports.sealer, snapshot, previous, result.state, now)
            after = result.state.record(record.step)
            current = result.state.record(result.state.current_step)
            if current is not None and current.state == "pending" and current.due_at is not None:
                due.append(current.due_at)  # announced once committed
            ports.journal(
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


def _fixed(ports: Ports, clock: Callable[[], Instant]) -> Ports:
    """`ports` with every transaction of a tick at one fixed instant (`tick(now)`)."""
    return replace(ports, clock=clock)
