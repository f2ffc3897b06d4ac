"""Alembic environment: run the requested revisions on the connection `migrate` hands over.

`migrate` opens the transaction (one per migration, 07 §14.4), takes its locks and records the
ledger row itself; this script only applies the revision's operations inside it. There is no
offline (SQL script) mode and no autogeneration: revisions are written by hand.
"""

from __future__ import annotations

from alembic import context

_connection = context.config.attributes.get("connection")
if _connection is None or context.is_offline_mode():
    raise RuntimeError("Store migrations run only through coordinator_core.shell.store.migrate.")

context.configure(connection=_connection, target_metadata=None, version_table="alembic_version")
with context.begin_transaction():
    context.run_migrations()
