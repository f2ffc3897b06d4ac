"""The engine's transitions are dispatched by one table (`engine.advance.TRANSITIONS`): every
event type has its handler, and an ended run is answered only by the events that answer it
themselves (the operator's actions and the restore hold, 07 §8, §9, §12)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, get_args

import pytest
from engine_support import Driver, definition, finish

from coordinator_core.engine import (
    Admitted,
    AttemptRefused,
    CallOutcome,
    CancelRequested,
    CompletionNotified,
    DeadlinePassed,
    Event,
    LeaseLapsed,
    ObservationOutcome,
    PreparationDone,
    ReadyToSend,
    ReceiptAnswer,
    ReconcileRequested,
    RestoreHold,
    RetrySame,
    StepDue,
    Work,
)
from coordinator_core.engine.advance import TRANSITIONS

EVENTS: list[Event] = [
    StepDue("end"),
    Work("end"),
    PreparationDone("end", b"{}"),
    ReadyToSend("end"),
    CallOutcome("end", "refused", code="invalid-command"),
    ObservationOutcome("end", "pending"),
    DeadlinePassed(),
    LeaseLapsed("end"),
    CompletionNotified(),
    AttemptRefused("end", "binding-conflict"),
    CancelRequested(),
    RetrySame(),
    ReconcileRequested(),
    ReceiptAnswer("end", 1, "unresolved"),
    RestoreHold(),
]


def test_every_event_but_the_admission_has_one_handler() -> None:
    assert set(TRANSITIONS) == set(get_args(Event)) - {Admitted}
    assert {type(event) for event in EVENTS} == set(TRANSITIONS)


@pytest.mark.parametrize("event", EVENTS, ids=lambda event: type(event).__name__)
def test_an_ended_run_is_answered_only_by_the_events_that_answer_it(event: Event) -> None:
    run = Driver(definition({"end": finish()}, "end"))
    run.claim("end")
    ended = run.state
    assert ended.is_terminal
    result = run.feed(event)
    assert result.state == ended and result.commands == ()
    operator = isinstance(
        event, CancelRequested | RetrySame | ReconcileRequested | ReceiptAnswer | RestoreHold
    )
    assert TRANSITIONS[type(event)].ended_too is operator
    if not operator:
        assert result.refused == "not-applicable"


def test_a_value_that_is_not_an_event_is_refused() -> None:
    @dataclass(frozen=True)
    class Stranger:
        kind: ClassVar[str] = "stranger"

    run = Driver(definition({"end": finish()}, "end"))
    with pytest.raises(TypeError, match="not an event"):
        run.feed(Stranger())  # type: ignore[arg-type]
