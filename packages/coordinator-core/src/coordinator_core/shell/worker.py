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
from typing import Final, Literal

from coordinator_core.definition.snapshot import Snapshot
from coordinator_core.engine import (
    Advance,
    AttemptRefused,
    CallOutcome,
    CallStep,
    Carried,
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
    advance,
    carry_on,
    claim_record,
    unrestorable,
)
from coordinator_core.engine.program import DefinitionError, EngineInvariantError
from coordinator_core.errors import CoordinatorError
from coordinator_core.shell.adapters import AccessToken, CommandFormatError, PreparedCommand
from coordinator_core.shell.adapters.registry import Adapters
from coordinator_core.shell.audit import (
    AuditReferences,
    AuditWriter,
    WorkerOutcome,
    worker_correlation,
    worker_record,
)
from coordinator_core.shell.codec import (
    DefinitionCache,
    RunKeys,
    overlay,
    refreshed,
    state_of,
    write_of,
)
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
    Store,
    Written,
    from_epoch_ms,
    to_epoch_ms,
    truncate_ms,
)
from coordinator_core.shell.wakeup import Wakeup

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

_DURABLE: Final = (FreezeCommand, FreezePreparation, MarkMaySend)
_Mode = Literal["memory", "progress", "finish"]


@dataclass(frozen=True)
class WorkerAudit:
    """The journal the worker appends its `record` entries to (07 §11), and the keyed
    references it writes instead of identifiers."""

    writer: AuditWriter
    references: AuditReferences


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
    `shell.process.worker_loop` repeats it until the process stops. A `Worker` is used by one thread at a time; several
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
            chain = _Chain(self)
            written = self._store.claim_due_step(
                self.worker_id,
                claim_now,
                self._lease_seconds,
                decide=lambda snapshot: chain.claim(snapshot, claim_now),
            )
            if written is None:
                if self.wakeup.looks_ahead(claim_now):
                    self.wakeup.learn(self._store.next_instants(claim_now), since, claim_now)
                return fired > 0
            chain.adopt(written, claim_now)
        except BaseException:
            self.wakeup.forget()
            raise
        claim = written.claim
        try:
            while claim is not None:
                held = claim
                try:
                    claim = _Attempt(self, held, chain, clock, started + self._budget).run()
                except StaleLease:
                    logger.info("worker attempt discarded: lease-stale")
                    claim = None
                except _Discard:
                    logger.info("worker attempt discarded: not-applicable")
                    self.wakeup.lapses(held.lease_expires_at)  # left to its lease
                    claim = None
                started = time.monotonic()
        except BaseException:
            if claim is not None:
                self.wakeup.lapses(claim.lease_expires_at)
            self.wakeup.forget()
            raise
        return True

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
            entries: list[_Entry] = []
            for snapshot in snapshots:
                fired = self._fire(snapshot, moment, now_ms)
                writes.append(None if fired is None else fired[0])
                if fired is not None:
                    entries.extend(fired[1])
            self._journal(entries)
            return writes

        taken, written = self._store.fire_due_waits(moment, decide)
        if taken >= FIRE_BATCH and written:
            self.wakeup.fire_soon()
        for snapshot in written:
            self._after_write(snapshot, moment)
        return len(written)

    def _fire(
        self, snapshot: RunSnapshot, now: datetime, now_ms: int
    ) -> tuple[RunWrite, list[_Entry]] | None:
        """One due wait of a batch through the engine; None leaves it to an ordinary claim (a
        snapshot that does not restore, T34/T35, or anything the engine refuses here)."""
        try:
            state = state_of(self._sealer, snapshot)
            try:
                _, definition = self._definitions.restore(snapshot.run)
            except (CoordinatorError, DefinitionError):
                return None
            keys = self._keys_for(snapshot.run.start_identity)
            carried = claim_record(
                definition, state, state.current_step, now_ms, keys, pure_only=True
            )
            if carried.refused is not None or carried.holding is not None:
                return None
            write = write_of(self._sealer, snapshot, state, carried.state, now)
            if write is None:
                return None
            correlation = str(uuid.uuid4())
            return write, _carried_entries(correlation, snapshot.run.run_id, carried)
        except (CoordinatorError, DefinitionError, EngineInvariantError, ValueError) as error:
            logger.warning("worker fire skipped: %s", type(error).__name__)
            return None

    # -- what a write leaves for later (07 §7.7 item 4) -----------------------------------------

    def _after_write(self, snapshot: RunSnapshot, now: datetime) -> None:
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
                self._store.announce(due_at)
            except Exception as error:  # the others find it by looking ahead in time
                logger.warning("worker announce failed: %s", type(error).__name__)

    # -- sweeps (07 §7.2 steps 2–3), off the claim path -----------------------------------------

    def _sweep(self, now: datetime) -> None:
        if not self.wakeup.sweep_due(now):
            return
        correlation = str(uuid.uuid4())  # one per sweep that may journal
        due: list[datetime] = []
        handled = self._store.sweep(
            self.worker_id,
            now,
            lambda snapshot, kind: self._recover(snapshot, kind, now, correlation, due),
            self._lease_seconds,
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
            current = result.state.record(result.state.current_step)
            if current is not None and current.state == "pending" and current.due_at is not None:
                due.append(from_epoch_ms(current.due_at))  # announced once committed
            self._journal(
                [
                    (
                        correlation, "transition", snapshot.run.run_id, record,
                        _outcome_of(after, kind) if kind == "lease-lapsed" else _outcome_of(after),
                    )
                ]
            )  # fmt: skip
            return write
        except (CoordinatorError, DefinitionError, EngineInvariantError, ValueError) as error:
            logger.warning("worker recovery skipped: %s", type(error).__name__)
            return None

    # -- audit ----------------------------------------------------------------------------------

    def _journal(self, entries: Sequence[_Entry]) -> None:
        """Append worker entries inside the calling transaction, all sharing one fsync (07 §7.7
        item 5); a failure raises and rolls the transaction back."""
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


_Entry = tuple[
    str,
    Literal["attempt", "dispatch", "observation", "transition"],
    uuid.UUID,
    StepRecord,
    WorkerOutcome,
]


def _ending(record: StepRecord) -> Literal["observation", "transition"]:
    """The action of the entry that ends a leased record (07 §11)."""
    return "observation" if record.type == "wait-for" else "transition"


def _carried_entries(correlation: str, run_id: uuid.UUID, carried: Carried) -> list[_Entry]:
    """One `attempt` intent per record leased and one `transition` (or `observation`) per
    record left, in the order they happened."""
    entries: list[_Entry] = []
    for kind, record in carried.entries:
        if kind == "leased":
            entries.append((correlation, "attempt", run_id, record, "intent"))
        else:
            entries.append((correlation, _ending(record), run_id, record, _outcome_of(record)))
    return entries


class _Chain:
    """The run one tick works on, kept in memory from its claim to the last record the tick
    carries it through: the definition and keys, the state as last committed (`stored`, with
    the run row it was read or written as), the state including what only this lease holder
    knows (`state`), and the commands of the last result (the I/O to do next)."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.sealer = worker._sealer
        self._correlation: str | None = None
        self.definition: Definition | None = None
        self.snapshot: Snapshot | None = None
        self.keys: RunKeys | None = None
        self.stored: RunState | None = None
        self.state: RunState | None = None
        self.known: RunRow | None = None
        self.commands: tuple[Command, ...] = ()
        self._pending: tuple[RunState, tuple[Command, ...]] | None = None

    @property
    def correlation(self) -> str:
        """The tick's correlation id, made when its first entry is journaled (an idle tick
        makes none)."""
        if self._correlation is None:
            self._correlation = str(uuid.uuid4())
        return self._correlation

    def claim(self, snapshot: RunSnapshot, now: datetime) -> RunWrite | None:
        """The claim transaction's decision (07 §7.2, §7.7 items 1–2): the engine leases the
        record and works it at once, carrying the run on where it may; or T34/T35 when the
        run's snapshot does not restore."""
        state = state_of(self.sealer, snapshot)
        now_ms = to_epoch_ms(now)
        run_id = snapshot.run.run_id
        self.keys = self.worker._keys_for(snapshot.run.start_identity)
        try:
            self.snapshot, self.definition = self.worker._definitions.restore(snapshot.run)
        except (CoordinatorError, DefinitionError):
            result = unrestorable(state, now_ms)  # T34/T35
            if result.refused is not None:
                return None
            after = result.state.current
            self.worker._journal(
                [(self.correlation, "transition", run_id, after, _outcome_of(after))]
            )
            self._pending = (result.state, result.commands)
            return write_of(self.sealer, snapshot, state, result.state, now)
        carried = claim_record(self.definition, state, state.current_step, now_ms, self.keys)
        if carried.refused is not None:
            return None
        claimed = snapshot.current
        if claimed.type == "wait-until" and claimed.wait_until is not None:
            self.worker.wakeup.fire_soon()  # a parked wait fell due: others may have too
        self.worker._journal(_carried_entries(self.correlation, run_id, carried))
        self._pending = (carried.state, carried.commands)
        return write_of(self.sealer, snapshot, state, carried.state, now)

    def adopt(self, written: Written, now: datetime) -> None:
        """The transaction whose decision is pending committed as `written` at `now`."""
        assert self._pending is not None
        self.stored, self.commands = self._pending
        self.state = self.stored
        self.known = written.snapshot.run
        self._pending = None
        self.worker._after_write(written.snapshot, now)

    def decide(
        self,
        snapshot: RunSnapshot,
        own: StepRecord,
        event: Event,
        now: datetime,
        *,
        carry: bool,
        guessed: tuple[RunState, Advance] | None = None,
    ) -> RunWrite | None:
        """A fence's or finish transaction's decision: `event` on the run as committed, with
        the run columns others may have changed read fresh and the holder's own record; then,
        in a finish transaction, the continuation (07 §7.7 item 1). `guessed` is the advance
        made before the transaction and the state it was made from: when the run as committed
        is that state, it is the decision (advance is a pure function of its inputs), so the
        event is not advanced a second time."""
        assert self.definition is not None and self.keys is not None
        assert self.stored is not None and self.known is not None
        now_ms = to_epoch_ms(now)
        previous = refreshed(self.sealer, self.stored, self.known, snapshot.run)
        basis = overlay(previous, own)
        if guessed is not None and guessed[0] == basis:
            result = guessed[1]
        else:
            result = advance(self.definition, basis, event, now_ms, self.keys)
        if result.refused is not None:
            raise _Discard
        run_id = snapshot.run.run_id
        entries: list[_Entry] = []
        if any(isinstance(command, MarkMaySend) for command in result.commands):
            entries.append((self.correlation, "dispatch", run_id, own, "intent"))
        after = result.state.record(own.step)
        ended = after is None or after.state != "leased" or result.state.current_step != own.step
        if ended:
            entries.append((self.correlation, _ending(own), run_id, own, _outcome_of(after)))
        state, commands = result.state, result.commands
        if ended and carry and self.worker._store.may_claim(snapshot.control):
            carried = carry_on(self.definition, result, now_ms, self.keys)
            entries.extend(_carried_entries(self.correlation, run_id, carried))
            state, commands = carried.state, carried.commands
        self.worker._journal(entries)
        self._pending = (state, commands)
        return write_of(self.sealer, snapshot, previous, state, now)


