"""The audit journal (contract 07 §11) and `coordinatorctl audit verify` (09 §2).

Reference vector copied from 07 §11. Each tampering test edits real journal files and checks
that verification names the right code, file and line.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import stat
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand
from hypothesis import given
from hypothesis import strategies as st

from coordinator_core.errors import CoordinatorError
from coordinator_core.shell import audit
from coordinator_core.shell.audit import (
    AUDIT_SCHEMA,
    ZERO_HASH,
    AuditEntry,
    AuditReferences,
    AuditWriter,
    GroupResult,
    TornTail,
    VerifyResult,
    api_request,
    apply_request,
    ctl_applied,
    event_request,
    migrate_request,
    new_correlation,
    response,
    review_completion_request,
    verify_directory,
    worker_correlation,
    worker_record,
)
from coordinator_core.shell.audit.entries import store_identity_record, torn_tail_record
from coordinator_core.values import canonical_json, sha256_label

DB = "reviewed-notice-dev"
AUDIT_KEY = b"\x07" * 32
CANARY = "canary-31b7aa-raw"
REFS = AuditReferences(AUDIT_KEY, DB)
FILE_NAME = re.compile(r"(serve|worker|ctl)-\d{8}T\d{6}Z-[0-9a-f]{8}(-[2-9]|-[1-9]\d+)?\.jsonl")


def sample_entries(count: int, raw: str = "run-1") -> list[AuditEntry]:
    """A realistic mix: API request/response pairs and worker records, all keyed."""
    entries: list[AuditEntry] = []
    run_ref, step_ref = REFS.run(raw), REFS.step(raw, "send")
    while len(entries) < count:
        correlation = new_correlation()
        entries.append(api_request(correlation, "status", REFS.actor("o" * 64), run_ref=run_ref))
        entries.append(response(correlation, "status", "accepted"))
        worker = worker_correlation(new_correlation(), "attempt", step_ref)
        entries.append(worker_record(worker, "attempt", run_ref, step_ref, 1, 1, "intent"))
    return entries[:count]


def write_journal(
    directory: Path, count: int, role: audit.Role = "serve", **options: Any
) -> AuditWriter:
    writer = AuditWriter.open(directory, role, **options)
    for entry in sample_entries(count):
        writer.append(entry)
    writer.close()
    return writer


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().split(b"\n")[:-1]


def write_lines(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"".join(line + b"\n" for line in lines))


def broken(directory: Path) -> CoordinatorError:
    with pytest.raises(CoordinatorError) as caught:
        verify_directory(directory)
    return caught.value


def where(error: CoordinatorError) -> tuple[str, str | None, int | None]:
    return error.code, error.diagnostic.file, error.diagnostic.line


@pytest.fixture
def journal_dir(tmp_path: Path) -> Path:
    return tmp_path / "audit"


# --- keyed references -------------------------------------------------------------------------


def test_reference_matches_the_contract_vector() -> None:
    # A fresh instance: the module's REFS keeps the references it made (a bounded cache), and
    # this test checks the computation, not a value remembered from another test.
    assert (
        AuditReferences(AUDIT_KEY, DB).run("0b7d3c52-3f0e-4a57-9f55-8f1a1d2c3e4f")
        == "hmac-sha256:41628f385a9002336960665479c48c049e136852f81553f0b34657cb2a169aec"
    )


def test_identifier_key_is_the_one_block_hkdf_expand_of_the_audit_key() -> None:
    expected = HKDFExpand(SHA256(), 32, b"registry-platform-audit/identifier-key/v1").derive(
        AUDIT_KEY
    )
    assert REFS._id_key == expected


def test_references_separate_class_scope_and_value_with_byte_lengths() -> None:
    other_scope = AuditReferences(AUDIT_KEY, "other-db")
    assert REFS.run("x") != REFS.reason("x")
    assert REFS.run("x") != other_scope.run("x")
    assert REFS.step("r", "s") == REFS.reference("step-v1", "r/s")
    # 07 §11's classes of the restore's evidence and of an admission's recovery
    assert REFS.restore_evidence("e") == REFS.reference("restore-evidence-v1", "e")
    assert REFS.admission_recovery("e") == REFS.reference("admission-recovery-v1", "e")
    assert REFS.restore_evidence("e") != REFS.admission_recovery("e")
    # "é" is 2 UTF-8 bytes: the length written is 2, so "é" and "e\u0301" (3 bytes) differ
    assert REFS.reason("é") != REFS.reason("e\u0301")
    assert re.fullmatch(r"hmac-sha256:[0-9a-f]{64}", REFS.event("ce-1"))


def test_audit_key_must_be_at_least_32_bytes() -> None:
    with pytest.raises(CoordinatorError) as caught:
        AuditReferences(b"\x07" * 31, DB)
    assert (caught.value.code, caught.value.diagnostic.path) == (
        "coordinator.secret.invalid",
        "/deployment/auditKeyRef",
    )
    AuditReferences(b"\x07" * 64, DB)
    assert "07" * 8 not in repr(REFS)


# --- entries ----------------------------------------------------------------------------------


def test_lines_are_canonical_json_with_exactly_the_journal_members(journal_dir: Path) -> None:
    writer = write_journal(journal_dir, 6)
    previous = ZERO_HASH
    for sequence, line in enumerate(lines_of(writer.path), start=1):
        entry = json.loads(line)
        assert canonical_json(entry) == line
        assert set(entry) == {
            "schema",
            "sequence",
            "eventId",
            "time",
            "phase",
            "correlation",
            "record",
            "previous",
        }
        assert entry["schema"] == AUDIT_SCHEMA
        assert entry["sequence"] == sequence
        assert entry["previous"] == previous
        assert re.fullmatch(
            r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}", entry["eventId"]
        )
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", entry["time"])
        previous = sha256_label(line)
    assert writer.head == previous


def test_first_previous_is_sha256_and_64_zeros(journal_dir: Path) -> None:
    writer = write_journal(journal_dir, 1)
    assert json.loads(lines_of(writer.path)[0])["previous"] == "sha256:" + "0" * 64


def test_time_and_file_stamp_are_utc_from_the_injected_clock(journal_dir: Path) -> None:
    moment = datetime(2026, 1, 2, 3, 4, 5, 678_901, tzinfo=timezone(timedelta(hours=2)))
    writer = AuditWriter.open(journal_dir, "ctl", clock=lambda: moment)
    writer.append(migrate_request(new_correlation(), 0, 1))
    writer.close()
    assert writer.prefix.startswith("ctl-20260102T010405Z-")
    assert json.loads(lines_of(writer.path)[0])["time"] == "2026-01-02T01:04:05.678Z"


def test_files_and_directory_are_owner_only_and_named_by_the_rule(journal_dir: Path) -> None:
    writer = write_journal(journal_dir, 2, role="worker")
    assert FILE_NAME.fullmatch(writer.path.name)
    assert writer.path.name == writer.prefix + ".jsonl"
    assert stat.S_IMODE(os.stat(journal_dir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(writer.path).st_mode) == 0o600


def test_existing_directory_open_to_others_is_refused(tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    os.chmod(loose, 0o755)
    with pytest.raises(CoordinatorError) as caught:
        AuditWriter.open(loose, "serve")
    assert caught.value.code == "coordinator.command.audit-unavailable"
    assert caught.value.diagnostic.exit_code == 3
    assert list(loose.iterdir()) == []


def test_a_new_writer_never_reuses_an_existing_file(
    journal_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    moment = datetime(2026, 1, 2, tzinfo=UTC)
    monkeypatch.setattr(secrets, "token_hex", lambda size: "ab" * size)
    first = AuditWriter.open(journal_dir, "serve", clock=lambda: moment)
    first.append(migrate_request(new_correlation(), 0, 1))
    before = first.path.read_bytes()
    with pytest.raises(CoordinatorError) as caught:
        AuditWriter.open(journal_dir, "serve", clock=lambda: moment)
    assert caught.value.code == "coordinator.command.audit-unavailable"
    assert first.path.read_bytes() == before


def test_every_builder_produces_a_contract_shape(journal_dir: Path) -> None:
    correlation = new_correlation()
    step_ref = REFS.step("r", "s")
    entries = [
        api_request(
            correlation,
            "cancel",
            REFS.actor("o"),
            run_ref=REFS.run("r"),
            reason_ref=REFS.reason("why"),
        ),
        response(correlation, "cancel", "refused", code="coordinator.request.not-found"),
        event_request(correlation, REFS.source("casework"), REFS.event("ce-1")),
        response(correlation, "event-admit", "accepted", run_ref=REFS.run("r")),
        review_completion_request(correlation, REFS.connection("casework"), REFS.request("q")),
        response(correlation, "review-completion", "unknown"),
        migrate_request(correlation, 0, 1),
        ctl_applied(correlation),
        apply_request(correlation, "sha256:" + "a" * 64, reason_ref=REFS.reason("change-42")),
        ctl_applied(correlation, activation_id="3f9c2a10-0000-4000-8000-000000000001"),
        worker_record(
            worker_correlation(correlation, "dispatch", step_ref),
            "dispatch",
            REFS.run("r"),
            step_ref,
            2,
            3,
            "unknown",
        ),
        response(
            correlation,
            "cancel",
            "unknown",
            code="coordinator.command.store-unavailable",
            run_ref=REFS.run("r"),
        ),
        ctl_applied(correlation, activation_id=2**53 - 1),
        ctl_applied(correlation, activation_id=0),
        store_identity_record(correlation, "sha256:" + "b" * 64),
        torn_tail_record(correlation, "serve-20261206T223000Z-0a1b2c3d-2.jsonl", 0, 2**53 - 1),
    ]
    with AuditWriter.open(journal_dir, "serve") as writer:
        for entry in entries:
            writer.append(entry)
    assert verify_directory(journal_dir).entries == len(entries)
    assert dict(entries[0].record) == {
        "action": "cancel",
        "actorRef": REFS.actor("o"),
        "runRef": REFS.run("r"),
        "reasonRef": REFS.reason("why"),
    }
    assert dict(entries[8].record) == {
        "action": "activation.apply",
        "packageDigest": "sha256:" + "a" * 64,
        "reasonRef": REFS.reason("change-42"),
    }


@pytest.mark.parametrize(
    ("phase", "record"),
    [
        ("request", {"action": "delete-everything", "actorRef": REFS.actor("o")}),
        ("request", {"action": "status"}),  # actorRef missing
        (
            "request",
            {"action": "status", "actorRef": REFS.actor("o"), "stepRef": REFS.step("r", "s")},
        ),
        ("request", {"action": "store.migrate", "fromVersion": True, "toVersion": 1}),
        ("request", {"action": "store.migrate", "fromVersion": -1, "toVersion": 1}),
        ("request", {"action": "activation.apply", "packageDigest": "sha256:XYZ"}),
        ("response", {"action": "status", "outcome": "applied"}),
        ("response", {"action": "status", "outcome": "maybe"}),
        ("response", {"action": "status", "outcome": "refused", "code": "Not A Code"}),
        ("response", {"outcome": "applied", "activationId": "has space"}),
        ("response", {"outcome": "applied", "activationId": 2**53}),
        ("response", {"action": "status", "outcome": "accepted", "code": None}),
        ("record", {"action": "store.identity", "storeIdentity": "sha256:" + "b" * 63}),
        ("record", {"action": "store.identity"}),
        (
            "record",
            {"action": "store.identity", "storeIdentity": "sha256:" + "b" * 64, "line": 1},
        ),
        (
            "record",
            {"action": "journal.torn-tail", "journalFile": "notes.jsonl", "line": 1, "bytes": 1},
        ),
        (
            "record",
            {
                "action": "journal.torn-tail",
                "journalFile": "serve-20261206T223000Z-0a1b2c3d.jsonl",
                "line": -1,
                "bytes": 1,
            },
        ),
        (
            "record",
            {
                "action": "journal.torn-tail",
                "journalFile": "serve-20261206T223000Z-0a1b2c3d.jsonl",
                "line": 1,
                "bytes": 2**53,
            },
        ),
        (
            "record",
            {
                "action": "attempt",
                "runRef": REFS.run("r"),
                "stepRef": REFS.step("r", "s"),
                "generation": 1,
                "outcome": "intent",
            },
        ),
        (
            "record",
            {
                "action": "attempt",
                "runRef": REFS.run("r"),
                "stepRef": REFS.step("r", "s"),
                "generation": 1,
                "attempt": 1,
                "outcome": "done",
            },
        ),
        (
            "record",
            {
                "action": "status",
                "runRef": REFS.run("r"),
                "stepRef": REFS.step("r", "s"),
                "generation": 1,
                "attempt": 1,
                "outcome": "intent",
            },
        ),
    ],
)
def test_records_outside_the_contract_table_are_refused(
    phase: str, record: dict[str, object]
) -> None:
    correlation = new_correlation()
    if phase == "record" and not str(record["action"]).startswith(("store.", "journal.")):
        correlation = worker_correlation(correlation, "attempt", REFS.step("r", "s"))
    with pytest.raises(ValueError):
        AuditEntry(phase, correlation, record)  # type: ignore[arg-type]


def test_an_entry_journals_the_record_it_checked() -> None:
    """The writer does not check an entry again: the record it journals is the one checked when
    the entry was made, so neither the caller's dict nor the entry's view can change it."""
    record: dict[str, object] = {"action": "status", "actorRef": REFS.actor("o")}
    entry = AuditEntry("request", new_correlation(), record)
    record["actorRef"] = "a raw identifier"
    assert entry.record["actorRef"] == REFS.actor("o")
    with pytest.raises(TypeError):
        entry.record["actorRef"] = "a raw identifier"  # type: ignore[index]


def test_correlation_form_is_checked() -> None:
    step_ref = REFS.step("r", "s")
    record = {"action": "status", "actorRef": REFS.actor("o")}
    for correlation in (
        5,
        None,
        "",
        "not-a-uuid",
        new_correlation().upper(),
        worker_correlation(new_correlation(), "attempt", step_ref),
    ):
        with pytest.raises(ValueError):
            AuditEntry("request", correlation, record)
    with pytest.raises(ValueError):  # a worker entry needs <uuid>:<action>:<stepRef>
        worker_record(new_correlation(), "attempt", REFS.run("r"), step_ref, 1, 1, "intent")


# --- durability ------------------------------------------------------------------------------


def test_append_returns_only_after_the_line_is_written_and_fsynced(
    journal_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = AuditWriter.open(journal_dir, "serve")
    events: list[str] = []
    real_write, real_fsync = os.write, os.fsync

    def recording_write(fd: int, data: Any) -> int:
        events.append("write")
        return real_write(fd, data)

    def recording_fsync(fd: int) -> None:
        events.append("fsync")
        real_fsync(fd)

    monkeypatch.setattr(os, "write", recording_write)
    monkeypatch.setattr(os, "fsync", recording_fsync)
    for index, entry in enumerate(sample_entries(3), start=1):
        events.clear()
        writer.append(entry)
        assert events == ["write", "fsync"]
        assert len(lines_of(writer.path)) == index
        assert writer.sequence == index
    writer.close()


def test_write_failure_refuses_every_later_append(
    journal_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = AuditWriter.open(journal_dir, "serve")
    entries = sample_entries(3)
    writer.append(entries[0])
    head = writer.head

    def failing_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(CoordinatorError) as caught:
        writer.append(entries[1])
    assert caught.value.code == "coordinator.command.audit-unavailable"
    assert caught.value.diagnostic.exit_code == 3
    monkeypatch.undo()
    assert not writer.ready
    with pytest.raises(CoordinatorError) as again:
        writer.append(entries[2])
    assert again.value.code == "coordinator.command.audit-unavailable"
    assert writer.head == head and writer.sequence == 1
    writer.close()


def test_closed_writer_refuses_appends(journal_dir: Path) -> None:
    writer = write_journal(journal_dir, 1)
    assert not writer.ready
    with pytest.raises(CoordinatorError):
        writer.append(sample_entries(1)[0])


def test_concurrent_appends_keep_one_contiguous_chain(journal_dir: Path) -> None:
    writer = AuditWriter.open(journal_dir, "worker")
    entries = sample_entries(100)

    def append_all() -> None:
        for entry in entries:
            writer.append(entry)

    threads = [threading.Thread(target=append_all) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    writer.close()
    result = verify_directory(journal_dir)
    assert result.entries == 800 == writer.sequence
    assert result.groups[0].head == writer.head


def test_concurrent_appends_share_one_fsync(
    journal_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # RECOMMENDED group commit: lines queued while one fsync runs are covered by the next one.
    writer = AuditWriter.open(journal_dir, "serve")
    real_fsync = os.fsync
    calls: list[int] = []

    def slow_fsync(fd: int) -> None:
        calls.append(fd)
        time.sleep(0.005)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", slow_fsync)
    entries = sample_entries(10)

    def append_all() -> None:
        for entry in entries:
            writer.append(entry)

    threads = [threading.Thread(target=append_all) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    monkeypatch.undo()
    writer.close()
    assert writer.sequence == 80
    assert len(calls) < 80
    assert verify_directory(journal_dir).entries == 80


def test_rotation_continues_the_sequence_in_numbered_files(journal_dir: Path) -> None:
    writer = write_journal(journal_dir, 30, rotate_bytes=2_000)
    names = sorted(path.name for path in journal_dir.iterdir())
    assert len(names) >= 4
    assert writer.prefix + ".jsonl" in names and writer.prefix + "-2.jsonl" in names
    for path in journal_dir.iterdir():
        assert path.stat().st_size <= 2_000
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    result = verify_directory(journal_dir)
    assert result.files == len(names) and result.entries == 30
    assert result.groups == (GroupResult(writer.prefix, len(names), 30, writer.head),)
    third = json.loads(lines_of(journal_dir / f"{writer.prefix}-3.jsonl")[0])
    assert third["sequence"] == 1 + len(lines_of(journal_dir / f"{writer.prefix}.jsonl")) + len(
        lines_of(journal_dir / f"{writer.prefix}-2.jsonl")
    )


# --- verification -----------------------------------------------------------------------------


def test_chain_verifies_and_reports_the_group_head(journal_dir: Path) -> None:
    writer = write_journal(journal_dir, 10)
    result = verify_directory(journal_dir)
    assert result == VerifyResult(1, 10, (GroupResult(writer.prefix, 1, 10, writer.head),))
    assert result.to_json() == {
        "files": 1,
        "entries": 10,
        "groups": [{"prefix": writer.prefix, "files": 1, "entries": 10, "head": writer.head}],
        "tornTails": [],
    }


def test_empty_directory_and_empty_file_verify(journal_dir: Path) -> None:
    journal_dir.mkdir(mode=0o700)
    assert verify_directory(journal_dir) == VerifyResult(0, 0, ())
    writer = AuditWriter.open(journal_dir, "serve")
    writer.close()
    (journal_dir / "notes.txt").write_text("not a journal")
    assert verify_directory(journal_dir).groups == (GroupResult(writer.prefix, 1, 0, ZERO_HASH),)


def test_edited_line_is_detected_at_the_line_that_commits_to_it(journal_dir: Path) -> None:
    writer = write_journal(journal_dir, 6)
    lines = lines_of(writer.path)
    assert b'"outcome":"accepted"' in lines[1]
    lines[1] = lines[1].replace(b'"outcome":"accepted"', b'"outcome":"refused"')  # still canonical
    write_lines(writer.path, lines)
    error = broken(journal_dir)
    assert where(error) == ("coordinator.audit.chain-broken", writer.path.name, 3)
    assert error.diagnostic.path == "/previous"
    assert error.diagnostic.exit_code == 1


def test_non_canonical_edit_is_detected_at_its_own_line(journal_dir: Path) -> None:
    writer = write_journal(journal_dir, 6)
    lines = lines_of(writer.path)
    lines[3] = lines[3].replace(b'"phase":', b'"phase": ')
    write_lines(writer.path, lines)
    assert where(broken(journal_dir)) == ("coordinator.audit.chain-broken", writer.path.name, 4)


def _first_line_as(journal_dir: Path, edit: Callable[[dict[str, Any]], object]) -> Path:
    """A one-line journal whose line is the writer's own first entry after `edit` (which
    changes the entry in place, or returns the line's bytes to write instead), re-encoded as
    RFC 8785 text, so that only the rule under test breaks it."""
    writer = write_journal(journal_dir, 1)
    entry = json.loads(lines_of(writer.path)[0])
    line = edit(entry)
    write_lines(writer.path, [line if isinstance(line, bytes) else canonical_json(entry)])
    return writer.path


def _padded(entry: dict[str, Any], size: int) -> bytes:
    """The entry's canonical line grown to exactly `size` bytes through its correlation."""
    entry["correlation"] += "x" * (size - len(canonical_json(entry)))
    line = canonical_json(entry)
    assert len(line) == size
    return line


