"""Sandbox BReg (file 08 §3, §11.3): records with `revisionDigest`, immediate governed actions
with input schemas, target conditions and declared refusals, and signed event delivery.

An action's effect is deliberately simple: each configured target record gets the action's
input (minus the member naming the record) merged into its `domainData` and a new revision;
a `create` target makes a new record from the input. Conditions are the targets' revisions
as quoted ETags; a stale `ifMatch` is `412 precondition.failed`, nothing committed.
"""

from __future__ import annotations

import base64
import importlib
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from coordinator_sandbox.canonical import canonical_json, sha256_label
from coordinator_sandbox.delivery import Deliverer
from coordinator_sandbox.service import Call, Operation, Service
from coordinator_sandbox.tokens import Issuer, Principal
from coordinator_sandbox.web import ProblemError, json_response, problems, read_json_body

__all__ = ["BregService"]


def _jsonschema() -> Any:
    """jsonschema, imported dynamically: it ships no type information."""
    return importlib.import_module("jsonschema")


READ_RECORD = "breg.read-record/v1"
INVOKE_ACTION = "breg.invoke-action/v1"
READ_ACTION = "breg.read-action"
TARGET_CONDITIONS = "breg.target-conditions"
RECORD_SCOPES = ("breg:records:read",)
ACTION_SCOPES = ("breg:actions:invoke",)
DEFAULT_REGISTRY = "urn:registrystack:registry:example:instance:primary"
_PROFILE_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.-]{0,127}$"


@dataclass
class Record:
    collection: str
    record_id: str
    domain_data: dict[str, Any]
    revision: int = 1
    revision_identifier: str | None = None
    entity: str | None = None
    dataset: str | None = None

    @property
    def revision_id(self) -> str:
        return self.revision_identifier or str(self.revision)

    def etag(self) -> str:
        return f'"{self.revision_id}"'


@dataclass
class Target:
    name: str
    collection: str
    record_id_member: str | None
    entity: str
    set_members: dict[str, Any] = field(default_factory=dict)


@dataclass
class Action:
    name: str
    kind: str
    registry_revision: str
    input_schema: dict[str, Any]
    condition_inputs: list[str]
    maximum_body_bytes: int
    targets: list[Target]
    refusals: list[dict[str, Any]]
    fingerprint: str | None

    def descriptor(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "action": self.name,
            "kind": self.kind,
            "registryRevision": self.registry_revision,
            "inputSchema": self.input_schema,
            "conditionInputs": self.condition_inputs,
            "maximumBodyBytes": self.maximum_body_bytes,
        }
        body["contractFingerprint"] = self.fingerprint or sha256_label(canonical_json(body))
        return body


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def action_from_json(name: str, value: Any) -> Action:
    """An action from its sandbox configuration (see the package README for the format)."""
    _require(isinstance(value, dict), "an action is a JSON object")
    kind = value.get("kind", "immediate")
    _require(kind in {"immediate", "proposal"}, "`kind` is immediate or proposal")
    schema = value.get("inputSchema", {"type": "object"})
    _require(isinstance(schema, dict), "`inputSchema` is an object")
    jsonschema = _jsonschema()
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ValueError("`inputSchema` is not a JSON Schema (2020-12)") from exc
    conditions = value.get("conditionInputs", [])
    _require(
        isinstance(conditions, list) and all(isinstance(item, str) for item in conditions),
        "`conditionInputs` is a list of member names",
    )
    maximum = value.get("maximumBodyBytes", 65_536)
    _require(isinstance(maximum, int) and maximum > 0, "`maximumBodyBytes` is a positive integer")
    targets: list[Target] = []
    raw_targets = value.get("targets", {})
    _require(isinstance(raw_targets, dict), "`targets` maps names to targets")
    for target_name, target in raw_targets.items():
        _require(isinstance(target, dict), "a target is an object")
        collection = target.get("collection")
        _require(isinstance(collection, str), "a target names its `collection`")
        member = target.get("recordIdMember")
        _require(member is None or isinstance(member, str), "`recordIdMember` is a string")
        set_members = target.get("set", {})
        _require(isinstance(set_members, dict), "`set` is an object")
        targets.append(
            Target(target_name, collection, member, target.get("entity", collection), set_members)
        )
    refusals = value.get("refusals", [])
    _require(
        isinstance(refusals, list)
        and all(
            isinstance(rule, dict)
            and isinstance(rule.get("refusalCode"), str)
            and isinstance(rule.get("whenInput", {}), dict)
            for rule in refusals
        ),
        "`refusals` is a list of {refusalCode, whenInput}",
    )
    fingerprint = value.get("contractFingerprint")
    _require(fingerprint is None or isinstance(fingerprint, str), "`contractFingerprint` is text")
    return Action(
        name,
        kind,
        str(value.get("registryRevision", "1")),
        schema,
        conditions,
        maximum,
        targets,
        refusals,
        fingerprint,
    )


