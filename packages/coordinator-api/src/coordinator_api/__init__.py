"""Registry Coordinator service HTTP API (contract 06): a Connexion app over a `RunService`.

HTTP only: the run service, its values and the audit journal are
`coordinator_core.shell.service`; handlers parse, call it and render. The app is imported on
first use of `create_app`/`AppState`, so `coordinator worker` (coordinator_api.serve) imports
this package where Connexion is not installed.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

# Connexion imports starlette.testclient at module level, and starlette 1.x warns about httpx on
# every such import. The warning says nothing about this service and would be the one non-JSON
# line on `coordinator`'s stderr (09 §5: log lines carry a code and a fixed message only).
warnings.filterwarnings("ignore", message=r"Using `httpx` with `starlette\.testclient`")

from coordinator_api.settings import ApiSettings, EventTrigger, WorkflowSummary

if TYPE_CHECKING:
    from coordinator_api.app import AppState, create_app

__all__ = [
    "ApiSettings",
    "AppState",
    "EventTrigger",
    "WorkflowSummary",
    "create_app",
]

_APP_NAMES = frozenset({"AppState", "create_app"})


def __getattr__(name: str) -> Any:
    if name in _APP_NAMES:
        from coordinator_api import app

        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
