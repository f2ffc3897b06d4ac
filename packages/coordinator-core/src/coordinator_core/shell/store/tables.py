"""The store's tables (file 07 §2, §14.1) declared once with SQLModel for both backends.

Names are snake_case forms of the logical names of 07 §14.1. Sealed values (†) are opaque bytes
(`SealedBytes`: the envelope is what is kept), set to NULL by retention. Commitments and
digests use `HexKey` (their 32 bytes on PostgreSQL). Instants use `UTCDateTime`. The migrations
(`migrations/versions/`) create exactly this schema; a conformance test compares the two on
both backends.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Final

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    UniqueConstraint,
    Uuid,
    text,
)
from sqlmodel import Field, SQLModel

from coordinator_core.limits import RUN_STATUSES
from coordinator_core.shell.store.dialect import (
    CompactJson,
    HexKey,
    JsonDocument,
    SealedBytes,
    UTCDateTime,
)

__all__ = [
    "ACTIVATIONS",
    "ADMISSION_LOCK",
    "CONTROL",
    "DEFINITIONS",
    "LEDGER",
    "LIVE_BINDINGS",
    "METADATA",
    "RUNS",
    "RUN_STATUSES",
    "STEPS",
    "STEP_STATES",
    "STEP_TYPES",
    "STORE_IDENTITY",
    "TERMINAL_STATUSES",
    "ActivationTable",
    "AdmissionLockTable",
    "ControlTable",
    "DefinitionTable",
    "LedgerTable",
    "LiveBindingTable",
    "RunTable",
    "StepTable",
    "StoreIdentityTable",
]

TERMINAL_STATUSES: Final = ("finished", "cancelled", "cancelled-after-effect", "expired")
STEP_STATES: Final = (
    "pending",
    "leased",
    "delivered",
    "dead-lettered",
    "unknown",
    "expired",
    "cancelled",
)
STEP_TYPES: Final = ("call", "choose", "wait-until", "wait-for", "finish")

# Bounded text columns: digests are `sha256:` + 64 hex, commitments 64 hex.
_DIGEST: Final = 71
_COMMITMENT: Final = 64
_SHA256: Final = "sha256:"
_ID: Final = 128
_CODE: Final = 64
_TEXT: Final = 256


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(value) for value in values)})"


class ControlTable(SQLModel, table=True):
    """`control`: the one row of store identity, schema version, holds, activation, custody."""

    __tablename__ = "control"
    __table_args__ = (CheckConstraint("id = 1", name="ck_control_one_row"),)

    id: int = Field(sa_column=Column("id", Integer, primary_key=True, autoincrement=False))
    database_id: str = Field(sa_column=Column("database_id", String(_ID), nullable=False))
    schema_version: int = Field(sa_column=Column("schema_version", Integer, nullable=False))
    restore_hold: bool = Field(sa_column=Column("restore_hold", Boolean, nullable=False))
    admissions_hold: bool = Field(sa_column=Column("admissions_hold", Boolean, nullable=False))
    restore_evidence_ref: str | None = Field(
        default=None, sa_column=Column("restore_evidence_ref", String(_TEXT), nullable=True)
    )
    admission_recovery_ref: str | None = Field(
        default=None, sa_column=Column("admission_recovery_ref", String(_TEXT), nullable=True)
    )
    active_package_digest: str | None = Field(
        default=None, sa_column=Column("active_package_digest", String(_DIGEST), nullable=True)
    )
    active_revision: str | None = Field(
        default=None, sa_column=Column("active_revision", String(_DIGEST), nullable=True)
    )
    admission_key_commitment: str = Field(
        sa_column=Column("admission_key_commitment", String(_COMMITMENT), nullable=False)
    )
    state_key_commitments: dict[str, str] = Field(
        sa_column=Column("state_key_commitments", JsonDocument, nullable=False)
    )
    created_at: datetime = Field(sa_column=Column("created_at", UTCDateTime, nullable=False))


class ActivationTable(SQLModel, table=True):
    """`activations`: the append-only ledger of package activations (`apply`)."""

    __tablename__ = "activations"
    __table_args__ = (UniqueConstraint("apply_order", name="uq_activations_apply_order"),)

    activation_id: uuid.UUID = Field(sa_column=Column("activation_id", Uuid, primary_key=True))
    apply_order: int = Field(sa_column=Column("apply_order", Integer, nullable=False))
    package_digest: str = Field(sa_column=Column("package_digest", String(_DIGEST), nullable=False))
    workflow_id: str = Field(sa_column=Column("workflow_id", String(_ID), nullable=False))
    revision: str = Field(sa_column=Column("revision", String(_DIGEST), nullable=False))
    definition_digest: str = Field(
        sa_column=Column("definition_digest", String(_DIGEST), nullable=False)
    )
    predecessor_package_digest: str | None = Field(
        default=None,
        sa_column=Column("predecessor_package_digest", String(_DIGEST), nullable=True),
    )
    database_id: str = Field(sa_column=Column("database_id", String(_ID), nullable=False))
    applied_at: datetime = Field(sa_column=Column("applied_at", UTCDateTime, nullable=False))
    runtime_role: str | None = Field(
        default=None, sa_column=Column("runtime_role", String(_CODE), nullable=True)
    )
    role_mode: str = Field(sa_column=Column("role_mode", String(32), nullable=False))


class LedgerTable(SQLModel, table=True):
    """`migrations`: one row per applied schema version with the checksum of its script."""

    __tablename__ = "migrations"

    version: int = Field(
        sa_column=Column("version", Integer, primary_key=True, autoincrement=False)
    )
    applied_at: datetime = Field(sa_column=Column("applied_at", UTCDateTime, nullable=False))
    checksum: str = Field(sa_column=Column("checksum", String(_DIGEST), nullable=False))


class AdmissionLockTable(SQLModel, table=True):
    """`admission_lock`: one row, used only as a row lock (PostgreSQL; inert on SQLite)."""

    __tablename__ = "admission_lock"
    __table_args__ = (CheckConstraint("id = 1", name="ck_admission_lock_one_row"),)

    id: int = Field(sa_column=Column("id", Integer, primary_key=True, autoincrement=False))


class RunTable(SQLModel, table=True):
    """`runs`: one row per admitted run; the start identity is the idempotency record."""

    __tablename__ = "runs"
    __table_args__ = (
        UniqueConstraint("start_identity", name="uq_runs_start_identity"),
        CheckConstraint(_in("status", RUN_STATUSES), name="ck_runs_status"),
        CheckConstraint(
            _in("cancel_mode", ("none", "stopping", "on-cancel-path")), name="ck_runs_cancel_mode"
        ),
        CheckConstraint(_in("origin", ("api", "event")), name="ck_runs_origin"),
        CheckConstraint(
            "cancel_mode = 'none' OR cancel_requested", name="ck_runs_cancel_requested"
        ),
    )

    run_id: uuid.UUID = Field(sa_column=Column("run_id", Uuid, primary_key=True))
    start_identity: str = Field(sa_column=Column("start_identity", HexKey(), nullable=False))
    input_digest: str = Field(sa_column=Column("input_digest", HexKey(), nullable=False))
    owner: str = Field(sa_column=Column("owner", HexKey(), nullable=False))
    origin: str = Field(sa_column=Column("origin", String(8), nullable=False))
    trigger: str | None = Field(default=None, sa_column=Column("trigger", String(_ID)))
    workflow_id: str = Field(sa_column=Column("workflow_id", String(_ID), nullable=False))
    workflow_version: str = Field(
        sa_column=Column("workflow_version", String(_TEXT), nullable=False)
    )
    revision: str = Field(sa_column=Column("revision", HexKey(_SHA256), nullable=False))
    definition_digest: str = Field(
        sa_column=Column("definition_digest", HexKey(_SHA256), nullable=False)
    )
    binding_digest: str = Field(sa_column=Column("binding_digest", HexKey(_SHA256), nullable=False))
    snapshot: bytes | None = Field(default=None, sa_column=Column("snapshot", SealedBytes))
    input: bytes | None = Field(default=None, sa_column=Column("input", SealedBytes))
    policy: dict[str, Any] = Field(sa_column=Column("policy", CompactJson, nullable=False))
    current_step: str = Field(sa_column=Column("current_step", String(_ID), nullable=False))
    status: str = Field(sa_column=Column("status", String(32), nullable=False))
    cancel_mode: str = Field(sa_column=Column("cancel_mode", String(16), nullable=False))
    cancel_requested: bool = Field(sa_column=Column("cancel_requested", Boolean, nullable=False))
    restore_review: bool = Field(sa_column=Column("restore_review", Boolean, nullable=False))
    outcome: str | None = Field(default=None, sa_column=Column("outcome", String(_ID)))
    terminal_output: bytes | None = Field(
        default=None, sa_column=Column("terminal_output", SealedBytes)
    )
    failure_code: str | None = Field(default=None, sa_column=Column("failure_code", String(_CODE)))
    admitted_at: datetime = Field(sa_column=Column("admitted_at", UTCDateTime, nullable=False))
    deadline_at: datetime = Field(sa_column=Column("deadline_at", UTCDateTime, nullable=False))
    completed_at: datetime | None = Field(
        default=None, sa_column=Column("completed_at", UTCDateTime)
    )
    payload_erased_at: datetime | None = Field(
        default=None, sa_column=Column("payload_erased_at", UTCDateTime)
    )
    updated_at: datetime = Field(sa_column=Column("updated_at", UTCDateTime, nullable=False))


class StepTable(SQLModel, table=True):
    """`steps`: one record per (run, step) entered (07 §2.1), with its lease and wait fields."""

    __tablename__ = "steps"
    __table_args__ = (
        CheckConstraint(_in("state", STEP_STATES), name="ck_steps_state"),
        CheckConstraint(_in("type", STEP_TYPES), name="ck_steps_type"),
        # 07 §14.1 RECOMMENDED: which columns each state may set.
        CheckConstraint(
            "state <> 'leased' OR (lease_token IS NOT NULL AND lease_expires_at IS NOT NULL"
            " AND attempt_started_at IS NOT NULL AND lease_expires_at > attempt_started_at"
            " AND claims > 0)",
            name="ck_steps_leased",
        ),
        CheckConstraint(
            "state <> 'pending' OR (due_at IS NOT NULL AND lease_token IS NULL"
            " AND lease_expires_at IS NULL)",
            name="ck_steps_pending",
        ),
        CheckConstraint(
            "state = 'leased' OR (lease_token IS NULL AND lease_expires_at IS NULL"
            " AND lease_owner IS NULL)",
            name="ck_steps_lease_only_when_leased",
        ),
        # A stored command is a prepared one (erasure keeps the flag); `sent` and `dispatched`
        # pass the pre-send fence, which needs a frozen command.
        CheckConstraint(
            "(command IS NULL OR command_prepared) AND (NOT sent OR command_prepared)"
            " AND (NOT dispatched OR sent)",
            name="ck_steps_command_flags",
        ),
        CheckConstraint(
            "generation >= 1 AND attempt >= 0 AND claims >= 0 AND observations >= 0",
            name="ck_steps_counters",
        ),
    )

    run_id: uuid.UUID = Field(
        sa_column=Column("run_id", Uuid, ForeignKey("runs.run_id"), primary_key=True)
    )
    step: str = Field(sa_column=Column("step", String(_ID), primary_key=True))
    type: str = Field(sa_column=Column("type", String(16), nullable=False))
    pure: bool = Field(sa_column=Column("pure", Boolean, nullable=False))
    generation: int = Field(sa_column=Column("generation", Integer, nullable=False))
    state: str = Field(sa_column=Column("state", String(16), nullable=False))
    attempt: int = Field(sa_column=Column("attempt", Integer, nullable=False))
    claims: int = Field(sa_column=Column("claims", Integer, nullable=False))
    awaiting: str | None = Field(default=None, sa_column=Column("awaiting", String(16)))
    due_at: datetime | None = Field(default=None, sa_column=Column("due_at", UTCDateTime))
    attempt_started_at: datetime | None = Field(
        default=None, sa_column=Column("attempt_started_at", UTCDateTime)
    )
    lease_owner: str | None = Field(default=None, sa_column=Column("lease_owner", String(_ID)))
    lease_token: str | None = Field(default=None, sa_column=Column("lease_token", String(32)))
    lease_expires_at: datetime | None = Field(
        default=None, sa_column=Column("lease_expires_at", UTCDateTime)
    )
    entered_at: datetime = Field(sa_column=Column("entered_at", UTCDateTime, nullable=False))
    finished_at: datetime | None = Field(default=None, sa_column=Column("finished_at", UTCDateTime))
    operation: str | None = Field(default=None, sa_column=Column("operation", String(_ID)))
    effect_kind: str | None = Field(default=None, sa_column=Column("effect_kind", String(16)))
    command: bytes | None = Field(default=None, sa_column=Column("command", SealedBytes))
    command_prepared: bool = Field(sa_column=Column("command_prepared", Boolean, nullable=False))
    preparation_frozen: bool = Field(
        sa_column=Column("preparation_frozen", Boolean, nullable=False)
    )
    dispatched: bool = Field(sa_column=Column("dispatched", Boolean, nullable=False))
    sent: bool = Field(sa_column=Column("sent", Boolean, nullable=False))
    uncertain: bool = Field(sa_column=Column("uncertain", Boolean, nullable=False))
    receipt_expired: bool = Field(sa_column=Column("receipt_expired", Boolean, nullable=False))
    settled_by: str | None = Field(default=None, sa_column=Column("settled_by", String(16)))
    output: bytes | None = Field(default=None, sa_column=Column("output", SealedBytes))
    route_kind: str | None = Field(default=None, sa_column=Column("route_kind", String(16)))
    route_label: str | None = Field(default=None, sa_column=Column("route_label", String(_ID)))
    failure_code: str | None = Field(default=None, sa_column=Column("failure_code", String(_CODE)))
    detail: str | None = Field(default=None, sa_column=Column("detail", String(_TEXT)))
    wait_until: datetime | None = Field(default=None, sa_column=Column("wait_until", UTCDateTime))
    wait_started_at: datetime | None = Field(
        default=None, sa_column=Column("wait_started_at", UTCDateTime)
    )
    timeout_at: datetime | None = Field(default=None, sa_column=Column("timeout_at", UTCDateTime))
    interval_seconds: int | None = Field(
        default=None, sa_column=Column("interval_seconds", Integer)
    )
    observations: int = Field(sa_column=Column("observations", Integer, nullable=False))
    last_observed_at: datetime | None = Field(
        default=None, sa_column=Column("last_observed_at", UTCDateTime)
    )
    completion_ref: str | None = Field(default=None, sa_column=Column("completion_ref", HexKey()))
    updated_at: datetime = Field(sa_column=Column("updated_at", UTCDateTime, nullable=False))


class DefinitionTable(SQLModel, table=True):
    """`definitions`: the sealed definition snapshot, stored once per definition digest and
    sealed in the scope of the run that first stored it (`run_id`, 07 §10)."""

    __tablename__ = "definitions"

    definition_digest: str = Field(
        sa_column=Column("definition_digest", HexKey(_SHA256), primary_key=True)
    )
    run_id: uuid.UUID = Field(sa_column=Column("run_id", Uuid, nullable=False))
    snapshot: bytes = Field(sa_column=Column("snapshot", SealedBytes, nullable=False))
    stored_at: datetime = Field(sa_column=Column("stored_at", UTCDateTime, nullable=False))


class LiveBindingTable(SQLModel, table=True):
    """`live_bindings`: each (definition digest, binding digest) a run was admitted with: the
    rows the live-binding check of an admission reads (05 §10)."""

    __tablename__ = "live_bindings"

    definition_digest: str = Field(
        sa_column=Column("definition_digest", HexKey(_SHA256), primary_key=True)
    )
    binding_digest: str = Field(
        sa_column=Column("binding_digest", HexKey(_SHA256), primary_key=True)
    )
    first_admitted_at: datetime = Field(
        sa_column=Column("first_admitted_at", UTCDateTime, nullable=False)
    )


class JournalHeadTable(SQLModel, table=True):
    """`journal_heads`: per audit journal file group, the last line the store knows was on
    stable storage when a transaction of its process committed (07 §12.1): its sequence, hash
    and position (file number of the group, byte offset of the line's start)."""

    __tablename__ = "journal_heads"

    group_name: str = Field(sa_column=Column("group_name", String(64), primary_key=True))
    sequence: int = Field(sa_column=Column("sequence", BigInteger, nullable=False))
    line_hash: str = Field(sa_column=Column("line_hash", String(71), nullable=False))
    file_number: int = Field(sa_column=Column("file_number", Integer, nullable=False))
    line_offset: int = Field(sa_column=Column("line_offset", BigInteger, nullable=False))
    updated_at: datetime = Field(sa_column=Column("updated_at", UTCDateTime, nullable=False))
    # The identity of the database the head was saved in (schema version 5; None before).
    store_identity: str | None = Field(
        default=None, sa_column=Column("store_identity", String(200), nullable=True)
    )


class StoreIdentityTable(SQLModel, table=True):
    """`store_identity` (one row): the random part of the store's identity, written when the
    store is created (07 §12.1 item 5; `shell/store/identity.py`)."""

    __tablename__ = "store_identity"

    instance_id: str = Field(sa_column=Column("instance_id", String(32), primary_key=True))
    created_at: datetime = Field(sa_column=Column("created_at", UTCDateTime, nullable=False))


METADATA: Final[MetaData] = SQLModel.metadata
CONTROL: Final[Table] = METADATA.tables["control"]
ACTIVATIONS: Final[Table] = METADATA.tables["activations"]
LEDGER: Final[Table] = METADATA.tables["migrations"]
ADMISSION_LOCK: Final[Table] = METADATA.tables["admission_lock"]
RUNS: Final[Table] = METADATA.tables["runs"]
STEPS: Final[Table] = METADATA.tables["steps"]
DEFINITIONS: Final[Table] = METADATA.tables["definitions"]
LIVE_BINDINGS: Final[Table] = METADATA.tables["live_bindings"]
JOURNAL_HEADS: Final[Table] = METADATA.tables["journal_heads"]
STORE_IDENTITY: Final[Table] = METADATA.tables["store_identity"]

# Indexes of 07 §14.1 (partial where the contract says so; both backends support them).
Index(
    "ix_steps_due",
    STEPS.c.due_at,
    STEPS.c.run_id,
    STEPS.c.step,
    postgresql_where=text("state = 'pending'"),
    sqlite_where=text("state = 'pending'"),
)
Index(
    "ix_steps_lease",
    STEPS.c.lease_expires_at,
    STEPS.c.run_id,
    STEPS.c.step,
    postgresql_where=text("state = 'leased'"),
    sqlite_where=text("state = 'leased'"),
)
Index(
    "ix_steps_completion",
    STEPS.c.completion_ref,
    postgresql_where=text("type = 'wait-for' AND state = 'pending'"),
    sqlite_where=text("type = 'wait-for' AND state = 'pending'"),
)
# Newest first is a backward scan: ascending, a new run's entry goes at the right end of the
# index, where leaf pages are split full; descending, at the left end, where they were split in
# half (schema version 3).
Index("ix_runs_admitted", RUNS.c.admitted_at, RUNS.c.run_id)
Index("ix_runs_owner_admitted", RUNS.c.owner, RUNS.c.admitted_at, RUNS.c.run_id)
Index("ix_runs_status", RUNS.c.status)
Index(
    "ix_runs_completed",
    RUNS.c.completed_at,
    postgresql_where=text("completed_at IS NOT NULL"),
    sqlite_where=text("completed_at IS NOT NULL"),
)
Index("ix_runs_definition", RUNS.c.definition_digest)
Index(
    "ix_runs_deadline_live",
    RUNS.c.deadline_at,
    RUNS.c.run_id,
    postgresql_where=text("status IN ('running', 'attention', 'cancel-requested')"),
    sqlite_where=text("status IN ('running', 'attention', 'cancel-requested')"),
)
