"""The bridge between store rows and engine state: open, convert, seal (07 §10, §14.1).

The store keeps sealed bytes and datetimes; the engine keeps canonical JSON text and integer
milliseconds. `state_of` opens a locked `RunSnapshot` into the engine's `RunState`; `write_of`
turns the state an `advance` produced back into the `RunWrite` the store checks and commits.
A value is sealed again only when its plaintext changed: sealing draws a fresh nonce, and the
store refuses to see a frozen command "replaced" by another envelope of the same bytes.

Also here, because the worker and the service both need them: `DefinitionCache` (restored
snapshots by definition digest, 07 §7.2 RECOMMENDED) and `RunKeys` (the engine's `Keys` over the
deployment's admission key, 07 §3).
"""

from __future__ import annotations

import base64
import json
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from coordinator_core.definition.restore import restore_definition
from coordinator_core.definition.snapshot import Snapshot
from coordinator_core.engine import (
    Definition,
    RunState,
    StepRecord,
    StepRoute,
    TimingPolicy,
    to_canonical,
)
from coordinator_core.errors import CoordinatorError, Diagnostic
from coordinator_core.evolve import evolve
from coordinator_core.shell.sealing import AdmissionKey, Purpose, Sealer
from coordinator_core.shell.store import (
    RunRow,
    RunSnapshot,
    RunWrite,
    StepRow,
    from_epoch_ms,
    to_epoch_ms,
)
from coordinator_core.values import canonical_json

__all__ = [
    "DefinitionCache",
    "RunKeys",
    "overlay",
    "record_of",
    "refreshed",
    "row_of",
    "seal_value",
    "sealed_snapshot",
    "state_of",
    "write_of",
]


def _ms(value: datetime | None) -> int | None:
    return None if value is None else to_epoch_ms(value)


def _dt(value: int | None) -> datetime | None:
    return None if value is None else from_epoch_ms(value)


def _protected_state_invalid() -> CoordinatorError:
    return CoordinatorError(Diagnostic("protected-state-invalid", path=""))


def seal_value(
    sealer: Sealer, value: Any, run_id: uuid.UUID, purpose: Purpose, step: str = ""
) -> bytes:
    """The stored bytes of a sealed value: the canonical JSON of its envelope object."""
    return canonical_json(sealer.seal(value, run_id=str(run_id), purpose=purpose, step=step))


def _open(
    sealer: Sealer, stored: bytes, run_id: uuid.UUID, purpose: Purpose, step: str = ""
) -> Any:
    try:
        envelope = json.loads(stored)
    except (ValueError, UnicodeDecodeError):
        raise _protected_state_invalid() from None
    return sealer.open(envelope, run_id=str(run_id), purpose=purpose, step=step)


def _open_text(
    sealer: Sealer, stored: bytes | None, run_id: uuid.UUID, purpose: Purpose, step: str = ""
) -> str | None:
    if stored is None:
        return None
    return to_canonical(_open(sealer, stored, run_id, purpose, step))


def sealed_snapshot(sealer: Sealer, snapshot: Snapshot, run_id: uuid.UUID) -> bytes:
    """The run's sealed snapshot (purpose `snapshot`): the canonical snapshot document."""
    return seal_value(sealer, json.loads(snapshot.canonical), run_id, "snapshot")


# -- rows → engine ------------------------------------------------------------------------------


def record_of(sealer: Sealer, row: StepRow) -> StepRecord:
    """The engine's view of one step record (sealed parts opened)."""
    command: str | None = None
    preparation: str | None = None
    if row.command is not None:
        parts = sealer.open_command(json.loads(row.command), run_id=str(row.run_id), step=row.step)
        command = to_canonical(parts.request)
        if parts.preparation is not None:
            preparation = base64.b64encode(parts.preparation).decode("ascii")
    return StepRecord(
        step=row.step,
        type=row.type,
        state=row.state,
        entered_at=to_epoch_ms(row.entered_at),
        pure=row.pure,
        generation=row.generation,
        attempt=row.attempt,
        claims=row.claims,
        due_at=_ms(row.due_at),
        attempt_started_at=_ms(row.attempt_started_at),
        finished_at=_ms(row.finished_at),
        awaiting=cast(Any, row.awaiting),
        route=None if row.route_kind is None else StepRoute(row.route_kind, row.route_label),
        failure_code=row.failure_code,
        detail=row.detail,
        operation=row.operation,
        effect=row.effect_kind,
        command=command,
        preparation=preparation,
        dispatched=row.dispatched,
        sent=row.sent,
        uncertain=row.uncertain,
        receipt_expired=row.receipt_expired,
        settled_by=row.settled_by,
        output=_open_text(sealer, row.output, row.run_id, "output", row.step),
        wait_until=_ms(row.wait_until),
        wait_started_at=_ms(row.wait_started_at),
        timeout_at=_ms(row.timeout_at),
        interval_seconds=row.interval_seconds,
        observations=row.observations,
        last_observed_at=_ms(row.last_observed_at),
        completion_ref=row.completion_ref,
    )


