"""BReg: `breg.read-record/v1` and the prepared, immediate `breg.invoke-action/v1` (08 §3).

Every request carries `Registry-Access-Profile`. An action is prepared once (describe the
action, validate the input against its schema, fetch target conditions, freeze the body
bytes and the binding they were made under) and sent on every attempt with exactly those
bytes, after checking that the action still has the frozen binding.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from coordinator_core.engine.inputs import CallOutcome
from coordinator_core.jsonschema.dialect import check_schema, compile_validator
from coordinator_core.shell.adapters.base import Connection, PreparedCommand, ProductConnection
from coordinator_core.shell.adapters.http import ProductAnswer, path_segment, problem_of
from coordinator_core.shell.adapters.product import Attempt, ProductAdapter, Stop
from coordinator_core.shell.adapters.validation import (
    REFUSAL_CODE,
    ShapeError,
    closed_object,
    integer,
    json_object,
    output_shape,
    sha256_digest,
    text,
)
from coordinator_core.values import (
    JsonBoundsError,
    StrictJsonError,
    canonical_json,
    check_json_value,
    parse_strict_json,
)

__all__ = ["INVOKE_ACTION", "READ_RECORD", "BregAdapter"]

READ_RECORD: Final = "breg.read-record/v1"
INVOKE_ACTION: Final = "breg.invoke-action/v1"
PREPARATION_VERSION: Final = 1

_LOCAL_ID: Final = re.compile(r"[a-z][a-z0-9_-]{0,63}")
_ACTION_ID: Final = re.compile(r"[a-z][a-z0-9_.-]{0,127}")
_PROFILE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,127}")
_ENTITY_TAG: Final = re.compile(r'(?:W/)?"[\x21\x23-\x7e\x80-\uffff]*"')


@dataclass(frozen=True, slots=True)
class _ActionContract:
    """The answer of `GET /v1/actions/{action}` for an immediate action."""

    registry_revision: str
    contract_fingerprint: str
    input_schema: Any
    condition_inputs: tuple[str, ...]
    maximum_body_bytes: int


class BregAdapter(ProductAdapter):
    """The BReg adapter (08 §3)."""

    product = "breg"
    call_operations = frozenset({READ_RECORD, INVOKE_ACTION})

    def product_headers(self, attempt: Attempt) -> dict[str, str]:
        profile = _profile(attempt.connection)
        if profile is None or _PROFILE.fullmatch(profile) is None:
            raise Stop(attempt.refused("operation-unbound"))  # 05 §5.1: a BReg connection has one
        return {"Registry-Access-Profile": profile}

    def handle_call(self, attempt: Attempt, command: PreparedCommand) -> CallOutcome:
        if command.operation == READ_RECORD:
            return _read_record(attempt, command)
        return _invoke_action(attempt, command)

    def handle_prepare(self, attempt: Attempt, command: PreparedCommand) -> bytes:
        if command.operation != INVOKE_ACTION:
            raise Stop(attempt.refused("remote-refused"))
        return _prepare_action(attempt, command)


# -- 08 §3.1 ------------------------------------------------------------------------------------


def _read_record(attempt: Attempt, command: PreparedCommand) -> CallOutcome:
    request = closed_object(command.input, {"collection", "recordId"})
    collection = text(request["collection"], 1, 64)
    if _LOCAL_ID.fullmatch(collection) is None:
        raise ShapeError()
    record_id = text(request["recordId"], 1, 256)
    path = f"/v1/records/{path_segment(collection)}/{path_segment(record_id)}"
    answer = attempt.send("GET", path, effect="read")
    attempt.stop_unless(answer, 200, "read")
    body = attempt.body(answer, "read")
    try:
        output_shape(READ_RECORD, body)
    except ShapeError:
        return attempt.refused("invalid-response")
    return attempt.success(body)  # the step output, unchanged


# -- 08 §3.2 preparation ---------------------------------------------------------------------------


def _action_of(command: PreparedCommand) -> str:
    if command.action is None or _ACTION_ID.fullmatch(command.action) is None:
        raise ShapeError()
    return command.action


def _describe(attempt: Attempt, action: str) -> _ActionContract:
    """Step 1: the action's contract; 404 or a proposal → refused `action-unavailable`."""
    answer = attempt.send("GET", f"/v1/actions/{path_segment(action)}", effect="read")
    if answer.status == 404:
        raise Stop(attempt.refused("action-unavailable"))
    attempt.stop_unless(answer, 200, "read")
    body = attempt.body(answer, "read")
    try:
        found = json_object(body)
        kind = found.get("kind")
        if found.get("action") != action or kind not in ("immediate", "proposal"):
            raise ShapeError()
        names = found.get("conditionInputs")
        if not isinstance(names, list) or len(set(map(str, names))) != len(names):
            raise ShapeError()
        contract = _ActionContract(
            registry_revision=text(found.get("registryRevision")),
            contract_fingerprint=sha256_digest(found.get("contractFingerprint")),
            input_schema=found.get("inputSchema"),
            condition_inputs=tuple(text(name) for name in names),
            maximum_body_bytes=integer(found.get("maximumBodyBytes"), minimum=1),
        )
        if not isinstance(contract.input_schema, dict | bool):
            raise ShapeError()
    except ShapeError:
        raise Stop(attempt.refused("invalid-response")) from None
    if kind == "proposal":
        raise Stop(attempt.refused("action-unavailable"))
    return contract


