"""The document rules C1–C13 of `scenarios.yaml` (file 04 §3), checked before any case runs.

C13 holds every scripted `success` value to the output schema of its step's operation, and
every completed observation to the output schema of the awaited completion: the schemas the
adapters apply to live answers (`coordinator_core.outputs`), so a scripted reply can only be
one a product could give. With a runtime file, a scripted `external-http.get/v1` value must
also satisfy its connection's `responseSchema`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from coordinator_core import limits
from coordinator_core.authoring.decode import AuthoredFile
from coordinator_core.definition.ir import CallStep, Definition, WaitForStep
from coordinator_core.engine.codes import REPLY_CODES
from coordinator_core.engine.instants import parse_instant
from coordinator_core.errors import Diagnostic
from coordinator_core.jsonschema.dialect import SchemaValidator, compile_validator
from coordinator_core.jsonschema.violations import Violation
from coordinator_core.operations import OperationDescriptor
from coordinator_core.outputs import completion_output_failure, first_violation, output_failure
from coordinator_core.values import JsonBoundsError, check_json_value, pointer_token

__all__ = ["SCENARIOS_FILE", "DocumentFindings", "document_rules", "scenario_diagnostic"]

SCENARIOS_FILE: Final = "scenarios.yaml"

MAX_CASES: Final = 64
MAX_MAP_KEYS: Final = 64
MAX_REPLIES: Final = 8
MAX_OBSERVATIONS: Final = 64
MAX_PATH: Final = 64


def scenario_diagnostic(
    scenarios: AuthoredFile,
    code: str,
    pointer: str,
    *,
    key: bool = False,
    message: str | None = None,
    related: tuple[Any, ...] = (),
) -> Diagnostic:
    """A diagnostic of scenarios.yaml at `pointer`, positioned from the authored file."""
    line, column = scenarios.key_position(pointer) if key else scenarios.position(pointer)
    return Diagnostic(
        code,
        path=pointer,
        file=scenarios.file,
        line=line,
        column=column,
        message=message,
        artifact=limits.KIND_SCENARIOS,
        related=related,
    )


@dataclass
class DocumentFindings:
    """C1–C12 findings: `blocked` lists the cases that must not run; `whole_document` is set
    when a finding concerns the document itself (then no case runs)."""

    diagnostics: list[Diagnostic] = field(default_factory=list)
    blocked: set[int] = field(default_factory=set)
    whole_document: bool = False


class _CaseRules:
    """C1–C13 over one decoded case, against the checked definition."""

    def __init__(
        self,
        scenarios: AuthoredFile,
        definition: Definition,
        index: int,
        case: Mapping[str, Any],
        out: list[Diagnostic],
        response_schemas: Mapping[str, SchemaValidator],
    ) -> None:
        self.scenarios = scenarios
        self.definition = definition
        self.response_schemas = response_schemas
        self.steps = definition.steps
        self.base = f"/cases/{index}"
        self.case = case
        self.out = out

    def report(self, code: str, pointer: str, *, key: bool = False) -> None:
        self.out.append(scenario_diagnostic(self.scenarios, code, pointer, key=key))

    def operation_of(self, step: str) -> OperationDescriptor | None:
        spec = self.steps.get(step)
        return spec.alias.operation if isinstance(spec, CallStep) else None

    def value_bounds(self, value: Any, pointer: str) -> bool:
        """C12: a foreign value obeys the JSON value bounds (03 §4)."""
        try:
            check_json_value(value)
        except JsonBoundsError:
            self.report("coordinator.scenarios.value-limit", pointer)
            return False
        return True

    def shape(self, failure: Violation | None, what: str, pointer: str) -> bool:
        """C13: report `failure` (a value that is not `what`) at the value; True when none."""
        if failure is None:
            return True
        where = f"at {failure.path}" if failure.path else "at the top of the value"
        message = f"The value is not {what}: keyword `{failure.keyword}` fails {where}"
        members = failure.members
        if failure.keyword == "required" and members:
            noun = "member" if len(members) == 1 else "members"
            verb = "is" if len(members) == 1 else "are"
            message += f" ({noun} {', '.join(members)} {verb} missing)"
        self.out.append(
            scenario_diagnostic(
                self.scenarios, "coordinator.scenarios.reply-shape", pointer, message=message + "."
            )
        )
        return False

    def reply_shape(
        self, step: str, operation: OperationDescriptor, value: Any, pointer: str
    ) -> None:
        """C13 for a `success` value: an output of the step's operation (and, on an external
        connection with a known `responseSchema`, one it accepts)."""
        if not self.shape(
            output_failure(operation, value), f"an output of operation {operation.id}", pointer
        ):
            return
        spec = self.steps.get(step)
        if isinstance(spec, CallStep) and operation.product == "external-http":
            validator = self.response_schemas.get(spec.alias.connection)
            if validator is not None:
                self.shape(
                    first_violation(validator, value),
                    f"an answer the responseSchema of connection {spec.alias.connection} accepts",
                    pointer,
                )

    def observation_shape(self, step: str, value: Any, pointer: str) -> None:
        """C13 for a completed observation: an output of the awaited completion."""
        spec = self.steps.get(step)
        if not isinstance(spec, WaitForStep):
            return
        waited = self.steps.get(spec.call)
        operation = waited.alias.operation.id if isinstance(waited, CallStep) else "the call"
        self.shape(
            completion_output_failure(spec.completion, value),
            f"a completion output of operation {operation}",
            pointer,
        )

    def run(self) -> None:
        case, base = self.case, self.base
        if "admittedAt" in case and parse_instant(case["admittedAt"]) is None:  # C1
            self.report("coordinator.scenarios.invalid-timestamp", f"{base}/admittedAt")
        if ("input" in case) == ("event" in case):  # C2
            self.report("coordinator.scenarios.invalid-start", base)
        if "input" in case:
            self.value_bounds(case["input"], f"{base}/input")
        event = case.get("event")
        if isinstance(event, Mapping):
            if "time" in event and parse_instant(event["time"]) is None:  # C1
                self.report("coordinator.scenarios.invalid-timestamp", f"{base}/event/time")
            trigger = event.get("trigger")
            if isinstance(trigger, str) and trigger not in self.definition.triggers:  # C3
                self.report("coordinator.scenarios.unknown-reference", f"{base}/event/trigger")
            if "data" in event:
                self.value_bounds(event["data"], f"{base}/event/data")
        self.replies()
        self.observations()
        self.recovery()
        self.expectation()

    def map_keys(self, member: str) -> Mapping[str, Any]:
        """C4 and C6 for the keys of a map member; returns the map (empty when absent)."""
        value = self.case.get(member)
        if not isinstance(value, Mapping):
            return {}
        pointer = f"{self.base}/{member}"
        if len(value) > MAX_MAP_KEYS:
            self.report("coordinator.scenarios.invalid-length", pointer)
        for step in value:
            if step not in self.steps:
                self.report(
                    "coordinator.scenarios.unknown-reference",
                    f"{pointer}/{pointer_token(step)}",
                    key=True,
                )
        return value

    def step_type(self, step: str) -> str | None:
        spec = self.steps.get(step)
        return spec.type if spec is not None else None

    def replies(self) -> None:
        for step, replies in self.map_keys("replies").items():
            pointer = f"{self.base}/replies/{pointer_token(step)}"
            declared = step in self.steps
            if declared and self.step_type(step) != "call":  # C8
                self.report("coordinator.scenario.reply-step", pointer, key=True)
            if not isinstance(replies, list):
                continue
            if not 1 <= len(replies) <= MAX_REPLIES:  # C6
                self.report("coordinator.scenarios.invalid-length", pointer)
            operation = self.operation_of(step)
            for index, reply in enumerate(replies):
                reply_pointer = f"{pointer}/{index}"
                self.reply(step, reply, reply_pointer, operation)

    def reply(
        self,
        step: str,
        reply: Mapping[str, Any],
        pointer: str,
        operation: OperationDescriptor | None,
    ) -> None:
        kind = reply.get("type")
        if "code" in reply and reply["code"] not in REPLY_CODES:  # C7
            self.report("coordinator.scenarios.unknown-code", f"{pointer}/code")
        bounded = "value" in reply and self.value_bounds(reply["value"], f"{pointer}/value")
        if operation is None:
            return
        if kind == "success" and bounded:  # C13
            self.reply_shape(step, operation, reply["value"], f"{pointer}/value")
        inapplicable = (
            (kind == "declared-refusal" and not operation.declared_refusals)
            or (kind == "uncertain" and operation.effect == "read")
            or (kind == "receipt-expired" and not operation.key_required)
        )
        if inapplicable:  # C11
            self.report("coordinator.scenario.reply", pointer)

    def observations(self) -> None:
        for step, observations in self.map_keys("observations").items():
            pointer = f"{self.base}/observations/{pointer_token(step)}"
            if step in self.steps and self.step_type(step) != "wait-for":  # C9
                self.report("coordinator.scenario.observation-step", pointer, key=True)
            if not isinstance(observations, list):
                continue
            if len(observations) > MAX_OBSERVATIONS:  # C6
                self.report("coordinator.scenarios.invalid-length", pointer)
            for index, observation in enumerate(observations):
                item = f"{pointer}/{index}"
                if "code" in observation and observation["code"] not in REPLY_CODES:  # C7
                    self.report("coordinator.scenarios.unknown-code", f"{item}/code")
                if "value" in observation and (
                    self.value_bounds(observation["value"], f"{item}/value")
                    and observation.get("type") == "complete"
                ):  # C13
                    self.observation_shape(step, observation["value"], f"{item}/value")

    def recovery(self) -> None:
        for step, action in self.map_keys("recovery").items():
            if step not in self.steps:
                continue
            pointer = f"{self.base}/recovery/{pointer_token(step)}"
            operation = self.operation_of(step)
            if (
                self.step_type(step) != "call"
                or operation is None
                or (action == "reconcile" and not operation.read_receipt)
                or (action == "retry-same" and operation.recovery == "hold-after-dispatch")
            ):  # C10
                self.report("coordinator.scenario.recovery", pointer, key=True)

    def expectation(self) -> None:
        expect = self.case.get("expect")
        if not isinstance(expect, Mapping):
            return
        base = f"{self.base}/expect"
        path = expect.get("path")
        if isinstance(path, list):
            if len(path) > MAX_PATH:  # C6
                self.report("coordinator.scenarios.invalid-length", f"{base}/path")
            for index, step in enumerate(path):
                if step not in self.steps:  # C4
                    self.report("coordinator.scenarios.unknown-reference", f"{base}/path/{index}")
        effects = expect.get("effects")
        if isinstance(effects, list):
            for index, effect in enumerate(effects):
                if isinstance(effect, Mapping) and effect.get("step") not in self.steps:  # C4
                    self.report(
                        "coordinator.scenarios.unknown-reference",
                        f"{base}/effects/{index}/step",
                    )
        outcome = expect.get("outcome")
        if (
            isinstance(outcome, Mapping)
            and outcome.get("type") == "named"
            and outcome.get("value") not in self.definition.outcomes
        ):  # C5
            self.report("coordinator.scenarios.unknown-reference", f"{base}/outcome/value")
        if "output" in expect:  # C12
            self.value_bounds(expect["output"], f"{base}/output")


def document_rules(
    scenarios: AuthoredFile,
    definition: Definition,
    response_schemas: Mapping[str, Any] | None = None,
) -> DocumentFindings:
    """C1–C13 over a decoded scenarios document, against a checked definition.

    `response_schemas` maps an external connection name to its `responseSchema` (from the
    runtime file given with `--runtime-config`), which C13 applies to that connection's
    scripted replies too.

    A case with a reader finding inside it (a member that failed to decode) is blocked too,
    without a further diagnostic: running it without that member would test something else.
    """
    findings = DocumentFindings()
    validators = {
        name: compile_validator(schema) for name, schema in (response_schemas or {}).items()
    }
    decoded = scenarios.decoded
    cases = decoded.get("cases") if decoded is not None else None
    if not isinstance(cases, list):
        findings.whole_document = True
        return findings
    if not 1 <= len(cases) <= MAX_CASES:  # C6
        findings.diagnostics.append(
            scenario_diagnostic(scenarios, "coordinator.scenarios.invalid-length", "/cases")
        )
        findings.whole_document = True
    for index, case in enumerate(cases):
        before = len(findings.diagnostics)
        _CaseRules(scenarios, definition, index, case, findings.diagnostics, validators).run()
        if len(findings.diagnostics) > before or scenarios.has_findings_under(f"/cases/{index}"):
            findings.blocked.add(index)
    return findings
