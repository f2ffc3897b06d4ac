"""The restore witness file (07 §12.1 item 5) on its own: what `positions` reads back from
appends and from a `replace`, and what it refuses. The start's use of it (a store and journal
restored together are refused) is tests/store/test_store_identity.py and the restore drills."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from coordinator_core.errors import CoordinatorError
from coordinator_core.shell.audit import (
    AuditEntry,
    AuditReferences,
    AuditWriter,
    WorkerAction,
    WorkerOutcome,
    worker_record,
)
from coordinator_core.shell.audit.witness import RestoreWitness
from coordinator_core.shell.audit.writer import JournalPosition
from coordinator_core.values import canonical_json, sha256_label

SERVE = "serve-20261206T223000Z-0a1b2c3d"
WORKER = "worker-20261206T223001Z-4e5f6a7b"


def position(group: str, sequence: int, file_number: int = 1, offset: int = 0) -> JournalPosition:
    return JournalPosition(group, sequence, f"sha256:{sequence:064x}", file_number, offset)


@pytest.fixture
def witness(tmp_path: Path) -> RestoreWitness:
    return RestoreWitness(tmp_path / "restore-witness")


def refused(witness: RestoreWitness) -> CoordinatorError:
    with pytest.raises(CoordinatorError) as caught:
        witness.positions()
    return caught.value


def test_a_witness_not_yet_written_names_nothing(witness: RestoreWitness) -> None:
    assert witness.positions() == {}


def test_created_owner_only(witness: RestoreWitness) -> None:
    witness.create()
    assert stat.S_IMODE(witness.path.stat().st_mode) == 0o600
    assert witness.positions() == {}


def test_each_position_is_one_line_of_canonical_json(witness: RestoreWitness) -> None:
    witness.append(position(SERVE, 9, file_number=3, offset=4_096))
    assert (
        witness.path.read_bytes()
        == canonical_json(
            {
                "group": SERVE,
                "sequence": 9,
                "lineHash": f"sha256:{9:064x}",
                "fileNumber": 3,
                "lineOffset": 4_096,
            }
        )
        + b"\n"
    )


def test_the_last_position_of_each_group_is_read_back_whole(witness: RestoreWitness) -> None:
    # Every member of a position round-trips (group, sequence, hash, file number, offset), and
    # of several lines of a group the one with the highest sequence wins, in whatever order
    # the processes appended them.
    newest = position(SERVE, 9, file_number=3, offset=4_096)
    for appended in (
        position(SERVE, 2),
        position(WORKER, 5, file_number=2, offset=77),
        newest,
        position(SERVE, 7, file_number=2, offset=10),
    ):
        witness.append(appended)
    assert witness.positions() == {SERVE: newest, WORKER: position(WORKER, 5, 2, 77)}


def test_an_append_cut_by_a_crash_is_left_out(witness: RestoreWitness) -> None:
    # An append without its line feed was never acknowledged: the journal line it names may
    # not be there, and the witness is never ahead of the journal (07 §12.1 item 5).
    witness.append(position(SERVE, 3))
    with witness.path.open("ab") as handle:
        handle.write(b'{"fileNumber":1,"group":"' + SERVE.encode() + b'","lineHash":"sha2')
    assert witness.positions() == {SERVE: position(SERVE, 3)}


@pytest.mark.parametrize(
    "line",
    [
        b"not json",
        b"[1]",
        b'{"group":"' + SERVE.encode() + b'"}',  # members missing
        b'{"fileNumber":1,"group":"notes","lineHash":"sha256:00","lineOffset":0,"sequence":1}',
        b'{"fileNumber":1,"group":"' + SERVE.encode() + b'","lineHash":"md5:00",'
        b'"lineOffset":0,"sequence":1}',
        b'{"fileNumber":1,"group":"' + SERVE.encode() + b'","lineHash":"sha256:00",'
        b'"lineOffset":0,"sequence":-1}',
        b'{"fileNumber":true,"group":"' + SERVE.encode() + b'","lineHash":"sha256:00",'
        b'"lineOffset":0,"sequence":1}',
        # a position in form, but longer than any line the witness writes (1,024 bytes)
        b'{"fileNumber":1,"group":"'
        + SERVE.encode()
        + b'","lineHash":"sha256:'
        + b"0" * 1_000
        + b'","lineOffset":0,"sequence":1}',
    ],
)
def test_a_line_that_is_not_a_position_is_journal_altered(
    witness: RestoreWitness, line: bytes
) -> None:
    witness.append(position(SERVE, 1))
    with witness.path.open("ab") as handle:
        handle.write(line + b"\n")
    error = refused(witness)
    assert (error.code, error.diagnostic.file) == (
        "coordinator.audit.journal-altered",
        "restoreWitness",
    )


def test_a_witness_that_cannot_be_read_is_unreadable(witness: RestoreWitness) -> None:
    witness.path.mkdir()
    error = refused(witness)
    assert (error.code, error.diagnostic.file) == ("coordinator.audit.unreadable", "restoreWitness")


def test_replace_names_exactly_the_positions_given_and_later_appends_follow(
    witness: RestoreWitness,
) -> None:
    # A restore hold adopts the journal as it is (07 §12.1): what the old file named is gone,
    # the new file is owner-only, nothing is left beside it, and appends go to the new file.
    witness.append(position(SERVE, 40, file_number=5, offset=9_000))
    witness.append(position(WORKER, 12))
    witness.replace([position(SERVE, 3, file_number=1, offset=300)])
    assert witness.positions() == {SERVE: position(SERVE, 3, 1, 300)}
    assert stat.S_IMODE(witness.path.stat().st_mode) == 0o600
    assert sorted(item.name for item in witness.path.parent.iterdir()) == [witness.path.name]
    witness.append(position(WORKER, 1))
    assert witness.positions() == {SERVE: position(SERVE, 3, 1, 300), WORKER: position(WORKER, 1)}
    witness.replace([])
    assert witness.positions() == {}


REFS = AuditReferences(b"\x07" * 32, "witness-test")
RUN = "0b7d3c52-3f0e-4a57-9f55-8f1a1d2c3e4f"


def record(action: WorkerAction, outcome: WorkerOutcome) -> AuditEntry:
    step_ref = REFS.step(RUN, "notify")
    return worker_record(
        f"5d0c6f7e-3b1a-4c2d-9e8f-0a1b2c3d4e5f:{action}:{step_ref}",
        action,
        REFS.run(RUN),
        step_ref,
        1,
        1,
        outcome,
    )


def test_the_writer_names_only_proofs_of_commit_each_at_its_own_line(
    tmp_path: Path, witness: RestoreWitness
) -> None:
    # 07 §12.1 item 5: the witness names the line of each write's last `dispatch`/`committed`
    # entry, nothing else (an intent or another action's `committed` is no proof of commit).
    with AuditWriter.open(tmp_path / "audit", "worker", proofs=witness.append) as writer:
        writer.append_all([record("attempt", "intent"), record("dispatch", "intent")])
        assert witness.positions() == {}
        writer.append_all(
            [
                record("dispatch", "intent"),
                record("dispatch", "committed"),
                record("transition", "delivered"),
            ]
        )
    journal = writer.path.read_bytes().splitlines(keepends=True)
    offset = sum(len(line) for line in journal[:3])
    assert witness.positions() == {
        writer.prefix: JournalPosition(writer.prefix, 4, sha256_label(journal[3][:-1]), 1, offset)
    }
