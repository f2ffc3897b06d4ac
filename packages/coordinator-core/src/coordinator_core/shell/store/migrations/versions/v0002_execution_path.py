"""Schema version 2: the execution path (07 §7.7; issue 9).

* `definitions`: the sealed definition snapshot stored once per definition digest (sealed, as
  07 §10 asks, in the scope of the run that first stored it, `run_id`); runs admitted from
  now on reference it by `runs.definition_digest` and keep `runs.snapshot` NULL.
* `live_bindings`: every (definition digest, binding digest) a run was admitted with, so the
  live-binding check inside an admission reads a handful of rows instead of scanning the runs.
* `ix_runs_deadline_live`: the overdue sweep finds the runs whose deadline passed among the
  live runs only, so a store full of parked waits costs one index probe per sweep.

Frozen once released, like every migration (the ledger pins this file's checksum).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from coordinator_core.shell.store.dialect import UTCDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

VERSION = 2


def upgrade() -> None:
    op.create_table(
        "definitions",
        sa.Column("definition_digest", sa.String(71), primary_key=True),
        sa.Column("run_id", sa.Uuid, nullable=False),
        sa.Column("snapshot", sa.LargeBinary, nullable=False),
        sa.Column("stored_at", UTCDateTime, nullable=False),
    )
    op.create_table(
        "live_bindings",
        sa.Column("definition_digest", sa.String(71), primary_key=True),
        sa.Column("binding_digest", sa.String(71), primary_key=True),
        sa.Column("first_admitted_at", UTCDateTime, nullable=False),
    )
    # The pairs of the runs admitted before this version.
    op.execute(
        "INSERT INTO live_bindings (definition_digest, binding_digest, first_admitted_at)"
        " SELECT definition_digest, binding_digest, MIN(admitted_at) FROM runs"
        " GROUP BY definition_digest, binding_digest"
    )
    live = sa.text("status IN ('running', 'attention', 'cancel-requested')")
    op.create_index(
        "ix_runs_deadline_live",
        "runs",
        ["deadline_at", "run_id"],
        postgresql_where=live,
        sqlite_where=live,
    )


def downgrade() -> None:
    raise NotImplementedError("Store migrations are forward-only (07 §14.4).")
