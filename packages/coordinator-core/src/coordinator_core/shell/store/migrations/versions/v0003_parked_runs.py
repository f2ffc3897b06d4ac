"""Schema version 3: parked runs in less space (issue 9).

* PostgreSQL keeps each commitment (a run's start identity, input digest and owner, a wait's
  completion reference) and each digest (a run's revision, definition and binding digests;
  those of `definitions` and `live_bindings`) as its 32 bytes (`bytea`) instead of its hex
  text; the store still takes and answers the text (`dialect.HexKey`). Rows are converted in
  place; their indexes are rebuilt. SQLite keeps the text.
* Sealed values are stored from now on as their envelope (`dialect.SealedBytes`: the
  base64 and the JSON around it are rebuilt when read). No column changes: values written
  before stay as they are and read back as they were.
* A run's retry policy is its canonical JSON text on PostgreSQL (`dialect.CompactJson`), not
  `jsonb` (a third of its size; it is never queried).
* `ix_runs_admitted` and `ix_runs_owner_admitted` are ascending: the newest-first listing
  scans them backward, and a new run's entry lands at the right end of the index (leaf pages
  split full) instead of the left (split in half, so they stayed half empty).
* `ix_runs_completed` holds only the runs that have a `completed_at` (retention and the doctor
  look for settled runs only), not one entry per unsettled run.

Frozen once released, like every migration (the ledger pins this file's checksum).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

VERSION = 3

_SHA256 = "sha256:"
_KEYS = {
    "runs": (
        ("start_identity", ""),
        ("input_digest", ""),
        ("owner", ""),
        ("revision", _SHA256),
        ("definition_digest", _SHA256),
        ("binding_digest", _SHA256),
    ),
    "steps": (("completion_ref", ""),),
    "definitions": (("definition_digest", _SHA256),),
    "live_bindings": (("definition_digest", _SHA256), ("binding_digest", _SHA256)),
}


_ASCENDING: dict[str, list[str | sa.TextClause]] = {
    "ix_runs_admitted": ["admitted_at", "run_id"],
    "ix_runs_owner_admitted": ["owner", "admitted_at", "run_id"],
}


def _as_bytes(column: str, prefix: str) -> str:
    digits = f"substring({column} from {len(prefix) + 1})" if prefix else column
    return f"ALTER COLUMN {column} TYPE bytea USING decode({digits}, 'hex')"


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table, columns in _KEYS.items():
            changes = [_as_bytes(column, prefix) for column, prefix in columns]
            if table == "runs":
                changes.append("ALTER COLUMN policy TYPE text USING policy::text")
            op.execute(f"ALTER TABLE {table} {', '.join(changes)}")
    for index, keys in _ASCENDING.items():
        op.drop_index(index, "runs")
        op.create_index(index, "runs", keys)
    op.drop_index("ix_runs_completed", "runs")
    completed = sa.text("completed_at IS NOT NULL")
    op.create_index(
        "ix_runs_completed",
        "runs",
        ["completed_at"],
        postgresql_where=completed,
        sqlite_where=completed,
    )


def downgrade() -> None:
    raise NotImplementedError("Store migrations are forward-only (07 §14.4).")
