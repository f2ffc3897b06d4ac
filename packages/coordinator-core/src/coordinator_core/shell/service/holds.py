"""The operator side (06 §7, §10): readiness, doctor, the restore and admission holds, and
retention (07 §12–§13)."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Final

from coordinator_core.engine import EngineInvariantError, Instant, RestoreHold
from coordinator_core.errors import CoordinatorError, Diagnostic
from coordinator_core.shell.audit import ZERO_HASH
from coordinator_core.shell.audit.heads import journal_ends
from coordinator_core.shell.audit.witness import RestoreWitness
from coordinator_core.shell.execution.codec import state_of, write_of
from coordinator_core.shell.service.model import RUN_STATUSES, Doctor, DoctorState, ServiceRefusal
from coordinator_core.shell.service.runtime import Runtime
from coordinator_core.shell.store import Decide, HoldState, RunSnapshot, RunWrite

__all__ = [
    "READY_CACHE_SECONDS",
    "Readiness",
    "doctor",
    "release_admission_hold",
    "release_restore_hold",
    "restore_hold",
    "retain",
]

READY_CACHE_SECONDS: Final = 30.0
STORE_UNAVAILABLE: Final = "coordinator.command.store-unavailable"


class Readiness:
    """06 §10 readiness except recovery-only mode (which the API knows): the store verifies,
    no hold is set, the journal can append and the live-binding check passes (its result is
    kept for `READY_CACHE_SECONDS`; a check the unreachable store did not let run is not kept,
    so readiness returns with the store, 09 §5 step 7). Answers None when ready, else the code
    of what is not: `coordinator.command.store-unavailable` while the store is away (09 §5
    step 7), the store check's refusal, a hold, the journal, or the live-binding check."""

    def __init__(self, context: Runtime) -> None:
        self._context = context
        self._until = 0.0
        self._bindings: str | None = LIVE_BINDING_CONFLICT
        self._lock = threading.Lock()

    def __call__(self) -> str | None:
        context = self._context
        try:
            control = context.store.verify()
        except CoordinatorError as error:
            return error.code
        if control.restore_hold:
            return "coordinator.command.restore-hold"
        if control.admissions_hold:
            return "coordinator.command.restore-admissions-held"
        if context.audit is not None and not context.audit.ready:
            return "coordinator.command.audit-unavailable"
        with self._lock:
            if time.monotonic() >= self._until:
                try:
                    matched = context.bindings.unsettled_match(context.now())
                    self._bindings = None if matched else LIVE_BINDING_CONFLICT
                except CoordinatorError as error:
                    if error.code == STORE_UNAVAILABLE:
                        return STORE_UNAVAILABLE  # the check could not run: nothing cached
                    self._bindings = error.code
                self._until = time.monotonic() + READY_CACHE_SECONDS
            return self._bindings


LIVE_BINDING_CONFLICT: Final = "coordinator.command.live-binding-conflict"


def doctor(context: Runtime) -> Doctor:
    """06 §7.1 from one store read transaction and the process's journal."""
    summary = context.store.reads.summary(context.now())
    audit = context.audit
    state = DoctorState(
        database_id=summary.database_id,
        store="postgresql" if summary.store == "postgresql" else "sqlite",
        schema_version=summary.schema_version,
        active_package_digest=summary.active_package_digest or "",
        active_revision=summary.active_revision or "",
        restore_hold=summary.restore_hold,
        admissions_hold=summary.admissions_hold,
        audit_ready=audit.ready if audit is not None else True,
        restore_review=summary.restore_review,
        statuses={status: int(summary.statuses.get(status, 0)) for status in RUN_STATUSES},
        unknown_effects=summary.unknown_effects,
        waits=summary.waits,
        oldest_due_at=summary.oldest_due_at,
        terminal_payloads=summary.terminal_payloads,
        oldest_terminal_payload_at=summary.oldest_terminal_payload_at,
        audit_head=audit.head if audit is not None else ZERO_HASH,
    )
    ready = summary.active_package_digest == context.package.package_digest
    return Doctor(activation_ready=ready, state=state)


def _review(context: Runtime, now: Instant) -> Decide:
    inner = context.decide(now, lambda _s, _p: RestoreHold())

    def review(snapshot: RunSnapshot) -> RunWrite | None:
        try:
            return inner(snapshot)
        except (ServiceRefusal, EngineInvariantError):
            # Without a definition the run is still held for review (07 §12 step 3).
            previous = state_of(context.sealer, snapshot)
            held = replace(previous, restore_review=True)
            return write_of(context.sealer, snapshot, previous, held, now)

    return review


def restore_hold(context: Runtime, reason: str) -> HoldState:
    """06 §7.2 / 07 §12 step 3; idempotent. The journal as it is now becomes the store's
    journal heads, saved with the identity of the database the store is in now, and the
    restore witness names the same lines (07 §12.1 items 2 and 5): the reviewed store goes on
    from this journal in this database, so the ordinary service starts on it again once the
    holds are released."""
    now = context.now()
    heads = journal_ends(context.audit.directory) if context.audit is not None else None
    state = context.store.operator.set_restore_hold(
        now,
        _review(context, now),
        heads,
        reason_ref=context.secrets.audit_references.reason(reason),
    )
    witness = context.deployment.restore_witness
    if heads is not None and witness is not None:
        try:
            RestoreWitness(Path(witness)).replace(heads)
        except OSError:
            raise CoordinatorError(
                Diagnostic(
                    code="coordinator.command.audit-unavailable",
                    message="The restore witness file cannot be rewritten; set the hold again.",
                )
            ) from None
    return state


def release_restore_hold(context: Runtime, reason: str) -> HoldState:
    """06 §7.3; idempotent."""
    evidence = context.secrets.audit_references.restore_evidence(reason)
    return context.store.operator.release_restore_hold(evidence)


def release_admission_hold(context: Runtime, reason: str) -> HoldState:
    """06 §7.4, after the API checked both attestations."""
    evidence = context.secrets.audit_references.admission_recovery(reason)
    return context.store.operator.release_admission_hold(
        evidence, admission_history_complete=True, prior_deployment_fenced=True
    )


def retain(context: Runtime, before: Instant, limit: int) -> int:
    """06 §7.5 / 07 §13: erase up to `limit` eligible payloads; the number erased."""
    return context.store.operator.erase_settled_before(before, limit, context.now())
