"""End to end: a real `coordinator worker` process on PostgreSQL is SIGKILLed at a fused
transaction boundary (07 §7.7, issue 9), and a restarted worker finishes the run.

The boundary is the read's finish transaction, which carries the run through the choice to the
lease of the notice, the freeze of its request and its `dispatched` mark (07 §7.7 item 7): the
notice's credential is obtained before that transaction begins. The kill comes while the worker
waits for that credential, which the sandbox's identity provider holds back (a `delay` fault on
its second token request; the first, the read's credential, goes through): the read was made
but its finish never committed, and nothing of the notice exists in the store. When the read's
lease lapses the restarted worker retries the read (T29: a read has no effect to guard) and
carries the run on to send the notice once; the run finishes with exactly one message.

The second test kills the worker at the failpoint right after a finish that also claimed the
next run's first record (07 §7.7 item 8, `after-finish-claim`).
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
from e2e_support import Project

from coordinator_core.shell.audit import verify_directory
from coordinator_sandbox.testing import Sandbox, wait_for

READ = "breg.read-record/v1"
TOKEN = "identity.token"
MESSAGING = "messaging.submit-message/v1"
TIMEOUT = 45.0  # the lease (15 s) must lapse before the restarted worker takes over


def _as_user(url: str, user: str) -> str:
    """`url` connecting as `user` (trust authentication in the test cluster)."""
    parts = urlsplit(url)
    netloc = user + "@" + parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _postgres_runtime(
    project: Project, sandbox: Sandbox, postgres_url: str, postgres_role: Callable[[], str]
) -> str:
    """The runtime file on a fresh PostgreSQL namespace, one worker loop; the namespace."""
    role = postgres_role()
    namespace = f"coordinator_e2e_{uuid.uuid4().hex[:8]}"
    project.write_postgres_runtime(
        sandbox,
        runtime_url=_as_user(postgres_url, role),
        migration_url=postgres_url,
        namespace=namespace,
        runtime_role=role,
        concurrency=1,
    )
    return namespace


def _records(postgres_url: str, namespace: str, run_id: str) -> dict[str, dict[str, Any]]:
    """The run's step records as stored, read directly (the store is the evidence)."""
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        cursor = connection.execute(
            f"SELECT step, state, generation, attempt, command_prepared, dispatched, sent, "
            f'uncertain FROM "{namespace}".steps WHERE run_id = %s',
            (uuid.UUID(run_id),),
        )
        names = [column.name for column in cursor.description or ()]
        return {row[0]: dict(zip(names, row, strict=True)) for row in cursor.fetchall()}


def _run_status(postgres_url: str, namespace: str, run_id: str) -> str:
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        row = connection.execute(
            f'SELECT status FROM "{namespace}".runs WHERE run_id = %s', (uuid.UUID(run_id),)
        ).fetchone()
    assert row is not None
    return str(row[0])


def _finished_by_a_restarted_worker(
    project: Project, postgres_url: str, namespace: str, run_id: str
) -> dict[str, dict[str, Any]]:
    """Start a worker, wait until the run is no longer running, stop the worker cleanly;
    the run must have finished, and its lapsed read was retried (T29): its records."""
    restarted = project.start_worker("worker-restarted")
    wait_for(
        lambda: _run_status(postgres_url, namespace, run_id) != "running",
        TIMEOUT,
        "the restarted worker to finish the run",
        0.25,
    )
    assert project.processes.stop(restarted) == 0, project.processes.log("worker-restarted")
    assert _run_status(postgres_url, namespace, run_id) == "finished"
    records = _records(postgres_url, namespace, run_id)
    read = records["read-application"]
    assert (read["state"], read["attempt"]) == ("delivered", 2)
    return records


