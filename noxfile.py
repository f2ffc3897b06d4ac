"""The one task runner: tests, lint, typecheck, generate, demo and benchmarks, locally and in CI."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).parent
CONSTRAINTS = ("-c", str(ROOT / "constraints.txt"))
WORKSPACE = (
    "-e", str(ROOT / "generated"),
    "-e", str(ROOT / "packages" / "coordinator-core"),
    "-e", str(ROOT / "packages" / "coordinatorctl"),
    "-e", str(ROOT / "packages" / "coordinator-api"),
    "-e", str(ROOT / "packages" / "coordinator-sandbox"),
)  # fmt: skip
# The source roots of the workspace packages, for tools that read the code without installing it.
SOURCE_ROOTS = tuple(
    str(ROOT / "packages" / package / "src")
    for package in ("coordinator-core", "coordinatorctl", "coordinator-api", "coordinator-sandbox")
)
TEST_TOOLS = (
    "pytest",
    "pytest-xdist",
    "hypothesis",
    "schemathesis",
    "openapi-core",
    "openapi-spec-validator",
    # tests/e2e/test_generated_client.py generates a client from the served document.
    "openapi-python-client",
)

# Benchmark targets whose script takes the arguments that follow them.
ARGUMENTED = ("service", "parked")

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["generate_check", "lint", "typecheck", "tests"]
# pip byte-compiles on install, uv does not; this machine sets PYTHONDONTWRITEBYTECODE=1.
os.environ.setdefault("UV_COMPILE_BYTECODE", "1")


def install_workspace(session: nox.Session, *extra: str) -> None:
    session.install(*CONSTRAINTS, *WORKSPACE, *extra)
    # Editable installs are not byte-compiled and this machine sets PYTHONDONTWRITEBYTECODE=1,
    # so every `coordinatorctl` process would recompile the sources; compile them once here.
    session.run(
        "python", "-m", "compileall", "-q", "packages", "generated", silent=True
    )  # fmt: skip


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite (unit, acceptance) against the installed workspace."""
    install_workspace(session, *TEST_TOOLS)
    args = session.posargs or ["-n", "2", "-q"]
    session.run("pytest", *args)


@nox.session
def chaos(session: nox.Session) -> None:
    """The chaos suite (tests/chaos): SIGKILLs at random moments and at every failpoint, lost
    product responses, PostgreSQL restarts and a killed postmaster, restore drills; prints each
    campaign's table. The bounded profile by default (CI); `nox -s chaos -- --long` for the
    long one."""
    install_workspace(session, *TEST_TOOLS)
    session.run("pytest", "--chaos", "-p", "no:cacheprovider", "-s", "-q", "tests/chaos",
                *session.posargs)  # fmt: skip


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint and formatting), the layer contract (import-linter, `[tool.importlinter]` in
    pyproject.toml) and the OpenAPI documents against their meta-schema."""
    session.install(*CONSTRAINTS, "ruff", "openapi-spec-validator", "import-linter")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    # import-linter builds its graph from the source trees; it needs no installed workspace.
    session.run("lint-imports", env={"PYTHONPATH": os.pathsep.join(SOURCE_ROOTS)})
    for document in (
        "spec/openapi.yaml",
        "generated/openapi.bundled.yaml",
        "generated/openapi.connexion.yaml",
    ):
        session.run("openapi-spec-validator", document)


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict over the workspace packages."""
    install_workspace(session, "mypy", "types-PyYAML", *TEST_TOOLS)
    session.run("mypy")


@nox.session
def generate(session: nox.Session) -> None:
    """Build generated/ and docs/reference/error-codes.md from spec/."""
    session.install(*CONSTRAINTS, "datamodel-code-generator", "PyYAML", "openapi-spec-validator")
    session.run("python", "scripts/generate.py")


@nox.session
def generate_check(session: nox.Session) -> None:
    """Fail when generated/ differs from what spec/ produces."""
    session.install(*CONSTRAINTS, "datamodel-code-generator", "PyYAML", "openapi-spec-validator")
    session.run("python", "scripts/generate.py", "--check")


@nox.session
def contract(session: nox.Session) -> None:
    """schemathesis (ci/schemathesis.toml) against the live `coordinator serve` on PostgreSQL."""
    install_workspace(session, "schemathesis", "pytest")
    session.run("python", "scripts/contract.py", *session.posargs)


@nox.session
def demo(session: nox.Session) -> None:
    """The main job on the embedded default: check, explain, graph and package every example."""
    install_workspace(session)
    session.run("python", "scripts/demo.py", *session.posargs)


def peer_python(session: nox.Session) -> str:
    """The Python of the service benchmark's peer (DBOS Transact, pinned), in a virtual
    environment of its own beside the session's: never the workspace's environment."""
    location = Path(session.virtualenv.location).parent / "bench_peer"
    python = location / "bin" / "python"
    if not python.exists():
        session.run(
            "uv", "venv", "--quiet", "--python", sys.executable, str(location), external=True
        )
    session.run(
        "uv", "pip", "install", "--quiet", "--python", str(python),
        "-r", str(ROOT / "scripts" / "bench_peer" / "requirements.txt"),
        external=True,
    )  # fmt: skip
    return str(python)


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks that print ratios against a baseline measured in the same run.

    `nox -s bench -- functions`, `-- check`, `-- sealing`, `-- service` or `-- parked`; no
    argument runs the first three (`service`, our service beside DBOS Transact and PostgreSQL's
    commit rate, and `parked`, many runs parked in waits, take minutes). Arguments after a
    `service` or `parked` target go to its script: `nox -s bench -- service --runs 40
    --rounds 1`, `nox -s bench -- parked --runs 20000`.
    """
    install_workspace(session)
    targets = session.posargs or ["functions", "check", "sealing"]
    with_arguments = [index for index, target in enumerate(targets) if target in ARGUMENTED]
    arguments: list[str] = []
    if with_arguments:
        index = with_arguments[0]
        targets, arguments = targets[: index + 1], targets[index + 1 :]
    for target in targets:
        if target == "service":
            python = peer_python(session)
            session.run("python", "scripts/bench_service.py", "--peer-python", python, *arguments)
        elif target == "parked":
            session.run("python", "scripts/bench_parked.py", *arguments)
        else:
            session.run("python", f"scripts/bench_{target}.py")
