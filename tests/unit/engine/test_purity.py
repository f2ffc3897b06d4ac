"""The engine is pure: it imports only the standard library's pure modules and coordinator_core's
pure modules (architecture rule 2), never the store, HTTP, crypto, clock, OS or randomness."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from support.sources import parsed

import coordinator_core.engine
import coordinator_core.scenarios

ENGINE_DIR = Path(coordinator_core.engine.__file__).parent
SCENARIOS_DIR = Path(coordinator_core.scenarios.__file__).parent

ALLOWED_STDLIB = {
    "__future__",
    "base64",
    "binascii",
    "collections",
    "dataclasses",
    "decimal",
    "functools",
    "hashlib",
    "hmac",
    "json",
    "re",
    "types",
    "typing",
}
ALLOWED_CORE = {
    "coordinator_core.authoring.decode",
    "coordinator_core.definition",
    "coordinator_core.engine",
    "coordinator_core.errors",
    "coordinator_core.evolve",
    "coordinator_core.functions",
    "coordinator_core.jsonschema",
    "coordinator_core.limits",
    "coordinator_core.operations",
    "coordinator_core.outputs",
    "coordinator_core.scenarios",
    "coordinator_core.values",
}
BANNED_AT_RUNTIME = ("sqlmodel", "psycopg", "httpx", "cryptography", "sqlalchemy", "connexion")


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            # `from coordinator_core import limits` imports coordinator_core.limits
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _allowed(module: str) -> bool:
    if module.split(".", maxsplit=1)[0] in ALLOWED_STDLIB:
        return True
    return any(module == core or module.startswith(core + ".") for core in ALLOWED_CORE)


def test_engine_and_scenario_modules_import_only_pure_modules() -> None:
    files = sorted(ENGINE_DIR.glob("*.py")) + sorted(SCENARIOS_DIR.glob("*.py"))
    assert len(files) >= 10
    offending = {
        f"{path.name}: {module}"
        for path in files
        for module in _imports(path)
        if not _allowed(module)
    }
    assert offending == set()


def test_importing_the_engine_and_runner_loads_no_store_http_or_crypto_library() -> None:
    code = (
        "import sys\n"
        "import coordinator_core.engine, coordinator_core.scenarios\n"
        f"banned = {BANNED_AT_RUNTIME!r}\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in banned)\n"
        "assert not loaded, loaded\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert completed.returncode == 0, completed.stderr
