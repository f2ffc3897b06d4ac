"""The store's statements, built once (SQLAlchemy's compiled cache serves every later
use), the row readers and the field lists they share."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from datetime import datetime
from typing import Any, Final

from sqlalchemy import (
    Integer,
    and_,
    bindparam,
    insert,
    literal_column,
    not_,
    or_,
    select,
    text,
    true,
    tuple_,
    update,
)
from sqlalchemy.engine import Connection

from coordinator_core.shell.store.dialect import (
    Prepared,
    UTCDateTime,
    insert_ignoring,
    lock_one,
    lock_rows,
    upsert_advancing,
)
from coordinator_core.shell.store.queries import settled
from coordinator_core.shell.store.rows import RunRow, StepRow
from coordinator_core.shell.store.tables import (
    CONTROL,
    DEFINITIONS,
    JOURNAL_HEADS,
    LIVE_BINDINGS,
    RUNS,
    STEPS,
)

RUN_FIELDS: Final = tuple(field.name for field in fields(RunRow))
CONTROL_COLUMNS: Final = tuple(column.name for column in CONTROL.c)
STEP_FIELDS: Final = tuple(field.name for field in fields(StepRow))
RUN_IMMUTABLE: Final = (
    "run_id",
    "start_identity",
    "input_digest",
    "owner",
    "origin",
    "trigger",
    "workflow_id",
    "workflow_version",
    "revision",
    "definition_digest",
    "binding_digest",
    "snapshot",
    "input",
    "policy",
    "admitted_at",
    "deadline_at",
    "payload_erased_at",
)
STEP_IMMUTABLE: Final = (
    "run_id",
    "step",
    "type",
    "pure",
    "entered_at",
    "operation",
    "effect_kind",
)
_CLAIMABLE_STATUSES: Final = ("running", "cancel-requested")
_SWEEPABLE_STATUSES: Final = ("running", "attention", "cancel-requested")


def run_from(row: Mapping[Any, Any]) -> RunRow:
    values = {name: row[name] for name in RUN_FIELDS}
    values["policy"] = dict(values["policy"] or {})
    return RunRow(**values)


def step_from(row: Mapping[Any, Any]) -> StepRow:
    return StepRow(**{name: row[name] for name in STEP_FIELDS})


# -- statements built once (the compiled cache serves every later use) ------------------------

_NOW = bindparam("now", type_=UTCDateTime())
RUN_MUTABLE: Final = tuple(name for name in RUN_FIELDS if name not in RUN_IMMUTABLE)
STEP_MUTABLE: Final = tuple(name for name in STEP_FIELDS if name not in ("run_id", "step"))
RUN_FRESH: Final = (
    "status",
    "current_step",
    "cancel_mode",
    "cancel_requested",
    "restore_review",
    "outcome",
    "terminal_output",
    "failure_code",
    "completed_at",
    "payload_erased_at",
    "updated_at",
)
"""The run columns that another transaction may change while a worker holds a lease (a
cancel, a restore review): every fence reads them fresh; the rest of the run is the claim's."""