class _Attempt:
    """The work of one leased record, from the I/O its claim asked for to the transaction
    that ends it; answers the claim the loop goes on with (a continuation), or None."""

    def __init__(
        self,
        worker: Worker,
        claim: Claim,
        chain: _Chain,
        clock: Callable[[], datetime],
        deadline: float,
    ) -> None:
        self.worker = worker
        self.claim = claim
        self.chain = chain
        self.clock = clock
        self.deadline = deadline
        assert chain.state is not None
        record = chain.state.record(claim.step)
        assert record is not None
        self.record: StepRecord = record
        self.credential: AccessToken | None = None
        self._frozen: tuple[str, PreparedCommand] | None = None

    # -- driving the engine ---------------------------------------------------------------------

    def run(self) -> Claim | None:
        commands = self.chain.commands
        while True:
            event = self.answer(commands)
            if event is None:
                return None  # nothing left to do here: the record is left to its lease
            ended, commands, claim = self.feed(event)
            if ended:
                return claim

    def feed(self, event: Event) -> tuple[bool, tuple[Command, ...], Claim | None]:
        """Advance on the state known so far to learn what the event leads to; when the
        result must be durable, take it again inside the matching fenced transaction.
        Answers whether the attempt ended, the commands to carry out next, and (when it
        ended) the claim of the record the run was carried on to."""
        chain = self.chain
        assert chain.definition is not None and chain.keys is not None
        assert chain.state is not None
        now = self.clock()
        basis = chain.state
        guess = advance(chain.definition, basis, event, to_epoch_ms(now), chain.keys)
        if guess.refused is not None:
            raise _Discard
        mode = self.mode(guess)
        if mode == "memory":
            chain.state = guess.state
            self.adopt_record(guess.state)
            return False, guess.commands, None
        store = self.worker._store
        own = self.record

        def decide(snapshot: RunSnapshot) -> RunWrite | None:
            return chain.decide(
                snapshot, own, event, now, carry=mode == "finish", guessed=(basis, guess)
            )

        if mode == "finish":
            written = store.complete_step(self.claim, now, decide, self.worker._lease_seconds)
        else:
            written = store.record_step_progress(self.claim, now, decide)
        chain.adopt(written, now)
        held = written.claim
        if (
            held is not None
            and held.step == self.claim.step
            and (held.lease_token == self.claim.lease_token)
        ):
            self.claim = held
            assert chain.state is not None
            self.adopt_record(chain.state)
            return False, chain.commands, None
        return True, chain.commands, held

    def mode(self, result: Advance) -> _Mode:
        record = result.state.record(self.claim.step)
        if (
            record is None
            or record.state != "leased"
            or result.state.current_step != self.claim.step
        ):
            return "finish"
        if any(isinstance(command, _DURABLE) for command in result.commands):
            return "progress"
        return "memory"  # a read's pre-send checks were made with its claim (07 §7.7 item 3)

    def adopt_record(self, state: RunState) -> None:
        record = state.record(self.claim.step)
        if record is not None:
            self.record = record

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
        """The frozen command, parsed once per attempt: the `Prepare` and the `Dispatch` that
        follows it in the same attempt send the same sealed text (it is never replaced), and
        the dispatch only adds the frozen preparation. Raises CommandFormatError."""
        if self._frozen is None or self._frozen[0] != command:
            definition = self.chain.definition
            assert definition is not None
            spec = definition.steps.get(self.claim.step)
            action = spec.alias.action if isinstance(spec, CallStep) else None
            self._frozen = (command, PreparedCommand.from_frozen(command, action=action))
        return self._frozen[1].with_preparation(preparation)

    def obtain_credential(self, command: ObtainCredential) -> Event:
        # 07 §7.4 step 4: the frozen command names this step's operation and connection (the
        # engine checked) and the binding recomputed for the snapshot is the run's.
        check = self.worker._binding_check
        assert self.chain.snapshot is not None
        if check is not None and not check(self.claim.snapshot.run, self.chain.snapshot):
            return AttemptRefused(command.step, "binding-conflict")
        obtained = self.worker._adapters.obtain_credential(command, attempt_deadline=self.deadline)
        if isinstance(obtained, CallOutcome):
            self.credential = None
            return obtained
        self.credential = obtained  # held here for the dispatch; never part of an event
        return ReadyToSend(command.step)

    def prepare(self, command: Prepare) -> Event:
        try:
            frozen = self.frozen(command.command, None)
        except CommandFormatError:
            return AttemptRefused(command.step, "protected-state-invalid")
        return self.worker._adapters.prepare(command, frozen, attempt_deadline=self.deadline)

    def dispatch(self, command: Dispatch) -> Event:
        """Send the frozen command. Reached only after the pre-send fence committed; from here
        until the finish transaction nothing may be guessed (an exception leaves the record
        `dispatched`, and its lapsed lease makes it `unknown`)."""
        try:
            frozen = self.frozen(command.command, command.preparation)
        except CommandFormatError:
            # The command was marked as possibly sent but cannot be read: only an operator
            # can tell; leave it to the lapsed lease (T28) rather than guess.
            raise _Discard from None
        credential, self.credential = self.credential, None  # never reused across attempts
        return self.worker._adapters.dispatch(
            command, frozen, attempt_deadline=self.deadline, credential=credential
        )

    def observe(self, command: Observe) -> Event:
        return self.worker._adapters.observe(command, attempt_deadline=self.deadline)
