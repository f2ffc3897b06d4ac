"""`nox -s contract`: schemathesis against the live `coordinator serve` on PostgreSQL.

Sets up the service exactly as the end-to-end suite does (tests/e2e/e2e_support.py): a fresh
PostgreSQL database and a login role for `runtimeRole`, a `delayed-follow-up` project made by
`coordinatorctl init`, the sandbox products on ephemeral loopback ports, `package`, `migrate`
and `apply`, then `coordinator serve` on a free loopback port and an operator caller token whose
policy allows every action. It then runs

    schemathesis --config-file ci/schemathesis.toml run generated/openapi.bundled.yaml

(fixed seed, bounded examples and time, every check, the stateful phase, warnings fail) with
the hooks of ci/contract_hooks.py (half of the generated admissions are made admissible, so the
stateful phase follows the links admission → status → inspection → cancel on live runs), and
finally stops every process and drops the database and the role. The exit code is
schemathesis's (or 1 if the set-up fails); extra arguments are passed to `schemathesis run`.

The server URL comes from `COORDINATOR_TEST_POSTGRES_URL` (default
`postgresql://root@127.0.0.1:5432/root`), as for the test suites.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import psycopg

from coordinator_sandbox.testing import Processes, ScratchPostgres, database_url

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from e2e_support import Project  # noqa: E402

ADMIN_URL = os.environ.get("COORDINATOR_TEST_POSTGRES_URL", "postgresql://root@127.0.0.1:5432/root")
CONFIG = ROOT / "ci" / "schemathesis.toml"
SCHEMA = ROOT / "generated" / "openapi.bundled.yaml"


def run_contract(directory: Path, processes: Processes, postgres: ScratchPostgres) -> int:
    project = Project.create(directory, processes)
    sandbox = project.start_sandbox()
    url = postgres.database()
    role = postgres.role()
    project.write_postgres_runtime(
        sandbox,
        runtime_url=database_url(url, url.rpartition("/")[2], user=role),
        migration_url=url,
        namespace=f"coordinator_contract_{uuid.uuid4().hex[:8]}",
        runtime_role=role,
        concurrency=2,
    )
    project.deploy_ctl("migrate")
    project.deploy_ctl("apply", "--reference", "CONTRACT")
    service = project.start_service()
    project.wait_healthy(service)
    token = project.token_file().read_text().strip()
    # The warning that would catch a refused token is not fatal in ci/schemathesis.toml: check it.
    probe = httpx.get(
        project.origin + "/v1/runs", headers={"Authorization": "Bearer " + token}, timeout=10
    )
    if probe.status_code != 200:
        print(f"the operator token is refused: {probe.status_code} {probe.text}", file=sys.stderr)
        return 1

    application = str(uuid.uuid4())
    sandbox.seed_application(application)
    env = dict(
        os.environ,
        COORD_URL=project.origin,
        COORD_TOKEN=token,
        # ci/contract_hooks.py: what an admissible admission names (the stateful phase follows
        # the links of the runs it admits).
        COORD_WORKFLOW=project.workflow,
        COORD_REVISION=project.revision,
        COORD_APPLICATION=application,
        SCHEMATHESIS_HOOKS="contract_hooks",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "ci"), os.environ.get("PYTHONPATH")])),
    )
    command = [
        str(Path(sys.executable).with_name("schemathesis")),
        "--config-file", str(CONFIG),
        "run", str(SCHEMA),
        "--url", project.origin,
        "--report", "junit",
        "--report-dir", str(ROOT / "out" / "contract"),
        *sys.argv[1:],
    ]  # fmt: skip
    print("+", " ".join(command[:6]), "...", flush=True)
    started = time.monotonic()
    code = subprocess.run(command, env=env, cwd=directory, check=False).returncode
    print(f"schemathesis exited {code} after {time.monotonic() - started:.1f} s", flush=True)
    if service.poll() is not None:
        print("coordinator serve exited during the run:\n" + processes.log("serve"))
        return code or 1
    if "Traceback" in processes.log("serve"):
        print("coordinator serve logged a traceback:\n" + processes.log("serve"))
        return code or 1
    return code


def main() -> int:
    with (
        ScratchPostgres(ADMIN_URL, "coordinator_contract") as postgres,
        tempfile.TemporaryDirectory(prefix="coordinator-contract-") as temporary,
    ):
        processes = Processes(Path(temporary))
        try:
            return run_contract(Path(temporary), processes, postgres)
        except (AssertionError, psycopg.Error) as error:
            print(f"contract set-up failed: {error}", file=sys.stderr)
            for log in sorted(Path(temporary).glob("*.log")):
                print(f"--- {log.name}\n{log.read_text(errors='replace')}", file=sys.stderr)
            return 1
        finally:
            processes.stop_all()


if __name__ == "__main__":
    sys.exit(main())
