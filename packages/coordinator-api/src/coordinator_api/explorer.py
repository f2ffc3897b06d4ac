"""Self-description (06 §14): `GET /openapi.json` and the API explorer at `/docs`, tokenless."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from importlib.resources import files
from pathlib import Path
from typing import Any, Final

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coordinator_api.edge import SECURITY_HEADERS
from coordinator_api.problems import problem_response

__all__ = [
    "DOCS_PATH",
    "EXPLORER_CSP",
    "OPENAPI_PATH",
    "SelfDescription",
    "explorer_assets",
    "render_document",
]

OPENAPI_PATH: Final = "/openapi.json"
DOCS_PATH: Final = "/docs"
# The explorer's own policy: its scripts, styles and images come from this service only, and
# it talks to nothing but this service (Try it out). Everything else stays `default-src 'none'`.
EXPLORER_CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_MEDIA_TYPES: Final = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".png": "image/png",
}
# Swagger UI's files (the `swagger-ui-bundle-v2` distribution), served under /docs/.
_SWAGGER_UI_FILES: Final = ("swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png")


def render_document(document: Mapping[str, Any]) -> bytes:
    """The served bytes of an OpenAPI document: indented JSON, as `coordinatorctl openapi` prints
    it (scripts/generate.py writes coordinator_models/openapi.json the same way)."""
    return (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def explorer_assets() -> dict[str, Path]:
    """URL path under /docs → the shipped file: the page and its initializer (package data of
    coordinator_api) and Swagger UI's files. A missing file fails here (`create_app` calls it)."""
    import swagger_ui_bundle  # type: ignore[import-untyped]

    swagger_ui = Path(swagger_ui_bundle.swagger_ui_path)
    static = Path(str(files("coordinator_api").joinpath("static")))
    assets = {
        DOCS_PATH: static / "explorer.html",
        f"{DOCS_PATH}/explorer.js": static / "explorer.js",
    }
    assets.update({f"{DOCS_PATH}/{name}": swagger_ui / name for name in _SWAGGER_UI_FILES})
    missing = sorted(path.name for path in assets.values() if not path.is_file())
    if missing:
        raise FileNotFoundError(f"API explorer files not installed: {', '.join(missing)}")
    return assets


@functools.cache
def _read(path: Path) -> bytes:
    return path.read_bytes()


def _secured(send: Send, csp: bytes) -> Send:
    """`send` with the service's security headers, the Content-Security-Policy being `csp`."""
    headers = [
        (name, csp if name == b"content-security-policy" else value)
        for name, value in SECURITY_HEADERS
    ]

    async def send_secured(message: Message) -> None:
        if message["type"] == "http.response.start":
            names = {name for name, _ in headers}
            kept = [
                (bytes(name).lower(), bytes(value))
                for name, value in message.get("headers", [])
                if bytes(name).lower() not in names
            ]
            message = {**message, "headers": [*kept, *headers]}
        await send(message)

    return send_secured


class SelfDescription:
    """ASGI layer in front of the API: answers `GET /openapi.json` (the served document), `GET
    /docs` and the explorer's files; any other method there is `405` with `Allow: GET`, an
    unknown file under /docs/ is `404`. Everything else passes through untouched."""

    def __init__(self, app: ASGIApp, *, document: bytes, assets: Mapping[str, Path]) -> None:
        self.app = app
        self.document = document
        self.assets = assets

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path == OPENAPI_PATH:
            csp = dict(SECURITY_HEADERS)[b"content-security-policy"]
        elif path == DOCS_PATH or path.startswith(DOCS_PATH + "/"):
            csp = EXPLORER_CSP.encode("ascii")
        else:
            await self.app(scope, receive, send)
            return
        send = _secured(send, csp)
        asset = self.assets.get(path)
        response: Response
        if path != OPENAPI_PATH and asset is None:
            response = problem_response("coordinator.request.not-found")
        elif scope["method"] != "GET":
            response = problem_response(
                "coordinator.request.method-not-allowed", headers={"Allow": "GET"}
            )
        elif asset is None:
            response = Response(self.document, media_type="application/json")
        else:
            response = Response(_read(asset), media_type=_MEDIA_TYPES[asset.suffix])
        await response(scope, receive, send)
