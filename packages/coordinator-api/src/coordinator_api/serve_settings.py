"""What `coordinator serve` derives for the HTTP app from the runtime file, its secrets and
the package: the `ApiSettings` of `create_app` (06), whose caller authentication is the
deployment's own block and secret. The runtime file is not read here: it was read and checked
once, by the process start (`coordinator_core.shell.runtime.process`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coordinator_api import settings as api
from coordinator_core.config.model import Deployment
from coordinator_core.shell.package_files import LoadedPackage
from coordinator_core.shell.secrets import Secrets

__all__ = ["api_settings"]


def api_settings(
    deployment: Deployment,
    secrets: Secrets,
    package: LoadedPackage,
    *,
    recovery_only: bool,
) -> api.ApiSettings:
    settings = deployment.deployment
    if settings is None:
        raise ValueError("The service is served from a runtime file with a deployment block.")
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
        authentication=settings.authentication,
        caller_jwks=secrets.caller_jwks,
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
