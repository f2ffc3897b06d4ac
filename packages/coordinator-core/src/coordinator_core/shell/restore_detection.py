"""Restore detection (07 §12.1): a process in normal mode refuses a store older than its audit
journal, and a journal shorter than the store recorded.

The journal proves what the store once held: a `dispatch`/`committed` entry is appended only
after the transaction that marked its record `dispatched` committed. If the store no longer
shows that mark (the run or its record is missing, at an earlier generation or attempt, or
still leased without the mark), the store was restored from a backup taken before it, and an
ordinary worker could resend or re-prepare what a product already accepted:
`coordinator.deployment.store-behind-journal`. The heads the store keeps per file group
(`Store.follow_journal`) bound the read to the entries after them and prove the journal has
not lost lines the store saw (`coordinator.audit.journal-truncated`, `audit.heads`).

A crash never triggers either refusal: a head only ever names a line that was on stable
storage, and an entry only ever follows a commit.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path

from coordinator_core.errors import CoordinatorError, Diagnostic
from coordinator_core.shell.audit import AuditReferences
from coordinator_core.shell.audit.heads import (
    CommittedDispatch,
    check_heads,
    committed_dispatches,
    line_number,
)
from coordinator_core.shell.store import RunSnapshot, Store

__all__ = ["check_journal", "first_unreflected"]


def check_journal(store: Store, directory: Path, references: AuditReferences) -> None:
    """The start-up comparison of 07 §12.1 item 2 (after the deployment check, normal mode):
    raises `coordinator.audit.journal-truncated` or `coordinator.deployment.store-behind-journal`
    naming the journal file and line, else returns."""
    heads = store.reads.journal_heads()
    check_heads(directory, heads)
    dispatches = committed_dispatches(directory, heads)
    if not dispatches:
        return
    behind = first_unreflected(store, dispatches, references)
    if behind is not None:
        raise CoordinatorError(
            Diagnostic(
                code="coordinator.deployment.store-behind-journal",
                file=behind.file,
                line=line_number(directory / behind.file, behind.offset),
                message=(
                    "The audit journal records a dispatch that this store does not hold: the "
                    "store is older than the journal."
                ),
            )
        )


def first_unreflected(
    store: Store, dispatches: Sequence[CommittedDispatch], references: AuditReferences
) -> CommittedDispatch | None:
    """The first entry whose record the store does not show at least as far as the entry
    says (07 §12.1 item 2), or None. Runs are found by their keyed reference: one HMAC per run
    of the store, computed only when some entry follows the heads."""
    wanted = {dispatch.run_ref for dispatch in dispatches}
    found: dict[str, uuid.UUID] = {}
    for run_id in store.reads.run_ids():
        reference = references.run(str(run_id))
        if reference in wanted:
            found[reference] = run_id
    snapshots: dict[uuid.UUID, RunSnapshot | None] = {}
    for dispatch in dispatches:
        known = found.get(dispatch.run_ref)
        if known is None:
            return dispatch
        if known not in snapshots:
            snapshots[known] = store.reads.get_run_snapshot(known)
        snapshot = snapshots[known]
        if snapshot is None or not _reflected(snapshot, known, dispatch, references):
            return dispatch
    return None


def _reflected(
    snapshot: RunSnapshot,
    run_id: uuid.UUID,
    dispatch: CommittedDispatch,
    references: AuditReferences,
) -> bool:
    for stored in snapshot.steps:
        record = stored.record
        if references.step(str(run_id), record.step) != dispatch.step_ref:
            continue
        seen = (record.generation, record.attempt)
        entry = (dispatch.generation, dispatch.attempt)
        if seen != entry:
            return seen > entry
        # The attempt of the entry: it was marked, so it is marked still or has ended since.
        return record.dispatched or record.state != "leased"
    return False
