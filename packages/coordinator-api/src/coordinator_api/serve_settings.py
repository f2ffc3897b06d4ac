"""What `coordinator serve`/`worker` derive from the runtime file, its secrets and the package.

* `identity(...)`: the `DeploymentIdentity` the store checks in every verifying transaction.
* `store_url(...)`: the store's URL (SQLite file, or the resolved runtime-role PostgreSQL URL
  with `trustedRootCertificateRef` handed to the driver as an owner-only `sslrootcert` file).
* `check_package_bindings(...)`: the workflow's bindings against the runtime file (02 §5.8).
* `live_bindings_ok(...)`: the live-binding check of 05 §10 over the unsettled runs.
* `api_settings(...)`: the `ApiSettings` of `create_app` (06).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from coordinator_api import settings as api
from coordinator_core.definition.package import LoadedPackage
from coordinator_core.deployment import (
    Deployment,
    DeploymentRefused,
    DeploymentSettings,
    JwksStatic,
    JwksUri,
    PostgresqlDatabase,
    Secrets,
    package_binding_problems,
)
from coordinator_core.store import DeploymentIdentity, Store

__all__ = [
    "api_settings",
    "authentication_settings",
    "check_package_bindings",
    "identity",
    "live_bindings_ok",
    "namespace_of",
    "store_url",
]


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


def check_package_bindings(
    deployment: Deployment, package: LoadedPackage, environment: Mapping[str, str]
) -> None:
    """02 §5.8 and the served operations against the runtime file as the service reads it;
    raises `DeploymentRefused`."""
    problems = package_binding_problems(deployment, package.snapshot.workflow, environment)
    if problems:
        raise DeploymentRefused(problems)


def live_bindings_ok(
    deployment: Deployment,
    secrets: Secrets,
    store: Store,
    package: LoadedPackage,
    now: datetime | None = None,
) -> bool:
    """05 §10: every unsettled run's recorded binding digest equals the one its workflow gets
    under the current runtime file. A definition the service does not serve is restored from
    a run's sealed snapshot; one that cannot be restored counts as a conflict."""
    from coordinator_core.deployment import live_bindings_ok as bindings_match
    from coordinator_core.deployment import sealed_snapshot_workflow
    from coordinator_core.sealing import Sealer

    settings = deployment.deployment
    assert settings is not None
    sealer = Sealer(secrets.state_keys, settings.database_id)
    served = package.snapshot

    def workflow_of(definition: str) -> Mapping[str, Any] | None:
        if definition == served.definition_digest:
            return served.workflow
        found = store.definition_snapshot(definition)
        return None if found is None else sealed_snapshot_workflow(sealer, *found)

    return bindings_match(
        deployment, store.unsettled_bindings(now or datetime.now(UTC)), workflow_of
    )


def authentication_settings(deployment: Deployment, secrets: Secrets) -> api.AuthenticationSettings:
    """`deployment.authentication` as the API's `AuthenticationSettings`."""
    settings = deployment.deployment
    assert settings is not None
    written = settings.authentication
    source: api.JwksSource
    if isinstance(written.jwks_source, JwksStatic):
        assert secrets.caller_jwks is not None
        source = api.StaticJwks(secrets.caller_jwks)
    elif isinstance(written.jwks_source, JwksUri):
        source = api.JwksUri(written.jwks_source.uri)
    else:
        source = api.OidcDiscovery()
    return api.AuthenticationSettings(
        issuer=written.issuer,
        audience=written.audience,
        jwks_source=source,
        allowed_clients=frozenset(written.allowed_clients),
        policies=tuple(
            api.Policy(
                client_id=policy.client_id,
                required_scopes=frozenset(policy.required_scopes),
                workflows=frozenset(policy.workflows),
                actions=frozenset(policy.actions),
                operator=policy.operator,
            )
            for policy in written.policies
        ),
        assertion_issuers=frozenset(written.assertion_issuers),
        scope_claim=written.scope_claim,
        client_id_claim=written.client_id_claim,
    )


def api_settings(
    deployment: Deployment,
    secrets: Secrets,
    package: LoadedPackage,
    *,
    recovery_only: bool,
) -> api.ApiSettings:
    snapshot = package.snapshot
    workflow = snapshot.workflow
    project: Mapping[str, Any] = workflow.get("project") or {}
    triggers: Mapping[str, Any] = workflow.get("triggers") or {}
    outcomes: Mapping[str, Any] = workflow.get("outcomes") or {}
    event_triggers: dict[str, api.EventTrigger] = {}
    for trigger_id, trigger in triggers.items():
        source_name = str(trigger["source"])
        source = deployment.event_sources[source_name]
        event_triggers[trigger_id] = api.EventTrigger(
            event=str(trigger["event"]),
            source_name=source_name,
            source=source.source,
            signing_key=secrets.event_signing_keys[source_name],
            maximum_clock_skew_seconds=source.maximum_clock_skew_seconds,
        )
    title = project.get("title")
    return api.ApiSettings(
        authentication=authentication_settings(deployment, secrets),
        workflow=api.WorkflowSummary(
            workflow_id=str(project.get("id")),
            title=str(title) if title is not None else None,
            version=str(project.get("version")),
            revision=snapshot.revision,
            definition_digest=snapshot.definition_digest,
            package_digest=package.package_digest,
            input_schema=workflow.get("input"),
            triggers=tuple(triggers),
            outcomes=tuple(outcomes),
        ),
        event_triggers=event_triggers,
        completion_tokens=dict(secrets.review_completion_tokens),
        recovery_only=recovery_only,
    )
