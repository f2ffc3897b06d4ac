"""What a plain install of the wheels carries: every file the product reads at run time (the
OpenAPI documents, schemas, migrations, templates) is package data of the distribution that
reads it, found without a checkout or an environment variable; every distribution carries the
Apache-2.0 LICENSE and complete metadata; and the suite itself runs on the installed wheels."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from email.message import Message
from email.parser import Parser
from importlib import metadata
from pathlib import Path

import pytest
from support.needs import in_ci
from support.wheels import DISTRIBUTIONS, WHEELS_VARIABLE

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = ("openapi.bundled.yaml", "openapi.connexion.yaml")
# Distribution → the import package its wheel holds and the source directory of that package.
PACKAGES = {
    name: (
        name.replace("-", "_"),
        project / name.replace("-", "_") if name == "coordinator-models"
        else project / "src" / name.replace("-", "_"),
    )
    for name, project in DISTRIBUTIONS.items()
}  # fmt: skip
LICENSE = (ROOT / "LICENSE").read_bytes()


def _metadata(wheel: Path) -> Message:
    with zipfile.ZipFile(wheel) as archive:
        [name] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return Parser().parsestr(archive.read(name).decode("utf-8"))


def _source_files(directory: Path) -> list[str]:
    """Every file of a package's source tree, as a path inside the wheel."""
    return sorted(
        str(path.relative_to(directory.parent))
        for path in directory.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    )


def test_the_models_wheel_carries_both_documents_as_generated(
    workspace_wheels: dict[str, Path],
) -> None:
    with zipfile.ZipFile(workspace_wheels["coordinator-models"]) as archive:
        for name in DOCUMENTS:
            shipped = archive.read(f"coordinator_models/openapi/{name}")
            assert shipped == (ROOT / "generated" / name).read_bytes()


@pytest.mark.parametrize("distribution", sorted(PACKAGES))
def test_every_file_of_the_package_is_in_its_wheel(
    workspace_wheels: dict[str, Path], distribution: str
) -> None:
    """Data files (schemas, migrations and their Alembic template, `init`'s project template,
    py.typed) ship with the code that reads them, byte for byte."""
    _, source = PACKAGES[distribution]
    with zipfile.ZipFile(workspace_wheels[distribution]) as archive:
        shipped = set(archive.namelist())
        missing = [name for name in _source_files(source) if name not in shipped]
        assert missing == []
        for name in _source_files(source):
            assert archive.read(name) == (source.parent / name).read_bytes(), name


def test_an_installed_layout_finds_the_documents_in_the_package(
    workspace_wheels: dict[str, Path], tmp_path: Path
) -> None:
    site = tmp_path / "site"
    with zipfile.ZipFile(workspace_wheels["coordinator-models"]) as archive:
        archive.extractall(site)
    environment = dict(os.environ, PYTHONPATH=str(site))
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


def test_a_models_package_without_the_documents_is_refused_with_a_repair(
    workspace_wheels: dict[str, Path], tmp_path: Path
) -> None:
    """The regression of issue 12: a wheel without the documents. The error names the files
    and the repair (no environment variable to set)."""
    site = tmp_path / "site"
    with zipfile.ZipFile(workspace_wheels["coordinator-models"]) as archive:
        for name in archive.namelist():
            if "/openapi/" not in name:
                archive.extract(name, site)
    result = subprocess.run(
        [sys.executable, "-c", "from coordinator_api.spec import locate_openapi; locate_openapi()"],
        cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(site)), capture_output=True,
        text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert "openapi.bundled.yaml and openapi.connexion.yaml are not in the installed" in (
        result.stderr
    )
    assert "COORDINATOR_OPENAPI_DIR" not in result.stderr


@pytest.mark.parametrize("distribution", sorted(DISTRIBUTIONS))
def test_every_wheel_carries_the_license_and_complete_metadata(
    workspace_wheels: dict[str, Path], distribution: str
) -> None:
    wheel = workspace_wheels[distribution]
    with zipfile.ZipFile(wheel) as archive:
        licenses = [n for n in archive.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
        assert len(licenses) == 1
        assert archive.read(licenses[0]) == LICENSE
    found = _metadata(wheel)
    assert found["Name"] == distribution
    assert found["License-Expression"] == "Apache-2.0"
    assert found.get_all("License-File") == ["LICENSE"]
    assert found["Requires-Python"] == ">=3.11"
    assert found["Summary"]
    classifiers = found.get_all("Classifier") or []
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert "Typing :: Typed" in classifiers
    urls = found.get_all("Project-URL") or []
    assert any(url.startswith("Homepage, https://") for url in urls)
    assert found["Description-Content-Type"] == "text/markdown"
    assert f"# {distribution}" in str(found.get_payload())


def test_the_license_is_the_full_apache_2_text_in_every_project() -> None:
    text = LICENSE.decode("utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text and len(text) > 10_000
    for directory in DISTRIBUTIONS.values():
        assert (directory / "LICENSE").read_bytes() == LICENSE, directory


def test_this_suite_runs_on_the_installed_wheels() -> None:
    """Under nox (which installs the wheels) or CI, no workspace package is imported from the
    checkout and none is an editable install: a file missing from a wheel fails the suite."""
    if os.environ.get(WHEELS_VARIABLE) is None and not in_ci():
        pytest.skip(f"not run by nox ({WHEELS_VARIABLE} unset): the workspace may be editable")
    import importlib

    for distribution, (package, _) in PACKAGES.items():
        module = importlib.import_module(package)
        location = Path(module.__file__ or "").resolve()
        for checkout in (ROOT / "packages", ROOT / "generated"):
            assert not location.is_relative_to(checkout), location
        direct = metadata.distribution(distribution).read_text("direct_url.json")
        if direct is not None:
            assert not json.loads(direct).get("dir_info", {}).get("editable", False), distribution
        assert metadata.metadata(distribution)["License-Expression"] == "Apache-2.0"
    from coordinator_api.spec import locate_openapi

    found = locate_openapi()
    assert found.bundled.parent.name == "openapi"
    assert found.bundled.parent.parent.name == "coordinator_models"
