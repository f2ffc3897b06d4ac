"""Commands `advance` returns: the work and the durable writes the shell carries out, in order.

The shell persists the new state and each write-ahead command (`FreezeCommand`,
`FreezePreparation`, `MarkMaySend`) before it performs the I/O command that follows it, and
answers each I/O command (`Claimed`, `Prepare`, `ObtainCredential`, `Dispatch`, `Observe`,
`LookupReceipt`) with an event. The sealed request, its key, its preparation and a completion
reference never appear in a command's `repr` (the adapters take these commands as they are). `Schedule*` set the record's due time; `Finish`, `Fail`,
`Cancelled` and `Attention` announce a run status change (for audit and sealing).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from coordinator_core.engine.instants import Instant
from coordinator_core.engine.serial import FormatError, Tagged, decode

__all__ = [
    "Attention",
    "Cancelled",
    "Claimed",
    "Command",
    "Dispatch",
    "Fail",
    "Finish",
    "FreezeCommand",
    "FreezePreparation",
    "LookupReceipt",
    "MarkMaySend",
    "Observe",
    "ObtainCredential",
    "Prepare",
    "ScheduleDue",
    "ScheduleObservation",
    "command_from_json",
]


@dataclass(frozen=True, slots=True)
class ScheduleDue(Tagged):
    """The record of `step` is pending and due at `at` (first attempt, retry, timer)."""

    kind: ClassVar[str] = "schedule-due"
    step: str
    at: Instant


@dataclass(frozen=True, slots=True)
class ScheduleObservation(Tagged):
    """The `wait-for` record of `step` is pending; its next observation (or timeout) is at `at`."""

    kind: ClassVar[str] = "schedule-observation"
    step: str
    at: Instant


@dataclass(frozen=True, slots=True)
class Claimed(Tagged):
    """The record of `step` is leased (T2): commit the claim and its audit intent, then answer
    with `Work`. A lease that lapses before the work is recorded is `LeaseLapsed`."""

    kind: ClassVar[str] = "claimed"
    step: str
    generation: int
    attempt: int


@dataclass(frozen=True, slots=True)
class FreezeCommand(Tagged):
    """Store the prepared request (sealed, purpose `command`) if none is stored (freeze fence).

    `command` is the canonical JSON of `{alias, operation, connection, input, idempotencyKey?}`;
    every later attempt and every `retry-same` sends these exact bytes.
    """

    kind: ClassVar[str] = "freeze-command"
    step: str
    command: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class Prepare(Tagged):
    """Run the operation's preparation with a fresh credential (07 §7.4 step 3); answer with
    `PreparationDone`, or a `CallOutcome` (retryable/refused) when it fails."""

    kind: ClassVar[str] = "prepare"
    step: str
    operation: str
    connection: str
    command: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class FreezePreparation(Tagged):
    """Store the preparation next to the frozen request (it is never replaced)."""

    kind: ClassVar[str] = "freeze-preparation"
    step: str
    preparation: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class ObtainCredential(Tagged):
    """Obtain a fresh credential for the connection (07 §7.4 step 5); answer with
    `ReadyToSend`, or a `CallOutcome` (retryable `credential-unavailable` or refused
    `credential-refused`)."""

    kind: ClassVar[str] = "obtain-credential"
    step: str
    connection: str


@dataclass(frozen=True, slots=True)
class MarkMaySend(Tagged):
    """The pre-send fence: commit `dispatched`/`sent` and the dispatch intent before the request
    of this mutation or evaluation leaves the process (guarantee 5)."""

    kind: ClassVar[str] = "mark-may-send"
    step: str
    generation: int
    attempt: int


@dataclass(frozen=True, slots=True)
class Dispatch(Tagged):
    """Send the frozen command (answer with a `CallOutcome`)."""

    kind: ClassVar[str] = "dispatch"
    step: str
    operation: str
    connection: str
    command: str = field(repr=False)
    idempotency_key: str | None = field(repr=False)
    preparation: bytes | None = field(repr=False)
    generation: int
    attempt: int


@dataclass(frozen=True, slots=True)
class Observe(Tagged):
    """Read the awaited completion through `operation` (answer with an `ObservationOutcome`).
    `reference` is the canonical JSON of the completion reference."""

    kind: ClassVar[str] = "observe"
    step: str
    operation: str
    connection: str
    reference: str | None = field(repr=False)


@dataclass(frozen=True, slots=True)
class LookupReceipt(Tagged):
    """Ask the product for the receipt of the original key and request (07 §9.2); answer with
    a `ReceiptAnswer` for the same generation."""

    kind: ClassVar[str] = "lookup-receipt"
    step: str
    operation: str
    connection: str
    command: str = field(repr=False)
    idempotency_key: str | None = field(repr=False)
    generation: int


@dataclass(frozen=True, slots=True)
class Finish(Tagged):
    """The run reached a finish: `finished`, or `cancelled` on the cancel path (T14)."""

    kind: ClassVar[str] = "finish"
    status: Literal["finished", "cancelled"]
    outcome: str
    output: str


@dataclass(frozen=True, slots=True)
class Fail(Tagged):
    """The run stopped on a failure: `failed`, `expired` (`deadline-reached`), or `cancelled`
    when a definite failure ended a run that was stopping."""

    kind: ClassVar[str] = "fail"
    status: Literal["failed", "expired", "cancelled"]
    failure_code: str


@dataclass(frozen=True, slots=True)
class Cancelled(Tagged):
    """A cancel stopped the run: `cancelled`, or `cancelled-after-effect` when a mutation or
    evaluation in flight at the cancel was accepted."""

    kind: ClassVar[str] = "cancelled"
    status: Literal["cancelled", "cancelled-after-effect"]


@dataclass(frozen=True, slots=True)
class Attention(Tagged):
    """An effect is unknown (or its receipt expired): the run waits for an operator."""

    kind: ClassVar[str] = "attention"
    failure_code: str | None


Command = (
    ScheduleDue
    | ScheduleObservation
    | Claimed
    | FreezeCommand
    | Prepare
    | FreezePreparation
    | ObtainCredential
    | MarkMaySend
    | Dispatch
    | Observe
    | LookupReceipt
    | Finish
    | Fail
    | Cancelled
    | Attention
)

_COMMAND_TYPES: dict[str, type[Any]] = {
    cls.kind: cls
    for cls in (
        ScheduleDue,
        ScheduleObservation,
        Claimed,
        FreezeCommand,
        Prepare,
        FreezePreparation,
        ObtainCredential,
        MarkMaySend,
        Dispatch,
        Observe,
        LookupReceipt,
        Finish,
        Fail,
        Cancelled,
        Attention,
    )
}


def command_from_json(data: Any) -> Command:
    """The command whose JSON form (with its `kind`) is `data`."""
    if not isinstance(data, dict) or data.get("kind") not in _COMMAND_TYPES:
        raise FormatError("Not an engine command.")
    command: Command = decode(_COMMAND_TYPES[data["kind"]], data)
    return command
