"""Schema version 5: the store's identity, a witness that a restore does not bring back
(07 §12.1 item 5).

* `store_identity`: one row holding `instance_id`, 32 random hex digits written when this
  version is applied (at the store's creation for a new store). With the SQLite file's device
  and inode, or the PostgreSQL cluster's system identifier, timeline and database OID, it makes
  up the identity of the database the store lives in (`shell/store/identity.py`).
* `journal_heads.store_identity`: the identity of the database each head was saved in. At start
  a store whose identity differs from the one its heads name was restored (or its standby
  promoted) and is refused (`coordinator.deployment.store-restored`). Heads saved before this
  version have none and are not compared.

Frozen once released, like every migration (the ledger pins this file's checksum).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import secrets
import time

import sqlalchemy as sa
from alembic import op

from coordinator_core.shell.store.dialect import UTCDateTime

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

VERSION = 5


def upgrade() -> None:
    table = op.create_table(
        "store_identity",
        sa.Column("instance_id", sa.String(32), primary_key=True),
        sa.Column("created_at", UTCDateTime, nullable=False),
    )
    op.bulk_insert(
        table,
        [{"instance_id": secrets.token_hex(16), "created_at": time.time_ns() // 1_000_000}],
    )
    op.add_column("journal_heads", sa.Column("store_identity", sa.String(200), nullable=True))


def downgrade() -> None:
    raise NotImplementedError("Store migrations are forward-only (07 §14.4).")
