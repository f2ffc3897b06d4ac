"""Casework: submit a review request, read its result (call and observation), withdraw it (08 §4).

The submission exposes the completion `result` (reference `/requestId`); a `wait-for` reads it
through `casework.read-review-result/v1`, where `202` is pending, `404` refused
`product-not-found` and `410` refused `completion-expired`.
"""

from __future__ import annotations

from typing import Any, Final

from coordinator_core.engine.inputs import CallOutcome, ObservationOutcome
from coordinator_core.shell.adapters.base import PreparedCommand
from coordinator_core.shell.adapters.http import ProductAnswer, path_segment
from coordinator_core.shell.adapters.product import Attempt, ProductAdapter, Stop
from coordinator_core.shell.adapters.validation import (
    ShapeError,
    canonical_size,
    closed_object,
    completion_shape,
    json_object,
    output_shape,
    sha256_digest,
    text,
    uuid_text,
)
from coordinator_core.values import canonical_json

__all__ = ["READ_RESULT", "SUBMIT_REVIEW", "WITHDRAW_REVIEW", "CaseworkAdapter"]

SUBMIT_REVIEW: Final = "casework.submit-review-request/v1"
READ_RESULT: Final = "casework.read-review-result/v1"
WITHDRAW_REVIEW: Final = "casework.withdraw-review-request/v1"

SNAPSHOT_MAX_BYTES: Final = 65_536
SUBMISSION_MAX_BYTES: Final = 98_304
RESULT_MAX_BYTES: Final = 16_384
_SUBJECT: Final = frozenset({"source", "type", "id", "version", "digest"})


class CaseworkAdapter(ProductAdapter):
    """The Casework adapter (08 §4)."""

    product = "casework"
    call_operations = frozenset({SUBMIT_REVIEW, READ_RESULT, WITHDRAW_REVIEW})

    def handle_call(self, attempt: Attempt, command: PreparedCommand) -> CallOutcome:
        if command.operation == SUBMIT_REVIEW:
            return _submit(attempt, command)
        if command.operation == WITHDRAW_REVIEW:
            return _withdraw(attempt, command)
        request = closed_object(command.input, {"requestId"})
        try:
            result = _read_result(attempt, uuid_text(request["requestId"]))
        except Stop as stop:
            if isinstance(stop.outcome, ObservationOutcome):  # pending
                return attempt.success({"state": "pending"})
            raise
        return attempt.success({"state": "complete", "result": result})

    def handle_observe(self, attempt: Attempt, operation: str, reference: Any) -> Any:
        if operation != READ_RESULT:
            raise Stop(attempt.refused("remote-refused"))
        # The observation input is {"requestId": <completion reference>} (08 §1.2).
        return _read_result(attempt, uuid_text(reference))


# -- shapes -----------------------------------------------------------------------------------------


def _subject(value: Any) -> dict[str, Any]:
    subject = closed_object(value, _SUBJECT)
    text(subject["source"], 1, 256)
    text(subject["type"], 1, 128)
    text(subject["id"], 1, 256)
    text(subject["version"], 1, 128)
    sha256_digest(subject["digest"])
    return subject


def _review_request(value: Any) -> dict[str, Any]:
    request = closed_object(
        value,
        {"kind", "subject", "requesterReference", "context"},
        {"initiator", "resultConstraints"},
    )
    text(request["kind"], 1, 128)
    _subject(request["subject"])
    text(request["requesterReference"], 1, 256)
    if "initiator" in request:
        initiator = closed_object(request["initiator"], {"issuer", "subject"})
        text(initiator["issuer"], 1, 512)
        text(initiator["subject"], 1, 512)
    context = closed_object(request["context"], {"strategy", "snapshot"})
    if context["strategy"] != "submitted":
        raise ShapeError()
    if canonical_size(json_object(context["snapshot"])) > SNAPSHOT_MAX_BYTES:
        raise ShapeError()
    if "resultConstraints" in request:
        json_object(request["resultConstraints"])
    return request


def review_result(value: Any) -> dict[str, Any]:
    """A `ReviewResult` (08 §4.2, the output of completion `result`); raises ShapeError. Its
    `result` object is at most 16,384 canonical bytes, which a schema cannot say."""
    result = completion_shape(SUBMIT_REVIEW, "result", value)
    if "result" in result and canonical_size(result["result"]) > RESULT_MAX_BYTES:
        raise ShapeError()
    return result


def _accepted(value: Any) -> dict[str, Any]:
    """`ReviewRequestAccepted` (08 §4.1): its `requestId` is the completion reference."""
    return output_shape(SUBMIT_REVIEW, value)


def _checked(answer: ProductAnswer, attempt: Attempt, check: Any) -> CallOutcome:
    body = attempt.body(answer, "mutation")
    try:
        check(body)
    except ShapeError:
        return attempt.invalid_response("mutation")
    return attempt.success(body)


# -- operations -----------------------------------------------------------------------------------


def _submit(attempt: Attempt, command: PreparedCommand) -> CallOutcome:
    body = canonical_json(_review_request(command.input))
    if len(body) > SUBMISSION_MAX_BYTES:
        raise ShapeError()
    answer = attempt.send(
        "POST", "/v1/review-requests", effect="mutation", body=body, key=command.idempotency_key
    )
    if answer.status in (200, 201):
        return _checked(answer, attempt, _accepted)
    return attempt.classify(answer, "mutation")


def _read_result(attempt: Attempt, request_id: str) -> Any:
    """The `ReviewResult`, or Stop: pending on 202, the 08 §4.2 refusals, §9 otherwise."""
    answer = attempt.send(
        "GET", f"/v1/review-requests/{path_segment(request_id)}/result", effect="read"
    )
    if answer.status == 202:
        raise Stop(attempt.pending())  # the body is ignored
    if answer.status == 404:
        raise Stop(attempt.refused("product-not-found"))
    if answer.status == 410:
        raise Stop(attempt.refused("completion-expired"))
    attempt.stop_unless(answer, 200, "read")
    body = attempt.body(answer, "read")
    try:
        return review_result(body)
    except ShapeError:
        raise Stop(attempt.refused("invalid-response")) from None


def _withdrawal(value: Any) -> None:
    found = output_shape(WITHDRAW_REVIEW, value)
    review_result(found["result"])


def _withdraw(attempt: Attempt, command: PreparedCommand) -> CallOutcome:
    request = closed_object(command.input, {"requestId", "subject", "reason"})
    request_id = uuid_text(request["requestId"])
    subject = _subject(request["subject"])
    reason = text(request["reason"], 1, 256)
    answer = attempt.send(
        "POST",
        f"/v1/review-requests/{path_segment(request_id)}/cancel",
        effect="mutation",
        body=canonical_json({"subject": subject, "reason": reason}),
        key=command.idempotency_key,
    )
    if answer.status == 200:
        return _checked(answer, attempt, _withdrawal)
    return attempt.classify(answer, "mutation")
