"""`RunReads`: what the service's views, the metrics and an idle worker read — a run and its
records, pages of runs, the holds, the doctor's summary, the gauges, the journal heads and the
instants an idle worker may sleep until. Each method is one read-only transaction (one
consistent snapshot: repeatable read on PostgreSQL, a deferred read transaction on SQLite).
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import and_, bindparam, false, func, not_, null, or_, select, true
from sqlalchemy.engine import Connection

from coordinator_core.engine.instants import Instant
from coordinator_core.shell.audit.writer import JournalPosition
from coordinator_core.shell.observe.metrics import StoreGauges
from coordinator_core.shell.store.dialect import Prepared, PreparedShapes, UTCDateTime
from coordinator_core.shell.store.guards import refuse
from coordinator_core.shell.store.identity import StoreIdentity
from coordinator_core.shell.store.queries import (
    among,
    claimable,
    fixed,
    has_unknown_effect,
    reported_status,
    settled,
    unknown_effect,
)
from coordinator_core.shell.store.records import (
    ControlRow,
    HoldState,
    ListedRun,
    NextInstants,
    RunPage,
    RunPosition,
    RunSnapshot,
    StepAttempt,
    StoredRun,
    StoreSummary,
    WatchedRun,
)
from coordinator_core.shell.store.schema import (
    CONTROL,
    DEFINITIONS,
    JOURNAL_HEADS,
    LIVE_BINDINGS,
    RUN_STATUSES,
    RUNS,
    STEP_ATTEMPTS,
    STEPS,
    control_of,
    run_of,
    step_of,
)
from coordinator_core.shell.store.transactor import Transactor

__all__ = [
    "ATTEMPTS_PER_STEP",
    "RunReads",
    "hold_state_txn",
    "locked_snapshot_txn",
    "unsettled_txn",
]

_SWEEPABLE: Final = ("running", "attention", "cancel-requested")
ATTEMPTS_PER_STEP: Final = 10
"""How many of a step's ended attempts an inspection shows (the newest)."""