_NOT_A_UUID = "0b7d3c52-3f0e-4a57-9f55-8f1a1d2c3e4"


@pytest.mark.parametrize(
    ("edit", "path", "message"),
    [
        (lambda e: _padded(e, 1_048_577), "", "The line is longer than 1 MiB."),
        (lambda e: b'{"schema": 1}', "", "The line is not canonical JSON of one object."),
        (lambda e: b"[1]", "", "The line is not canonical JSON of one object."),
        (lambda e: e.pop("time"), "", "The entry does not have exactly the journal members."),
        (lambda e: e.update(extra=1), "", "The entry does not have exactly the journal members."),
        (
            lambda e: e.update(schema="x"),
            "/schema",
            "The entry's schema is not the journal schema.",
        ),
        (
            lambda e: e.update(sequence=2),
            "/sequence",
            "The sequence does not continue the file group.",
        ),
        (
            lambda e: e.update(sequence=True),
            "/sequence",
            "The sequence does not continue the file group.",
        ),
        (
            lambda e: e.update(previous="sha256:" + "1" * 64),
            "/previous",
            "The previous hash does not match the line before.",
        ),
        (lambda e: e.update(eventId=_NOT_A_UUID), "/eventId", "The event id is not a UUID."),
        (lambda e: e.update(eventId=7), "/eventId", "The event id is not a UUID."),
        (
            lambda e: e.update(time="2026-12-06T22:40:00Z"),
            "/time",
            "The time is not a UTC time with milliseconds.",
        ),
        (
            lambda e: e.update(time="2026-13-06T22:40:00.000Z"),
            "/time",
            "The time is not a UTC time with milliseconds.",
        ),
        (lambda e: e.update(time=1), "/time", "The time is not a UTC time with milliseconds."),
        (
            lambda e: e.update(phase="answer"),
            "/phase",
            "The phase is not request, response or record.",
        ),
        (lambda e: e.update(phase=1), "/phase", "The phase is not request, response or record."),
        (lambda e: e.update(correlation=""), "/correlation", "The correlation is not a string."),
        (lambda e: e.update(correlation=5), "/correlation", "The correlation is not a string."),
        (lambda e: e.update(record=[]), "/record", "The record is not an object."),
        (
            lambda e: e["record"].update(action="steal"),
            "/record",
            "The record is not one of the shapes of 07 §11.",
        ),
    ],
)
def test_a_broken_first_line_names_the_member_at_fault_and_why(
    journal_dir: Path, edit: Callable[[dict[str, Any]], object], path: str, message: str
) -> None:
    # What `audit verify` tells an operator of a broken line (09 §2): the member at fault and
    # a fixed sentence, besides the file and the line. Each edit breaks one rule only.
    file = _first_line_as(journal_dir, edit)
    error = broken(journal_dir)
    assert where(error) == ("coordinator.audit.chain-broken", file.name, 1)
    assert (error.diagnostic.path, error.diagnostic.message) == (path, message)


