"""The deployment check names what differs (07 §15; issue 11 item 5): the pinned and the active
package, the store's and the build's schema version or the migration whose checksum differs,
the runtime role's wrong property or grant, and the key version whose custody fails; with the
stable codes, and never a key, a custody marker or a URL."""

from __future__ import annotations

import io
import json
from dataclasses import replace

import psycopg
import pytest
from store_support import ACTIVATION, IDENTITY, Backend, with_user

from coordinator_core.errors import CoordinatorError
from coordinator_core.shell.runtime import process
from coordinator_core.shell.runtime.service_log import ServiceLog
from coordinator_core.shell.store import NAMESPACE_MARKER, supported_version

OTHER_PACKAGE = "sha256:" + "9abcdef0" * 8


def _refusal(backend: Backend, identity: object = IDENTITY) -> tuple[str, str]:
    with pytest.raises(CoordinatorError) as refused:
        backend.open(identity)  # type: ignore[arg-type]
    diagnostic = refused.value.diagnostic
    message = diagnostic.effective_message
    for secret in ("a" * 64, "b" * 64, "c" * 64, backend.url):
        assert secret not in message
    assert len(message) <= 200  # the service log keeps 200 characters of a message
    return diagnostic.code, message


def _ready(backend: Backend) -> Backend:
    backend.migrate()
    backend.apply()
    backend.open().close()
    return backend


def test_a_pin_that_differs_from_the_active_package_names_both_short_digests(
    backend: Backend,
) -> None:
    _ready(backend)
    code, message = _refusal(backend, replace(IDENTITY, package_digest=OTHER_PACKAGE))
    assert code == "coordinator.deployment.refused"
    assert "active package is sha256:111111111111;" in message
    assert "pins sha256:9abcdef09abc." in message


def test_a_store_without_an_active_package_says_so(backend: Backend) -> None:
    backend.migrate()
    code, message = _refusal(backend)
    assert code == "coordinator.deployment.refused"
    assert message == "The store has no active package; the runtime file pins sha256:111111111111."


@pytest.mark.parametrize(
    ("tamper", "expected"),
    [
        (
            "UPDATE migrations SET checksum = 'sha256:0123456789abcdef' WHERE version = 1",
            "The checksum of migration 1 in the store (sha256:0123456789ab) differs from this"
            " build's (sha256:",
        ),
        (
            "INSERT INTO migrations (version, applied_at, checksum)"
            f" SELECT {supported_version() + 1}, applied_at, checksum FROM migrations"
            " WHERE version = 1",
            f"The store holds schema version {supported_version() + 1}; this build supports"
            f" {supported_version()}.",
        ),
        (
            f"DELETE FROM migrations WHERE version = {supported_version()}",
            f"The store is at schema version {supported_version() - 1}; this build supports"
            f" {supported_version()}.",
        ),
        (
            "DELETE FROM migrations WHERE version = 1",
            "The store's migration ledger lacks version 1 but holds version 2.",
        ),
        (
            f"UPDATE control SET schema_version = {supported_version() + 1}",
            f"The store's control row records schema version {supported_version() + 1}; this"
            f" build supports {supported_version()}.",
        ),
    ],
    ids=["checksum", "newer", "older", "gap", "control-version"],
)
def test_a_schema_refusal_names_the_versions_or_the_migration_that_differs(
    backend: Backend, tamper: str, expected: str
) -> None:
    _ready(backend)
    backend.execute(tamper)
    code, message = _refusal(backend)
    assert code == "coordinator.deployment.schema-mismatch"
    assert message.startswith(expected), message


def test_an_unmigrated_store_names_the_supported_version(backend: Backend) -> None:
    code, message = _refusal(backend)
    assert code == "coordinator.deployment.schema-mismatch"
    absent = "store file" if backend.kind == "sqlite" else f"namespace {backend.namespace}"
    assert message == f"The {absent} does not exist."
    if backend.kind == "sqlite":
        backend.execute("CREATE TABLE unrelated (id INTEGER)")  # the file exists, empty store
    else:
        backend.execute(f'CREATE SCHEMA "{backend.namespace}"')
        backend.execute(f"COMMENT ON SCHEMA \"{backend.namespace}\" IS '{NAMESPACE_MARKER}'")
    code, message = _refusal(backend)
    assert code == "coordinator.deployment.schema-mismatch"
    assert message == (
        "The store has no migrations applied; this build supports schema version"
        f" {supported_version()}."
    )


