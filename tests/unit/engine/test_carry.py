"""Claiming and carrying a run on (07 §7.2, §7.7): a continued chain is the same sequence of
events as the same records claimed one by one, and it never crosses what §7.7 item 1 forbids;
a chain of pure work only (`pure_only`, the batch fire of due waits) is the first part of that
same chain and never holds a lease."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from engine_support import KEYS, T0, call, choose, definition, finish, wait_until
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_properties import definitions, drive

from coordinator_core.engine import (
    MAX_CARRIED,
    Admitted,
    Advance,
    CallOutcome,
    Carried,
    Definition,
    Dispatch,
    FreezeCommand,
    LookupReceipt,
    Observe,
    ObtainCredential,
    Prepare,
    RunState,
    StepRecord,
    TimingPolicy,
    advance,
    carry_on,
    claim_record,
    needs_credential,
    send_ready,
)
from coordinator_core.engine.carry import PURE_WORK

_IO = (Prepare, ObtainCredential, Dispatch, Observe, LookupReceipt)


def _may_go_on(state: RunState, now: int) -> StepRecord | None:
    """The record a continuation may lease next (07 §7.7 item 1), or None."""
    if state.is_terminal or state.restore_review or state.cancel_mode == "stopping":
        return None
    if now >= state.deadline_at:
        return None
    record = state.record(state.current_step)
    if record is None or record.state != "pending" or record.due_at is None:
        return None
    return record if record.due_at <= now else None


def _one_by_one(
    definition: Definition,
    state: RunState,
    now: int,
    budget: int = MAX_CARRIED,
    *,
    pure_only: bool = False,
) -> Carried:
    """The records claimed one at a time, each by its own claim (no carrying); with
    `pure_only`, only as long as the next record's work needs no I/O."""
    commands: list[Any] = []
    entries: list[Any] = []
    leased = 0
    holding: str | None = None
    while leased < budget and holding is None:
        record = _may_go_on(state, now)
        if record is None or (pure_only and record.type not in PURE_WORK):
            break
        claimed = claim_record(definition, state, record.step, now, KEYS, carry=False)
        assert claimed.refused is None
        state = claimed.state
        commands.extend(claimed.commands)
        entries.extend(claimed.entries)
        leased += claimed.leased
        holding = claimed.holding
    return Carried(state, tuple(commands), tuple(entries), holding)


def _check_chain(before: RunState, carried: Carried, now: int) -> None:
    assert carried.leased <= MAX_CARRIED
    for kind, record in carried.entries:
        if kind == "leased":
            assert record.state == "leased" and record.attempt_started_at == now
    if carried.holding is not None:
        assert carried.state.record(carried.holding).state == "leased"  # type: ignore[union-attr]
    # at most one record is leased at any time
    assert sum(1 for record in carried.state.records if record.state == "leased") <= 1


