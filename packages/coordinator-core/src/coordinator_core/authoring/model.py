"""The typed authored model of `workflow.yaml`: decoded once, frozen, every node located.

The schema-driven decoder (`decode.py`) reads the document by the rules of contract 01 and leaves
out every member that failed; this module turns what decoded into frozen typed nodes, once. Each
node knows its JSON pointer in the document as written and the mark of its value in the source
(None for a document that was never text: a snapshot's workflow read back from JSON). A member
that is absent or failed to decode is None, so a rule that needs it is skipped (02 §4.2).

`Declared` is the only view of the document as written: the names declared under `steps`,
`operations` and `outcomes`, even of an entry whose body failed to decode, so that naming such
an entry is not a second error. Every rule, the execution IR and the snapshot read this model
and nothing else of the workflow.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Final, Literal

from coordinator_core import limits
from coordinator_core.authoring.decode import AuthoredFile, decode_json, load_schema
from coordinator_core.authoring.yamlreader import (
    NO_POSITIONS,
    Mark,
    SourceMap,
    escape_pointer_token,
)
from coordinator_core.errors import Diagnostic

__all__ = [
    "WORKFLOW_FILE",
    "AliasNode",
    "ArgumentKind",
    "ArgumentNode",
    "CallNode",
    "ChooseNode",
    "Declared",
    "FinishNode",
    "Located",
    "MappingNode",
    "MappingUse",
    "ProjectNode",
    "RouteKind",
    "RouteNode",
    "SchemaNode",
    "StepNode",
    "TriggerNode",
    "WaitForNode",
    "WaitUntilNode",
    "WorkflowModel",
    "mapping_of",
    "model_from_authored",
    "model_from_json",
    "routes_of",
]

WORKFLOW_FILE: Final = "workflow.yaml"
ArgumentKind = Literal["input", "step", "literal", "event"]
RouteKind = Literal["next", "case", "refusal", "timeout", "cancel"]
"""How a run leaves a step, in the API's route words (06 §11.3): the one home of the word."""


@dataclass(frozen=True, slots=True)
class Located:
    """A node of the document: its JSON pointer and where its value was written."""

    pointer: str
    mark: Mark | None


@dataclass(frozen=True, slots=True)
class ArgumentNode(Located):
    """One mapping argument (01 §8); `has_value` tells a literal `null` from a missing one."""

    kind: ArgumentKind
    step: str | None
    value: Any
    has_value: bool


@dataclass(frozen=True, slots=True)
class MappingNode(Located):
    """A mapping: one function and its positional arguments (each None when it failed)."""

    function: str | None
    arguments: tuple[ArgumentNode, ...] | None


@dataclass(frozen=True, slots=True)
class AliasNode(Located):
    """An operation alias (01 §6)."""

    name: str
    operation: str | None
    connection: str | None
    action: str | None


@dataclass(frozen=True, slots=True)
class TriggerNode(Located):
    """An event trigger (01 §11)."""

    id: str
    source: str | None
    event: str | None
    input: MappingNode | None


@dataclass(frozen=True, slots=True)
class ProjectNode(Located):
    id: str | None
    version: str | None
    title: str | None
    description: str | None


@dataclass(frozen=True, slots=True)
class SchemaNode(Located):
    """A JSON Schema written by the author (the run input's, an outcome's): foreign JSON."""

    schema: Any


@dataclass(frozen=True, slots=True)
class CallNode(Located):
    type: ClassVar[Literal["call"]] = "call"
    id: str
    title: str | None
    description: str | None
    operation: str | None
    input: MappingNode | None
    next: str | None
    on_declared_refusal: Mapping[str, str] | None


@dataclass(frozen=True, slots=True)
class ChooseNode(Located):
    type: ClassVar[Literal["choose"]] = "choose"
    id: str
    title: str | None
    description: str | None
    choose: MappingNode | None
    cases: Mapping[str, str] | None


@dataclass(frozen=True, slots=True)
class WaitUntilNode(Located):
    type: ClassVar[Literal["wait-until"]] = "wait-until"
    id: str
    title: str | None
    description: str | None
    wait_until: MappingNode | None
    next: str | None


@dataclass(frozen=True, slots=True)
class WaitForNode(Located):
    type: ClassVar[Literal["wait-for"]] = "wait-for"
    id: str
    title: str | None
    description: str | None
    call: str | None
    completion: str | None
    timeout_seconds: int | None
    next: str | None
    on_timeout: str | None
    on_cancel: str | None


