"""Declaration rules W1–W25, schema rule S1 and function rules F4 over a decoded workflow.

Rules read the decoded tree (members that failed to decode are absent and skipped) and, where a
rule asks whether something is *declared* or *used*, the document as written: a step whose body
failed to decode is still declared, so naming it is not a second error (contract 02 §4.2).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from coordinator_core import limits
from coordinator_core.authoring.decode import AuthoredFile
from coordinator_core.authoring.yamlreader import escape_pointer_token
from coordinator_core.errors import Diagnostic, Related
from coordinator_core.functions.lexer import (
    DISABLED,
    KEYWORD_FUNCTIONS,
    KEYWORDS,
    RESERVED_WORDS,
)
from coordinator_core.jsonschema.dialect import accepts_null, check_schema
from coordinator_core.operations import CATALOG, PROPOSAL_OPERATION, product_of
from coordinator_core.values import JsonBoundsError, check_json_value

__all__ = ["MappingRef", "WorkflowRules", "mappings_of"]

FUNCTION_NAME: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
WORKFLOW_FILE: Final = "workflow.yaml"
FUNCTIONS_FILE: Final = "functions.rhai"

# The member of each step type that holds its mapping (contract 02 §5.2 `<role>`).
MAPPING_ROLE: Final = {
    "call": "input",
    "choose": "choose",
    "wait-until": "waitUntil",
    "finish": "output",
}


@dataclass(frozen=True, slots=True)
class MappingRef:
    """One mapping of the workflow: a step's (`step` set) or a trigger's (`trigger` set)."""

    pointer: str
    mapping: Mapping[str, Any]
    step: str | None = None
    trigger: str | None = None


def mappings_of(workflow: Mapping[str, Any]) -> Iterator[MappingRef]:
    """Every decoded mapping, steps first (document order), then triggers."""
    for step_id, step in (workflow.get("steps") or {}).items():
        role = MAPPING_ROLE.get(step.get("type", ""))
        if role and isinstance(step.get(role), Mapping):
            pointer = f"/steps/{escape_pointer_token(step_id)}/{role}"
            yield MappingRef(pointer, step[role], step=step_id)
    for trigger_id, trigger in (workflow.get("triggers") or {}).items():
        if isinstance(trigger.get("input"), Mapping):
            pointer = f"/triggers/{escape_pointer_token(trigger_id)}/input"
            yield MappingRef(pointer, trigger["input"], trigger=trigger_id)


def is_function_name(name: str) -> bool:
    """The function-name grammar of 01 §3: an identifier that is no Rhai keyword or reserved
    word (disabled symbols and keyword functions included: a script cannot define them)."""
    return bool(FUNCTION_NAME.match(name)) and name not in (
        KEYWORDS | RESERVED_WORDS | KEYWORD_FUNCTIONS | DISABLED
    )


def _raw_map(value: Any, member: str) -> dict[str, Any]:
    if isinstance(value, dict):
        inner = value.get(member)
        if isinstance(inner, dict):
            return inner
    return {}


class WorkflowRules:
    """Runs W1–W25 and S1 over one decoded workflow.yaml, appending to `out`."""

    def __init__(self, authored: AuthoredFile, out: list[Diagnostic]) -> None:
        assert authored.decoded is not None
        self.authored = authored
        self.workflow: dict[str, Any] = authored.decoded
        raw = authored.document.value if authored.document is not None else {}
        self.raw_steps = _raw_map(raw, "steps")
        self.raw_operations = _raw_map(raw, "operations")
        self.raw_outcomes = _raw_map(raw, "outcomes")
        self.steps: dict[str, Any] = self.workflow.get("steps") or {}
        self.operations: dict[str, Any] = self.workflow.get("operations") or {}
        self.out = out
        self.route_errors = False
        self.schema_ok: dict[str, bool] = {}

    # -- helpers ---------------------------------------------------------------------------

    def report(
        self,
        code: str,
        pointer: str,
        *,
        message: str | None = None,
        key: bool = False,
        related: tuple[Related, ...] = (),
    ) -> None:
        line, column = (
            self.authored.key_position(pointer) if key else self.authored.position(pointer)
        )
        self.out.append(
            Diagnostic(
                code,
                path=pointer,
                file=WORKFLOW_FILE,
                line=line,
                column=column,
                message=message,
                artifact=limits.KIND_PROJECT,
                related=related,
            )
        )

    def raw_step_type(self, step_id: str) -> str | None:
        step = self.raw_steps.get(step_id)
        if isinstance(step, dict) and isinstance(step.get("type"), str):
            return str(step["type"])
        return None

    def alias_operation(self, alias: str) -> str | None:
        entry = self.operations.get(alias)
        if isinstance(entry, Mapping) and isinstance(entry.get("operation"), str):
            return str(entry["operation"])
        return None

    # -- rules -----------------------------------------------------------------------------

    def run(self) -> None:
        self.top_level()
        self.aliases()
        for step_id, step in self.steps.items():
            self.step(step_id, step)
        self.outcomes_used()
        self.mapping_shapes()
        self.schemas()

    def top_level(self) -> None:
        workflow = self.workflow
        functions_file = workflow.get("functionsFile")
        if isinstance(functions_file, str) and functions_file != FUNCTIONS_FILE:
            self.report("coordinator.definition.functions-file", "/functionsFile")
        deadline = workflow.get("deadlineSeconds")
        if isinstance(deadline, int) and not 1 <= deadline <= limits.MAX_DEADLINE_SECONDS:
            self.report("coordinator.definition.deadline", "/deadlineSeconds")
        start = workflow.get("start")
        if isinstance(start, str) and "steps" in workflow and start not in self.raw_steps:
            self.report("coordinator.definition.target", "/start")
            self.route_errors = True
        if "input" in self.raw_steps:
            self.report("coordinator.definition.step", "/steps/input", key=True)

    def aliases(self) -> None:
        connection_product: dict[str, str] = {}
        connections: set[str] = set()
        used = {
            step["operation"]
            for step in self.raw_steps.values()
            if isinstance(step, dict)
            and step.get("type") == "call"
            and isinstance(step.get("operation"), str)
        }
        for alias, entry in self.operations.items():
            base = f"/operations/{escape_pointer_token(alias)}"
            operation = entry.get("operation")
            known = isinstance(operation, str) and operation in CATALOG
            if isinstance(operation, str):
                if operation == PROPOSAL_OPERATION:
                    self.report("coordinator.operation.proposal-action", f"{base}/operation")
                elif not known:
                    self.report("coordinator.definition.operation", f"{base}/operation")
            if known:
                wants_action = operation == "breg.invoke-action/v1"
                if (
                    wants_action
                    and "action" not in entry
                    and f"{base}/action" not in self.authored.failed
                ):
                    self.report(
                        "coordinator.definition.action",
                        base,
                        message=f"Operation alias {alias} invokes a BReg action but names no action.",
                    )
                elif not wants_action and "action" in entry:
                    self.report("coordinator.definition.action", f"{base}/action")
            connection = entry.get("connection")
            if isinstance(connection, str):
                connections.add(connection)
                if known:
                    product = product_of(str(operation))
                    first = connection_product.setdefault(connection, product)
                    if first != product:
                        self.report("coordinator.definition.connection", f"{base}/connection")
            if alias not in used and self.all_steps_decoded():
                self.report("coordinator.definition.unused-operation", base, key=True)
        if len(connections) > limits.MAX_CONNECTIONS:
            self.report(
                "coordinator.definition.connection",
                "/operations",
                message="More than 16 distinct connection names are declared.",
            )

    def target(self, pointer: str, target: Any) -> None:
        if isinstance(target, str) and target not in self.raw_steps:
            self.report("coordinator.definition.target", pointer)
            self.route_errors = True

    def step(self, step_id: str, step: Mapping[str, Any]) -> None:
        base = f"/steps/{escape_pointer_token(step_id)}"
        step_type = step.get("type")
        for member in ("next", "onTimeout", "onCancel"):
            if member in step:
                self.target(f"{base}/{member}", step[member])
        for label, target in (step.get("cases") or {}).items():
            self.target(f"{base}/cases/{escape_pointer_token(label)}", target)
        for code, target in (step.get("onDeclaredRefusal") or {}).items():
            self.target(f"{base}/onDeclaredRefusal/{escape_pointer_token(code)}", target)
        if step_type == "call":
            alias = step.get("operation")
            if isinstance(alias, str) and alias not in self.raw_operations:
                self.report("coordinator.definition.operation", f"{base}/operation")
            elif isinstance(alias, str) and "onDeclaredRefusal" in step:
                operation = self.alias_operation(alias)
                descriptor = CATALOG.get(operation) if operation else None
                if descriptor is not None and not descriptor.declared_refusals:
                    self.report(
                        "coordinator.definition.declared-refusal", f"{base}/onDeclaredRefusal"
                    )
        elif step_type == "wait-for":
            self.wait_for(step_id, step, base)
        elif step_type == "finish":
            outcome = step.get("outcome")
            if isinstance(outcome, str) and outcome not in self.raw_outcomes:
                self.report("coordinator.definition.outcome", f"{base}/outcome")

    def wait_for(self, step_id: str, step: Mapping[str, Any], base: str) -> None:
        timeout = step.get("timeoutSeconds")
        deadline = self.workflow.get("deadlineSeconds")
        if isinstance(timeout, int):
            deadline_ok = isinstance(deadline, int) and 1 <= deadline <= limits.MAX_DEADLINE_SECONDS
            if timeout < 1 or (deadline_ok and isinstance(deadline, int) and timeout >= deadline):
                self.report("coordinator.definition.timeout", f"{base}/timeoutSeconds")
        called = step.get("call")
        if not isinstance(called, str):
            return
        called_type = self.raw_step_type(called)
        if called not in self.raw_steps or (called_type is not None and called_type != "call"):
            self.report("coordinator.definition.wait-for", f"{base}/call")
            return
        completion = step.get("completion")
        called_step = self.steps.get(called)
        if not isinstance(completion, str) or not isinstance(called_step, Mapping):
            return
        alias = called_step.get("operation")
        operation = self.alias_operation(alias) if isinstance(alias, str) else None
        descriptor = CATALOG.get(operation) if operation else None
        if descriptor is not None and completion not in descriptor.completions:
            self.report("coordinator.definition.completion", f"{base}/completion")

    def all_steps_decoded(self) -> bool:
        """Whether every step decoded: rules about what the steps use need all of them."""
        return "steps" in self.workflow and all(step in self.steps for step in self.raw_steps)

    def outcomes_used(self) -> None:
        if not self.all_steps_decoded():
            return  # a finish that failed to decode may be the one that targets an outcome
        targeted = {
            step["outcome"]
            for step in self.raw_steps.values()
            if isinstance(step, dict)
            and step.get("type") == "finish"
            and isinstance(step.get("outcome"), str)
        }
        for outcome in self.workflow.get("outcomes") or {}:
            if outcome not in targeted:
                self.report(
                    "coordinator.definition.outcome",
                    f"/outcomes/{escape_pointer_token(outcome)}",
                    key=True,
                    message=f"Outcome {outcome} is not the target of any finish step.",
                )

    def mapping_shapes(self) -> None:
        for ref in mappings_of(self.workflow):
            function = ref.mapping.get("function")
            if isinstance(function, str) and not is_function_name(function):
                self.report("coordinator.mapping.function", f"{ref.pointer}/function")
            arguments = ref.mapping.get("arguments")
            if not isinstance(arguments, list):
                continue
            if len(arguments) > limits.MAX_MAPPING_ARGUMENTS:
                self.report("coordinator.function.arity", f"{ref.pointer}/arguments")
            for index, argument in enumerate(arguments):
                pointer = f"{ref.pointer}/arguments/{index}"
                kind = argument.get("type")
                if ref.trigger is not None and kind not in ("event", "literal"):
                    self.report("coordinator.mapping.reference", pointer)
                if ref.step is not None and kind == "event":
                    self.report("coordinator.mapping.reference", pointer)
                if kind == "literal" and "value" in argument:
                    try:
                        check_json_value(argument["value"])
                    except JsonBoundsError:
                        self.report("coordinator.mapping.literal", f"{pointer}/value")

    def schemas(self) -> None:
        def check(pointer: str, schema: Any) -> None:
            findings = check_schema(schema, pointer)
            for finding in findings:
                self.report(
                    "coordinator.definition.schema", finding.pointer, message=finding.message
                )
            self.schema_ok[pointer] = not findings

        if "input" in self.workflow:
            check("/input", self.workflow["input"])
        for outcome, schema in (self.workflow.get("outcomes") or {}).items():
            check(f"/outcomes/{escape_pointer_token(outcome)}", schema)
        self.finishes_without_output()

    def finishes_without_output(self) -> None:
        """W20, after S1 compiled the outcome's schema."""
        outcomes = self.workflow.get("outcomes") or {}
        for step_id, step in self.steps.items():
            if step.get("type") != "finish" or "output" in step:
                continue
            if f"/steps/{escape_pointer_token(step_id)}/output" in self.authored.failed:
                continue
            outcome = step.get("outcome")
            if not isinstance(outcome, str) or outcome not in outcomes:
                continue
            if not self.schema_ok.get(f"/outcomes/{escape_pointer_token(outcome)}", False):
                continue
            if not accepts_null(outcomes[outcome]):
                self.report(
                    "coordinator.definition.outcome",
                    f"/steps/{escape_pointer_token(step_id)}",
                    key=True,
                    message=f"Finish step {step_id} publishes no output, but outcome {outcome} does not accept null.",
                )


