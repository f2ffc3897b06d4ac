"""Declaration rules W1–W25, schema rule S1 and function rule F4 over the typed model.

Rules read the typed model of the workflow (`authoring.model`: members that failed to decode are
None and skipped) and, where a rule asks whether something is *declared* or *used*, the names as
written (`WorkflowModel.declared`): a step whose body failed to decode is still declared, so
naming it is not a second error (contract 02 §4.2). The same rules run on a workflow read from
`workflow.yaml` (with positions) and on one restored from a snapshot (without).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from coordinator_core import limits
from coordinator_core.authoring.model import (
    WORKFLOW_FILE,
    CallNode,
    FinishNode,
    StepNode,
    WaitForNode,
    WorkflowModel,
    routes_of,
)
from coordinator_core.authoring.yamlreader import escape_pointer_token
from coordinator_core.definition.graph import GraphFacts, graph_rules
from coordinator_core.definition.withdrawal import open_mutation_rules
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

__all__ = [
    "FUNCTIONS_FILE",
    "WORKFLOW_FILE",
    "WorkflowRules",
    "check_workflow",
    "function_rules",
    "is_function_name",
]

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
FUNCTIONS_FILE: Final = "functions.rhai"


def is_function_name(name: str) -> bool:
    """The function-name grammar of 01 §3: an identifier that is no Rhai keyword or reserved
    word (disabled symbols and keyword functions included: a script cannot define them)."""
    return bool(FUNCTION_NAME.match(name)) and name not in (
        KEYWORDS | RESERVED_WORDS | KEYWORD_FUNCTIONS | DISABLED
    )


class WorkflowRules:
    """Runs W1–W25 and S1 over the typed model of one workflow, appending to `out`."""

    def __init__(self, model: WorkflowModel, out: list[Diagnostic]) -> None:
        self.model = model
        self.declared = model.declared
        self.steps = model.steps or {}
        self.operations = model.operations or {}
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
        self.out.append(
            self.model.diagnostic(
                code,
                pointer,
                key=key,
                message=message,
                hint=hint,
                related=related,
                suggestion=suggestion,
            )
        )

    def declared_here(self, pointer: str, what: str) -> tuple[Related, ...]:
        """A `related` entry at the declaration of a suggested name (its key in the file)."""
        line, column = self.model.key_position(pointer)
        return (Related(WORKFLOW_FILE, pointer, f"{what} is declared here", line, column),)

    def unknown(
        self,
        code: str,
        pointer: str,
        name: str,
        candidates: Iterable[str],
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

    # -- rules -----------------------------------------------------------------------------

    def run(self) -> None:
        self.top_level()
        self.aliases()
        for step in self.steps.values():
            self.step(step)
        self.outcomes_used()
        self.mapping_shapes()
        self.schemas()

    def top_level(self) -> None:
        model = self.model
        if model.functions_file is not None and model.functions_file != FUNCTIONS_FILE:
            self.report("coordinator.definition.functions-file", "/functionsFile")
        deadline = model.deadline_seconds
        if deadline is not None and not 1 <= deadline <= limits.MAX_DEADLINE_SECONDS:
            self.report("coordinator.definition.deadline", "/deadlineSeconds")
        start = model.start
        declared_steps = self.declared.step_types
        if start is not None and model.steps is not None and start not in declared_steps:
            self.unknown(
                "coordinator.definition.target",
                "/start",
                start,
                set(declared_steps),
                message=f"The start member names step {start}, which is not declared under `steps`.",
                declared_under="/steps",
                noun="step",
            )
            self.route_errors = True
        if "input" in declared_steps:
            self.report("coordinator.definition.step", "/steps/input", key=True)

    def aliases(self) -> None:
        connection_product: dict[str, str] = {}
        connections: set[str] = set()
        used = self.declared.used_aliases
        for alias in self.operations.values():
            base = alias.pointer
            operation = alias.operation
            known = operation is not None and operation in CATALOG
            if operation is not None:
                if operation == PROPOSAL_OPERATION:
                    self.report("coordinator.operation.proposal-action", f"{base}/operation")
                elif not known:
                    self.report("coordinator.definition.operation", f"{base}/operation")
            if known:
                wants_action = operation == "breg.invoke-action/v1"
                if (
                    wants_action
                    and alias.action is None
                    and f"{base}/action" not in self.model.failed
                ):
                    self.report(
                        "coordinator.definition.action",
                        base,
                        message=(
                            f"Operation alias {alias.name} invokes a BReg action but names no "
                            "action."
                        ),
                    )
                elif not wants_action and alias.action is not None:
                    self.report("coordinator.definition.action", f"{base}/action")
            connection = alias.connection
            if connection is not None:
                connections.add(connection)
                if known:
                    product = product_of(str(operation))
                    first = connection_product.setdefault(connection, product)
                    if first != product:
                        self.report("coordinator.definition.connection", f"{base}/connection")
            if alias.name not in used and self.model.all_steps_decoded:
                self.report("coordinator.definition.unused-operation", base, key=True)
        if len(connections) > limits.MAX_CONNECTIONS:
            self.report(
                "coordinator.definition.connection",
                "/operations",
                message="More than 16 distinct connection names are declared.",
            )

    def target(self, pointer: str, target: str | None, step_id: str) -> None:
        declared = self.declared.step_types
        if target is not None and target not in declared:
            self.unknown(
                "coordinator.definition.target",
                pointer,
                target,
                {s for s in declared if s != step_id},
                message=f"Step {step_id} routes to step {target}, which is not declared under `steps`.",
                declared_under="/steps",
                noun="step",
            )
            self.route_errors = True

    def step(self, step: StepNode) -> None:
        base = step.pointer
        step_id = step.id
        for route in routes_of(step):
            self.target(route.pointer, route.target, step_id)
        if isinstance(step, CallNode):
            alias = step.operation
            declared_aliases = self.declared.alias_operations
            if alias is not None and alias not in declared_aliases:
                self.unknown(
                    "coordinator.definition.operation",
                    f"{base}/operation",
                    alias,
                    set(declared_aliases),
                    message=(
                        f"Call step {step_id} names operation alias {alias}, "
                        "which is not declared under `operations`."
                    ),
                    declared_under="/operations",
                    noun="alias",
                )
            elif alias is not None and step.on_declared_refusal is not None:
                operation = self.model.alias_operation(alias)
                descriptor = CATALOG.get(operation) if operation else None
                if descriptor is not None and not descriptor.declared_refusals:
                    self.report(
                        "coordinator.definition.declared-refusal", f"{base}/onDeclaredRefusal"
                    )
        elif isinstance(step, WaitForNode):
            self.wait_for(step)
        elif isinstance(step, FinishNode):
            outcome = step.outcome
            if outcome is not None and outcome not in self.declared.outcomes:
                self.unknown(
                    "coordinator.definition.outcome",
                    f"{base}/outcome",
                    outcome,
                    set(self.declared.outcomes),
                    message=(
                        f"Finish step {step_id} names outcome {outcome}, "
                        "which is not declared under `outcomes`."
                    ),
                    declared_under="/outcomes",
                    noun="outcome",
                )

    def wait_for(self, step: WaitForNode) -> None:
        base, step_id = step.pointer, step.id
        timeout = step.timeout_seconds
        deadline = self.model.deadline_seconds
        if timeout is not None:
            deadline_ok = deadline is not None and 1 <= deadline <= limits.MAX_DEADLINE_SECONDS
            if timeout < 1 or (deadline_ok and deadline is not None and timeout >= deadline):
                self.report("coordinator.definition.timeout", f"{base}/timeoutSeconds")
        called = step.call
        if called is None:
            return
        declared = self.declared.step_types
        called_type = declared.get(called)
        if called not in declared or (called_type is not None and called_type != "call"):
            if called in declared:
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
            calls = {s for s, t in declared.items() if t == "call"}
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
        completion = step.completion
        called_step = self.steps.get(called)
        if completion is None or not isinstance(called_step, CallNode):
            return
        alias = called_step.operation
        operation = self.model.alias_operation(alias) if alias is not None else None
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

    def outcomes_used(self) -> None:
        if not self.model.all_steps_decoded:
            return  # a finish that failed to decode may be the one that targets an outcome
        targeted = self.declared.finish_outcomes
        for outcome_id, outcome in (self.model.outcomes or {}).items():
            if outcome_id not in targeted:
                self.report(
                    "coordinator.definition.outcome",
                    outcome.pointer,
                    key=True,
                    message=f"Outcome {outcome_id} is not the target of any finish step.",
                )

    def mapping_shapes(self) -> None:
        for use in self.model.mappings():
            mapping = use.mapping
            function = mapping.function
            if function is not None and not is_function_name(function):
                self.report("coordinator.mapping.function", f"{mapping.pointer}/function")
            arguments = mapping.arguments
            if arguments is None:
                continue
            if len(arguments) > limits.MAX_MAPPING_ARGUMENTS:
                self.report("coordinator.function.arity", f"{mapping.pointer}/arguments")
            for argument in arguments:
                kind = argument.kind
                if use.trigger is not None and kind not in ("event", "literal"):
                    self.report("coordinator.mapping.reference", argument.pointer)
                if use.step is not None and kind == "event":
                    self.report("coordinator.mapping.reference", argument.pointer)
                if kind == "literal" and argument.has_value:
                    try:
                        check_json_value(argument.value)
                    except JsonBoundsError:
                        self.report("coordinator.mapping.literal", f"{argument.pointer}/value")

    def schemas(self) -> None:
        def check(pointer: str, schema: Any) -> None:
            findings = check_schema(schema, pointer)
            for finding in findings:
                self.report(
                    "coordinator.definition.schema", finding.pointer, message=finding.message
                )
            self.schema_ok[pointer] = not findings

        if self.model.input is not None:
            check("/input", self.model.input.schema)
        for outcome in (self.model.outcomes or {}).values():
            check(outcome.pointer, outcome.schema)
        self.finishes_without_output()

    def finishes_without_output(self) -> None:
        """W20, after S1 compiled the outcome's schema."""
        outcomes = self.model.outcomes or {}
        for step in self.steps.values():
            if not isinstance(step, FinishNode) or step.output is not None:
                continue
            if f"{step.pointer}/output" in self.model.failed:
                continue
            outcome = step.outcome
            if outcome is None or outcome not in outcomes:
                continue
            if not self.schema_ok.get(outcomes[outcome].pointer, False):
                continue
            if not accepts_null(outcomes[outcome].schema):
                self.report(
                    "coordinator.definition.outcome",
                    step.pointer,
                    key=True,
                    message=(
                        f"Finish step {step.id} publishes no output, but outcome {outcome} does "
                        "not accept null."
                    ),
                )