@dataclass(frozen=True, slots=True)
class FinishNode(Located):
    type: ClassVar[Literal["finish"]] = "finish"
    id: str
    title: str | None
    description: str | None
    outcome: str | None
    output: MappingNode | None


StepNode = CallNode | ChooseNode | WaitUntilNode | WaitForNode | FinishNode


def mapping_of(step: StepNode) -> MappingNode | None:
    """The step's mapping (its `input`, `choose`, `waitUntil` or `output`), if it has one."""
    if isinstance(step, CallNode):
        return step.input
    if isinstance(step, ChooseNode):
        return step.choose
    if isinstance(step, WaitUntilNode):
        return step.wait_until
    if isinstance(step, FinishNode):
        return step.output
    return None


@dataclass(frozen=True, slots=True)
class RouteNode:
    """One route member of a step (`next`, a case, a declared refusal, `onTimeout`,
    `onCancel`): its pointer, the API's route word, its label or code, and its target."""

    pointer: str
    kind: RouteKind
    label: str | None
    target: str


def routes_of(step: StepNode) -> tuple[RouteNode, ...]:
    """The decoded route members of a step, in the order of their members: `next`, then the
    cases or the declared refusals, then `onTimeout` and `onCancel`."""
    base = step.pointer
    routes: list[RouteNode] = []
    if not isinstance(step, ChooseNode | FinishNode) and step.next is not None:
        routes.append(RouteNode(f"{base}/next", "next", None, step.next))
    if isinstance(step, ChooseNode):
        for label, target in (step.cases or {}).items():
            pointer = f"{base}/cases/{escape_pointer_token(label)}"
            routes.append(RouteNode(pointer, "case", label, target))
    elif isinstance(step, CallNode):
        for code, target in (step.on_declared_refusal or {}).items():
            pointer = f"{base}/onDeclaredRefusal/{escape_pointer_token(code)}"
            routes.append(RouteNode(pointer, "refusal", code, target))
    elif isinstance(step, WaitForNode):
        if step.on_timeout is not None:
            routes.append(RouteNode(f"{base}/onTimeout", "timeout", None, step.on_timeout))
        if step.on_cancel is not None:
            routes.append(RouteNode(f"{base}/onCancel", "cancel", None, step.on_cancel))
    return tuple(routes)


@dataclass(frozen=True, slots=True)
class MappingUse:
    """One mapping of the workflow and whose it is: a step's (`step`) or a trigger's."""

    mapping: MappingNode
    step: str | None = None
    trigger: str | None = None


@dataclass(frozen=True, slots=True)
class Declared:
    """The names the document declares and uses as written, even where an entry failed to
    decode: step ids (with their `type` when it is a string), alias names (with their
    `operation` when it is a string), outcome ids, the aliases that call steps name and the
    outcomes that finish steps name."""

    step_types: Mapping[str, str | None]
    alias_operations: Mapping[str, str | None]
    outcomes: frozenset[str]
    used_aliases: frozenset[str]
    finish_outcomes: frozenset[str]


@dataclass(frozen=True)
class WorkflowModel:
    """`workflow.yaml` decoded once: typed members (None when absent or failed), the names
    declared as written, the document itself (what the snapshot freezes) and its source map.

    `failed` holds the pointers of members that failed to decode; `findings` the pointers of
    the reader's and decoder's error diagnostics.
    """

    document: Mapping[str, Any]
    source_map: SourceMap
    failed: frozenset[str]
    findings: frozenset[str]
    declared: Declared
    project: ProjectNode | None
    functions_file: str | None
    deadline_seconds: int | None
    start: str | None
    input: SchemaNode | None
    operations: Mapping[str, AliasNode] | None
    triggers: Mapping[str, TriggerNode] | None
    steps: Mapping[str, StepNode] | None
    outcomes: Mapping[str, SchemaNode] | None

    def position(self, pointer: str) -> tuple[int | None, int | None]:
        return self.source_map.position(pointer)

    def diagnostic(
        self, code: str, pointer: str, *, key: bool = False, **members: Any
    ) -> Diagnostic:
        """A diagnostic of workflow.yaml at `pointer`, placed at the value (or, with `key`, at
        the member's key) where the document was text; `members` are the other fields."""
        line, column = self.key_position(pointer) if key else self.position(pointer)
        return Diagnostic(
            code,
            path=pointer,
            file=WORKFLOW_FILE,
            line=line,
            column=column,
            artifact=limits.KIND_PROJECT,
            **members,
        )

    def key_position(self, pointer: str) -> tuple[int | None, int | None]:
        return self.source_map.key_position(pointer)

    def has_findings_under(self, pointer: str) -> bool:
        """Whether a reader or decoder error concerns `pointer` or a member inside it."""
        prefix = pointer + "/"
        return any(found == pointer or found.startswith(prefix) for found in self.findings)

    @property
    def all_steps_decoded(self) -> bool:
        """Whether `steps` and every step declared in it decoded (rules about what the steps
        use need all of them)."""
        return self.steps is not None and all(s in self.steps for s in self.declared.step_types)

    @property
    def steps_clean(self) -> bool:
        """Whether `steps` decoded with no reader finding inside it (02 §4.1 step 5)."""
        return self.steps is not None and not self.has_findings_under("/steps")

    def mappings(self) -> Iterator[MappingUse]:
        """Every decoded mapping, steps first (document order), then triggers."""
        for step in (self.steps or {}).values():
            mapping = mapping_of(step)
            if mapping is not None:
                yield MappingUse(mapping, step=step.id)
        for trigger in (self.triggers or {}).values():
            if trigger.input is not None:
                yield MappingUse(trigger.input, trigger=trigger.id)

    def alias_operation(self, alias: str) -> str | None:
        """The operation id a decoded alias names."""
        node = (self.operations or {}).get(alias)
        return node.operation if node is not None else None


