"""Properties of `advance` over random valid definitions and random reply, observation,
lease, cancel and operator scripts (hypothesis)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from engine_support import KEYS, OPERATIONS, SECOND, T0
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from coordinator_core.authoring.model import model_from_json
from coordinator_core.definition import graph
from coordinator_core.definition.snapshot import build_snapshot
from coordinator_core.engine import (
    FAILURE_CODES,
    Admitted,
    Advance,
    CallOutcome,
    CallStep,
    CancelRequested,
    Claimed,
    Command,
    CompletionNotified,
    DeadlinePassed,
    Definition,
    Dispatch,
    FreezeCommand,
    LeaseLapsed,
    LookupReceipt,
    ObservationOutcome,
    Observe,
    ObtainCredential,
    PreparationDone,
    Prepare,
    ReadyToSend,
    ReceiptAnswer,
    ReconcileRequested,
    RetrySame,
    RunState,
    StepDue,
    TimingPolicy,
    Work,
    advance,
    format_instant,
)
from coordinator_core.engine.inputs import Event
from coordinator_core.functions import compile_functions

SOURCE = """
fn request(input) { #{ id: input.id } }
fn request_after(input, seen) { #{ id: input.id } }
fn pick(input, name) { input.labels[name] }
fn instant(input, name) { input.times[name] }
fn publish(input) { input.out }
fn publish_after(input, seen) { input.out }
"""
PROGRAM = compile_functions(SOURCE).program
assert PROGRAM is not None

PROJECT_API_VERSION = "id.registrystack.org/formats/coordinator/project/v1alpha1"
CALL_ALIASES = ("record", "review", "notice", "action", "evaluate", "withdraw")
RESTING = {"finished", "failed", "cancelled", "cancelled-after-effect", "expired", "attention"}
MAX_EVENTS = 4000
REPLY_CODES = ("transport-unavailable", "product-refused", "rate-limited", "remote-uncertain")


def _mapping(function: str, *, literal: str | None = None, step: str | None = None) -> Any:
    arguments: list[dict[str, Any]] = [{"type": "input"}]
    if literal is not None:
        arguments.append({"type": "literal", "value": literal})
    if step is not None:
        arguments.append({"type": "step", "step": step})
    return {"function": function, "arguments": arguments}


@st.composite
def definitions(draw: st.DrawFn) -> tuple[Definition, dict[str, Any]]:
    """A random acyclic workflow whose every mapping reads only available outputs (02 §6)."""
    count = draw(st.integers(min_value=3, max_value=10).map(lambda n: 13 - n))
    kinds: list[str] = []
    while len(kinds) < count - 1:
        choices = ["call", "call", "choose", "wait-until", "wait", "wait"]
        kind = draw(st.sampled_from(choices if not kinds else [*choices, "finish"]))
        if kind == "wait":
            if len(kinds) + 2 < count:
                kinds += ["review", "wait-for"]
            continue
        kinds.append(kind)
    kinds.append("finish")
    ids = [f"s{i}" for i in range(len(kinds))]
    waits = {ids[i] for i, kind in enumerate(kinds) if kind == "wait-for"}

    def later(index: int) -> st.SearchStrategy[str]:
        # Half the routes go to the nearest eligible step, so that runs get long.
        targets = [s for s in ids[index + 1 :] if s not in waits]
        return st.integers(min_value=0, max_value=2 * len(targets) - 1).map(
            lambda roll: targets[0] if roll < len(targets) else targets[roll - len(targets)]
        )

    steps: dict[str, dict[str, Any]] = {}
    for index, (step_id, kind) in enumerate(zip(ids, kinds, strict=True)):
        if kind == "finish":
            outcome = draw(st.sampled_from(["done", "strict", "empty"]))
            steps[step_id] = {"type": "finish", "outcome": outcome}
            if outcome != "empty":
                steps[step_id]["output"] = _mapping("publish")
        elif kind in ("call", "review"):
            alias = "review" if kind == "review" else draw(st.sampled_from(CALL_ALIASES))
            step = {
                "type": "call",
                "operation": alias,
                "input": _mapping("request"),
                "next": ids[index + 1] if kind == "review" else draw(later(index)),
            }
            if alias == "action" and draw(st.booleans()):
                step["onDeclaredRefusal"] = {"gone": draw(later(index))}
            steps[step_id] = step
        elif kind == "choose":
            targets = draw(st.lists(later(index), min_size=1, max_size=3))
            steps[step_id] = {
                "type": "choose",
                "choose": _mapping("pick", literal=step_id),
                "cases": {f"c{i}": t for i, t in enumerate(targets)},
            }
        elif kind == "wait-until":
            steps[step_id] = {
                "type": "wait-until",
                "waitUntil": _mapping("instant", literal=step_id),
                "next": draw(later(index)),
            }
        else:
            step = {
                "type": "wait-for",
                "call": ids[index - 1],
                "completion": "result",
                "timeoutSeconds": draw(st.integers(min_value=60, max_value=3600)),
                "next": draw(later(index)),
            }
            for member in ("onTimeout", "onCancel"):
                if draw(st.booleans()):
                    step[member] = draw(later(index))
            steps[step_id] = step
    # Let some mappings read an output that the availability analysis says is there.
    shape = {"apiVersion": PROJECT_API_VERSION, "kind": "CoordinatorProject", "steps": steps}
    nodes = model_from_json(shape, file="workflow.yaml", artifact=None, out=[])
    assert nodes is not None and nodes.steps is not None
    edges = [edge for node in nodes.steps.values() for edge in graph.edges_of(node)]
    order, _ = graph.topological_order(ids[0], ids, edges)
    available = graph.availability(order, ids[0], edges)
    for step_id, step in steps.items():
        readable = sorted(available.get(step_id, frozenset()))
        if not readable or not draw(st.booleans()):
            continue
        seen = draw(st.sampled_from(readable))
        if step["type"] == "call":
            step["input"] = _mapping("request_after", step=seen)
        elif step["type"] == "finish" and "output" in step:
            step["output"] = _mapping("publish_after", step=seen)
    document = {
        "apiVersion": "id.registrystack.org/formats/coordinator/project/v1alpha1",
        "kind": "CoordinatorProject",
        "project": {"id": "random", "version": "1"},
        "input": {"type": "object"},
        "operations": OPERATIONS,
        "functionsFile": "functions.rhai",
        "deadlineSeconds": draw(st.sampled_from([86400, 86400, 86400, 7200, 600, 30])),
        "start": ids[0],
        "steps": steps,
        "outcomes": {
            "done": True,
            "strict": {"type": "object", "required": ["ok"]},
            "empty": {"type": "null"},
        },
    }
    definition = Definition.from_snapshot(build_snapshot(document, SOURCE), program=PROGRAM)
    labels = {
        step_id: _weighted(draw, next(iter(step["cases"])), [*step["cases"], "no-such-case"])
        for step_id, step in steps.items()
        if step["type"] == "choose"
    }
    times = {
        step_id: draw(
            st.integers(min_value=-600, max_value=31000).map(
                lambda s: "not a time" if s > 30000 else format_instant(T0 + s * SECOND)
            )
        )
        for step_id, step in steps.items()
        if step["type"] == "wait-until"
    }
    run_input = {
        "id": "x",
        "labels": labels,
        "times": times,
        "out": draw(st.sampled_from([{"ok": True}, 1, None])),
    }
    return definition, run_input


@dataclass
class Script:
    """What happened in one driven run: the events with their instants, and every result."""

    events: list[tuple[Event, int]] = field(default_factory=list)
    results: list[Advance] = field(default_factory=list)


def _weighted(draw: Any, common: Any, rare: list[Any], weight: int = 2) -> Any:
    """`common` with odds `weight` to 1 against each pass over `rare`, else one of `rare`."""
    roll: int = draw(st.integers(min_value=0, max_value=(weight + 1) * len(rare) - 1))
    return common if roll < weight * len(rare) else rare[roll - weight * len(rare)]


def _reply(draw: Any, dispatch: Dispatch, definition: Definition) -> CallOutcome:
    kind = _weighted(
        draw,
        "success",
        ["refused", "retryable", "retryable", "uncertain", "receipt-expired", "declared"],
        weight=3,
    )
    if kind == "success":
        return CallOutcome.success(dispatch.step, {"requestId": "r-1", "ok": True})
    if kind == "declared":
        return CallOutcome(
            dispatch.step, "declared-refusal", refusal_code=draw(st.sampled_from(["gone", "x"]))
        )
    if kind == "receipt-expired":
        return CallOutcome(dispatch.step, "receipt-expired")
    return CallOutcome(dispatch.step, kind, code=draw(st.sampled_from(REPLY_CODES)))


def _answer(draw: Any, command: Command, definition: Definition) -> Event:
    """A random answer of the shell to an I/O command."""
    if isinstance(command, Claimed):
        return Work(command.step)
    if isinstance(command, Prepare):
        prepared: Event = _weighted(
            draw,
            PreparationDone(command.step, b"prep"),
            [
                CallOutcome(command.step, "retryable", code="transport-unavailable"),
                CallOutcome(command.step, "refused", code="action-unavailable"),
            ],
            weight=6,
        )
        return prepared
    if isinstance(command, ObtainCredential):
        credential: Event = _weighted(
            draw,
            ReadyToSend(command.step),
            [
                CallOutcome(command.step, "retryable", code="credential-unavailable"),
                CallOutcome(command.step, "refused", code="credential-refused"),
            ],
            weight=6,
        )
        return credential
    if isinstance(command, Dispatch):
        return _reply(draw, command, definition)
    if isinstance(command, Observe):
        kind = _weighted(draw, "pending", ["complete", "complete", "refused", "retryable"])
        if kind == "complete":
            return ObservationOutcome.complete(command.step, {"status": "approved"})
        if kind == "pending":
            return ObservationOutcome(command.step, "pending")
        return ObservationOutcome(command.step, kind, code="product-not-found")
    assert isinstance(command, LookupReceipt)
    answer = draw(st.sampled_from(["confirmed", "unresolved", "expired", "unavailable"]))
    if answer == "confirmed":
        return ReceiptAnswer.confirmed(command.step, command.generation, {"id": "m"})
    return ReceiptAnswer(command.step, command.generation, answer)


IO = (Claimed, Prepare, ObtainCredential, Dispatch, Observe, LookupReceipt)
IoCommand = Claimed | Prepare | ObtainCredential | Dispatch | Observe | LookupReceipt


def drive(definition: Definition, run_input: Any, draw: Any) -> Script:
    """Play the shell and the operator with random choices until the run rests."""
    script = Script()
    policy = TimingPolicy(draw(st.sampled_from([(100, 500), (0, 0)])), 30)
    now = T0

    def feed(state: RunState | None, event: Event) -> Advance:
        result = advance(definition, state, event, now, KEYS)
        script.events.append((event, now))
        script.results.append(result)
        return result

    result = feed(None, Admitted.of(run_input, policy))
    state = result.state
    outstanding: list[IoCommand] = []
    operator_budget, cancels, lapses = 3, 0, 0
    while len(script.events) < MAX_EVENTS:
        outstanding = [c for c in result.commands if isinstance(c, IO)] or outstanding
        # Hypothesis favours boundary values, so a rare choice is a middle value.
        if cancels < 2 and draw(st.integers(min_value=0, max_value=99)) == 57:
            cancels += 1
            result = feed(state, CancelRequested())
            state = result.state
            continue
        if outstanding:
            command = outstanding.pop(0)
            if (
                lapses < 3
                and not isinstance(command, LookupReceipt)
                and draw(st.integers(min_value=0, max_value=12)) == 7
            ):
                lapses += 1
                now += 15 * SECOND
                result = feed(state, LeaseLapsed(command.step))
            else:
                now += draw(st.sampled_from([0, 0, 50, 2 * SECOND]))
                result = feed(state, _answer(draw, command, definition))
            state = result.state
            continue
        if state.status in ("running", "cancel-requested"):
            record = state.current
            assert record.state in ("pending", "leased"), (state.status, record.state)
            if record.type == "wait-for" and draw(st.integers(min_value=0, max_value=9)) == 4:
                now += draw(st.sampled_from([0, 5 * SECOND, 60 * SECOND]))
                result = feed(state, CompletionNotified())
            elif record.state == "leased":  # its I/O answer was lost: the lease lapses
                now += 15 * SECOND
                result = feed(state, LeaseLapsed(record.step))
            else:
                assert record.due_at is not None
                due = record.due_at
                if not record.pure and state.deadline_at <= due:
                    now = max(now, state.deadline_at)
                    result = feed(state, DeadlinePassed())
                else:
                    now = max(now, due)
                    result = feed(state, StepDue(record.step))
            state = result.state
            continue
        assert state.status in RESTING, state.status
        if state.is_terminal or operator_budget == 0 or not draw(st.booleans()):
            break
        operator_budget -= 1
        action = draw(st.sampled_from([RetrySame(), ReconcileRequested(), CancelRequested()]))
        result = feed(state, action)
        state = result.state
    return script


def _check_invariants(definition: Definition, script: Script) -> None:
    frozen: dict[str, str] = {}
    sent: dict[str, set[tuple[str, str | None]]] = {}
    held: set[str] = set()
    for result in script.results:
        state = result.state
        steps = [record.step for record in state.records]
        assert len(steps) == len(set(steps)), "a step record was created twice"
        if state.status in ("running", "cancel-requested"):
            assert state.current.state in ("pending", "leased"), "a live run rests on nothing"
        for code in [state.failure_code, *(r.failure_code for r in state.records)]:
            assert code is None or code in FAILURE_CODES
        for command in result.commands:
            if isinstance(command, FreezeCommand):
                assert frozen.setdefault(command.step, command.command) == command.command
            if isinstance(command, Dispatch):
                assert command.step not in held, "an evaluation that may have been sent was resent"
                assert command.command == frozen[command.step]
                sent.setdefault(command.step, set()).add((command.command, command.idempotency_key))
        for record in state.records:
            spec = definition.steps[record.step]
            if (
                record.uncertain
                and isinstance(spec, CallStep)
                and spec.alias.operation.recovery == "hold-after-dispatch"
            ):
                held.add(record.step)
    for step, variants in sent.items():
        assert len(variants) == 1, f"step {step} was sent with different bytes or keys"


@settings(
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(definitions(), st.data())
def test_every_random_run_keeps_the_engine_guarantees(
    generated: tuple[Definition, dict[str, Any]], data: st.DataObject
) -> None:
    """A mutating command is never sent with other bytes or another key; an evaluation that
    may have been sent is never sent again; no step is entered twice; a live run always has
    pending or leased work; every run rests within a bound; a mapping never reads an output
    that is not available (`advance` would raise EngineInvariantError); and replaying the same
    script gives the same states and commands."""
    definition, run_input = generated
    script = drive(definition, run_input, data.draw)
    # bounded: the run rests (finished, failed, cancelled…, expired or attention)
    assert len(script.events) < MAX_EVENTS
    final = script.results[-1].state
    assert final.status in RESTING
    event(f"ends {final.status}")
    event(f"{len(final.records)} records")
    _check_invariants(definition, script)
    assert RunState.from_json(json.loads(json.dumps(final.to_json()))) == final
    # the same script always gives the same result
    state: RunState | None = None
    for (fed, at), expected in zip(script.events, script.results, strict=True):
        replayed = advance(definition, state, fed, at, KEYS)
        assert replayed == expected
        state = replayed.state