def test_a_line_of_exactly_one_mebibyte_is_not_refused_for_its_length(journal_dir: Path) -> None:
    # 07 §11: "An entry is at most 1 MiB". This one is refused for its oversized correlation,
    # one past the limit is refused for its length (above).
    _first_line_as(journal_dir, lambda e: _padded(e, 1_048_576))
    assert broken(journal_dir).diagnostic.message != "The line is longer than 1 MiB."


def test_edited_last_line_changes_the_head(journal_dir: Path) -> None:
    # A chain proves integrity only relative to a trusted head (07 §11).
    writer = write_journal(journal_dir, 3)
    lines = lines_of(writer.path)
    lines[2] = lines[2].replace(b'"outcome":"intent"', b'"outcome":"retry"')
    write_lines(writer.path, lines)
    assert verify_directory(journal_dir).groups[0].head != writer.head


@pytest.mark.parametrize("index", [0, 2, 4])
def test_deleted_line_is_detected(journal_dir: Path, index: int) -> None:
    writer = write_journal(journal_dir, 6)
    lines = lines_of(writer.path)
    del lines[index]
    write_lines(writer.path, lines)
    error = broken(journal_dir)
    assert where(error) == ("coordinator.audit.chain-broken", writer.path.name, index + 1)
    assert error.diagnostic.path == "/sequence"


