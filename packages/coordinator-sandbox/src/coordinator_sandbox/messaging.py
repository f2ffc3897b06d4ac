"""Sandbox Messaging (file 08 §5): submission with idempotency and the receipt lookup.

Templates are optional: with none registered every template is accepted; once any is
registered, an unknown one is `404 template.not-found` and an unknown locale is
`422 template.locale-unavailable`.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from coordinator_sandbox.service import Call, Operation, Service
from coordinator_sandbox.tokens import Issuer
from coordinator_sandbox.web import ProblemError, json_response, problems, read_json_body

__all__ = ["MessagingService", "is_date_time", "validate_message"]

SUBMIT_MESSAGE = "messaging.submit-message/v1"
RECEIPT_LOOKUP = "messaging.receipt-lookup"
SCOPES = ("messaging:messages:submit",)
_PHONE = re.compile(r"^\+[1-9][0-9]{1,14}$")
_MEMBERS = {
    "senderProfile",
    "to",
    "template",
    "locale",
    "data",
    "content",
    "notBefore",
    "expiresAt",
    "correlationId",
}


def is_date_time(value: Any) -> bool:
    """An RFC 3339 date-time with a time zone."""
    if not isinstance(value, str) or not re.match(
        r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$", value
    ):
        return False
    try:
        datetime.fromisoformat(value.replace("z", "Z").replace("t", "T"))
    except ValueError:
        return False
    return True


def _text(value: Any, low: int, high: int) -> bool:
    return isinstance(value, str) and low <= len(value) <= high


def validate_message(body: Any) -> None:
    """The closed input of `messaging.submit-message/v1`; failures are 400 `request.invalid`."""

    def refuse(detail: str) -> ProblemError:
        return ProblemError(400, "request.invalid", detail)

    if not isinstance(body, dict):
        raise refuse("The message is a JSON object.")
    if unknown := set(body) - _MEMBERS:
        raise refuse(f"Unknown members: {sorted(unknown)}.")
    if not _text(body.get("senderProfile"), 1, 128):
        raise refuse("`senderProfile` is a string of 1–128 characters.")
    to = body.get("to")
    if not isinstance(to, dict) or len(to) != 1:
        raise refuse("`to` is {email} or {phone}.")
    if "email" in to:
        if not _text(to["email"], 3, 254):
            raise refuse("`to.email` is 3–254 characters.")
    elif "phone" in to:
        if not isinstance(to["phone"], str) or not _PHONE.match(to["phone"]):
            raise refuse("`to.phone` is an E.164 number.")
    else:
        raise refuse("`to` is {email} or {phone}.")
    has_template, has_content = "template" in body, "content" in body
    if has_template == has_content:
        raise refuse("Exactly one of `template` and `content` is required.")
    if has_template:
        template = body["template"]
        if (
            not isinstance(template, dict)
            or set(template) != {"id", "version"}
            or not all(isinstance(template[name], str) and template[name] for name in template)
        ):
            raise refuse("`template` is {id, version}.")
        if not _text(body.get("locale"), 1, 64) or "data" not in body:
            raise refuse("A template needs `locale` and `data`.")
    else:
        content = body["content"]
        if (
            not isinstance(content, dict)
            or not set(content) <= {"text", "subject"}
            or not isinstance(content.get("text"), str)
            or not isinstance(content.get("subject", ""), str)
        ):
            raise refuse("`content` is {text, subject?}.")
        if "locale" in body and not _text(body["locale"], 1, 64):
            raise refuse("`locale` is a string.")
    for name in ("notBefore", "expiresAt"):
        if name in body and not is_date_time(body[name]):
            raise refuse(f"`{name}` is an RFC 3339 date-time.")
    if "correlationId" in body and not _text(body["correlationId"], 1, 128):
        raise refuse("`correlationId` is 1–128 characters.")


class MessagingService(Service):
    """Messaging on its own port."""

    def __init__(self, issuer: Issuer, resource: str) -> None:
        super().__init__("messaging", issuer, resource, [SUBMIT_MESSAGE, RECEIPT_LOOKUP])
        self.messages: dict[str, dict[str, Any]] = {}
        self.templates: dict[str, dict[str, Any]] = {}

    def load(self, config: dict[str, Any]) -> None:
        for template_id, template in config.get("templates", {}).items():
            self.templates[template_id] = template

    def product_routes(self) -> list[BaseRoute]:
        return [
            Route("/v1/messages", self._submit, methods=["POST"]),
            Route("/v1/messages/receipt-lookup", self._receipt_lookup, methods=["POST"]),
            Route("/v1/messages/{message_id}", self._read_message, methods=["GET"]),
        ]

    def _check_template(self, body: dict[str, Any]) -> None:
        if "template" not in body or not self.templates:
            return
        template = self.templates.get(body["template"]["id"])
        if template is None:
            raise ProblemError(404, "template.not-found")
        versions = template.get("versions")
        if isinstance(versions, list) and body["template"]["version"] not in versions:
            raise ProblemError(404, "template.not-found")
        locales = template.get("locales")
        if isinstance(locales, list) and body["locale"] not in locales:
            raise ProblemError(422, "template.locale-unavailable")

    def receipt(self, message_id: str, status: str) -> dict[str, Any]:
        own = f"{self.base_url}/v1/messages/{message_id}"
        return {
            "id": message_id,
            "status": status,
            "links": {"self": own, "cancel": own + "/cancel"},
        }

    async def _submit(self, request: Request) -> Response:
        async def effect(call: Call) -> Response:
            key = call.idempotency_key or ""
            stored = self.idempotency.find(
                "messages", call.principal.subject, key, "/v1/messages", call.body
            )
            if stored is not None:
                return json_response(stored.body, stored.status)
            validate_message(call.body)
            self._check_template(call.body)
            message_id = str(uuid.uuid4())
            receipt = self.receipt(message_id, "accepted")
            self.messages[message_id] = {
                "id": message_id,
                "status": "accepted",
                "principal": call.principal.subject,
                "idempotencyKey": key,
                "request": call.body,
            }
            self.idempotency.store(
                "messages", call.principal.subject, key, "/v1/messages", call.body, 202, receipt
            )
            call.committed = True
            return json_response(receipt, 202)

        operation = Operation(SUBMIT_MESSAGE, SCOPES, True, 128, reads_body=True)
        return await self.run(request, operation, effect)

    async def _receipt_lookup(self, request: Request) -> Response:
        async def effect(call: Call) -> Response:
            stored = self.idempotency.lookup_receipt(
                "messages",
                call.principal.subject,
                call.idempotency_key or "",
                "/v1/messages",
                call.body,
            )
            return json_response(stored.body, 200)

        operation = Operation(RECEIPT_LOOKUP, SCOPES, True, 128, reads_body=True)
        return await self.run(request, operation, effect)

    async def _read_message(self, request: Request) -> Response:
        async def effect(call: Call) -> Response:
            message = self.messages.get(request.path_params["message_id"])
            if message is None or message["principal"] != call.principal.subject:
                raise ProblemError(404, "message.not-found")
            return json_response(self.receipt(message["id"], message["status"]))

        return await self.run(request, Operation("messaging.read-message", SCOPES), effect)

    def control_routes(self) -> list[BaseRoute]:
        return [
            Route("/sandbox/messages", problems(self._list_messages), methods=["GET"]),
            Route(
                "/sandbox/templates/{template_id}", problems(self._put_template), methods=["PUT"]
            ),
            *super().control_routes(),
        ]

    async def _list_messages(self, request: Request) -> Response:
        return json_response({"messages": list(self.messages.values())})

    async def _put_template(self, request: Request) -> Response:
        body = await read_json_body(request)
        if not isinstance(body, dict):
            raise ProblemError(400, "request.invalid", "A template is {versions?, locales?}.")
        self.templates[request.path_params["template_id"]] = body
        return json_response(body)
