"""Fixtures of the adapter tests: one fake product + token endpoint on a real loopback socket
(reset before every test), client keys, and a TLS variant served under a pinned host name."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from adapter_support import (
    TOKEN_PATH,
    FakeServer,
    KeyPair,
    LiveServer,
    Tls,
    connection,
    ec_key,
    make_tls,
    rsa_key,
)

from coordinator_core.shell.adapters import HttpSettings, ProductConnection


@pytest.fixture(scope="session")
def fake_app() -> FakeServer:
    return FakeServer()


@pytest.fixture(scope="session")
def live(fake_app: FakeServer) -> Iterator[LiveServer]:
    server = LiveServer(fake_app)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    return make_tls(Path(tmp_path_factory.mktemp("tls")), "product.test")


@pytest.fixture(scope="session")
def tls_live(fake_app: FakeServer, tls_files: Tls) -> Iterator[LiveServer]:
    server = LiveServer(fake_app, certfile=tls_files.certfile, keyfile=tls_files.keyfile)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def ec_pair() -> KeyPair:
    return ec_key()


@pytest.fixture(scope="session")
def rsa_pair() -> KeyPair:
    return rsa_key()


@pytest.fixture
def fake(fake_app: FakeServer, live: LiveServer) -> FakeServer:
    fake_app.reset()
    return fake_app


@pytest.fixture
def token_endpoint(live: LiveServer) -> str:
    return live.origin + TOKEN_PATH


@pytest.fixture
def settings() -> HttpSettings:
    return HttpSettings()


@pytest.fixture
def connect(
    fake: FakeServer, live: LiveServer, token_endpoint: str, ec_pair: KeyPair
) -> Callable[..., ProductConnection]:
    """A connection of `product` to the fake (or `base_url`), its client registered."""

    def make(product: str, base_url: str | None = None, **options: Any) -> ProductConnection:
        key = options.pop("key", ec_pair)
        bound = connection(product, base_url or live.origin, token_endpoint, key, **options)
        fake.register(bound.authorization.client_id, key, bound.authorization.audience)
        return bound

    return make
