"""The audit journal: append-only, hash-chained JSON Lines of keyed references (contract 07 §11).

This is a shell package (it writes files and reads the clock): `entries` (the entry shapes and
their checks), `references` (the keyed references), `writer` (one process's journal) and
`verify` (the chain check); this module names what the rest of the product uses. The journal never holds a raw
identifier, reason, input, output, token or contact: every identifying member is a keyed
reference, and `AuditEntry` refuses any record that is not one of the shapes of the 07 §11 table.

Public API
----------

`AuditReferences(audit_key, database_id)`
    Keyed references `hmac-sha256:<hex>` (07 §11 "Keyed references"): `reference(class, value)`
    and one helper per class (`actor`, `run`, `step`, `reason`, `event`, `source`, `request`,
    `connection`, `restore_evidence`, `admission_recovery`). The audit key is at least 32 bytes
    (05 §2.2, else `coordinator.secret.invalid`).

`AuditEntry(phase, correlation, record)` and its builders
    `api_request`, `event_request`, `review_completion_request`, `migrate_request`,
    `apply_request`, `response`, `ctl_applied`, `worker_record`; `new_correlation()` and
    `worker_correlation(uuid, action, step_ref)` build the `correlation` member. A record outside
    the 07 §11 table (an unknown member, a raw value where a reference belongs, …) raises ValueError
    with a fixed message that never quotes the value.

`AuditWriter.open(directory, role, clock=…, rotate_bytes=100 MiB)`
    One process's journal: creates `<role>-<YYYYMMDDTHHMMSSZ>-<8 hex>.jsonl` (owner-only, in an
    owner-only directory it creates if absent), continuing in `…-<n>.jsonl` at 100 MiB.
    `append(entry)` returns only once the line is written and fsynced (concurrent appends share
    one fsync: group commit). Any write failure raises `coordinator.command.audit-unavailable` and
    every later append is refused until the process restarts (`ready` turns false). `head` is the
    `sha256:` hash of the last durable line (06 §7.1 `auditHead`).

`verify_directory(directory) -> VerifyResult`
    `coordinatorctl audit verify` (09 §2): every file group is checked line by line; the first
    broken line raises `coordinator.audit.chain-broken` (exit 1) naming the file and the line; a
    directory or file that cannot be read raises `coordinator.audit.unreadable` (exit 3). A
    torn last line (a failed write, 07 §12.1 item 6) is no break: it is a `TornTail` of the
    result, as is each one a start set aside to `<file>.torn`. `VerifyResult.to_json()` is
    `{files, entries, groups: [{prefix, files, entries, head}], tornTails: [{file, line,
    movedAside}]}`.

Line format (07 §11): the RFC 8785 bytes of
`{schema, sequence, eventId, time, phase, correlation, record, previous}` followed by one line
feed, where `previous` is `sha256:` + hex(SHA-256(previous line without its line feed)), and
`sha256:` + 64 zeros for sequence 1; sequences run 1, 2, 3, … across a process's files.
"""

from __future__ import annotations

from coordinator_core.shell.audit.entries import (
    AUDIT_SCHEMA,
    FILE_ROTATE_BYTES,
    MAX_ENTRY_BYTES,
    READ_ACTIONS,
    ZERO_HASH,
    ApiAction,
    AuditEntry,
    Phase,
    ReferenceClass,
    ResponseOutcome,
    Role,
    WorkerAction,
    WorkerOutcome,
    api_request,
    apply_request,
    ctl_applied,
    event_request,
    migrate_request,
    new_correlation,
    response,
    review_completion_request,
    worker_correlation,
    worker_record,
)
from coordinator_core.shell.audit.references import AuditReferences
from coordinator_core.shell.audit.verify import (
    GroupResult,
    TornTail,
    VerifyResult,
    verify_directory,
)
from coordinator_core.shell.audit.writer import AuditWriter

__all__ = [
    "AUDIT_SCHEMA",
    "FILE_ROTATE_BYTES",
    "MAX_ENTRY_BYTES",
    "READ_ACTIONS",
    "ZERO_HASH",
    "ApiAction",
    "AuditEntry",
    "AuditReferences",
    "AuditWriter",
    "GroupResult",
    "Phase",
    "ReferenceClass",
    "ResponseOutcome",
    "Role",
    "TornTail",
    "VerifyResult",
    "WorkerAction",
    "WorkerOutcome",
    "api_request",
    "apply_request",
    "ctl_applied",
    "event_request",
    "migrate_request",
    "new_correlation",
    "response",
    "review_completion_request",
    "verify_directory",
    "worker_correlation",
    "worker_record",
]
