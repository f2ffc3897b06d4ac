"""What every request of one app needs, built once by `create_app` and read by the edge and the
handlers through the request context (its own module, so that the edge does not import the app
that builds it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from coordinator_api.access import AccessVerifier
from coordinator_api.settings import ApiSettings
from coordinator_api.spec import OperationInfo, RouteTable
from coordinator_api.waits import StatusWaits
from coordinator_core.shell.service import AuditJournal, RunService

__all__ = ["AppState"]


@dataclass(frozen=True, slots=True)
class AppState:
    """Everything a request needs, built once per app."""

    settings: ApiSettings
    service: RunService
    journal: AuditJournal
    access: AccessVerifier
    operations: Mapping[str, OperationInfo]
    routes: RouteTable
    waits: StatusWaits