# -- building the model from the decoded tree ---------------------------------------------------


class _Builder:
    def __init__(self, decoded: Mapping[str, Any], source_map: SourceMap) -> None:
        self.decoded = decoded
        self.source_map = source_map

    def at(self, pointer: str) -> Mark | None:
        return self.source_map.positions.get(pointer)

    def mapping(self, raw: Any, pointer: str) -> MappingNode | None:
        if not isinstance(raw, Mapping):
            return None
        function = raw.get("function")
        arguments = raw.get("arguments")
        nodes: tuple[ArgumentNode, ...] | None = None
        if isinstance(arguments, list):
            nodes = tuple(
                ArgumentNode(
                    f"{pointer}/arguments/{index}",
                    self.at(f"{pointer}/arguments/{index}"),
                    argument["type"],
                    argument.get("step"),
                    argument.get("value"),
                    "value" in argument,
                )
                for index, argument in enumerate(arguments)
            )
        return MappingNode(
            pointer,
            self.at(pointer),
            function if isinstance(function, str) else None,
            nodes,
        )

    def step(self, step_id: str, raw: Mapping[str, Any]) -> StepNode:
        pointer = f"/steps/{escape_pointer_token(step_id)}"
        mark = self.at(pointer)
        title, description = raw.get("title"), raw.get("description")
        kind = raw["type"]
        if kind == "call":
            refusals = raw.get("onDeclaredRefusal")
            return CallNode(
                pointer,
                mark,
                step_id,
                title,
                description,
                raw.get("operation"),
                self.mapping(raw.get("input"), f"{pointer}/input"),
                raw.get("next"),
                None if refusals is None else MappingProxyType(dict(refusals)),
            )
        if kind == "choose":
            cases = raw.get("cases")
            return ChooseNode(
                pointer,
                mark,
                step_id,
                title,
                description,
                self.mapping(raw.get("choose"), f"{pointer}/choose"),
                None if cases is None else MappingProxyType(dict(cases)),
            )
        if kind == "wait-until":
            return WaitUntilNode(
                pointer,
                mark,
                step_id,
                title,
                description,
                self.mapping(raw.get("waitUntil"), f"{pointer}/waitUntil"),
                raw.get("next"),
            )
        if kind == "wait-for":
            timeout = raw.get("timeoutSeconds")
            return WaitForNode(
                pointer,
                mark,
                step_id,
                title,
                description,
                raw.get("call"),
                raw.get("completion"),
                timeout if isinstance(timeout, int) else None,
                raw.get("next"),
                raw.get("onTimeout"),
                raw.get("onCancel"),
            )
        return FinishNode(
            pointer,
            mark,
            step_id,
            title,
            description,
            raw.get("outcome"),
            self.mapping(raw.get("output"), f"{pointer}/output"),
        )

    def model(
        self, document: Mapping[str, Any], failed: frozenset[str], findings: frozenset[str]
    ) -> WorkflowModel:
        decoded = self.decoded
        project = decoded.get("project")
        operations = decoded.get("operations")
        triggers = decoded.get("triggers")
        steps = decoded.get("steps")
        outcomes = decoded.get("outcomes")
        deadline = decoded.get("deadlineSeconds")
        return WorkflowModel(
            document=document,
            source_map=self.source_map,
            failed=failed,
            findings=findings,
            declared=_declared(document),
            project=None
            if project is None
            else ProjectNode(
                "/project",
                self.at("/project"),
                project.get("id"),
                project.get("version"),
                project.get("title"),
                project.get("description"),
            ),
            functions_file=decoded.get("functionsFile"),
            deadline_seconds=deadline if isinstance(deadline, int) else None,
            start=decoded.get("start"),
            input=SchemaNode("/input", self.at("/input"), decoded["input"])
            if "input" in decoded
            else None,
            operations=None
            if operations is None
            else MappingProxyType(
                {
                    name: AliasNode(
                        f"/operations/{escape_pointer_token(name)}",
                        self.at(f"/operations/{escape_pointer_token(name)}"),
                        name,
                        entry.get("operation"),
                        entry.get("connection"),
                        entry.get("action"),
                    )
                    for name, entry in operations.items()
                }
            ),
            triggers=None
            if triggers is None
            else MappingProxyType(
                {
                    trigger_id: TriggerNode(
                        f"/triggers/{escape_pointer_token(trigger_id)}",
                        self.at(f"/triggers/{escape_pointer_token(trigger_id)}"),
                        trigger_id,
                        entry.get("source"),
                        entry.get("event"),
                        self.mapping(
                            entry.get("input"),
                            f"/triggers/{escape_pointer_token(trigger_id)}/input",
                        ),
                    )
                    for trigger_id, entry in triggers.items()
                }
            ),
            steps=None
            if steps is None
            else MappingProxyType(
                {step_id: self.step(step_id, raw) for step_id, raw in steps.items()}
            ),
            outcomes=None
            if outcomes is None
            else MappingProxyType(
                {
                    outcome: SchemaNode(
                        f"/outcomes/{escape_pointer_token(outcome)}",
                        self.at(f"/outcomes/{escape_pointer_token(outcome)}"),
                        schema,
                    )
                    for outcome, schema in outcomes.items()
                }
            ),
        )


