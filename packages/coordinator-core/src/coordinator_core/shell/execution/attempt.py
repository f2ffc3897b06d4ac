"""One tick's run, from its claim through the records it carries the run on to (`TickRun`),
and the work of one leased record between its fences (`RecordAttempt`), with the journal
entries they append (07 §7.2–§7.4, §7.7, §11). The worker loop (`shell.execution.worker`) makes them;
they hold no state beyond the tick.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Final, Literal

from coordinator_core.definition.ir import DefinitionError
from coordinator_core.definition.snapshot import Snapshot
from coordinator_core.engine import (
    Advance,
    AttemptRefused,
    CallOutcome,
    CallStep,
    Carried,
    Command,
    Definition,
    Dispatch,
    Event,
    FreezeCommand,
    FreezePreparation,
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
from coordinator_core.errors import CoordinatorError
from coordinator_core.shell.adapters import AccessToken, CommandFormatError, PreparedCommand
from coordinator_core.shell.audit import WorkerOutcome
from coordinator_core.shell.execution.codec import RunKeys, overlay, refreshed, state_of, write_of
from coordinator_core.shell.runtime import failpoints
from coordinator_core.shell.store import (
    Claim,
    Recovery,
    RunRow,
    RunSnapshot,
    RunWrite,
    Written,
    to_epoch_ms,
)

if TYPE_CHECKING:
    from coordinator_core.shell.execution.worker import Worker

_DURABLE: Final = (FreezeCommand, FreezePreparation, MarkMaySend)
_Mode = Literal["memory", "progress", "finish"]


class Discard(Exception):
    """The engine refused the event under the locks: nothing is written, the attempt ends."""


def outcome_of(record: StepRecord | None, recovery: Recovery | None = None) -> WorkerOutcome:
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


Entry = tuple[
    str,
    Literal["attempt", "dispatch", "observation", "transition"],
    uuid.UUID,
    StepRecord,
    WorkerOutcome,
]


def _ending(record: StepRecord) -> Literal["observation", "transition"]:
    """The action of the entry that ends a leased record (07 §11)."""
    return "observation" if record.type == "wait-for" else "transition"


def _boundary(mode: _Mode, guess: Advance, held: Claim | None) -> str:
    """The failpoint a committed fence or finish passes (`shell.runtime.failpoints`)."""
    if mode == "finish":
        return "mid-continuation" if held is not None else "after-finish"
    if any(isinstance(command, MarkMaySend) for command in guess.commands):
        return "after-pre-send"
    return "after-freeze"


def _marked(snapshot: RunSnapshot) -> frozenset[str]:
    """The records of a locked snapshot already marked `dispatched`."""
    return frozenset(row.step for row in snapshot.steps if row.dispatched)


def carried_entries(correlation: str, run_id: uuid.UUID, carried: Carried) -> list[Entry]:
    """One `attempt` intent per record leased and one `transition` (or `observation`) per
    record left, in the order they happened."""
    entries: list[Entry] = []
    for kind, record in carried.entries:
        if kind == "leased":
            entries.append((correlation, "attempt", run_id, record, "intent"))
        else:
            entries.append((correlation, _ending(record), run_id, record, outcome_of(record)))
    return entries


class TickRun:
    """The run one tick works on, kept in memory from its claim to the last record the tick
    carries it through: the definition and keys, the state as last committed (`stored`, with
    the run row it was read or written as), the state including what only this lease holder
    knows (`state`), and the commands of the last result (the I/O to do next)."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.sealer = worker.sealer
        self._correlation: str | None = None
        self.definition: Definition | None = None
        self.snapshot: Snapshot | None = None
        self.keys: RunKeys | None = None
        self.stored: RunState | None = None
        self.state: RunState | None = None
        self.known: RunRow | None = None
        self.commands: tuple[Command, ...] = ()
        self._pending: tuple[RunState, tuple[Command, ...]] | None = None
        self._marked: frozenset[str] = frozenset()  # records `dispatched` before the write

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
        self._marked = _marked(snapshot)
        self.keys = self.worker.keys_for(snapshot.run.start_identity)
        try:
            self.snapshot, self.definition = self.worker.definitions.restore(snapshot.run)
        except (CoordinatorError, DefinitionError):
            result = unrestorable(state, now_ms)  # T34/T35
            if result.refused is not None:
                return None
            after = result.state.current
            self.worker.journal(
                [(self.correlation, "transition", run_id, after, outcome_of(after))]
            )
            self._pending = (result.state, result.commands)
            return write_of(self.sealer, snapshot, state, result.state, now)
        carried = claim_record(self.definition, state, state.current_step, now_ms, self.keys)
        if carried.refused is not None:
            return None
        claimed = snapshot.current
        if claimed.type == "wait-until" and claimed.wait_until is not None:
            self.worker.wakeup.fire_soon()  # a parked wait fell due: others may have too
        self.worker.journal(carried_entries(self.correlation, run_id, carried))
        self._pending = (carried.state, carried.commands)
        return write_of(self.sealer, snapshot, state, carried.state, now)

    def adopt(self, written: Written, now: datetime) -> None:
        """The transaction whose decision is pending committed as `written` at `now`. A
        record it marked `dispatched` gets its proof of commit in the journal now, before
        anything is sent (07 §12.1 item 1)."""
        assert self._pending is not None
        self.stored, self.commands = self._pending
        self.state = self.stored
        self.known = written.snapshot.run
        self._pending = None
        proofs: list[Entry] = []
        for row in written.snapshot.steps:
            record = self.stored.record(row.step)
            if row.dispatched and row.step not in self._marked and record is not None:
                proofs.append((self.correlation, "dispatch", row.run_id, record, "committed"))
        self.worker.journal(proofs)
        self.worker.after_write(written.snapshot, now)

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
        self._marked = _marked(snapshot)
        previous = refreshed(self.sealer, self.stored, self.known, snapshot.run)
        basis = overlay(previous, own)
        if guessed is not None and guessed[0] == basis:
            result = guessed[1]
        else:
            result = advance(self.definition, basis, event, now_ms, self.keys)
        if result.refused is not None:
            raise Discard
        run_id = snapshot.run.run_id
        entries: list[Entry] = []
        if any(isinstance(command, MarkMaySend) for command in result.commands):
            entries.append((self.correlation, "dispatch", run_id, own, "intent"))
        after = result.state.record(own.step)
        ended = after is None or after.state != "leased" or result.state.current_step != own.step
        if ended:
            entries.append((self.correlation, _ending(own), run_id, own, outcome_of(after)))
        state, commands = result.state, result.commands
        if ended and carry and self.worker.store.may_claim(snapshot.control):
            carried = carry_on(self.definition, result, now_ms, self.keys)
            entries.extend(carried_entries(self.correlation, run_id, carried))
            state, commands = carried.state, carried.commands
        self.worker.journal(entries)
        self._pending = (state, commands)
        return write_of(self.sealer, snapshot, previous, state, now)


