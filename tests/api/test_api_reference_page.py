"""docs/reference/api.md, generated from the bundled document (scripts/generate_api_doc.py)."""

from __future__ import annotations

import copy
import importlib
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

_page: Any = importlib.import_module("generate_api_doc")
PAGE = ROOT / "docs" / "reference" / "api.md"


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(
        (ROOT / "generated" / "openapi.bundled.yaml").read_text("utf-8")
    )
    return loaded


@pytest.fixture(scope="module")
def codes() -> set[str]:
    catalogue = yaml.safe_load((ROOT / "spec" / "errors.yaml").read_text("utf-8"))
    return set(catalogue["codes"])


def test_the_committed_page_is_what_the_spec_renders(
    document: dict[str, Any], codes: set[str]
) -> None:
    assert PAGE.read_text("utf-8") == _page.render_markdown(document, codes)


def test_every_route_body_and_problem_code_is_on_the_page(
    document: dict[str, Any], codes: set[str]
) -> None:
    text = _page.render_markdown(document, codes)
    named: set[str] = set()
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if not isinstance(operation, dict) or "operationId" not in operation:
                continue
            assert f"\n### {operation['operationId']}\n" in text
            assert f"`{method.upper()} {path}`" in text
            for response in operation["responses"].values():
                resolved = response
                if "$ref" in response:
                    resolved = document["components"]["responses"][response["$ref"].split("/")[-1]]
                named.update(_page.problem_codes(resolved.get("description")))
    for name in document["components"]["schemas"]:
        assert f'<a id="schema-{name.lower()}"></a>' in text
    assert named and named <= codes
    assert all(f"`{code}`" in text for code in named)
    # Every in-page link points at an anchor the page defines.
    anchors = set(re.findall(r'<a id="([^"]+)"></a>', text)) | {
        heading.lower() for heading in re.findall(r"^### (\S+)$", text, flags=re.M)
    }
    assert set(re.findall(r"\]\(#([^)]+)\)", text)) <= anchors


def test_a_code_the_catalogue_does_not_define_is_refused(
    document: dict[str, Any], codes: set[str]
) -> None:
    broken = copy.deepcopy(document)
    broken["paths"]["/v1/runs"]["post"]["responses"]["404"]["description"] = (
        "`coordinator.command.no-such-code`"
    )
    with pytest.raises(_page.ApiDocError, match="no-such-code"):
        _page.render_markdown(broken, codes)
