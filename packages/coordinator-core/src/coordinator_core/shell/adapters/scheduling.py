"""Scheduling: read the scheduling policy and availability, create an appointment (08 §6).

Appointment creation is keyed and has a receipt lookup with the semantics and table of
Messaging (08 §5.2), answering the original appointment.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Final
from urllib.parse import quote

from coordinator_core.engine.commands import LookupReceipt
from coordinator_core.engine.inputs import CallOutcome, ReceiptAnswer
from coordinator_core.shell.adapters.base import PreparedCommand
from coordinator_core.shell.adapters.product import Attempt, ProductAdapter, receipt_lookup
from coordinator_core.shell.adapters.validation import (
    ShapeError,
    closed_object,
    date_time,
    integer,
    output_shape,
    text,
)
from coordinator_core.values import canonical_json

__all__ = [
    "CREATE_APPOINTMENT",
    "READ_AVAILABILITY",
    "READ_SCHEDULING",
    "SchedulingAdapter",
    "appointment",
]

READ_SCHEDULING: Final = "scheduling.read-scheduling/v1"
READ_AVAILABILITY: Final = "scheduling.read-availability/v1"
CREATE_APPOINTMENT: Final = "scheduling.create-appointment/v1"

MAX_WINDOW: Final = timedelta(days=31)
CHANNELS: Final = frozenset({"in-person", "phone", "video"})


class SchedulingAdapter(ProductAdapter):
    """The Scheduling adapter (08 §6)."""

    product = "scheduling"
    call_operations = frozenset({READ_SCHEDULING, READ_AVAILABILITY, CREATE_APPOINTMENT})

    def handle_call(self, attempt: Attempt, command: PreparedCommand) -> CallOutcome:
        if command.operation == READ_SCHEDULING:
            return _read_scheduling(attempt, command)
        if command.operation == READ_AVAILABILITY:
            return _read_availability(attempt, command)
        return _create_appointment(attempt, command)

    def handle_receipt(
        self, attempt: Attempt, lookup: LookupReceipt, command: PreparedCommand
    ) -> ReceiptAnswer:
        _admission(command.input)
        path = "/v1/appointments/receipt-lookup"
        return receipt_lookup(attempt, lookup, path, command, appointment)


def _read_scheduling(attempt: Attempt, command: PreparedCommand) -> CallOutcome:
    closed_object(command.input, set())
    answer = attempt.send("GET", "/v1/scheduling", effect="read")
    attempt.stop_unless(answer, 200, "read")
    body = attempt.body(answer, "read")
    try:
        output_shape(READ_SCHEDULING, body)
    except ShapeError:
        return attempt.refused("invalid-response")
    return attempt.success(body)


def _availability_query(value: Any) -> str:
    request = closed_object(value, {"offering", "start", "end", "limit"}, {"cursor"})
    text(request["offering"], 1, 128)
    start, end = date_time(request["start"]), date_time(request["end"])
    if not start < end or end - start > MAX_WINDOW:
        raise ShapeError()
    limit = integer(request["limit"], 1, 100)
    pairs = [
        ("offering", request["offering"]),
        ("start", request["start"]),
        ("end", request["end"]),
        ("limit", str(limit)),
    ]
    if "cursor" in request:
        pairs.append(("cursor", text(request["cursor"], 1, 512)))
    return "&".join(f"{name}={quote(item, safe='')}" for name, item in pairs)


def _read_availability(attempt: Attempt, command: PreparedCommand) -> CallOutcome:
    query = _availability_query(command.input)
    answer = attempt.send("GET", "/v1/availability?" + query, effect="read")
    attempt.stop_unless(answer, 200, "read")
    body = attempt.body(answer, "read")
    try:
        output_shape(READ_AVAILABILITY, body)
    except ShapeError:
        return attempt.refused("invalid-response")
    return attempt.success(body)


def _admission(value: Any) -> dict[str, Any]:
    request = closed_object(value, {"admission"})
    admission = closed_object(
        request["admission"],
        {"offering", "start", "party", "channel", "policyRevision"},
        {"duplicateKey"},
    )
    text(admission["offering"], 1, 128)
    date_time(admission["start"])
    text(closed_object(admission["party"], {"reference"})["reference"], 1, 256)
    if admission["channel"] not in CHANNELS:
        raise ShapeError()
    text(admission["policyRevision"], 1, 128)
    if "duplicateKey" in admission:
        text(admission["duplicateKey"], 1, 128)
    return request


def appointment(value: Any) -> dict[str, Any]:
    """The created appointment `{appointmentId, offering, start, end, status: "booked"}`."""
    return output_shape(CREATE_APPOINTMENT, value)


def _create_appointment(attempt: Attempt, command: PreparedCommand) -> CallOutcome:
    body = canonical_json(_admission(command.input))
    answer = attempt.send(
        "POST", "/v1/appointments", effect="mutation", body=body, key=command.idempotency_key
    )
    if answer.status == 201:
        created = attempt.body(answer, "mutation")
        try:
            appointment(created)
        except ShapeError:
            return attempt.invalid_response("mutation")
        return attempt.success(created)
    return attempt.classify(answer, "mutation")
