"""The read side (06 §5.2–§5.4): a run's status, the keyset-paginated list with its signed
cursor, and the inspection with its recovery summary."""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import Final, cast

from coordinator_core.engine import (
    CallStep,
    Instant,
    ReconcileRequested,
    RetrySame,
    WaitForStep,
    reconcile_blocked_by,
    retry_blocked_by,
    to_canonical,
)
from coordinator_core.errors import CoordinatorError
from coordinator_core.shell.execution.codec import state_of
from coordinator_core.shell.service.model import (
    AttemptPage,
    BlockReason,
    Caller,
    Recovery,
    RunInspection,
    RunList,
    RunQuery,
    RunStatus,
    ServiceRefusal,
)
from coordinator_core.shell.service.runtime import Runtime
from coordinator_core.shell.service.shapes import effects_of, step_status_of
from coordinator_core.shell.store import RunPosition, RunSnapshot, StepAttempt

__all__ = ["get_run", "inspect_run", "inspection", "list_runs", "step_attempts"]


def get_run(context: Runtime, caller: Caller, run_id: uuid.UUID) -> RunStatus | None:
    listed = context.store.reads.get_run_status(run_id)
    if listed is None or not context.visible(caller, listed.run):
        return None
    return context.listed_status(listed)


# -- the list and its cursor ----------------------------------------------------------------------


def _cursor_mac(context: Runtime, payload: str, caller: Caller) -> str:
    parts = [context.database_id, payload, context.owner_of(caller)]
    return context.key.commitment("cursor", parts)[:32]


def _encode_cursor(context: Runtime, position: RunPosition, query: RunQuery, caller: Caller) -> str:
    payload = to_canonical(
        {
            "v": 1,
            "a": position.admitted_at,
            "r": str(position.run_id),
            "s": query.status,
            "w": query.workflow,
        }
    )
    text = base64.urlsafe_b64encode(payload.encode()).rstrip(b"=").decode("ascii")
    return f"{text}.{_cursor_mac(context, payload, caller)}"


def _decode_cursor(context: Runtime, cursor: str, query: RunQuery, caller: Caller) -> RunPosition:
    """The position a cursor names; refused unless it verifies for this caller and query."""
    invalid = ServiceRefusal("coordinator.request.cursor-invalid")
    text, _, mac = cursor.partition(".")
    try:
        payload = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode("utf-8")
        data = json.loads(payload)
    except (binascii.Error, ValueError):
        raise invalid from None
    if not hmac.compare_digest(mac, _cursor_mac(context, payload, caller)):
        raise invalid
    if not isinstance(data, dict) or data.get("v") != 1:
        raise invalid
    if data.get("s") != query.status or data.get("w") != query.workflow:
        raise invalid
    try:
        return RunPosition(int(data["a"]), uuid.UUID(str(data["r"])))
    except (KeyError, TypeError, ValueError):
        raise invalid from None


def list_runs(context: Runtime, caller: Caller, query: RunQuery) -> RunList:
    """Runs visible to `caller`, newest first, keyset-paginated."""
    after = None if query.cursor is None else _decode_cursor(context, query.cursor, query, caller)
    reads = context.store.reads
    page = reads.list_runs(
        owner=None if caller.operator else context.owner_of(caller),
        workflows=caller.workflows,
        status=query.status,
        workflow=query.workflow,
        after=after,
        limit=query.limit,
    )
    statuses = [context.listed_status(listed) for listed in page.listed]
    cursor = None if page.next is None else _encode_cursor(context, page.next, query, caller)
    return RunList(statuses, cursor)


# -- the inspection -------------------------------------------------------------------------------


def _recovery(context: Runtime, snapshot: RunSnapshot, now: Instant) -> Recovery:
    run = snapshot.run
    status = run.state.status
    found = context.definition_of(run)
    if found is None:
        reason: BlockReason = (
            "cancelled"
            if status in ("cancelled", "cancelled-after-effect")
            else "terminal"
            if status in ("finished", "expired")
            else "snapshot-incompatible"
        )
        return Recovery(False, reason, False, reason)
    snap, definition = found
    binding = context.bindings.matches(run, snap)
    lease = context.lease_active(snapshot, now)
    retrying = RetrySame(
        binding_unchanged=binding, payload_erased=run.payload_erased, lease_active=lease
    )
    reconciling = ReconcileRequested(
        binding_unchanged=binding, payload_erased=run.payload_erased, lease_active=lease
    )
    # The first conditions of 07 §9.1 (`cancelled`, `terminal`) and of §9.2 (an uncertain
    # `unknown` call) read no payload: a run they block (every finished run) is answered
    # without opening its sealed input, commands and outputs.
    sealed = replace(run.state, records=snapshot.records)
    retry = retry_blocked_by(definition, sealed, retrying, now)
    current = sealed.current
    if retry not in ("cancelled", "terminal") or (current.state == "unknown" and current.uncertain):
        try:
            state = state_of(context.sealer, snapshot)
        except CoordinatorError:
            return Recovery(False, "snapshot-incompatible", False, "snapshot-incompatible")
        retry = retry_blocked_by(definition, state, retrying, now)
        reconcile = reconcile_blocked_by(definition, state, reconciling)
    else:
        reconcile = reconcile_blocked_by(definition, sealed, reconciling)
    spec = definition.steps.get(run.state.current_step)
    operation = spec.alias.operation if isinstance(spec, CallStep) else None
    return Recovery(
        retry_allowed=retry is None,
        retry_blocked_by=cast(BlockReason | None, retry),
        reconcile_allowed=reconcile is None,
        reconcile_blocked_by=cast(BlockReason | None, reconcile),
        operation=operation,
    )


