"""Schema version 1: the store of file 07 §14.1.

Written by hand and frozen once released: the ledger pins this file's checksum, so any edit
makes every store migrated by the released file refuse to start (`schema-mismatch`). The next
change is a new revision with `VERSION = 2`.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from coordinator_core.shell.store.dialect import JsonDocument, UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

VERSION = 1

_RUN_STATUSES = (
    "'running', 'attention', 'cancel-requested', 'finished', 'failed', 'cancelled',"
    " 'cancelled-after-effect', 'expired'"
)
_STEP_STATES = (
    "'pending', 'leased', 'delivered', 'dead-lettered', 'unknown', 'expired', 'cancelled'"
)
_STEP_TYPES = "'call', 'choose', 'wait-until', 'wait-for', 'finish'"


def upgrade() -> None:
    op.create_table(
        "control",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("database_id", sa.String(128), nullable=False),
        sa.Column("schema_version", sa.Integer, nullable=False),
        sa.Column("restore_hold", sa.Boolean, nullable=False),
        sa.Column("admissions_hold", sa.Boolean, nullable=False),
        sa.Column("restore_evidence_ref", sa.String(256), nullable=True),
        sa.Column("admission_recovery_ref", sa.String(256), nullable=True),
        sa.Column("active_package_digest", sa.String(71), nullable=True),
        sa.Column("active_revision", sa.String(71), nullable=True),
        sa.Column("admission_key_commitment", sa.String(64), nullable=False),
        sa.Column("state_key_commitments", JsonDocument, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.CheckConstraint("id = 1", name="ck_control_one_row"),
    )
    op.create_table(
        "activations",
        sa.Column("activation_id", sa.Uuid, primary_key=True),
        sa.Column("apply_order", sa.Integer, nullable=False),
        sa.Column("package_digest", sa.String(71), nullable=False),
        sa.Column("workflow_id", sa.String(128), nullable=False),
        sa.Column("revision", sa.String(71), nullable=False),
        sa.Column("definition_digest", sa.String(71), nullable=False),
        sa.Column("predecessor_package_digest", sa.String(71), nullable=True),
        sa.Column("database_id", sa.String(128), nullable=False),
        sa.Column("applied_at", UTCDateTime, nullable=False),
        sa.Column("runtime_role", sa.String(64), nullable=True),
        sa.Column("role_mode", sa.String(32), nullable=False),
        sa.UniqueConstraint("apply_order", name="uq_activations_apply_order"),
    )
    op.create_table(
        "migrations",
        sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("applied_at", UTCDateTime, nullable=False),
        sa.Column("checksum", sa.String(71), nullable=False),
    )
    op.create_table(
        "admission_lock",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.CheckConstraint("id = 1", name="ck_admission_lock_one_row"),
    )
    op.create_table(
        "runs",
        sa.Column("run_id", sa.Uuid, primary_key=True),
        sa.Column("start_identity", sa.String(64), nullable=False),
        sa.Column("input_digest", sa.String(64), nullable=False),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("origin", sa.String(8), nullable=False),
        sa.Column("trigger", sa.String(128), nullable=True),
        sa.Column("workflow_id", sa.String(128), nullable=False),
        sa.Column("workflow_version", sa.String(256), nullable=False),
        sa.Column("revision", sa.String(71), nullable=False),
        sa.Column("definition_digest", sa.String(71), nullable=False),
        sa.Column("binding_digest", sa.String(71), nullable=False),
        sa.Column("snapshot", sa.LargeBinary, nullable=True),
        sa.Column("input", sa.LargeBinary, nullable=True),
        sa.Column("policy", JsonDocument, nullable=False),
        sa.Column("current_step", sa.String(128), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("cancel_mode", sa.String(16), nullable=False),
        sa.Column("cancel_requested", sa.Boolean, nullable=False),
        sa.Column("restore_review", sa.Boolean, nullable=False),
        sa.Column("outcome", sa.String(128), nullable=True),
        sa.Column("terminal_output", sa.LargeBinary, nullable=True),
        sa.Column("failure_code", sa.String(64), nullable=True),
        sa.Column("admitted_at", UTCDateTime, nullable=False),
        sa.Column("deadline_at", UTCDateTime, nullable=False),
        sa.Column("completed_at", UTCDateTime, nullable=True),
        sa.Column("payload_erased_at", UTCDateTime, nullable=True),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.UniqueConstraint("start_identity", name="uq_runs_start_identity"),
        sa.CheckConstraint(f"status IN ({_RUN_STATUSES})", name="ck_runs_status"),
        sa.CheckConstraint(
            "cancel_mode IN ('none', 'stopping', 'on-cancel-path')", name="ck_runs_cancel_mode"
        ),
        sa.CheckConstraint("origin IN ('api', 'event')", name="ck_runs_origin"),
        sa.CheckConstraint(
            "cancel_mode = 'none' OR cancel_requested", name="ck_runs_cancel_requested"
        ),
    )
    op.create_table(
        "steps",
        sa.Column("run_id", sa.Uuid, sa.ForeignKey("runs.run_id"), primary_key=True),
        sa.Column("step", sa.String(128), primary_key=True),
        sa.Column("type", sa.String(16), nullable=False),
        sa.Column("pure", sa.Boolean, nullable=False),
        sa.Column("generation", sa.Integer, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("claims", sa.Integer, nullable=False),
        sa.Column("awaiting", sa.String(16), nullable=True),
        sa.Column("due_at", UTCDateTime, nullable=True),
        sa.Column("attempt_started_at", UTCDateTime, nullable=True),
        sa.Column("lease_owner", sa.String(128), nullable=True),
        sa.Column("lease_token", sa.String(32), nullable=True),
        sa.Column("lease_expires_at", UTCDateTime, nullable=True),
        sa.Column("entered_at", UTCDateTime, nullable=False),
        sa.Column("finished_at", UTCDateTime, nullable=True),
        sa.Column("operation", sa.String(128), nullable=True),
        sa.Column("effect_kind", sa.String(16), nullable=True),
        sa.Column("command", sa.LargeBinary, nullable=True),
        sa.Column("command_prepared", sa.Boolean, nullable=False),
        sa.Column("preparation_frozen", sa.Boolean, nullable=False),
        sa.Column("dispatched", sa.Boolean, nullable=False),
        sa.Column("sent", sa.Boolean, nullable=False),
        sa.Column("uncertain", sa.Boolean, nullable=False),
        sa.Column("receipt_expired", sa.Boolean, nullable=False),
        sa.Column("settled_by", sa.String(16), nullable=True),
        sa.Column("output", sa.LargeBinary, nullable=True),
        sa.Column("route_kind", sa.String(16), nullable=True),
        sa.Column("route_label", sa.String(128), nullable=True),
        sa.Column("failure_code", sa.String(64), nullable=True),
        sa.Column("detail", sa.String(256), nullable=True),
        sa.Column("wait_until", UTCDateTime, nullable=True),
        sa.Column("wait_started_at", UTCDateTime, nullable=True),
        sa.Column("timeout_at", UTCDateTime, nullable=True),
        sa.Column("interval_seconds", sa.Integer, nullable=True),
        sa.Column("observations", sa.Integer, nullable=False),
        sa.Column("last_observed_at", UTCDateTime, nullable=True),
        sa.Column("completion_ref", sa.String(64), nullable=True),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.CheckConstraint(f"state IN ({_STEP_STATES})", name="ck_steps_state"),
        sa.CheckConstraint(f"type IN ({_STEP_TYPES})", name="ck_steps_type"),
        sa.CheckConstraint(
            "state <> 'leased' OR (lease_token IS NOT NULL AND lease_expires_at IS NOT NULL"
            " AND attempt_started_at IS NOT NULL AND lease_expires_at > attempt_started_at"
            " AND claims > 0)",
            name="ck_steps_leased",
        ),
        sa.CheckConstraint(
            "state <> 'pending' OR (due_at IS NOT NULL AND lease_token IS NULL"
            " AND lease_expires_at IS NULL)",
            name="ck_steps_pending",
        ),
        sa.CheckConstraint(
            "state = 'leased' OR (lease_token IS NULL AND lease_expires_at IS NULL"
            " AND lease_owner IS NULL)",
            name="ck_steps_lease_only_when_leased",
        ),
        sa.CheckConstraint(
            "(command IS NULL OR command_prepared) AND (NOT sent OR command_prepared)"
            " AND (NOT dispatched OR sent)",
            name="ck_steps_command_flags",
        ),
        sa.CheckConstraint(
            "generation >= 1 AND attempt >= 0 AND claims >= 0 AND observations >= 0",
            name="ck_steps_counters",
        ),
    )
    pending = sa.text("state = 'pending'")
    leased = sa.text("state = 'leased'")
    waiting = sa.text("type = 'wait-for' AND state = 'pending'")
    op.create_index(
        "ix_steps_due",
        "steps",
        ["due_at", "run_id", "step"],
        postgresql_where=pending,
        sqlite_where=pending,
    )
    op.create_index(
        "ix_steps_lease",
        "steps",
        ["lease_expires_at", "run_id", "step"],
        postgresql_where=leased,
        sqlite_where=leased,
    )
    op.create_index(
        "ix_steps_completion",
        "steps",
        ["completion_ref"],
        postgresql_where=waiting,
        sqlite_where=waiting,
    )
    op.create_index(
        "ix_runs_admitted", "runs", [sa.text("admitted_at DESC"), sa.text("run_id DESC")]
    )
    op.create_index(
        "ix_runs_owner_admitted",
        "runs",
        ["owner", sa.text("admitted_at DESC"), sa.text("run_id DESC")],
    )
    op.create_index("ix_runs_status", "runs", ["status"])
    op.create_index("ix_runs_completed", "runs", ["completed_at"])
    op.create_index("ix_runs_definition", "runs", ["definition_digest"])


def downgrade() -> None:
    raise NotImplementedError("Store migrations are forward-only (07 §14.4).")
