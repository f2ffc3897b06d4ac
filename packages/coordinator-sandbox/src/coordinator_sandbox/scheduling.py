"""Sandbox Scheduling (file 08 §6): the scheduling policy, availability slots of configured
offerings, appointment creation with idempotency, and its receipt lookup.

Slots are generated on a fixed grid: every `slotMinutes` between `openHour` and `closeHour`
UTC on the configured weekdays, each with `capacity` places.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from coordinator_sandbox.canonical import canonical_json, sha256_label
from coordinator_sandbox.messaging import is_date_time
from coordinator_sandbox.service import Call, Operation, Service
from coordinator_sandbox.tokens import Issuer
from coordinator_sandbox.web import ProblemError, json_response, problems, read_json_body

__all__ = ["SchedulingService"]

READ_SCHEDULING = "scheduling.read-scheduling/v1"
READ_AVAILABILITY = "scheduling.read-availability/v1"
CREATE_APPOINTMENT = "scheduling.create-appointment/v1"
RECEIPT_LOOKUP = "scheduling.receipt-lookup"
CREATE_SCOPES = ("scheduling:appointments:create",)
READ_SCOPES = ("scheduling:availability:read", "scheduling:appointments:create")
CHANNELS = ("in-person", "phone", "video")
_LIMIT = re.compile(r"^[1-9][0-9]{0,2}$")


@dataclass
class Offering:
    name: str
    slot_minutes: int = 30
    capacity: int = 1
    open_hour: int = 9
    close_hour: int = 17
    weekdays: tuple[int, ...] = (0, 1, 2, 3, 4, 5, 6)

    def describe(self) -> dict[str, Any]:
        return {
            "slotMinutes": self.slot_minutes,
            "capacity": self.capacity,
            "openHour": self.open_hour,
            "closeHour": self.close_hour,
            "weekdays": list(self.weekdays),
        }

    def slots(self, start: datetime, end: datetime) -> list[tuple[datetime, datetime]]:
        """Slots lying wholly inside [start, end), in order."""
        step = timedelta(minutes=self.slot_minutes)
        day = start.replace(hour=0, minute=0, second=0, microsecond=0)
        found = []
        while day < end:
            if day.weekday() in self.weekdays:
                slot = day + timedelta(hours=self.open_hour)
                closing = day + timedelta(hours=self.close_hour)
                while slot + step <= closing:
                    if slot >= start and slot + step <= end:
                        found.append((slot, slot + step))
                    slot += step
            day += timedelta(days=1)
        return found


def _parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("z", "Z").replace("t", "T")).astimezone(UTC)


def _format_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def offering_from_json(name: str, value: Any) -> Offering:
    if not isinstance(value, dict):
        raise ValueError("an offering is an object")
    offering = Offering(
        name,
        int(value.get("slotMinutes", 30)),
        int(value.get("capacity", 1)),
        int(value.get("openHour", 9)),
        int(value.get("closeHour", 17)),
        tuple(int(day) for day in value.get("weekdays", range(7))),
    )
    if not (
        1 <= offering.slot_minutes <= 1440
        and offering.capacity >= 0
        and 0 <= offering.open_hour < offering.close_hour <= 24
    ):
        raise ValueError("offering bounds are out of range")
    return offering


class SchedulingService(Service):
    """Scheduling on its own port."""

    def __init__(self, issuer: Issuer, resource: str) -> None:
        super().__init__(
            "scheduling",
            issuer,
            resource,
            [READ_SCHEDULING, READ_AVAILABILITY, CREATE_APPOINTMENT, RECEIPT_LOOKUP],
        )
        self.scheduling_id = str(uuid.uuid4())
        self.policy_revision = "1"
        self.offerings: dict[str, Offering] = {"consultation": Offering("consultation")}
        self.appointments: dict[str, dict[str, Any]] = {}

    def load(self, config: dict[str, Any]) -> None:
        if "schedulingId" in config:
            self.scheduling_id = str(config["schedulingId"])
        if "policyRevision" in config:
            self.policy_revision = str(config["policyRevision"])
        if "offerings" in config:
            self.offerings = {
                name: offering_from_json(name, value) for name, value in config["offerings"].items()
            }

    def policy_digest(self) -> str:
        policy = {
            "policyRevision": self.policy_revision,
            "offerings": {name: o.describe() for name, o in self.offerings.items()},
        }
        return sha256_label(canonical_json(policy))

    def booked(self, offering: str, start: datetime) -> int:
        return sum(
            1
            for appointment in self.appointments.values()
            if appointment["offering"] == offering
            and appointment["startAt"] == start
            and appointment["status"] == "booked"
        )

    def product_routes(self) -> list[BaseRoute]:
        return [
            Route("/v1/scheduling", self._read_scheduling, methods=["GET"]),
            Route("/v1/availability", self._read_availability, methods=["GET"]),
            Route("/v1/appointments", self._create, methods=["POST"]),
            Route("/v1/appointments/receipt-lookup", self._receipt_lookup, methods=["POST"]),
        ]

    async def _read_scheduling(self, request: Request) -> Response:
        async def effect(call: Call) -> Response:
            return json_response(
                {
                    "schedulingId": self.scheduling_id,
                    "policyRevision": self.policy_revision,
                    "policyDigest": self.policy_digest(),
                }
            )

        return await self.run(request, Operation(READ_SCHEDULING, READ_SCOPES), effect)

    async def _read_availability(self, request: Request) -> Response:
        async def effect(call: Call) -> Response:
            params = request.query_params
            if set(params) - {"offering", "start", "end", "limit", "cursor"} or any(
                len(params.getlist(name)) > 1 for name in params
            ):
                raise ProblemError(400, "request.invalid", "Unknown or repeated parameters.")
            offering_name, start, end = (
                params.get("offering"),
                params.get("start"),
                params.get("end"),
            )
            limit = params.get("limit", "")
            if (
                offering_name is None
                or not 1 <= len(offering_name) <= 128
                or not is_date_time(start)
                or not is_date_time(end)
                or not _LIMIT.match(limit)
                or not 1 <= int(limit) <= 100
            ):
                raise ProblemError(400, "request.invalid", "Check offering, start, end and limit.")
            assert start is not None and end is not None
            start_at, end_at = _parse_time(start), _parse_time(end)
            if not start_at < end_at or end_at - start_at > timedelta(days=31):
                raise ProblemError(400, "request.invalid", "start < end, at most 31 days apart.")
            offering = self.offerings.get(offering_name)
            if offering is None:
                raise ProblemError(404, "offering.not-found")
            query_digest = sha256_label(canonical_json([offering_name, start, end]))[7:23]
            offset = 0
            if "cursor" in params:
                try:
                    cursor = json.loads(base64.urlsafe_b64decode(params["cursor"] + "=="))
                    offset = int(cursor["offset"])
                    if cursor["query"] != query_digest or offset < 0:
                        raise ValueError("cursor of another query")
                except (ValueError, KeyError, TypeError) as exc:
                    raise ProblemError(400, "request.invalid", "The cursor is invalid.") from exc
            slots = offering.slots(start_at, end_at)
            page = slots[offset : offset + int(limit)]
            items = [
                {
                    "kind": "slot",
                    "start": _format_time(slot_start),
                    "end": _format_time(slot_end),
                    "free": max(offering.capacity - self.booked(offering_name, slot_start), 0),
                }
                for slot_start, slot_end in page
            ]
            next_cursor = None
            if offset + int(limit) < len(slots):
                raw = json.dumps({"offset": offset + int(limit), "query": query_digest})
                next_cursor = base64.urlsafe_b64encode(raw.encode()).rstrip(b"=").decode()
            return json_response({"items": items, "nextCursor": next_cursor})

        return await self.run(request, Operation(READ_AVAILABILITY, READ_SCOPES), effect)

    def _validate(self, body: Any) -> dict[str, Any]:
        def refuse(detail: str) -> ProblemError:
            return ProblemError(400, "request.invalid", detail)

        if not isinstance(body, dict) or set(body) != {"admission"}:
            raise refuse("The body is {admission}.")
        admission = body["admission"]
        required = {"offering", "start", "party", "channel", "policyRevision"}
        if not isinstance(admission, dict) or not required <= set(admission) <= {
            *required,
            "duplicateKey",
        }:
            raise refuse("`admission` has offering, start, party, channel, policyRevision.")

        def text(value: Any, low: int, high: int) -> bool:
            return isinstance(value, str) and low <= len(value) <= high

        party = admission["party"]
        if not (
            text(admission["offering"], 1, 128)
            and is_date_time(admission["start"])
            and isinstance(party, dict)
            and set(party) == {"reference"}
            and text(party["reference"], 1, 256)
            and admission["channel"] in CHANNELS
            and text(admission["policyRevision"], 1, 128)
            and ("duplicateKey" not in admission or text(admission["duplicateKey"], 1, 128))
        ):
            raise refuse("`admission` members are out of bounds.")
        return admission

    async def _create(self, request: Request) -> Response:
        async def effect(call: Call) -> Response:
            key = call.idempotency_key or ""
            principal = call.principal.subject
            stored = self.idempotency.find(
                "appointments", principal, key, "/v1/appointments", call.body
            )
            if stored is not None:
                return json_response(stored.body, stored.status)
            admission = self._validate(call.body)
            offering = self.offerings.get(admission["offering"])
            if offering is None:
                raise ProblemError(404, "offering.not-found")
            if admission["policyRevision"] != self.policy_revision:
                raise ProblemError(422, "policy.revision-stale")
            start = _parse_time(admission["start"])
            slot = next(
                (s for s in offering.slots(start, start + timedelta(days=1)) if s[0] == start),
                None,
            )
            if slot is None:
                raise ProblemError(422, "slot.invalid")
            if self.booked(offering.name, start) >= offering.capacity:
                raise ProblemError(422, "slot.unavailable")
            duplicate = admission.get("duplicateKey")
            if duplicate is not None and any(
                a["duplicateKey"] == duplicate
                and a["offering"] == offering.name
                and a["status"] == "booked"
                for a in self.appointments.values()
            ):
                raise ProblemError(422, "appointment.duplicate")
            appointment_id = str(uuid.uuid4())
            answer = {
                "appointmentId": appointment_id,
                "offering": offering.name,
                "start": _format_time(slot[0]),
                "end": _format_time(slot[1]),
                "status": "booked",
            }
            self.appointments[appointment_id] = {
                **answer,
                "startAt": slot[0],
                "party": admission["party"],
                "channel": admission["channel"],
                "duplicateKey": duplicate,
                "principal": principal,
                "idempotencyKey": key,
            }
            self.idempotency.store(
                "appointments", principal, key, "/v1/appointments", call.body, 201, answer
            )
            call.committed = True
            return json_response(answer, 201)

        operation = Operation(CREATE_APPOINTMENT, CREATE_SCOPES, True, 256, reads_body=True)
        return await self.run(request, operation, effect)

    async def _receipt_lookup(self, request: Request) -> Response:
        async def effect(call: Call) -> Response:
            stored = self.idempotency.lookup_receipt(
                "appointments",
                call.principal.subject,
                call.idempotency_key or "",
                "/v1/appointments",
                call.body,
            )
            return json_response(stored.body, 200)

        operation = Operation(RECEIPT_LOOKUP, CREATE_SCOPES, True, 256, reads_body=True)
        return await self.run(request, operation, effect)

    # -- control
    def control_routes(self) -> list[BaseRoute]:
        return [
            Route("/sandbox/appointments", problems(self._list_appointments), methods=["GET"]),
            Route("/sandbox/offerings/{name}", problems(self._put_offering), methods=["PUT"]),
            Route("/sandbox/policy", problems(self._put_policy), methods=["PUT"]),
            *super().control_routes(),
        ]

    async def _list_appointments(self, request: Request) -> Response:
        return json_response(
            {
                "appointments": [
                    {name: value for name, value in a.items() if name != "startAt"}
                    for a in self.appointments.values()
                ]
            }
        )

    async def _put_offering(self, request: Request) -> Response:
        body = await read_json_body(request)
        name = request.path_params["name"]
        try:
            self.offerings[name] = offering_from_json(name, body)
        except (ValueError, TypeError) as exc:
            raise ProblemError(400, "request.invalid", str(exc)) from exc
        return json_response(self.offerings[name].describe())

    async def _put_policy(self, request: Request) -> Response:
        body = await read_json_body(request)
        if not isinstance(body, dict) or not isinstance(body.get("policyRevision"), str):
            raise ProblemError(400, "request.invalid", "The body is {policyRevision}.")
        self.policy_revision = body["policyRevision"]
        return json_response({"policyRevision": self.policy_revision})