def _object_member(value: Any, member: str) -> Mapping[str, Any]:
    if isinstance(value, Mapping):
        inner = value.get(member)
        if isinstance(inner, Mapping):
            return inner
    return {}


def _declared(document: Any) -> Declared:
    """The names as written (the one place the model reads the undecoded document)."""
    steps = _object_member(document, "steps")
    operations = _object_member(document, "operations")

    def named(step_type: str, member: str) -> frozenset[str]:
        return frozenset(
            step[member]
            for step in steps.values()
            if isinstance(step, Mapping)
            and step.get("type") == step_type
            and isinstance(step.get(member), str)
        )

    return Declared(
        step_types=MappingProxyType(
            {
                step_id: step["type"]
                if isinstance(step, Mapping) and isinstance(step.get("type"), str)
                else None
                for step_id, step in steps.items()
            }
        ),
        alias_operations=MappingProxyType(
            {
                alias: entry["operation"]
                if isinstance(entry, Mapping) and isinstance(entry.get("operation"), str)
                else None
                for alias, entry in operations.items()
            }
        ),
        outcomes=frozenset(_object_member(document, "outcomes")),
        used_aliases=named("call", "operation"),
        finish_outcomes=named("finish", "outcome"),
    )


def _findings(diagnostics: list[Diagnostic]) -> frozenset[str]:
    return frozenset(d.path for d in diagnostics if d.effective_severity == "error")


def model_from_authored(authored: AuthoredFile) -> WorkflowModel | None:
    """The model of a read `workflow.yaml`; None when its body did not decode at all."""
    if authored.decoded is None or authored.document is None:
        return None
    document = authored.document.value
    assert isinstance(document, Mapping)
    builder = _Builder(authored.decoded, authored.document.source_map)
    return builder.model(document, authored.failed, _findings(authored.diagnostics))


def model_from_json(
    workflow: Mapping[str, Any], *, file: str, artifact: str | None, out: list[Diagnostic]
) -> WorkflowModel | None:
    """The model of a workflow read back from JSON (a snapshot's): decoded by the same rules
    as `workflow.yaml`, with no positions. Decoder findings go to `out`."""
    start = len(out)
    if (
        workflow.get("apiVersion") != limits.PROJECT_API_VERSION
        or workflow.get("kind") != limits.KIND_PROJECT
    ):
        out.append(Diagnostic("config.missing-envelope", path="", file=file, artifact=artifact))
        return None
    decoded, failed = decode_json(
        workflow, load_schema("project"), file=file, artifact=artifact, out=out
    )
    if decoded is None:
        return None
    builder = _Builder(decoded, NO_POSITIONS)
    return builder.model(workflow, failed, _findings(out[start:]))
