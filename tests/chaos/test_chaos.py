"""The chaos suite (issue 11): one campaign on SQLite, one on a private PostgreSQL cluster; each
prints its table and fails on any run lost or stuck, effect duplicated or settled without a
receipt, false or missed restore detection, or traceback. `nox -s chaos` runs the bounded
profile (CI), `nox -s chaos -- --long` the long one."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from chaos_support import Campaign, PostgresBackend, Profile, SqliteBackend, printed, run_campaign
from e2e_support import Project
from support.private_postgres import PrivatePostgres

from coordinator_sandbox.testing import Processes

RUNTIME_ROLE = "coordinator_runtime"
DATABASE = "coordinator"


def _deploy(project: Project, reference: str) -> None:
    assert project.deploy_ctl("migrate")["status"] == "migrated"
    assert project.deploy_ctl("apply", "--reference", reference)["status"] == "applied"


@pytest.fixture
def cluster() -> Iterator[PrivatePostgres]:
    with PrivatePostgres.running_with(DATABASE, RUNTIME_ROLE) as running:
        yield running


def test_chaos_on_sqlite(tmp_path: Path, processes: Processes, profile: Profile) -> None:
    project = Project.create(tmp_path, processes)
    sandbox = project.start_sandbox()
    project.write_runtime(sandbox, concurrency=2)
    _deploy(project, "CHAOS-SQLITE")
    match = re.search(r"sqlite:\n\s+path: (\S+)", project.runtime.read_text())
    assert match is not None
    store = Path(match.group(1).strip("\"'"))
    campaign = Campaign(project, sandbox, SqliteBackend(project, store), profile)
    with printed(campaign.tally, f"sqlite ({profile.name} profile)"):
        tally = run_campaign(campaign)
    assert not tally.failures(), tally.table("sqlite")


def test_chaos_on_postgresql(
    tmp_path: Path, processes: Processes, profile: Profile, cluster: PrivatePostgres
) -> None:
    project = Project.create(tmp_path, processes)
    sandbox = project.start_sandbox()
    namespace = f"coordinator_chaos_{uuid.uuid4().hex[:8]}"
    project.write_postgres_runtime(
        sandbox,
        runtime_url=cluster.url(DATABASE, RUNTIME_ROLE),
        migration_url=cluster.url(DATABASE),
        namespace=namespace,
        runtime_role=RUNTIME_ROLE,
        concurrency=2,
    )
    _deploy(project, "CHAOS-POSTGRESQL")
    backend = PostgresBackend(project, cluster, DATABASE, namespace)
    campaign = Campaign(project, sandbox, backend, profile)
    with printed(campaign.tally, f"postgresql ({profile.name} profile)"):
        tally = run_campaign(campaign)
    assert not tally.failures(), tally.table("postgresql")
