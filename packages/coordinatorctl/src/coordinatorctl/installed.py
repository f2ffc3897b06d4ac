"""Whether the deployment half (`coordinatorctl[deploy]`) is installed, asked before it loads."""

from __future__ import annotations

import importlib.util
from typing import Final

from coordinator_core.errors import Diagnostic

__all__ = ["DEPLOY_EXTRA", "SERVICE_MODULES", "missing_service_modules", "require_deploy_extra"]

DEPLOY_EXTRA: Final = "coordinatorctl[deploy]"
# The top-level import name of each requirement of coordinator-core's `service` extra (its
# pyproject.toml; tests/unit/cli/test_installed.py keeps the two lists equal).
SERVICE_MODULES: Final = (
    "cryptography",
    "sqlmodel",
    "sqlalchemy",
    "psycopg",
    "alembic",
    "httpx",
    "httptools",
    "jwt",
    "prometheus_client",
)


def missing_service_modules() -> tuple[str, ...]:
    """The import names of the `service` extra that this environment cannot import."""
    return tuple(name for name in SERVICE_MODULES if importlib.util.find_spec(name) is None)


def require_deploy_extra() -> Diagnostic | None:
    """`coordinator.command.extra-required` (exit 2) when the deployment half is not installed,
    else None. Found without importing any of it, so the refusal is never an ImportError."""
    if not missing_service_modules():
        return None
    return Diagnostic("coordinator.command.extra-required", path="")
