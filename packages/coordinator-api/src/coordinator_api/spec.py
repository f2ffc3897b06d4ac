"""Where the generated OpenAPI documents live, and what the app reads from them.

The app serves `openapi.bundled.yaml` (3.1) and routes by it; Connexion, which refuses OpenAPI
3.1, reads `openapi.connexion.yaml` (its 3.0.3 rendering). Both are generated from spec/ by
`nox -s generate` into generated/, the root of the `coordinator-models` distribution, whose wheel
ships them as package data at `coordinator_models/openapi/` (generated/pyproject.toml). They are
found with `importlib.resources`, in this order:

1. `ApiSettings.openapi_dir` (an explicit directory: tests and embedders);
2. `coordinator_models/openapi/`: the package data of an installed wheel;
3. beside the `coordinator_models` package: generated/ itself, for an editable install of the
   checkout (whose package directory has no copies).

No environment variable or checkout path is needed: a plain `pip install` of the wheels serves.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any, Final

import yaml

__all__ = [
    "BUNDLED_NAME",
    "CONNEXION_NAME",
    "MODELS_PACKAGE",
    "OpenApiFiles",
    "OperationInfo",
    "Route",
    "RouteTable",
    "load_yaml",
    "locate_openapi",
    "operation_table",
]

BUNDLED_NAME: Final = "openapi.bundled.yaml"
CONNEXION_NAME: Final = "openapi.connexion.yaml"
MODELS_PACKAGE: Final = "coordinator_models"  # the distribution coordinator-models
_METHODS: Final = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


@dataclass(frozen=True, slots=True)
class OpenApiFiles:
    bundled: Path
    connexion: Path


def _candidates(explicit: Path | None) -> list[Path]:
    found: list[Path] = [] if explicit is None else [explicit]
    package = files(MODELS_PACKAGE)
    # A package installed from a wheel or a checkout is a directory on disk; Connexion and the
    # body schemas are read from files, so a zipped installation (no Path) finds nothing here.
    if isinstance(package, Path):
        found.extend([package / "openapi", package.parent])
    return found


def locate_openapi(explicit: Path | None = None) -> OpenApiFiles:
    """The absolute paths of the two generated documents (STACK.md P2: never relative)."""
    for directory in _candidates(explicit):
        bundled, connexion = directory / BUNDLED_NAME, directory / CONNEXION_NAME
        if bundled.is_file() and connexion.is_file():
            return OpenApiFiles(bundled.resolve(), connexion.resolve())
    raise FileNotFoundError(
        f"{BUNDLED_NAME} and {CONNEXION_NAME} are not in the installed {MODELS_PACKAGE} package: "
        "reinstall coordinator-models from its wheel (or run `nox -s generate` in a checkout)"
    )


_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml parses 60 KB in ms


def load_yaml(path: Path) -> dict[str, Any]:
    document = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)
    if not isinstance(document, dict):
        raise ValueError(f"{path.name} is not an OpenAPI document")
    return document


@dataclass(frozen=True, slots=True)
class OperationInfo:
    """What the app needs to know about one operation besides its handler."""

    operation_id: str
    action: str | None  # `x-policy-action`: the policy action a bearer route needs
    operator_only: bool  # `x-operator-only`
    unauthenticated_code: str  # the 401 code of this route's authentication
    query_invalid_code: str | None = None  # `x-query-invalid`: a query parameter out of bounds


def operation_table(document: Mapping[str, Any]) -> dict[str, OperationInfo]:
    """operationId → OperationInfo. A bearer route without `x-policy-action` is an error."""
    default_security = document.get("security", [])
    table: dict[str, OperationInfo] = {}
    for path, item in document.get("paths", {}).items():
        for method in _METHODS:
            operation = item.get(method)
            if operation is None:
                continue
            operation_id = operation["operationId"]
            schemes = {
                name
                for requirement in operation.get("security", default_security)
                for name in requirement
            }
            action = operation.get("x-policy-action")
            if "bearerAuth" in schemes and not isinstance(action, str):
                raise ValueError(f"{method.upper()} {path}: bearer route without x-policy-action")
            unauthenticated = (
                "coordinator.completion.unauthenticated"
                if "completionBearer" in schemes
                else "coordinator.access.unauthenticated"
            )
            table[operation_id] = OperationInfo(
                operation_id=operation_id,
                action=action if isinstance(action, str) else None,
                operator_only=operation.get("x-operator-only") is True,
                unauthenticated_code=unauthenticated,
                query_invalid_code=(
                    str(operation["x-query-invalid"]) if "x-query-invalid" in operation else None
                ),
            )
    return table


@dataclass(frozen=True, slots=True)
class Route:
    template: str
    pattern: re.Pattern[str]
    methods: frozenset[str]
    operation_ids: Mapping[str, str]  # method (upper case) → operationId (the request's span)

    @property
    def allow(self) -> str:
        return ", ".join(sorted(self.methods))


class RouteTable:
    """The documented paths and their methods: decides 404 and 405 (with `Allow`) before
    Connexion routes, so that neither depends on Starlette's per-method routes (STACK.md §5:
    the first partial match would set a wrong `Allow`) or its slash redirects (06 §1 item 7)."""

    def __init__(self, routes: list[Route]) -> None:
        self._routes = routes

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> RouteTable:
        routes: list[Route] = []
        for template, item in document.get("paths", {}).items():
            parts = re.split(r"(\{[^}/]+\})", template)
            regex = "".join(
                "[^/]+" if part.startswith("{") else re.escape(part) for part in parts if part
            )
            methods = frozenset(method.upper() for method in _METHODS if method in item)
            operation_ids = {
                method.upper(): str(item[method].get("operationId", method))
                for method in _METHODS
                if method in item
            }
            routes.append(Route(template, re.compile(f"^{regex}$"), methods, operation_ids))
        # Literal segments win over templates (`/v1/runs/x/inspect` before `/v1/runs/{run}`).
        routes.sort(key=lambda route: (route.template.count("{"), route.template))
        return cls(routes)

    def match(self, path: str) -> Route | None:
        for route in self._routes:
            if route.pattern.match(path):
                return route
        return None