class RunReads:
    """The store's reads (see the module documentation)."""

    def __init__(self, transactor: Transactor) -> None:
        self._tx = transactor

    def control(self) -> ControlRow:
        """The control row as it is now (no identity check)."""
        return self._tx.transact("control", _control_txn, read_only=True)

    def get_run(self, run_id: uuid.UUID) -> StoredRun | None:
        """The run (tombstones included), or None."""

        def work(conn: Connection) -> StoredRun | None:
            row = conn.execute(select(RUNS).where(RUNS.c.run_id == run_id)).mappings().first()
            return None if row is None else run_of(row)

        return self._tx.transact("get-run", work, read_only=True)

    def watched_runs(self, run_ids: Collection[uuid.UUID]) -> dict[uuid.UUID, WatchedRun]:
        """What the waiting status reads of a process follow (06 §5.3), for all their runs in
        one read of the run rows: a run absent here is absent (or erased) in the store."""

        def work(conn: Connection) -> dict[uuid.UUID, WatchedRun]:
            statement = select(
                RUNS.c.run_id,
                reported_status().label("reported"),
                RUNS.c.current_step,
                RUNS.c.cancel_requested,
                has_unknown_effect().label("unknown"),
                RUNS.c.failure_code,
            ).where(RUNS.c.run_id.in_(sorted(run_ids)))
            return {
                row.run_id: WatchedRun(
                    status=row.reported,
                    current_step=row.current_step,
                    cancel_requested=bool(row.cancel_requested),
                    uncertain=bool(row.unknown),
                    failure_code=row.failure_code,
                )
                for row in conn.execute(statement)
            }

        if not run_ids:
            return {}
        return self._tx.transact("watched-runs", work, read_only=True)

    def find_run(self, start_identity: str) -> StoredRun | None:
        """The run admitted under a start identity (the event path's lookup-first, 06 §8)."""

        def work(conn: Connection) -> StoredRun | None:
            row = _RUN_BY_START.first(conn, {"start_identity": start_identity})
            return None if row is None else run_of(row)

        return self._tx.transact("find-run", work, read_only=True)

    def get_run_snapshot(self, run_id: uuid.UUID) -> RunSnapshot | None:
        """The run, all its records and the control row from one consistent read (06 §5.4)."""

        # The three reads, their transaction's BEGIN and COMMIT in one round trip on PostgreSQL.
        key = {"run_id": run_id}
        control, run, steps = self._tx.read_at_once(
            "get-run-snapshot", (_CONTROL_ROW, {}), (_RUN_READ, key), (STEPS_OF, key)
        )
        return _snapshot_of(control, run, steps)

    def get_run_status(self, run_id: uuid.UUID) -> ListedRun | None:
        """The run as a status read shows it (06 §11.1), from one consistent read with the
        control row: the run row with its current record's state and due instant and the
        unknown-effect flag computed by the store, as a list page reads them, its records
        not read whole; None when the run is absent."""
        rows = self._tx.read_alone("get-run-status", (_RUN_STATUS, {"run_id": run_id}))
        if not rows:
            raise refuse("coordinator.deployment.schema-mismatch")
        return _listed_of(rows[0]) if rows[0]["run_id"] is not None else None

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

        params: dict[str, Any] = {"limit": limit + 1}
        if owner is not None:
            params["owner"] = owner
        chosen = sorted(workflows) if workflows is not None else None
        for index, name in enumerate(chosen or ()):
            params[f"workflow_{index}"] = name
        if workflow is not None:
            params["workflow"] = workflow
        if status is not None:
            params["status"] = status
        if after is not None:
            params["after_admitted_at"] = after.admitted_at
            params["after_run_id"] = after.run_id
        shape = _PageShape(
            owner is not None,
            None if chosen is None else len(chosen),
            workflow is not None,
            status is not None,
            after is not None,
        )
        rows = self._tx.read_alone("list-runs", (_PAGE_STATEMENTS(shape), params))
        if not rows:
            raise refuse("coordinator.deployment.schema-mismatch")
        if rows[0]["run_id"] is None:
            rows = []
        page = tuple(_listed_of(row) for row in rows[:limit])
        last = page[-1].run if page else None
        more = len(rows) > limit
        position = RunPosition(last.state.admitted_at, last.run_id) if more and last else None
        return RunPage(page, position)

    def inspect_run(
        self, run_id: uuid.UUID, per_step: int = ATTEMPTS_PER_STEP
    ) -> tuple[RunSnapshot, dict[str, tuple[tuple[StepAttempt, ...], int]]] | None:
        """The run, its records and the control row (`get_run_snapshot`) with each step's
        latest ended attempts (`recent_attempts`), from one consistent read (06 §5.4)."""

        # The four reads, their transaction's BEGIN and COMMIT in one round trip on PostgreSQL.
        key = {"run_id": run_id}
        control, run, steps, attempts = self._tx.read_at_once(
            "inspect-run",
            (_CONTROL_ROW, {}),
            (_RUN_READ, key),
            (STEPS_OF, key),
            (_RECENT_ATTEMPTS, key | {"per_step": per_step}),
        )
        snapshot = _snapshot_of(control, run, steps)
        return None if snapshot is None else (snapshot, _recent_attempts_of(attempts))

    def recent_attempts(
        self, run_id: uuid.UUID, per_step: int = ATTEMPTS_PER_STEP
    ) -> dict[str, tuple[tuple[StepAttempt, ...], int]]:
        """Each step's latest `per_step` ended attempts (newest first) and how many it has in
        all, from one read: the inspection's timeline, bounded however long a wait was
        observed (the rest is paged by `attempts`)."""
        (attempts,) = self._tx.read_at_once(
            "recent-attempts", (_RECENT_ATTEMPTS, {"run_id": run_id, "per_step": per_step})
        )
        return _recent_attempts_of(attempts)

    def attempts(
        self,
        run_id: uuid.UUID,
        step: str,
        *,
        before: tuple[int, int] | None = None,
        limit: int = 50,
    ) -> tuple[tuple[StepAttempt, ...], tuple[int, int] | None]:
        """One page of a step's ended attempts, newest first by (generation, attempt), those
        before the position `before`; and the position after the page (None on the last)."""
        if not 1 <= limit <= 1000:
            raise ValueError("The page limit is out of range.")

        def work(conn: Connection) -> tuple[tuple[StepAttempt, ...], tuple[int, int] | None]:
            table = STEP_ATTEMPTS
            statement = select(table).where(table.c.run_id == run_id, table.c.step == step)
            if before is not None:
                generation, attempt = before
                statement = statement.where(
                    or_(
                        table.c.generation < generation,
                        and_(table.c.generation == generation, table.c.attempt < attempt),
                    )
                )
            statement = statement.order_by(table.c.generation.desc(), table.c.attempt.desc())
            rows = [_attempt_of(row) for row in conn.execute(statement.limit(limit + 1)).mappings()]
            page = tuple(rows[:limit])
            last = page[-1] if page and len(rows) > limit else None
            return page, None if last is None else (last.generation, last.attempt)

        return self._tx.transact("attempts", work, read_only=True)

    def hold_state(self) -> HoldState:
        """06 §11.8: the holds and the number of runs under restore review."""
        return self._tx.transact("hold-state", hold_state_txn, read_only=True)

    def unsettled_bindings(self, now: Instant) -> frozenset[tuple[str, str]]:
        """Every distinct (definition digest, binding digest) of the runs not settled at `now`
        (07 §13): the input of the live-binding check (05 §10)."""
        return self._tx.transact(
            "unsettled-bindings", lambda conn: unsettled_txn(conn, now), read_only=True
        )

    def definition_snapshot(self, definition_digest: str) -> tuple[uuid.UUID, bytes] | None:
        """The sealed snapshot stored for `definition_digest` and the run whose scope seals it
        (07 §10): the copy stored once per digest, else (runs admitted before schema version
        2) some run's own copy whose payload is not erased; None when there is none."""

        def work(conn: Connection) -> tuple[uuid.UUID, bytes] | None:
            found = _DEFINITION.first(conn, {"digest": definition_digest})
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

        return self._tx.transact("definition-snapshot", work, read_only=True)

    def summary(self, now: Instant) -> StoreSummary:
        """The store part of `GET /v1/doctor` (06 §7.1), from one read transaction."""

        def work(conn: Connection) -> StoreSummary:
            control = _control_txn(conn)
            counts = _status_counts_txn(conn)
            holds = hold_state_txn(conn)
            unknown = conn.execute(
                select(func.count()).select_from(STEPS).where(unknown_effect(STEPS))
            ).scalar()
            oldest_due = conn.execute(
                select(func.min(STEPS.c.due_at)).where(STEPS.c.state == "pending")
            ).scalar()
            payloads = conn.execute(
                select(func.count(), func.min(RUNS.c.completed_at)).where(
                    settled(now), RUNS.c.payload_erased_at.is_(None)
                )
            ).first()
            assert payloads is not None
            return StoreSummary(
                store=self._tx.location.kind,
                database_id=control.database_id,
                schema_version=control.schema_version,
                active_package_digest=control.active_package_digest,
                active_revision=control.active_revision,
                restore_hold=control.restore_hold,
                admissions_hold=control.admissions_hold,
                restore_review=holds.restore_review,
                statuses=counts,
                unknown_effects=int(unknown or 0),
                waits=_waits_txn(conn),
                oldest_due_at=oldest_due,
                terminal_payloads=int(payloads[0] or 0),
                oldest_terminal_payload_at=payloads[1],
            )

        return self._tx.transact("summary", work, read_only=True)

    def gauges(self, now: Instant) -> StoreGauges:
        """The store gauges of `GET /metrics` (06 §14), from one read transaction: runs by
        reported status, records pending and due at `now` with the age of the oldest, parked
        waits and the holds."""

        def work(conn: Connection) -> StoreGauges:
            counts = _status_counts_txn(conn)
            due = conn.execute(
                select(func.count(), func.min(STEPS.c.due_at)).where(
                    STEPS.c.state == "pending", STEPS.c.due_at <= now
                )
            ).first()
            holds = hold_state_txn(conn)
            oldest = None if due is None else due[1]
            return StoreGauges(
                statuses=counts,
                due=int(due[0] or 0) if due is not None else 0,
                oldest_due_lag_seconds=0.0 if oldest is None else max(0.0, (now - oldest) / 1000),
                parked_waits=_waits_txn(conn),
                holds={
                    "restore": int(holds.restore_hold),
                    "admissions": int(holds.admissions_hold),
                    "restore-review": int(holds.restore_review),
                },
            )

        return self._tx.transact("gauges", work, read_only=True)

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

        return self._tx.transact("journal-heads", work, read_only=True)

    def head_identities(self) -> dict[str, StoreIdentity | None]:
        """The identity of the database each journal head was saved in (07 §12.1 item 5; None
        for a head saved before schema version 5, or one that does not parse)."""

        def work(conn: Connection) -> dict[str, StoreIdentity | None]:
            rows = conn.execute(select(JOURNAL_HEADS.c.group_name, JOURNAL_HEADS.c.store_identity))
            return {
                str(group): StoreIdentity.parse(text) if text is not None else None
                for group, text in rows
            }

        return self._tx.transact("journal-head-identities", work, read_only=True)

    def run_ids(self) -> list[uuid.UUID]:
        """Every run's id (tombstones included): what keyed journal references are matched
        against."""
        return self._tx.transact(
            "run-ids",
            lambda conn: list(conn.execute(select(RUNS.c.run_id)).scalars()),
            read_only=True,
        )

    def next_instants(self, now: Instant) -> NextInstants:
        """07 §7.7 item 4: when an idle worker must look again, from one read (three index
        probes: `ix_steps_due`, `ix_steps_lease`, `ix_runs_deadline_live`); nothing while the
        active package is not this process's or a restore hold is set (a hold's release, like
        every change that makes a record claimable now, rings)."""

        def work(conn: Connection) -> NextInstants:
            row = _NEXT.first(conn, {"now": now})
            control = self._tx.verified(row, prefix="c_")
            if row is None or not self._tx.may_claim(control):
                return NextInstants()
            return NextInstants(row["due_at"], row["lapses_at"], row["overdue_at"])

        return self._tx.transact("next-instants", work, read_only=True)