class BregService(Service):
    """BReg on its own port; product routes under `/v1`, control routes under `/sandbox`."""

    def __init__(
        self,
        issuer: Issuer,
        resource: str,
        deliverer: Deliverer,
        registry_identifier: str = DEFAULT_REGISTRY,
        profiles: list[str] | None = None,
    ) -> None:
        super().__init__(
            "breg", issuer, resource, [READ_RECORD, INVOKE_ACTION, READ_ACTION, TARGET_CONDITIONS]
        )
        self.registry_identifier = registry_identifier
        self.profiles = profiles
        self.records: dict[tuple[str, str], Record] = {}
        self.actions: dict[str, Action] = {}
        self.applications: list[dict[str, Any]] = []
        self.deliverer = deliverer
        self.event_url: str | None = None
        self.event_source = DEFAULT_REGISTRY
        self.event_key: bytes | None = None

    # -- configuration
    def load(self, config: dict[str, Any], base: Path | None) -> None:
        if "registryIdentifier" in config:
            self.registry_identifier = str(config["registryIdentifier"])
        if "profiles" in config:
            self.profiles = [str(item) for item in config["profiles"]]
        for record in config.get("records", []):
            self.put_record(record.get("collection"), record.get("recordId"), record)
        for name, action in config.get("actions", {}).items():
            self.actions[name] = action_from_json(name, action)
        if "eventDelivery" in config:
            self.configure_events(config["eventDelivery"], base)

    def configure_events(self, value: Any, base: Path | None) -> None:
        if not isinstance(value, dict):
            raise ValueError("`eventDelivery` is an object")
        url = value.get("url")
        if url is not None and not isinstance(url, str):
            raise ValueError("`url` is a string")
        self.event_url = url
        self.event_source = str(value.get("source", self.event_source))
        if "signingKeyFile" in value:
            path = Path(str(value["signingKeyFile"]))
            self.event_key = (
                path if path.is_absolute() or base is None else base / path
            ).read_bytes()
        elif "signingKeyBase64" in value:
            self.event_key = base64.b64decode(str(value["signingKeyBase64"]))
        elif "signingKey" in value:
            self.event_key = str(value["signingKey"]).encode("utf-8")

    def put_record(self, collection: Any, record_id: Any, value: Any) -> Record:
        if not isinstance(collection, str) or not isinstance(record_id, str) or not record_id:
            raise ValueError("a record needs a `collection` and a `recordId`")
        if not isinstance(value, dict) or not isinstance(value.get("domainData"), dict):
            raise ValueError("a record needs `domainData` (an object)")
        canonical_json(value["domainData"])  # refuse values without a canonical form now
        previous = self.records.get((collection, record_id))
        record = Record(
            collection,
            record_id,
            value["domainData"],
            previous.revision + 1 if previous else 1,
            value.get("revisionIdentifier"),
            value.get("entityTypeIdentifier", value.get("entity")),
            value.get("datasetIdentifier"),
        )
        self.records[(collection, record_id)] = record
        return record

    def wire_record(self, record: Record) -> dict[str, Any]:
        """The `breg.read-record/v1` answer of file 08 §3.1."""
        return {
            "data": {
                "recordIdentifier": record.record_id,
                "revisionIdentifier": record.revision_id,
                "revisionDigest": sha256_label(canonical_json(record.domain_data)),
                "domainData": record.domain_data,
            },
            "meta": {
                "registryIdentifier": self.registry_identifier,
                "datasetIdentifier": record.dataset or record.collection,
                "entityTypeIdentifier": record.entity or record.collection,
            },
        }

    # -- authentication: bearer token, then the access profile header (file 08 §3)
    def authenticate(self, request: Request, operation: Operation) -> Principal:
        principal = super().authenticate(request, operation)
        profile = request.headers.get("registry-access-profile")
        if profile is None or not re.match(_PROFILE_PATTERN, profile):
            raise ProblemError(400, "request.invalid", "Registry-Access-Profile is required.")
        if self.profiles is not None and profile not in self.profiles:
            raise ProblemError(403, "profile.not-authorized")
        return principal

    def product_routes(self) -> list[BaseRoute]:
        return [
            Route("/v1/records/{collection}/{record_id:path}", self._read_record, methods=["GET"]),
            Route("/v1/actions/{action}", self._read_action, methods=["GET"]),
            Route("/v1/actions/{action}", self._invoke_action, methods=["POST"]),
            Route(
                "/v1/actions/{action}/target-conditions", self._target_conditions, methods=["POST"]
            ),
        ]

    async def _read_record(self, request: Request) -> Response:
        async def effect(call: Call) -> Response:
            key = (request.path_params["collection"], request.path_params["record_id"])
            record = self.records.get(key)
            if record is None:
                raise ProblemError(404, "record.not-found")
            return json_response(self.wire_record(record))

        return await self.run(request, Operation(READ_RECORD, RECORD_SCOPES), effect)

    def _action(self, request: Request) -> Action:
        action = self.actions.get(request.path_params["action"])
        if action is None:
            raise ProblemError(404, "action.not-found")
        return action

    async def _read_action(self, request: Request) -> Response:
        async def effect(call: Call) -> Response:
            return json_response(self._action(request).descriptor())

        return await self.run(request, Operation(READ_ACTION, ACTION_SCOPES), effect)

    def _target(self, target: Target, source: dict[str, Any]) -> Record:
        record_id = source.get(target.record_id_member or "")
        if not isinstance(record_id, str):
            raise ProblemError(400, "request.invalid", f"`{target.record_id_member}` is required.")
        record = self.records.get((target.collection, record_id))
        if record is None:
            raise ProblemError(404, "record.not-found")
        return record

    async def _target_conditions(self, request: Request) -> Response:
        async def effect(call: Call) -> Response:
            action = self._action(request)
            body = call.body
            if (
                not isinstance(body, dict)
                or set(body) != {"input"}
                or not isinstance(body["input"], dict)
            ):
                raise ProblemError(400, "request.invalid", 'The body is {"input": {…}}.')
            preconditions = {
                target.name: {"ifMatch": self._target(target, body["input"]).etag()}
                for target in action.targets
                if target.record_id_member in action.condition_inputs
            }
            return json_response({"preconditions": preconditions})

        operation = Operation(TARGET_CONDITIONS, ACTION_SCOPES, reads_body=True)
        return await self.run(request, operation, effect)

    async def _invoke_action(self, request: Request) -> Response:
        action = self.actions.get(request.path_params["action"])
        limit = action.maximum_body_bytes if action else 65_536

        async def effect(call: Call) -> Response:
            current = self._action(request)
            if current.kind != "immediate":
                raise ProblemError(409, "action.not-immediate")
            principal = f"{call.principal.subject}|{request.headers['registry-access-profile']}"
            key = call.idempotency_key or ""
            stored = self.idempotency.find("actions", principal, key, request.url.path, call.body)
            if stored is not None:
                return json_response(stored.body, stored.status)
            body = call.body
            if not isinstance(body, dict) or not set(body) <= {"input", "preconditions"}:
                raise ProblemError(400, "request.invalid", "The body is {input, preconditions?}.")
            action_input = body.get("input")
            if not isinstance(action_input, dict):
                raise ProblemError(400, "request.invalid", "`input` is an object.")
            validator = _jsonschema().Draft202012Validator(current.input_schema)
            if next(iter(validator.iter_errors(action_input)), None) is not None:
                raise ProblemError(400, "request.invalid", "`input` does not match inputSchema.")
            for rule in current.refusals:
                when = rule.get("whenInput", {})
                if all(action_input.get(name) == value for name, value in when.items()):
                    raise ProblemError(
                        422,
                        "action.refused",
                        "The action was refused; nothing was committed.",
                        extra={"refusalCode": rule["refusalCode"]},
                    )
            preconditions = body.get("preconditions", {})
            if not isinstance(preconditions, dict):
                raise ProblemError(400, "request.invalid", "`preconditions` is an object.")
            results = self._apply(current, action_input, preconditions)
            answer = {
                "action": current.name,
                "applicationId": str(uuid.uuid4()),
                "results": results,
            }
            self.idempotency.store(
                "actions", principal, key, request.url.path, call.body, 201, answer
            )
            self.applications.append({"idempotencyKey": key, "input": action_input, **answer})
            call.committed = True
            return json_response(answer, 201)

        operation = Operation(
            INVOKE_ACTION, ACTION_SCOPES, key_required=True, reads_body=True,
            maximum_body_bytes=limit,
        )  # fmt: skip
        return await self.run(request, operation, effect)

    def _apply(
        self, action: Action, action_input: dict[str, Any], preconditions: dict[str, Any]
    ) -> dict[str, Any]:
        """Check every condition first, then change every target: all or nothing."""
        planned: list[tuple[Target, Record | None]] = []
        for target in action.targets:
            if target.record_id_member is None:
                planned.append((target, None))
                continue
            record = self._target(target, action_input)
            if target.record_id_member in action.condition_inputs:
                condition = preconditions.get(target.name)
                if not isinstance(condition, dict) or "ifMatch" not in condition:
                    raise ProblemError(428, "precondition.required")
                if condition["ifMatch"] != record.etag():
                    raise ProblemError(412, "precondition.failed")
            planned.append((target, record))
        results: dict[str, Any] = {}
        for target, existing in planned:
            data = {
                name: value
                for name, value in action_input.items()
                if name != target.record_id_member
            }
            data.update(target.set_members)
            if existing is None:
                record = self.put_record(target.collection, str(uuid.uuid4()), {"domainData": data})
            else:
                record = self.put_record(
                    target.collection,
                    existing.record_id,
                    {
                        "domainData": {**existing.domain_data, **data},
                        "entityTypeIdentifier": existing.entity,
                        "datasetIdentifier": existing.dataset,
                    },
                )
            results[target.name] = {
                "entity": target.entity,
                "recordId": record.record_id,
                "revision": record.revision_id,
            }
        return results

    # -- control
    def control_routes(self) -> list[BaseRoute]:
        return [
            Route("/sandbox/records", problems(self._list_records), methods=["GET"]),
            Route(
                "/sandbox/records/{collection}/{record_id:path}",
                problems(self._put_record),
                methods=["PUT"],
            ),
            Route("/sandbox/actions", problems(self._list_actions), methods=["GET"]),
            Route("/sandbox/actions/{action}", problems(self._put_action), methods=["PUT"]),
            Route("/sandbox/applications", problems(self._list_applications), methods=["GET"]),
            Route("/sandbox/event-delivery", problems(self._put_event_delivery), methods=["PUT"]),
            Route("/sandbox/events", problems(self._send_event), methods=["POST"]),
            Route("/sandbox/deliveries", problems(self._list_deliveries), methods=["GET"]),
            *super().control_routes(),
        ]

    async def _list_records(self, request: Request) -> Response:
        return json_response(
            {
                "records": [
                    {"collection": record.collection, **self.wire_record(record)}
                    for record in self.records.values()
                ]
            }
        )

    async def _put_record(self, request: Request) -> Response:
        body = await read_json_body(request)
        collection = request.path_params["collection"]
        record_id = request.path_params["record_id"]
        existed = (collection, record_id) in self.records
        try:
            record = self.put_record(collection, record_id, body)
        except ValueError as exc:
            raise ProblemError(400, "request.invalid", str(exc)) from exc
        return json_response(self.wire_record(record), 200 if existed else 201)

    async def _list_actions(self, request: Request) -> Response:
        return json_response({"actions": [a.descriptor() for a in self.actions.values()]})

    async def _put_action(self, request: Request) -> Response:
        body = await read_json_body(request)
        name = request.path_params["action"]
        try:
            action = action_from_json(name, body)
        except ValueError as exc:
            raise ProblemError(400, "request.invalid", str(exc)) from exc
        self.actions[name] = action
        return json_response(action.descriptor())

    async def _list_applications(self, request: Request) -> Response:
        return json_response({"applications": self.applications})

    async def _put_event_delivery(self, request: Request) -> Response:
        body = await read_json_body(request)
        try:
            self.configure_events(body, None)
        except (ValueError, OSError) as exc:
            raise ProblemError(400, "request.invalid", str(exc)) from exc
        return json_response({"url": self.event_url, "source": self.event_source})

    async def _send_event(self, request: Request) -> Response:
        """Deliver one signed event: `{type, data, workflow + trigger | path, id?, time?,
        dataschema?, generation?, idempotencyKey?, url?}`."""
        body = await read_json_body(request)
        if not isinstance(body, dict) or not isinstance(body.get("type"), str):
            raise ProblemError(400, "request.invalid", "An event needs a `type`.")
        if self.event_key is None:
            raise ProblemError(409, "events.not-configured", "No event signing key is set.")
        url = body.get("url")
        if url is None:
            if self.event_url is None:
                raise ProblemError(409, "events.not-configured", "No destination is set.")
            path = body.get("path")
            if path is None:
                workflow, trigger = body.get("workflow"), body.get("trigger")
                if not isinstance(workflow, str) or not isinstance(trigger, str):
                    raise ProblemError(400, "request.invalid", "Name `workflow` and `trigger`.")
                path = f"/v1/events/{workflow}/{trigger}"
            url = self.event_url.rstrip("/") + str(path)
        generation = body.get("generation", 1)
        if isinstance(generation, bool) or not isinstance(generation, int) or generation < 1:
            raise ProblemError(400, "request.invalid", "`generation` is an integer ≥ 1.")
        delivery = self.deliverer.signed_event(
            url=str(url),
            key=self.event_key,
            source=str(body.get("source", self.event_source)),
            event_type=body["type"],
            body=canonical_json(body.get("data", {})),
            ce_id=body.get("id"),
            ce_time=body.get("time"),
            dataschema=body.get("dataschema"),
            generation=generation,
            idempotency_key=body.get("idempotencyKey"),
        )
        return json_response(delivery.describe(), 202)

    async def _list_deliveries(self, request: Request) -> Response:
        return json_response(
            {
                "deliveries": [
                    delivery.describe()
                    for delivery in self.deliverer.deliveries
                    if delivery.kind == "event"
                ]
            }
        )
