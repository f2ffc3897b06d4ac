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
from coordinator_core.errors import Diagnostic, Related, closest_name, is_identifier
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

# Per-condition repair hints of codes that cover several conditions (fixed sentences).
HINT_MISSING_FUNCTION: Final = (
    "Define a public function with this name in functions.rhai, or name an existing function "
    "in the mapping's `function`."
)
HINT_PRIVATE_FUNCTION: Final = (
    "Remove `private` from the function, or name a public function in the mapping."
)
HINT_FUNCTION_ARITY: Final = (
    "Give the function one parameter per mapping argument, or change the mapping's `arguments`."
)
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
        suggestion: str | None = None,
        hint: str | None = None,
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
                hint=hint,
                artifact=limits.KIND_PROJECT,
                related=related,
                suggestion=suggestion,
            )
        )

    def declared_here(self, pointer: str, what: str) -> tuple[Related, ...]:
        """A `related` entry at the declaration of a suggested name (its key in the file)."""
        line, column = self.authored.key_position(pointer)
        return (Related(WORKFLOW_FILE, pointer, f"{what} is declared here", line, column),)

    def unknown(
        self,
        code: str,
        pointer: str,
        name: str,
        candidates: Iterator[str] | list[str] | set[str],
        *,
        message: str,
        declared_under: str | None,
        noun: str,
    ) -> None:
        """An unknown name, named in `message` only if it is an identifier, with the closest
        declared name as `suggestion` and (for a name declared in workflow.yaml) `related`."""
        suggestion = closest_name(name, candidates) if is_identifier(name) else None
        related: tuple[Related, ...] = ()
        if suggestion is not None and declared_under is not None:
            related = self.declared_here(
                f"{declared_under}/{escape_pointer_token(suggestion)}", f"{noun} {suggestion}"
            )
        self.report(
            code,
            pointer,
            message=message if is_identifier(name) else None,
            related=related,
            suggestion=suggestion,
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
            self.unknown(
                "coordinator.definition.target",
                "/start",
                start,
                set(self.raw_steps),
                message=f"The start member names step {start}, which is not declared under `steps`.",
                declared_under="/steps",
                noun="step",
            )
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

    def target(self, pointer: str, target: Any, step_id: str) -> None:
        if isinstance(target, str) and target not in self.raw_steps:
            self.unknown(
                "coordinator.definition.target",
                pointer,
                target,
                {s for s in self.raw_steps if s != step_id},
                message=f"Step {step_id} routes to step {target}, which is not declared under `steps`.",
                declared_under="/steps",
                noun="step",
            )
            self.route_errors = True

    def step(self, step_id: str, step: Mapping[str, Any]) -> None:
        base = f"/steps/{escape_pointer_token(step_id)}"
        step_type = step.get("type")
        for member in ("next", "onTimeout", "onCancel"):
            if member in step:
                self.target(f"{base}/{member}", step[member], step_id)
        for label, target in (step.get("cases") or {}).items():
            self.target(f"{base}/cases/{escape_pointer_token(label)}", target, step_id)
        for code, target in (step.get("onDeclaredRefusal") or {}).items():
            self.target(f"{base}/onDeclaredRefusal/{escape_pointer_token(code)}", target, step_id)
        if step_type == "call":
            alias = step.get("operation")
            if isinstance(alias, str) and alias not in self.raw_operations:
                self.unknown(
                    "coordinator.definition.operation",
                    f"{base}/operation",
                    alias,
                    set(self.raw_operations),
                    message=(
                        f"Call step {step_id} names operation alias {alias}, "
                        "which is not declared under `operations`."
                    ),
                    declared_under="/operations",
                    noun="alias",
                )
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
                self.unknown(
                    "coordinator.definition.outcome",
                    f"{base}/outcome",
                    outcome,
                    set(self.raw_outcomes),
                    message=(
                        f"Finish step {step_id} names outcome {outcome}, "
                        "which is not declared under `outcomes`."
                    ),
                    declared_under="/outcomes",
                    noun="outcome",
                )

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
            if called in self.raw_steps:
                self.report(
                    "coordinator.definition.wait-for",
                    f"{base}/call",
                    message=(
                        f"Wait-for step {step_id} waits for step {called}, which is not a call step."
                    )
                    if is_identifier(called)
                    else None,
                )
                return
            calls = {s for s in self.raw_steps if self.raw_step_type(s) == "call"}
            self.unknown(
                "coordinator.definition.wait-for",
                f"{base}/call",
                called,
                calls,
                message=(
                    f"Wait-for step {step_id} waits for step {called}, "
                    "which is not declared under `steps`."
                ),
                declared_under="/steps",
                noun="call step",
            )
            return
        completion = step.get("completion")
        called_step = self.steps.get(called)
        if not isinstance(completion, str) or not isinstance(called_step, Mapping):
            return
        alias = called_step.get("operation")
        operation = self.alias_operation(alias) if isinstance(alias, str) else None
        descriptor = CATALOG.get(operation) if operation else None
        if descriptor is not None and completion not in descriptor.completions:
            self.unknown(
                "coordinator.definition.completion",
                f"{base}/completion",
                completion,
                set(descriptor.completions),
                message=(
                    f"Wait-for step {step_id} waits for completion {completion}, which operation "
                    f"{descriptor.id} of call step {called} does not expose."
                ),
                declared_under=None,
                noun="completion",
            )

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
        suggestion: str | None = None
        if info is None:
            message = f"No function named {name} is defined in functions.rhai."
            hint = HINT_MISSING_FUNCTION
            public = {f for f, i in functions.items() if not i.private}
            suggestion = closest_name(name, public)
            if suggestion is not None:
                info = functions[suggestion]
        elif info.private:
            message = f"Function {name} is private; a mapping can only call a public function."
            hint = HINT_PRIVATE_FUNCTION
        else:
            message = (
                f"Function {name} takes {_count(info.parameters, 'parameter')}, "
                f"but the mapping passes {_count(len(arguments), 'argument')}."
            )
            hint = HINT_FUNCTION_ARITY
        if info is not None:
            related = (
                Related(
                    file=FUNCTIONS_FILE,
                    path="",
                    message=f"function {suggestion or name} is defined here",
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
                hint=hint,
                artifact=limits.KIND_PROJECT,
                related=related,
                suggestion=suggestion,
            )
        )


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"
