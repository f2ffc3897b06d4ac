"""Support for the integration suite: the sandbox products as a subprocess, the packaged
`examples/delayed-follow-up`, a deployment (runtime file + generated secrets) over a migrated
store (SQLite file or PostgreSQL namespace), and the service with its workers.

Everything is built the way the service builds it: `load_deployment` + `resolve_secrets` read a
real runtime file, `migrate` + `apply_activation` prepare the store, `Store.open` checks it, and
`Runtime.build` wires the run service and the workers over one runtime.
"""

from __future__ import annotations

import os
import secrets
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from coordinator_core.checking.checker import check_project
from coordinator_core.config.model import Deployment
from coordinator_core.shell.audit import AuditWriter
from coordinator_core.shell.audit.witness import RestoreWitness
from coordinator_core.shell.deployment import load_deployment
from coordinator_core.shell.execution.worker import Worker
from coordinator_core.shell.package_files import LoadedPackage, load_package, write_package
from coordinator_core.shell.secrets import Secrets, resolve_secrets
from coordinator_core.shell.service import (
    AdmissionRequest,
    AfterAnswer,
    Caller,
    RunAdmitted,
    RunInspection,
    RunStatus,
    Runtime,
    StoreRunService,
)
from coordinator_core.shell.store import (
    ActivationRequest,
    DeploymentIdentity,
    Store,
    apply_activation,
    migrate,
)
from coordinator_sandbox.testing import (
    Policy,
    Processes,
    Sandbox,
    database_url,
    deployment_block,
    point_at_sandbox,
    write_keys,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "delayed-follow-up"
DATABASE_ID = "delayed-follow-up-it"
ISSUER = "http://127.0.0.1:8100"
WORKFLOW = "delayed-follow-up"
APPLICATION_ID = "a8d12546-b2ca-46ac-b12b-06c199041bb2"
SKIPPED_APPLICATION_ID = "0b7d3c52-3f0e-4a57-9f55-8f1a1d2c3e4f"
SUBMIT = "messaging.submit-message/v1"
HOLIDAY_WORKFLOW = "holiday-routing"
EXTERNAL_GET = "external-http.get/v1"
EVALUATE = "evaluation.evaluate/v1"

SEED: dict[str, Any] = {
    "delivery": {"initialSeconds": 0.05, "maximumSeconds": 0.2, "maximumAttempts": 20},
    "breg": {
        "records": [
            {
                "collection": "applications",
                "recordId": APPLICATION_ID,
                "entityTypeIdentifier": "application",
                "domainData": {
                    "followUpAllowed": True,
                    "contactEmail": "ada@example.test",
                    "applicantName": "Ada",
                },
            },
            {
                "collection": "applications",
                "recordId": SKIPPED_APPLICATION_ID,
                "entityTypeIdentifier": "application",
                "domainData": {"contactEmail": "bob@example.test", "applicantName": "Bob"},
            },
        ],
        "actions": {
            "record-review-decision": {
                "kind": "immediate",
                "registryRevision": "2026.1",
                "inputSchema": {
                    "type": "object",
                    "required": ["applicationId", "decision", "reviewResultId", "decidedAt"],
                    "properties": {
                        "applicationId": {"type": "string"},
                        "decision": {"enum": ["approved", "rejected"]},
                        "reviewResultId": {"type": "string"},
                        "decidedAt": {"type": "string"},
                    },
                    "additionalProperties": False,
                },
                "conditionInputs": ["applicationId"],
                "targets": {
                    "decision": {
                        "collection": "applications",
                        "recordIdMember": "applicationId",
                        "entity": "application",
                    }
                },
            }
        },
    },
}


# -- the sandbox products -------------------------------------------------------------------


class Products(Sandbox):
    """The running sandbox, beside the secrets directory `keys` wrote."""

    @property
    def secrets_dir(self) -> Path:
        return self.state_dir.parent / "secrets"

    def submissions(self, key: str) -> list[dict[str, Any]]:
        """Every message submission the sandbox received under the command key `key`."""
        return self.received(SUBMIT, idempotencyKey=key)


@pytest.fixture(scope="session")
def products(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Products]:
    root = tmp_path_factory.mktemp("products")
    processes = Processes(root)
    try:
        write_keys(root / "secrets", root / "sandbox")
        sandbox = Products.start(processes, root / "sandbox", seed=SEED)
        yield sandbox
        sandbox.close()
    finally:
        processes.stop_all()


# -- the package ----------------------------------------------------------------------------


def build_package(project: Path, output: Path) -> LoadedPackage:
    """Check and package a project as `coordinatorctl package` does, then load it."""
    checked = check_project(project, definition_only=True)
    assert not checked.has_errors, [d.code for d in checked.diagnostics]
    assert checked.definition is not None and checked.definition.snapshot is not None
    digest = write_package(checked.definition.snapshot, output)
    return load_package(output, digest)


@pytest.fixture(scope="session")
def package(tmp_path_factory: pytest.TempPathFactory) -> LoadedPackage:
    """`examples/delayed-follow-up`, packaged."""
    return build_package(EXAMPLE, tmp_path_factory.mktemp("package") / "package")


@pytest.fixture(scope="session")
def recorded_package(tmp_path_factory: pytest.TempPathFactory) -> LoadedPackage:
    """`examples/recorded-decision` (a prepared BReg action and a Casework wait), packaged."""
    return build_package(
        ROOT / "examples" / "recorded-decision", tmp_path_factory.mktemp("recorded") / "package"
    )


@pytest.fixture(scope="session")
def holiday_package(tmp_path_factory: pytest.TempPathFactory) -> LoadedPackage:
    """`examples/holiday-routing` (an external GET and an evaluation), packaged."""
    return build_package(
        ROOT / "examples" / "holiday-routing", tmp_path_factory.mktemp("holidays") / "package"
    )


# -- the deployment -------------------------------------------------------------------------


def _write_secret(path: Path, data: bytes) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as stream:
        stream.write(data)


def _holiday_connections(products: Products) -> str:
    """`examples/holiday-routing`'s external and evaluation connections, at the sandbox."""
    runtime = (ROOT / "examples" / "holiday-routing" / "runtime.yaml").read_text()
    return point_at_sandbox(
        runtime[runtime.index("externalHttpConnections:") :], products.endpoints
    )


def _connections(products: Products, workflow: str) -> str:
    if workflow == HOLIDAY_WORKFLOW:
        return _holiday_connections(products)
    token = products.endpoints["tokenEndpoint"]
    if workflow == WORKFLOW:
        profile, scopes = "coordinator-reader", "[breg:records:read]"
    else:
        profile, scopes = "coordinator-decisions", "[breg:records:read, breg:actions:invoke]"
    reviews = f"""\
  reviews:
    product: casework
    baseUrl: {products.endpoints["casework"]}
    authorization:
      tokenEndpoint: {token}
      clientId: coordinator-reviews
      signingKeyRef: secret:file/reviews-client.jwk
      resource: urn:registrystack:casework
      scopes: [casework:reviews:request]
    reviewCompletions:
      tokenRef: secret:file/casework-completions-token
"""
    return f"""\
connections:
  applications:
    product: breg
    baseUrl: {products.endpoints["breg"]}
    profile: {profile}
    authorization:
      tokenEndpoint: {token}
      clientId: coordinator-applications
      signingKeyRef: secret:file/applications-client.jwk
      resource: urn:registrystack:breg:applications
      scopes: {scopes}
{"" if workflow == WORKFLOW else reviews}\
  notices:
    product: messaging
    baseUrl: {products.endpoints["messaging"]}
    authorization:
      tokenEndpoint: {token}
      clientId: coordinator-notices
      signingKeyRef: secret:file/notices-client.jwk
      resource: urn:registrystack:messaging
      scopes: [messaging:messages:submit]
"""


def _runtime_yaml(
    products: Products, package: LoadedPackage, root: Path, database: str, role: str | None
) -> str:
    workflow = str(package.snapshot.workflow["project"]["id"])
    deployment = deployment_block(
        database_id=DATABASE_ID,
        package=package.root,
        digest=package.package_digest,
        port=8108,
        issuer=ISSUER,
        policies=[Policy([workflow])],
        audit_directory=root / "audit",
        runtime_role=role,
    )
    return f"""\
apiVersion: id.registrystack.org/formats/coordinator/runtime/v1alpha1
kind: CoordinatorRuntimeConfig
secretProviders:
  file:
    root: {root / "secrets"}
  environment: {{}}
database:
{database}
observation:
  minimumIntervalSeconds: 30
{_connections(products, workflow)}\
{deployment}"""


@dataclass
class Deployed:
    """A deployment over a migrated, activated store, with its service and worker factory."""

    deployment: Deployment
    secrets: Secrets
    store: Store
    package: LoadedPackage
    runtime: Runtime
    service: StoreRunService
    audit: AuditWriter
    products: Products
    url: str
    runtime_url: str
    namespace: str | None
    identity: DeploymentIdentity
    witness: RestoreWitness | None = None
    _workers: dict[str, Worker] = field(default_factory=dict)

    @property
    def workflow(self) -> str:
        return str(self.package.snapshot.workflow["project"]["id"])

    def worker(self, name: str = "worker-1") -> Worker:
        if name not in self._workers:
            self._workers[name] = self.runtime.worker(name)
        return self._workers[name]

    def admit(
        self,
        run_input: dict[str, Any],
        key: str | None = None,
        caller: Caller | None = None,
        revision: str | None = None,
        after_answer: AfterAnswer | None = None,
    ) -> RunAdmitted:
        admission = AdmissionRequest(
            caller=caller or _caller_for(self.workflow),
            workflow=self.workflow,
            revision=revision or self.package.snapshot.revision,
            input=run_input,
            idempotency_key=key or f"key-{uuid.uuid4()}",
        )
        return self.service.admit(admission, after_answer=after_answer)

    def status(self, run_id: uuid.UUID, caller: Caller | None = None) -> RunStatus | None:
        return self.service.get_run(caller or _caller_for(self.workflow), run_id)

    def inspect(self, run_id: uuid.UUID, caller: Caller | None = None) -> RunInspection | None:
        return self.service.inspect_run(caller or _caller_for(self.workflow), run_id)

    def drive(
        self, run_id: uuid.UUID, *, worker: str = "worker-1", limit: int = 60, timeout: float = 60
    ) -> tuple[RunStatus, int]:
        """Tick until the run leaves `running` (or the limit); answers its status and the
        number of ticks that found work. Retries are due 100/500 ms later: idle ticks wait."""
        ticks = 0
        deadline = time.monotonic() + timeout
        status = self.status(run_id)
        while status is not None and status.status == "running":
            if ticks >= limit or time.monotonic() > deadline:
                break
            if self.worker(worker).tick():
                ticks += 1
            else:
                time.sleep(0.05)
            status = self.status(run_id)
        assert status is not None
        return status, ticks

    def tick_until_step(self, run_id: uuid.UUID, step: str, *, limit: int = 30) -> int:
        """Tick until the run's current record is `step` and pending; answers the ticks."""
        ticks = 0
        while True:
            snapshot = self.store.reads.get_run_snapshot(run_id)
            assert snapshot is not None
            current = snapshot.run.state.current_step
            if current == step and snapshot.current.record.state == "pending":
                return ticks
            assert ticks < limit, current
            if self.worker().tick():
                ticks += 1
            else:
                time.sleep(0.05)

    def command_key(self, admitted: RunAdmitted, step: str = "notify") -> str:
        snapshot = self.store.reads.get_run_snapshot(admitted.run.run_id)
        assert snapshot is not None
        return self.secrets.admission_key.command_key(
            DATABASE_ID, snapshot.run.start_identity, step
        )


CALLER = Caller(
    issuer=ISSUER,
    subject="operator-1",
    client_id="ops-console",
    operator=False,
    workflows=frozenset({WORKFLOW}),
    actions=frozenset({"start", "status", "inspect", "cancel", "retry-same", "reconcile"}),
)
OTHER_CALLER = Caller(
    issuer=ISSUER,
    subject="someone-else",
    client_id="ops-console",
    operator=False,
    workflows=frozenset({WORKFLOW}),
    actions=CALLER.actions,
)


def _caller_for(workflow: str) -> Caller:
    return CALLER if workflow == WORKFLOW else replace(CALLER, workflows=frozenset({workflow}))


def deploy(
    products: Products,
    package: LoadedPackage,
    root: Path,
    *,
    postgres_url: str | None = None,
    runtime_role: str | None = None,
    pool_size: int = 10,
) -> Deployed:
    """Write a runtime file and secrets under `root`, migrate and activate the store, open it
    and build the service, exactly as `coordinator serve` does."""
    secrets_dir = root / "secrets"
    secrets_dir.mkdir(mode=0o700, parents=True)
    for source in products.secrets_dir.iterdir():
        if source.is_file():
            _write_secret(secrets_dir / source.name, source.read_bytes())
    _write_secret(secrets_dir / "state-1.key", secrets.token_bytes(32))
    _write_secret(secrets_dir / "admission.key", secrets.token_bytes(32))
    _write_secret(secrets_dir / "audit.key", secrets.token_bytes(32))
    environment: dict[str, str] = {}
    namespace: str | None = None
    if postgres_url is None:
        database = f"  sqlite:\n    path: {root / 'coordinator.db'}\n"
    else:
        namespace = f"coordinator_it{secrets.token_hex(5)}"
        assert runtime_role is not None
        environment["COORDINATOR_IT_MIGRATION_URL"] = postgres_url
        environment["COORDINATOR_IT_RUNTIME_URL"] = database_url(
            postgres_url, postgres_url.rpartition("/")[2], user=runtime_role
        )
        database = (
            "  postgresql:\n"
            "    runtimeUrlRef: secret:env/COORDINATOR_IT_RUNTIME_URL\n"
            "    migrationUrlRef: secret:env/COORDINATOR_IT_MIGRATION_URL\n"
            f"    namespace: {namespace}\n"
        )
    runtime = root / "runtime.yaml"
    runtime.write_text(_runtime_yaml(products, package, root, database, runtime_role))
    runtime.chmod(0o600)
    deployment = load_deployment(runtime, environment=environment)
    resolved = resolve_secrets(deployment, environment=environment)
    settings = deployment.deployment
    assert settings is not None
    identity = DeploymentIdentity(
        database_id=DATABASE_ID,
        admission_key_commitment=resolved.admission_key.custody_marker(DATABASE_ID),
        state_key_commitments=resolved.state_keys.custody_markers(DATABASE_ID),
        active_state_key=settings.active_state_key,
        package_digest=package.package_digest,
        runtime_role=runtime_role,
    )
    url = postgres_url or f"sqlite:///{root / 'coordinator.db'}"
    migrate(url, identity, namespace=namespace)
    snapshot = package.snapshot
    apply_activation(
        url,
        identity,
        ActivationRequest(
            package.package_digest,
            str(snapshot.workflow["project"]["id"]),
            snapshot.revision,
            snapshot.definition_digest,
        ),
        bindings_ok=lambda _pairs: True,
        namespace=namespace,
    )
    runtime_url = (
        url
        if postgres_url is None
        else database_url(postgres_url, postgres_url.rpartition("/")[2], user=runtime_role or "")
    )
    store = Store.open(runtime_url, identity, namespace=namespace, pool_size=pool_size)
    witness = RestoreWitness(root / "restore-witness")  # as `store.restoreWitness` names it
    audit = AuditWriter.open(root / "audit", "worker", proofs=witness.append)
    runtime = Runtime.build(deployment, resolved, store, package, audit=audit)
    return Deployed(
        deployment, resolved, store, package, runtime, StoreRunService(runtime), audit, products,
        url, runtime_url, namespace, identity, witness=witness,
    )  # fmt: skip


def run_input(
    application_id: str = APPLICATION_ID, send_after: str = "2020-01-01T00:00:00Z"
) -> dict[str, Any]:
    return {"applicationId": application_id, "sendAfter": send_after}
