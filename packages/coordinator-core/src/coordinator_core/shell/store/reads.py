"""The store's reads: the deployment check, runs and their records, pages, holds and the
doctor's summary."""

from __future__ import annotations

import uuid
from collections.abc import Collection
from datetime import datetime

from sqlalchemy import and_, func, or_, select
from sqlalchemy.engine import Connection

from coordinator_core.shell.audit.writer import JournalPosition
from coordinator_core.shell.observe.metrics import StoreGauges
from coordinator_core.shell.store.base import StoreBase
from coordinator_core.shell.store.dialect import truncate_ms
from coordinator_core.shell.store.guards import control_from, refuse
from coordinator_core.shell.store.identity import StoreIdentity
from coordinator_core.shell.store.queries import reported_status, settled, unknown_effect
from coordinator_core.shell.store.rows import (
    ControlRow,
    HoldState,
    RunPage,
    RunPosition,
    RunRow,
    RunSnapshot,
    StoreSummary,
)
from coordinator_core.shell.store.statements import DEFINITION, run_from, unsettled_txn
from coordinator_core.shell.store.tables import CONTROL, JOURNAL_HEADS, RUN_STATUSES, RUNS, STEPS


class StoreReads(StoreBase):
    def control(self) -> ControlRow:
        """The control row as it is now (no identity check)."""

        def work(conn: Connection) -> ControlRow:
            row = conn.execute(select(CONTROL)).mappings().first()
            if row is None:
                raise refuse("coordinator.deployment.schema-mismatch")
            return control_from(row)

        return self._transact("control", work, read_only=True)

    def get_run(self, run_id: uuid.UUID) -> RunRow | None:
        """The run row (tombstones included), or None."""

        def work(conn: Connection) -> RunRow | None:
            row = conn.execute(select(RUNS).where(RUNS.c.run_id == run_id)).mappings().first()
            return None if row is None else run_from(row)

        return self._transact("get-run", work, read_only=True)

    def find_run(self, start_identity: str) -> RunRow | None:
        """The run admitted under a start identity (the event path's lookup-first, 06 §8)."""

        def work(conn: Connection) -> RunRow | None:
            row = (
                conn.execute(select(RUNS).where(RUNS.c.start_identity == start_identity))
                .mappings()
                .first()
            )
            return None if row is None else run_from(row)

        return self._transact("find-run", work, read_only=True)

    def get_run_snapshot(self, run_id: uuid.UUID) -> RunSnapshot | None:
        """The run, all its records and the control row from one consistent read (06 §5.4:
        repeatable-read read-only on PostgreSQL, one read transaction on SQLite)."""

        def work(conn: Connection) -> RunSnapshot | None:
            row = conn.execute(select(CONTROL)).mappings().first()
            if row is None:
                raise refuse("coordinator.deployment.schema-mismatch")
            return self._snapshot_txn(conn, control_from(row), run_id, lock_run=False)

        return self._transact("get-run-snapshot", work, read_only=True)

    def list_runs(
        self,
        *,
        owner: str | None,
        workflows: Collection[str] | None = None,
        status: str | None = None,
        workflow: str | None = None,
        after: RunPosition | None = None,
        limit: int = 20,
    ) -> RunPage:
        """06 §5.2: runs newest first by (admittedAt DESC, runId DESC), keyset-paginated.

        `owner` None lists every owner (operator); `workflows` restricts to the caller's
        policy; `status` filters by the *reported* status (restore review reads `attention`)
        and is evaluated on each page as it is read. A page never repeats a run, never skips
        one that still matches, and never shows runs positioned before `after` (admitted
        later). The cursor's MAC and encoding are the API's; the store sees positions.
        """
        if not 1 <= limit <= 1000:
            raise ValueError("The page limit is out of range.")

        def work(conn: Connection) -> RunPage:
            statement = select(RUNS)
            if owner is not None:
                statement = statement.where(RUNS.c.owner == owner)
            if workflows is not None:
                statement = statement.where(RUNS.c.workflow_id.in_(sorted(workflows)))
            if workflow is not None:
                statement = statement.where(RUNS.c.workflow_id == workflow)
            if status is not None:
                statement = statement.where(reported_status() == status)
            if after is not None:
                statement = statement.where(
                    or_(
                        RUNS.c.admitted_at < after.admitted_at,
                        and_(RUNS.c.admitted_at == after.admitted_at, RUNS.c.run_id < after.run_id),
                    )
                )
            statement = statement.order_by(RUNS.c.admitted_at.desc(), RUNS.c.run_id.desc())
            rows = [run_from(row) for row in conn.execute(statement.limit(limit + 1)).mappings()]
            page = tuple(rows[:limit])
            more = len(rows) > limit
            last = page[-1] if page else None
            position = RunPosition(last.admitted_at, last.run_id) if more and last else None
            return RunPage(page, position)

        return self._transact("list-runs", work, read_only=True)

    def hold_state(self) -> HoldState:
        """06 §11.8: the holds and the number of runs under restore review."""
        return self._transact("hold-state", self._hold_state_txn, read_only=True)

    def unsettled_bindings(self, now: datetime) -> frozenset[tuple[str, str]]:
        """Every distinct (definition digest, binding digest) of the runs not settled at `now`
        (07 §13): the input of the live-binding check (05 §10)."""
        moment = truncate_ms(now)
        return self._transact(
            "unsettled-bindings", lambda conn: unsettled_txn(conn, moment), read_only=True
        )

    def definition_snapshot(self, definition_digest: str) -> tuple[uuid.UUID, bytes] | None:
        """The sealed snapshot stored for `definition_digest` and the run whose scope seals it
        (07 §10): the copy stored once per digest, else (runs admitted before schema version
        2) some run's own copy whose payload is not erased; None when there is none."""

        def work(conn: Connection) -> tuple[uuid.UUID, bytes] | None:
            found = DEFINITION.first(conn, {"digest": definition_digest})
            row = None if found is None else (found["run_id"], found["snapshot"])
            if row is None:
                row = conn.execute(
                    select(RUNS.c.run_id, RUNS.c.snapshot)
                    .where(
                        RUNS.c.definition_digest == definition_digest,
                        RUNS.c.snapshot.is_not(None),
                    )
                    .limit(1)
                ).first()
            return None if row is None else (row[0], row[1])

        return self._transact("definition-snapshot", work, read_only=True)

    def summary(self, now: datetime) -> StoreSummary:
        """The store part of `GET /v1/doctor` (06 §7.1), from one read transaction."""
        moment = truncate_ms(now)

        def work(conn: Connection) -> StoreSummary:
            row = conn.execute(select(CONTROL)).mappings().first()
            if row is None:
                raise refuse("coordinator.deployment.schema-mismatch")
            control = control_from(row)
            counts = _status_counts_txn(conn)
            holds = self._hold_state_txn(conn)
            unknown = conn.execute(
                select(func.count()).select_from(STEPS).where(unknown_effect(STEPS))
            ).scalar()
            waits = _waits_txn(conn)
            oldest_due = conn.execute(
                select(func.min(STEPS.c.due_at)).where(STEPS.c.state == "pending")
            ).scalar()
            payloads = conn.execute(
                select(func.count(), func.min(RUNS.c.completed_at)).where(
                    settled(moment), RUNS.c.payload_erased_at.is_(None)
                )
            ).first()
            assert payloads is not None
            return StoreSummary(
                store=self.kind,
                database_id=control.database_id,
                schema_version=control.schema_version,
                active_package_digest=control.active_package_digest,
                active_revision=control.active_revision,
                restore_hold=control.restore_hold,
                admissions_hold=control.admissions_hold,
                restore_review=holds.restore_review,
                statuses=counts,
                unknown_effects=int(unknown or 0),
                waits=waits,
                oldest_due_at=oldest_due,
                terminal_payloads=int(payloads[0] or 0),
                oldest_terminal_payload_at=payloads[1],
            )

        return self._transact("summary", work, read_only=True)

    def gauges(self, now: datetime) -> StoreGauges:
        """The store gauges of `GET /metrics` (06 §14), from one read transaction: runs by
        reported status, records pending and due at `now` with the age of the oldest, parked
        waits and the holds."""
        moment = truncate_ms(now)

        def work(conn: Connection) -> StoreGauges:
            counts = _status_counts_txn(conn)
            due = conn.execute(
                select(func.count(), func.min(STEPS.c.due_at)).where(
                    STEPS.c.state == "pending", STEPS.c.due_at <= moment
                )
            ).first()
            waits = _waits_txn(conn)
            holds = self._hold_state_txn(conn)
            oldest = None if due is None else due[1]
            lag = 0.0 if oldest is None else max(0.0, (moment - oldest).total_seconds())
            return StoreGauges(
                statuses=counts,
                due=int(due[0] or 0) if due is not None else 0,
                oldest_due_lag_seconds=lag,
                parked_waits=waits,
                holds={
                    "restore": int(holds.restore_hold),
                    "admissions": int(holds.admissions_hold),
                    "restore-review": int(holds.restore_review),
                },
            )

        return self._transact("gauges", work, read_only=True)

    def journal_heads(self) -> dict[str, JournalPosition]:
        """The journal head the store holds for each file group (07 §12.1)."""

        def work(conn: Connection) -> dict[str, JournalPosition]:
            rows = conn.execute(select(JOURNAL_HEADS)).mappings()
            return {
                str(row["group_name"]): JournalPosition(
                    str(row["group_name"]),
                    int(row["sequence"]),
                    str(row["line_hash"]),
                    int(row["file_number"]),
                    int(row["line_offset"]),
                )
                for row in rows
            }

        return self._transact("journal-heads", work, read_only=True)

    def head_identities(self) -> dict[str, StoreIdentity | None]:
        """The identity of the database each journal head was saved in (07 §12.1 item 5; None
        for a head saved before schema version 5, or one that does not parse)."""

        def work(conn: Connection) -> dict[str, StoreIdentity | None]:
            rows = conn.execute(select(JOURNAL_HEADS.c.group_name, JOURNAL_HEADS.c.store_identity))
            return {
                str(group): StoreIdentity.parse(text) if text is not None else None
                for group, text in rows
            }

        return self._transact("journal-head-identities", work, read_only=True)

    def run_ids(self) -> list[uuid.UUID]:
        """Every run's id (tombstones included): what keyed journal references are matched
        against."""
        return self._transact(
            "run-ids",
            lambda conn: list(conn.execute(select(RUNS.c.run_id)).scalars()),
            read_only=True,
        )


def _status_counts_txn(conn: Connection) -> dict[str, int]:
    """Runs by reported status (restore review reads `attention`), every status present."""
    reported = reported_status().label("reported")
    counts = dict.fromkeys(RUN_STATUSES, 0)
    for status, count in conn.execute(
        select(reported, func.count()).select_from(RUNS).group_by(reported)
    ):
        counts[str(status)] = int(count)
    return counts


def _waits_txn(conn: Connection) -> int:
    """Waits not yet over: `wait-until` and `wait-for` records pending or leased."""
    found = conn.execute(
        select(func.count())
        .select_from(STEPS)
        .where(
            STEPS.c.type.in_(("wait-until", "wait-for")),
            STEPS.c.state.in_(("pending", "leased")),
        )
    ).scalar()
    return int(found or 0)
