"""The 06 §11 views of a stored run: `RunStatus`, `StepStatus`, `EffectStatus`.

Built from the store's values only; nothing here opens a sealed value except the terminal
output, the one run datum the API ever returns (06 §12). Inputs, step outputs and commands
never leave.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from coordinator_core.shell.service.model import EffectStatus, RunStatus, StepStatus
from coordinator_core.shell.store import ListedRun, RunSnapshot, StepAttempt, StoredRun, StoredStep

__all__ = ["effects_of", "listed_status_of", "run_status_of", "step_status_of"]


def run_status_of(snapshot: RunSnapshot, output: Callable[[StoredRun], Any]) -> RunStatus:
    """06 §11.1. `output` opens the sealed terminal output (called only when there is one)."""
    run = snapshot.run
    current = snapshot.step(run.state.current_step)
    pending = current is not None and current.record.state == "pending"
    return listed_status_of(
        ListedRun(
            run,
            current.record.due_at if pending and current is not None else None,
            any(stored.record.effect_state == "unknown" for stored in snapshot.steps),
        ),
        output,
    )


def listed_status_of(listed: ListedRun, output: Callable[[StoredRun], Any]) -> RunStatus:
    """06 §11.1 of a run as a list page reads it (the store computes the current record's due
    instant and the unknown-effect flag); `output` as for `run_status_of`."""
    run = listed.run
    has_output = run.terminal_output is not None and run.state.outcome is not None
    return RunStatus(
        run=run,
        next_due_at=listed.next_due_at,
        uncertain=listed.uncertain,
        output=output(run) if has_output else None,
    )


def step_status_of(
    stored: StoredStep,
    awaits: Mapping[str, tuple[str, str]],
    attempts: Mapping[str, tuple[tuple[StepAttempt, ...], int]] | None = None,
) -> StepStatus:
    """06 §11.3. `awaits` maps a `wait-for` step to its (waited call, completion name);
    `attempts` each step to its latest ended attempts and their total."""
    record = stored.record
    leased = record.state == "leased" and stored.lease is not None
    recent, total = (attempts or {}).get(record.step, ((), 0))
    return StepStatus(
        record=record,
        lease_expires_at=stored.lease.expires_at if leased and stored.lease is not None else None,
        awaits=awaits.get(record.step, ("", "")) if record.type == "wait-for" else None,
        attempts=recent,
        attempt_count=total,
    )


def effects_of(snapshot: RunSnapshot) -> list[EffectStatus]:
    """06 §11.4: one per prepared mutation or evaluation, in order of first attempt (the
    engine's `RunState.effects` over the stored records)."""
    state = replace(snapshot.run.state, records=snapshot.records)
    return [EffectStatus(*effect) for effect in state.effects]
