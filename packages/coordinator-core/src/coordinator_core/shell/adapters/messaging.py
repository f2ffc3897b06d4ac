"""Messaging: `messaging.submit-message/v1` and its receipt lookup for reconcile (08 §5).

Acceptance is not delivery: the step output is the `MessageReceipt` of the `202`. The same key
and the same request answer the stored receipt again, which is also what the receipt lookup
asks for (with the original request as its body) when an attempt ended uncertain.
"""

from __future__ import annotations

import re
from typing import Any, Final

from coordinator_core.engine.commands import LookupReceipt
from coordinator_core.engine.inputs import CallOutcome, ReceiptAnswer
from coordinator_core.shell.adapters.base import PreparedCommand
from coordinator_core.shell.adapters.http import problem_of
from coordinator_core.shell.adapters.product import Attempt, ProductAdapter, receipt_lookup
from coordinator_core.shell.adapters.validation import (
    ShapeError,
    closed_object,
    date_time,
    json_object,
    output_shape,
    text,
)
from coordinator_core.values import canonical_json

__all__ = ["SUBMIT_MESSAGE", "MessagingAdapter", "message_receipt"]

SUBMIT_MESSAGE: Final = "messaging.submit-message/v1"

_PHONE: Final = re.compile(r"\+[1-9][0-9]{1,14}")
_REQUIRED: Final = frozenset({"senderProfile", "to"})
_OPTIONAL: Final = frozenset(
    {"template", "locale", "data", "content", "notBefore", "expiresAt", "correlationId"}
)


class MessagingAdapter(ProductAdapter):
    """The Messaging adapter (08 §5)."""

    product = "messaging"
    call_operations = frozenset({SUBMIT_MESSAGE})

    def handle_call(self, attempt: Attempt, command: PreparedCommand) -> CallOutcome:
        body = canonical_json(_message(command.input))
        answer = attempt.send(
            "POST", "/v1/messages", effect="mutation", body=body, key=command.idempotency_key
        )
        if answer.status == 202:
            receipt = attempt.body(answer, "mutation")
            try:
                message_receipt(receipt)
            except ShapeError:
                return attempt.invalid_response("mutation")
            return attempt.success(receipt)
        if answer.status == 422:
            problem = problem_of(answer)
            if problem is not None and problem.code == "template.locale-unavailable":
                return attempt.refused("product-not-found")
        return attempt.classify(answer, "mutation")

    def handle_receipt(
        self, attempt: Attempt, lookup: LookupReceipt, command: PreparedCommand
    ) -> ReceiptAnswer:
        _message(command.input)
        path = "/v1/messages/receipt-lookup"
        return receipt_lookup(attempt, lookup, path, command, message_receipt)


def _message(value: Any) -> dict[str, Any]:
    """The closed message request of 08 §5.1; raises ShapeError."""
    message = closed_object(value, _REQUIRED, _OPTIONAL)
    text(message["senderProfile"], 1, 128)
    to = json_object(message["to"])
    if set(to) == {"email"}:
        text(to["email"], 3, 254)
    elif set(to) == {"phone"}:
        phone = text(to["phone"])
        if _PHONE.fullmatch(phone) is None:
            raise ShapeError()
    else:
        raise ShapeError()
    if ("template" in message) == ("content" in message):
        raise ShapeError()  # exactly one of template and content
    if "template" in message:
        template = closed_object(message["template"], {"id", "version"})
        text(template["id"])
        text(template["version"])
        if "locale" not in message or "data" not in message:
            raise ShapeError()
    else:
        content = closed_object(message["content"], {"text"}, {"subject"})
        text(content["text"])
        if "subject" in content:
            text(content["subject"])
    if "locale" in message:
        text(message["locale"])
    for name in ("notBefore", "expiresAt"):
        if name in message:
            date_time(message[name])
    if "correlationId" in message:
        text(message["correlationId"], 1, 128)
    return message


def message_receipt(value: Any) -> dict[str, Any]:
    """A `MessageReceipt` `{id, status, links: {self, cancel}}`; raises ShapeError."""
    return output_shape(SUBMIT_MESSAGE, value)
