"""One scenario case on a virtual clock (file 04 §4), driving the engine and nothing else.

The runner is the engine's shell for offline runs: it feeds events in virtual-time order (a
cancel before anything else at the same instant), answers every I/O command with the case's
scripted replies and observations, and acts as the operator (`recovery`). Every step semantic
comes from `engine.advance`; calls take no virtual time because the run's retry policy has zero
delays, exactly as 04 §4.5 says.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any, Final

from coordinator_core.authoring.decode import AuthoredFile
from coordinator_core.definition.ir import EngineInvariantError
from coordinator_core.engine import (
    Admitted,
    Advance,
    CallOutcome,
    CancelRequested,
    Claimed,
    Command,
    DeadlinePassed,
    Definition,
    Dispatch,
    FreezeCommand,
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
    StepRecord,
    TimingPolicy,
    advance,
    claim_record,
    parse_instant,
    to_canonical,
)
from coordinator_core.engine.detail import FailureDetail
from coordinator_core.engine.inputs import Event
from coordinator_core.errors import Diagnostic, Related
from coordinator_core.functions.errors import FunctionError
from coordinator_core.scenarios.rules import scenario_diagnostic
from coordinator_core.values import JsonBoundsError, check_json_value, pointer_token

__all__ = ["CaseResult", "ScenarioKeys", "run_case"]

MAX_ITERATIONS: Final = 65
"""Steps a case may enter (04 §4.3); more is `coordinator.scenario.bound`."""
MAX_EVENTS: Final = 250_000
"""Events one case may feed the engine before it counts as not stopping. A one-year wait
observed every 900 s needs about 70,000."""
DEFAULT_EVENT_ID: Final = "00000000-0000-4000-8000-000000000000"
DEFAULT_FLOOR_SECONDS: Final = 30

_FAILURE_STATUSES: Final = frozenset({"failed", "attention"})
_MAPPING_CODES: Final = frozenset({"mapping-invalid", "choice-invalid", "outcome-invalid"})


@dataclass(frozen=True)
class ScenarioKeys:
    """Offline keys: the scenario command key of 04 §4.5 step 2 and a digest as completion
    reference (no admission key exists offline)."""

    case_id: str
    definition_digest: str

    def command_key(self, step: str) -> str:
        text = f"{self.case_id}\u0000{step}\u0000{self.definition_digest}"
        return "scenario-" + hashlib.sha256(text.encode("utf-8")).hexdigest()

    def completion_ref(self, connection: str, reference: str) -> str:
        text = f"{connection}\u0000{reference}"
        return "scenario-" + hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CaseResult:
    """The result of one case (04 §5). `ran` is False when the case never started (a document
    rule, or a runner error at the start); then only `id` and `passed` are reported."""

    id: str | None
    index: int
    passed: bool
    ran: bool = False
    status: str | None = None
    path: tuple[str, ...] = ()
    outcome: str | None = None
    output: Any = None
    failure_code: str | None = None
    effects: tuple[tuple[str, str], ...] = ()
    elapsed_ms: int = 0
    call_attempts: Mapping[str, int] = field(default_factory=dict)
    observations: Mapping[str, int] = field(default_factory=dict)
    frozen_commands: int = 0
    mapping_failure: tuple[str, str] | None = None
    routes: frozenset[str] = frozenset()
    diagnostics: tuple[Diagnostic, ...] = ()
    differences: tuple[str, ...] = ()  # the `expect` members that differ (04 §2.4 order)

    @property
    def elapsed_seconds(self) -> int | float:
        whole, rest = divmod(self.elapsed_ms, 1000)
        return whole if rest == 0 else self.elapsed_ms / 1000

    def to_json(self, route_order: tuple[str, ...] = ()) -> dict[str, Any]:
        """The per-case result of the `test` report (04 §5), plus the routes it took."""
        result: dict[str, Any] = {"id": self.id, "passed": self.passed}
        if not self.ran:
            return result
        rank = {route: position for position, route in enumerate(route_order)}
        result.update(
            {
                "status": self.status,
                "path": list(self.path),
                "outcome": (
                    {"type": "named", "value": self.outcome}
                    if self.outcome is not None
                    else {"type": "none"}
                ),
                "output": self.output,
                "failureCode": self.failure_code,
                "effects": [{"step": step, "state": state} for step, state in self.effects],
                "elapsedSeconds": self.elapsed_seconds,
                "callAttempts": dict(self.call_attempts),
                "observations": dict(self.observations),
                "frozenCommands": self.frozen_commands,
                "mappingFailure": (
                    {"step": self.mapping_failure[0], "code": self.mapping_failure[1]}
                    if self.mapping_failure is not None
                    else None
                ),
                "routes": sorted(self.routes, key=lambda r: (rank.get(r, len(rank)), r)),
            }
        )
        return result


class _RunnerError(Exception):
    """A runner error of 04 §4.10: the case stops and reports only this."""

    def __init__(self, code: str, pointer: str, related: tuple[Related, ...] = ()) -> None:
        super().__init__(code)
        self.code = code
        self.pointer = pointer
        self.related = related


class _Case:
    """The mutable bookkeeping of one running case; the run itself lives in `state`."""

    def __init__(self, definition: Definition, index: int, case: Mapping[str, Any]) -> None:
        self.definition = definition
        self.base = f"/cases/{index}"
        self.case = case
        self.case_id = str(case.get("id", ""))
        self.keys = ScenarioKeys(self.case_id, definition.definition_digest)
        admitted = parse_instant(case["admittedAt"])
        assert admitted is not None  # C1 passed
        self.admitted_at: int = admitted
        self.now: int = admitted
        cancel = case.get("cancel")
        self.cancel_at: int | None = (
            admitted + int(cancel["afterSeconds"]) * 1000 if isinstance(cancel, Mapping) else None
        )
        self.cancel_done = False
        self.replies: Mapping[str, list[Any]] = case.get("replies") or {}
        self.scripted_observations: Mapping[str, list[Any]] = case.get("observations") or {}
        self.recovery: Mapping[str, str] = case.get("recovery") or {}
        self.used_replies: dict[str, int] = {}
        self.used_observations: dict[str, int] = {}
        self.last_reply: dict[str, str] = {}
        self.call_attempts: dict[str, int] = {}
        self.frozen: dict[str, str] = {}
        self.frozen_commands = 0
        self.checked: set[str] = set()
        self.events = 0
        self.state: RunState | None = None
        self.queue: deque[Command] = deque()

    # -- feeding the engine ---------------------------------------------------------------

    def feed(self, event: Event) -> Advance:
        self.events += 1
        if self.events > MAX_EVENTS:
            raise _RunnerError("coordinator.scenario.bound", self.base)
        result = advance(self.definition, self.state, event, self.now, self.keys)
        if result.refused is not None and not isinstance(event, RetrySame | ReconcileRequested):
            raise EngineInvariantError(f"The engine refused a scripted event: {result.refused}.")
        self.state = result.state
        self.queue.extend(result.commands)
        if len(self.state.records) > MAX_ITERATIONS:
            raise _RunnerError("coordinator.scenario.bound", self.base)
        return result

    def drain(self) -> None:
        """Answer every I/O command at the current instant, in order."""
        while self.queue:
            command = self.queue.popleft()
            if isinstance(command, FreezeCommand):
                self.freeze(command)
            elif isinstance(command, Prepare):
                # Scenario replies are adapter outputs; the preparation has no script and
                # always succeeds with empty evidence.
                self.feed(PreparationDone(command.step, b""))
            elif isinstance(command, ObtainCredential):
                self.feed(ReadyToSend(command.step))
            elif isinstance(command, Dispatch):
                if self.frozen.get(command.step) != command.command:
                    raise _RunnerError("coordinator.scenario.command", self.base)
                self.feed(self.reply_outcome(command.step))
            elif isinstance(command, Observe):
                self.feed(self.observation(command.step))
            elif isinstance(command, LookupReceipt):
                self.feed(self.receipt(command))

    def freeze(self, command: FreezeCommand) -> None:
        known = self.frozen.get(command.step)
        if known is not None and known != command.command:
            raise _RunnerError("coordinator.scenario.command", self.base)
        self.frozen[command.step] = command.command
        assert self.state is not None
        record = self.state.record(command.step)
        if record is not None and record.dispatch_risk:
            self.frozen_commands += 1

    # -- scripted answers -------------------------------------------------------------------

    def take_reply(self, step: str) -> tuple[Mapping[str, Any], str]:
        replies = self.replies.get(step) or []
        used = self.used_replies.get(step, 0)
        if used >= len(replies):
            pointer = (
                f"{self.base}/replies/{pointer_token(step)}" if step in self.replies else self.base
            )
            raise _RunnerError("coordinator.scenario.reply", pointer)
        self.used_replies[step] = used + 1
        self.call_attempts[step] = self.call_attempts.get(step, 0) + 1
        return replies[used], f"{self.base}/replies/{pointer_token(step)}/{used}"

    def reply_outcome(self, step: str) -> CallOutcome:
        reply, _ = self.take_reply(step)
        kind = reply["type"]
        self.last_reply[step] = kind
        if kind == "success":
            return CallOutcome(step, "success", value=to_canonical(reply["value"]))
        if kind == "declared-refusal":
            return CallOutcome(step, "declared-refusal", refusal_code=reply["refusalCode"])
        if kind == "receipt-expired":
            return CallOutcome(step, "receipt-expired")
        outcome: Any = kind
        return CallOutcome(step, outcome, code=reply["code"])

    def receipt(self, command: LookupReceipt) -> ReceiptAnswer:
        reply, pointer = self.take_reply(command.step)
        kind = reply["type"]
        self.last_reply[command.step] = kind
        if kind == "success":
            return ReceiptAnswer.confirmed(command.step, command.generation, reply["value"])
        if kind == "uncertain":
            return ReceiptAnswer(command.step, command.generation, "unresolved")
        if kind == "receipt-expired":
            return ReceiptAnswer(command.step, command.generation, "expired")
        raise _RunnerError("coordinator.scenario.reply", pointer)

    def observation(self, step: str) -> ObservationOutcome:
        scripted = self.scripted_observations.get(step) or []
        used = self.used_observations.get(step, 0)
        if used >= len(scripted):
            return ObservationOutcome(step, "pending")
        self.used_observations[step] = used + 1
        entry = scripted[used]
        kind = entry["type"]
        if kind == "complete":
            return ObservationOutcome.complete(step, entry["value"])
        if kind == "pending":
            return ObservationOutcome(step, "pending")
        outcome: Any = kind
        return ObservationOutcome(step, outcome, code=entry["code"])

    # -- leftovers (04 §4.5, §4.6, §4.10) ---------------------------------------------------

    def check_leftovers(self, record: StepRecord) -> None:
        """A step that ended with scripted replies or observations still unused is a runner
        error (`receipt-expired` after a receipt expiry)."""
        if record.step in self.checked:
            return
        self.checked.add(record.step)
        step = record.step
        token = pointer_token(step)
        if record.type == "call":
            used = self.used_replies.get(step, 0)
            if used < len(self.replies.get(step) or []):
                code = (
                    "coordinator.scenario.receipt-expired"
                    if record.receipt_expired
                    else "coordinator.scenario.reply"
                )
                raise _RunnerError(code, f"{self.base}/replies/{token}/{used}")
        elif record.type == "wait-for":
            used = self.used_observations.get(step, 0)
            if used < len(self.scripted_observations.get(step) or []):
                raise _RunnerError(
                    "coordinator.scenario.reply", f"{self.base}/observations/{token}/{used}"
                )

    def check_ended_steps(self) -> None:
        assert self.state is not None
        for record in self.state.records:
            if record.state in ("delivered", "cancelled", "expired"):
                self.check_leftovers(record)

    # -- the operator ---------------------------------------------------------------------

    def recover(self) -> bool:
        """Apply `recovery[step]` to a stopped call when 04 §4.5 sends the run to recovery;
        True when the run continues."""
        state = self.state
        assert state is not None
        record = state.current
        step = record.step
        if record.type != "call" or state.status not in _FAILURE_STATUSES:
            return False
        if record.receipt_expired:
            return False
        last = self.last_reply.get(step)
        if state.status == "failed" and last not in ("refused", "retryable"):
            return False  # a declared refusal or a mapping failure stops without recovery
        action = self.recovery.get(step)
        if action is None:
            return False
        if action == "reconcile" and state.status == "failed":
            raise _RunnerError(
                "coordinator.scenario.recovery", f"{self.base}/recovery/{pointer_token(step)}"
            )
        if self.used_replies.get(step, 0) >= len(self.replies.get(step) or []):
            return False
        event: Event = RetrySame() if action == "retry-same" else ReconcileRequested()
        result = self.feed(event)
        if result.refused is not None:
            raise _RunnerError(
                "coordinator.scenario.recovery", f"{self.base}/recovery/{pointer_token(step)}"
            )
        return True

    # -- the virtual clock ------------------------------------------------------------------

    def next_event(self, record: StepRecord) -> None:
        """Move the clock to the next instant something happens and feed that event; at equal
        instants a cancel comes first, then the deadline, then the due record."""
        state = self.state
        assert state is not None and record.due_at is not None
        candidates = [record.due_at]
        if not record.pure:
            candidates.append(state.deadline_at)
        at = min(candidates)
        if not self.cancel_done and self.cancel_at is not None and self.cancel_at <= at:
            self.now = max(self.now, self.cancel_at)
            self.cancel_done = True
            self.feed(CancelRequested())
        elif not record.pure and state.deadline_at <= record.due_at:
            self.now = max(self.now, state.deadline_at)
            self.feed(DeadlinePassed())
        else:
            self.now = max(self.now, record.due_at)
            self.claim(record.step)

    def claim(self, step: str) -> None:
        """The worker's claim (07 §7.2): the engine leases the record and works it at once
        (`claim_record`, the very function the worker's claim transaction runs). The runner
        claims records one by one; the engine's property suite shows that carrying a run on
        (07 §7.7) is the same sequence of events."""
        assert self.state is not None
        self.events += 2
        if self.events > MAX_EVENTS:
            raise _RunnerError("coordinator.scenario.bound", self.base)
        carried = claim_record(self.definition, self.state, step, self.now, self.keys, carry=False)
        if carried.refused is not None:
            raise EngineInvariantError(f"The engine refused a scripted event: {carried.refused}.")
        self.state = carried.state
        self.queue.extend(
            command for command in carried.commands if not isinstance(command, Claimed)
        )
        if len(self.state.records) > MAX_ITERATIONS:
            raise _RunnerError("coordinator.scenario.bound", self.base)

    def run(self, run_input: Any) -> None:
        floor = int(self.case.get("observationFloorSeconds", DEFAULT_FLOOR_SECONDS))
        policy = TimingPolicy(retry_delays_ms=(0, 0), observation_floor_seconds=floor)
        self.feed(Admitted(to_canonical(run_input), policy))
        while True:
            self.drain()
            self.check_ended_steps()
            state = self.state
            assert state is not None
            if state.is_terminal or state.status in _FAILURE_STATUSES:
                if self.recover():
                    continue
                self.check_leftovers(state.current)
                return
            record = state.current
            if record.state != "pending":
                raise EngineInvariantError("A running case rests on a record that is not pending.")
            self.next_event(record)


def _path(state: RunState) -> tuple[str, ...]:
    """The steps the run entered (04 §4.3): every record except one a cancel stopped before it
    was ever claimed (a cancel at the step boundary); a `wait-for` counts from its creation."""
    return tuple(
        record.step
        for record in state.records
        if not (record.state == "cancelled" and record.claims == 0 and record.type != "wait-for")
    )


def _start_input(definition: Definition, base: str, case: Mapping[str, Any]) -> Any:
    """04 §4.2: the literal input, or the trigger mapping's result for an event start."""
    if "input" in case:
        if not definition.input_valid(case["input"]):
            raise _RunnerError("coordinator.scenario.input", f"{base}/input")
        return case["input"]
    event = case["event"]
    trigger = definition.triggers[event["trigger"]]
    argument = {
        "id": event.get("id", DEFAULT_EVENT_ID),
        "source": f"urn:coordinator:scenario:{trigger.source}",
        "type": trigger.event,
        "time": event.get("time", case["admittedAt"]),
        "data": event["data"],
    }
    try:
        mapped = definition.evaluate(trigger.input, event=argument)
    except FunctionError as error:
        info = getattr(definition.program, "functions", {}).get(trigger.input.function)
        failed = FailureDetail.of_call(error)
        related = Related(
            "functions.rhai",
            "",
            f"The trigger function {trigger.input.function} failed with {error.code}."
            + (f" {failed.sentence()}" if failed.cause is not None else ""),
            line=error.line if error.line is not None else getattr(info, "line", None),
            column=error.column if error.line is not None else getattr(info, "column", None),
        )
        raise _RunnerError("coordinator.scenario.event", f"{base}/event", (related,)) from None
    try:
        check_json_value(mapped)
    except JsonBoundsError:
        raise _RunnerError("coordinator.mapping.trigger-input", f"{base}/event") from None
    if not definition.input_valid(mapped):
        raise _RunnerError("coordinator.mapping.trigger-input", f"{base}/event")
    return mapped


def _differences(case: Mapping[str, Any], result: CaseResult) -> list[str]:
    """The `expect` members that differ from the result, in the order of 04 §2.4."""
    expect: Mapping[str, Any] = case["expect"]
    differ: list[str] = []
    if expect["status"] != result.status:
        differ.append("status")
    if list(expect["path"]) != list(result.path):
        differ.append("path")
    if "outcome" in expect:
        wanted = expect["outcome"]
        got = result.outcome if wanted.get("type") == "named" else None
        if (wanted.get("type") == "named" and wanted.get("value") != got) or (
            wanted.get("type") == "none" and result.outcome is not None
        ):
            differ.append("outcome")
    if "output" in expect and to_canonical(expect["output"]) != to_canonical(result.output):
        differ.append("output")
    if "failureCode" in expect and expect["failureCode"] != result.failure_code:
        differ.append("failureCode")
    if "effects" in expect:
        wanted_effects = [(e.get("step"), e.get("state")) for e in expect["effects"]]
        if wanted_effects != list(result.effects):
            differ.append("effects")
    if "workflowElapsedSeconds" in expect:
        wanted_ms = Decimal(repr(expect["workflowElapsedSeconds"])) * 1000
        if wanted_ms != result.elapsed_ms:
            differ.append("workflowElapsedSeconds")
    return differ


def _difference_message(members: list[str]) -> str:
    if len(members) == 1:
        return f"{members[0]} differs from the expectation."
    return f"{', '.join(members[:-1])} and {members[-1]} differ from the expectation."


def run_case(
    definition: Definition, scenarios: AuthoredFile, index: int, case: Mapping[str, Any]
) -> CaseResult:
    """Run one case that passed the document rules and compare it with its expectation."""
    base = f"/cases/{index}"
    case_id = case.get("id")
    try:
        run_input = _start_input(definition, base, case)
    except _RunnerError as error:
        diagnostic = scenario_diagnostic(
            scenarios, error.code, error.pointer, related=error.related
        )
        return CaseResult(case_id, index, False, diagnostics=(diagnostic,))
    runner = _Case(definition, index, case)
    runner_error: _RunnerError | None = None
    try:
        runner.run(run_input)
    except _RunnerError as error:
        runner_error = error
    state = runner.state
    assert state is not None
    mapping_failure = None
    explained: FailureDetail | None = None
    current = state.current
    if (
        current.state == "dead-lettered"
        and current.failure_code in _MAPPING_CODES
        and current.detail is not None
    ):
        explained = FailureDetail.parse(current.detail)
        mapping_failure = (current.step, explained.code)
    routes = frozenset(
        definition.route_pointer(record.step, record.route.kind, record.route.label)
        for record in state.records
        if record.route is not None
    )
    result = CaseResult(
        id=case_id,
        index=index,
        passed=False,
        ran=True,
        status=state.status,
        path=_path(state),
        outcome=state.outcome,
        output=None if state.output is None else json.loads(state.output),
        failure_code=state.failure_code,
        effects=tuple(
            (record.step, record.effect_state)
            for record in state.records
            if record.effect_state is not None
        ),
        elapsed_ms=runner.now - runner.admitted_at,
        call_attempts=dict(runner.call_attempts),
        observations={r.step: r.observations for r in state.records if r.type == "wait-for"},
        frozen_commands=runner.frozen_commands,
        mapping_failure=mapping_failure,
        routes=routes,
    )
    if runner_error is not None:
        diagnostic = scenario_diagnostic(
            scenarios, runner_error.code, runner_error.pointer, related=runner_error.related
        )
        return _with(result, passed=False, diagnostics=(diagnostic,))
    differ = _differences(case, result)
    if not differ:
        return _with(result, passed=True)
    related: tuple[Related, ...] = ()
    if mapping_failure is not None and explained is not None:
        step, code = mapping_failure
        related = (
            Related(
                "workflow.yaml",
                f"/steps/{pointer_token(step)}",
                f"Step {step} stopped with {code}.",
            ),
        )
        if explained.cause is not None or explained.labels:
            # Why (04 §4.1 mappingFailure): the cause, the function and the failing statement,
            # or the label the choose returned and the declared ones; never a value.
            related += (
                Related(
                    "functions.rhai" if explained.cause is not None else "workflow.yaml",
                    "" if explained.cause is not None else f"/steps/{pointer_token(step)}/cases",
                    explained.sentence(),
                    line=explained.line,
                    column=explained.column,
                ),
            )
    diagnostic = scenario_diagnostic(
        scenarios,
        "coordinator.scenario.expectation",
        base,
        message=_difference_message(differ),
        related=related,
    )
    return _with(result, passed=False, diagnostics=(diagnostic,), differences=tuple(differ))


def _with(result: CaseResult, **changes: Any) -> CaseResult:
    return replace(result, **changes)
