"""Fixtures of the API tests: signing keys, the fake service and journal, the in-process app
(httpx ASGITransport, no sockets) and an openapi-core validator of the 3.1 bundle."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from api_fakes import BASE_URL, FakeJournal, FakeRunService, SigningKeys, settings
from openapi_core import Config, OpenAPI
from openapi_core.datatypes import RequestParameters
from werkzeug.datastructures import Headers, ImmutableMultiDict

from coordinator_api import create_app

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "generated" / "openapi.bundled.yaml"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def keys() -> SigningKeys:
    return SigningKeys()


@pytest.fixture(scope="session")
def _shared() -> tuple[FakeRunService, FakeJournal]:
    return FakeRunService(), FakeJournal()


@pytest.fixture(scope="session")
def _shared_app(keys: SigningKeys, _shared: tuple[FakeRunService, FakeJournal]) -> Any:
    # One app for the session (Connexion validates the document in about 0.3 s per app);
    # its fakes are emptied before every test.
    service, journal = _shared
    return create_app(settings(keys), service=service, journal=journal)


@pytest.fixture
def service(_shared: tuple[FakeRunService, FakeJournal]) -> FakeRunService:
    _shared[0].reset()
    return _shared[0]


@pytest.fixture
def journal(_shared: tuple[FakeRunService, FakeJournal]) -> FakeJournal:
    _shared[1].reset()
    return _shared[1]


@pytest.fixture
def app(_shared_app: Any, service: FakeRunService, journal: FakeJournal) -> Any:
    return _shared_app


@pytest.fixture
async def client(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as http:
        yield http


# ---------------------------------------------------------------------------------------------
# openapi-core against the 3.1 bundle (STACK.md §6: problem+json must be registered)


class _Request:
    def __init__(self, request: httpx.Request) -> None:
        self.host_url = f"{request.url.scheme}://{request.url.netloc.decode()}"
        self.path = request.url.path
        self.method = request.method.lower()
        self.body: bytes | None = request.content or None
        self.content_type = request.headers.get("content-type", "")
        self.parameters = RequestParameters(
            query=ImmutableMultiDict(list(request.url.params.multi_items())),
            header=Headers(list(request.headers.items())),
            cookie=ImmutableMultiDict(),
        )


class _Response:
    def __init__(self, response: httpx.Response) -> None:
        self.status_code = response.status_code
        self.headers = Headers(list(response.headers.items()))
        self.content_type = response.headers.get("content-type", "")
        self.data: bytes | None = response.content


@pytest.fixture(scope="session")
def openapi() -> OpenAPI:
    config = Config(extra_media_type_deserializers={"application/problem+json": json.loads})
    return OpenAPI.from_file_path(str(BUNDLED), config=config)


@pytest.fixture
def conforms(openapi: OpenAPI) -> Any:
    """`conforms(response)`: the response validates against the 3.1 contract; returns it."""

    def check(response: httpx.Response) -> httpx.Response:
        openapi.validate_response(_Request(response.request), _Response(response))
        return response

    return check