# -- the transactions' parts, shared with the writes ----------------------------------------------

_RUN_SELECT: Final = select(RUNS).where(RUNS.c.run_id == bindparam("run_id"))
_RUN_READ: Final = Prepared(_RUN_SELECT)
_RUN_LOCKED: Final = Prepared(_RUN_SELECT.with_for_update())
_RANKED_ATTEMPTS: Final = (
    select(
        *STEP_ATTEMPTS.c,
        func.row_number()
        .over(
            partition_by=STEP_ATTEMPTS.c.step,
            order_by=(STEP_ATTEMPTS.c.generation.desc(), STEP_ATTEMPTS.c.attempt.desc()),
        )
        .label("rank"),
        func.count().over(partition_by=STEP_ATTEMPTS.c.step).label("total"),
    )
    .where(STEP_ATTEMPTS.c.run_id == bindparam("run_id"))
    .subquery()
)
_RECENT_ATTEMPTS: Final = Prepared(
    select(_RANKED_ATTEMPTS)
    .where(_RANKED_ATTEMPTS.c.rank <= bindparam("per_step"))
    .order_by(_RANKED_ATTEMPTS.c.step, _RANKED_ATTEMPTS.c.rank)
)
"""Each step's latest `per_step` ended attempts of a run, newest first, each with its step's
total."""
_LISTED_CURRENT: Final = STEPS.alias("listed_current")
# A status never shows the sealed snapshot or input: a listed run does not read them.
_UNLISTED: Final = frozenset({"snapshot", "input"})
_LISTED: Final = select(
    *(null().label(column.name) if column.name in _UNLISTED else column for column in RUNS.c),
    _LISTED_CURRENT.c.state.label("listed_state"),
    _LISTED_CURRENT.c.due_at.label("listed_due_at"),
    has_unknown_effect().label("listed_unknown"),
).select_from(
    RUNS.outerjoin(
        _LISTED_CURRENT,
        and_(
            _LISTED_CURRENT.c.run_id == RUNS.c.run_id,
            _LISTED_CURRENT.c.step == RUNS.c.current_step,
        ),
    )
)
"""`RunReads.list_runs`' statement before its filters: each run with its current record's
state and due instant and the unknown-effect flag (06 §11.1), so that a page is one statement
and its records are not read whole; the run's sealed `snapshot` and `input` are not read (None
in its `StoredRun`)."""
_ONE_LISTED: Final = _LISTED.where(RUNS.c.run_id == bindparam("run_id")).subquery("listed")
_RUN_STATUS: Final = Prepared(
    select(CONTROL.c.id.label("control_id"), *_ONE_LISTED.c).select_from(
        CONTROL.outerjoin(_ONE_LISTED, true())
    )
)
"""`RunReads.get_run_status`' statement: one run as `_LISTED` reads it, beside the control
row, in one statement (one snapshot): no row when the control row is missing, a row of nulls
but its own when the run is."""


