"""What every sandbox product shares: fault injection, the received-request log, the idempotency
store, bearer checks, and the `/sandbox/…` control routes of file 08 §11.

A product operation runs in this order: record the request → authenticate (401/403) → read the
body (415/413/400) → take the next injected fault of the operation, if any → carry out the
operation → apply an after-commit fault. Refused requests do not consume faults.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

from coordinator_sandbox.canonical import canonical_json
from coordinator_sandbox.tokens import Issuer, Principal
from coordinator_sandbox.web import (
    ConnectionControl,
    DroppedResponse,
    ProblemError,
    http_exception_handler,
    json_response,
    problem_response,
    problems,
    read_json_body,
)

__all__ = [
    "FAULT_KINDS",
    "Call",
    "Fault",
    "FaultBoard",
    "IdempotencyStore",
    "Operation",
    "RequestLog",
    "Service",
    "StoredAnswer",
]

FAULT_KINDS = (
    "fail",  # answer `status` (429, 500, 503, …) before committing anything
    "drop",  # close the connection before committing anything
    "commit-then-drop",  # commit the effect, then close the connection without answering
    "delay",  # wait `delaySeconds` (longer than the client's timeout), then go on (or not)
    "expired",  # answer 410 idempotency.expired before committing anything
    "declared-refusal",  # answer 422 action.refused with `refusalCode`, nothing committed
    "respond",  # answer `status` with the given `body` verbatim, nothing committed
)
_KEY_PATTERN = re.compile(r"^[\x21-\x7e]+$")
_FAULT_CODES = {
    429: "rate-limit.exceeded",
    500: "service.internal-error",
    503: "service.unavailable",
}


@dataclass
class Fault:
    """One injected fault: applies to the next `remaining` requests of `operation`."""

    fault_id: str
    operation: str
    kind: str
    remaining: int
    status: int = 503
    code: str | None = None
    delay_seconds: float = 5.0
    commit_after_delay: bool = True
    refusal_code: str = "sandbox.refused"
    body: Any = None
    applied: int = 0

    def describe(self) -> dict[str, Any]:
        return {
            "faultId": self.fault_id,
            "operation": self.operation,
            "kind": self.kind,
            "remaining": self.remaining,
            "applied": self.applied,
            "status": self.status,
            "code": self.code,
            "delaySeconds": self.delay_seconds,
            "commitAfterDelay": self.commit_after_delay,
            "refusalCode": self.refusal_code,
            "body": self.body,
        }


def _member(spec: dict[str, Any], name: str, kind: type | tuple[type, ...], default: Any) -> Any:
    value = spec.get(name, default)
    if value is default:
        return value
    if isinstance(value, bool) and kind is not bool:
        raise ProblemError(400, "request.invalid", f"`{name}` has the wrong type.")
    if not isinstance(value, kind):
        raise ProblemError(400, "request.invalid", f"`{name}` has the wrong type.")
    return value


class FaultBoard:
    """Pending faults per operation, applied first-in first-out."""

    def __init__(self, operations: Iterable[str]) -> None:
        self.operations = tuple(operations)
        self.faults: list[Fault] = []

    def add(self, spec: Any) -> Fault:
        if not isinstance(spec, dict):
            raise ProblemError(400, "request.invalid", "A fault is a JSON object.")
        known = {
            "operation",
            "kind",
            "count",
            "status",
            "code",
            "delaySeconds",
            "commitAfterDelay",
            "refusalCode",
            "body",
        }
        if unknown := set(spec) - known:
            raise ProblemError(400, "request.invalid", f"Unknown members: {sorted(unknown)}.")
        operation = spec.get("operation")
        if operation not in self.operations:
            raise ProblemError(
                400, "request.invalid", f"`operation` must be one of {list(self.operations)}."
            )
        kind = spec.get("kind")
        if kind not in FAULT_KINDS:
            raise ProblemError(400, "request.invalid", f"`kind` must be one of {FAULT_KINDS}.")
        count = _member(spec, "count", int, 1)
        status = _member(spec, "status", int, 410 if kind == "expired" else 503)
        if not 100 <= status <= 599 or count < 1:
            raise ProblemError(400, "request.invalid", "`status` or `count` is out of range.")
        delay = _member(spec, "delaySeconds", (int, float), 5.0)
        if not 0 <= delay <= 600:
            raise ProblemError(400, "request.invalid", "`delaySeconds` must be 0–600.")
        fault = Fault(
            fault_id=str(uuid.uuid4()),
            operation=operation,
            kind=kind,
            remaining=count,
            status=status,
            code=_member(spec, "code", str, None),
            delay_seconds=float(delay),
            commit_after_delay=_member(spec, "commitAfterDelay", bool, True),
            refusal_code=_member(spec, "refusalCode", str, "sandbox.refused"),
            body=spec.get("body"),
        )
        self.faults.append(fault)
        return fault

    def take(self, operation: str) -> Fault | None:
        for fault in self.faults:
            if fault.operation == operation and fault.remaining > 0:
                fault.remaining -= 1
                fault.applied += 1
                if fault.remaining == 0:
                    self.faults.remove(fault)
                return fault
        return None


class RequestLog:
    """Every product request the service received, in order, for tests to assert on."""

    MAXIMUM_ENTRIES = 10_000

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self._sequence = 0

    def begin(self, operation: str, request: Request) -> dict[str, Any]:
        if len(self.entries) >= self.MAXIMUM_ENTRIES:
            del self.entries[: len(self.entries) // 10]
        self._sequence += 1
        entry: dict[str, Any] = {
            "sequence": self._sequence,
            "operation": operation,
            "method": request.method,
            "path": request.url.path,
            "query": request.url.query,
            "idempotencyKey": request.headers.get("idempotency-key"),
            "accessProfile": request.headers.get("registry-access-profile"),
            "traceparent": request.headers.get("traceparent"),
            "principal": None,
            "body": None,
            "receivedAt": time.time(),
            "fault": None,
            "status": None,
            "outcome": "pending",
            "committed": False,
        }
        self.entries.append(entry)
        return entry

    def select(self, operation: str | None, key: str | None, since: int) -> list[dict[str, Any]]:
        return [
            entry
            for entry in self.entries
            if (operation is None or entry["operation"] == operation)
            and (key is None or entry["idempotencyKey"] == key)
            and entry["sequence"] > since
        ]


@dataclass
class StoredAnswer:
    """What a product stored under an idempotency key: the request and its original answer."""

    target: str
    request: bytes
    status: int
    body: Any
    stored_at: float
    expired: bool = False


class IdempotencyStore:
    """(namespace, principal, key) → canonical request and stored answer, with retention.

    Entries past retention stay as tombstones, so a late retry answers `410 idempotency.expired`
    instead of being taken for a new command.
    """

    def __init__(self, retention_seconds: float) -> None:
        self.retention_seconds = retention_seconds
        self.entries: dict[tuple[str, str, str], StoredAnswer] = {}

    def _live(self, entry: StoredAnswer) -> bool:
        return not entry.expired and time.time() - entry.stored_at <= self.retention_seconds

    def find(
        self, namespace: str, principal: str, key: str, target: str, body: Any
    ) -> StoredAnswer | None:
        """The stored answer for the same request; 410 past retention; 409 for another request."""
        entry = self.entries.get((namespace, principal, key))
        if entry is None:
            return None
        if not self._live(entry):
            raise ProblemError(410, "idempotency.expired")
        if entry.target != target or entry.request != canonical_json(body):
            raise ProblemError(409, "idempotency.key-reused")
        return entry

    def store(
        self, namespace: str, principal: str, key: str, target: str, body: Any, status: int,
        answer: Any,
    ) -> StoredAnswer:  # fmt: skip
        entry = StoredAnswer(target, canonical_json(body), status, answer, time.time())
        self.entries[(namespace, principal, key)] = entry
        return entry

    def lookup_receipt(
        self, namespace: str, principal: str, key: str, target: str, body: Any
    ) -> StoredAnswer:
        """Receipt lookup of file 08 §5.2: 404 `receipt.unresolved`, 409, 410, or the answer."""
        found = self.find(namespace, principal, key, target, body)
        if found is None:
            raise ProblemError(404, "receipt.unresolved")
        return found

    def expire(self, key: str | None) -> int:
        count = 0
        for (_, _, entry_key), entry in self.entries.items():
            if key is None or entry_key == key:
                entry.expired = True
                count += 1
        return count


@dataclass
class Call:
    """One authenticated product request handed to an operation's effect."""

    request: Request
    principal: Principal
    body: Any
    idempotency_key: str | None
    record: dict[str, Any]
    committed: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


