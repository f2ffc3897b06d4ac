"""The worker's transactions: claim, due waits, sweeps, the fences and the finish (07 §7.2)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Final

from sqlalchemy.engine import Connection

from coordinator_core.evolve import evolve
from coordinator_core.shell.store.base import StoreBase
from coordinator_core.shell.store.dialect import pipelined, truncate_ms
from coordinator_core.shell.store.invariants import Lease, StaleLease, new_token
from coordinator_core.shell.store.rows import (
    Claim,
    Decide,
    DecideEach,
    Recover,
    Recovery,
    RunSnapshot,
    Written,
)
from coordinator_core.shell.store.statements import (
    DUE,
    FENCE,
    FENCE_LIVE,
    RUN_FRESH,
    STEPS_OF,
    TAKE_LAPSED,
    TOUCH_OVERDUE,
    WAITS_DUE,
    run_from,
    step_from,
)

LEASE_SECONDS: Final = 15
"""07 §16: attempt budget (10 s) + 5 s."""
FIRE_BATCH: Final = 64
"""How many due waits `fire_due_waits` takes in one transaction at most."""


class StoreWork(StoreBase):
    def claim_due_step(
        self,
        worker_id: str,
        now: datetime,
        lease_seconds: int = LEASE_SECONDS,
        *,
        decide: Decide,
    ) -> Written | None:
        """One claim transaction (07 §7.2), answering what it wrote, or None (idle):

        1. select the first claimable record by (dueAt, runId, step) — `pending`, due, run
           `running`/`cancel-requested`, not under restore review, payload not erased, cancel
           mode not `stopping` (except an `uncertain` call re-armed by `retry-same`), not
           overdue unless pure — locking it and its run `FOR UPDATE SKIP LOCKED` (SQLite: the
           writer lock of `BEGIN IMMEDIATE`) and reading the run whole and the control row in
           the same statement; none → idle, and the transaction wrote nothing;
        2. verify the store; claim nothing while the active package is not the one this process
           serves or a restore hold is set; read the run's records;
        3. `decide(snapshot)` is the engine: `StepDue` leases the record (T2) or expires it
           (T26), and may carry on as 07 §7.7 allows (the call's request frozen with the claim,
           pure records applied), journaling inside; None claims nothing;
        4. the store writes what the engine decided and gives the record it leased a new
           random token and `lease_seconds` of lease.

        The sweeps (lapsed leases, overdue records) are not part of the claim: see `sweep`.
        """
        moment = truncate_ms(now)
        lease = Lease(worker_id, moment + timedelta(seconds=lease_seconds))

        def work(conn: Connection) -> Written | None:
            due = DUE.first(conn, {"now": moment})
            if due is None:
                return None  # nothing claimed, so no gate applies (an idle poll is one query)
            control = self._verified(due, prefix="c_")
            if not self.may_claim(control):
                return None
            run = run_from(due)
            steps = STEPS_OF.rows(conn, {"run_id": run.run_id})
            snapshot = RunSnapshot(control, run, tuple(step_from(step) for step in steps))
            write = decide(snapshot)
            if write is None:
                return None
            return self._apply_txn(conn, snapshot, write, moment, lease=lease)

        return self._transact("claim-due-step", work)

    def fire_due_waits(
        self, now: datetime, decide: DecideEach, *, limit: int = FIRE_BATCH
    ) -> tuple[int, tuple[RunSnapshot, ...]]:
        """Due waits in one transaction (issue 9: a thousand runs due at one instant): up to
        `limit` claimable `wait-until` records due at `now`, in claim order, locked with their
        runs `FOR UPDATE SKIP LOCKED` as a claim locks its record; verify the store, claim
        nothing while the active package is not this process's or a restore hold is set; read
        each run's records; `decide` is the engine, once for them all (a claim of pure work
        only, `claim_record(..., pure_only=True)`: T18 and what follows it up to the first
        record that needs I/O, left pending and due), and the store writes each decision. No
        record is leased here (a write that leases one is refused), so what follows each wait
        is claimed as usual. Answers how many records were taken and the runs as written."""
        moment = truncate_ms(now)

        def work(conn: Connection) -> tuple[int, tuple[RunSnapshot, ...]]:
            control = self._verify_txn(conn)
            if not self.may_claim(control):
                return 0, ()
            runs = [run_from(due) for due in WAITS_DUE.rows(conn, {"now": moment, "limit": limit})]
            if not runs:
                return 0, ()
            records = STEPS_OF.rows_of_each(conn, [{"run_id": run.run_id} for run in runs])
            snapshots = [
                RunSnapshot(control, run, tuple(step_from(row) for row in rows))
                for run, rows in zip(runs, records, strict=True)
            ]
            writes = decide(snapshots)
            with pipelined(conn):  # the batch's writes in one round trip on PostgreSQL
                written = tuple(
                    self._apply_txn(conn, snapshot, write, moment).snapshot
                    for snapshot, write in zip(snapshots, writes, strict=True)
                    if write is not None
                )
            return len(snapshots), written

        return self._transact("fire-due-waits", work)

    def sweep(
        self,
        worker_id: str,
        now: datetime,
        recover: Recover,
        lease_seconds: int = LEASE_SECONDS,
        *,
        limit: int = 16,
    ) -> int:
        """07 §7.2 steps 2–3, off the claim path (a worker runs it at most once a second):
        recover up to `limit` lapsed leases (`leased`, `leaseExpiresAt ≤ now`: the record is
        taken over under a new token so the stale holder can no longer commit, then
        `recover(snapshot, "lease-lapsed")` writes T28/T29) and expire up to `limit` overdue
        records (the current record of an active run, `pending`, not pure, `deadlineAt ≤ now`:
        T26/T27), each in its own short transaction. Both selections use partial indexes, so
        a sweep that finds nothing costs two index probes whatever the number of runs.
        Answers the number of records handled. `recover` must not raise for a run's data
        problems (it would stall the sweep)."""
        moment = truncate_ms(now)
        expires = moment + timedelta(seconds=lease_seconds)
        handled = 0
        for kind in ("lease-lapsed", "deadline-passed"):
            for _ in range(limit):
                found = self._transact(
                    "sweep",
                    lambda conn, kind=kind: self._sweep_one_txn(  # type: ignore[misc]
                        conn, kind, worker_id, moment, expires, recover
                    ),
                )
                if not found:
                    break
                handled += 1
        return handled

    def _sweep_one_txn(
        self,
        conn: Connection,
        kind: Recovery,
        worker_id: str,
        now: datetime,
        expires: datetime,
        recover: Recover,
    ) -> bool:
        control = self._verify_txn(conn)
        if not self._serves_active_package(control) or control.restore_hold:
            return False
        if kind == "lease-lapsed":
            taken = TAKE_LAPSED.first(
                conn, {"now": now, "expires": expires, "owner": worker_id, "token": new_token()}
            )
        else:
            taken = TOUCH_OVERDUE.first(conn, {"now": now})
        if taken is None:
            return False
        snapshot = self._snapshot_txn(conn, control, taken["run_id"], lock_run=True)
        if snapshot is None:  # pragma: no cover - records belong to runs (foreign key)
            return False
        # A lapsed record the engine does not recover stays taken over until its new lease
        # lapses, so it is retried once per lease period instead of on every sweep.
        self._decide_txn(conn, snapshot, lambda s: recover(s, kind), now)
        return True

    def _fence_txn(
        self, conn: Connection, claim: Claim, now: datetime, *, live: bool
    ) -> RunSnapshot:
        """Lock the claimed record only if the claim still holds it (reading it whole) and the
        run, with the control row, in one statement (PostgreSQL locks the rows in the order of
        the FROM list: the record, then the run, 07 §6.1); the snapshot is the claim's own
        with the leased record and the run's columns that others may change (a cancel, a
        restore review) read fresh, so the store's invariants are checked against what is
        stored even for a caller holding an older copy of its claim."""
        fence = {
            "k_run": claim.run_id,
            "k_step": claim.step,
            "generation": claim.generation,
            "attempt": claim.attempt,
            "token": claim.lease_token,
        }
        row = FENCE_LIVE.first(conn, fence | {"now": now}) if live else FENCE.first(conn, fence)
        if row is None:
            raise StaleLease("The claim no longer holds its record.")
        control = self._verified(row, prefix="c_")
        if live and (control.restore_hold or not self._serves_active_package(control)):
            raise StaleLease("The store refuses mid-attempt fences now.")
        cached = claim.snapshot
        fresh = {name: row[f"r_{name}"] for name in RUN_FRESH}
        record = step_from(row)
        steps = tuple(record if step.step == record.step else step for step in cached.steps)
        return RunSnapshot(control, evolve(cached.run, **fresh), steps)

    def record_step_progress(self, claim: Claim, now: datetime, decide: Decide) -> Written:
        """A mid-attempt fence (07 §7.2 freeze, pre-send): commits `decide`'s write only while
        the claim holds a live lease (`leaseExpiresAt > now`), no restore hold is set and the
        active package is still served; otherwise raises `StaleLease` and writes nothing.
        The frozen command is never replaced (only completed once with its preparation).
        Answers the run as written and the claim as it now stands (the same fence), or no
        claim when the write ended the attempt (a pre-send refusal)."""
        moment = truncate_ms(now)

        def work(conn: Connection) -> Written:
            snapshot = self._fence_txn(conn, claim, moment, live=True)
            write = decide(snapshot)
            if write is None:
                return Written(snapshot, evolve(claim, snapshot=snapshot))
            return self._apply_txn(conn, snapshot, write, moment, held=claim)

        return self._transact("record-step-progress", work)

    def complete_step(
        self,
        claim: Claim,
        now: datetime,
        decide: Decide,
        lease_seconds: int = LEASE_SECONDS,
    ) -> Written:
        """The finish transaction (07 §7.2): commits `decide`'s write (record outcome, run
        status, next record of §5.1) only if (run, step, generation, attempt, lease token)
        still match a `leased` record; otherwise raises `StaleLease` and nothing (audit
        included) commits. An expired lease that nobody took over still finishes.

        The write may carry the run on (07 §7.7 item 1): when it leaves the run's next record
        leased, that record gets a fresh lease for the same owner and `Written.claim` is the
        claim the loop goes on with, without a claim transaction."""
        moment = truncate_ms(now)
        lease = Lease(claim.lease_owner, moment + timedelta(seconds=lease_seconds))

        def work(conn: Connection) -> Written:
            snapshot = self._fence_txn(conn, claim, moment, live=False)
            write = decide(snapshot)
            if write is None:
                return Written(snapshot, None)
            return self._apply_txn(
                conn,
                snapshot,
                write,
                moment,
                lease=lease if self.may_claim(snapshot.control) else None,
            )

        return self._transact("complete-step", work)
