"""One transition's working state (`Transition`), its answer (`Advance`) and the run-status helpers every transition group uses (07 §2, §4)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final, Literal

from coordinator_core.definition.ir import (
    MISSING,
    Definition,
    EngineInvariantError,
)
from coordinator_core.engine.commands import (
    Attention,
    Cancelled,
    Command,
    Fail,
    FreezeCommand,
    FreezePreparation,
    MarkMaySend,
)
from coordinator_core.engine.instants import Instant
from coordinator_core.engine.keys import Keys
from coordinator_core.engine.state import (
    TERMINAL_STATUSES,
    RunState,
    RunStatusValue,
    StepRecord,
)
from coordinator_core.evolve import evolve

PREPARATION_MAX_BYTES: Final = 65_536

# Why an event did not apply to the state it was given (the state is returned unchanged).
NOT_APPLICABLE: Final = "not-applicable"


Persistence = Literal["memory", "fence", "finish"]
WRITE_AHEAD: Final = (FreezeCommand, FreezePreparation, MarkMaySend)
"""The commands the shell commits before the I/O that follows them (07 §1 guarantees 4–5)."""


@dataclass(frozen=True, slots=True)
class Advance:
    """The result of one event: the next state and the commands to carry out, in order.

    `refused` is set (and nothing changed) when the event did not apply: an operator action
    refused with its reason of 07 §9 (`terminal`, `receipt-expired`, `no-receipt`, …) or a
    worker event that no longer matches the state (`not-applicable`, `restore-review`,
    `reconcile-raced`). `answer` is the reconcile answer of 07 §9.2 (`confirmed`,
    `unresolved`, `receipt-expired`, `unavailable`).
    """

    state: RunState
    commands: tuple[Command, ...] = ()
    refused: str | None = None
    answer: str | None = None

    def persistence(self, step: str) -> Persistence:
        """What the lease holder of `step` must make durable before it carries out the
        commands (07 §7.2): `finish` when the record is left (delivered, failed, pending again,
        or the run moved on) — the finish transaction; `fence` when the record stays leased
        but a command is write-ahead (a frozen command or preparation, the `dispatched` mark)
        — a mid-attempt fence; `memory` when nothing is (a read's credential obtained: its
        pre-send checks were made with its claim, 07 §7.7 item 3)."""
        record = self.state.record(step)
        if record is None or record.state != "leased" or self.state.current_step != step:
            return "finish"
        if any(isinstance(command, WRITE_AHEAD) for command in self.commands):
            return "fence"
        return "memory"


class Transition:
    """The working copy of one transition: the run, its records and the commands so far.

    It is also where a mapping's arguments come from (`ArgumentValues`): the run input and each
    recorded output are held as canonical JSON text and parsed at most once per transition,
    however many mappings of this advance read them.
    """

    __slots__ = (
        "commands",
        "definition",
        "index",
        "keys",
        "now",
        "parsed",
        "records",
        "run",
    )

    def __init__(self, definition: Definition, state: RunState, now: Instant, keys: Keys) -> None:
        self.definition = definition
        self.keys = keys
        self.now = now
        self.run = state
        self.records = list(state.records)
        self.index = {record.step: i for i, record in enumerate(self.records)}
        self.commands: list[Command] = []
        # canonical text -> its parsed value; keyed by the text itself, so a value recorded
        # later in this transition is parsed afresh and an unchanged one never again.
        self.parsed: dict[str, Any] = {}

    def get(self, step: str) -> StepRecord:
        return self.records[self.index[step]]

    def put(self, record: StepRecord) -> StepRecord:
        position = self.index.get(record.step)
        if position is None:
            self.index[record.step] = len(self.records)
            self.records.append(record)
        else:
            self.records[position] = record
        return record

    def update(self, record: StepRecord, **changes: Any) -> StepRecord:
        return self.put(evolve(record, **changes))

    def set(self, **changes: Any) -> None:
        self.run = evolve(self.run, **changes)

    def emit(self, command: Command) -> None:
        self.commands.append(command)

    def output_of(self, step: str) -> str | None:
        position = self.index.get(step)
        return None if position is None else self.records[position].output

    def _parse(self, text: str) -> Any:
        found = self.parsed.get(text, MISSING)
        if found is MISSING:
            found = self.parsed[text] = json.loads(text)
        return found

    def input_value(self) -> Any:
        """The parsed run input (`ArgumentValues`)."""
        if self.run.input is None:
            raise EngineInvariantError("A mapping read the input where none exists.")
        return self._parse(self.run.input)

    def output_value(self, step: str) -> Any:
        """The parsed recorded output of `step`, or `MISSING` (`ArgumentValues`)."""
        text = self.output_of(step)
        return MISSING if text is None else self._parse(text)

    def done(self, *, answer: str | None = None) -> Advance:
        return Advance(
            evolve(self.run, records=tuple(self.records)), tuple(self.commands), None, answer
        )


def unchanged(state: RunState, reason: str) -> Advance:
    return Advance(state, (), reason)


# -- run status helpers -------------------------------------------------------------------------


def live_status(tx: Transition) -> RunStatusValue:
    return "cancel-requested" if tx.run.cancel_requested else "running"


def settle(
    tx: Transition,
    status: RunStatusValue,
    failure_code: str | None,
    *,
    outcome: str | None = None,
    output: str | None = None,
) -> None:
    """Give the run a stopping status and set `completedAt` (07 §5 "settle the run")."""
    changes: dict[str, Any] = {
        "status": status,
        "failure_code": failure_code,
        "completed_at": tx.now,
    }
    if outcome is not None:
        changes["outcome"] = outcome
        changes["output"] = output
    if status in TERMINAL_STATUSES:
        # A run that reaches a terminal status is no longer under restore review (07 §8).
        changes["restore_review"] = False
    tx.set(**changes)


def _fail_run(tx: Transition, code: str, *, stopping_cancels: bool) -> None:
    """A definite failure; a call failure of a stopping run ends it `cancelled` instead."""
    if stopping_cancels and tx.run.cancel_mode == "stopping":
        settle(tx, "cancelled", code)
        tx.emit(Fail("cancelled", code))
    else:
        settle(tx, "failed", code)
        tx.emit(Fail("failed", code))


def dead_letter(
    tx: Transition,
    record: StepRecord,
    code: str,
    *,
    detail: str | None = None,
    stopping_cancels: bool = False,
) -> None:
    tx.update(
        record,
        state="dead-lettered",
        failure_code=code,
        detail=detail,
        finished_at=tx.now,
        due_at=None,
        awaiting=None,
        dispatched=False,
    )
    _fail_run(tx, code, stopping_cancels=stopping_cancels)


def mark_unknown(
    tx: Transition, record: StepRecord, code: str | None, *, receipt_expired: bool = False
) -> None:
    """T11 (and T27, T28, T32, T35): the effect is unknown; the run waits for an operator."""
    kept = code if code is not None else record.failure_code
    tx.update(
        record,
        state="unknown",
        uncertain=True,
        receipt_expired=record.receipt_expired or receipt_expired,
        failure_code=kept,
        finished_at=tx.now,
        due_at=None,
        awaiting=None,
    )
    tx.set(status="attention", failure_code=kept, completed_at=None)
    tx.emit(Attention(kept))


def expire(tx: Transition, record: StepRecord) -> None:
    """T26 (and T9): the deadline passed before the step completed."""
    tx.update(
        record,
        state="expired",
        failure_code="deadline-reached",
        finished_at=tx.now,
        due_at=None,
        awaiting=None,
    )
    settle(tx, "expired", "deadline-reached")
    tx.emit(Fail("expired", "deadline-reached"))


def deadline_reached(tx: Transition, record: StepRecord) -> None:
    """T26, or T27 for an `uncertain` record (only its product can settle it)."""
    if record.uncertain:
        mark_unknown(tx, record, None)
    else:
        expire(tx, record)


def cancel_record(tx: Transition, record: StepRecord) -> None:
    """A record stopped by the cancel: `cancelled`, and the run `cancelled` (07 §8)."""
    tx.update(record, state="cancelled", finished_at=tx.now, due_at=None, awaiting=None)
    settle(tx, "cancelled", tx.run.failure_code if tx.run.status == "failed" else None)
    tx.emit(Cancelled("cancelled"))