def test_inserted_copy_is_detected(journal_dir: Path) -> None:
    writer = write_journal(journal_dir, 6)
    lines = lines_of(writer.path)
    lines.insert(2, lines[1])
    write_lines(writer.path, lines)
    assert where(broken(journal_dir)) == ("coordinator.audit.chain-broken", writer.path.name, 3)


def test_inserted_forged_line_with_a_correct_link_breaks_the_next_line(journal_dir: Path) -> None:
    writer = write_journal(journal_dir, 6)
    lines = lines_of(writer.path)
    forged = json.loads(lines[2])
    forged["previous"] = sha256_label(lines[2])
    forged["sequence"] = 4
    lines.insert(3, canonical_json(forged))
    write_lines(writer.path, lines)
    # the forged line 4 links correctly; the old line 4 (now 5) repeats sequence 4
    assert where(broken(journal_dir)) == ("coordinator.audit.chain-broken", writer.path.name, 5)


def test_reordered_lines_are_detected(journal_dir: Path) -> None:
    writer = write_journal(journal_dir, 6)
    lines = lines_of(writer.path)
    lines[2], lines[3] = lines[3], lines[2]
    write_lines(writer.path, lines)
    assert where(broken(journal_dir)) == ("coordinator.audit.chain-broken", writer.path.name, 3)


