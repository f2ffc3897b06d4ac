"""Contract 08 §6: Scheduling reads, appointment creation and its receipt lookup."""

from __future__ import annotations

from typing import Any

import adapter_support as support
import pytest
from adapter_support import (
    Reply,
    answered,
    command,
    command_key,
    confirmed,
    deadline,
    lookup,
    problem,
    refused,
    success,
    uncertain,
)

from coordinator_core.shell.adapters.scheduling import SchedulingAdapter
from coordinator_core.values import canonical_json

SCHEDULING = {"schedulingId": "s-1", "policyRevision": "r-1", "policyDigest": "sha256:00"}
WINDOW = {
    "offering": "intake",
    "start": "2026-03-01T08:00:00+01:00",
    "end": "2026-03-08T08:00:00Z",
    "limit": 10,
    "cursor": "c/1+2",
}
SLOTS = {
    "items": [
        {"kind": "slot", "start": "2026-03-02T09:00:00Z", "end": "2026-03-02T09:30:00Z", "free": 2}
    ],
    "nextCursor": None,
}
ADMISSION = {
    "admission": {
        "offering": "intake",
        "start": "2026-03-02T09:00:00Z",
        "party": {"reference": "person-1"},
        "channel": "video",
        "policyRevision": "r-1",
        "duplicateKey": "dup-1",
    }
}
APPOINTMENT = {
    "appointmentId": "1e2d3c4b-5a69-4788-9a0b-c1d2e3f4a5b6",
    "offering": "intake",
    "start": "2026-03-02T09:00:00Z",
    "end": "2026-03-02T09:30:00Z",
    "status": "booked",
}


@pytest.fixture
def bound(connect):
    return connect("scheduling")


def call(bound, operation: str, value: Any, key: str | None = None):
    frozen = command(operation, value, key=key)
    return support.call(SchedulingAdapter(), bound, frozen, attempt_deadline=deadline())


def test_read_scheduling(fake, bound):
    fake.route("GET", "/v1/scheduling", Reply(200, SCHEDULING))
    assert call(bound, "scheduling.read-scheduling/v1", {}) == success(SCHEDULING)
    assert call(bound, "scheduling.read-scheduling/v1", {"x": 1}) == refused("invalid-command")


def test_read_availability_sends_the_query_in_contract_order(fake, bound):
    fake.route("GET", "/v1/availability", Reply(200, SLOTS))
    assert call(bound, "scheduling.read-availability/v1", WINDOW) == success(SLOTS)
    assert fake.requests()[-1].query == (
        "offering=intake&start=2026-03-01T08%3A00%3A00%2B01%3A00"
        "&end=2026-03-08T08%3A00%3A00Z&limit=10&cursor=c%2F1%2B2"
    )


@pytest.mark.parametrize(
    "value",
    [
        {**WINDOW, "end": WINDOW["start"]},
        {**WINDOW, "end": "2026-02-28T08:00:00Z"},
        {**WINDOW, "end": "2026-04-01T08:00:00Z"},
        {**WINDOW, "limit": 0},
        {**WINDOW, "limit": 101},
        {**WINDOW, "limit": True},
        {**WINDOW, "cursor": ""},
        {**WINDOW, "offering": "o" * 129},
        {**WINDOW, "start": "2026-02-30T08:00:00Z"},
        {k: v for k, v in WINDOW.items() if k != "limit"},
    ],
)
def test_read_availability_refuses_an_invalid_window(fake, bound, value):
    assert call(bound, "scheduling.read-availability/v1", value) == refused("invalid-command")
    assert not fake.seen


def test_a_window_of_exactly_31_days_is_allowed(fake, bound):
    fake.route("GET", "/v1/availability", Reply(200, SLOTS))
    value = {**WINDOW, "start": "2026-03-01T00:00:00Z", "end": "2026-04-01T00:00:00Z"}
    assert call(bound, "scheduling.read-availability/v1", value) == success(SLOTS)


@pytest.mark.parametrize(
    "body",
    [
        {
            "items": [
                {
                    "kind": "gap",
                    "start": "2026-03-02T09:00:00Z",
                    "end": "2026-03-02T09:30:00Z",
                    "free": 1,
                }
            ]
        },
        {"items": [], "nextCursor": 3},
        {"items": [{"kind": "slot", "start": "x", "end": "y", "free": -1}], "nextCursor": None},
    ],
)
def test_read_availability_checks_the_answer(fake, bound, body):
    fake.route("GET", "/v1/availability", Reply(200, body))
    assert call(bound, "scheduling.read-availability/v1", WINDOW) == refused("invalid-response")


def test_create_appointment(fake, bound):
    fake.route("POST", "/v1/appointments", Reply(201, APPOINTMENT))
    key = command_key()
    assert call(bound, "scheduling.create-appointment/v1", ADMISSION, key) == success(APPOINTMENT)
    seen = fake.requests()[-1]
    assert seen.body == canonical_json(ADMISSION)
    assert seen.headers["idempotency-key"] == key
    fake.route("POST", "/v1/appointments", Reply(201, {**APPOINTMENT, "status": "held"}))
    outcome = call(bound, "scheduling.create-appointment/v1", ADMISSION, key)
    assert outcome == uncertain("invalid-response")


@pytest.mark.parametrize(
    "admission",
    [
        {**ADMISSION["admission"], "channel": "fax"},
        {**ADMISSION["admission"], "party": {}},
        {**ADMISSION["admission"], "policyRevision": ""},
        {k: v for k, v in ADMISSION["admission"].items() if k != "start"},
    ],
)
def test_create_appointment_refuses_an_invalid_admission(fake, bound, admission):
    outcome = call(
        bound, "scheduling.create-appointment/v1", {"admission": admission}, command_key()
    )
    assert outcome == refused("invalid-command")
    assert not fake.seen


def test_appointment_receipt_lookup(fake, bound):
    adapter = SchedulingAdapter()
    key = command_key()
    frozen = command("scheduling.create-appointment/v1", ADMISSION, key=key)
    fake.route("POST", "/v1/appointments/receipt-lookup", Reply(200, APPOINTMENT))
    assert lookup(adapter, bound, frozen, attempt_deadline=deadline()) == confirmed(APPOINTMENT)
    seen = fake.requests()[-1]
    assert (seen.body, seen.headers["idempotency-key"]) == (canonical_json(ADMISSION), key)
    fake.route("POST", "/v1/appointments/receipt-lookup", problem(404, "receipt.unresolved"))
    assert lookup(adapter, bound, frozen, attempt_deadline=deadline()) == answered("unresolved")
