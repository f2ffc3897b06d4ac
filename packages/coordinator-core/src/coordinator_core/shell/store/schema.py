"""The store's tables (file 07 §2, §14.1), declared once with SQLModel for both backends, and
the one mapping between their rows and the store's values (`records`).

Names are snake_case forms of the logical names of 07 §14.1. Sealed values (†) are opaque bytes
(`SealedBytes`: the envelope is what is kept), set to NULL by retention. Commitments and
digests use `HexKey` (their 32 bytes on PostgreSQL). Instants use `UTCDateTime` (epoch
milliseconds in and out, as the engine keeps them). The migrations (`migrations/versions/`)
create exactly this schema; a conformance test compares the two on both backends.

The declarations here are the one field specification of a run and a step record: a column of
`runs` or `steps` holds the field of the same name of the engine's `RunState` or `StepRecord`
(`run_of`, `step_of`, `run_values`, `step_values`), except the few the store keeps beside the
engine's value (the admission facts, the sealed payload, the lease, `updated_at`) and three
spelled differently (`effect_kind` is `effect`, `route_kind`/`route_label` are `route`, the
run's `policy` document is its `TimingPolicy`). A test holds every column and every field to
this partition.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Mapping
from typing import Any, Final, get_args

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

from coordinator_core.engine.state import (
    AttemptEnding,
    RunState,
    StepRecord,
    StepRoute,
    TimingPolicy,
)
from coordinator_core.limits import RUN_STATUSES
from coordinator_core.shell.store.dialect import (
    CompactJson,
    HexKey,
    JsonDocument,
    SealedBytes,
    UTCDateTime,
)
from coordinator_core.shell.store.records import ControlRow, Lease, StoredRun, StoredStep

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
    "STEP_ATTEMPTS",
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
    "StepAttemptTable",
    "StepTable",
    "StoreIdentityTable",
    "control_of",
    "run_of",
    "run_values",
    "step_of",
    "step_values",
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
ATTEMPT_ENDINGS: Final = get_args(AttemptEnding)

# Bounded text columns: digests are `sha256:` + 64 hex, commitments 64 hex.
_DIGEST: Final = 71
_COMMITMENT: Final = 64
_SHA256: Final = "sha256:"
_ID: Final = 128
_CODE: Final = 64
_TEXT: Final = 256
_RUNS_FILLFACTOR: Final = 70  # PostgreSQL: % of each `runs` page filled by inserts (version 7)


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
    created_at: int = Field(sa_column=Column("created_at", UTCDateTime, nullable=False))
    restore_hold_reason_ref: str | None = Field(
        default=None, sa_column=Column("restore_hold_reason_ref", String(80), nullable=True)
    )
    """The keyed reference of the reason of the restore hold in force (schema version 6)."""


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
    applied_at: int = Field(sa_column=Column("applied_at", UTCDateTime, nullable=False))
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
    applied_at: int = Field(sa_column=Column("applied_at", UTCDateTime, nullable=False))
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
        # Room on each page for a run's next version, so that the update of a run carried on
        # to its next record (no indexed column changes) is heap-only (schema version 7).
        {"postgresql_with": {"fillfactor": _RUNS_FILLFACTOR}},
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
    admitted_at: int = Field(sa_column=Column("admitted_at", UTCDateTime, nullable=False))
    deadline_at: int = Field(sa_column=Column("deadline_at", UTCDateTime, nullable=False))
    completed_at: int | None = Field(default=None, sa_column=Column("completed_at", UTCDateTime))
    payload_erased_at: int | None = Field(
        default=None, sa_column=Column("payload_erased_at", UTCDateTime)
    )
    updated_at: int = Field(sa_column=Column("updated_at", UTCDateTime, nullable=False))
    # The last operator command that changed the run, when, and its reason's keyed reference
    # (schema version 6).
    operator_action: str | None = Field(
        default=None, sa_column=Column("operator_action", String(16), nullable=True)
    )
    operator_action_at: int | None = Field(
        default=None, sa_column=Column("operator_action_at", UTCDateTime, nullable=True)
    )
    operator_reason_ref: str | None = Field(
        default=None, sa_column=Column("operator_reason_ref", String(80), nullable=True)
    )


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
    due_at: int | None = Field(default=None, sa_column=Column("due_at", UTCDateTime))
    attempt_started_at: int | None = Field(
        default=None, sa_column=Column("attempt_started_at", UTCDateTime)
    )
    lease_owner: str | None = Field(default=None, sa_column=Column("lease_owner", String(_ID)))
    lease_token: str | None = Field(default=None, sa_column=Column("lease_token", String(32)))
    lease_expires_at: int | None = Field(
        default=None, sa_column=Column("lease_expires_at", UTCDateTime)
    )
    entered_at: int = Field(sa_column=Column("entered_at", UTCDateTime, nullable=False))
    finished_at: int | None = Field(default=None, sa_column=Column("finished_at", UTCDateTime))
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
    wait_until: int | None = Field(default=None, sa_column=Column("wait_until", UTCDateTime))
    wait_started_at: int | None = Field(
        default=None, sa_column=Column("wait_started_at", UTCDateTime)
    )
    timeout_at: int | None = Field(default=None, sa_column=Column("timeout_at", UTCDateTime))
    interval_seconds: int | None = Field(
        default=None, sa_column=Column("interval_seconds", Integer)
    )
    observations: int = Field(sa_column=Column("observations", Integer, nullable=False))
    last_observed_at: int | None = Field(
        default=None, sa_column=Column("last_observed_at", UTCDateTime)
    )
    completion_ref: str | None = Field(default=None, sa_column=Column("completion_ref", HexKey()))
    updated_at: int = Field(sa_column=Column("updated_at", UTCDateTime, nullable=False))


class DefinitionTable(SQLModel, table=True):
    """`definitions`: the sealed definition snapshot, stored once per definition digest and
    sealed in the scope of the run that first stored it (`run_id`, 07 §10)."""

    __tablename__ = "definitions"

    definition_digest: str = Field(
        sa_column=Column("definition_digest", HexKey(_SHA256), primary_key=True)
    )
    run_id: uuid.UUID = Field(sa_column=Column("run_id", Uuid, nullable=False))
    snapshot: bytes = Field(sa_column=Column("snapshot", SealedBytes, nullable=False))
    stored_at: int = Field(sa_column=Column("stored_at", UTCDateTime, nullable=False))


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
    first_admitted_at: int = Field(
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
    updated_at: int = Field(sa_column=Column("updated_at", UTCDateTime, nullable=False))
    # The identity of the database the head was saved in (schema version 5; None before).
    store_identity: str | None = Field(
        default=None, sa_column=Column("store_identity", String(200), nullable=True)
    )


class StoreIdentityTable(SQLModel, table=True):
    """`store_identity` (one row): the random part of the store's identity, written when the
    store is created (07 §12.1 item 5; `shell/store/identity.py`)."""

    __tablename__ = "store_identity"

    instance_id: str = Field(sa_column=Column("instance_id", String(32), primary_key=True))
    created_at: int = Field(sa_column=Column("created_at", UTCDateTime, nullable=False))


class StepAttemptTable(SQLModel, table=True):
    """`step_attempts`: one row per ended attempt of a step record (schema version 6): a
    call's attempt, a wait's observation, a pure step's work — when it started and ended, how
    (the journal's outcome word) and the failure code it left. No payload: never erased."""

    __tablename__ = "step_attempts"
    __table_args__ = (
        CheckConstraint(_in("outcome", ATTEMPT_ENDINGS), name="ck_step_attempts_outcome"),
    )

    run_id: uuid.UUID = Field(
        sa_column=Column("run_id", Uuid, ForeignKey("runs.run_id"), primary_key=True)
    )
    step: str = Field(sa_column=Column("step", String(_ID), primary_key=True))
    generation: int = Field(
        sa_column=Column("generation", Integer, primary_key=True, autoincrement=False)
    )
    attempt: int = Field(
        sa_column=Column("attempt", Integer, primary_key=True, autoincrement=False)
    )
    started_at: int | None = Field(default=None, sa_column=Column("started_at", UTCDateTime))
    ended_at: int = Field(sa_column=Column("ended_at", UTCDateTime, nullable=False))
    outcome: str = Field(sa_column=Column("outcome", String(16), nullable=False))
    failure_code: str | None = Field(
        default=None, sa_column=Column("failure_code", String(_CODE), nullable=True)
    )


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
STEP_ATTEMPTS: Final[Table] = METADATA.tables["step_attempts"]

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


# -- rows <-> records -----------------------------------------------------------------------------

RUN_OWN: Final = (
    "run_id",
    "start_identity",
    "input_digest",
    "owner",
    "origin",
    "trigger",
    "workflow_id",
    "workflow_version",
    "revision",
    "definition_digest",
    "binding_digest",
    "snapshot",
    "input",
    "terminal_output",
    "payload_erased_at",
    "updated_at",
    "operator_action",
    "operator_action_at",
    "operator_reason_ref",
)
"""The `runs` columns that are the store's own fields of `StoredRun`, not the engine's."""
RUN_STATE_COLUMNS: Final = tuple(
    column.name for column in RUNS.c if column.name not in RUN_OWN and column.name != "policy"
)
"""The `runs` columns that hold the `RunState` field of the same name."""
STEP_OWN: Final = ("run_id", "command", "preparation_frozen", "output", "updated_at")
"""The `steps` columns that are the store's own fields of `StoredStep` (the sealed payload)."""
STEP_LEASE: Final = ("lease_owner", "lease_token", "lease_expires_at")
STEP_RECORD_COLUMNS: Final = tuple(
    column.name
    for column in STEPS.c
    if column.name not in STEP_OWN + STEP_LEASE + ("effect_kind", "route_kind", "route_label")
)
"""The `steps` columns that hold the `StepRecord` field of the same name."""
RUN_IMMUTABLE: Final = (
    *RUN_OWN[:13],
    "policy",
    "admitted_at",
    "deadline_at",
    "payload_erased_at",
)
"""The run columns no transition changes (admission fixed them; retention alone erases the
sealed ones)."""
STEP_IMMUTABLE: Final = ("run_id", "step", "type", "pure", "entered_at", "operation", "effect_kind")


def _policy_of(stored: Any) -> TimingPolicy:
    """A run's decoded policy. A deployment's runs share one or a few policies and a policy
    is immutable, so each is decoded once, by its text: the stored canonical text itself on
    PostgreSQL (`dialect.CompactJson`), the document's canonical text on SQLite (the text
    tells `true` from `1` and `1.0`, which equality of the documents does not)."""
    if isinstance(stored, str):
        return _policy_of_text(stored)
    return _policy_of_text(json.dumps(stored or {}, sort_keys=True, separators=(",", ":")))


@functools.lru_cache(maxsize=64)
def _policy_of_text(text: str) -> TimingPolicy:
    return TimingPolicy.from_json(json.loads(text))


def run_of(row: Mapping[Any, Any]) -> StoredRun:
    """The stored run of a `runs` row (its payload sealed, its state without records)."""
    state = RunState(
        **{name: row[name] for name in RUN_STATE_COLUMNS},
        input=None,
        policy=_policy_of(row["policy"]),
    )
    return StoredRun(**{name: row[name] for name in RUN_OWN}, state=state)


def run_values(run: StoredRun) -> dict[str, Any]:
    """The `runs` columns of a stored run."""
    state = run.state
    values = {name: getattr(run, name) for name in RUN_OWN}
    values.update((name, getattr(state, name)) for name in RUN_STATE_COLUMNS)
    values["policy"] = state.policy.to_json()
    return values


def step_of(row: Mapping[Any, Any]) -> StoredStep:
    """The stored step of a `steps` row (its payload sealed)."""
    route_kind = row["route_kind"]
    token = row["lease_token"]
    record = StepRecord(
        **{name: row[name] for name in STEP_RECORD_COLUMNS},
        effect=row["effect_kind"],
        route=None if route_kind is None else StepRoute(route_kind, row["route_label"]),
    )
    return StoredStep(
        run_id=row["run_id"],
        record=record,
        command=row["command"],
        preparation_frozen=row["preparation_frozen"],
        output=row["output"],
        lease=None if token is None else Lease(row["lease_owner"], token, row["lease_expires_at"]),
        updated_at=row["updated_at"],
    )


def step_values(stored: StoredStep) -> dict[str, Any]:
    """The `steps` columns of a stored step."""
    record, lease, route = stored.record, stored.lease, stored.record.route
    values = {name: getattr(record, name) for name in STEP_RECORD_COLUMNS}
    values.update(
        run_id=stored.run_id,
        command=stored.command,
        preparation_frozen=stored.preparation_frozen,
        output=stored.output,
        updated_at=stored.updated_at,
        effect_kind=record.effect,
        route_kind=None if route is None else route.kind,
        route_label=None if route is None else route.label,
        lease_owner=None if lease is None else lease.owner,
        lease_token=None if lease is None else lease.token,
        lease_expires_at=None if lease is None else lease.expires_at,
    )
    return values


CONTROL_COLUMNS: Final = tuple(column.name for column in CONTROL.c)


def control_of(row: Mapping[Any, Any]) -> ControlRow:
    """The control row of a `control` row."""
    markers: Any = row["state_key_commitments"] or {}
    return ControlRow(
        database_id=row["database_id"],
        schema_version=row["schema_version"],
        restore_hold=bool(row["restore_hold"]),
        admissions_hold=bool(row["admissions_hold"]),
        restore_evidence_ref=row["restore_evidence_ref"],
        admission_recovery_ref=row["admission_recovery_ref"],
        active_package_digest=row["active_package_digest"],
        active_revision=row["active_revision"],
        admission_key_commitment=row["admission_key_commitment"],
        state_key_commitments={int(version): str(marker) for version, marker in markers.items()},
        created_at=row["created_at"],
        restore_hold_reason_ref=row.get("restore_hold_reason_ref"),
    )