@pytest.mark.parametrize("cut", [1, 10, 100])
def test_a_torn_last_line_is_reported_as_a_torn_tail_not_as_tampering(
    journal_dir: Path, cut: int
) -> None:
    """07 §12.1 item 6: a write that failed (a full disk) leaves the last line without its line
    feed; `audit verify` reports it as a torn tail and verifies everything before it."""
    writer = write_journal(journal_dir, 4)
    start = sum(len(line) + 1 for line in lines_of(writer.path)[:3])
    data = writer.path.read_bytes()
    writer.path.write_bytes(data[:-cut])
    result = verify_directory(journal_dir)
    assert result.torn == (TornTail(writer.path.name, 4, start),)
    assert result.groups[0].entries == 3


def test_an_appended_line_that_is_not_json_is_a_torn_tail(journal_dir: Path) -> None:
    writer = write_journal(journal_dir, 2)
    with writer.path.open("ab") as handle:
        handle.write(b"\n")
    assert [(torn.file, torn.line) for torn in verify_directory(journal_dir).torn] == [
        (writer.path.name, 3)
    ]


def test_an_appended_json_line_that_does_not_chain_is_detected(journal_dir: Path) -> None:
    writer = write_journal(journal_dir, 2)
    with writer.path.open("ab") as handle:
        handle.write(b'{"sequence":3}\n')
    assert where(broken(journal_dir)) == ("coordinator.audit.chain-broken", writer.path.name, 3)


