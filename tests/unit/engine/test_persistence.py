"""`Advance.persistence`: the engine says what its result needs made durable before the shell
carries out its commands (07 §7.2) — the shell classifies no command itself — and
`StepRecord.ending` says how a left record's attempt ended (07 §11)."""

from __future__ import annotations

from engine_support import Driver, call, definition, finish, kinds
from test_transitions import ACT, READ, SEND

from coordinator_core.engine import CallOutcome, ReadyToSend, StepRecord, StepRoute


def test_a_reads_credential_needs_nothing_durable_a_mutations_needs_its_mark() -> None:
    read = Driver(READ)
    read.claim("read")
    assert read.feed(ReadyToSend("read")).persistence("read") == "memory"
    send = Driver(SEND)
    send.claim("send")
    ready = send.feed(ReadyToSend("send"))
    assert "mark-may-send" in kinds(ready.commands)
    assert ready.persistence("send") == "fence"


def test_a_frozen_preparation_is_fenced_and_an_outcome_finishes_the_record() -> None:
    act = Driver(ACT)
    act.claim("act")
    from coordinator_core.engine import PreparationDone

    prepared = act.feed(PreparationDone("act", b"prepared"))
    assert "freeze-preparation" in kinds(prepared.commands)
    assert prepared.persistence("act") == "fence"
    act.feed(ReadyToSend("act"))
    assert act.feed(CallOutcome.success("act", {})).persistence("act") == "finish"


def test_a_retryable_outcome_puts_the_record_back_and_finishes_the_attempt() -> None:
    read = Driver(READ)
    read.send("read")
    retried = read.answer("read", "retryable", code="remote-retryable")
    assert retried.persistence("read") == "finish"
    assert read.record("read").state == "pending"
    assert read.record("read").ending == "retry"


def test_the_ending_of_each_left_state() -> None:
    base = StepRecord("s", "call", "delivered", entered_at=0)
    assert base.ending == "delivered"
    timed = StepRecord("w", "wait-for", "delivered", entered_at=0, route=StepRoute("timeout"))
    assert timed.ending == "timed-out"
    assert StepRecord("w", "wait-until", "pending", entered_at=0).ending == "pending"
    dead = StepRecord("s", "call", "dead-lettered", entered_at=0, failure_code="x")
    assert dead.ending == "dead-lettered"
    waited = StepRecord(
        "w", "wait-for", "dead-lettered", entered_at=0, failure_code="wait-timed-out"
    )
    assert waited.ending == "timed-out"
    for state in ("unknown", "expired", "cancelled"):
        assert StepRecord("s", "call", state, entered_at=0).ending == state  # type: ignore[arg-type]


def test_a_step_that_moved_on_is_a_finish_for_its_holder() -> None:
    quick = definition({"a": call("record", "b"), "b": finish()}, "a")
    run = Driver(quick)
    done = run.succeed("a")
    assert done.persistence("a") == "finish"
    assert done.persistence("b") == "finish"  # not leased by this event either
