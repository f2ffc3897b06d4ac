"""The operator's and the API's transitions (07 §8, §9), the holds (07 §12) and retention
(07 §13)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, not_, or_, select, update
from sqlalchemy.engine import Connection

from coordinator_core.shell.audit.writer import JournalPosition
from coordinator_core.shell.store.base import StoreBase
from coordinator_core.shell.store.dialect import lock_rows, truncate_ms
from coordinator_core.shell.store.guards import refuse
from coordinator_core.shell.store.invariants import StoreInvariantError
from coordinator_core.shell.store.queries import settled
from coordinator_core.shell.store.rows import Decide, HoldState, RunSnapshot
from coordinator_core.shell.store.tables import (
    CONTROL,
    JOURNAL_HEADS,
    RUNS,
    STEPS,
    TERMINAL_STATUSES,
)


class StoreOperations(StoreBase):
    def request_cancel(
        self, run_id: uuid.UUID, now: datetime, decide: Decide
    ) -> RunSnapshot | None:
        """07 §8 (locks: step record, then run). A run that is `finished`, `cancelled`,
        `cancelled-after-effect` or `expired`, or already has `cancelRequested`, is answered
        unchanged without calling `decide`; otherwise `decide` applies the cancel table and its
        write must record `cancelRequested`. None when the run does not exist."""
        moment = truncate_ms(now)

        def work(conn: Connection) -> RunSnapshot | None:
            control = self._verify_txn(conn)
            snapshot = self._lock_run_txn(conn, control, run_id)
            if snapshot is None:
                return None
            if snapshot.run.status in TERMINAL_STATUSES or snapshot.run.cancel_requested:
                return snapshot
            write = decide(snapshot)
            if write is None:
                return snapshot
            if not write.run.cancel_requested or write.run.cancel_mode == "none":
                raise StoreInvariantError("A cancel must record cancelRequested.")
            self._notify_txn(conn)
            return self._apply_txn(conn, snapshot, write, moment).snapshot

        return self._transact("request-cancel", work)

    def update_run(
        self,
        run_id: uuid.UUID,
        now: datetime,
        decide: Decide,
        *,
        admission_lock: bool = False,
    ) -> RunSnapshot | None:
        """Any other run transition of the API, in one transaction with the run locked
        (current step record, then run): `retry-same` (07 §9.1, `admission_lock=True`) and the
        `reconcile` commit (§9.2, whose decide re-checks generation, step, command and lease
        and raises `reconcile-raced`). None when the run does not exist."""
        moment = truncate_ms(now)

        def work(conn: Connection) -> RunSnapshot | None:
            control = (
                self._admission_control_txn(conn) if admission_lock else self._verify_txn(conn)
            )
            snapshot = self._lock_run_txn(conn, control, run_id)
            if snapshot is None:
                return None
            after = self._decide_txn(conn, snapshot, decide, moment)
            if after is not snapshot:
                self._notify_txn(conn)
            return after

        return self._transact("update-run", work)

    def advance_completion_waits(
        self, completion_ref: str, now: datetime, floor_seconds: int
    ) -> int:
        """07 §7.6: every `pending` `wait-for` record with this completion reference is made due
        at `max(now, lastObservedAt + floor)` (`now` if never observed) when that is earlier
        than its current `dueAt` and its `timeoutAt`. Leased records are left alone; nothing
        else changes. Answers the number of records moved."""
        moment = truncate_ms(now)
        floor = timedelta(seconds=floor_seconds)

        def work(conn: Connection) -> int:
            self._verify_txn(conn)
            waiting = lock_rows(
                select(
                    STEPS.c.run_id,
                    STEPS.c.step,
                    STEPS.c.due_at,
                    STEPS.c.last_observed_at,
                    STEPS.c.timeout_at,
                ).where(
                    STEPS.c.completion_ref == completion_ref,
                    STEPS.c.type == "wait-for",
                    STEPS.c.state == "pending",
                )
            )
            moved = 0
            for run_id, step, due_at, last_observed_at, timeout_at in conn.execute(waiting).all():
                target = (
                    moment if last_observed_at is None else max(moment, last_observed_at + floor)
                )
                if target >= due_at or (timeout_at is not None and target >= timeout_at):
                    continue
                conn.execute(
                    update(STEPS)
                    .where(
                        STEPS.c.run_id == run_id, STEPS.c.step == step, STEPS.c.state == "pending"
                    )
                    .values(due_at=target, updated_at=moment)
                )
                moved += 1
            if moved:
                self._notify_txn(conn)
            return moved

        return self._transact("advance-completion-waits", work)

    # -- holds (07 §12) -------------------------------------------------------------------------

    def set_restore_hold(
        self, now: datetime, review: Decide, heads: Sequence[JournalPosition] | None = None
    ) -> HoldState:
        """07 §12 step 3, in one transaction (admission lock → control → records → runs):
        `restoreHold := true`, `admissionsHold := true`, evidence references cleared; then
        `review` (the engine's T33) runs for every run that is not settled or has a leased
        record, each locked in turn. With `heads` (the journal as it is now, 07 §12.1), they
        replace the journal heads the store held: the reviewed store goes on from this
        journal, so its earlier entries no longer refuse a start. Idempotent."""
        moment = truncate_ms(now)

        def work(conn: Connection) -> HoldState:
            self._control_lock_txn(conn)
            self._verify_txn(conn)
            conn.execute(
                update(CONTROL).values(
                    restore_hold=True,
                    admissions_hold=True,
                    restore_evidence_ref=None,
                    admission_recovery_ref=None,
                )
            )
            control = self._verify_txn(conn)
            leased = (
                select(STEPS.c.step)
                .where(STEPS.c.run_id == RUNS.c.run_id, STEPS.c.state == "leased")
                .exists()
            )
            candidates = conn.execute(
                select(RUNS.c.run_id)
                .where(or_(not_(settled(moment)), leased))
                .order_by(RUNS.c.run_id)
            ).scalars()
            for run_id in list(candidates):
                snapshot = self._lock_run_txn(conn, control, run_id)
                if snapshot is not None:
                    self._decide_txn(conn, snapshot, review, moment)
            if heads is not None:
                conn.execute(delete(JOURNAL_HEADS))
                for head in heads:
                    self._write_head_txn(conn, head, moment)
            return self._hold_state_txn(conn)

        return self._transact("set-restore-hold", work)

    def release_restore_hold(self, evidence_ref: str) -> HoldState:
        """07 §12 step 6: clears `restoreHold` and records the (keyed) fencing-evidence
        reference; admissions and runs under review stay held. Idempotent."""

        def work(conn: Connection) -> HoldState:
            self._verify_txn(conn)
            conn.execute(
                update(CONTROL).values(restore_hold=False, restore_evidence_ref=evidence_ref)
            )
            self._notify_txn(conn)
            return self._hold_state_txn(conn)

        return self._transact("release-restore-hold", work)

    def release_admission_hold(
        self,
        recovery_ref: str,
        *,
        admission_history_complete: bool,
        prior_deployment_fenced: bool,
    ) -> HoldState:
        """07 §12 step 7 / 06 §7.4: both attestations (`attestation-required`), the restore hold
        already released (`restore-hold`); then clears `admissionsHold` and records the (keyed)
        reference."""

        def work(conn: Connection) -> HoldState:
            self._control_lock_txn(conn)
            control = self._verify_txn(conn)
            if not (admission_history_complete and prior_deployment_fenced):
                raise refuse("coordinator.command.attestation-required")
            if control.restore_hold:
                raise refuse("coordinator.command.restore-hold")
            conn.execute(
                update(CONTROL).values(admissions_hold=False, admission_recovery_ref=recovery_ref)
            )
            return self._hold_state_txn(conn)

        return self._transact("release-admission-hold", work)

    # -- retention (07 §13) ---------------------------------------------------------------------

    def erase_settled_before(self, before: datetime, limit: int, now: datetime) -> int:
        """07 §13: erase the payloads of at most `limit` settled runs with `completedAt <
        before`, oldest first by (completedAt, runId). Each run's records and the run are locked
        and eligibility re-checked; then snapshot, input, terminal output, commands and outputs
        become NULL and `payloadErasedAt := now`. The tombstone keeps everything else. Runs
        with an unknown effect, under review, or recoverable are never erased."""
        moment = truncate_ms(now)
        cutoff = truncate_ms(before)
        if limit < 1:
            raise ValueError("The retention limit must be positive.")

        def eligible(*only: Any) -> Any:
            return (
                select(RUNS.c.run_id)
                .where(
                    *only,
                    settled(moment),
                    RUNS.c.completed_at < cutoff,
                    RUNS.c.payload_erased_at.is_(None),
                )
                .order_by(RUNS.c.completed_at, RUNS.c.run_id)
            )

        def work(conn: Connection) -> int:
            self._verify_txn(conn)
            chosen = list(conn.execute(eligible().limit(limit)).scalars())
            erased = 0
            for run_id in chosen:
                conn.execute(lock_rows(select(STEPS.c.step).where(STEPS.c.run_id == run_id)))
                conn.execute(lock_rows(select(RUNS.c.run_id).where(RUNS.c.run_id == run_id)))
                if conn.execute(eligible(RUNS.c.run_id == run_id)).first() is None:
                    continue
                conn.execute(
                    update(STEPS)
                    .where(STEPS.c.run_id == run_id)
                    .values(command=None, output=None, updated_at=moment)
                )
                conn.execute(
                    update(RUNS)
                    .where(RUNS.c.run_id == run_id)
                    .values(
                        snapshot=None,
                        input=None,
                        terminal_output=None,
                        payload_erased_at=moment,
                        updated_at=moment,
                    )
                )
                erased += 1
            return erased

        return self._transact("erase-settled-before", work)
