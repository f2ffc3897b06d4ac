"""What every write keeps, whatever the transition (07 §1, §2.1, §5), and the lease columns
the store owns (a new random token, the lease owner and expiry, the claim)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime

from coordinator_core.shell.store.rows import Claim, RunSnapshot, RunWrite, StepRow
from coordinator_core.shell.store.statements import RUN_IMMUTABLE, STEP_IMMUTABLE


class StaleLease(Exception):
    """The claim no longer holds its record (lease taken over, record moved on, or — for a
    mid-attempt fence — the lease expired or a restore hold is set). Nothing was written: the
    attempt's result is discarded (`lease-stale`, 07 §7.2)."""


class StoreInvariantError(RuntimeError):
    """A write broke a rule the store guarantees (a command replaced, a `sent` flag cleared, an
    immutable run column changed, a record created twice…). Nothing was written."""


def new_token() -> str:
    return secrets.token_hex(16)


@dataclass(frozen=True, slots=True)
class Lease:
    owner: str
    expires: datetime


def claim_of(record: StepRow, snapshot: RunSnapshot) -> Claim:
    assert record.lease_token is not None and record.lease_owner is not None
    assert record.attempt_started_at is not None and record.lease_expires_at is not None
    return Claim(
        run_id=record.run_id,
        step=record.step,
        generation=record.generation,
        attempt=record.attempt,
        lease_token=record.lease_token,
        lease_owner=record.lease_owner,
        attempt_started_at=record.attempt_started_at,
        lease_expires_at=record.lease_expires_at,
        snapshot=snapshot,
    )


def check_write(
    before: RunSnapshot, write: RunWrite, *, may_lease: bool = False, held: Claim | None = None
) -> None:
    """The invariants every write keeps, whatever the transition (07 §1, §2.1, §5). Only a
    claim, or a finish that carries the run on (07 §7.7), may lease a record (`may_lease`),
    and then one at most; the run never has two leased records."""
    old_run, new_run = before.run, write.run
    for name in RUN_IMMUTABLE:
        if getattr(old_run, name) != getattr(new_run, name):
            raise StoreInvariantError(f"The run column {name} cannot change.")
    if old_run.cancel_requested and not new_run.cancel_requested:
        raise StoreInvariantError("cancelRequested is never cleared.")
    names = [record.step for record in write.steps]
    if len(set(names)) != len(names):
        raise StoreInvariantError("A write names a step record twice.")
    known = {record.step for record in before.steps} | set(names)
    if new_run.current_step not in known:
        raise StoreInvariantError("The run's current step has no record.")
    newly_leased = 0
    for record in write.steps:
        if record.run_id != old_run.run_id:
            raise StoreInvariantError("A step record belongs to another run.")
        old = before.step(record.step)
        if record.state == "leased" and (old is None or old.state != "leased"):
            if not may_lease:
                raise StoreInvariantError("Only a claim or a continuation leases a record.")
            newly_leased += 1
        if old is not None:
            _check_record(old, record)
    written = {record.step: record for record in write.steps}
    leased = [
        step
        for step in known
        if (written.get(step) or before.step(step)) is not None
        and (written.get(step) or before.step(step)).state == "leased"  # type: ignore[union-attr]
    ]
    if newly_leased > 1 or len(leased) > 1:
        raise StoreInvariantError("A run has at most one leased record.")


def _check_record(old: StepRow, new: StepRow) -> None:
    for name in STEP_IMMUTABLE:
        if getattr(old, name) != getattr(new, name):
            raise StoreInvariantError(f"The step column {name} cannot change.")
    if new.generation < old.generation:
        raise StoreInvariantError("A record's generation never decreases.")
    if (old.sent and not new.sent) or (old.command_prepared and not new.command_prepared):
        raise StoreInvariantError("sent and commandPrepared are never cleared.")
    if old.command is not None and new.command != old.command:
        completing = not old.preparation_frozen and new.preparation_frozen and new.command
        if not completing:
            raise StoreInvariantError("A frozen command is never replaced.")
    if old.preparation_frozen and not new.preparation_frozen:
        raise StoreInvariantError("A frozen preparation is never removed.")