def test_a_line_that_is_not_json_before_the_last_is_detected(journal_dir: Path) -> None:
    writer = write_journal(journal_dir, 3)
    lines = lines_of(writer.path)
    lines[1] = b'{"torn'
    write_lines(writer.path, lines)
    assert where(broken(journal_dir)) == ("coordinator.audit.chain-broken", writer.path.name, 2)


def test_tampering_in_a_later_file_names_that_file(journal_dir: Path) -> None:
    writer = write_journal(journal_dir, 30, rotate_bytes=2_000)
    second = journal_dir / f"{writer.prefix}-2.jsonl"
    lines = lines_of(second)
    del lines[1]
    write_lines(second, lines)
    assert where(broken(journal_dir)) == ("coordinator.audit.chain-broken", second.name, 2)


def test_a_missing_file_of_a_group_is_detected(journal_dir: Path) -> None:
    writer = write_journal(journal_dir, 30, rotate_bytes=2_000)
    (journal_dir / f"{writer.prefix}-2.jsonl").unlink()
    error = broken(journal_dir)
    assert where(error) == ("coordinator.audit.chain-broken", f"{writer.prefix}-3.jsonl", 1)
    assert (error.diagnostic.path, error.diagnostic.message) == (
        "",
        "An earlier file of this journal is missing.",
    )
    (journal_dir / f"{writer.prefix}.jsonl").unlink()
    assert where(broken(journal_dir))[1] == f"{writer.prefix}-3.jsonl"