@dataclass(frozen=True, slots=True)
class _PageShape:
    """Which filters a list page has (`RunReads.list_runs`), each a statement of its own:
    an owner, the caller's workflows (how many), one workflow, a status, a position."""

    owner: bool
    workflows: int | None
    workflow: bool
    status: bool
    after: bool


def _page_of(shape: _PageShape) -> Any:
    """`_LISTED` with a shape's filters, newest first, each value a parameter (`limit`
    included), so that a page's statement is worked out once per shape, not at every read;
    beside the control row, in one statement (one snapshot) as a status read is: no row when
    the control row is missing, one row of nulls but its own when the page is empty."""
    statement = _LISTED
    if shape.owner:
        statement = statement.where(RUNS.c.owner == bindparam("owner"))
    if shape.workflows is not None:
        statement = statement.where(
            RUNS.c.workflow_id.in_([bindparam(f"workflow_{i}") for i in range(shape.workflows)])
            if shape.workflows
            else false()
        )
    if shape.workflow:
        statement = statement.where(RUNS.c.workflow_id == bindparam("workflow"))
    if shape.status:
        statement = statement.where(reported_status() == bindparam("status"))
    if shape.after:
        statement = statement.where(
            or_(
                RUNS.c.admitted_at < bindparam("after_admitted_at"),
                and_(
                    RUNS.c.admitted_at == bindparam("after_admitted_at"),
                    RUNS.c.run_id < bindparam("after_run_id"),
                ),
            )
        )
    newest_first = (RUNS.c.admitted_at.desc(), RUNS.c.run_id.desc())
    page = statement.order_by(*newest_first).limit(bindparam("limit")).subquery("page")
    return (
        select(CONTROL.c.id.label("control_id"), *page.c)
        .select_from(CONTROL.outerjoin(page, true()))
        .order_by(page.c.admitted_at.desc(), page.c.run_id.desc())
    )