def _profile(connection: Connection) -> str | None:
    """The BReg access profile of the connection (05 §5.1)."""
    return connection.profile if isinstance(connection, ProductConnection) else None


def _check_input(attempt: Attempt, schema: Any, value: Any) -> None:
    """Step 2: the input must validate against the action's schema (dialect of 01 §12)."""
    if check_schema(schema, ""):
        raise Stop(attempt.refused("invalid-response"))  # the product's schema: not the dialect
    if not compile_validator(schema).is_valid(value):
        raise Stop(attempt.refused("invalid-command"))


def _preconditions(attempt: Attempt, action: str, condition: dict[str, Any]) -> dict[str, Any]:
    """Step 3: the target conditions of the condition members, as the product answers them."""
    answer = attempt.send(
        "POST",
        f"/v1/actions/{path_segment(action)}/target-conditions",
        effect="read",
        body=canonical_json({"input": condition}),
    )
    attempt.stop_unless(answer, 200, "read")
    body = attempt.body(answer, "read")
    try:
        found = closed_object(body, {"preconditions"})
        preconditions = json_object(found["preconditions"])
        for entry in preconditions.values():
            tag = closed_object(entry, {"ifMatch"})["ifMatch"]
            if not isinstance(tag, str) or _ENTITY_TAG.fullmatch(tag) is None:
                raise ShapeError()
    except ShapeError:
        raise Stop(attempt.refused("invalid-response")) from None
    return preconditions


def _prepare_action(attempt: Attempt, command: PreparedCommand) -> bytes:
    action = _action_of(command)
    request = closed_object(command.input, {"input"})
    action_input = json_object(request["input"])
    key = command.idempotency_key
    if key is None:
        raise ShapeError()
    contract = _describe(attempt, action)
    _check_input(attempt, contract.input_schema, action_input)
    body: dict[str, Any] = {"input": action_input}
    if contract.condition_inputs:
        condition = {
            name: action_input[name] for name in contract.condition_inputs if name in action_input
        }
        preconditions = _preconditions(attempt, action, condition)
        if preconditions:
            body["preconditions"] = preconditions
    body_bytes = canonical_json(body)
    if len(body_bytes) > contract.maximum_body_bytes:
        raise Stop(attempt.refused("invalid-command"))
    return canonical_json(
        {
            "version": PREPARATION_VERSION,
            "binding": {
                "registryRevision": contract.registry_revision,
                "action": action,
                "accessProfile": _profile(attempt.connection),
                "contractFingerprint": contract.contract_fingerprint,
            },
            "body": body_bytes.decode("utf-8"),
            "idempotencyKey": key,
        }
    )


# -- 08 §3.2 send -------------------------------------------------------------------------------------


def _frozen_preparation(
    attempt: Attempt, command: PreparedCommand
) -> tuple[dict[str, Any], str, str]:
    """The binding, body text and key of the frozen preparation, or refused
    `prepared-command-mismatch` when it is missing or not in the form preparation writes."""
    try:
        if command.preparation is None:
            raise ShapeError()
        value = parse_strict_json(command.preparation)
        check_json_value(value)
        found = closed_object(value, {"version", "binding", "body", "idempotencyKey"})
        binding = closed_object(
            found["binding"],
            {"registryRevision", "action", "accessProfile", "contractFingerprint"},
        )
        if found["version"] != PREPARATION_VERSION:
            raise ShapeError()
        return binding, text(found["body"]), text(found["idempotencyKey"])
    except (ShapeError, StrictJsonError, JsonBoundsError):
        raise Stop(attempt.refused("prepared-command-mismatch")) from None


def _invoke_action(attempt: Attempt, command: PreparedCommand) -> CallOutcome:
    action = _action_of(command)
    request = closed_object(command.input, {"input"})
    binding, body_text, key = _frozen_preparation(attempt, command)
    try:
        prepared_input = json_object(parse_strict_json(body_text)).get("input")
    except (ShapeError, StrictJsonError):
        return attempt.refused("prepared-command-mismatch")
    if (
        binding["action"] != action
        or binding["accessProfile"] != _profile(attempt.connection)
        or key != command.idempotency_key
        or canonical_json(prepared_input) != canonical_json(request["input"])
    ):
        return attempt.refused("prepared-command-mismatch")
    # The action is described again with this attempt's credential; conditions are not
    # refreshed: the frozen body is sent or nothing is.
    contract = _describe(attempt, action)
    if (
        contract.registry_revision != binding["registryRevision"]
        or contract.contract_fingerprint != binding["contractFingerprint"]
    ):
        return attempt.refused("prepared-command-mismatch")
    answer = attempt.send(
        "POST",
        f"/v1/actions/{path_segment(action)}",
        effect="mutation",
        body=body_text.encode("utf-8"),
        key=key,
    )
    if answer.status in (200, 201):
        return _action_result(attempt, answer)
    if answer.status == 422:
        problem = problem_of(answer)
        if (
            problem is not None
            and problem.code == "action.refused"
            and problem.refusal_code is not None
            and REFUSAL_CODE.fullmatch(problem.refusal_code) is not None
        ):
            return attempt.declared_refusal(problem.refusal_code)
    return attempt.classify(answer, "mutation")


def _action_result(attempt: Attempt, answer: ProductAnswer) -> CallOutcome:
    body = attempt.body(answer, "mutation")
    try:
        output_shape(INVOKE_ACTION, body)
    except ShapeError:
        return attempt.invalid_response("mutation")
    return attempt.success(body)