def test_a_journal_file_with_a_bad_name_is_detected(journal_dir: Path) -> None:
    writer = write_journal(journal_dir, 2)
    writer.path.rename(journal_dir / f"{writer.prefix}-1.jsonl")
    error = broken(journal_dir)
    assert where(error) == ("coordinator.audit.chain-broken", f"{writer.prefix}-1.jsonl", 1)
    assert (error.diagnostic.path, error.diagnostic.message) == (
        "",
        "The file name does not follow the journal naming rule.",
    )


def test_a_last_line_without_its_line_feed_in_an_earlier_file_is_broken(
    journal_dir: Path,
) -> None:
    # Only the group's last file may end torn (07 §12.1 item 6): a rotated file was complete.
    writer = write_journal(journal_dir, 30, rotate_bytes=2_000)
    first = journal_dir / f"{writer.prefix}.jsonl"
    count = len(lines_of(first))
    first.write_bytes(first.read_bytes()[:-1])
    error = broken(journal_dir)
    assert where(error) == ("coordinator.audit.chain-broken", first.name, count)
    assert (error.diagnostic.path, error.diagnostic.message) == (
        "",
        "The line is incomplete or longer than 1 MiB.",
    )


def test_a_fifo_named_as_a_journal_file_is_unreadable_and_never_opened(journal_dir: Path) -> None:
    writer = write_journal(journal_dir, 2)
    fifo = journal_dir / f"{writer.prefix}-2.jsonl"
    os.mkfifo(fifo)  # opened for reading without a writer, it would wait forever
    error = broken(journal_dir)
    assert (error.code, error.diagnostic.file) == ("coordinator.audit.unreadable", fifo.name)
    assert error.diagnostic.message == (
        "The journal file is not a regular file (a FIFO, socket, device or directory)."
    )
    assert error.diagnostic.hint and "Move what is not a journal file" in error.diagnostic.hint


def test_a_second_process_forms_its_own_group(journal_dir: Path) -> None:
    serve = AuditWriter.open(journal_dir, "serve")
    worker = AuditWriter.open(journal_dir, "worker")
    for entry in sample_entries(9):
        (worker if entry.phase == "record" else serve).append(entry)
    serve.close()
    worker.close()
    result = verify_directory(journal_dir)
    assert result.files == 2 and result.entries == 9
    assert [group.prefix for group in result.groups] == sorted([serve.prefix, worker.prefix])
    by_prefix = {group.prefix: group for group in result.groups}
    assert by_prefix[serve.prefix] == GroupResult(serve.prefix, 1, 6, serve.head)
    assert by_prefix[worker.prefix] == GroupResult(worker.prefix, 1, 3, worker.head)
    # each group's sequence starts at 1
    assert json.loads(lines_of(worker.path)[0])["sequence"] == 1
    lines = lines_of(worker.path)
    lines[0], lines[1] = lines[1], lines[0]
    write_lines(worker.path, lines)
    assert where(broken(journal_dir)) == ("coordinator.audit.chain-broken", worker.path.name, 1)


def test_missing_directory_is_unreadable_with_exit_3(tmp_path: Path) -> None:
    error = broken(tmp_path / "absent")
    assert error.code == "coordinator.audit.unreadable"
    assert error.diagnostic.exit_code == 3


def test_a_regular_file_as_directory_is_unreadable(tmp_path: Path) -> None:
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("x")
    assert broken(not_a_directory).code == "coordinator.audit.unreadable"


def test_an_unreadable_journal_file_is_unreadable_and_named(journal_dir: Path) -> None:
    writer = write_journal(journal_dir, 2)
    (journal_dir / "ctl-20260101T000000Z-0123abcd.jsonl").mkdir()
    assert where(broken(journal_dir)) == (
        "coordinator.audit.unreadable",
        "ctl-20260101T000000Z-0123abcd.jsonl",
        None,
    )
    assert writer.path.exists()


