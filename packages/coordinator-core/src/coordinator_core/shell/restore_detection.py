"""Restore detection (07 §12.1): a process in normal mode refuses a store older than its audit
journal, a store in another database than the one its journal and heads name, and a journal
that was altered or shortened.

The journal proves what the store once held: a `dispatch`/`committed` entry is appended only
after the transaction that marked its record `dispatched` committed. If the store no longer
shows that mark (the run or its record is missing, at an earlier generation or attempt, or
still leased without the mark), the store was restored from a backup taken before it, and an
ordinary worker could resend or re-prepare what a product already accepted:
`coordinator.deployment.store-behind-journal`. The heads the store keeps per file group
(`Store.follow_journal`) bound the read to the entries after them and prove the journal has
not lost lines the store saw (`coordinator.audit.journal-truncated`, `audit.heads`); every line
read after them must chain (`coordinator.audit.journal-altered`, item 6).

A store put back *with* its journal agrees with it. What it cannot bring back is the database
it lived in (item 5): each head names the identity of the database it was saved in, each
process journals the identity it works (`store.identity`), and a store whose identity differs
is `coordinator.deployment.store-restored`. The restore witness (`store.restoreWitness`), kept
outside the backup set, names the journal line of every proof of commit: a journal that no
longer reaches it was put back too (`store-restored` as well).

A crash never triggers a refusal: a head only ever names a line that was on stable storage,
an entry only ever follows a commit, the witness only ever follows its journal line, and a
torn last line of a dead process is set aside (`set_aside_torn_tails`), not taken for an
alteration.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path

from coordinator_core.errors import CoordinatorError, Diagnostic
from coordinator_core.shell.audit import AuditReferences, AuditWriter, new_correlation
from coordinator_core.shell.audit.entries import store_identity_record, torn_tail_record
from coordinator_core.shell.audit.heads import (
    CommittedDispatch,
    check_heads,
    line_number,
    read_after_heads,
    set_aside,
    torn_tails,
)
from coordinator_core.shell.audit.verify import TornTail
from coordinator_core.shell.audit.witness import RestoreWitness
from coordinator_core.shell.store import RunSnapshot, Store
from coordinator_core.shell.store.identity import store_restored

__all__ = [
    "check_journal",
    "first_unreflected",
    "journal_identity",
    "set_aside_torn_tails",
]

_STORE_RESTORED = "coordinator.deployment.store-restored"


def check_journal(
    store: Store,
    directory: Path,
    references: AuditReferences,
    *,
    witness: RestoreWitness | None = None,
) -> None:
    """The start-up comparison of 07 §12.1 items 2, 5 and 6 (after the deployment check, normal
    mode): raises `coordinator.deployment.store-restored`, `coordinator.audit.journal-truncated`,
    `coordinator.audit.journal-altered` or `coordinator.deployment.store-behind-journal`
    (naming the journal file and line where there is one), else returns."""
    identity = store.store_identity
    for named in store.reads.head_identities().values():
        if named is not None and named.text != identity.text:
            raise store_restored(identity, named, "the one its journal heads name")
    heads = store.reads.journal_heads()
    check_heads(directory, heads)
    tail = read_after_heads(directory, heads)
    for mark in tail.identities:
        if mark.digest != identity.digest:
            error = store_restored(identity, None, "the one the audit journal names")
            raise _located(error, mark.file, line_number(directory / mark.file, mark.offset))
    if witness is not None:
        for position in sorted(witness.positions().values(), key=lambda item: item.group):
            try:
                check_heads(directory, {position.group: position})
            except CoordinatorError as error:
                if error.code != "coordinator.audit.journal-truncated":
                    raise
                raise CoordinatorError(
                    Diagnostic(
                        code=_STORE_RESTORED,
                        file=error.diagnostic.file,
                        line=error.diagnostic.line,
                        message=(
                            "The restore witness names a proof of commit that the audit journal"
                            " does not hold: the store and its journal were put back together."
                        ),
                    )
                ) from None
    if not tail.dispatches:
        return
    behind = first_unreflected(store, tail.dispatches, references)
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


def _located(error: CoordinatorError, file: str, line: int) -> CoordinatorError:
    diagnostic = error.diagnostic
    return CoordinatorError(
        Diagnostic(code=diagnostic.code, file=file, line=line, message=diagnostic.message)
    )


def set_aside_torn_tails(directory: Path, writer: AuditWriter) -> list[TornTail]:
    """07 §12.1 item 6, at every start: the torn tail of each dead process's journal is moved to
    `<file>.torn` and this process journals `journal.torn-tail` for it; answers what was moved.
    A move that cannot be made is `coordinator.command.audit-unavailable` (exit 3)."""
    moved: list[TornTail] = []
    for torn in torn_tails(directory, own=writer.prefix):
        try:
            size = set_aside(directory, torn)
        except OSError:
            raise CoordinatorError(
                Diagnostic(
                    code="coordinator.command.audit-unavailable",
                    file=torn.file,
                    message="A torn last line of the audit journal cannot be set aside.",
                )
            ) from None
        if size is None:
            continue  # its process came back to life: not torn
        writer.append(torn_tail_record(new_correlation(), torn.file, torn.line, size))
        moved.append(torn)
    return moved


def journal_identity(writer: AuditWriter, store: Store) -> None:
    """Journal the identity of the database this process works (`store.identity`, 07 §12.1
    item 5): the group is then known to have been written against it."""
    writer.append(store_identity_record(new_correlation(), store.store_identity.digest))


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