_EVERY_STATE = settings(
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _claimable_states(
    generated: tuple[Definition, dict[str, Any]], data: st.DataObject
) -> Iterator[tuple[Advance, int, StepRecord]]:
    """Every state a random run passes through with a record a claim may take: the result
    that led there, its instant and the record."""
    definition, run_input = generated
    script = drive(definition, run_input, data.draw)
    for (_, now), result in zip(script.events, script.results, strict=True):
        record = _may_go_on(result.state, now)
        if record is not None:
            yield result, now, record


@_EVERY_STATE
@given(definitions(), st.data())
def test_a_carried_chain_is_the_same_records_claimed_one_by_one(
    generated: tuple[Definition, dict[str, Any]], data: st.DataObject
) -> None:
    """From every state a random run passes through: a claim that carries the run on gives
    the same state, commands and journal entries as claiming each record on its own; and a
    finish that carries on gives the same as the finish followed by one-by-one claims."""
    definition = generated[0]
    for result, now, record in _claimable_states(generated, data):
        state = result.state
        carried = claim_record(definition, state, record.step, now, KEYS)
        assert carried.refused is None
        expected = _one_by_one(definition, state, now)
        assert carried == expected
        _check_chain(state, carried, now)
        continued = carry_on(definition, result, now, KEYS)
        after = _one_by_one(definition, state, now, MAX_CARRIED - 1)
        assert continued.state == after.state
        assert continued.commands == result.commands + after.commands
        assert continued.entries == after.entries
        # A continuation previewed without a credential, then finished with the credential it
        # asks for, is the continuation made with that credential at once (the worker keeps
        # its preview); with none, or one it does not ask for, the preview stays as it is.
        wanted = needs_credential(continued)
        assert send_ready(definition, continued, wanted, now, KEYS) == carry_on(
            definition, result, now, KEYS, ready=wanted
        )
        assert send_ready(definition, continued, ("other-step", "other"), now, KEYS) is continued


@_EVERY_STATE
@given(definitions(), st.data())
def test_a_pure_chain_is_the_start_of_the_carried_chain_and_never_holds_a_lease(
    generated: tuple[Definition, dict[str, Any]], data: st.DataObject
) -> None:
    """From every state a random run passes through: a claim of pure work only gives the same
    state, commands and entries as claiming the records of pure work one by one; it holds no
    lease and asks for no I/O; the record it stops at is one that needs I/O (left pending and
    due) or the budget is spent; and claiming on from there gives what one carried claim
    gives. A record whose work needs I/O is refused and nothing changes."""
    definition = generated[0]
    for result, now, record in _claimable_states(generated, data):
        state = result.state
        pure = claim_record(definition, state, record.step, now, KEYS, pure_only=True)
        if record.type not in PURE_WORK:
            assert pure.refused is not None and pure.state == state
            assert (pure.commands, pure.entries) == ((), ())
            continue
        assert pure.refused is None
        assert pure == _one_by_one(definition, state, now, pure_only=True)
        assert pure.holding is None
        assert all(row.state != "leased" for row in pure.state.records)
        assert not any(isinstance(command, _IO) for command in pure.commands)
        following = _may_go_on(pure.state, now)
        if following is not None and pure.leased < MAX_CARRIED:
            assert following.type not in PURE_WORK
            assert following.state == "pending" and following.due_at is not None
            assert following.due_at <= now
        carried = claim_record(definition, state, record.step, now, KEYS)
        rest = _one_by_one(definition, pure.state, now, MAX_CARRIED - pure.leased)
        assert carried.state == rest.state
        assert carried.commands == pure.commands + rest.commands
        assert carried.entries == pure.entries + rest.entries
        assert carried.holding == rest.holding


def test_a_pure_claim_of_a_due_wait_leaves_the_call_after_it_pending_and_due() -> None:
    later = definition(
        {"wait": wait_until("read"), "read": call("record", "done"), "done": finish()},
        "wait",
    )
    admitted = _admitted(later, {"id": "x", "at": "2026-03-02T10:00:00Z"})
    parked = claim_record(later, admitted.state, "wait", T0, KEYS)
    wait = parked.state.record("wait")
    assert wait is not None and wait.state == "pending" and wait.due_at is not None
    fired = claim_record(later, parked.state, "wait", wait.due_at, KEYS, pure_only=True)
    assert [(kind, record.step, record.state) for kind, record in fired.entries] == [
        ("leased", "wait", "leased"),
        ("left", "wait", "delivered"),
    ]
    assert fired.holding is None
    read = fired.state.record("read")
    assert read is not None and (read.state, read.due_at, read.command) == (
        "pending",
        wait.due_at,
        None,
    )
    # the call itself is never claimed in this mode
    refused = claim_record(later, fired.state, "read", wait.due_at, KEYS, pure_only=True)
    assert refused.refused is not None and refused.state == fired.state


def _admitted(definition: Definition, run_input: Any, now: int = T0) -> Advance:
    return advance(definition, None, Admitted.of(run_input, TimingPolicy()), now, KEYS)


def test_a_claim_freezes_the_request_and_carries_through_pure_records() -> None:
    chain = definition(
        {
            "pick": choose({"yes": "read"}),
            "read": call("record", "done"),
            "done": finish(),
        },
        "pick",
    )
    admitted = _admitted(chain, {"id": "x-1", "label": "yes"})
    carried = claim_record(chain, admitted.state, "pick", T0, KEYS)
    assert [(kind, record.step) for kind, record in carried.entries] == [
        ("leased", "pick"),
        ("left", "pick"),
        ("leased", "read"),
    ]
    assert carried.holding == "read"
    assert [type(c) for c in carried.commands if isinstance(c, FreezeCommand | ObtainCredential)]
    read = carried.state.record("read")
    assert read is not None and read.command is not None  # frozen with the claim (item 2)
    answered = advance(chain, carried.state, CallOutcome.success("read", {"ok": True}), T0, KEYS)
    # not ready yet: the credential comes first
    assert answered.refused is not None
    # With that credential at hand (07 §7.7 item 7) the held call goes on to its dispatch.
    wanted = needs_credential(carried)
    assert wanted is not None and wanted[0] == "read"
    sent = send_ready(chain, carried, wanted, T0, KEYS)
    assert isinstance(sent.commands[-1], Dispatch) and sent.holding == "read"
    assert sent.commands[: len(carried.commands)] == carried.commands
    assert send_ready(chain, carried, ("read", "another-connection"), T0, KEYS) is carried
    assert send_ready(chain, carried, None, T0, KEYS) is carried


def test_a_chain_stops_at_a_record_that_is_not_due() -> None:
    later = definition(
        {"wait": wait_until("done"), "done": finish()},
        "wait",
    )
    admitted = _admitted(later, {"id": "x", "at": "2026-03-02T10:00:00Z"})
    carried = claim_record(later, admitted.state, "wait", T0, KEYS)
    assert carried.holding is None
    record = carried.state.record("wait")
    assert record is not None and record.state == "pending" and record.due_at is not None
    assert record.due_at > T0
    assert [kind for kind, _ in carried.entries] == ["leased", "left"]
    assert carried.state.record("done") is None


def test_a_chain_carries_at_most_sixteen_records() -> None:
    steps: dict[str, dict[str, Any]] = {}
    count = MAX_CARRIED + 4
    for index in range(count):
        steps[f"c{index}"] = choose({"yes": f"c{index + 1}" if index + 1 < count else "done"})
    steps["done"] = finish()
    long = definition(steps, "c0")
    admitted = _admitted(long, {"id": "x", "label": "yes"})
    carried = claim_record(long, admitted.state, "c0", T0, KEYS)
    assert carried.leased == MAX_CARRIED
    assert carried.state.current_step == f"c{MAX_CARRIED}"
    assert carried.state.current.state == "pending"
