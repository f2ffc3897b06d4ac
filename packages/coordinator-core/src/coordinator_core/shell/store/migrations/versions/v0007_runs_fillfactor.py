"""Schema version 7: room on each `runs` page for the run's next version (PostgreSQL).

A run's row is written three times: inserted at admission, updated when a finish carries the run
on to its next record (`current_step` and `updated_at` change, no indexed column does), updated
again when it settles (`status`, `completed_at`). PostgreSQL can write the middle update as a
heap-only tuple — the new version on the same page, no new entry in any of the table's eight
indexes — only when that page has room for it, and pages filled to the brim by admissions
often had none (at eight runs in flight a fifth of all run updates were heap-only, fewer than
half of those that could be). `fillfactor = 70` keeps 30% of each new page free for such
versions (measured: half of all run updates heap-only, every one that can be, and 5–14% less
PostgreSQL CPU per run at eight runs in flight; no change at one).

The price is room: the `runs` heap takes about 1,190 bytes per parked run instead of 630 (a
store of parked runs 27% larger in all; `fillfactor = 85` cost half of that and saved no CPU
measurably). Pages written before the change keep their old filling (the setting applies to
pages as they are filled; nothing is rewritten). SQLite has no such setting: nothing changes
there, and the version is recorded all the same.

Frozen once released, like every migration (the ledger pins this file's checksum).

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

VERSION = 7

RUNS_FILLFACTOR = 70


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"ALTER TABLE runs SET (fillfactor = {RUNS_FILLFACTOR})")


def downgrade() -> None:
    raise NotImplementedError("Store migrations are forward-only (07 §14.4).")