_PAGE_STATEMENTS: Final = PreparedShapes(_page_of, kept=64)
"""A list page's statement, by its shape (policies name few workflows)."""


STEPS_OF: Final = Prepared(
    select(STEPS)
    .where(STEPS.c.run_id == bindparam("run_id"))
    .order_by(STEPS.c.entered_at, STEPS.c.step)
)
"""A run's records in order of entry (by `entered_at`, then step id)."""
_RUN_BY_START: Final = Prepared(
    select(RUNS).where(RUNS.c.start_identity == bindparam("start_identity"))
)
_DEFINITION: Final = Prepared(
    select(DEFINITIONS.c.run_id, DEFINITIONS.c.snapshot).where(
        DEFINITIONS.c.definition_digest == bindparam("digest")
    )
)
_CONTROL_ROW: Final = Prepared(select(CONTROL))


def locked_snapshot_txn(
    conn: Connection, control: ControlRow, run_id: uuid.UUID
) -> RunSnapshot | None:
    """The run `run_id`, locked `FOR UPDATE`, and its records, read in the calling (write)
    transaction; None when there is no such run."""
    run = _RUN_LOCKED.first(conn, {"run_id": run_id})
    if run is None:
        return None
    steps = STEPS_OF.rows(conn, {"run_id": run_id})
    return RunSnapshot(control, run_of(run), tuple(step_of(step) for step in steps))


def hold_state_txn(conn: Connection) -> HoldState:
    row = conn.execute(select(CONTROL.c.restore_hold, CONTROL.c.admissions_hold)).first()
    if row is None:
        raise refuse("coordinator.deployment.schema-mismatch")
    review = conn.execute(
        select(func.count()).select_from(RUNS).where(RUNS.c.restore_review)
    ).scalar()
    return HoldState(bool(row[0]), bool(row[1]), int(review or 0))


