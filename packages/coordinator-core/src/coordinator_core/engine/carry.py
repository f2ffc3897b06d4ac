"""Claiming a record and carrying a run forward in one step (07 §7.2, §7.7 items 1–2).

`claim_record` is the engine's claim: `StepDue` leases the record (T2, or T26 when a non-pure
record is overdue), then its `Work` runs at once — a call's request is evaluated and frozen
with the claim (07 §7.7 item 2), a `choose`, a `finish` or a first `wait-until` evaluation is
applied, a `wait-for` asks for its observation. `carry_on` is the continuation of §7.7 item 1:
after a record finished, the run's next record is leased and worked in the same transaction
when it is due at once, as long as the run is not stopping, not under review, not past its
deadline, and at most `MAX_CARRIED` records were leased in one go.

With `pure_only`, a claim goes only through records whose work needs no I/O (`choose`,
`finish`, `wait-until`): the claimed record must be one, and the chain stops before the first
record that would need I/O (a call, a `wait-for`), leaving it `pending` and due, never leased.
The worker fires due waits this way in batches (issue 9): the records after them are then
claimed as usual, so no lease is held while a batch is written.

Both are pure and built only from `advance`: a carried chain is by construction the same
sequence of events a worker would feed claiming each record on its own (the property suite
checks the equivalence). The result lists every record leased and every record left
(finished or put back pending) so the shell can journal one `attempt` intent and one
`transition` entry for each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from coordinator_core.definition.ir import Definition
from coordinator_core.engine.advance import advance
from coordinator_core.engine.commands import Command, ObtainCredential
from coordinator_core.engine.inputs import Event, ReadyToSend, StepDue, Work
from coordinator_core.engine.keys import Keys
from coordinator_core.engine.state import RunState, StepRecord
from coordinator_core.engine.transition import NOT_APPLICABLE, Advance

__all__ = [
    "MAX_CARRIED",
    "PURE_WORK",
    "Carried",
    "carry_on",
    "claim_record",
    "needs_credential",
    "send_ready",
]

MAX_CARRIED: Final = 16
"""07 §7.7 item 1: at most 16 records in one transaction."""
PURE_WORK: Final[frozenset[str]] = frozenset({"choose", "finish", "wait-until"})
"""The record types whose work needs no I/O (07 §7.7 item 1: the first evaluation of a
`wait-until`, and its delivery once due, are evaluations of recorded values only)."""


@dataclass(frozen=True, slots=True)
class Carried:
    """The outcome of a claim or a continuation.

    `state` is the run after every step applied; `commands` are all commands emitted, in
    order (the last I/O command, if any, is what the shell carries out next); `entries` lists,
    in order, each record as it was leased (`leased`) and each leased record as it was left
    (`left`: finished, failed, expired or pending again) — the shell journals one `attempt`
    intent and one `transition` for each. `holding` is the step still leased at the end (its
    I/O is pending), or None. `refused` is the engine's refusal of the first event (nothing
    applied)."""

    state: RunState
    commands: tuple[Command, ...] = ()
    entries: tuple[tuple[Literal["leased", "left"], StepRecord], ...] = ()
    holding: str | None = None
    refused: str | None = None

    @property
    def leased(self) -> int:
        return sum(1 for kind, _ in self.entries if kind == "leased")


class _Chain:
    def __init__(
        self,
        definition: Definition,
        state: RunState,
        now: int,
        keys: Keys,
        *,
        pure_only: bool = False,
    ) -> None:
        self.definition = definition
        self.state = state
        self.now = now
        self.keys = keys
        self.pure_only = pure_only
        self.commands: list[Command] = []
        self.entries: list[tuple[Literal["leased", "left"], StepRecord]] = []
        self.leased = 0

    def feed(self, event: Event) -> Advance:
        result = advance(self.definition, self.state, event, self.now, self.keys)
        if result.refused is None:
            self.state = result.state
            self.commands.extend(result.commands)
        return result

    def lease_and_work(self, step: str) -> bool:
        """StepDue then Work for `step`; False when the engine did not lease it."""
        before = self.state.record(step)
        if self.feed(StepDue(step)).refused is not None:
            return False
        record = self.state.record(step)
        assert record is not None
        if record.state != "leased":  # T26 at the claim: the record expired instead
            if before is not None:
                self.entries.append(("left", record))
            return True
        self.leased += 1
        self.entries.append(("leased", record))
        self.feed(Work(step))
        self.note_left(step)
        return True

    def note_left(self, step: str) -> None:
        record = self.state.record(step)
        if record is not None and record.state != "leased":
            self.entries.append(("left", record))

    def holding(self) -> str | None:
        current = self.state.record(self.state.current_step)
        return current.step if current is not None and current.state == "leased" else None

    def carry(self, limit: int = MAX_CARRIED) -> None:
        while self.leased < limit and self.holding() is None:
            state = self.state
            if state.is_terminal or state.restore_review or state.cancel_mode == "stopping":
                return
            if self.now >= state.deadline_at:
                return
            record = state.record(state.current_step)
            if record is None or record.state != "pending" or record.due_at is None:
                return
            if record.due_at > self.now:
                return
            if self.pure_only and record.type not in PURE_WORK:
                return  # left pending and due: claimed as usual
            if not self.lease_and_work(record.step):
                return

    def send_if_ready(self, ready: tuple[str, str] | None) -> bool:
        """07 §7.7 item 7: when the chain holds the record `ready` names (step, connection)
        and its last command asks for that connection's credential, which the shell obtained
        before the transaction began, the record goes on to its pre-send checks at once
        (`ReadyToSend`: a mutation's `dispatched` mark, then its `Dispatch`). Answers whether
        it did."""
        if ready is None or not self.commands:
            return False
        step, connection = ready
        last = self.commands[-1]
        if (
            self.holding() == step
            and isinstance(last, ObtainCredential)
            and (last.step, last.connection) == (step, connection)
        ):
            self.feed(ReadyToSend(step))
            self.note_left(step)
            return True
        return False

    def done(self, refused: str | None = None) -> Carried:
        return Carried(
            self.state,
            tuple(self.commands),
            tuple(self.entries),
            self.holding(),
            refused,
        )


def claim_record(
    definition: Definition,
    state: RunState,
    step: str,
    now: int,
    keys: Keys,
    *,
    carry: bool = True,
    pure_only: bool = False,
) -> Carried:
    """Lease `step` (T2) and do its work at once; then, with `carry`, go on through the run's
    following records as `carry_on` does. Refused (nothing applied) when the record is not
    claimable in `state`, or, with `pure_only`, when its work needs I/O; with `pure_only` the
    chain leases only records of `PURE_WORK` types, so it never ends holding a lease."""
    chain = _Chain(definition, state, now, keys, pure_only=pure_only)
    before = chain.state
    if pure_only:
        record = before.record(step)
        if record is None or record.type not in PURE_WORK:
            return Carried(before, refused=NOT_APPLICABLE)
    result = advance(definition, before, StepDue(step), now, keys)
    if result.refused is not None:
        return Carried(before, refused=result.refused)
    chain.lease_and_work(step)
    if carry:
        chain.carry()
    return chain.done()


def carry_on(
    definition: Definition,
    result: Advance,
    now: int,
    keys: Keys,
    *,
    leased: int = 1,
    ready: tuple[str, str] | None = None,
) -> Carried:
    """07 §7.7 item 1 after `result` (the advance that ended a leased record): lease and work
    the run's next records while they are due at once; `leased` records already count
    towards `MAX_CARRIED` in this transaction. With `ready` (step, connection) — a fresh
    credential the shell obtained before the transaction for the record the continuation
    leases — that record passes its pre-send checks in the same transaction (07 §7.7 item 7)."""
    chain = _Chain(definition, result.state, now, keys)
    chain.commands.extend(result.commands)
    chain.carry(MAX_CARRIED - leased)
    return send_ready(definition, chain.done(), ready, now, keys)


def send_ready(
    definition: Definition,
    carried: Carried,
    ready: tuple[str, str] | None,
    now: int,
    keys: Keys,
) -> Carried:
    """The last part of `carry_on` by itself: `carried` (a continuation made without `ready`)
    with the record `ready` names taken through its pre-send checks when the chain holds it
    and asks last for that credential; `carried` itself otherwise. So a shell that previewed a
    continuation to learn which credential it needs (`needs_credential`) and then obtained it
    finishes that same continuation rather than carrying the run on again:
    `carry_on(d, r, now, k, ready=x) == send_ready(d, carry_on(d, r, now, k), x, now, k)`."""
    if ready is None or carried.refused is not None:
        return carried
    chain = _Chain(definition, carried.state, now, keys)
    chain.commands.extend(carried.commands)
    chain.entries.extend(carried.entries)
    if not chain.send_if_ready(ready):
        return carried
    return chain.done()


def needs_credential(carried: Carried) -> tuple[str, str] | None:
    """The (step, connection) whose fresh credential the carried chain asks for last — what
    the shell may obtain before the transaction that makes the chain durable (07 §7.7 item
    7) — or None."""
    if carried.holding is None or not carried.commands:
        return None
    last = carried.commands[-1]
    if isinstance(last, ObtainCredential) and last.step == carried.holding:
        return last.step, last.connection
    return None