class RecordAttempt:
    """The work of one leased record, from the I/O its claim asked for to the transaction
    that ends it; answers the claim the loop goes on with (a continuation), or None."""

    def __init__(
        self,
        worker: Worker,
        claim: Claim,
        chain: TickRun,
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
            raise Discard
        mode = self.mode(guess)
        if mode == "memory":
            chain.state = guess.state
            self.adopt_record(guess.state)
            return False, guess.commands, None
        store = self.worker.store
        own = self.record

        def decide(snapshot: RunSnapshot) -> RunWrite | None:
            return chain.decide(
                snapshot, own, event, now, carry=mode == "finish", guessed=(basis, guess)
            )

        if mode == "finish":
            written = store.complete_step(self.claim, now, decide, self.worker.lease_seconds)
        else:
            written = store.record_step_progress(self.claim, now, decide)
        chain.adopt(written, now)
        held = written.claim
        failpoints.reach(_boundary(mode, guess, held))
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
        check = self.worker.binding_check
        assert self.chain.snapshot is not None
        if check is not None and not check(self.claim.snapshot.run, self.chain.snapshot):
            return AttemptRefused(command.step, "binding-conflict")
        obtained = self.worker.adapters.obtain_credential(command, attempt_deadline=self.deadline)
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
        return self.worker.adapters.prepare(command, frozen, attempt_deadline=self.deadline)

    def dispatch(self, command: Dispatch) -> Event:
        """Send the frozen command. Reached only after the pre-send fence committed; from here
        until the finish transaction nothing may be guessed (an exception leaves the record
        `dispatched`, and its lapsed lease makes it `unknown`)."""
        try:
            frozen = self.frozen(command.command, command.preparation)
        except CommandFormatError:
            # The command was marked as possibly sent but cannot be read: only an operator
            # can tell; leave it to the lapsed lease (T28) rather than guess.
            raise Discard from None
        credential, self.credential = self.credential, None  # never reused across attempts
        return self.worker.adapters.dispatch(
            command, frozen, attempt_deadline=self.deadline, credential=credential
        )

    def observe(self, command: Observe) -> Event:
        return self.worker.adapters.observe(command, attempt_deadline=self.deadline)
