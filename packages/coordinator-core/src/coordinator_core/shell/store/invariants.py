"""What every write keeps, whatever the transition (07 §1, §2.1, §5)."""

from __future__ import annotations

import secrets
from typing import Final

from coordinator_core.shell.store.records import Claim, RunSnapshot, RunWrite, StoredStep
from coordinator_core.shell.store.schema import RUN_IMMUTABLE, RUN_OWN, STEP_IMMUTABLE

_RUN_OWN_FIXED: Final = tuple(name for name in RUN_IMMUTABLE if name in RUN_OWN)
_RUN_STATE_FIXED: Final = tuple(name for name in RUN_IMMUTABLE if name not in RUN_OWN)
_STEP_FIXED: Final = tuple(
    ("effect" if name == "effect_kind" else name, name) for name in STEP_IMMUTABLE[1:]
)
"""(record field, column) of every immutable column of a record but `run_id`."""

__all__ = ["StaleLease", "StoreInvariantError", "check_write", "new_token"]


class StaleLease(Exception):
    """The claim no longer holds its record (lease taken over, record moved on, or — for a
    mid-attempt fence — the lease expired or a restore hold is set). Nothing was written: the
    attempt's result is discarded (`lease-stale`, 07 §7.2)."""


class StoreInvariantError(RuntimeError):
    """A write broke a rule the store guarantees (a command replaced, a `sent` flag cleared, an
    immutable run column changed, a record created twice…). Nothing was written."""


def new_token() -> str:
    return secrets.token_hex(16)


def check_write(
    before: RunSnapshot, write: RunWrite, *, may_lease: bool = False, held: Claim | None = None
) -> None:
    """The invariants every write keeps, whatever the transition (07 §1, §2.1, §5). Only a
    claim, or a finish that carries the run on (07 §7.7), may lease a record (`may_lease`),
    and then one at most; the run never has two leased records."""
    old_run, new_run = before.run, write.run
    if new_run != old_run:
        for name in _RUN_OWN_FIXED:
            if getattr(old_run, name) != getattr(new_run, name):
                raise StoreInvariantError(f"The run column {name} cannot change.")
        for name in _RUN_STATE_FIXED:
            if getattr(old_run.state, name) != getattr(new_run.state, name):
                raise StoreInvariantError(f"The run column {name} cannot change.")
    if old_run.state.cancel_requested and not new_run.state.cancel_requested:
        raise StoreInvariantError("cancelRequested is never cleared.")
    names = [stored.step for stored in write.steps]
    if len(set(names)) != len(names):
        raise StoreInvariantError("A write names a step record twice.")
    known = {stored.step for stored in before.steps} | set(names)
    if new_run.state.current_step not in known:
        raise StoreInvariantError("The run's current step has no record.")
    newly_leased = 0
    for stored in write.steps:
        if stored.run_id != old_run.run_id:
            raise StoreInvariantError("A step record belongs to another run.")
        old = before.step(stored.step)
        if stored.record.state == "leased" and (old is None or old.record.state != "leased"):
            if not may_lease:
                raise StoreInvariantError("Only a claim or a continuation leases a record.")
            newly_leased += 1
        if old is not None:
            _check_record(old, stored)
    written = {stored.step: stored for stored in write.steps}
    leased = [
        step
        for step in known
        if (found := written.get(step) or before.step(step)) is not None
        and found.record.state == "leased"
    ]
    if newly_leased > 1 or len(leased) > 1:
        raise StoreInvariantError("A run has at most one leased record.")


def _check_record(old: StoredStep, new: StoredStep) -> None:
    was, now = old.record, new.record
    if old.run_id != new.run_id:
        raise StoreInvariantError("The step column run_id cannot change.")
    for name, column in _STEP_FIXED:
        if getattr(was, name) != getattr(now, name):
            raise StoreInvariantError(f"The step column {column} cannot change.")
    if now.generation < was.generation:
        raise StoreInvariantError("A record's generation never decreases.")
    if (was.sent and not now.sent) or (was.command_prepared and not now.command_prepared):
        raise StoreInvariantError("sent and commandPrepared are never cleared.")
    if old.command is not None and new.command != old.command:
        completing = not old.preparation_frozen and new.preparation_frozen and new.command
        if not completing:
            raise StoreInvariantError("A frozen command is never replaced.")
    if old.preparation_frozen and not new.preparation_frozen:
        raise StoreInvariantError("A frozen preparation is never removed.")
