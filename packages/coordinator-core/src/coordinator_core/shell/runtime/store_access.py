"""How a service process (`coordinator serve` / `worker`) reaches its store from the runtime
file and its secrets.

* `identity(...)`: the `DeploymentIdentity` the store checks in every verifying transaction.
* `store_url(...)`: the store's URL (SQLite file, or the resolved runtime-role PostgreSQL URL
  with `trustedRootCertificateRef` handed to the driver as an owner-only `sslrootcert` file).
* `namespace_of(...)`: the PostgreSQL schema namespace, if any.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from coordinator_core.config.model import Deployment, DeploymentSettings, PostgresqlDatabase
from coordinator_core.shell.secrets import Secrets
from coordinator_core.shell.store import DeploymentIdentity

__all__ = ["identity", "namespace_of", "store_url"]


def namespace_of(deployment: Deployment) -> str | None:
    database = deployment.database
    return database.namespace if isinstance(database, PostgresqlDatabase) else None


def identity(settings: DeploymentSettings, secrets: Secrets) -> DeploymentIdentity:
    database_id = settings.database_id
    return DeploymentIdentity(
        database_id=database_id,
        admission_key_commitment=secrets.admission_key.custody_marker(database_id),
        state_key_commitments=secrets.state_keys.custody_markers(database_id),
        active_state_key=settings.active_state_key,
        package_digest=settings.package.expected_digest,
        runtime_role=settings.runtime_role,
    )


@contextlib.contextmanager
def store_url(deployment: Deployment, secrets: Secrets) -> Iterator[str]:
    database = deployment.database
    if not isinstance(database, PostgresqlDatabase):
        yield "sqlite:///" + database.path
        return
    resolved = secrets.database_url
    assert resolved is not None
    if secrets.trusted_root_certificates is None:
        yield resolved.url
        return
    with tempfile.TemporaryDirectory(prefix="coordinator-roots-") as scratch:
        path = Path(scratch) / "roots.pem"
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as stream:
            stream.write(secrets.trusted_root_certificates)
        parts = urlsplit(resolved.url)
        query = [(k, v) for k, v in parse_qsl(parts.query) if k != "sslrootcert"]
        query.append(("sslrootcert", str(path)))
        yield urlunsplit(parts._replace(query=urlencode(query)))
