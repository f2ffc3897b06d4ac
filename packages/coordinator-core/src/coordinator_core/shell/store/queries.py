"""SQL forms of the run predicates the store filters by (file 07 §5, §13; 06 §11.5).

Each mirrors a rule of the pure engine exactly (`is_settled`, `StepRecord.effect_state`,
`RunState.reported_status`) so that the store can select by it; a conformance test compares
both forms over the same states.
"""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy import and_, case, exists, literal_column, not_, or_, select
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.expression import FromClause

from coordinator_core.engine.codes import NON_RECOVERABLE_CODES
from coordinator_core.engine.instants import Instant
from coordinator_core.shell.store.schema import RUNS, STEPS, TERMINAL_STATUSES

__all__ = [
    "among",
    "claimable",
    "fixed",
    "has_unknown_effect",
    "reported_status",
    "settled",
    "unknown_effect",
]

_RISKY = ("mutation", "evaluation")


def unknown_effect(steps: FromClause) -> ColumnElement[bool]:
    """The record is a prepared mutation or evaluation whose effect is `unknown`."""
    return and_(
        among(steps.c.effect_kind, _RISKY),
        steps.c.command_prepared,
        steps.c.settled_by.is_(None),
        or_(steps.c.uncertain, steps.c.dispatched),
    )


def has_unknown_effect() -> ColumnElement[bool]:
    """The run (of the enclosing query over `runs`) has a record with an unknown effect."""
    return exists(
        select(STEPS.c.step).where(STEPS.c.run_id == RUNS.c.run_id, unknown_effect(STEPS))
    )


def settled(now: Instant) -> ColumnElement[bool]:
    """07 §13: terminal, or `failed` with `retry-same` no longer possible (non-recoverable code
    or, for a non-pure current record, the deadline passed) — with no unknown effect and no
    restore review. `now` is the instant the deadline is compared with."""
    current = STEPS.alias("settled_current")
    failed_for_good = exists(
        select(current.c.step).where(
            current.c.run_id == RUNS.c.run_id,
            current.c.step == RUNS.c.current_step,
            or_(
                current.c.failure_code.in_(sorted(NON_RECOVERABLE_CODES)),
                and_(not_(current.c.pure), RUNS.c.deadline_at <= now),
            ),
        )
    )
    return and_(
        not_(RUNS.c.restore_review),
        not_(has_unknown_effect()),
        or_(
            RUNS.c.status.in_(TERMINAL_STATUSES),
            and_(RUNS.c.status == "failed", failed_for_good),
        ),
    )


def reported_status() -> ColumnElement[str]:
    """06 §11.5 / 07 §5: a non-terminal run under restore review reports `attention`."""
    return case(
        (
            and_(
                RUNS.c.restore_review, not_(among(RUNS.c.status, tuple(sorted(TERMINAL_STATUSES))))
            ),
            fixed("attention"),
        ),
        else_=RUNS.c.status,
    )


# -- the claim's selection (07 §7.2 step 4) -------------------------------------------------------

_CLAIMABLE_STATUSES: Final = ("running", "cancel-requested")


def fixed(text_value: str) -> Any:
    """A constant rendered into the statement text (never a parameter), so that the planner
    matches the partial indexes (`state = 'pending'`, …) even under a generic plan of a
    prepared statement."""
    return literal_column("'" + text_value.replace("'", "''") + "'")


def among(column: Any, values: tuple[str, ...]) -> Any:
    return column.in_([fixed(value) for value in values])


def claimable(now: Any, *, due: bool = True) -> tuple[Any, ...]:
    """07 §7.2 step 4 (and step 5: an overdue non-pure record is expired, never leased);
    without `due`, whatever its due instant (what may become claimable later)."""
    return (
        STEPS.c.state == fixed("pending"),
        *((STEPS.c.due_at <= now,) if due else ()),
        RUNS.c.current_step == STEPS.c.step,
        among(RUNS.c.status, _CLAIMABLE_STATUSES),
        not_(RUNS.c.restore_review),
        RUNS.c.payload_erased_at.is_(None),
        or_(RUNS.c.cancel_mode != "stopping", and_(STEPS.c.type == "call", STEPS.c.uncertain)),
        or_(STEPS.c.pure, RUNS.c.deadline_at > now),
    )