def test_custody_refusals_name_the_admission_key_or_the_state_key_version(
    backend: Backend,
) -> None:
    _ready(backend)
    code, message = _refusal(backend, replace(IDENTITY, admission_key_commitment="c" * 64))
    assert code == "coordinator.command.admission-key-custody"
    assert "admission key (`deployment.admissionKeyRef`)" in message

    code, message = _refusal(backend, replace(IDENTITY, state_key_commitments={1: "c" * 64}))
    assert (code, message) == (
        "coordinator.command.state-key-custody",
        "The configured state key of version 1 differs from the key the store registered for it.",
    )

    code, message = _refusal(backend, replace(IDENTITY, active_state_key=2))
    assert (code, message) == (
        "coordinator.command.state-key-custody",
        "The active state-key version 2 is not registered in the store.",
    )

    backend.migrate(replace(IDENTITY, state_key_commitments={1: "b" * 64, 3: "d" * 64}))
    code, message = _refusal(backend)
    assert (code, message) == (
        "coordinator.command.state-key-custody",
        "State-key version 3 is registered in the store but not configured in"
        " `deployment.stateKeys`.",
    )


def test_a_runtime_role_refusal_names_the_role_and_the_wrong_grant(
    postgresql_backend: Backend, request: pytest.FixtureRequest
) -> None:
    role = request.getfixturevalue("postgres_role")()
    identity = replace(IDENTITY, runtime_role=role)
    postgresql_backend.migrate(identity)
    postgresql_backend.apply(ACTIVATION, identity)
    runtime = replace(postgresql_backend, url=with_user(postgresql_backend.url, role))
    runtime.open(identity).close()

    code, message = _refusal(postgresql_backend, identity)  # connected as the migration role
    assert code == "coordinator.deployment.refused"
    assert message.startswith("The connection runs as role ")
    assert message.endswith(f", not as the runtime role {role}.")

    namespace = postgresql_backend.namespace
    with psycopg.connect(postgresql_backend.url, autocommit=True) as admin:
        admin.execute(f'REVOKE DELETE ON "{namespace}".steps FROM "{role}"'.encode())
    assert _refusal(runtime, identity) == (
        "coordinator.deployment.refused",
        f"The runtime role {role} lacks DELETE on steps.",
    )
    with psycopg.connect(postgresql_backend.url, autocommit=True) as admin:
        admin.execute(f'GRANT DELETE ON "{namespace}".steps TO "{role}"'.encode())
        admin.execute(f'GRANT TRIGGER ON "{namespace}".activations TO "{role}"'.encode())
    assert _refusal(runtime, identity) == (
        "coordinator.deployment.refused",
        f"The runtime role {role} holds TRIGGER on activations.",
    )
    with psycopg.connect(postgresql_backend.url, autocommit=True) as admin:
        admin.execute(f'REVOKE TRIGGER ON "{namespace}".activations FROM "{role}"'.encode())
        admin.execute(f'GRANT CREATE ON SCHEMA "{namespace}" TO "{role}"'.encode())
    assert _refusal(runtime, identity) == (
        "coordinator.deployment.refused",
        f"The runtime role {role} may create objects in the namespace {namespace}.",
    )


def test_the_periodic_check_logs_the_cause_it_stops_for(
    sqlite_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    _ready(sqlite_backend)
    monkeypatch.setattr(process, "RECHECK_SECONDS", 0.01)
    stream = io.StringIO()
    shutdown = process.Shutdown(ServiceLog(stream))
    with sqlite_backend.open() as store:
        sqlite_backend.execute("UPDATE control SET active_package_digest = %s", OTHER_PACKAGE)
        process.recheck_loop(store, shutdown, shutdown.log)
    assert shutdown.exit_code == 1
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    refused = [line for line in lines if line["code"] == "coordinator.deployment.refused"]
    assert [line["message"] for line in refused] == [
        "The store's active package is sha256:9abcdef09abc; the runtime file pins"
        " sha256:111111111111."
    ]