def unsettled_txn(conn: Connection, now: Instant) -> frozenset[tuple[str, str]]:
    """The (definition digest, binding digest) pairs some run not settled at `now` still has:
    the recorded pairs (a handful), each kept when one such run exists (an index probe)."""
    pairs = select(LIVE_BINDINGS.c.definition_digest, LIVE_BINDINGS.c.binding_digest).where(
        select(RUNS.c.run_id)
        .where(
            RUNS.c.definition_digest == LIVE_BINDINGS.c.definition_digest,
            RUNS.c.binding_digest == LIVE_BINDINGS.c.binding_digest,
            not_(settled(now)),
        )
        .exists()
    )
    return frozenset((str(row[0]), str(row[1])) for row in conn.execute(pairs))


def _snapshot_of(
    control: list[dict[str, Any]], run: list[dict[str, Any]], steps: list[dict[str, Any]]
) -> RunSnapshot | None:
    """A run's snapshot from the rows of `_CONTROL_ROW`, `_RUN_READ` and `STEPS_OF` read in one
    transaction; None when the run is absent; `schema-mismatch` without a control row."""
    if not control:
        raise refuse("coordinator.deployment.schema-mismatch")
    if not run:
        return None
    return RunSnapshot(
        control_of(control[0]), run_of(run[0]), tuple(step_of(step) for step in steps)
    )


def _listed_of(row: Any) -> ListedRun:
    """A run of `_LISTED`'s row: its current record's due instant only while it is pending."""
    return ListedRun(
        run_of(row),
        row["listed_due_at"] if row["listed_state"] == "pending" else None,
        bool(row["listed_unknown"]),
    )


def _recent_attempts_of(
    rows: list[dict[str, Any]],
) -> dict[str, tuple[tuple[StepAttempt, ...], int]]:
    """Each step's latest ended attempts, newest first, and its total, from the rows of
    `_RECENT_ATTEMPTS`."""
    found: dict[str, tuple[list[StepAttempt], int]] = {}
    for row in rows:
        attempts, _ = found.setdefault(row["step"], ([], int(row["total"])))
        attempts.append(_attempt_of(row))
    return {step: (tuple(attempts), total) for step, (attempts, total) in found.items()}


def _attempt_of(row: Any) -> StepAttempt:
    return StepAttempt(
        run_id=row["run_id"],
        step=row["step"],
        generation=int(row["generation"]),
        attempt=int(row["attempt"]),
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        outcome=row["outcome"],
        failure_code=row["failure_code"],
    )


def _control_txn(conn: Connection) -> ControlRow:
    row = _CONTROL_ROW.first(conn)
    if row is None:
        raise refuse("coordinator.deployment.schema-mismatch")
    return control_of(row)


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


_NOW: Final = bindparam("now", type_=UTCDateTime())
_NEXT: Final = Prepared(
    select(
        select(STEPS.c.due_at)
        .select_from(STEPS.join(RUNS, RUNS.c.run_id == STEPS.c.run_id))
        .where(*claimable(_NOW, due=False))
        .order_by(STEPS.c.due_at, STEPS.c.run_id, STEPS.c.step)
        .limit(1)
        .scalar_subquery()
        .label("due_at"),
        select(STEPS.c.lease_expires_at)
        .where(STEPS.c.state == fixed("leased"))
        .order_by(STEPS.c.lease_expires_at, STEPS.c.run_id, STEPS.c.step)
        .limit(1)
        .scalar_subquery()
        .label("lapses_at"),
        select(RUNS.c.deadline_at)
        .select_from(
            STEPS.join(
                RUNS, and_(RUNS.c.run_id == STEPS.c.run_id, RUNS.c.current_step == STEPS.c.step)
            )
        )
        .where(
            STEPS.c.state == fixed("pending"),
            not_(STEPS.c.pure),
            among(RUNS.c.status, _SWEEPABLE),
        )
        .order_by(RUNS.c.deadline_at, STEPS.c.run_id, STEPS.c.step)
        .limit(1)
        .scalar_subquery()
        .label("overdue_at"),
        *(column.label(f"c_{column.name}") for column in CONTROL.c),
    ).select_from(CONTROL),
    planned_each_time=True,
)
"""`next_instants`: the claim's, the lapsed-lease sweep's and the overdue sweep's first
candidates, whatever their instant (each the first entry of its ordered index), with the
control row."""
