"""`POST /v1/events/{workflow}/{trigger}` (06 §8): runs admitted by signed product events."""

from __future__ import annotations

import functools
from uuid import UUID

from starlette.responses import Response

from coordinator_api.audit import Audited
from coordinator_api.bodies import parse_rfc3339
from coordinator_api.edge import RequestContext
from coordinator_api.events import delivery_signature, parse_delivery_headers, signature_matches
from coordinator_api.handlers._shared import json_reply
from coordinator_api.problems import ApiProblem
from coordinator_api.wire import EventAdmitted
from coordinator_core.shell.service import AuditRequest, EventDelivery
from coordinator_core.shell.service import EventAdmitted as AdmittedByEvent
from coordinator_core.values import (
    JsonBoundsError,
    StrictJsonError,
    check_json_value,
    parse_strict_json,
)

__all__ = ["admit_event"]


async def admit_event(workflow: str, trigger: str, coordinator: RequestContext) -> Response:
    """06 §8 steps 1–11, in order. As for `start_run`, the worker loops are woken once the
    answer is sent (`RequestContext.after_answer`)."""
    state = coordinator.state
    body = coordinator.body
    if body.too_large:  # step 1
        raise ApiProblem("coordinator.request.too-large")
    binding = state.settings.event_triggers.get(trigger)
    if workflow != state.settings.workflow.workflow_id or binding is None:  # step 2
        raise ApiProblem("coordinator.event.trigger-unknown")
    headers = parse_delivery_headers(coordinator.raw_headers)  # step 3
    if headers is None:
        raise ApiProblem("coordinator.event.headers-invalid")
    event_id = headers.event_id.decode("ascii")
    entry = AuditRequest(action="event-admit", source=binding.source_name, event_id=event_id)
    async with Audited(state.journal, entry) as audit:
        expected = delivery_signature(  # step 4
            binding.signing_key,
            headers,
            method=coordinator.method,
            target=coordinator.target,
            body=body.data,
        )
        if not signature_matches(expected, headers.signature) or (
            headers.source != binding.source.encode("utf-8")
        ):
            raise ApiProblem("coordinator.event.signature-invalid")
        delivered_at = parse_rfc3339(headers.delivery_time.decode("ascii"))  # step 5
        assert delivered_at is not None
        skew = abs((state.settings.clock() - delivered_at).total_seconds())
        if skew > binding.maximum_clock_skew_seconds:
            raise ApiProblem("coordinator.event.stale")
        if headers.event_type != binding.event.encode("utf-8"):  # step 6
            raise ApiProblem("coordinator.event.type-mismatch")
        try:  # step 7
            value = parse_strict_json(body.data)
            check_json_value(value)
        except (StrictJsonError, JsonBoundsError):
            raise ApiProblem("coordinator.event.body-invalid") from None
        if state.settings.recovery_only:  # step 8 (the holds are the service's to check)
            raise ApiProblem("coordinator.event.admissions-held")
        # The request entry is made durable by the admission's commit, the response entry
        # then names the run (`Audited.act`).
        admitted = await audit.act(
            functools.partial(state.service.admit_event, after_answer=coordinator.after_answer),
            EventDelivery(
                workflow=workflow,
                trigger=trigger,
                source_name=binding.source_name,
                event_id=event_id,
                body=value,
            ),
            names_run=_run_of,
        )
        return json_reply(EventAdmitted(run_id=admitted.run_id), 201 if admitted.created else 200)


def _run_of(admitted: AdmittedByEvent) -> UUID:
    return admitted.run_id
