"""Schema version 4: the journal heads of restore detection (07 §12.1).

* `journal_heads`: per audit journal file group (a process's `<role>-<stamp>-<hex>` prefix),
  the sequence, line hash and position (file number, byte offset) of a line the store knows
  was on stable storage when a transaction of that process committed. At start the service
  checks the journal against these heads and reads only the entries after them.

Frozen once released, like every migration (the ledger pins this file's checksum).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from coordinator_core.shell.store.dialect import UTCDateTime

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

VERSION = 4


def upgrade() -> None:
    op.create_table(
        "journal_heads",
        sa.Column("group_name", sa.String(64), primary_key=True),
        sa.Column("sequence", sa.BigInteger, nullable=False),
        sa.Column("line_hash", sa.String(71), nullable=False),
        sa.Column("file_number", sa.Integer, nullable=False),
        sa.Column("line_offset", sa.BigInteger, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
    )


def downgrade() -> None:
    raise NotImplementedError("Store migrations are forward-only (07 §14.4).")