def inspection(
    context: Runtime,
    snapshot: RunSnapshot,
    attempts: Mapping[str, tuple[tuple[StepAttempt, ...], int]] | None = None,
) -> RunInspection:
    """06 §11.2 of one locked or read snapshot, with each step's latest ended attempts (read
    with it, or afterwards when not given)."""
    if attempts is None:
        attempts = context.store.reads.recent_attempts(snapshot.run.run_id)
    found = context.definition_of(snapshot.run)
    waits: dict[str, tuple[str, str]] = {}
    if found is not None:
        snap, definition = found
        raw_steps = snap.workflow.get("steps") or {}
        for step_id, spec in definition.steps.items():
            if isinstance(spec, WaitForStep):
                raw = raw_steps.get(step_id) or {}
                waits[step_id] = (spec.call, str(raw.get("completion", "")))
    return RunInspection(
        run=context.status(snapshot),
        steps=[step_status_of(row, waits, attempts) for row in snapshot.steps],
        effects=effects_of(snapshot),
        recovery=_recovery(context, snapshot, context.now()),
    )


def inspect_run(context: Runtime, caller: Caller, run_id: uuid.UUID) -> RunInspection | None:
    found = context.store.reads.inspect_run(run_id)
    if found is None or not context.visible(caller, found[0].run):
        return None
    snapshot, attempts = found
    return inspection(context, snapshot, attempts)


# -- a step's attempts, paged ---------------------------------------------------------------------

_STEP_ID: Final = re.compile(r"[a-z][a-z0-9_-]{0,63}")
"""A step id's form (01 §3), the check left when the run's definition does not restore."""


def _attempts_cursor(
    context: Runtime, caller: Caller, run_id: uuid.UUID, step: str, position: tuple[int, int]
) -> str:
    payload = to_canonical(
        {"v": 1, "r": str(run_id), "s": step, "g": position[0], "a": position[1]}
    )
    text = base64.urlsafe_b64encode(payload.encode()).rstrip(b"=").decode("ascii")
    return f"{text}.{_cursor_mac(context, payload, caller)}"


def _attempts_position(
    context: Runtime, caller: Caller, run_id: uuid.UUID, step: str, cursor: str
) -> tuple[int, int]:
    """The position an attempts cursor names; refused unless it verifies for this caller,
    run and step."""
    invalid = ServiceRefusal("coordinator.request.cursor-invalid")
    text, _, mac = cursor.partition(".")
    try:
        payload = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode("utf-8")
        data = json.loads(payload)
    except (binascii.Error, ValueError):
        raise invalid from None
    if not hmac.compare_digest(mac, _cursor_mac(context, payload, caller)):
        raise invalid
    if not isinstance(data, dict) or data.get("v") != 1:
        raise invalid
    if data.get("r") != str(run_id) or data.get("s") != step:
        raise invalid
    generation, attempt = data.get("g"), data.get("a")
    if not isinstance(generation, int) or not isinstance(attempt, int):
        raise invalid
    return generation, attempt


def step_attempts(
    context: Runtime,
    caller: Caller,
    run_id: uuid.UUID,
    step: str,
    cursor: str | None,
    limit: int,
) -> AttemptPage | None:
    """A step's ended attempts, newest first, a page at a time (None when the run is absent or
    not visible). `coordinator.command.step-absent` for a step its definition does not have (a
    step it has but the run has not entered has no attempts: an empty page)."""
    reads = context.store.reads
    run = reads.get_run(run_id)
    if run is None or not context.visible(caller, run):
        return None
    found = context.definition_of(run)
    known = _STEP_ID.fullmatch(step) if found is None else step in found[1].steps
    if not known:
        raise ServiceRefusal("coordinator.command.step-absent")
    before = None if cursor is None else _attempts_position(context, caller, run_id, step, cursor)
    page, after = reads.attempts(run_id, step, before=before, limit=limit)
    following = None if after is None else _attempts_cursor(context, caller, run_id, step, after)
    return AttemptPage(page, following)
