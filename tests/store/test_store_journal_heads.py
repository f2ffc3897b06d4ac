"""The store's journal heads and the start-up comparison of restore detection (07 §12.1), on
both backends, with a real journal: heads are saved by write transactions (at most once a
second) and at a stop, only ever move forward, are replaced by a restore hold; a journal entry
of a dispatch the store does not show refuses, one it shows does not."""

from __future__ import annotations

from pathlib import Path

import pytest
from store_support import T0, admit, changed, claim

from coordinator_core.errors import CoordinatorError
from coordinator_core.shell.audit import AuditReferences, AuditWriter, worker_record
from coordinator_core.shell.audit.heads import journal_ends
from coordinator_core.shell.audit.writer import JournalPosition
from coordinator_core.shell.restore_detection import check_journal
from coordinator_core.shell.store import RunSnapshot, RunWrite, Store

REFS = AuditReferences(b"\x07" * 32, "journal-heads-test")


@pytest.fixture
def journal(tmp_path: Path) -> AuditWriter:
    directory = tmp_path / "audit"
    directory.mkdir(mode=0o700)
    writer = AuditWriter.open(directory, "worker")
    yield writer  # type: ignore[misc]
    writer.close()


def dispatch_entry(
    writer: AuditWriter, run_id: str, step: str, generation: int, attempt: int
) -> None:
    step_ref = REFS.step(run_id, step)
    writer.append(
        worker_record(
            f"5d0c6f7e-3b1a-4c2d-9e8f-0a1b2c3d4e5f:dispatch:{step_ref}",
            "dispatch",
            REFS.run(run_id),
            step_ref,
            generation,
            attempt,
            "committed",
        )
    )


def mark_dispatched(snapshot: RunSnapshot) -> RunWrite:
    marked = changed(
        snapshot.current, command=b"c", command_prepared=True, dispatched=True, sent=True
    )
    return RunWrite(snapshot.run, (marked,))


def test_a_write_saves_the_journal_head_and_a_stop_saves_the_last_line(
    store: Store, journal: AuditWriter
) -> None:
    store.follow_journal(lambda: journal.position)
    assert store.reads.journal_heads() == {}
    dispatch_entry(journal, "0b7d3c52-3f0e-4a57-9f55-8f1a1d2c3e4f", "start", 1, 1)
    admit(store, "a")
    held = claim(store, T0)  # a write transaction: the head is saved with it
    assert held is not None
    first = journal.position
    assert store.reads.journal_heads() == {journal.prefix: first}
    dispatch_entry(journal, "0b7d3c52-3f0e-4a57-9f55-8f1a1d2c3e4f", "start", 1, 2)
    # within the second: not saved again
    store.writes.record_step_progress(held, T0, mark_dispatched)
    assert store.reads.journal_heads() == {journal.prefix: first}
    store.save_journal_head(T0)
    assert store.reads.journal_heads() == {journal.prefix: journal.position}


def test_a_head_never_moves_back(store: Store, journal: AuditWriter) -> None:
    dispatch_entry(journal, "0b7d3c52-3f0e-4a57-9f55-8f1a1d2c3e4f", "start", 1, 1)
    early = journal.position
    dispatch_entry(journal, "0b7d3c52-3f0e-4a57-9f55-8f1a1d2c3e4f", "start", 1, 2)
    late = journal.position
    assert early is not None and late is not None
    positions = iter([late, early])
    store.follow_journal(lambda: next(positions))
    store.save_journal_head(T0)
    store.save_journal_head(T0)
    assert store.reads.journal_heads() == {journal.prefix: late}


def test_a_restore_hold_replaces_the_heads_with_the_journal_as_it_is(
    store: Store, journal: AuditWriter
) -> None:
    stale = JournalPosition("worker-20200101T000000Z-00000000", 9, "sha256:" + "0" * 64, 1, 0)
    store.follow_journal(lambda: stale)
    store.save_journal_head(T0)
    dispatch_entry(journal, "0b7d3c52-3f0e-4a57-9f55-8f1a1d2c3e4f", "start", 1, 1)
    ends = journal_ends(journal.directory)
    store.operator.set_restore_hold(T0, lambda _snapshot: None, ends)
    assert store.reads.journal_heads() == {end.group: end for end in ends}
    assert journal.prefix in store.reads.journal_heads()


def test_a_dispatch_the_store_does_not_hold_refuses_a_start(
    store: Store, journal: AuditWriter
) -> None:
    run = admit(store, "b")
    held = claim(store, T0)
    assert held is not None
    # The store shows the attempt leased but never marked: the proof says it was.
    dispatch_entry(journal, str(run.run_id), "start", 1, 1)
    with pytest.raises(CoordinatorError) as caught:
        check_journal(store, journal.directory, REFS)
    diagnostic = caught.value.diagnostic
    assert diagnostic.code == "coordinator.deployment.store-behind-journal"
    assert (diagnostic.file, diagnostic.line) == (journal.path.name, 1)
    # Once the store shows the mark (or anything later), the same journal passes.
    store.writes.record_step_progress(held, T0, mark_dispatched)
    check_journal(store, journal.directory, REFS)


def test_a_dispatch_of_a_run_the_store_lacks_refuses_a_start(
    store: Store, journal: AuditWriter
) -> None:
    admit(store, "c")
    dispatch_entry(journal, "0b7d3c52-3f0e-4a57-9f55-8f1a1d2c3e4f", "start", 1, 1)
    with pytest.raises(CoordinatorError) as caught:
        check_journal(store, journal.directory, REFS)
    assert caught.value.diagnostic.code == "coordinator.deployment.store-behind-journal"


def test_entries_before_the_head_are_not_read_again(store: Store, journal: AuditWriter) -> None:
    dispatch_entry(journal, "0b7d3c52-3f0e-4a57-9f55-8f1a1d2c3e4f", "start", 1, 1)
    store.follow_journal(lambda: journal.position)
    store.save_journal_head(T0)  # e.g. the heads a restore hold recorded
    check_journal(store, journal.directory, REFS)
