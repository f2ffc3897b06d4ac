"""Sandbox Casework (file 08 §4, §11.4): review requests stay pending (`202`) until decided
through a control endpoint (or by a configured automatic decision); withdrawal as in §4.3;
completion events posted to each configured destination with redelivery (§4.4).
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from coordinator_sandbox.canonical import canonical_json, sha256_label
from coordinator_sandbox.delivery import Deliverer
from coordinator_sandbox.service import Call, Operation, Service
from coordinator_sandbox.tokens import Issuer
from coordinator_sandbox.web import ProblemError, json_response, problems, read_json_body

__all__ = ["CaseworkService", "validate_review_request"]

SUBMIT = "casework.submit-review-request/v1"
READ_RESULT = "casework.read-review-result/v1"
WITHDRAW = "casework.withdraw-review-request/v1"
REQUEST_SCOPES = ("casework:reviews:request",)
READ_SCOPES = ("casework:reviews:request", "casework:reviews:read")
STATUSES = ("approved", "rejected", "changes_requested", "answered", "cancelled", "superseded")
DEFAULT_AVAILABILITY_SECONDS = 30 * 86_400
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def _timestamp(seconds: float) -> str:
    moment = datetime.fromtimestamp(seconds, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _text(value: Any, low: int, high: int) -> bool:
    return isinstance(value, str) and low <= len(value) <= high


def _valid_subject(subject: Any) -> bool:
    limits = {"source": 256, "type": 128, "id": 256, "version": 128}
    return (
        isinstance(subject, dict)
        and set(subject) == {*limits, "digest"}
        and all(_text(subject[name], 1, high) for name, high in limits.items())
        and isinstance(subject["digest"], str)
        and bool(_DIGEST.match(subject["digest"]))
    )


def validate_review_request(body: Any) -> None:
    """The closed review request of file 08 §4.1; failures are 400 `request.invalid`."""

    def refuse(detail: str) -> ProblemError:
        return ProblemError(400, "request.invalid", detail)

    if not isinstance(body, dict):
        raise refuse("The review request is a JSON object.")
    allowed = {"kind", "subject", "requesterReference", "initiator", "context", "resultConstraints"}
    if unknown := set(body) - allowed:
        raise refuse(f"Unknown members: {sorted(unknown)}.")
    if not _text(body.get("kind"), 1, 128):
        raise refuse("`kind` is 1–128 characters.")
    if not _valid_subject(body.get("subject")):
        raise refuse("`subject` is {source, type, id, version, digest}.")
    if not _text(body.get("requesterReference"), 1, 256):
        raise refuse("`requesterReference` is 1–256 characters.")
    if "initiator" in body:
        initiator = body["initiator"]
        if (
            not isinstance(initiator, dict)
            or set(initiator) != {"issuer", "subject"}
            or not all(_text(initiator[name], 1, 512) for name in initiator)
        ):
            raise refuse("`initiator` is {issuer, subject}.")
    context = body.get("context")
    if (
        not isinstance(context, dict)
        or set(context) != {"strategy", "snapshot"}
        or context["strategy"] != "submitted"
        or not isinstance(context["snapshot"], dict)
        or len(canonical_json(context["snapshot"])) > 65_536
    ):
        raise refuse("`context` is {strategy: submitted, snapshot: {…}}.")
    if "resultConstraints" in body and not isinstance(body["resultConstraints"], dict):
        raise refuse("`resultConstraints` is an object.")
    if len(canonical_json(body)) > 98_304:
        raise ProblemError(413, "request.body-too-large")


class CaseworkService(Service):
    """Casework on its own port."""

    def __init__(self, issuer: Issuer, resource: str, deliverer: Deliverer) -> None:
        super().__init__("casework", issuer, resource, [SUBMIT, READ_RESULT, WITHDRAW])
        self.deliverer = deliverer
        self.reviews: dict[str, dict[str, Any]] = {}
        policy = {"id": "sandbox-review-policy", "version": "1"}
        self.policy = {**policy, "digest": sha256_label(canonical_json(policy))}
        self.destinations: list[dict[str, str]] = []
        self.auto_decision: dict[str, Any] | None = None

    def load(self, config: dict[str, Any], base: Path | None) -> None:
        if "policy" in config:
            policy = {
                "id": str(config["policy"]["id"]),
                "version": str(config["policy"]["version"]),
            }
            self.policy = {**policy, "digest": sha256_label(canonical_json(policy))}
        if "completionDestinations" in config:
            self.configure_destinations(config["completionDestinations"], base)
        if "autoDecision" in config:
            self.auto_decision = config["autoDecision"]

    def configure_destinations(self, value: Any, base: Path | None) -> None:
        if not isinstance(value, list):
            raise ValueError("`completionDestinations` is a list")
        destinations = []
        for item in value:
            if not isinstance(item, dict) or not isinstance(item.get("url"), str):
                raise ValueError("a destination is {url, token | tokenFile}")
            if "tokenFile" in item:
                path = Path(str(item["tokenFile"]))
                path = path if path.is_absolute() or base is None else base / path
                token = path.read_text(encoding="ascii").removesuffix("\n")
            elif isinstance(item.get("token"), str):
                token = item["token"]
            else:
                raise ValueError("a destination needs `token` or `tokenFile`")
            destinations.append({"url": item["url"], "token": token})
        self.destinations = destinations

    def product_routes(self) -> list[BaseRoute]:
        return [
            Route("/v1/review-requests", self._submit, methods=["POST"]),
            Route("/v1/review-requests/{request_id}/result", self._read_result, methods=["GET"]),
            Route("/v1/review-requests/{request_id}/cancel", self._withdraw, methods=["POST"]),
        ]

    def _review(self, call: Call, request_id: str) -> dict[str, Any]:
        review = self.reviews.get(request_id.lower()) if _UUID.match(request_id) else None
        if review is None or review["principal"] != call.principal.subject:
            raise ProblemError(404, "review-request.not-found")
        return review

    async def _submit(self, request: Request) -> Response:
        async def effect(call: Call) -> Response:
            key = call.idempotency_key or ""
            principal = call.principal.subject
            target = "/v1/review-requests"
            stored = self.idempotency.find("reviews", principal, key, target, call.body)
            if stored is not None:
                return json_response(stored.body, 200)
            validate_review_request(call.body)
            request_id = str(uuid.uuid4())
            accepted = {
                "requestId": request_id,
                "subject": call.body["subject"],
                "policy": self.policy,
                "submissionDigest": sha256_label(canonical_json(call.body)),
            }
            self.reviews[request_id] = {
                **accepted,
                "principal": principal,
                "idempotencyKey": key,
                "request": call.body,
                "submittedAt": _timestamp(time.time()),
                "result": None,
            }
            self.idempotency.store("reviews", principal, key, target, call.body, 201, accepted)
            call.committed = True
            self._schedule_auto_decision(request_id)
            return json_response(accepted, 201)

        operation = Operation(SUBMIT, REQUEST_SCOPES, True, 256, reads_body=True)
        return await self.run(request, operation, effect)

    async def _read_result(self, request: Request) -> Response:
        async def effect(call: Call) -> Response:
            review = self._review(call, request.path_params["request_id"])
            result = review["result"]
            if result is None:
                return json_response({"requestId": review["requestId"], "state": "pending"}, 202)
            if time.time() > review["availableUntilEpoch"]:
                raise ProblemError(410, "result.expired")
            return json_response(result)

        return await self.run(request, Operation(READ_RESULT, READ_SCOPES), effect)

    async def _withdraw(self, request: Request) -> Response:
        async def effect(call: Call) -> Response:
            key = call.idempotency_key or ""
            principal = call.principal.subject
            target = request.url.path
            review = self._review(call, request.path_params["request_id"])
            # Same key and another body is 409, past retention 410; a repeat of the same
            # withdrawal is answered afresh, which makes it `already_terminal` (08 §4.3).
            repeat = self.idempotency.find("withdrawals", principal, key, target, call.body)
            body = call.body
            if (
                not isinstance(body, dict)
                or set(body) != {"subject", "reason"}
                or not _text(body["reason"], 1, 256)
            ):
                raise ProblemError(400, "request.invalid", "The body is {subject, reason}.")
            if body["subject"] != review["subject"]:
                raise ProblemError(422, "subject.mismatch")
            if review["result"] is not None:
                answer = {"outcome": "already_terminal", "result": review["result"]}
            else:
                result = self.decide(review, "cancelled", outcome=None, details=None)
                answer = {"outcome": "cancelled", "result": result}
            if repeat is None:
                self.idempotency.store("withdrawals", principal, key, target, body, 200, answer)
            call.committed = answer["outcome"] == "cancelled"
            return json_response(answer)

        operation = Operation(WITHDRAW, REQUEST_SCOPES, True, 256, reads_body=True)
        return await self.run(request, operation, effect)

    # -- decisions and completion events
    def decide(
        self,
        review: dict[str, Any],
        status: str,
        outcome: str | None,
        details: dict[str, Any] | None,
        available_seconds: float = DEFAULT_AVAILABILITY_SECONDS,
    ) -> dict[str, Any]:
        now = time.time()
        result: dict[str, Any] = {
            "resultId": str(uuid.uuid4()),
            "requestId": review["requestId"],
            "subject": review["subject"],
            "policy": review["policy"],
            "submissionDigest": review["submissionDigest"],
            "status": status,
            "completedAt": _timestamp(now),
            "availableUntil": _timestamp(now + available_seconds),
        }
        if outcome is not None:
            result["outcome"] = outcome
        if details is not None:
            result["result"] = details
        review["result"] = result
        review["availableUntilEpoch"] = now + available_seconds
        for destination in self.destinations:
            event_id = str(uuid.uuid4())
            body = {
                "type": "review.completed",
                "eventId": event_id,
                "requestId": review["requestId"],
                "resultId": result["resultId"],
                "completedAt": result["completedAt"],
            }
            self.deliverer.completion(
                url=destination["url"].rstrip("/") + "/v1/review-completions",
                token=destination["token"],
                body=canonical_json(body),
                event_id=event_id,
            )
        return result

    def _schedule_auto_decision(self, request_id: str) -> None:
        if not self.auto_decision:
            return
        decision = self.auto_decision
        delay = float(decision.get("afterSeconds", 0))

        def apply() -> None:
            review = self.reviews.get(request_id)
            if review is not None and review["result"] is None:
                self.decide(
                    review,
                    str(decision.get("status", "approved")),
                    decision.get("outcome"),
                    decision.get("result"),
                )

        asyncio.get_running_loop().call_later(delay, apply)

    # -- control
    def control_routes(self) -> list[BaseRoute]:
        return [
            Route("/sandbox/review-requests", problems(self._list_reviews), methods=["GET"]),
            Route(
                "/sandbox/review-requests/{request_id}/decision",
                problems(self._decision),
                methods=["POST"],
            ),
            Route(
                "/sandbox/completion-destinations",
                problems(self._put_destinations),
                methods=["PUT"],
            ),
            Route("/sandbox/auto-decision", problems(self._put_auto_decision), methods=["PUT"]),
            Route("/sandbox/deliveries", problems(self._list_deliveries), methods=["GET"]),
            *super().control_routes(),
        ]

    async def _list_reviews(self, request: Request) -> Response:
        return json_response(
            {
                "reviewRequests": [
                    {name: value for name, value in review.items() if name != "availableUntilEpoch"}
                    for review in self.reviews.values()
                ]
            }
        )

    async def _decision(self, request: Request) -> Response:
        """Decide a pending review: `{status, outcome?, result?, availableForSeconds?}`."""
        body = await read_json_body(request)
        review = self.reviews.get(request.path_params["request_id"].lower())
        if review is None:
            raise ProblemError(404, "review-request.not-found")
        if not isinstance(body, dict) or body.get("status") not in STATUSES:
            raise ProblemError(400, "request.invalid", f"`status` is one of {STATUSES}.")
        outcome, details = body.get("outcome"), body.get("result")
        available = body.get("availableForSeconds", DEFAULT_AVAILABILITY_SECONDS)
        if (
            (outcome is not None and not isinstance(outcome, str))
            or (details is not None and not isinstance(details, dict))
            or isinstance(available, bool)
            or not isinstance(available, int | float)
            or available < 0
        ):
            raise ProblemError(
                400, "request.invalid", "Check `outcome`, `result` and availability."
            )
        if review["result"] is not None:
            raise ProblemError(409, "review-request.already-final")
        return json_response(self.decide(review, body["status"], outcome, details, available))

    async def _put_destinations(self, request: Request) -> Response:
        body = await read_json_body(request)
        try:
            self.configure_destinations(body, None)
        except (ValueError, OSError) as exc:
            raise ProblemError(400, "request.invalid", str(exc)) from exc
        return json_response({"destinations": [d["url"] for d in self.destinations]})

    async def _put_auto_decision(self, request: Request) -> Response:
        body = await read_json_body(request)
        if body is not None and (not isinstance(body, dict) or body.get("status") not in STATUSES):
            raise ProblemError(400, "request.invalid", "`{status, afterSeconds?}` or null.")
        self.auto_decision = body
        return json_response({"autoDecision": body})

    async def _list_deliveries(self, request: Request) -> Response:
        return json_response(
            {
                "deliveries": [
                    delivery.describe()
                    for delivery in self.deliverer.deliveries
                    if delivery.kind == "review-completion"
                ]
            }
        )
