"""The execution form of a checked snapshot: typed steps, aliases, compiled functions and schemas.

Built once per snapshot (`Definition.from_snapshot`) and immutable afterwards. It also owns how a
mapping is evaluated (file 03 §7): arguments are built from the run input, recorded step outputs
and literals, and the named function is called on them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Literal, Protocol

from coordinator_core.definition import graph
from coordinator_core.definition.snapshot import Snapshot
from coordinator_core.engine.state import StepRoute
from coordinator_core.functions import compile_functions
from coordinator_core.jsonschema.dialect import SchemaValidator, compile_validator
from coordinator_core.jsonschema.violations import Violation
from coordinator_core.operations import CATALOG, Completion, OperationDescriptor
from coordinator_core.values import pointer_token

__all__ = [
    "Alias",
    "Argument",
    "CallStep",
    "ChooseStep",
    "Definition",
    "DefinitionError",
    "FinishStep",
    "FunctionProgram",
    "MappingSpec",
    "StepSpec",
    "TriggerSpec",
    "WaitForStep",
    "WaitUntilStep",
]


class DefinitionError(ValueError):
    """A snapshot that cannot be executed (its functions do not compile, or it is not checked)."""


class FunctionProgram(Protocol):
    """A compiled functions file (`coordinator_core.functions.CompiledFunctions`)."""

    def call(self, name: str, arguments: Sequence[object]) -> object: ...


class EngineInvariantError(AssertionError):
    """A rule the checker guarantees was broken at run time (a defect, never a user error)."""


@dataclass(frozen=True, slots=True)
class Argument:
    """One mapping argument (01 §8): the run input, a step's output, a literal or the event."""

    kind: Literal["input", "step", "literal", "event"]
    step: str | None = None
    value: Any = None


@dataclass(frozen=True, slots=True)
class MappingSpec:
    """A mapping: one function and its positional arguments; `pointer` locates it."""

    function: str
    arguments: tuple[Argument, ...]
    pointer: str


@dataclass(frozen=True, slots=True)
class Alias:
    """An operation alias: the pinned descriptor and the logical connection it calls."""

    name: str
    operation: OperationDescriptor
    connection: str
    action: str | None = None


@dataclass(frozen=True, slots=True)
class CallStep:
    type: ClassVar[Literal["call"]] = "call"
    id: str
    alias: Alias
    input: MappingSpec
    next: str
    on_declared_refusal: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class ChooseStep:
    type: ClassVar[Literal["choose"]] = "choose"
    id: str
    choose: MappingSpec
    cases: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class WaitUntilStep:
    type: ClassVar[Literal["wait-until"]] = "wait-until"
    id: str
    wait_until: MappingSpec
    next: str


@dataclass(frozen=True, slots=True)
class WaitForStep:
    type: ClassVar[Literal["wait-for"]] = "wait-for"
    id: str
    call: str
    completion: Completion
    timeout_seconds: int
    next: str
    on_timeout: str | None
    on_cancel: str | None


@dataclass(frozen=True, slots=True)
class FinishStep:
    type: ClassVar[Literal["finish"]] = "finish"
    id: str
    outcome: str
    output: MappingSpec | None


StepSpec = CallStep | ChooseStep | WaitUntilStep | WaitForStep | FinishStep


@dataclass(frozen=True, slots=True)
class TriggerSpec:
    """A trigger (01 §11): event source name, CloudEvents type and the input mapping."""

    id: str
    source: str
    event: str
    input: MappingSpec


def _mapping(raw: Mapping[str, Any], pointer: str) -> MappingSpec:
    arguments = []
    for argument in raw.get("arguments") or ():
        kind = argument["type"]
        arguments.append(Argument(kind, argument.get("step"), argument.get("value")))
    return MappingSpec(str(raw["function"]), tuple(arguments), pointer)


def _step(
    step_id: str,
    raw: Mapping[str, Any],
    aliases: Mapping[str, Alias],
    raw_steps: Mapping[str, Any],
) -> StepSpec:
    base = f"/steps/{pointer_token(step_id)}"
    kind = raw["type"]
    if kind == "call":
        return CallStep(
            step_id,
            aliases[raw["operation"]],
            _mapping(raw["input"], f"{base}/input"),
            raw["next"],
            MappingProxyType(dict(raw.get("onDeclaredRefusal") or {})),
        )
    if kind == "choose":
        return ChooseStep(
            step_id,
            _mapping(raw["choose"], f"{base}/choose"),
            MappingProxyType(dict(raw["cases"])),
        )
    if kind == "wait-until":
        return WaitUntilStep(step_id, _mapping(raw["waitUntil"], f"{base}/waitUntil"), raw["next"])
    if kind == "wait-for":
        waited = aliases[raw_steps[raw["call"]]["operation"]]
        return WaitForStep(
            step_id,
            raw["call"],
            waited.operation.completions[raw["completion"]],
            int(raw["timeoutSeconds"]),
            raw["next"],
            raw.get("onTimeout"),
            raw.get("onCancel"),
        )
    if kind == "finish":
        output = raw.get("output")
        return FinishStep(
            step_id,
            raw["outcome"],
            _mapping(output, f"{base}/output") if output is not None else None,
        )
    raise DefinitionError(f"Step {step_id} has an unknown type.")


