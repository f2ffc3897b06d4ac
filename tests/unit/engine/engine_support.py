"""Small in-memory workflows and a driver for engine tests (real interpreter, no project files)."""

from __future__ import annotations

from typing import Any

from coordinator_core.definition.snapshot import build_snapshot
from coordinator_core.engine import (
    Admitted,
    Advance,
    CallOutcome,
    Claimed,
    Command,
    CommitmentKeys,
    Definition,
    Dispatch,
    ObtainCredential,
    PreparationDone,
    Prepare,
    ReadyToSend,
    RunState,
    StepDue,
    StepRecord,
    TimingPolicy,
    Work,
    advance,
    parse_instant,
)
from coordinator_core.engine.inputs import Event

T0 = parse_instant("2026-03-02T09:00:00Z") or 0
SECOND = 1000
KEYS = CommitmentKeys(bytes(range(32)), "engine-tests", "a" * 64)

OPERATIONS: dict[str, dict[str, Any]] = {
    "record": {"operation": "breg.read-record/v1", "connection": "registry"},
    "review": {"operation": "casework.submit-review-request/v1", "connection": "reviews"},
    "notice": {"operation": "messaging.submit-message/v1", "connection": "notices"},
    "action": {
        "operation": "breg.invoke-action/v1",
        "connection": "registry",
        "action": "decide",
    },
    "evaluate": {"operation": "evaluation.evaluate/v1", "connection": "evaluator"},
    "withdraw": {"operation": "casework.withdraw-review-request/v1", "connection": "reviews"},
}

SOURCE = """
fn request(input) { #{ id: input.id } }
fn label(input) { input.label }
fn instant(input) { input.at }
fn publish(input) { input.out }
fn broken(input) { throw "refused"; }
fn text(input) { "not an object" }
fn from_review(review) { #{ requestId: review.requestId } }
fn echo(x) { x }
"""

INPUT: dict[str, Any] = {"id": "x-1", "label": "yes", "at": "2026-03-02T10:00:00Z", "out": 1}


def mapping(function: str = "request", *steps: str) -> dict[str, Any]:
    arguments: list[dict[str, Any]] = [{"type": "step", "step": s} for s in steps]
    if not steps:
        arguments = [{"type": "input"}]
    return {"function": function, "arguments": arguments}


def call(operation: str, next_step: str, **extra: Any) -> dict[str, Any]:
    step = {"type": "call", "operation": operation, "input": mapping(), "next": next_step}
    step.update(extra)
    return step


def choose(cases: dict[str, str], function: str = "label") -> dict[str, Any]:
    return {"type": "choose", "choose": mapping(function), "cases": cases}


def wait_until(next_step: str, function: str = "instant") -> dict[str, Any]:
    return {"type": "wait-until", "waitUntil": mapping(function), "next": next_step}


def wait_for(
    call_step: str,
    next_step: str,
    *,
    timeout: int = 3600,
    on_timeout: str | None = None,
    on_cancel: str | None = None,
) -> dict[str, Any]:
    step: dict[str, Any] = {
        "type": "wait-for",
        "call": call_step,
        "completion": "result",
        "timeoutSeconds": timeout,
        "next": next_step,
    }
    if on_timeout:
        step["onTimeout"] = on_timeout
    if on_cancel:
        step["onCancel"] = on_cancel
    return step


def finish(outcome: str = "done", output: dict[str, Any] | None = None) -> dict[str, Any]:
    step: dict[str, Any] = {"type": "finish", "outcome": outcome}
    if output is not None:
        step["output"] = output
    return step


def workflow(
    steps: dict[str, dict[str, Any]],
    start: str,
    *,
    deadline: int = 86400,
    outcomes: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "id.registrystack.org/formats/coordinator/project/v1alpha1",
        "kind": "CoordinatorProject",
        "project": {"id": "engine-test", "version": "1"},
        "input": {"type": "object"},
        "operations": OPERATIONS,
        "functionsFile": "functions.rhai",
        "deadlineSeconds": deadline,
        "start": start,
        "steps": steps,
        "outcomes": outcomes or {"done": True, "strict": {"type": "object", "required": ["ok"]}},
    }


def definition(
    steps: dict[str, dict[str, Any]],
    start: str,
    *,
    deadline: int = 86400,
    outcomes: dict[str, Any] | None = None,
    source: str = SOURCE,
) -> Definition:
    document = workflow(steps, start, deadline=deadline, outcomes=outcomes)
    return Definition.from_snapshot(build_snapshot(document, source))


class Driver:
    """Feeds events to one run and keeps its latest state and commands."""

    def __init__(
        self,
        definition: Definition,
        run_input: Any = None,
        *,
        at: int = T0,
        policy: TimingPolicy | None = None,
    ) -> None:
        self.definition = definition
        self.now = at
        first = advance(
            definition,
            None,
            Admitted.of(INPUT if run_input is None else run_input, policy),
            at,
            KEYS,
        )
        self.state: RunState = first.state
        self.commands: tuple[Command, ...] = first.commands
        self.log: list[Advance] = [first]

    def feed(self, event: Event, *, at: int | None = None) -> Advance:
        if at is not None:
            self.now = at
        result = advance(self.definition, self.state, event, self.now, KEYS)
        self.state = result.state
        self.commands = result.commands
        self.log.append(result)
        return result

    def status(self) -> str:
        """The run status (a call, so that a type checker does not narrow it across feeds)."""
        return self.state.status

    def record(self, step: str) -> StepRecord:
        record = self.state.record(step)
        assert record is not None, step
        return record

    def lease(self, step: str) -> Advance:
        """Feed StepDue for `step` at its due time (never earlier than now): T2 only."""
        due = self.record(step).due_at
        assert due is not None, step
        return self.feed(StepDue(step), at=max(self.now, due))

    def claim(self, step: str) -> Advance:
        """Lease `step` and do its work (StepDue, then Work when the lease was granted)."""
        leased = self.lease(step)
        if [c for c in leased.commands if isinstance(c, Claimed)]:
            return self.feed(Work(step))
        return leased

    def send(self, step: str) -> Dispatch:
        """Claim a call and walk it to its Dispatch (preparation and credential succeed)."""
        self.claim(step)
        while True:
            kinds = [type(c) for c in self.commands]
            if Prepare in kinds:
                self.feed(PreparationDone(step, b"prepared"))
            elif ObtainCredential in kinds:
                self.feed(ReadyToSend(step))
            else:
                break
        dispatch = [c for c in self.commands if isinstance(c, Dispatch)]
        assert dispatch, self.commands
        return dispatch[0]

    def answer(self, step: str, outcome: str, **members: Any) -> Advance:
        if outcome == "success":
            return self.feed(CallOutcome.success(step, members.get("value", {})))
        return self.feed(CallOutcome(step, outcome, **members))  # type: ignore[arg-type]

    def succeed(self, step: str, value: Any = None) -> Advance:
        self.send(step)
        return self.answer(step, "success", value={} if value is None else value)


def kinds(commands: tuple[Command, ...]) -> list[str]:
    return [c.kind for c in commands]
