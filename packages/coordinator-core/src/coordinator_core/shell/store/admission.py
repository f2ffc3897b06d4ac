"""The admission transaction (07 §6.1; 06 §5.1 step 10)."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy.engine import Connection

from coordinator_core.evolve import evolve
from coordinator_core.shell.store.base import StoreBase
from coordinator_core.shell.store.dialect import truncate_ms
from coordinator_core.shell.store.guards import refuse
from coordinator_core.shell.store.invariants import StoreInvariantError
from coordinator_core.shell.store.rows import AdmissionResult, NewRun, RunRow
from coordinator_core.shell.store.statements import (
    INSERT_DEFINITION,
    INSERT_LIVE_PAIR,
    INSERT_RUN,
    INSERT_STEP,
    LIVE_PAIRS,
    RUN_BY_START,
    RUN_FIELDS,
    STEP_FIELDS,
    run_from,
    unsettled_txn,
)


class StoreAdmissions(StoreBase):
    def admit(self, admission: NewRun, now: datetime, *, announce: bool = True) -> AdmissionResult:
        """The admission transaction (07 §6.1; 06 §5.1 step 10), in this order:

        admission lock; store identity and custody; the active package is the one this process
        serves (`command.activation-changed`); admission hold (`restore-admissions-held`),
        restore hold (`restore-hold`); an existing start identity answers that run when the
        input digest is the same (a replay, tombstones included) and
        `idempotency.key-reused` otherwise; the expected revision is the active one
        (`admission.revision-mismatch`); the caller's input problem; the live-binding check
        (`command.live-binding-conflict`); then the run (status `running`, cancel mode `none`,
        `deadlineAt = now + deadlineSeconds`) and its start record are inserted together.
        Concurrent admissions of one start identity resolve to one run. Without `announce`
        the other processes are not notified (an idle loop of this one takes the run).
        """
        moment = truncate_ms(now)
        first = admission.first_step
        if first.run_id != admission.run_id or first.state != "pending":
            raise StoreInvariantError("The start record must be a pending record of the run.")

        def work(conn: Connection) -> AdmissionResult:
            control = self._admission_control_txn(conn)
            if not self._serves_active_package(control):
                raise refuse("coordinator.command.activation-changed")
            if control.admissions_hold:
                raise refuse("coordinator.command.restore-admissions-held")
            if control.restore_hold:
                raise refuse("coordinator.command.restore-hold")
            # An existing start identity is answered before every check below. The common
            # case has none, so it is looked up first only when a check would refuse; then
            # the run's own INSERT finds it (ON CONFLICT DO NOTHING answers no row).
            refusal: Exception | None = None
            if (
                admission.expected_revision is not None
                and admission.expected_revision != control.active_revision
            ):
                refusal = refuse("admission.revision-mismatch")
            elif admission.revision != control.active_revision:
                refusal = refuse("coordinator.command.activation-changed")
            elif admission.input_problem is not None:
                refusal = admission.input_problem
            pairs: frozenset[tuple[str, str]] = frozenset()
            if refusal is None:
                pairs = frozenset(
                    (str(row["definition_digest"]), str(row["binding_digest"]))
                    for row in LIVE_PAIRS.rows(conn)
                )
                if not admission.bindings_ok(pairs) and not admission.bindings_ok(
                    unsettled_txn(conn, moment)
                ):
                    refusal = refuse("coordinator.command.live-binding-conflict")
            if refusal is not None:
                replay = self._replay_txn(conn, admission)
                if replay is not None:
                    return replay
                raise refusal
            run = RunRow(
                run_id=admission.run_id,
                start_identity=admission.start_identity,
                input_digest=admission.input_digest,
                owner=admission.owner,
                origin=admission.origin,
                trigger=admission.trigger,
                workflow_id=admission.workflow_id,
                workflow_version=admission.workflow_version,
                revision=admission.revision,
                definition_digest=admission.definition_digest,
                binding_digest=admission.binding_digest,
                snapshot=None,
                input=admission.input,
                policy=dict(admission.policy),
                current_step=first.step,
                status="running",
                cancel_mode="none",
                cancel_requested=False,
                restore_review=False,
                outcome=None,
                terminal_output=None,
                failure_code=None,
                admitted_at=moment,
                deadline_at=moment + timedelta(seconds=admission.deadline_seconds),
                completed_at=None,
                payload_erased_at=None,
                updated_at=moment,
            )
            inserted = INSERT_RUN[self._location.kind].first(
                conn, {name: getattr(run, name) for name in RUN_FIELDS}
            )
            if inserted is None:  # the start identity exists: answer that run
                replay = self._replay_txn(conn, admission)
                assert replay is not None
                return replay
            pair = (admission.definition_digest, admission.binding_digest)
            if pair not in pairs:
                INSERT_LIVE_PAIR[self._location.kind].run(
                    conn,
                    {
                        "definition_digest": pair[0],
                        "binding_digest": pair[1],
                        "first_admitted_at": moment,
                    },
                )
            if admission.snapshot is not None:
                INSERT_DEFINITION[self._location.kind].run(
                    conn,
                    {
                        "definition_digest": admission.definition_digest,
                        "run_id": admission.run_id,
                        "snapshot": admission.snapshot,
                        "stored_at": moment,
                    },
                )
            step = evolve(first, lease_token=None, lease_owner=None, lease_expires_at=None)
            INSERT_STEP.run(conn, {name: getattr(step, name) for name in STEP_FIELDS})
            if announce:
                self._notify_txn(conn)
            return AdmissionResult(run, created=True, steps=(step,), control=control)

        return self._transact("admit", work)

    def _replay_txn(self, conn: Connection, admission: NewRun) -> AdmissionResult | None:
        """The run admitted under the admission's start identity (a replay, tombstones
        included, when the input digest is the same; `idempotency.key-reused` otherwise), or
        None when there is none."""
        existing = RUN_BY_START.first(conn, {"start_identity": admission.start_identity})
        if existing is None:
            return None
        run = run_from(existing)
        if run.input_digest != admission.input_digest:
            raise refuse("idempotency.key-reused")
        return AdmissionResult(run, created=False)
