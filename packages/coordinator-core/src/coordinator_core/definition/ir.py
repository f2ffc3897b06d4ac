"""The execution IR: a checked workflow as typed steps, aliases, compiled functions and schemas.

Built from the typed authored model (`authoring.model`) once the rules found nothing
(`build_definition`), or restored from a snapshot (`Definition.from_snapshot`, and with every
rule in `definition.restore`); immutable afterwards. Its canonical form is its snapshot
(`Definition.snapshot`, 02 §8): the authored document, the functions source, this build's ABIs
and the pinned operation descriptors, whose digests are the definition's identity. It also owns
how a mapping is evaluated (file 03 §7): arguments are built from the run input, recorded step
outputs and literals, and the named function is called on them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Final, Literal, Protocol

from coordinator_core import limits
from coordinator_core.authoring.model import (
    CallNode,
    ChooseNode,
    MappingNode,
    StepNode,
    WaitForNode,
    WaitUntilNode,
    WorkflowModel,
    model_from_json,
)
from coordinator_core.definition import graph
from coordinator_core.definition.snapshot import Snapshot
from coordinator_core.errors import Diagnostic
from coordinator_core.functions import compile_functions
from coordinator_core.jsonschema.dialect import SchemaValidator, compile_validator
from coordinator_core.jsonschema.violations import Violation
from coordinator_core.operations import CATALOG, Completion, OperationDescriptor
from coordinator_core.values import pointer_token

__all__ = [
    "MISSING",
    "Alias",
    "Argument",
    "ArgumentValues",
    "CallStep",
    "ChooseStep",
    "Definition",
    "DefinitionError",
    "EngineInvariantError",
    "FinishStep",
    "FunctionProgram",
    "MappingSpec",
    "StepSpec",
    "TriggerSpec",
    "WaitForStep",
    "WaitUntilStep",
    "build_definition",
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


class ArgumentValues(Protocol):
    """Where a mapping's `{type: input}` and `{type: step}` arguments come from: the parsed run
    input and recorded step outputs (the engine's transition parses each once per advance)."""

    def input_value(self) -> Any: ...

    def output_value(self, step: str) -> Any: ...


def _incomplete(pointer: str) -> DefinitionError:
    return DefinitionError(f"The definition is not a checked one: {pointer} is missing.")


def _mapping(node: MappingNode | None, pointer: str) -> MappingSpec:
    if node is None or node.function is None or node.arguments is None:
        raise _incomplete(pointer)
    arguments = tuple(Argument(a.kind, a.step, a.value) for a in node.arguments)
    return MappingSpec(node.function, arguments, node.pointer)


def _required(value: str | None, pointer: str) -> str:
    if value is None:
        raise _incomplete(pointer)
    return value


def _step(node: StepNode, aliases: Mapping[str, Alias], nodes: Mapping[str, StepNode]) -> StepSpec:
    base = node.pointer
    if isinstance(node, CallNode):
        alias = aliases.get(_required(node.operation, f"{base}/operation"))
        if alias is None:
            raise _incomplete(f"{base}/operation")
        return CallStep(
            node.id,
            alias,
            _mapping(node.input, f"{base}/input"),
            _required(node.next, f"{base}/next"),
            MappingProxyType(dict(node.on_declared_refusal or {})),
        )
    if isinstance(node, ChooseNode):
        if not node.cases:
            raise _incomplete(f"{base}/cases")
        return ChooseStep(node.id, _mapping(node.choose, f"{base}/choose"), node.cases)
    if isinstance(node, WaitUntilNode):
        return WaitUntilStep(
            node.id,
            _mapping(node.wait_until, f"{base}/waitUntil"),
            _required(node.next, f"{base}/next"),
        )
    if isinstance(node, WaitForNode):
        called = nodes.get(_required(node.call, f"{base}/call"))
        waited = aliases.get(called.operation or "") if isinstance(called, CallNode) else None
        if called is None or waited is None:
            raise _incomplete(f"{base}/call")
        completion = waited.operation.completions.get(
            _required(node.completion, f"{base}/completion")
        )
        if completion is None or node.timeout_seconds is None:
            raise _incomplete(f"{base}/completion")
        return WaitForStep(
            node.id,
            called.id,
            completion,
            node.timeout_seconds,
            _required(node.next, f"{base}/next"),
            node.on_timeout,
            node.on_cancel,
        )
    output = node.output
    return FinishStep(
        node.id,
        _required(node.outcome, f"{base}/outcome"),
        None if output is None else _mapping(output, f"{base}/output"),
    )


def build_definition(
    model: WorkflowModel, snapshot: Snapshot, program: FunctionProgram
) -> Definition:
    """The IR of a model the rules accepted, frozen as `snapshot`, calling `program`.

    Raises DefinitionError when a member the IR needs is missing (a model that was not checked).
    """
    return Definition(model, snapshot, program)


class Definition:
    """An immutable, executable definition: everything `advance` needs, and its snapshot."""

    __slots__ = (
        "_program",
        "_schemas",
        "_validators",
        "aliases",
        "deadline_seconds",
        "outcomes",
        "routes",
        "snapshot",
        "start",
        "steps",
        "triggers",
        "version",
        "workflow_id",
    )

    workflow_id: str
    version: str
    start: str
    deadline_seconds: int
    aliases: Mapping[str, Alias]
    steps: Mapping[str, StepSpec]
    triggers: Mapping[str, TriggerSpec]
    outcomes: tuple[str, ...]
    routes: tuple[str, ...]
    snapshot: Snapshot
    _schemas: Mapping[str | None, Any]
    _validators: dict[str | None, SchemaValidator]
    _program: FunctionProgram

    def __init__(self, model: WorkflowModel, snapshot: Snapshot, program: FunctionProgram) -> None:
        if model.project is None or model.steps is None or model.input is None:
            raise _incomplete("/project, /steps or /input")
        aliases: dict[str, Alias] = {}
        for name, node in (model.operations or {}).items():
            descriptor = CATALOG.get(node.operation or "")
            if descriptor is None or node.connection is None:
                raise _incomplete(f"{node.pointer}/operation")
            aliases[name] = Alias(name, descriptor, node.connection, node.action)
        steps = {
            step_id: _step(node, aliases, model.steps) for step_id, node in model.steps.items()
        }
        triggers = {
            trigger_id: TriggerSpec(
                trigger_id,
                _required(node.source, f"{node.pointer}/source"),
                _required(node.event, f"{node.pointer}/event"),
                _mapping(node.input, f"{node.pointer}/input"),
            )
            for trigger_id, node in (model.triggers or {}).items()
        }
        routes: list[str] = []
        for step_node in model.steps.values():
            routes.extend(edge.pointer for edge in graph.edges_of(step_node))
        if model.deadline_seconds is None:
            raise _incomplete("/deadlineSeconds")
        setter = object.__setattr__
        setter(self, "workflow_id", _required(model.project.id, "/project/id"))
        setter(self, "version", _required(model.project.version, "/project/version"))
        setter(self, "start", _required(model.start, "/start"))
        setter(self, "deadline_seconds", model.deadline_seconds)
        setter(self, "aliases", MappingProxyType(aliases))
        setter(self, "steps", MappingProxyType(steps))
        setter(self, "triggers", MappingProxyType(triggers))
        setter(self, "outcomes", tuple(model.outcomes or ()))
        setter(self, "routes", tuple(routes))
        setter(self, "snapshot", snapshot)
        # The run input's schema (key None) and each outcome's, compiled on first use: a
        # validator imports jsonschema (about 0.3 s), which `check` alone never needs.
        schemas: dict[str | None, Any] = {None: model.input.schema}
        schemas.update({outcome: node.schema for outcome, node in (model.outcomes or {}).items()})
        setter(self, "_schemas", MappingProxyType(schemas))
        setter(self, "_validators", {})
        setter(self, "_program", program)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("A Definition is immutable.")

    @classmethod
    def from_snapshot(
        cls, snapshot: Snapshot, *, program: FunctionProgram | None = None
    ) -> Definition:
        """The IR of a snapshot this process froze or already restored (a checked project's,
        a test's): its workflow is decoded into the typed model and built, without the rules
        (`definition.restore` runs them on a snapshot read from outside). `program` replaces
        compiling `snapshot.source` (for callers that already hold the compiled functions)."""
        if program is None:
            compiled = compile_functions(snapshot.source)
            if compiled.program is None:
                raise DefinitionError("The snapshot's functions do not compile.")
            program = compiled.program
        found: list[Diagnostic] = []
        model = model_from_json(
            snapshot.workflow, file="definition.json", artifact=limits.KIND_SNAPSHOT, out=found
        )
        if model is None or any(d.effective_severity == "error" for d in found):
            raise DefinitionError("The snapshot is not a checked definition.")
        return cls(model, snapshot, program)

    @property
    def revision(self) -> str:
        return self.snapshot.revision

    @property
    def definition_digest(self) -> str:
        return self.snapshot.definition_digest

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
        values: ArgumentValues | None = None,
        *,
        event: Any = None,
    ) -> Any:
        """Call the mapping's function on its arguments (03 §7); raises `FunctionError`.

        `values` answers the parsed run input and recorded outputs. A `{type: step}` argument
        must name an output recorded on this run: the availability analysis (02 §6) guarantees
        it, so a missing one is an `EngineInvariantError`.
        """
        arguments: list[Any] = []
        for argument in mapping.arguments:
            if argument.kind == "input":
                if values is None:
                    raise EngineInvariantError("A mapping read the input where none exists.")
                arguments.append(values.input_value())
            elif argument.kind == "step":
                recorded = values.output_value(argument.step or "") if values else MISSING
                if recorded is MISSING:
                    raise EngineInvariantError(
                        f"Mapping {mapping.pointer} read an output that is not available."
                    )
                arguments.append(recorded)
            elif argument.kind == "literal":
                arguments.append(argument.value)
            else:
                arguments.append(event)
        return self._program.call(mapping.function, arguments)

    def _validator(self, key: str | None) -> SchemaValidator:
        found = self._validators.get(key)
        if found is None:
            # Compiling twice in a race is harmless: both validators are the same schema's.
            found = self._validators[key] = compile_validator(self._schemas[key])
        return found

    def prepare_validators(self) -> None:
        """Compile every schema of the definition now rather than at its first use (a
        service at its start: its first admissions and runs then pay nothing for them)."""
        for key in self._schemas:
            self._validator(key)

    def input_valid(self, value: Any) -> bool:
        """Whether `value` is valid against the workflow's `input` schema."""
        return self._validator(None).is_valid(value)

    def input_violations(self, value: Any) -> tuple[Violation, ...]:
        """Where `value` fails the workflow's `input` schema, without its values."""
        return self._validator(None).violations(value)

    def outcome_valid(self, outcome: str, value: Any) -> bool:
        """Whether `value` is valid against the schema of `outcome`."""
        return self._validator(outcome).is_valid(value)

    def route_pointer(self, step_id: str, kind: str, label: str | None = None) -> str:
        """The JSON pointer in workflow.yaml of the route member a run took out of a step
        (`kind` is the route word: next, case, refusal, timeout, cancel)."""
        base = f"/steps/{pointer_token(step_id)}"
        if kind == "next":
            return f"{base}/next"
        if kind == "case":
            return f"{base}/cases/{pointer_token(label or '')}"
        if kind == "refusal":
            return f"{base}/onDeclaredRefusal/{pointer_token(label or '')}"
        if kind == "timeout":
            return f"{base}/onTimeout"
        return f"{base}/onCancel"


MISSING: Final = object()
"""What `ArgumentValues.output_value` answers for a step with no recorded output."""