def state_of(sealer: Sealer, snapshot: RunSnapshot) -> RunState:
    """The engine's `RunState` of a run read from the store. An erased payload reads as JSON
    `null` (nothing evaluates on an erased run: it is settled and never claimable)."""
    run = snapshot.run
    run_input = _open_text(sealer, run.input, run.run_id, "input")
    return RunState(
        status=run.status,
        current_step=run.current_step,
        admitted_at=to_epoch_ms(run.admitted_at),
        deadline_at=to_epoch_ms(run.deadline_at),
        input=run_input if run_input is not None else "null",
        policy=TimingPolicy.from_json(run.policy),
        cancel_mode=run.cancel_mode,
        cancel_requested=run.cancel_requested,
        restore_review=run.restore_review,
        completed_at=_ms(run.completed_at),
        outcome=run.outcome,
        output=_open_text(sealer, run.terminal_output, run.run_id, "terminal"),
        failure_code=run.failure_code,
        records=tuple(record_of(sealer, row) for row in snapshot.steps),
    )


def refreshed(sealer: Sealer, state: RunState, known: RunRow, fresh: RunRow) -> RunState:
    """`state` — the run as the lease holder knows it, read when `known` was — with the run
    columns another transaction may have changed since (a cancel, a restore review) taken
    from `fresh`, read under the fence's locks. Records are the holder's: while a record is
    leased nobody else changes the run's records (a restore hold takes the lease over, which
    the fence detects)."""
    if fresh == known:
        return state
    output = state.output
    if fresh.terminal_output != known.terminal_output:
        output = _open_text(sealer, fresh.terminal_output, fresh.run_id, "terminal")
    return evolve(
        state,
        status=fresh.status,
        current_step=fresh.current_step,
        cancel_mode=fresh.cancel_mode,
        cancel_requested=fresh.cancel_requested,
        restore_review=fresh.restore_review,
        completed_at=_ms(fresh.completed_at),
        outcome=fresh.outcome,
        output=output,
        failure_code=fresh.failure_code,
    )


def overlay(fresh: RunState, record: StepRecord) -> RunState:
    """`fresh` (just read under the locks) with the lease holder's own view of its record.

    Only the lease holder changes a leased record (a restore hold takes the lease over, which
    fences the holder out), so the in-memory record is the truth for it, while the run row —
    which a cancel may have changed meanwhile — comes from the store."""
    records = tuple(record if r.step == record.step else r for r in fresh.records)
    return evolve(fresh, records=records)


# -- engine → rows ------------------------------------------------------------------------------


def row_of(
    sealer: Sealer,
    run_id: uuid.UUID,
    record: StepRecord,
    old_row: StepRow | None,
    old_record: StepRecord | None,
    now: datetime,
) -> StepRow:
    """The row of `record`, keeping the stored envelopes of unchanged sealed parts."""
    if (
        old_row is not None
        and old_record is not None
        and (old_record.command == record.command and old_record.preparation == record.preparation)
    ):
        command = old_row.command
    elif record.command is None:
        command = None
    else:
        preparation = None if record.preparation is None else base64.b64decode(record.preparation)
        command = canonical_json(
            sealer.seal_command(
                json.loads(record.command), preparation, run_id=str(run_id), step=record.step
            )
        )
    if old_row is not None and old_record is not None and old_record.output == record.output:
        output = old_row.output
    elif record.output is None:
        output = None
    else:
        output = seal_value(sealer, json.loads(record.output), run_id, "output", record.step)
    base = old_row or StepRow.new(
        run_id, record.step, record.type, entered_at=from_epoch_ms(record.entered_at),
        due_at=from_epoch_ms(record.entered_at),
    )  # fmt: skip
    return evolve(
        base,
        type=record.type,
        pure=record.pure,
        generation=record.generation,
        state=record.state,
        attempt=record.attempt,
        claims=record.claims,
        awaiting=record.awaiting,
        due_at=_dt(record.due_at),
        attempt_started_at=_dt(record.attempt_started_at),
        entered_at=from_epoch_ms(record.entered_at),
        finished_at=_dt(record.finished_at),
        operation=record.operation,
        effect_kind=record.effect,
        command=command,
        command_prepared=record.command is not None,
        preparation_frozen=record.preparation is not None,
        dispatched=record.dispatched,
        sent=record.sent,
        uncertain=record.uncertain,
        receipt_expired=record.receipt_expired,
        settled_by=record.settled_by,
        output=output,
        route_kind=None if record.route is None else record.route.kind,
        route_label=None if record.route is None else record.route.label,
        failure_code=record.failure_code,
        detail=record.detail,
        wait_until=_dt(record.wait_until),
        wait_started_at=_dt(record.wait_started_at),
        timeout_at=_dt(record.timeout_at),
        interval_seconds=record.interval_seconds,
        observations=record.observations,
        last_observed_at=_dt(record.last_observed_at),
        completion_ref=record.completion_ref,
        updated_at=now,
    )