CONTROL_READ: Final = Prepared(select(CONTROL))
CONTROL_SHARED: Final = Prepared(select(CONTROL).with_for_update(read=True))
RUN_BY_START: Final = Prepared(
    select(RUNS).where(RUNS.c.start_identity == bindparam("start_identity"))
)
DEFINITION: Final = Prepared(
    select(DEFINITIONS.c.run_id, DEFINITIONS.c.snapshot).where(
        DEFINITIONS.c.definition_digest == bindparam("digest")
    )
)
INSERT_RUN: Final = {
    kind: Prepared(
        insert_ignoring(RUNS, kind, on=("start_identity",)).returning(RUNS.c.run_id),
        column_keys=RUN_FIELDS,
    )
    for kind in ("postgresql", "sqlite")
}
"""A run's row; none is inserted (and no row answered) when its start identity exists."""
INSERT_STEP: Final = Prepared(insert(STEPS), column_keys=STEP_FIELDS)
INSERT_LIVE_PAIR: Final = {
    kind: Prepared(
        insert_ignoring(LIVE_BINDINGS, kind),
        column_keys=("definition_digest", "binding_digest", "first_admitted_at"),
    )
    for kind in ("postgresql", "sqlite")
}
INSERT_DEFINITION: Final = {
    kind: Prepared(
        insert_ignoring(DEFINITIONS, kind),
        column_keys=("definition_digest", "run_id", "snapshot", "stored_at"),
    )
    for kind in ("postgresql", "sqlite")
}
LIVE_PAIRS: Final = Prepared(
    select(LIVE_BINDINGS.c.definition_digest, LIVE_BINDINGS.c.binding_digest)
)
CONTROL_EXCLUSIVE: Final = Prepared(select(CONTROL.c.id).with_for_update())
_RUN_SELECT: Final = select(RUNS).where(RUNS.c.run_id == bindparam("run_id"))
RUN_READ: Final = Prepared(_RUN_SELECT)
RUN_LOCKED: Final = Prepared(lock_rows(_RUN_SELECT))
STEPS_OF: Final = Prepared(
    select(STEPS)
    .where(STEPS.c.run_id == bindparam("run_id"))
    .order_by(STEPS.c.entered_at, STEPS.c.step)
)
UPDATE_RUN: Final = Prepared(
    update(RUNS)
    .where(RUNS.c.run_id == bindparam("k_run"))
    .values({name: bindparam(f"v_{name}", type_=RUNS.c[name].type) for name in RUN_MUTABLE})
)
UPDATE_STEP: Final = Prepared(
    update(STEPS)
    .where(STEPS.c.run_id == bindparam("k_run"), STEPS.c.step == bindparam("k_step"))
    .values({name: bindparam(f"v_{name}", type_=STEPS.c[name].type) for name in STEP_MUTABLE})
)
_FENCE_WHERE: Final = (
    STEPS.c.run_id == bindparam("k_run"),
    STEPS.c.step == bindparam("k_step"),
    STEPS.c.generation == bindparam("generation"),
    STEPS.c.attempt == bindparam("attempt"),
    STEPS.c.lease_token == bindparam("token"),
    STEPS.c.state == "leased",
)
_FENCE_SELECT: Final = (
    select(
        *STEPS.c,
        *(column.label(f"c_{column.name}") for column in CONTROL.c),
        *(RUNS.c[name].label(f"r_{name}") for name in RUN_FRESH),
    )
    .select_from(STEPS.join(RUNS, RUNS.c.run_id == STEPS.c.run_id).join(CONTROL, true()))
    .where(*_FENCE_WHERE)
)
FENCE: Final = Prepared(lock_rows(_FENCE_SELECT, of=(STEPS, RUNS)))
FENCE_LIVE: Final = Prepared(
    lock_rows(_FENCE_SELECT.where(STEPS.c.lease_expires_at > _NOW), of=(STEPS, RUNS))
)
"""The fence: the claimed record (whole) only while the claim holds it, the run's columns
that others change, and the control row; the record and the run are locked."""


INSERT_STEPS: dict[int, Prepared] = {1: INSERT_STEP}


def insert_steps(conn: Connection, rows: list[dict[str, Any]]) -> None:
    """Insert records in one statement (a continuation inserts a few at once: one multi-row
    `INSERT` costs less than the driver's batch protocol)."""
    count = len(rows)
    statement = INSERT_STEPS.get(count)
    if statement is None:
        statement = Prepared(
            insert(STEPS).values(
                [
                    {
                        name: bindparam(f"{name}_{index}", type_=STEPS.c[name].type)
                        for name in STEP_FIELDS
                    }
                    for index in range(count)
                ]
            )
        )
        INSERT_STEPS[count] = statement
    if count == 1:
        statement.run(conn, rows[0])
        return
    statement.run(
        conn,
        {f"{name}_{index}": value for index, row in enumerate(rows) for name, value in row.items()},
    )


def _fixed(text_value: str) -> Any:
    """A constant rendered into the statement text (never a parameter), so that the planner
    matches the partial indexes (`state = 'pending'`, …) even under a generic plan of a
    prepared statement."""
    return literal_column("'" + text_value.replace("'", "''") + "'")


def _among(column: Any, values: tuple[str, ...]) -> Any:
    return column.in_([_fixed(value) for value in values])


def _claimable(now: Any, *, due: bool = True) -> tuple[Any, ...]:
    """07 §7.2 step 4 (and step 5: an overdue non-pure record is expired, never leased);
    without `due`, whatever its due instant (what may become claimable later)."""
    return (
        STEPS.c.state == _fixed("pending"),
        *((STEPS.c.due_at <= now,) if due else ()),
        RUNS.c.current_step == STEPS.c.step,
        _among(RUNS.c.status, _CLAIMABLE_STATUSES),
        not_(RUNS.c.restore_review),
        RUNS.c.payload_erased_at.is_(None),
        or_(RUNS.c.cancel_mode != "stopping", and_(STEPS.c.type == "call", STEPS.c.uncertain)),
        or_(STEPS.c.pure, RUNS.c.deadline_at > now),
    )


