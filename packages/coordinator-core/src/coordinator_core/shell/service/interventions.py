"""A caller's interventions on one run (06 §5.5–§5.7, 07 §8–§9): cancel, retry-same and
reconcile, each an engine event applied to the locked run by the store's transaction."""

from __future__ import annotations

import time
import uuid
from typing import Any, Final, cast

from coordinator_core.engine import (
    CallStep,
    CancelRequested,
    Event,
    LookupReceipt,
    ReconcileRequested,
    RetrySame,
    RunState,
    advance,
)
from coordinator_core.shell.adapters import CommandFormatError, PreparedCommand
from coordinator_core.shell.execution.codec import state_of
from coordinator_core.shell.service.model import (
    BlockReason,
    Caller,
    ReconcileResult,
    RunStatus,
    ServiceRefusal,
)
from coordinator_core.shell.service.runtime import Runtime
from coordinator_core.shell.service.views import inspection
from coordinator_core.shell.store import RunSnapshot

__all__ = ["RECONCILE_BUDGET_SECONDS", "cancel", "reconcile", "retry_same"]

RECONCILE_BUDGET_SECONDS: Final = 10.0
_ABSENT: Final = "coordinator.command.run-absent"
_RACED: Final = "coordinator.command.reconcile-raced"


def cancel(context: Runtime, caller: Caller, run_id: uuid.UUID, reason: str) -> RunStatus:
    """Idempotent on runs already settled or with `cancelRequested`."""
    context.require(caller, run_id)
    now = context.now()
    snapshot = context.store.writes.request_cancel(
        run_id,
        now,
        context.decide(now, lambda _s, _p: CancelRequested()),
        reason_ref=context.secrets.audit_references.reason(reason),
    )
    if snapshot is None:
        raise ServiceRefusal(_ABSENT)
    return context.status(snapshot)


def retry_same(context: Runtime, caller: Caller, run_id: uuid.UUID, reason: str) -> RunStatus:
    now = context.now()

    def event_of(snapshot: RunSnapshot, _previous: RunState) -> Event:
        found = context.definition_of(snapshot.run)
        return RetrySame(
            binding_unchanged=found is not None
            and context.bindings.matches(snapshot.run, found[0]),
            snapshot_restores=found is not None,
            payload_erased=snapshot.run.payload_erased,
            lease_active=context.lease_active(snapshot, now),
        )

    def refused(reason: str) -> ServiceRefusal:
        return ServiceRefusal("coordinator.command.retry-refused", cast(BlockReason, reason))

    context.require(caller, run_id)
    snapshot = context.store.writes.update_run(
        run_id,
        now,
        context.decide(now, event_of, refused),
        admission_lock=True,
        action="retry-same",
        reason_ref=context.secrets.audit_references.reason(reason),
    )
    if snapshot is None:
        raise ServiceRefusal(_ABSENT)
    return context.status(snapshot)


def reconcile(context: Runtime, caller: Caller, run_id: uuid.UUID, reason: str) -> ReconcileResult:
    """Ask the product for the receipt of the uncertain command, then apply the answer if the
    run has not moved meanwhile."""
    snapshot = context.require(caller, run_id)
    run = snapshot.run
    now = context.now()
    found = context.definition_of(run)
    if found is None:
        raise ServiceRefusal("coordinator.command.reconcile-refused", "not-uncertain")
    snap, definition = found
    previous = state_of(context.sealer, snapshot)
    request = ReconcileRequested(
        binding_unchanged=context.bindings.matches(run, snap),
        payload_erased=run.payload_erased,
        lease_active=context.lease_active(snapshot, now),
    )
    asked = advance(definition, previous, request, now, context.keys_for(run.start_identity))
    if asked.refused is not None:
        if asked.refused == "no-receipt":
            raise ServiceRefusal("coordinator.command.reconciliation-unavailable")
        raise ServiceRefusal(
            "coordinator.command.reconcile-refused", cast(BlockReason, asked.refused)
        )
    lookup = next(c for c in asked.commands if isinstance(c, LookupReceipt))
    spec = definition.steps.get(lookup.step)
    action = spec.alias.action if isinstance(spec, CallStep) else None
    record = previous.current
    try:
        frozen = PreparedCommand.from_frozen(
            lookup.command, action=action, preparation=record.preparation
        )
    except CommandFormatError:
        raise ServiceRefusal("coordinator.command.reconcile-refused", "not-uncertain") from None
    answer_event = context.adapters.lookup_receipt(
        lookup, frozen, attempt_deadline=time.monotonic() + RECONCILE_BUDGET_SECONDS
    )
    answers: list[str | None] = []
    later = context.now()

    def event_of(locked: RunSnapshot, fresh: RunState) -> Event:
        current = fresh.current
        if (
            current.step != lookup.step
            or current.command != lookup.command
            or context.lease_active(locked, later)
        ):
            raise ServiceRefusal(_RACED)
        return answer_event

    def refused(_reason: str) -> ServiceRefusal:
        return ServiceRefusal(_RACED)

    after = context.store.writes.update_run(
        run_id,
        later,
        context.decide(later, event_of, refused, answers),
        action="reconcile",
        reason_ref=context.secrets.audit_references.reason(reason),
    )
    if after is None:
        raise ServiceRefusal(_ABSENT)
    answer = answers[-1] if answers else None
    result = {
        "confirmed": "settled",
        "receipt-expired": "receipt-expired",
        "unavailable": "unavailable",
    }.get(answer or "", "unresolved")
    return ReconcileResult(cast(Any, result), inspection(context, after))
