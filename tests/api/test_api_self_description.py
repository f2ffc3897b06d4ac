"""Self-description (06 §14): `GET /openapi.json` and the API explorer at `/docs`."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import zipfile
from importlib.resources import files
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from api_fakes import FakeJournal, FakeRunService, settings
from support.needs import unavailable

from coordinator_api import create_app
from coordinator_api.explorer import EXPLORER_CSP

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "generated" / "openapi.bundled.yaml"
CONNEXION = ROOT / "generated" / "openapi.connexion.yaml"


def _operations(document: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (method, path, operation["operationId"])
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if isinstance(operation, dict) and "operationId" in operation
    }


async def test_openapi_json_is_the_bundled_document_without_token_or_audit(
    client: httpx.AsyncClient, service: FakeRunService, journal: FakeJournal
) -> None:
    response = await client.get("/openapi.json")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.headers["cache-control"] == "no-store"
    assert response.headers["content-security-policy"] == "default-src 'none'"
    document = json.loads(response.content)
    assert document == yaml.safe_load(BUNDLED.read_text(encoding="utf-8"))
    assert document["openapi"].startswith("3.1")
    # The operations served are the ones the routing resolves (the 3.0.3 rendering).
    assert _operations(document) == _operations(yaml.safe_load(CONNEXION.read_text("utf-8")))
    assert {"startRun", "listRuns", "getRun", "admitEvent"} <= {
        operation_id for _, _, operation_id in _operations(document)
    }
    assert service.calls == [] and journal.entries == []


async def test_openapi_json_is_byte_for_byte_the_shipped_copy(client: httpx.AsyncClient) -> None:
    # `coordinatorctl openapi` prints coordinator_models/openapi.json; the service serves the
    # same bytes, so the two can be compared with cmp.
    shipped = files("coordinator_models").joinpath("openapi.json").read_bytes()
    assert (await client.get("/openapi.json")).content == shipped


async def test_the_explorer_page_and_its_files_come_from_the_service(
    client: httpx.AsyncClient, journal: FakeJournal
) -> None:
    page = await client.get("/docs")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert page.headers["content-security-policy"] == EXPLORER_CSP
    assert page.headers["cache-control"] == "no-store"
    assert page.headers["x-content-type-options"] == "nosniff"
    sources = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert sources and all(source.startswith("/docs/") for source in sources)
    assert "<script>" not in page.text  # no inline script: the CSP has no 'unsafe-inline'
    for source in sources:
        asset = await client.get(source)
        assert asset.status_code == 200, source
        assert asset.headers["content-security-policy"] == EXPLORER_CSP
        assert len(asset.content) > 0
    initializer = (await client.get("/docs/explorer.js")).text
    assert '"/openapi.json"' in initializer
    bundle = await client.get("/docs/swagger-ui-bundle.js")
    assert bundle.headers["content-type"] == "text/javascript; charset=utf-8"
    assert b"SwaggerUIBundle" in bundle.content
    assert journal.entries == []


def test_the_explorer_policy_allows_only_this_service() -> None:
    directives = dict(part.strip().split(" ", 1) for part in EXPLORER_CSP.split(";"))
    assert directives["default-src"] == "'none'"
    for directive in ("script-src", "style-src", "connect-src"):
        assert directives[directive] == "'self'"
    assert "unsafe" not in EXPLORER_CSP and "http" not in EXPLORER_CSP


@pytest.mark.parametrize("path", ["/docs/", "/docs/index.html",
                                  "/docs/swagger-ui.js.map", "/docs/oauth2-redirect.html"])  # fmt: skip
async def test_only_the_named_explorer_files_are_served(
    client: httpx.AsyncClient, path: str
) -> None:
    response = await client.get(path)
    assert response.status_code == 404
    assert response.json()["code"] == "coordinator.request.not-found"


@pytest.mark.parametrize("path", ["/openapi.json", "/docs", "/docs/explorer.js"])
@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "HEAD"])
async def test_other_methods_are_405_with_allow_get(
    client: httpx.AsyncClient, path: str, method: str
) -> None:
    response = await client.request(method, path)
    assert response.status_code == 405
    assert response.headers["allow"] == "GET"
    if method != "HEAD":
        assert response.json()["code"] == "coordinator.request.method-not-allowed"


def test_an_operation_without_a_handler_stops_the_app(
    tmp_path: Any, keys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from coordinator_api import handlers

    reduced = {k: v for k, v in handlers.OPERATIONS.items() if k != "cancelRun"}
    monkeypatch.setattr("coordinator_api.app.OPERATIONS", reduced)
    with pytest.raises(ValueError, match="operationIds of the OpenAPI documents"):
        create_app(settings(keys), service=FakeRunService(), journal=FakeJournal())


@pytest.mark.parametrize(
    ("distribution", "names"),
    [
        ("packages/coordinator-api", ["coordinator_api/static/explorer.html",
                                      "coordinator_api/static/explorer.js"]),
        ("generated", ["coordinator_models/openapi.json"]),
    ],
)  # fmt: skip
def test_the_wheels_ship_the_document_and_the_explorer_page(
    tmp_path: Path, distribution: str, names: list[str]
) -> None:
    uv = shutil.which("uv")
    if uv is None:
        unavailable("uv is not on PATH: the wheel cannot be built here", "nox installs it")
    subprocess.run(
        [uv, "build", "--wheel", "--out-dir", str(tmp_path), str(ROOT / distribution)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    [wheel] = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        for name in names:
            relative = name.split("/", 1)[1]
            source = (
                ROOT / distribution / "src" / name
                if distribution.startswith("packages/")
                else ROOT / distribution / name
            )
            assert archive.read(name) == source.read_bytes(), relative
        if distribution == "packages/coordinator-api":
            metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
            assert "Requires-Dist: swagger-ui-bundle-v2" in archive.read(metadata).decode()
