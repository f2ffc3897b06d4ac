"""The proof of commit (07 §12.1 item 1) is on stable storage before the product sees the
request it proves: while Messaging holds the notice's request (a `delay` fault), the journal
already holds the `dispatch`/`committed` entry of exactly that record's generation and attempt,
and the restore witness names its line. Without the append that `TickRun.adopt` makes after the
pre-send commit, a store restored to before that commit could not be told from a crash."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from integration_support import SUBMIT, Deployed, run_input

from coordinator_core.shell.audit.writer import JournalPosition
from coordinator_core.values import sha256_label


def _entries(directory: Path) -> list[tuple[Path, int, dict[str, Any]]]:
    found = []
    for path in sorted(directory.glob("*.jsonl")):
        offset = 0
        for raw in path.read_bytes().splitlines(keepends=True):
            if raw.endswith(b"\n"):
                found.append((path, offset, json.loads(raw)))
            offset += len(raw)
    return found


def test_the_proof_of_commit_is_durable_before_the_product_sees_the_request(
    deployed: Deployed,
) -> None:
    witness = deployed.witness
    assert witness is not None
    deployed.products.inject(
        "messaging", operation=SUBMIT, kind="delay", delaySeconds=1, commitAfterDelay=True
    )
    admitted = deployed.admit(run_input())
    run_id = admitted.run.run_id
    key = deployed.command_key(admitted)
    driver = threading.Thread(target=deployed.drive, args=(run_id,))
    driver.start()
    try:
        began = time.monotonic()
        while not deployed.products.submissions(key):
            assert time.monotonic() - began < 30, "the notice never reached Messaging"
            time.sleep(0.02)
        # The product holds the request now: its proof must already be on disk.
        references = deployed.secrets.audit_references
        snapshot = deployed.store.reads.get_run_snapshot(run_id)
        assert snapshot is not None
        notify = snapshot.step("notify")
        assert notify is not None and notify.record.dispatched
        proofs = [
            (path, offset, entry)
            for path, offset, entry in _entries(deployed.audit.directory)
            if entry["record"].get("action") == "dispatch"
            and entry["record"].get("outcome") == "committed"
        ]
        assert [
            (
                entry["record"]["runRef"],
                entry["record"]["stepRef"],
                entry["record"]["generation"],
                entry["record"]["attempt"],
            )
            for _, _, entry in proofs
        ] == [
            (
                references.run(str(run_id)),
                references.step(str(run_id), "notify"),
                notify.record.generation,
                notify.record.attempt,
            )
        ]
        path, offset, entry = proofs[0]
        line = path.read_bytes()[offset:].split(b"\n", 1)[0]
        assert witness.positions() == {
            path.name.removesuffix(".jsonl"): JournalPosition(
                path.name.removesuffix(".jsonl"), entry["sequence"], sha256_label(line), 1, offset
            )
        }
    finally:
        driver.join(60)
    status = deployed.status(run_id)
    assert status is not None and status.status == "finished", status