def function_rules(
    model: WorkflowModel, functions: Mapping[str, Any], out: list[Diagnostic]
) -> None:
    """F4: each mapping names exactly one public function with its number of arguments.

    `functions` maps a name to the interpreter's FunctionInfo (name, parameters, private, line,
    column).
    """
    for use in model.mappings():
        name = use.mapping.function
        arguments = use.mapping.arguments
        if name is None or arguments is None:
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
        line, column = model.position(f"{use.mapping.pointer}/function")
        out.append(
            Diagnostic(
                "coordinator.function.definition",
                path=f"{use.mapping.pointer}/function",
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


def check_workflow(
    model: WorkflowModel,
    functions: Mapping[str, Any] | None,
    out: list[Diagnostic],
) -> GraphFacts | None:
    """Every definition rule over the typed model, in the order of 02 §4.1 steps 4–6: W1–W25
    and S1, F4 (when `functions` compiled: name → FunctionInfo), then G1–G2 and A1–A3 when
    every step decoded and every route target resolved, and on a graph that passed them the
    clean-up lint (`coordinator.definition.open-mutation`, a warning). Returns the graph facts
    when the graph rules ran and passed."""
    rules = WorkflowRules(model, out)
    rules.run()
    if functions is not None:
        function_rules(model, functions, out)
    if model.steps_clean and model.start is not None and not rules.route_errors:
        facts = graph_rules(model, out)
        if facts is not None:
            open_mutation_rules(model, facts, out)
        return facts
    return None
