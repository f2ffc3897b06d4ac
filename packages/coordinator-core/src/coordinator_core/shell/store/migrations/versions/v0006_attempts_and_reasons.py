"""Schema version 6: each attempt's history, and the operator's reasons in the store.

* `step_attempts`: one row per attempt of a step record that ended (a call's attempt, a
  wait's observation, a pure step's work): its generation and attempt, when it started and
  ended, how it ended (the journal's outcome word) and the failure code it left. Written in the
  transaction that ended the attempt; never erased (it holds no payload), so an inspection
  shows a run's timeline after retention too.
* `runs.operator_action`, `runs.operator_action_at`, `runs.operator_reason_ref`: the last
  operator command that changed the run (`cancel`, `retry-same`, `reconcile`), when, and the
  keyed reference of its reason (07 §11: the same `reasonRef` the journal's request entry
  carries, never the reason itself).
* `control.restore_hold_reason_ref`: the keyed reference of the reason of the restore hold in
  force (07 §12 step 3), cleared by its release.

Frozen once released, like every migration (the ledger pins this file's checksum).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from coordinator_core.shell.store.dialect import UTCDateTime

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

VERSION = 6


def upgrade() -> None:
    op.create_table(
        "step_attempts",
        sa.Column("run_id", sa.Uuid, sa.ForeignKey("runs.run_id"), primary_key=True),
        sa.Column("step", sa.String(128), primary_key=True),
        sa.Column("generation", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("attempt", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("started_at", UTCDateTime, nullable=True),
        sa.Column("ended_at", UTCDateTime, nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("failure_code", sa.String(64), nullable=True),
        sa.CheckConstraint(
            "outcome IN ('delivered', 'retry', 'dead-lettered', 'unknown', 'expired',"
            " 'cancelled', 'pending', 'timed-out')",
            name="ck_step_attempts_outcome",
        ),
    )
    op.add_column("runs", sa.Column("operator_action", sa.String(16), nullable=True))
    op.add_column("runs", sa.Column("operator_action_at", UTCDateTime, nullable=True))
    op.add_column("runs", sa.Column("operator_reason_ref", sa.String(80), nullable=True))
    op.add_column("control", sa.Column("restore_hold_reason_ref", sa.String(80), nullable=True))


def downgrade() -> None:
    raise NotImplementedError("Store migrations are forward-only (07 §14.4).")
