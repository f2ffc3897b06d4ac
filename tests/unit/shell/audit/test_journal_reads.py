"""The API's journal: a read action is answered without waiting for its fsync, every other
action waits (07 §7.7 item 5), and the read's lines still become durable in sequence order."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from uuid import uuid4

import pytest

from coordinator_core.shell.audit import (
    AuditEntry,
    AuditReferences,
    AuditWriter,
    api_request,
    new_correlation,
    writer,
)
from coordinator_core.shell.sealing import AdmissionKey
from coordinator_core.shell.service.journal import AuditRequest, AuditResponse, WriterJournal
from coordinator_core.shell.service.model import Caller

CALLER = Caller(
    issuer="https://issuer.example",
    subject="clerk",
    client_id="desk",
    operator=False,
    workflows=frozenset({"w"}),
    actions=frozenset({"status", "cancel"}),
)


class HeldFsync:
    """`os.fsync` for the journal's file that blocks until released (the directory's fsync
    at creation is let through)."""

    def __init__(self, real: object) -> None:
        self._real = real
        self.release = threading.Event()
        self.entered = threading.Event()

    def __call__(self, fd: int) -> None:
        self.entered.set()
        assert self.release.wait(10), "the test never released the fsync"
        self._real(fd)  # type: ignore[operator]


@pytest.fixture
def journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[WriterJournal, HeldFsync]:
    audit = AuditWriter.open(tmp_path / "audit", "serve")
    held = HeldFsync(writer.os.fsync)
    monkeypatch.setattr(writer.os, "fsync", held)
    references = AuditReferences(b"\x07" * 32, "db")
    return WriterJournal(audit, references, AdmissionKey(b"\x09" * 32), "db"), held


def _lines(directory: Path) -> list[dict[str, object]]:
    (path,) = directory.glob("*.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_read_is_answered_while_its_fsync_is_held(
    journal: tuple[WriterJournal, HeldFsync], tmp_path: Path
) -> None:
    try:
        asyncio.run(_read_then_command(*journal))
    finally:
        journal[1].release.set()
    lines = _lines(tmp_path / "audit")
    assert [(line["sequence"], line["record"]["action"]) for line in lines] == [  # type: ignore[index]
        (1, "status"),
        (2, "status"),
        (3, "cancel"),
    ]


async def _read_then_command(service_journal: WriterJournal, held: HeldFsync) -> None:
    run = uuid4()
    # A read's appends return at once, on the event loop, while the fsync is held.
    correlation = service_journal.request(AuditRequest(action="status", caller=CALLER, run_id=run))
    service_journal.response(correlation, AuditResponse(action="status", outcome="accepted"))
    assert held.entered.wait(5), "the queued read lines are flushed in the background"

    # A command waits for stable storage: it is not answered while the fsync is held.
    command = asyncio.ensure_future(
        asyncio.to_thread(
            service_journal.request, AuditRequest(action="cancel", caller=CALLER, run_id=run)
        )
    )
    done, _ = await asyncio.wait({command}, timeout=0.3)
    assert not done
    held.release.set()
    await asyncio.wait_for(command, 10)


def test_a_command_s_request_entry_is_queued_and_its_barrier_makes_it_durable(
    journal: tuple[WriterJournal, HeldFsync], tmp_path: Path
) -> None:
    """`request_until_commit` returns without an fsync: the entry waits in the queue until its
    barrier (the command's first commit) or the response entry makes it durable, in order."""
    service_journal, held = journal
    run = uuid4()
    correlation, barrier = service_journal.request_until_commit(
        AuditRequest(action="cancel", caller=CALLER, run_id=run)
    )
    assert not held.entered.is_set(), "the request entry is not flushed on its own"
    (path,) = (tmp_path / "audit").glob("*.jsonl")
    assert not path.read_text()
    waiting = threading.Thread(target=barrier)
    waiting.start()
    assert held.entered.wait(5), "the barrier flushes it"
    waiting.join(0.3)
    assert waiting.is_alive(), "the barrier returns only once the fsync has"
    held.release.set()
    waiting.join(10)
    service_journal.response(correlation, AuditResponse(action="cancel", outcome="accepted"))
    lines = _lines(tmp_path / "audit")
    assert [(line["phase"], line["correlation"]) for line in lines] == [
        ("request", correlation),
        ("response", correlation),
    ]


class CountedFsync:
    """`os.fsync` for the journal's file, counted."""

    def __init__(self, real: object) -> None:
        self._real = real
        self.calls = 0

    def __call__(self, fd: int) -> None:
        self.calls += 1
        self._real(fd)  # type: ignore[operator]


def _status(action: str = "status") -> AuditEntry:
    return api_request(new_correlation(), action, AuditReferences(b"\x07" * 32, "db").actor("o"))


def test_reads_answered_together_share_one_fsync_and_a_command_takes_them_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The background flusher lets the lines no one waits for gather for
    `BACKGROUND_LINGER_SECONDS`: the reads of that moment cost one write and one fsync. A
    command's durable append meanwhile does not wait for the linger: its fsync covers them."""
    monkeypatch.setattr(writer, "BACKGROUND_LINGER_SECONDS", 3.0)
    audit = AuditWriter.open(tmp_path / "audit", "serve")
    counted = CountedFsync(writer.os.fsync)
    monkeypatch.setattr(writer.os, "fsync", counted)
    try:
        for _ in range(5):
            audit.append(_status(), wait=False)
        assert audit.sequence == 0 and counted.calls == 0, "the reads' lines linger together"
        deadline = time.monotonic() + 15
        while audit.sequence < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (audit.sequence, counted.calls) == (5, 1)

        for _ in range(3):
            audit.append(_status(), wait=False)
        began = time.monotonic()
        audit.append(_status("cancel"))
        assert time.monotonic() - began < 2.0, "a durable append never waits for the linger"
        assert (audit.sequence, counted.calls) == (9, 2)

        audit.append(_status(), wait=False)
    finally:
        audit.close()  # makes what lingers durable at once
    assert counted.calls == 3
    assert [line["sequence"] for line in _lines(tmp_path / "audit")] == list(range(1, 11))
