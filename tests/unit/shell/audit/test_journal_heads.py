"""The journal read against a store's heads (07 §12.1): positions of durable lines, the checks
that a group is still there and as long, the `dispatch`/`committed` entries after a head, and
the journal's ends that a restore hold records. Real writers, real files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from coordinator_core.errors import CoordinatorError
from coordinator_core.shell.audit import (
    AuditEntry,
    AuditReferences,
    AuditWriter,
    TornTail,
    WorkerAction,
    WorkerOutcome,
    verify_directory,
    worker_record,
)
from coordinator_core.shell.audit.heads import (
    CommittedDispatch,
    check_heads,
    journal_ends,
    line_number,
    read_after_heads,
    set_aside,
    torn_tails,
)
from coordinator_core.shell.audit.writer import JournalPosition
from coordinator_core.values import sha256_label

REFS = AuditReferences(b"\x07" * 32, "heads-test")
RUN = "0b7d3c52-3f0e-4a57-9f55-8f1a1d2c3e4f"


def record(
    action: WorkerAction, outcome: WorkerOutcome, *, attempt: int = 1, step: str = "notify"
) -> AuditEntry:
    step_ref = REFS.step(RUN, step)
    return worker_record(
        f"5d0c6f7e-3b1a-4c2d-9e8f-0a1b2c3d4e5f:{action}:{step_ref}",
        action,
        REFS.run(RUN),
        step_ref,
        1,
        attempt,
        outcome,
    )


def lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    path = tmp_path / "audit"
    path.mkdir(mode=0o700)
    return path


def test_the_position_names_the_last_durable_line_by_file_and_offset(directory: Path) -> None:
    with AuditWriter.open(directory, "worker") as writer:
        assert writer.position is None
        writer.append_all([record("attempt", "intent"), record("dispatch", "intent")])
        position = writer.position
        path = writer.path
    assert position is not None
    content = lines(path)
    assert (position.group, position.sequence, position.file_number) == (writer.prefix, 2, 1)
    assert position.line_offset == len(content[0])
    assert position.line_hash == sha256_label(content[1][:-1])


def test_positions_follow_rotation_into_the_next_file(directory: Path) -> None:
    with AuditWriter.open(directory, "worker", rotate_bytes=600) as writer:
        for _ in range(6):
            writer.append(record("attempt", "intent"))
        position = writer.position
    assert position is not None and position.file_number > 1
    name = f"{position.group}-{position.file_number}.jsonl"
    raw = (directory / name).read_bytes()[position.line_offset :].split(b"\n", 1)[0]
    assert sha256_label(raw) == position.line_hash
    check_heads(directory, {position.group: position})  # the head is found where it says


def committed_dispatches(
    directory: Path, heads: dict[str, JournalPosition]
) -> tuple[CommittedDispatch, ...]:
    return read_after_heads(directory, heads).dispatches


def write(directory: Path, entries: list[AuditEntry]) -> tuple[AuditWriter, JournalPosition]:
    writer = AuditWriter.open(directory, "serve")
    writer.append_all(entries)
    position = writer.position
    writer.close()
    assert position is not None
    return writer, position


def test_a_journal_that_holds_its_heads_passes(directory: Path) -> None:
    _, head = write(directory, [record("attempt", "intent")] * 3)
    check_heads(directory, {head.group: head})
    assert committed_dispatches(directory, {head.group: head}) == ()


def test_a_deleted_tail_line_is_reported_with_its_file_and_line(directory: Path) -> None:
    writer, head = write(directory, [record("attempt", "intent")] * 3)
    path = directory / f"{writer.prefix}.jsonl"
    path.write_bytes(b"".join(lines(path)[:-1]))
    with pytest.raises(CoordinatorError) as caught:
        check_heads(directory, {head.group: head})
    diagnostic = caught.value.diagnostic
    assert diagnostic.code == "coordinator.audit.journal-truncated"
    assert (diagnostic.file, diagnostic.line) == (path.name, 3)
    assert diagnostic.message == "The journal ends before the line the store recorded."


def test_a_deleted_file_is_reported(directory: Path) -> None:
    writer, head = write(directory, [record("attempt", "intent")])
    (directory / f"{writer.prefix}.jsonl").unlink()
    with pytest.raises(CoordinatorError) as caught:
        check_heads(directory, {head.group: head})
    assert caught.value.diagnostic.code == "coordinator.audit.journal-truncated"
    assert caught.value.diagnostic.file == f"{writer.prefix}.jsonl"
    assert caught.value.diagnostic.message == "A journal file the store recorded is missing."


def test_a_changed_head_line_is_reported(directory: Path) -> None:
    writer, head = write(directory, [record("attempt", "intent"), record("attempt", "intent")])
    path = directory / f"{writer.prefix}.jsonl"
    content = lines(path)
    content[-1] = content[-1].replace(b'"attempt":1', b'"attempt":2')
    path.write_bytes(b"".join(content))
    with pytest.raises(CoordinatorError) as caught:
        check_heads(directory, {head.group: head})
    assert caught.value.diagnostic.code == "coordinator.audit.journal-truncated"
    assert caught.value.diagnostic.line == 2
    assert caught.value.diagnostic.message == (
        "The journal line differs from the one the store recorded."
    )


def test_a_fifo_where_a_journal_file_should_be_never_blocks(directory: Path) -> None:
    writer, head = write(directory, [record("attempt", "intent")])
    path = directory / f"{writer.prefix}.jsonl"
    path.unlink()
    os.mkfifo(path)
    with pytest.raises(CoordinatorError) as caught:
        check_heads(directory, {head.group: head})
    assert caught.value.diagnostic.code == "coordinator.audit.unreadable"


def test_only_the_committed_dispatches_after_the_head_are_read(directory: Path) -> None:
    writer = AuditWriter.open(directory, "worker")
    writer.append_all([record("dispatch", "intent"), record("dispatch", "committed")])
    head = writer.position
    writer.append_all(
        [record("dispatch", "intent", attempt=2), record("dispatch", "committed", attempt=2)]
    )
    writer.close()
    assert head is not None
    everything = committed_dispatches(directory, {})
    assert [dispatch.attempt for dispatch in everything] == [1, 2]
    after = committed_dispatches(directory, {head.group: head})
    assert [(d.run_ref, d.step_ref, d.generation, d.attempt) for d in after] == [
        (REFS.run(RUN), REFS.step(RUN, "notify"), 1, 2)
    ]
    assert line_number(directory / after[0].file, after[0].offset) == 4


def test_an_incomplete_last_line_is_not_there_yet(directory: Path) -> None:
    writer, _ = write(directory, [record("dispatch", "committed")])
    path = directory / f"{writer.prefix}.jsonl"
    path.write_bytes(path.read_bytes()[:-1])  # a crash mid-write leaves no line feed
    assert committed_dispatches(directory, {}) == ()
    assert journal_ends(directory) == []


def test_the_ends_are_the_last_complete_line_of_every_group(directory: Path) -> None:
    first, first_head = write(directory, [record("attempt", "intent")] * 2)
    second, second_head = write(directory, [record("attempt", "intent")] * 5)
    path = directory / f"{second.prefix}.jsonl"
    path.write_bytes(path.read_bytes() + b'{"torn":')
    ends = {end.group: end for end in journal_ends(directory)}
    assert ends == {first.prefix: first_head, second.prefix: second_head}


# --- every line after a head is accounted for (07 §12.1 item 6) --------------------------------


def altered(
    directory: Path, heads: dict[str, JournalPosition]
) -> tuple[str, str | None, int | None]:
    with pytest.raises(CoordinatorError) as caught:
        read_after_heads(directory, heads)
    diagnostic = caught.value.diagnostic
    return diagnostic.code, diagnostic.file, diagnostic.line


def headed_journal(directory: Path) -> tuple[Path, JournalPosition]:
    """A dead group of five lines whose store head is line 2."""
    writer = AuditWriter.open(directory, "worker")
    writer.append_all([record("attempt", "intent"), record("dispatch", "intent")])
    head = writer.position
    writer.append_all(
        [
            record("dispatch", "committed"),
            record("transition", "delivered"),
            record("attempt", "intent"),
        ]
    )
    writer.close()
    assert head is not None
    return writer.path, head


def test_a_changed_byte_after_the_head_is_an_altered_journal(directory: Path) -> None:
    path, head = headed_journal(directory)
    content = lines(path)
    content[2] = content[2].replace(b'"committed"', b'"c0mmitted"')
    path.write_bytes(b"".join(content))
    assert altered(directory, {head.group: head}) == (
        "coordinator.audit.journal-altered",
        path.name,
        3,
    )


def test_a_line_that_does_not_parse_after_the_head_is_an_altered_journal(directory: Path) -> None:
    path, head = headed_journal(directory)
    content = lines(path)
    content[3] = b"not a journal line\n"
    path.write_bytes(b"".join(content))
    assert altered(directory, {head.group: head}) == (
        "coordinator.audit.journal-altered",
        path.name,
        4,
    )


def test_a_removed_line_after_the_head_is_an_altered_journal(directory: Path) -> None:
    path, head = headed_journal(directory)
    content = lines(path)
    del content[2]  # the proof of commit goes; the next line no longer chains
    path.write_bytes(b"".join(content))
    assert altered(directory, {head.group: head}) == (
        "coordinator.audit.journal-altered",
        path.name,
        3,
    )


def test_a_group_without_a_head_is_verified_from_its_first_line(directory: Path) -> None:
    path, _ = headed_journal(directory)
    content = lines(path)
    content[0] = content[0].replace(b'"attempt":1', b'"attempt":7')
    path.write_bytes(b"".join(content))
    assert altered(directory, {}) == ("coordinator.audit.journal-altered", path.name, 2)


def test_a_missing_later_file_of_a_group_is_an_altered_journal(directory: Path) -> None:
    _, head = rotated_journal(directory, 12)
    missing = directory / f"{head.group}-3.jsonl"
    missing.unlink()
    with pytest.raises(CoordinatorError) as caught:
        read_after_heads(directory, {head.group: head})
    diagnostic = caught.value.diagnostic
    assert (diagnostic.code, diagnostic.file) == ("coordinator.audit.journal-altered", missing.name)
    assert diagnostic.message == "A file of this journal group is missing."


def test_an_incomplete_line_before_the_last_file_is_an_altered_journal(directory: Path) -> None:
    # Only the last file's last line may be mid-write (a live process): a rotated file is whole.
    _, head = rotated_journal(directory, 12)
    second = directory / f"{head.group}-2.jsonl"
    count = len(lines(second))
    second.write_bytes(second.read_bytes()[:-1])
    with pytest.raises(CoordinatorError) as caught:
        read_after_heads(directory, {head.group: head})
    diagnostic = caught.value.diagnostic
    assert (diagnostic.code, diagnostic.file, diagnostic.line) == (
        "coordinator.audit.journal-altered",
        second.name,
        count,
    )
    assert (diagnostic.path, diagnostic.message) == ("", "The line is incomplete.")


def test_a_torn_tail_of_a_dead_group_is_set_aside(directory: Path) -> None:
    path, head = headed_journal(directory)
    whole = path.read_bytes()
    kept = b"".join(lines(path)[:4])
    path.write_bytes(whole[: len(kept) + 17])  # the last write failed 17 bytes in
    [torn] = torn_tails(directory)
    assert (torn.file, torn.line, torn.offset) == (path.name, 5, len(kept))
    assert set_aside(directory, torn) == 17
    assert path.read_bytes() == kept
    aside = directory / (path.name + ".torn")
    assert aside.read_bytes() == whole[len(kept) : len(kept) + 17]
    assert stat.S_IMODE(aside.stat().st_mode) == 0o600  # owner-only, as the journal's files
    assert torn_tails(directory) == []
    assert len(read_after_heads(directory, {head.group: head}).dispatches) == 1
    # `audit verify` then finds the group whole, and the tail where it was set aside: its line
    # and offset in the file it was cut from (07 §12.1 item 6).
    result = verify_directory(directory)
    assert result.groups[0].entries == 4
    assert result.torn == (TornTail(path.name, 5, len(kept), moved_aside=True),)
    assert result.torn[0].to_json() == {"file": path.name, "line": 5, "movedAside": True}


def test_a_tail_set_aside_from_a_journal_over_one_mebibyte_names_its_line(directory: Path) -> None:
    # `audit verify` counts the lines before a set-aside tail across the whole file, read a
    # MiB at a time: the line it names is the one the tail began at, past the first MiB too.
    writer = AuditWriter.open(directory, "worker")
    writer.append_all([record("attempt", "intent")] * 4_000)
    writer.close()
    kept = writer.path.stat().st_size
    assert kept > 1 << 20
    with writer.path.open("ab") as handle:
        handle.write(b'{"schema":')  # the last write failed part way
    [torn] = torn_tails(directory)
    assert set_aside(directory, torn) == 10
    result = verify_directory(directory)
    assert result.groups[0].entries == 4_000
    assert result.torn == (TornTail(writer.path.name, 4_001, kept, moved_aside=True),)


def test_a_torn_tail_past_the_window_read_from_a_large_file_is_found(directory: Path) -> None:
    # `torn_tails` reads only the end of a group's last file: a journal longer than that window
    # still has its tail found where it begins, and set aside whole.
    writer = AuditWriter.open(directory, "worker")
    writer.append_all([record("attempt", "intent")] * 8_000)
    writer.close()
    kept = writer.path.stat().st_size
    assert kept > 2 * (1 << 20) + 4
    with writer.path.open("ab") as handle:
        handle.write(b'{"schema":"registry-platform-audit/v1","seq')
    assert torn_tails(directory) == [TornTail(writer.path.name, 8_001, kept)]
    assert set_aside(directory, TornTail(writer.path.name, 8_001, kept)) == 43
    assert writer.path.stat().st_size == kept
    assert torn_tails(directory) == []
    # a last line that is complete but not JSON is a torn tail too, from where it begins
    with writer.path.open("ab") as handle:
        handle.write(b"not json\n")
    assert torn_tails(directory) == [TornTail(writer.path.name, 8_001, kept)]


def test_each_dead_group_is_looked_at_for_a_torn_tail(directory: Path) -> None:
    # A live group (its writer holds the file's lock, mid-write), a clean one or the caller's
    # own is passed over, not the end of the search.
    writers = [AuditWriter.open(directory, "worker") for _ in range(3)]
    for writer in writers:
        writer.append_all([record("attempt", "intent")])
    live, clean, dead = sorted(writers, key=lambda writer: writer.path.name)
    clean.close()
    dead.close()
    for writer in (live, dead):
        with writer.path.open("ab") as handle:
            handle.write(b'{"torn')
    try:
        found = [TornTail(dead.path.name, 2, dead.path.stat().st_size - 6)]
        assert torn_tails(directory) == found
        assert torn_tails(directory, own=clean.prefix) == found
        assert torn_tails(directory, own=dead.prefix) == []
    finally:
        live.close()


def test_files_beside_the_journal_do_not_hide_it(directory: Path) -> None:
    # Whatever else the directory holds, in whatever order it lists them, every group is found.
    _, head = write(directory, [record("attempt", "intent")])
    for number in range(100):
        (directory / f"notes-{number:03d}.txt").write_text("not a journal")
    (directory / "worker-20261206T000000Z-00000000.jsonl").mkdir()  # named as one, not a file
    assert journal_ends(directory) == [head]


def rotated_journal(directory: Path, proofs: int) -> tuple[Path, JournalPosition]:
    """A dead group spread over several files: two attempts (the second is the store's head,
    inside the first file), then `proofs` proofs of commit, each in a write of its own."""
    writer = AuditWriter.open(directory, "worker", rotate_bytes=1_500)
    writer.append_all([record("attempt", "intent")] * 2)
    head = writer.position
    for _ in range(proofs):
        writer.append_all([record("dispatch", "committed")])
    writer.close()
    assert head is not None and head.file_number == 1 and head.line_offset > 0
    return writer.path, head


def test_the_lines_after_a_head_are_read_across_the_files_that_follow(directory: Path) -> None:
    last, head = rotated_journal(directory, 12)
    files = sorted(directory.glob(f"{head.group}*.jsonl"))
    assert len(files) > 3
    tail = read_after_heads(directory, {head.group: head})
    assert len(tail.dispatches) == 12  # every later file read from its first line
    end = tail.ends[head.group]
    assert (end.sequence, end.file_number) == (14, len(files))
    assert journal_ends(directory) == [end]
    assert last.name == f"{head.group}-{end.file_number}.jsonl"  # the writer's last file


def test_the_end_of_a_group_whose_last_file_is_still_empty_is_in_the_file_before(
    directory: Path,
) -> None:
    # A process that rotated and died before writing leaves an empty last file: the journal
    # ends in the file before it, not two before.
    _, head = rotated_journal(directory, 12)
    number = len(sorted(directory.glob(f"{head.group}*.jsonl")))
    (directory / f"{head.group}-{number + 1}.jsonl").write_bytes(b"")
    [end] = journal_ends(directory)
    assert end == read_after_heads(directory, {}).ends[head.group]
    assert (end.sequence, end.file_number) == (14, number)


def test_a_last_line_that_is_not_json_is_a_torn_tail(directory: Path) -> None:
    path, _ = headed_journal(directory)
    with path.open("ab") as handle:
        handle.write(b"\x00\x00\x00\n")
    [torn] = torn_tails(directory)
    assert (torn.file, torn.line) == (path.name, 6)


def test_the_tail_a_live_writer_is_writing_is_never_touched(directory: Path) -> None:
    writer = AuditWriter.open(directory, "serve")
    writer.append(record("attempt", "intent"))
    with writer.path.open("ab") as handle:
        handle.write(b'{"half":')  # as another process sees a write in progress
    assert torn_tails(directory) == []
    assert read_after_heads(directory, {}).ends[writer.prefix].sequence == 1
    writer.close()
    assert [torn.file for torn in torn_tails(directory)] == [writer.path.name]


def test_a_complete_line_that_does_not_chain_at_the_end_is_altered_not_torn(
    directory: Path,
) -> None:
    path, _ = headed_journal(directory)
    with path.open("ab") as handle:
        handle.write(b'{"sequence":6}\n')
    assert torn_tails(directory) == []
    assert altered(directory, {}) == ("coordinator.audit.journal-altered", path.name, 6)