def write_of(
    sealer: Sealer, before: RunSnapshot, previous: RunState, state: RunState, now: datetime
) -> RunWrite | None:
    """The write that takes the stored run `before` (read as `previous`) to `state`; None when
    nothing changed. Only changed records are written."""
    run = before.run
    if previous.output == state.output:
        terminal = run.terminal_output
    elif state.output is None:
        terminal = None
    else:
        terminal = seal_value(sealer, json.loads(state.output), run.run_id, "terminal")
    new_run: RunRow = evolve(
        run,
        current_step=state.current_step,
        status=state.status,
        cancel_mode=state.cancel_mode,
        cancel_requested=state.cancel_requested,
        restore_review=state.restore_review,
        outcome=state.outcome,
        terminal_output=terminal,
        failure_code=state.failure_code,
        completed_at=_dt(state.completed_at),
    )
    rows: list[StepRow] = []
    for record in state.records:
        old_record = previous.record(record.step)
        if old_record == record:
            continue
        rows.append(row_of(sealer, run.run_id, record, before.step(record.step), old_record, now))
    if not rows and new_run == run:
        return None
    return RunWrite(new_run, tuple(rows))


# -- definitions and keys -----------------------------------------------------------------------


SnapshotLoader = Callable[[str], "tuple[uuid.UUID, bytes] | None"]
"""The stored sealed snapshot of a definition digest and the run whose scope seals it
(`Store.definition_snapshot`), or None."""


@dataclass
class DefinitionCache:
    """Restored definitions by definition digest (07 §7.2 RECOMMENDED cache): the one way a
    sealed snapshot is opened.

    `restore(run)` answers the `(Snapshot, Definition)` the run is pinned to, opening and
    restoring its sealed snapshot only the first time a digest is seen: the run's own copy
    (runs admitted before schema version 2), else the copy stored once for the definition
    digest, found through `loader`. Restoring checks the snapshot with every definition rule
    and compiles its functions once (`definition.restore`): a digest's functions are compiled
    once per process. A snapshot that does not open, does not restore under this build
    (02 §9.3) or does not carry the run's definition digest raises `CoordinatorError` /
    `DefinitionError` (the caller applies T34/T35)."""

    sealer: Sealer
    loader: SnapshotLoader | None = None
    _known: dict[str, tuple[Snapshot, Definition]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, snapshot: Snapshot, definition: Definition | None = None) -> None:
        definition = definition or Definition.from_snapshot(snapshot)
        with self._lock:
            self._known[snapshot.definition_digest] = (snapshot, definition)

    def known(self, definition_digest: str) -> tuple[Snapshot, Definition] | None:
        with self._lock:
            return self._known.get(definition_digest)

    def restore(self, run: RunRow) -> tuple[Snapshot, Definition]:
        found = self.known(run.definition_digest)
        if found is not None:
            return found
        if run.snapshot is not None:
            return self._open(run.definition_digest, run.run_id, run.snapshot)
        return self.restore_digest(run.definition_digest)

    def restore_digest(self, definition_digest: str) -> tuple[Snapshot, Definition]:
        """The definition of a digest, from the cache or the copy stored for it."""
        found = self.known(definition_digest)
        if found is not None:
            return found
        stored = None if self.loader is None else self.loader(definition_digest)
        if stored is None:
            raise CoordinatorError(Diagnostic("coordinator.definition.snapshot", path=""))
        run_id, sealed = stored
        return self._open(definition_digest, run_id, sealed)

    def _open(
        self, definition_digest: str, run_id: uuid.UUID, sealed: bytes
    ) -> tuple[Snapshot, Definition]:
        document = _open(self.sealer, sealed, run_id, "snapshot")
        definition = restore_definition(canonical_json(document))
        snapshot = definition.snapshot
        if snapshot.definition_digest != definition_digest:
            raise CoordinatorError(Diagnostic("coordinator.definition.snapshot", path=""))
        with self._lock:
            self._known[snapshot.definition_digest] = (snapshot, definition)
        return snapshot, definition


@dataclass(frozen=True)
class RunKeys:
    """The engine's `Keys` for one admitted run, under the deployment's admission key."""

    admission_key: AdmissionKey = field(repr=False)
    database_id: str
    start_identity: str

    def command_key(self, step: str) -> str:
        return self.admission_key.command_key(self.database_id, self.start_identity, step)

    def completion_ref(self, connection: str, reference: str) -> str:
        return self.admission_key.completion_reference(self.database_id, connection, reference)


KeysFor = Callable[[str], RunKeys]
