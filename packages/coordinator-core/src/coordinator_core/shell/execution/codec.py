"""The one boundary between the store's values and the engine's: open and seal (07 §10, §14.1).

A stored run and its stored steps compose the engine's `RunState` and `StepRecord`; all the
store keeps beside them is sealed bytes and the lease. `state_of` opens a locked `RunSnapshot`
into the engine's `RunState`; `write_of` turns the state an `advance` produced back into the
`RunWrite` the store checks and commits, sealing only what changed (sealing draws a fresh
nonce, and the store refuses to see a frozen command "replaced" by another envelope of the
same bytes). Instants need no conversion: the engine and the rows both keep epoch
milliseconds.

Also here, because the worker and the service both need them: `DefinitionCache` (restored
snapshots by definition digest, 07 §7.2 RECOMMENDED) and `RunKeys` (the engine's `Keys` over the
deployment's admission key, 07 §3).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from coordinator_core.definition.restore import restore_definition
from coordinator_core.definition.snapshot import Snapshot
from coordinator_core.engine import (
    Definition,
    Instant,
    RunState,
    StepRecord,
    to_canonical,
)
from coordinator_core.errors import CoordinatorError, Diagnostic
from coordinator_core.evolve import evolve
from coordinator_core.shell.sealing import AdmissionKey, Purpose, Sealer
from coordinator_core.shell.store import RunSnapshot, RunWrite, StoredRun, StoredStep

__all__ = [
    "DefinitionCache",
    "RunKeys",
    "opened",
    "overlay",
    "refreshed",
    "seal_text",
    "sealed_snapshot",
    "state_of",
    "stored_run",
    "stored_step",
    "write_of",
]


def _protected_state_invalid() -> CoordinatorError:
    return CoordinatorError(Diagnostic("protected-state-invalid", path=""))


def seal_text(
    sealer: Sealer, text: str | bytes, run_id: uuid.UUID, purpose: Purpose, step: str = ""
) -> bytes:
    """The canonical JSON text of a value (the engine's, or a snapshot's), sealed as the store
    keeps it."""
    plaintext = text.encode("utf-8") if isinstance(text, str) else text
    return sealer.seal_text(plaintext, run_id=str(run_id), purpose=purpose, step=step)


def _open_text(
    sealer: Sealer, stored: bytes | None, run_id: uuid.UUID, purpose: Purpose, step: str = ""
) -> str | None:
    """The canonical JSON text sealed in a kept value: the plaintext it was sealed from."""
    if stored is None:
        return None
    plaintext = sealer.open_text(stored, run_id=str(run_id), purpose=purpose, step=step)
    try:
        return plaintext.decode("utf-8")
    except UnicodeDecodeError:
        raise _protected_state_invalid() from None


def sealed_snapshot(sealer: Sealer, snapshot: Snapshot, run_id: uuid.UUID) -> bytes:
    """The run's sealed snapshot (purpose `snapshot`): the canonical snapshot document."""
    return seal_text(sealer, snapshot.canonical, run_id, "snapshot")


# -- store → engine -------------------------------------------------------------------------------


def opened(sealer: Sealer, stored: StoredStep) -> StepRecord:
    """The engine's record of a stored step, its sealed payload opened."""
    record = stored.record
    if stored.command is None and stored.output is None:
        return record
    command: str | None = None
    preparation: bytes | None = None
    if stored.command is not None:
        parts = sealer.open_command(stored.command, run_id=str(stored.run_id), step=record.step)
        command, preparation = to_canonical(parts.request), parts.preparation
    output = _open_text(sealer, stored.output, stored.run_id, "output", record.step)
    return evolve(record, command=command, preparation=preparation, output=output)


def state_of(sealer: Sealer, snapshot: RunSnapshot) -> RunState:
    """The engine's `RunState` of a run read from the store. An erased payload reads as JSON
    `null` (nothing evaluates on an erased run: it is settled and never claimable)."""
    run = snapshot.run
    run_input = _open_text(sealer, run.input, run.run_id, "input")
    return evolve(
        run.state,
        input=run_input if run_input is not None else "null",
        output=_open_text(sealer, run.terminal_output, run.run_id, "terminal"),
        records=tuple(opened(sealer, stored) for stored in snapshot.steps),
    )