def test_unreadable_takes_precedence_over_a_broken_chain(
    journal_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = write_journal(journal_dir, 3, role="ctl")
    second = write_journal(journal_dir, 3, role="worker")
    write_lines(first.path, lines_of(first.path)[1:])
    real_open = os.open

    def deny(path: Any, *args: Any, **kwargs: Any) -> Any:
        if Path(path).name == second.path.name:
            raise PermissionError(13, "Permission denied")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", deny)  # tests run as root: a mode cannot deny the read
    assert where(broken(journal_dir)) == ("coordinator.audit.unreadable", second.path.name, None)


# --- canaries ---------------------------------------------------------------------------------


def test_no_raw_value_reaches_any_entry(journal_dir: Path) -> None:
    raw = {
        "run": f"run-{CANARY}",
        "step": f"step-{CANARY}",
        "reason": f"reason {CANARY} contact@example.org",
        "event": f"ce-{CANARY}",
        "source": f"source-{CANARY}",
        "request": f"request-{CANARY}",
        "connection": f"connection-{CANARY}",
        "owner": f"owner-{CANARY}",
    }
    correlation = new_correlation()
    step_ref = REFS.step(raw["run"], raw["step"])
    with AuditWriter.open(journal_dir, "serve") as writer:
        writer.append(
            api_request(
                correlation,
                "cancel",
                REFS.actor(raw["owner"]),
                run_ref=REFS.run(raw["run"]),
                reason_ref=REFS.reason(raw["reason"]),
            )
        )
        writer.append(
            event_request(correlation, REFS.source(raw["source"]), REFS.event(raw["event"]))
        )
        writer.append(
            review_completion_request(
                correlation, REFS.connection(raw["connection"]), REFS.request(raw["request"])
            )
        )
        writer.append(
            worker_record(
                worker_correlation(correlation, "transition", step_ref),
                "transition",
                REFS.run(raw["run"]),
                step_ref,
                1,
                1,
                "delivered",
            )
        )
    text = writer.path.read_text("utf-8")
    assert CANARY not in text
    assert "contact@example.org" not in text
    assert "hmac-sha256:" in text


def test_a_raw_value_in_any_member_is_refused_without_being_quoted(journal_dir: Path) -> None:
    writer = AuditWriter.open(journal_dir, "serve")
    correlation = new_correlation()
    attempts: list[Callable[[], object]] = [
        partial(api_request, correlation, "cancel", CANARY),
        partial(api_request, correlation, "cancel", REFS.actor("o"), reason_ref=CANARY),
        partial(response, correlation, "status", "refused", code=CANARY),
        partial(
            AuditEntry,
            "request",
            correlation,
            {"action": "status", "actorRef": REFS.actor("o"), CANARY: 1},
        ),
        partial(
            AuditEntry,
            "request",
            f"{correlation}:{CANARY}",
            {"action": "status", "actorRef": REFS.actor("o")},
        ),
        partial(ctl_applied, correlation, activation_id=f"id {CANARY}"),
    ]
    for attempt in attempts:
        with pytest.raises(ValueError) as caught:
            attempt()
        assert CANARY not in str(caught.value) and CANARY not in repr(caught.value)
    writer.close()
    assert writer.path.read_bytes() == b""


def test_verification_errors_never_quote_line_content(journal_dir: Path) -> None:
    writer = write_journal(journal_dir, 2)
    lines = lines_of(writer.path)
    lines[1] = lines[1].replace(b'"outcome":"accepted"', f'"outcome":"{CANARY}"'.encode())
    lines[1] = lines[1].replace(b'"phase":', b'"phase": ')
    write_lines(writer.path, lines)
    error = broken(journal_dir)
    assert CANARY not in json.dumps(error.diagnostic.to_json()) and CANARY not in str(error)


def test_public_surface_is_pinned() -> None:
    assert set(audit.__all__) == {
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
    }
    for name in audit.__all__:
        assert hasattr(audit, name)


# -- the fast line encoder ------------------------------------------------------------------

_NAMES = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=12)
_SCALARS = st.one_of(
    st.none(),
    st.integers(min_value=0, max_value=2**53 - 1),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=24),
)


@given(
    st.dictionaries(
        _NAMES, st.one_of(_SCALARS, st.dictionaries(_NAMES, _SCALARS, max_size=6)), max_size=10
    )
)
def test_entry_lines_are_the_canonical_form(line: dict[str, object]) -> None:
    """A journal line written by the fast encoder is byte for byte RFC 8785 (`audit verify`
    checks lines with `canonical_json`) for every kind of value a checked entry holds: ASCII
    names, strings (control characters, quotes, non-ASCII included), counters and null."""
    assert audit.writer._entry_line(line) == canonical_json(line)
