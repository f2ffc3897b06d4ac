"""Fixtures of the integration suite: the sandbox products, the packaged example, and a
deployment per test on SQLite and on PostgreSQL (the store suite's `postgres_url`: a fresh
database per session; the PostgreSQL tests fail under `CI=true` when the server is missing and
are skipped otherwise)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from integration_support import (
    Deployed,
    Products,
    deploy,
    holiday_package,
    package,
    products,
    recorded_package,
)

__all__ = ["holiday_package", "package", "products", "recorded_package"]

_STORE_SUITE = Path(__file__).resolve().parents[1] / "store"
if str(_STORE_SUITE) not in sys.path:
    sys.path.append(str(_STORE_SUITE))  # integration_support reuses store_support


def _close(deployed: Deployed) -> None:
    deployed.store.close()
    deployed.audit.close()


@pytest.fixture
def sqlite_deployed(products: Products, package: object, tmp_path: Path) -> Iterator[Deployed]:
    deployed = deploy(products, package, tmp_path)  # type: ignore[arg-type]
    yield deployed
    _close(deployed)


@pytest.fixture
def postgres_deployed(
    products: Products,
    package: object,
    tmp_path: Path,
    postgres_url: str,
    postgres_role: Callable[[], str],
) -> Iterator[Deployed]:
    deployed = deploy(
        products,
        package,  # type: ignore[arg-type]
        tmp_path,
        postgres_url=postgres_url,
        runtime_role=postgres_role(),
    )
    yield deployed
    _close(deployed)


def _on_backend(
    request: pytest.FixtureRequest, products: Products, package: object, tmp_path: Path
) -> Iterator[Deployed]:
    options: dict[str, object] = {}
    if request.param == "postgresql":
        options["postgres_url"] = request.getfixturevalue("postgres_url")
        options["runtime_role"] = request.getfixturevalue("postgres_role")()
    deployed = deploy(products, package, tmp_path, **options)  # type: ignore[arg-type]
    yield deployed
    _close(deployed)


@pytest.fixture(params=["sqlite", "postgresql"])
def recorded_deployed(
    request: pytest.FixtureRequest,
    products: Products,
    recorded_package: object,
    tmp_path: Path,
) -> Iterator[Deployed]:
    """`examples/recorded-decision` deployed on each backend."""
    yield from _on_backend(request, products, recorded_package, tmp_path)


@pytest.fixture(params=["sqlite", "postgresql"])
def holiday_deployed(
    request: pytest.FixtureRequest,
    products: Products,
    holiday_package: object,
    tmp_path: Path,
) -> Iterator[Deployed]:
    """`examples/holiday-routing` deployed on each backend."""
    yield from _on_backend(request, products, holiday_package, tmp_path)


@pytest.fixture(params=["sqlite", "postgresql"])
def deployed(request: pytest.FixtureRequest) -> Deployed:
    """The same deployment on each backend."""
    name = "sqlite_deployed" if request.param == "sqlite" else "postgres_deployed"
    result: Deployed = request.getfixturevalue(name)
    return result