DUE: Final = Prepared(
    select(*RUNS.c, *(column.label(f"c_{column.name}") for column in CONTROL.c))
    .select_from(STEPS.join(RUNS, RUNS.c.run_id == STEPS.c.run_id).join(CONTROL, true()))
    .where(*_claimable(_NOW))
    .order_by(STEPS.c.due_at, STEPS.c.run_id, STEPS.c.step)
    .limit(1)
    .with_for_update(skip_locked=True, of=(STEPS, RUNS)),
    planned_each_time=True,
)
"""07 §7.2 step 4: the first claimable record, locked with its run (in that order, 07 §6.1),
answering the run whole and the control row, so a claim reads what it decides on in two
statements (this one and the run's records). A bare `SELECT … FOR UPDATE SKIP LOCKED` is safe
here on both backends: PostgreSQL skips records (or runs) another transaction holds, and on
SQLite every write transaction is `BEGIN IMMEDIATE`, so one claim runs at a time (the clause
is dropped there). Planned at each execution (`Prepared`): the ordered scan of `ix_steps_due`
then the run by its key is then the plan whatever statistics the tables have, where a generic
plan kept since the tables were empty scanned or sorted every due record per claim."""
WAITS_DUE: Final = Prepared(
    select(*RUNS.c)
    .select_from(STEPS.join(RUNS, RUNS.c.run_id == STEPS.c.run_id))
    .where(*_claimable(_NOW), STEPS.c.type == _fixed("wait-until"))
    .order_by(STEPS.c.due_at, STEPS.c.run_id, STEPS.c.step)
    .limit(bindparam("limit", type_=Integer))
    .with_for_update(skip_locked=True, of=(STEPS, RUNS)),
    planned_each_time=True,
)
"""The claimable `wait-until` records due now, in claim order (`fire_due_waits`), locked like
the claim's record."""
NEXT: Final = Prepared(
    select(
        select(STEPS.c.due_at)
        .select_from(STEPS.join(RUNS, RUNS.c.run_id == STEPS.c.run_id))
        .where(*_claimable(_NOW, due=False))
        .order_by(STEPS.c.due_at, STEPS.c.run_id, STEPS.c.step)
        .limit(1)
        .scalar_subquery()
        .label("due_at"),
        select(STEPS.c.lease_expires_at)
        .where(STEPS.c.state == _fixed("leased"))
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
            STEPS.c.state == _fixed("pending"),
            not_(STEPS.c.pure),
            _among(RUNS.c.status, _SWEEPABLE_STATUSES),
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
NOTIFY_AT: Final = Prepared(text("SELECT pg_notify(:channel, :payload)"))
TAKE_LAPSED: Final = Prepared(
    update(STEPS)
    .where(
        tuple_(STEPS.c.run_id, STEPS.c.step).in_(
            lock_one(
                select(STEPS.c.run_id, STEPS.c.step)
                .where(STEPS.c.state == _fixed("leased"), STEPS.c.lease_expires_at <= _NOW)
                .order_by(STEPS.c.lease_expires_at, STEPS.c.run_id, STEPS.c.step)
                .limit(1),
                of=STEPS,
            )
        )
    )
    .values(
        lease_token=bindparam("token"),
        lease_owner=bindparam("owner"),
        lease_expires_at=bindparam("expires", type_=UTCDateTime()),
        updated_at=_NOW,
    )
    .returning(STEPS.c.run_id, STEPS.c.step)
)
TOUCH_OVERDUE: Final = Prepared(
    update(STEPS)
    .where(
        tuple_(STEPS.c.run_id, STEPS.c.step).in_(
            lock_one(
                select(STEPS.c.run_id, STEPS.c.step)
                .join(
                    RUNS,
                    and_(RUNS.c.run_id == STEPS.c.run_id, RUNS.c.current_step == STEPS.c.step),
                )
                .where(
                    STEPS.c.state == _fixed("pending"),
                    not_(STEPS.c.pure),
                    RUNS.c.deadline_at <= _NOW,
                    _among(RUNS.c.status, _SWEEPABLE_STATUSES),
                )
                .order_by(RUNS.c.deadline_at, STEPS.c.run_id, STEPS.c.step)
                .limit(1),
                of=STEPS,
            )
        )
    )
    .values(updated_at=_NOW)
    .returning(STEPS.c.run_id, STEPS.c.step)
)


def unsettled_txn(conn: Connection, now: datetime) -> frozenset[tuple[str, str]]:
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


HEAD_COLUMNS: Final = (
    "group_name",
    "sequence",
    "line_hash",
    "file_number",
    "line_offset",
    "updated_at",
    "store_identity",
)
SAVE_HEAD: Final = {
    kind: Prepared(
        upsert_advancing(JOURNAL_HEADS, kind, ("group_name",), "sequence", HEAD_COLUMNS[1:]),
        column_keys=HEAD_COLUMNS,
    )
    for kind in ("postgresql", "sqlite")
}
"""A journal group's head, moved forward only (07 §12.1)."""
