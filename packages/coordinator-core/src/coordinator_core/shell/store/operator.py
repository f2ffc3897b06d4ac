"""`OperatorActions`: the restore hold and its releases (07 §12) and retention (07 §13) — the
transactions that change the deployment's control row or erase payloads, each taking the
exclusive side of the admission lock where the contract asks for it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from sqlalchemy import delete, not_, or_, select, update
from sqlalchemy.engine import Connection

from coordinator_core.engine.instants import Instant
from coordinator_core.shell.audit.writer import JournalPosition
from coordinator_core.shell.store.dialect import Prepared, lock_rows
from coordinator_core.shell.store.guards import refuse
from coordinator_core.shell.store.queries import settled
from coordinator_core.shell.store.reads import hold_state_txn
from coordinator_core.shell.store.records import Decide, HoldState
from coordinator_core.shell.store.schema import CONTROL, JOURNAL_HEADS, RUNS, STEPS
from coordinator_core.shell.store.transactor import Transactor
from coordinator_core.shell.store.writes import decide_txn, lock_run_txn

__all__ = ["OperatorActions"]


class OperatorActions:
    """The operator's deployment-wide actions (see the module documentation)."""

    def __init__(self, transactor: Transactor) -> None:
        self._tx = transactor

    def set_restore_hold(
        self,
        now: Instant,
        review: Decide,
        heads: Sequence[JournalPosition] | None = None,
        *,
        reason_ref: str | None = None,
    ) -> HoldState:
        """07 §12 step 3, in one transaction (admission lock → control → records → runs):
        `restoreHold := true`, `admissionsHold := true`, evidence references cleared; then
        `review` (the engine's T33) runs for every run that is not settled or has a leased
        record, each locked in turn. With `heads` (the journal as it is now, 07 §12.1), they
        replace the journal heads the store held: the reviewed store goes on from this
        journal, so its earlier entries no longer refuse a start. `reason_ref`, the keyed
        reference of the operator's reason, is kept with the hold. Idempotent."""
        tx = self._tx

        def work(conn: Connection) -> HoldState:
            self._control_lock_txn(conn)
            tx.verify_txn(conn)
            conn.execute(
                update(CONTROL).values(
                    restore_hold=True,
                    admissions_hold=True,
                    restore_evidence_ref=None,
                    admission_recovery_ref=None,
                    restore_hold_reason_ref=reason_ref,
                )
            )
            control = tx.verify_txn(conn)
            leased = (
                select(STEPS.c.step)
                .where(STEPS.c.run_id == RUNS.c.run_id, STEPS.c.state == "leased")
                .exists()
            )
            candidates = conn.execute(
                select(RUNS.c.run_id).where(or_(not_(settled(now)), leased)).order_by(RUNS.c.run_id)
            ).scalars()
            for run_id in list(candidates):
                snapshot = lock_run_txn(conn, control, run_id)
                if snapshot is not None:
                    decide_txn(tx, conn, snapshot, review, now)
            if heads is not None:
                conn.execute(delete(JOURNAL_HEADS))
                for head in heads:
                    tx.write_head_txn(conn, head, now)
            return hold_state_txn(conn)

        return tx.transact("set-restore-hold", work)

    def release_restore_hold(self, evidence_ref: str) -> HoldState:
        """07 §12 step 6: clears `restoreHold` and records the (keyed) fencing-evidence
        reference; admissions and runs under review stay held. Idempotent."""
        tx = self._tx

        def work(conn: Connection) -> HoldState:
            tx.verify_txn(conn)
            conn.execute(
                update(CONTROL).values(
                    restore_hold=False,
                    restore_evidence_ref=evidence_ref,
                    restore_hold_reason_ref=None,
                )
            )
            tx.notify_txn(conn)
            return hold_state_txn(conn)

        return tx.transact("release-restore-hold", work)

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
        tx = self._tx

        def work(conn: Connection) -> HoldState:
            self._control_lock_txn(conn)
            control = tx.verify_txn(conn)
            if not (admission_history_complete and prior_deployment_fenced):
                raise refuse("coordinator.command.attestation-required")
            if control.restore_hold:
                raise refuse("coordinator.command.restore-hold")
            conn.execute(
                update(CONTROL).values(admissions_hold=False, admission_recovery_ref=recovery_ref)
            )
            return hold_state_txn(conn)

        return tx.transact("release-admission-hold", work)

    def erase_settled_before(self, before: Instant, limit: int, now: Instant) -> int:
        """07 §13: erase the payloads of at most `limit` settled runs with `completedAt <
        before`, oldest first by (completedAt, runId). Each run's records and the run are locked
        and eligibility re-checked; then snapshot, input, terminal output, commands and outputs
        become NULL and `payloadErasedAt := now`. The tombstone keeps everything else. Runs
        with an unknown effect, under review, or recoverable are never erased."""
        if limit < 1:
            raise ValueError("The retention limit must be positive.")
        tx = self._tx

        def eligible(*only: Any) -> Any:
            return (
                select(RUNS.c.run_id)
                .where(
                    *only,
                    settled(now),
                    RUNS.c.completed_at < before,
                    RUNS.c.payload_erased_at.is_(None),
                )
                .order_by(RUNS.c.completed_at, RUNS.c.run_id)
            )

        def work(conn: Connection) -> int:
            tx.verify_txn(conn)
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
                    .values(command=None, output=None, updated_at=now)
                )
                conn.execute(
                    update(RUNS)
                    .where(RUNS.c.run_id == run_id)
                    .values(
                        snapshot=None,
                        input=None,
                        terminal_output=None,
                        payload_erased_at=now,
                        updated_at=now,
                    )
                )
                erased += 1
            return erased

        return tx.transact("erase-settled-before", work)

    def _control_lock_txn(self, conn: Connection) -> None:
        """The exclusive side of the admission lock: the holds and releases take the control
        row `FOR UPDATE` (PostgreSQL), after every admission in flight has committed."""
        if self._tx.location.kind == "postgresql":
            _CONTROL_EXCLUSIVE.run(conn, {})


_CONTROL_EXCLUSIVE: Final = Prepared(select(CONTROL.c.id).with_for_update())