Effect = Callable[[Call], Awaitable[Response]]


@dataclass(frozen=True)
class Operation:
    """A product operation: its id, the scopes that may call it and its key rule."""

    operation_id: str
    scopes: tuple[str, ...]
    key_required: bool = False
    key_maximum: int = 256
    reads_body: bool = False
    maximum_body_bytes: int = 262_144


class Service:
    """One sandbox product on its own port."""

    def __init__(
        self,
        name: str,
        issuer: Issuer | None,
        resource: str | None,
        operations: Sequence[str],
        retention_seconds: float = 86_400,
    ) -> None:
        self.name = name
        self.issuer = issuer
        self.resource = resource
        self.faults = FaultBoard(operations)
        self.log = RequestLog()
        self.idempotency = IdempotencyStore(retention_seconds)
        self.base_url = ""

    # -- failures answered by faults; the identity provider overrides these with OAuth errors
    def fault_response(self, status: int, code: str | None, request: Request) -> Response:
        return problem_response(ProblemError(status, code or _FAULT_CODES.get(status)), request)

    def authenticate(self, request: Request, operation: Operation) -> Principal:
        if self.issuer is None or self.resource is None:
            return Principal("anonymous", "anonymous", frozenset())
        return self.issuer.authenticate(
            request.headers.get("authorization"), self.resource, operation.scopes
        )

    async def _pre_commit_fault(self, fault: Fault, request: Request) -> Response | None:
        if fault.kind == "fail":
            return self.fault_response(fault.status, fault.code, request)
        if fault.kind == "drop":
            return DroppedResponse()
        if fault.kind == "expired":
            return problem_response(ProblemError(410, "idempotency.expired"), request)
        if fault.kind == "declared-refusal":
            error = ProblemError(
                422,
                "action.refused",
                "The action was refused; nothing was committed.",
                extra={"refusalCode": fault.refusal_code},
            )
            return problem_response(error, request)
        if fault.kind == "respond":
            return json_response(fault.body, fault.status)
        if fault.kind == "delay":
            await asyncio.sleep(fault.delay_seconds)
            if not fault.commit_after_delay:
                return self.fault_response(503, "service.unavailable", request)
        return None

    async def run(self, request: Request, operation: Operation, effect: Effect) -> Response:
        """Run one product operation under the shared order of checks and faults."""
        record = self.log.begin(operation.operation_id, request)
        response: Response
        try:
            principal = self.authenticate(request, operation)
            record["principal"] = principal.subject
            key = request.headers.get("idempotency-key")
            if operation.key_required and (
                key is None
                or not 1 <= len(key) <= operation.key_maximum
                or not _KEY_PATTERN.match(key)
            ):
                raise ProblemError(400, "request.invalid", "A valid Idempotency-Key is required.")
            body = None
            if operation.reads_body:
                body = await read_json_body(request, operation.maximum_body_bytes)
                record["body"] = body
            fault = self.faults.take(operation.operation_id)
            record["fault"] = fault.kind if fault else None
            early = await self._pre_commit_fault(fault, request) if fault else None
            if early is not None:
                response = early
            else:
                call = Call(request, principal, body, key, record)
                try:
                    response = await effect(call)
                except ProblemError as error:
                    response = problem_response(error, request)
                record["committed"] = call.committed
                if fault is not None and fault.kind == "commit-then-drop":
                    response = DroppedResponse()
        except ProblemError as error:
            response = problem_response(error, request)
        if isinstance(response, DroppedResponse):
            record["outcome"] = "dropped"
        else:
            record["outcome"] = "answered"
            record["status"] = response.status_code
        return response

    # -- control routes (file 08 §11: not part of any product contract)
    def control_routes(self) -> list[BaseRoute]:
        return [
            Route("/sandbox/health", problems(self._health), methods=["GET"]),
            Route("/sandbox/faults", problems(self._list_faults), methods=["GET"]),
            Route("/sandbox/faults", problems(self._add_faults), methods=["POST"]),
            Route("/sandbox/faults", problems(self._clear_faults), methods=["DELETE"]),
            Route("/sandbox/requests", problems(self._list_requests), methods=["GET"]),
            Route("/sandbox/requests", problems(self._clear_requests), methods=["DELETE"]),
            Route("/sandbox/settings", problems(self._get_settings), methods=["GET"]),
            Route("/sandbox/settings", problems(self._put_settings), methods=["PUT"]),
            Route("/sandbox/idempotency/expire", problems(self._expire), methods=["POST"]),
        ]

    async def _health(self, request: Request) -> Response:
        return json_response({"service": self.name, "live": True, "baseUrl": self.base_url})

    async def _list_faults(self, request: Request) -> Response:
        return json_response(
            {
                "operations": list(self.faults.operations),
                "faults": [fault.describe() for fault in self.faults.faults],
            }
        )

    async def _add_faults(self, request: Request) -> Response:
        body = await read_json_body(request)
        specs = body if isinstance(body, list) else [body]
        added = [self.faults.add(spec).describe() for spec in specs]
        return json_response({"faults": added}, 201)

    async def _clear_faults(self, request: Request) -> Response:
        self.faults.faults.clear()
        return Response(status_code=204)

    async def _list_requests(self, request: Request) -> Response:
        since_text = request.query_params.get("since", "0")
        since = int(since_text) if since_text.isdigit() else 0
        entries = self.log.select(
            request.query_params.get("operation"),
            request.query_params.get("idempotencyKey"),
            since,
        )
        return json_response({"requests": entries})

    async def _clear_requests(self, request: Request) -> Response:
        self.log.entries.clear()
        return Response(status_code=204)

    def settings(self) -> dict[str, Any]:
        return {"idempotencyRetentionSeconds": self.idempotency.retention_seconds}

    async def _get_settings(self, request: Request) -> Response:
        return json_response(self.settings())

    async def _put_settings(self, request: Request) -> Response:
        body = await read_json_body(request)
        if not isinstance(body, dict):
            raise ProblemError(400, "request.invalid", "Settings are a JSON object.")
        self.apply_settings(body)
        return json_response(self.settings())

    def apply_settings(self, body: dict[str, Any]) -> None:
        retention = body.get("idempotencyRetentionSeconds")
        if retention is not None:
            if isinstance(retention, bool) or not isinstance(retention, int | float):
                raise ProblemError(400, "request.invalid", "Retention is a number of seconds.")
            self.idempotency.retention_seconds = float(retention)

    async def _expire(self, request: Request) -> Response:
        body = await read_json_body(request)
        key = body.get("idempotencyKey") if isinstance(body, dict) else None
        if key is not None and not isinstance(key, str):
            raise ProblemError(400, "request.invalid", "`idempotencyKey` is a string.")
        return json_response({"expired": self.idempotency.expire(key)})

    # -- the ASGI application
    def product_routes(self) -> list[BaseRoute]:
        return []

    def app(self) -> ASGIApp:
        routes = [*self.control_routes(), *self.product_routes()]
        application = Starlette(
            routes=routes, exception_handlers={HTTPException: http_exception_handler}
        )
        return ConnectionControl(application)

    async def close(self) -> None:
        """Stop background work (deliveries); called at shutdown."""
