"""One tick's run, from its claim through the records it carries the run on to (`TickRun`),
and the work of one leased record between its fences (`RecordAttempt`), with the journal entries
they append (07 §7.2–§7.4, §7.7, §11). Both are given their `Ports` — the store's run writes,
the journal, the adapters, the clock, the keys and the definitions — and hold no state beyond
the tick; the worker loop (`shell.execution.worker`) makes them.

One decision per fence: an event whose result must be durable (the engine's
`Advance.persistence`) is decided inside the fenced transaction, on the run as locked there;
only a result that needs no write at all (a read's credential obtained) is taken in memory.
The advance made to learn the persistence is the decision only when the fence finds the run
exactly as this lease holder left it (`TickRun.decide`, one named optimisation).
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Literal

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
    Instant,
    MarkMaySend,
    Observe,
    ObtainCredential,
    Persistence,
    Prepare,
    ReadyToSend,
    RunState,
    StepRecord,
    advance,
    carry_on,
    claim_record,
    needs_credential,
    send_ready,
    unrestorable,
)
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
from coordinator_core.shell.clock import Clock
from coordinator_core.shell.execution.codec import (
    DefinitionCache,
    RunKeys,
    overlay,
    refreshed,
    state_of,
    write_of,
)
from coordinator_core.shell.execution.wakeup import Wakeup
from coordinator_core.shell.runtime import failpoints
from coordinator_core.shell.sealing import Sealer
from coordinator_core.shell.store import (
    Claim,
    ControlRow,
    NextInstants,
    RunSnapshot,
    RunWrite,
    RunWrites,
    StepOutcome,
    StoredRun,
    SweepKind,
    Written,
)

__all__ = [
    "BindingCheck",
    "Discard",
    "Entry",
    "Ports",
    "RecordAttempt",
    "TickRun",
    "WorkerAudit",
    "carried_entries",
    "outcome_of",
]

logger = logging.getLogger("coordinator.worker")

BindingCheck = Callable[[StoredRun, Snapshot], bool]
"""Whether the binding digest recomputed for the run's snapshot equals the run's (07 §7.4
step 4); False → `binding-conflict`."""


class Discard(Exception):
    """The engine refused the event under the locks: nothing is written, the attempt ends."""


@dataclass(frozen=True)
class WorkerAudit:
    """The journal the worker appends its `record` entries to (07 §11), and the keyed
    references it writes instead of identifiers."""

    writer: AuditWriter
    references: AuditReferences


Entry = tuple[
    str,
    Literal["attempt", "dispatch", "observation", "transition"],
    uuid.UUID,
    StepRecord,
    WorkerOutcome,
]
"""One worker entry: (correlation, action, run, record, outcome)."""


@dataclass(frozen=True)
class Ports:
    """What a tick works with, given explicitly: the store's run writes, its claim gate and
    what an idle worker may sleep until,
    the sealer, the adapters, the definitions and run keys, the clock, the wake-up of the
    process (and the store's announcement to the others), the journal and the binding check.
    The worker and the run service build them from one `Runtime`."""

    writes: RunWrites
    may_claim: Callable[[ControlRow], bool]
    next_instants: Callable[[Instant], NextInstants]
    note: Callable[[StepOutcome], None]
    announce: Callable[[Instant], None]
    sealer: Sealer
    adapters: Adapters
    definitions: DefinitionCache
    keys_for: Callable[[str], RunKeys]
    clock: Clock
    wakeup: Wakeup
    audit: WorkerAudit | None = None
    binding_check: BindingCheck | None = None
    lease_seconds: int = 15
    ahead: Executor | None = None
    """Where an admission obtains its first call's credential beside its transaction
    (`TickRun.obtain_ahead`); None: the attempt obtains it, as any other."""

    def journal(self, entries: Sequence[Entry]) -> None:
        """Append worker entries inside the calling transaction: queued now and made durable
        before it commits, sharing one fsync with the other entries of its batch (07 §7.7
        items 5 and 8); a failure raises and rolls the transaction back. The outcomes among them are
        noted with the store, which tells them once the transaction commits."""
        for _, action, run_id, record, outcome in entries:
            if action in ("transition", "observation"):
                self.note(StepOutcome(run_id, record.step, record.type, outcome))
        if self.audit is None or not entries:
            return
        references = self.audit.references
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
        writer = self.audit.writer
        sequence = writer.queue_all(records)
        if sequence is not None:
            self.writes.before_commit(functools.partial(writer.durable, sequence))

    def after_write(self, snapshot: RunSnapshot, now: Instant) -> None:
        """A committed write left the run's current record pending: due now, an idle loop is
        rung for it; due later, the poller wakes then, and the other processes are told when
        that is earlier than anything this one knew (07 §7.7 item 4)."""
        current = snapshot.step(snapshot.run.state.current_step)
        if current is None:
            return
        record = current.record
        if record.state == "pending" and record.due_at is not None:
            self.due_again(record.due_at, now)

    def due_again(self, due_at: Instant, now: Instant) -> None:
        if due_at <= now:
            self.wakeup.ring()
        elif self.wakeup.schedule(due_at):
            try:
                self.announce(due_at)
            except Exception as error:  # the others find it by looking ahead in time
                logger.warning("worker announce failed: %s", type(error).__name__)


def outcome_of(record: StepRecord | None, sweep: SweepKind | None = None) -> WorkerOutcome:
    """The worker outcome (07 §11) a finished transition leaves on its record: the engine's
    `StepRecord.ending`, or `lease-lapsed` for a sweep's recovery of a lapsed lease."""
    if sweep == "lease-lapsed":
        return "lease-lapsed"
    return "pending" if record is None else record.ending


def _ending(record: StepRecord) -> Literal["observation", "transition"]:
    """The action of the entry that ends a leased record (07 §11)."""
    return "observation" if record.type == "wait-for" else "transition"


def _boundary(persistence: Persistence, commands: tuple[Command, ...], held: Claim | None) -> str:
    """The failpoint a committed fence or finish passes (`shell.runtime.failpoints`)."""
    if persistence == "finish":
        return "mid-continuation" if held is not None else "after-finish"
    if any(isinstance(command, MarkMaySend) for command in commands):
        return "after-pre-send"
    return "after-freeze"


def _dispatched_by(commands: tuple[Command, ...], ready: tuple[str, str] | None) -> str | None:
    """The step `ready` names when the decision's commands send it (a continuation that went
    on to its pre-send checks with the credential obtained beforehand), else None."""
    if ready is None:
        return None
    step = ready[0]
    if any(isinstance(command, Dispatch) and command.step == step for command in commands):
        return step
    return None


def _marked(snapshot: RunSnapshot) -> frozenset[str]:
    """The records of a locked snapshot already marked `dispatched`."""
    return frozenset(stored.step for stored in snapshot.steps if stored.record.dispatched)


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
    the run it was read or written as, `known`), the state including what only this lease
    holder knows (`state`), and the commands of the last result (the I/O to do next)."""

    def __init__(self, ports: Ports) -> None:
        self.ports = ports
        self._correlation: str | None = None
        self.definition: Definition | None = None
        self.snapshot: Snapshot | None = None
        self.keys: RunKeys | None = None
        self.stored: RunState | None = None
        self.state: RunState | None = None
        self.known: StoredRun | None = None
        self.commands: tuple[Command, ...] = ()
        self.decided: tuple[Command, ...] = ()  # the commands of the last decision itself
        self.sending: str | None = None  # a continued record the last decision sends at once
        self.credential: tuple[str, AccessToken] | None = None  # obtained for it beforehand
        self.ahead: tuple[str, Future[AccessToken | CallOutcome]] | None = None  # being obtained
        self._wanted: tuple[str, str] | None = None  # the credential the claim's call asks for
        self._pending: tuple[RunState, tuple[Command, ...]] | None = None
        self._marked: frozenset[str] = frozenset()  # records `dispatched` before the write

    @property
    def correlation(self) -> str:
        """The tick's correlation id, made when its first entry is journaled (an idle tick
        makes none)."""
        if self._correlation is None:
            self._correlation = str(uuid.uuid4())
        return self._correlation

    def admitted(
        self,
        run_id: uuid.UUID,
        definition_digest: str,
        state: RunState,
        now: Instant,
        keys: RunKeys,
    ) -> tuple[RunState, Callable[[], None]] | None:
        """07 §7.7 item 6: the claim an admission makes of its run's first record for the idle
        loop that takes the run, computed in memory (the engine is pure): the record leased and
        worked (a call's request frozen), the run carried on through what needs no I/O. Answers
        the state to insert and the journal appends of that claim (made inside the admission
        transaction), or None when the admission claims nothing (the record is not due yet, or
        the definition is not at hand)."""
        ports = self.ports
        found = ports.definitions.known(definition_digest)
        if found is None:
            return None
        self.snapshot, self.definition = found
        self.keys = keys
        carried = claim_record(self.definition, state, state.current_step, now, keys)
        if carried.refused is not None or not carried.entries:
            return None
        self._marked = frozenset()
        self._pending = (carried.state, carried.commands)
        self._wanted = needs_credential(carried)
        entries = carried_entries(self.correlation, run_id, carried)
        return carried.state, lambda: ports.journal(entries)

    def obtain_ahead(self, budget_seconds: float) -> None:
        """07 §7.7 items 6 and 7: when the record an admission claims (`admitted`) is a call
        that asks for a fresh credential, start obtaining it now, beside the admission's
        transaction, for that record's first attempt (the loop that takes the run waits for it
        instead of asking then). It is used by that attempt only; if the admission does not
        commit its claim, nobody takes it and it is discarded."""
        wanted, self._wanted = self._wanted, None
        executor = self.ports.ahead
        if wanted is None or executor is None:
            return
        step, connection = wanted
        self.ahead = (
            step,
            executor.submit(
                self.ports.adapters.obtain_credential,
                ObtainCredential(step, connection),
                attempt_deadline=time.monotonic() + budget_seconds,
            ),
        )

    def claim(self, snapshot: RunSnapshot, now: Instant) -> RunWrite | None:
        """The claim transaction's decision (07 §7.2, §7.7 items 1–2): the engine leases the
        record and works it at once, carrying the run on where it may; or T34/T35 when the
        run's snapshot does not restore."""
        ports = self.ports
        state = state_of(ports.sealer, snapshot)
        run_id = snapshot.run.run_id
        self._marked = _marked(snapshot)
        self.keys = ports.keys_for(snapshot.run.start_identity)
        try:
            self.snapshot, self.definition = ports.definitions.restore(snapshot.run)
        except (CoordinatorError, DefinitionError):
            result = unrestorable(state, now)  # T34/T35
            if result.refused is not None:
                return None
            after = result.state.current
            ports.journal([(self.correlation, "transition", run_id, after, outcome_of(after))])
            self._pending = (result.state, result.commands)
            return write_of(ports.sealer, snapshot, state, result.state, now)
        carried = claim_record(self.definition, state, state.current_step, now, self.keys)
        if carried.refused is not None:
            return None
        claimed = snapshot.current.record
        if claimed.type == "wait-until" and claimed.wait_until is not None:
            ports.wakeup.fire_soon()  # a parked wait fell due: others may have too
        ports.journal(carried_entries(self.correlation, run_id, carried))
        self._pending = (carried.state, carried.commands)
        return write_of(ports.sealer, snapshot, state, carried.state, now)

    def adopt(self, written: Written, now: Instant) -> None:
        """The transaction whose decision is pending committed as `written` at `now`. A
        record it marked `dispatched` gets its proof of commit in the journal now, before
        anything is sent (07 §12.1 item 1)."""
        assert self._pending is not None
        self.stored, self.commands = self._pending
        self.state = self.stored
        self.known = written.snapshot.run
        self._pending = None
        proofs: list[Entry] = []
        for stored in written.snapshot.steps:
            record = self.stored.record(stored.step)
            if stored.record.dispatched and stored.step not in self._marked and record is not None:
                proofs.append((self.correlation, "dispatch", stored.run_id, record, "committed"))
        self.ports.journal(proofs)
        self.ports.after_write(written.snapshot, now)

    def decide(
        self,
        snapshot: RunSnapshot,
        own: StepRecord,
        event: Event,
        now: Instant,
        *,
        carry: bool,
        probe: tuple[RunState, Advance] | None = None,
        ready: tuple[str, str] | None = None,
        preview: Carried | None = None,
    ) -> RunWrite | None:
        """A fence's or finish transaction's one decision: `event` on the run as committed,
        with the run fields others may have changed read fresh and the holder's own record;
        then, in a finish transaction, the continuation (07 §7.7 item 1).

        One optimisation, `probe` (the advance the attempt made outside the lock to learn the
        event's persistence, and the state it was made on): an uncontended fence — the run as
        locked is the run this holder last read or wrote, so the holder's own view *is* the
        run as committed — keeps that result when it was made on that very state, rather than
        advancing the same pure function on the same inputs again.

        `ready` (step, connection) names the credential obtained before the transaction for
        the record the continuation leases (07 §7.7 item 7): that record passes its pre-send
        checks here too, and its `dispatched` mark commits with this write. `preview` is the
        continuation the attempt computed from the probe's result to learn that credential
        (`RecordAttempt.prefetch`): when the probe is kept, the continuation is that preview
        finished with `ready` (`send_ready`), not computed a second time."""
        assert self.definition is not None and self.keys is not None
        assert self.stored is not None and self.known is not None and self.state is not None
        ports = self.ports
        self._marked = _marked(snapshot)
        if snapshot.run == self.known:
            previous, basis = self.stored, self.state
        else:
            previous = refreshed(ports.sealer, self.stored, self.known, snapshot.run)
            basis = overlay(previous, own)
        if probe is not None and probe[0] is basis:
            result = probe[1]
        else:
            result, preview = advance(self.definition, basis, event, now, self.keys), None
        if result.refused is not None:
            raise Discard
        run_id = snapshot.run.run_id
        entries: list[Entry] = []
        if any(isinstance(command, MarkMaySend) for command in result.commands):
            entries.append((self.correlation, "dispatch", run_id, own, "intent"))
        after = result.state.record(own.step)
        ended = result.persistence(own.step) == "finish"
        if ended:
            entries.append((self.correlation, _ending(own), run_id, own, outcome_of(after)))
        state, commands = result.state, result.commands
        self.decided = result.commands
        self.sending = None
        if ended and carry and ports.may_claim(snapshot.control):
            if preview is not None:
                carried = send_ready(self.definition, preview, ready, now, self.keys)
            else:
                carried = carry_on(self.definition, result, now, self.keys, ready=ready)
            entries.extend(carried_entries(self.correlation, run_id, carried))
            state, commands = carried.state, carried.commands
            sent = _dispatched_by(carried.commands, ready)
            if sent is not None:
                self.sending = ready[0] if ready is not None else None
                marked = state.record(sent)
                if marked is not None and marked.dispatched:
                    entries.append((self.correlation, "dispatch", run_id, marked, "intent"))
        ports.journal(entries)
        self._pending = (state, commands)
        return write_of(ports.sealer, snapshot, previous, state, now)