class Definition:
    """An immutable, executable definition: everything `advance` needs from a snapshot."""

    __slots__ = (
        "_input_validator",
        "_outcome_validators",
        "_program",
        "deadline_seconds",
        "definition_digest",
        "revision",
        "routes",
        "start",
        "steps",
        "triggers",
        "workflow_id",
    )

    workflow_id: str
    revision: str
    definition_digest: str
    start: str
    deadline_seconds: int
    steps: Mapping[str, StepSpec]
    triggers: Mapping[str, TriggerSpec]
    routes: tuple[str, ...]
    _input_validator: SchemaValidator
    _outcome_validators: Mapping[str, SchemaValidator]
    _program: FunctionProgram

    def __init__(self, snapshot: Snapshot, program: FunctionProgram) -> None:
        workflow = snapshot.workflow
        aliases = {
            name: Alias(
                name,
                CATALOG[raw["operation"]],
                str(raw["connection"]),
                raw.get("action"),
            )
            for name, raw in (workflow.get("operations") or {}).items()
        }
        raw_steps = workflow["steps"]
        steps: dict[str, StepSpec] = {
            step_id: _step(step_id, raw, aliases, raw_steps) for step_id, raw in raw_steps.items()
        }
        triggers = {
            trigger_id: TriggerSpec(
                trigger_id,
                str(raw["source"]),
                str(raw["event"]),
                _mapping(raw["input"], f"/triggers/{pointer_token(trigger_id)}/input"),
            )
            for trigger_id, raw in (workflow.get("triggers") or {}).items()
        }
        routes: list[str] = []
        for step_id, raw in workflow["steps"].items():
            routes.extend(edge.pointer for edge in graph.edges_of(step_id, raw))
        setter = object.__setattr__
        setter(self, "workflow_id", str(workflow["project"]["id"]))
        setter(self, "revision", snapshot.revision)
        setter(self, "definition_digest", snapshot.definition_digest)
        setter(self, "start", str(workflow["start"]))
        setter(self, "deadline_seconds", int(workflow["deadlineSeconds"]))
        setter(self, "steps", MappingProxyType(steps))
        setter(self, "triggers", MappingProxyType(triggers))
        setter(self, "routes", tuple(routes))
        setter(self, "_input_validator", compile_validator(workflow["input"]))
        setter(
            self,
            "_outcome_validators",
            MappingProxyType(
                {
                    outcome: compile_validator(schema)
                    for outcome, schema in (workflow.get("outcomes") or {}).items()
                }
            ),
        )
        setter(self, "_program", program)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("A Definition is immutable.")

    @classmethod
    def from_snapshot(
        cls, snapshot: Snapshot, *, program: FunctionProgram | None = None
    ) -> Definition:
        """Compile a checked snapshot once. `program` replaces compiling `snapshot.source`
        (for callers that already hold the compiled functions)."""
        if program is None:
            compiled = compile_functions(snapshot.source)
            if compiled.program is None:
                raise DefinitionError("The snapshot's functions do not compile.")
            program = compiled.program
        try:
            return cls(snapshot, program)
        except (KeyError, TypeError) as error:
            raise DefinitionError("The snapshot is not a checked definition.") from error

    @property
    def deadline_ms(self) -> int:
        return self.deadline_seconds * 1000

    @property
    def program(self) -> FunctionProgram:
        return self._program

    def step(self, step_id: str) -> StepSpec:
        return self.steps[step_id]

    def evaluate(
        self,
        mapping: MappingSpec,
        *,
        run_input: str | None = None,
        output_of: Callable[[str], str | None] | None = None,
        event: Any = None,
    ) -> Any:
        """Call the mapping's function on its arguments (03 §7); raises `FunctionError`.

        A `{type: step}` argument must name an output recorded on this run: the availability
        analysis (02 §6) guarantees it, so a missing one is an `EngineInvariantError`.
        """
        arguments: list[Any] = []
        for argument in mapping.arguments:
            if argument.kind == "input":
                if run_input is None:
                    raise EngineInvariantError("A mapping read the input where none exists.")
                arguments.append(json.loads(run_input))
            elif argument.kind == "step":
                recorded = output_of(argument.step or "") if output_of is not None else None
                if recorded is None:
                    raise EngineInvariantError(
                        f"Mapping {mapping.pointer} read an output that is not available."
                    )
                arguments.append(json.loads(recorded))
            elif argument.kind == "literal":
                arguments.append(argument.value)
            else:
                arguments.append(event)
        return self._program.call(mapping.function, arguments)

    def input_valid(self, value: Any) -> bool:
        """Whether `value` is valid against the workflow's `input` schema."""
        return self._input_validator.is_valid(value)

    def input_violations(self, value: Any) -> tuple[Violation, ...]:
        """Where `value` fails the workflow's `input` schema, without its values."""
        return self._input_validator.violations(value)

    def outcome_valid(self, outcome: str, value: Any) -> bool:
        """Whether `value` is valid against the schema of `outcome`."""
        return self._outcome_validators[outcome].is_valid(value)

    def route_pointer(self, step_id: str, route: StepRoute) -> str:
        """The JSON pointer in workflow.yaml of the route member a run took out of a step."""
        base = f"/steps/{pointer_token(step_id)}"
        if route.kind == "next":
            return f"{base}/next"
        if route.kind == "case":
            return f"{base}/cases/{pointer_token(route.label or '')}"
        if route.kind == "refusal":
            return f"{base}/onDeclaredRefusal/{pointer_token(route.label or '')}"
        if route.kind == "timeout":
            return f"{base}/onTimeout"
        return f"{base}/onCancel"
