"""What `coordinator serve` derives for the HTTP app from the runtime file, its secrets and
the package: the `AuthenticationSettings` of the caller key set and the `ApiSettings` of
`create_app` (06). The runtime file is not read here: it was read and checked once, by the
process start (`coordinator_core.shell.runtime.process`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coordinator_api import settings as api
from coordinator_core.shell.deployment import Deployment, JwksStatic, JwksUri, Secrets
from coordinator_core.shell.package_files import LoadedPackage

__all__ = ["api_settings", "authentication_settings"]


def authentication_settings(deployment: Deployment, secrets: Secrets) -> api.AuthenticationSettings:
    """`deployment.authentication` as the API's `AuthenticationSettings`."""
    settings = deployment.deployment
    assert settings is not None
    written = settings.authentication
    source: api.KeySetSource
    if isinstance(written.jwks_source, JwksStatic):
        assert secrets.caller_jwks is not None
        source = api.StaticJwks(secrets.caller_jwks)
    elif isinstance(written.jwks_source, JwksUri):
        source = written.jwks_source
    else:
        source = api.OidcDiscovery()
    return api.AuthenticationSettings(
        issuer=written.issuer,
        audience=written.audience,
        jwks_source=source,
        allowed_clients=frozenset(written.allowed_clients),
        policies=tuple(
            api.CallerPolicy(
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
