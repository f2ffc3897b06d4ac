"""Engine values: JSON round trips, commitments (07 §3 vectors) and instants."""

from __future__ import annotations

import json

import pytest
from engine_support import T0, Driver, call, definition, finish, wait_for

from coordinator_core.engine import (
    Admitted,
    AttemptRefused,
    CallOutcome,
    CancelRequested,
    CommitmentKeys,
    CompletionNotified,
    DeadlinePassed,
    FormatError,
    LeaseLapsed,
    ObservationOutcome,
    PreparationDone,
    ReadyToSend,
    ReceiptAnswer,
    ReconcileRequested,
    RestoreHold,
    RetrySame,
    RunState,
    StepDue,
    TimingPolicy,
    Work,
    command_from_json,
    commitment,
    event_from_json,
    format_instant,
    parse_instant,
)

KEY = bytes(range(32))


def test_commitments_match_the_contract_vectors() -> None:
    owner = commitment(KEY, "owner", ["reviewed-notice-dev", "http://127.0.0.1:8100", "user-1"])
    assert owner == "71c81206d5f6b89b000af2820e4d807ced29d408b206c98a73f0bb4eb627ad9c"
    start = commitment(KEY, "start", ["reviewed-notice-dev", owner, "reviewed-notice", "key-1"])
    assert start == "aa8d2cbdabe3681c7e6c8e26fb408414bf7657dc4fbf497efdb41bb0dffe70fc"
    keys = CommitmentKeys(KEY, "reviewed-notice-dev", start)
    assert keys.command_key("request-review") == (
        "ba6cb370cb772252bdd25dae1d8bdc6a126858d92eb9b079f62246f432b2d1b3"
    )
    assert "admission_key" not in repr(keys)


@pytest.mark.parametrize(
    ("text", "instant"),
    [
        ("2026-03-02T09:00:00Z", 1772442000000),
        ("2026-03-02T10:00:00+01:00", 1772442000000),
        ("2026-03-02t09:00:00.1234z", 1772442000123),
        ("1969-12-31T23:59:59.999-00:00", -1),
        ("2016-12-31T23:59:60Z", 1483228800000),
    ],
)
def test_instants_parse_rfc3339_with_offset_to_milliseconds(text: str, instant: int) -> None:
    assert parse_instant(text) == instant


@pytest.mark.parametrize(
    "text", ["2026-03-02T09:00:00", "2026-02-30T09:00:00Z", "tomorrow", 5, None]
)
def test_instants_refuse_anything_but_a_date_time_with_offset(text: object) -> None:
    assert parse_instant(text) is None


def test_instants_format_as_audit_time() -> None:
    assert format_instant(T0 + 5) == "2026-03-02T09:00:00.005Z"
    assert parse_instant(format_instant(-62167219200000)) == -62167219200000


def test_run_state_round_trips_through_json() -> None:
    review = definition(
        {"ask": call("review", "wait"), "wait": wait_for("ask", "end"), "end": finish()}, "ask"
    )
    run = Driver(review, policy=TimingPolicy((0, 0), 60))
    run.succeed("ask", {"requestId": "r", "n": 2.5})
    text = json.dumps(run.state.to_json())
    assert RunState.from_json(json.loads(text)) == run.state


def test_run_state_from_json_refuses_unknown_and_mistyped_members() -> None:
    data = Driver(definition({"end": finish()}, "end")).state.to_json()
    with pytest.raises(FormatError):
        RunState.from_json({**data, "extra": 1})
    with pytest.raises(FormatError):
        RunState.from_json({**data, "status": "paused"})
    with pytest.raises(FormatError):
        RunState.from_json({**data, "admittedAt": "now"})
    with pytest.raises(FormatError):
        RunState.from_json({**data, "records": [{"step": "x"}]})


EVENTS = [
    Admitted.of({"a": [1, 2.5, None]}, TimingPolicy((0, 0), 45)),
    StepDue("s"),
    Work("s"),
    PreparationDone("s", b"p"),
    ReadyToSend("s"),
    CallOutcome.success("s", {"v": True}),
    CallOutcome("s", "declared-refusal", refusal_code="gone"),
    ObservationOutcome.complete("s", {"status": "ok"}),
    ObservationOutcome("s", "retryable", code="transport-unavailable"),
    DeadlinePassed(),
    LeaseLapsed("s"),
    CompletionNotified(),
    CancelRequested(),
    RetrySame(binding_unchanged=False),
    ReconcileRequested(payload_erased=True),
    ReceiptAnswer.confirmed("s", 2, {"id": "m"}),
    RestoreHold(),
    AttemptRefused("s", "binding-conflict"),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: e.kind)
def test_events_round_trip_through_json(event: object) -> None:
    data = json.loads(json.dumps(event.to_json()))  # type: ignore[attr-defined]
    assert event_from_json(data) == event


def test_commands_of_a_whole_run_round_trip_through_json() -> None:
    run = Driver(definition({"send": call("action", "end"), "end": finish()}, "send"))
    run.succeed("send", {"ok": True})
    run.claim("end")
    commands = [c for result in run.log for c in result.commands]
    assert {c.kind for c in commands} >= {"claimed", "freeze-command", "prepare", "dispatch"}
    for command in commands:
        assert command_from_json(json.loads(json.dumps(command.to_json()))) == command


def test_event_and_command_decoding_refuse_unknown_kinds() -> None:
    with pytest.raises(FormatError):
        event_from_json({"kind": "teleport"})
    with pytest.raises(FormatError):
        command_from_json({"kind": "step-due", "step": "s"})
    with pytest.raises(FormatError):
        event_from_json({"kind": "step-due", "step": 5})
