"""What the API needs to know about its deployment, already resolved by the caller.

The service start-up reads `runtime.yaml` (05) and the active package, resolves the secrets and
passes the result in as `ApiSettings`; this package never parses configuration files or secret
references itself. The caller authentication is the deployment's own
`coordinator_core.config.model.Authentication` with the resolved `Secrets.caller_jwks`; the
field comments name the runtime-config member each other value comes from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from coordinator_api.limits import STATUS_WAITERS_MAX
from coordinator_core.config.model import Authentication

if TYPE_CHECKING:
    import httpx

__all__ = [
    "ApiSettings",
    "EventTrigger",
    "WorkflowSummary",
    "utc_now",
]


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class WorkflowSummary:
    """The active package's workflow, as `GET /v1/workflow` shows it (06 §6)."""

    workflow_id: str
    title: str | None
    version: str
    revision: str
    definition_digest: str
    package_digest: str
    input_schema: object
    triggers: tuple[str, ...]
    outcomes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class EventTrigger:
    """One trigger of the active workflow joined with its event source (01 §11, 05 §6)."""

    event: str  # the trigger's `event`: the required `ce-type`
    source_name: str  # the `eventSources` key
    source: str  # `eventSources.<name>.source`: the required `ce-source`
    signing_key: bytes  # the resolved `signingKeyRef`
    maximum_clock_skew_seconds: int = 300


@dataclass(frozen=True, slots=True)
class ApiSettings:
    """Everything `create_app` needs besides the service and the audit journal.

    `authentication` is `deployment.authentication` (05 §8.1) and `caller_jwks` the document of
    its static key set (`Secrets.caller_jwks`; None unless `jwksSource` is `static`).
    `event_triggers` must name exactly the workflow's triggers. `completion_tokens` maps each
    `casework` connection with `reviewCompletions` to its resolved token. `openapi_dir` is the
    directory holding `openapi.bundled.yaml` and `openapi.connexion.yaml` (default: see
    `coordinator_api.spec.locate_openapi`). `clock` is the wall clock (tests pass a fixed one);
    `jwks_transport` is the httpx transport used to fetch key sets (tests pass a mock).
    `validate_responses` has Connexion check every response body against the 3.0.3 rendering
    (Draft 4: weaker than the contract's schemas, and a tenth of the serve process's CPU per
    admission): off in the service, on in the API tests, whose responses are also checked
    against the 3.1 document with openapi-core, as the contract fuzzing checks the live
    service's.
    """

    authentication: Authentication
    workflow: WorkflowSummary
    caller_jwks: bytes | None = None
    event_triggers: Mapping[str, EventTrigger] = field(default_factory=dict)
    completion_tokens: Mapping[str, bytes] = field(default_factory=dict)
    recovery_only: bool = False
    validate_responses: bool = False
    openapi_dir: Path | None = None
    clock: Callable[[], datetime] = utc_now
    jwks_transport: httpx.AsyncBaseTransport | None = None
    status_waiters: int = STATUS_WAITERS_MAX
    """How many status reads may wait at once (06 §5.3 `wait`; `limits.STATUS_WAITERS_MAX`)."""