def test_a_worker_killed_before_the_read_finish_commit_is_taken_over_and_sends_the_notice_once(
    project: Project, postgres_url: str, postgres_role: Callable[[], str]
) -> None:
    sandbox = project.start_sandbox()
    namespace = _postgres_runtime(project, sandbox, postgres_url, postgres_role)
    assert project.deploy_ctl("migrate")["status"] == "migrated"
    assert project.deploy_ctl("apply", "--reference", "E2E-KILL")["status"] == "applied"

    # Admit through `coordinator serve`, due in a few seconds, then stop it: only the
    # `coordinator worker` processes below work the run.
    service = project.start_service()
    project.wait_healthy(service)
    token = project.token_file()
    application = str(uuid.uuid4())
    sandbox.seed_application(application)
    created, body = project.api_start(
        token, application, uuid.uuid4().hex, datetime.now(UTC) + timedelta(seconds=2)
    )
    assert created == 201, body
    run_id = body["runId"]
    assert project.processes.stop(service) == 0

    # The worker asks for two credentials: the read's, then (before the read's finish, which
    # will mark the notice dispatched) the notice's. The first goes through, the second is
    # held back.
    assert sandbox.received(TOKEN) == []
    sandbox.fault(TOKEN, kind="delay", delaySeconds=0)
    sandbox.fault(TOKEN, kind="delay", delaySeconds=30)
    worker = project.start_worker("worker")
    wait_for(
        lambda: len(sandbox.received(TOKEN)) >= 2 or worker.poll() is not None,
        TIMEOUT,
        "the notice's credential to be asked for",
        0.02,
    )
    assert worker.poll() is None, project.processes.log("worker")
    worker.send_signal(signal.SIGKILL)
    worker.wait(10)

    # Killed before the fused commit: the read was made, its record is still leased, and the
    # notice was neither frozen nor marked nor sent.
    records = _records(postgres_url, namespace, run_id)
    read = records["read-application"]
    assert (read["state"], read["attempt"]) == ("leased", 1)
    notify = records.get("notify")
    assert notify is None or (notify["command_prepared"], notify["dispatched"]) == (False, False)
    assert len(sandbox.received(READ)) == 1
    assert sandbox.received(MESSAGING) == []

    httpx.delete(sandbox.url("identity") + "/sandbox/faults", timeout=5).raise_for_status()
    # The lapsed read was retried (T29); the notice was sent once, by its first attempt.
    records = _finished_by_a_restarted_worker(project, postgres_url, namespace, run_id)
    notify = records["notify"]
    assert (notify["state"], notify["attempt"], notify["uncertain"]) == ("delivered", 1, False)
    assert len(sandbox.received(READ)) == 2
    assert len(sandbox.received(MESSAGING)) == 1
    assert len(sandbox.messages()) == 1
    # Both workers' journals verify; the killed one never journaled a dispatch: the restarted
    # one journaled its intent and, once the fused fence committed, its proof (07 §12.1).
    audit = project.root / ".coordinator" / "audit"
    verified = verify_directory(audit)
    assert verified.files >= 2
    lines = [
        line
        for path in sorted(audit.glob("worker-*.jsonl"))
        for line in path.read_text().splitlines()
        if '"action":"dispatch"' in line
    ]
    assert ['"outcome":"intent"' in line for line in lines] == [True, False]
    assert '"outcome":"committed"' in lines[1]


def test_a_worker_killed_after_a_finish_that_claimed_the_next_run_sends_each_notice_once(
    project: Project, postgres_url: str, postgres_role: Callable[[], str]
) -> None:
    """07 §7.7 item 8: the finish of one run's notice also claims the next run's first
    record (its read leased, its request frozen) in the same commit. `coordinator worker`
    with `COORDINATOR_FAILPOINTS=after-finish-claim=1` SIGKILLs itself right after that
    commit: the first run is finished with its one message, the second run's read is leased
    to the dead worker and nothing of it was sent. A restarted worker takes the read over
    once its lease lapsed (T29) and finishes the second run with its one message."""
    sandbox = project.start_sandbox()
    namespace = _postgres_runtime(project, sandbox, postgres_url, postgres_role)
    assert project.deploy_ctl("migrate")["status"] == "migrated"
    assert project.deploy_ctl("apply", "--reference", "E2E-FOLD")["status"] == "applied"
    service = project.start_service()
    project.wait_healthy(service)
    token = project.token_file()
    due = datetime.now(UTC) + timedelta(seconds=2)
    run_ids = []
    for _ in range(2):
        application = str(uuid.uuid4())
        sandbox.seed_application(application)
        created, body = project.api_start(token, application, uuid.uuid4().hex, due)
        assert created == 201, body
        run_ids.append(body["runId"])
    assert project.processes.stop(service) == 0  # only the worker below works the runs

    project.env["COORDINATOR_FAILPOINTS"] = "after-finish-claim=1"
    worker = project.start_worker("worker-armed")
    del project.env["COORDINATOR_FAILPOINTS"]
    assert worker.wait(TIMEOUT) == -signal.SIGKILL, project.processes.log("worker-armed")

    statuses = {run: _run_status(postgres_url, namespace, run) for run in run_ids}
    assert sorted(statuses.values()) == ["finished", "running"], statuses
    second = next(run for run, status in statuses.items() if status == "running")
    read = _records(postgres_url, namespace, second)["read-application"]
    assert (read["state"], read["attempt"], read["command_prepared"]) == ("leased", 1, True)
    assert "notify" not in _records(postgres_url, namespace, second)
    assert len(sandbox.received(READ)) == 1  # the first run's read only
    assert len(sandbox.received(MESSAGING)) == 1

    records = _finished_by_a_restarted_worker(project, postgres_url, namespace, second)
    assert (records["notify"]["state"], records["notify"]["attempt"]) == ("delivered", 1)
    assert len(sandbox.received(READ)) == 2
    assert len(sandbox.received(MESSAGING)) == 2
    assert len(sandbox.messages()) == 2
    assert verify_directory(project.root / ".coordinator" / "audit").files >= 2
    log = project.processes.log("worker-armed") + project.processes.log("worker-restarted")
    assert "Traceback" not in log
