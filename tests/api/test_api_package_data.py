"""The OpenAPI documents the service reads at run time are package data of the built
`coordinator-models` wheel and are found there without a checkout or an environment variable
(a plain `pip install` of the wheels must start `coordinator serve`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = ("openapi.bundled.yaml", "openapi.connexion.yaml")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    uv = shutil.which("uv")
    if uv is None:
        if os.environ.get("CI") == "true":
            pytest.fail("uv is needed to build the wheel (nox installs it)")
        pytest.skip("uv is not on PATH: the wheel cannot be built here")
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [uv, "build", "--wheel", "--out-dir", str(out), str(ROOT / "generated")],
        check=True,
        capture_output=True,
        timeout=300,
    )
    [built] = out.glob("coordinator_models-*.whl")
    return built


def test_the_wheel_carries_both_documents_as_generated(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        for name in DOCUMENTS:
            shipped = archive.read(f"coordinator_models/openapi/{name}")
            assert shipped == (ROOT / "generated" / name).read_bytes()


def test_an_installed_layout_finds_the_documents_in_the_package(
    wheel: Path, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    environment = {k: v for k, v in os.environ.items() if k != "COORDINATOR_OPENAPI_DIR"}
    environment["PYTHONPATH"] = str(site)
    found = subprocess.run(
        [
            sys.executable, "-c",
            "from coordinator_api.spec import locate_openapi; f = locate_openapi(); "
            "print(f.bundled); print(f.connexion)",
        ],
        cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=60, check=True,
    ).stdout.split()  # fmt: skip
    assert found == [
        str((site / "coordinator_models" / "openapi" / n).resolve()) for n in DOCUMENTS
    ]
