"""A full disk under the audit journal (07 §11, §12.1 item 6), with a real `coordinator serve`.

The service runs with a file-size limit (`RLIMIT_FSIZE`; Python ignores `SIGXFSZ`, so a write
past the limit writes what fits and the next one fails with `EFBIG`, as a full disk does with
`ENOSPC`). Runs are admitted until a journal write fails: the journal stops (no send without its
proof), the service answers `503 coordinator.command.audit-unavailable`, and the failed write
left a torn last line. `audit verify` reports it as `torn-tail`, never as a broken chain; a
plain restart, the limit gone, sets it aside to `<file>.torn` with a `journal.torn-tail` entry
and starts; `audit verify` then reports the tail as set aside. The store is PostgreSQL, so the
limit bounds only the files the service writes itself (the journal and its log).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
from e2e_support import Project

LIMIT_BYTES = 24_137  # not a multiple of anything the journal writes
LIMITED = (
    "import resource, runpy, sys;"
    f" resource.setrlimit(resource.RLIMIT_FSIZE, ({LIMIT_BYTES}, {LIMIT_BYTES}));"
    " sys.argv = ['coordinator'] + sys.argv[1:];"
    " runpy.run_module('coordinator_api.serve', run_name='__main__')"
)


def _verify(project: Project, audit: Path) -> dict[str, object]:
    return project.ctl("audit", "verify", "--directory", str(audit), check=False)


def test_a_write_that_fails_on_a_full_disk_leaves_a_torn_tail_not_a_broken_chain(
    project: Project, postgres_url: str, postgres_role: Callable[[], str]
) -> None:
    sandbox = project.start_sandbox()
    role = postgres_role()
    parts = urlsplit(postgres_url)
    project.write_postgres_runtime(
        sandbox,
        runtime_url=urlunsplit(parts._replace(netloc=role + "@" + parts.netloc.rpartition("@")[2])),
        migration_url=postgres_url,
        namespace=f"coordinator_full_{uuid.uuid4().hex[:8]}",
        runtime_role=role,
    )
    assert project.deploy_ctl("migrate")["status"] == "migrated"
    assert project.deploy_ctl("apply", "--reference", "FULL-DISK")["status"] == "applied"
    audit = project.root / ".coordinator" / "audit"
    limited = project.processes.start(
        "serve-limited",
        ["-c", LIMITED, "serve", "--runtime-config", str(project.runtime)],
        env=project.env,
    )
    project.wait_healthy(limited, "serve-limited")
    token = project.token_file()

    def admit_until_refused() -> int:
        for index in range(200):
            application = str(uuid.uuid4())
            sandbox.seed_application(application)
            status, body = project.api_start(
                token, application, uuid.uuid4().hex, datetime.now(UTC) + timedelta(hours=1)
            )
            if status != 201:
                assert (status, body["code"]) == (503, "coordinator.command.audit-unavailable")
                return index
        raise AssertionError("the journal never filled")

    admitted = admit_until_refused()
    assert httpx.get(project.origin + "/ready", timeout=5).status_code == 503
    journal = next(audit.glob("serve-*.jsonl"))
    assert not journal.read_bytes().endswith(b"\n")  # the failed write left a torn line
    report = _verify(project, audit)
    assert report["exitCode"] == 0, report
    torn = [d for d in report["diagnostics"] if d["code"] == "coordinator.audit.torn-tail"]  # type: ignore[union-attr,index]
    assert [d["source"]["file"] for d in torn] == [journal.name]  # type: ignore[index]
    assert project.processes.stop(limited) in (0, 3)

    service = project.start_service()  # the disk has room again
    project.wait_healthy(service)
    # The refused admission changed nothing: its request entry was to be made durable by its
    # transaction's barrier, which failed, so the transaction rolled back.
    listed = httpx.get(
        project.origin + "/v1/runs?limit=100",
        headers={"Authorization": "Bearer " + token.read_text().strip()},
        timeout=30,
    )
    assert len(listed.raise_for_status().json()["runs"]) == admitted
    aside = audit / (journal.name + ".torn")
    assert aside.exists() and journal.read_bytes().endswith(b"\n")
    entries = [
        json.loads(line)
        for path in sorted(audit.glob("serve-*.jsonl"))
        if path != journal
        for line in path.read_text().splitlines()
    ]
    assert [
        e["record"]["journalFile"]
        for e in entries
        if e["record"].get("action") == "journal.torn-tail"
    ] == [journal.name]
    assert project.processes.stop(service) == 0
    report = _verify(project, audit)
    assert report["exitCode"] == 0, report
    assert report["tornTails"] == [  # type: ignore[comparison-overlap]
        {
            "file": journal.name,
            "line": len(journal.read_bytes().splitlines()) + 1,
            "movedAside": True,
        }
    ]
    print(f"\nfull disk: {admitted} runs admitted before the journal stopped; torn tail set aside")