def function_rules(
    authored: AuthoredFile,
    workflow: Mapping[str, Any],
    functions: Mapping[str, Any],
    out: list[Diagnostic],
    position: Callable[[str], tuple[int | None, int | None]],
) -> None:
    """F4: each mapping names exactly one public function with its number of arguments.

    `functions` maps a name to the interpreter's FunctionInfo (name, parameters, private, line,
    column).
    """
    for ref in mappings_of(workflow):
        name = ref.mapping.get("function")
        arguments = ref.mapping.get("arguments")
        if not isinstance(name, str) or not isinstance(arguments, list):
            continue
        if not is_function_name(name) or len(arguments) > limits.MAX_MAPPING_ARGUMENTS:
            continue  # W23/W24 already reported this mapping
        info = functions.get(name)
        if info is not None and not info.private and info.parameters == len(arguments):
            continue
        related: tuple[Related, ...] = ()
        if info is None:
            message = f"No function named {name} is defined in functions.rhai."
        elif info.private:
            message = f"Function {name} is private; a mapping can only call a public function."
        else:
            message = (
                f"Function {name} takes {_count(info.parameters, 'parameter')}, "
                f"but the mapping passes {_count(len(arguments), 'argument')}."
            )
        if info is not None:
            related = (
                Related(
                    file=FUNCTIONS_FILE,
                    path="",
                    message=f"function {name} is defined here",
                    line=info.line,
                    column=info.column,
                ),
            )
        line, column = position(f"{ref.pointer}/function")
        out.append(
            Diagnostic(
                "coordinator.function.definition",
                path=f"{ref.pointer}/function",
                file=WORKFLOW_FILE,
                line=line,
                column=column,
                message=message,
                artifact=limits.KIND_PROJECT,
                related=related,
            )
        )


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"
