"""What event sources and products send in: event admission (06 §8 steps 8–11) and review
completions (06 §9)."""

from __future__ import annotations

import uuid
from typing import Final

from coordinator_core.errors import CoordinatorError
from coordinator_core.functions.errors import FunctionError
from coordinator_core.shell.service.admission import insert_run, store_admission, taking
from coordinator_core.shell.service.model import EventAdmitted, EventDelivery, ServiceRefusal
from coordinator_core.shell.service.runtime import Runtime
from coordinator_core.values import JsonBoundsError, check_json_value

__all__ = ["admit_event", "complete_review"]

_HELD: Final = "coordinator.event.admissions-held"
_HOLD_CODES: Final = frozenset(
    {"coordinator.command.restore-admissions-held", "coordinator.command.restore-hold"}
)


def admit_event(context: Runtime, delivery: EventDelivery) -> EventAdmitted:
    """Holds, identity, mapping, then the admission transaction; a replay answers its run."""
    reads = context.store.reads
    holds = reads.hold_state()
    if holds.restore_hold or holds.admissions_hold:
        raise ServiceRefusal(_HELD)
    key, database_id = context.key, context.database_id
    owner = key.owner_event(database_id, delivery.source_name, delivery.trigger)
    start = key.start_identity(database_id, owner, delivery.workflow, delivery.event_id)
    digest = key.input_digest_event(start, delivery.body)
    existing = reads.find_run(start)
    if existing is not None:
        if existing.input_digest != digest:
            raise ServiceRefusal("idempotency.key-reused")
        return EventAdmitted(existing.run_id, created=False)
    definition = context.definition
    trigger = definition.triggers.get(delivery.trigger)
    source = context.deployment.event_sources.get(delivery.source_name)
    if trigger is None or source is None:
        raise ServiceRefusal("coordinator.event.trigger-unknown")
    # TODO(event time): EventDelivery carries no ce-time; the argument omits `time`.
    argument = {
        "id": delivery.event_id,
        "source": source.source,
        "type": trigger.event,
        "data": delivery.body,
    }
    try:
        mapped = definition.evaluate(trigger.input, event=argument)
    except FunctionError:
        raise ServiceRefusal("coordinator.event.mapping-invalid") from None
    try:
        check_json_value(mapped)
    except JsonBoundsError:
        raise ServiceRefusal("coordinator.event.input-invalid") from None
    if not definition.input_valid(mapped):
        raise ServiceRefusal("coordinator.event.input-invalid")
    now = context.now()
    taken = taking(context)
    prepared = store_admission(
        context,
        run_input=mapped,
        owner=owner,
        start_identity=start,
        input_digest=digest,
        origin="event",
        trigger=delivery.trigger,
        expected_revision=None,
        input_problem=None,
        now=now,
        taking=taken,
    )
    try:
        result = insert_run(context, prepared, now, taken)
    except CoordinatorError as error:
        if error.code in _HOLD_CODES:
            raise ServiceRefusal(_HELD) from None
        raise
    return EventAdmitted(result.run.run_id, result.created)


def complete_review(context: Runtime, connection: str, request_id: uuid.UUID) -> None:
    """Move the next observation of the waits on this review forward; idempotent."""
    reference = context.key.completion_reference(context.database_id, connection, str(request_id))
    context.store.writes.advance_completion_waits(
        reference, context.now(), context.policy.observation_floor_seconds
    )