def refreshed(sealer: Sealer, state: RunState, known: StoredRun, fresh: StoredRun) -> RunState:
    """`state` — the run as the lease holder knows it, read when `known` was — with the run
    fields another transaction may have changed since (a cancel, a restore review) taken
    from `fresh`, read under the fence's locks. Records are the holder's: while a record is
    leased nobody else changes the run's records (a restore hold takes the lease over, which
    the fence detects)."""
    if fresh == known:
        return state
    output = state.output
    if fresh.terminal_output != known.terminal_output:
        output = _open_text(sealer, fresh.terminal_output, fresh.run_id, "terminal")
    return evolve(fresh.state, input=state.input, output=output, records=state.records)


def overlay(fresh: RunState, record: StepRecord) -> RunState:
    """`fresh` (just read under the locks) with the lease holder's own view of its record.

    Only the lease holder changes a leased record (a restore hold takes the lease over, which
    fences the holder out), so the in-memory record is the truth for it, while the run row —
    which a cancel may have changed meanwhile — comes from the store."""
    records = tuple(record if r.step == record.step else r for r in fresh.records)
    return evolve(fresh, records=records)


# -- engine → store -------------------------------------------------------------------------------


def stored_step(
    sealer: Sealer,
    run_id: uuid.UUID,
    record: StepRecord,
    old: StoredStep | None,
    old_record: StepRecord | None,
    now: Instant,
) -> StoredStep:
    """The stored step of `record`, keeping the stored envelopes of unchanged sealed parts."""
    if (
        old is not None
        and old_record is not None
        and (old_record.command == record.command and old_record.preparation == record.preparation)
    ):
        command, frozen = old.command, old.preparation_frozen
    elif record.command is None:
        command, frozen = None, False
    else:
        command = sealer.seal_command_text(
            record.command.encode("utf-8"), record.preparation, run_id=str(run_id), step=record.step
        )
        frozen = record.preparation is not None
    if old is not None and old_record is not None and old_record.output == record.output:
        output = old.output
    elif record.output is None:
        output = None
    else:
        output = seal_text(sealer, record.output, run_id, "output", record.step)
    return StoredStep(
        run_id=run_id,
        record=evolve(record, command=None, preparation=None, output=None),
        command=command,
        preparation_frozen=frozen,
        output=output,
        lease=None if old is None else old.lease,
        updated_at=now,
    )


def stored_run(run: StoredRun, state: RunState, terminal_output: bytes | None) -> StoredRun:
    """`run` with the engine's `state` (its payload left out) and its sealed terminal output."""
    bare = evolve(state, input=None, output=None, records=())
    if bare == run.state and terminal_output == run.terminal_output:
        return run
    return evolve(run, state=bare, terminal_output=terminal_output)


def write_of(
    sealer: Sealer, before: RunSnapshot, previous: RunState, state: RunState, now: Instant
) -> RunWrite | None:
    """The write that takes the stored run `before` (read as `previous`) to `state`; None when
    nothing changed. Only changed records are written."""
    run = before.run
    if previous.output == state.output:
        terminal = run.terminal_output
    elif state.output is None:
        terminal = None
    else:
        terminal = seal_text(sealer, state.output, run.run_id, "terminal")
    new_run = stored_run(run, state, terminal)
    steps: list[StoredStep] = []
    for record in state.records:
        old_record = previous.record(record.step)
        if old_record == record:
            continue
        steps.append(
            stored_step(sealer, run.run_id, record, before.step(record.step), old_record, now)
        )
    if not steps and new_run is run:
        return None
    return RunWrite(new_run, tuple(steps))


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

    def restore(self, run: StoredRun) -> tuple[Snapshot, Definition]:
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
        definition = restore_definition(
            self.sealer.open_text(sealed, run_id=str(run_id), purpose="snapshot")
        )
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