def _claim_of(run: TickRun, snapshot: RunSnapshot, *, now: Instant) -> RunWrite | None:
    return run.claim(snapshot, now)


class RecordAttempt:
    """The work of one leased record, from the I/O its claim asked for to the transaction
    that ends it; answers the claim the loop goes on with (a continuation), or None.

    `then` is asked at the finish for the run the loop would claim next, if any: a finish
    that carries nothing on then makes that claim in its own transaction (07 §7.7 item 8,
    `RunWrites.complete_step`), and `followed` is that run with what its claim wrote, for
    the loop to work next; `probed` says a finish looked and found nothing claimable."""

    def __init__(
        self,
        run: TickRun,
        claim: Claim,
        deadline: float,
        then: Callable[[], TickRun | None] | None = None,
    ) -> None:
        self.run = run
        self.ports = run.ports
        self.claim = claim
        self.deadline = deadline
        self.then = then
        self.followed: tuple[TickRun, Written] | None = None
        self.probed = False
        assert run.state is not None
        record = run.state.record(claim.step)
        assert record is not None
        self.record: StepRecord = record
        self.credential: AccessToken | None = None
        handed, run.credential = run.credential, None
        if handed is not None and handed[0] == claim.step and run.sending == claim.step:
            self.credential = handed[1]  # obtained for this very attempt; else discarded
        ahead, run.ahead = run.ahead, None
        self._ahead: Future[AccessToken | CallOutcome] | None = (
            ahead[1] if ahead is not None and ahead[0] == claim.step else None
        )
        self._frozen: tuple[str, PreparedCommand] | None = None

    # -- driving the engine ---------------------------------------------------------------------

    def go(self) -> Claim | None:
        commands = self.run.commands
        while True:
            event = self.answer(commands)
            if event is None:
                return None  # nothing left to do here: the record is left to its lease
            ended, commands, claim = self.feed(event)
            if ended:
                return claim

    def feed(self, event: Event) -> tuple[bool, tuple[Command, ...], Claim | None]:
        """What the event leads to: taken in memory when the engine says nothing of it needs
        to be durable, otherwise decided once inside the matching fenced transaction (the
        finish, or a mid-attempt fence). Answers whether the attempt ended, the commands to
        carry out next, and (when it ended) the claim of the record the run was carried on
        to."""
        run = self.run
        assert run.definition is not None and run.keys is not None and run.state is not None
        now = self.ports.clock()
        step = self.claim.step
        basis = run.state
        outcome = advance(run.definition, basis, event, now, run.keys)
        if outcome.refused is not None:
            raise Discard
        persistence = outcome.persistence(step)
        if persistence == "memory":
            run.state = outcome.state
            self._adopt_record(outcome.state)
            return False, outcome.commands, None
        writes, own = self.ports.writes, self.record
        preview, ready = self.prefetch(outcome, now) if persistence == "finish" else (None, None)

        def decide(snapshot: RunSnapshot) -> RunWrite | None:
            return run.decide(
                snapshot,
                own,
                event,
                now,
                carry=persistence == "finish",
                probe=(basis, outcome),
                ready=ready,
                preview=preview,
            )

        if persistence == "finish":
            follow = None if self.then is None else self.then()
            written = writes.complete_step(
                self.claim,
                now,
                decide,
                self.ports.lease_seconds,
                then=None if follow is None else functools.partial(_claim_of, follow, now=now),
            )
        else:
            follow = None
            written = writes.record_step_progress(self.claim, now, decide)
        run.adopt(written, now)
        held = written.claim
        if follow is not None and held is None:
            self.probed = written.then is None
            if written.then is not None:
                follow.adopt(written.then, now)
                self.followed = (follow, written.then)
        failpoints.reach(_boundary(persistence, run.decided, held))
        if self.followed is not None:
            failpoints.reach("after-finish-claim")
        if held is not None and held.step == step and held.lease == self.claim.lease:
            self.claim = held
            assert run.state is not None
            self._adopt_record(run.state)
            return False, run.commands, None
        return True, run.commands, held

    def prefetch(self, outcome: Advance, now: Instant) -> tuple[Carried, tuple[str, str] | None]:
        """07 §7.7 item 7: the continuation the finish transaction will make, computed in
        memory first (the engine is pure); when it ends holding a call that asks for a
        credential, that credential is obtained now, before the transaction, so that the call's
        pre-send checks (and a mutation's `dispatched` mark) commit with it. Answers the
        continuation (kept for the transaction's decision when it decides on `outcome`) and the
        (step, connection) the credential is for, or None. A credential the transaction then
        does not use is discarded, never used for another attempt."""
        run = self.run
        assert run.definition is not None and run.keys is not None
        preview = carry_on(run.definition, outcome, now, run.keys)
        wanted = needs_credential(preview)
        if wanted is None:
            return preview, None
        check = self.ports.binding_check
        assert run.snapshot is not None
        if check is not None and not check(self.claim.snapshot.run, run.snapshot):
            return preview, None  # the attempt of that record refuses it (binding-conflict)
        step, connection = wanted
        obtained = self.ports.adapters.obtain_credential(
            ObtainCredential(step, connection), attempt_deadline=self.deadline
        )
        if isinstance(obtained, CallOutcome):
            return preview, None  # that attempt asks again; its failure is recorded there
        run.credential = (step, obtained)
        return preview, wanted

    def _adopt_record(self, state: RunState) -> None:
        record = state.record(self.claim.step)
        if record is not None:
            self.record = record

    # -- answering I/O commands -----------------------------------------------------------------

    def answer(self, commands: tuple[Command, ...]) -> Event | None:
        """Carry out the I/O command a result asks for — its last one (a carried chain lists
        the commands of every record it went through, in order) — and return the event that
        answers it."""
        for command in reversed(commands):
            if isinstance(command, ObtainCredential):
                return self.obtain_credential(command)
            if isinstance(command, Prepare):
                return self.prepare(command)
            if isinstance(command, Dispatch):
                return self.dispatch(command)
            if isinstance(command, Observe):
                return self.observe(command)
        return None

    def frozen(self, command: str, preparation: bytes | None) -> PreparedCommand:
        """The frozen command, parsed once per attempt: the `Prepare` and the `Dispatch` that
        follows it in the same attempt send the same sealed text (it is never replaced), and
        the dispatch only adds the frozen preparation. Raises CommandFormatError."""
        if self._frozen is None or self._frozen[0] != command:
            definition = self.run.definition
            assert definition is not None
            spec = definition.steps.get(self.claim.step)
            action = spec.alias.action if isinstance(spec, CallStep) else None
            self._frozen = (command, PreparedCommand.from_frozen(command, action=action))
        return self._frozen[1].with_preparation(preparation)

    def obtain_credential(self, command: ObtainCredential) -> Event:
        # 07 §7.4 step 4: the frozen command names this step's operation and connection (the
        # engine checked) and the binding recomputed for the snapshot is the run's.
        check = self.ports.binding_check
        assert self.run.snapshot is not None
        if check is not None and not check(self.claim.snapshot.run, self.run.snapshot):
            return AttemptRefused(command.step, "binding-conflict")
        ahead, self._ahead = self._ahead, None
        if ahead is not None:  # obtained for this attempt beside the admission
            early = ahead.result()
            if not isinstance(early, CallOutcome):
                self.credential = early
                return ReadyToSend(command.step)
        obtained = self.ports.adapters.obtain_credential(command, attempt_deadline=self.deadline)
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
        return self.ports.adapters.prepare(command, frozen, attempt_deadline=self.deadline)

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
        return self.ports.adapters.dispatch(
            command, frozen, attempt_deadline=self.deadline, credential=credential
        )

    def observe(self, command: Observe) -> Event:
        return self.ports.adapters.observe(command, attempt_deadline=self.deadline)
