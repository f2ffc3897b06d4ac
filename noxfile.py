"""The one task runner, local and CI: tests, lint, typecheck, generate, wheels, demo, bench."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import nox

ROOT = Path(__file__).parent
CONSTRAINTS = ("-c", str(ROOT / "constraints.txt"))
# Every distribution of the workspace: its name and its project directory. The sessions install
# them from wheels built here (never `-e`): what a user installs is what the tests test, so a
# file the product reads at run time that a wheel lacks fails the suite.
DISTRIBUTIONS = (
    ("coordinator-models", ROOT / "generated"),
    ("coordinator-core", ROOT / "packages" / "coordinator-core"),
    ("coordinatorctl", ROOT / "packages" / "coordinatorctl"),
    ("coordinator-api", ROOT / "packages" / "coordinator-api"),
    ("coordinator-sandbox", ROOT / "packages" / "coordinator-sandbox"),
)
# The extras the sessions install: the service half, tracing (installed, off unless configured),
# the deployment commands (the install without them is tested by
# tests/e2e/test_right_sized_install.py) and the test kit's PostgreSQL driver.
EXTRAS = {
    "coordinator-core": "[service,tracing]",
    "coordinatorctl": "[deploy]",
    "coordinator-sandbox": "[testing]",
}
# Where tests find the wheels this session installed (tests/support/wheels.py).
WHEELS_VARIABLE = "COORDINATOR_TEST_WHEELS"
# The source roots of the workspace packages, for tools that read the code without installing it.
SOURCE_ROOTS = tuple(
    str(ROOT / "packages" / package / "src")
    for package in ("coordinator-core", "coordinatorctl", "coordinator-api", "coordinator-sandbox")
)
TEST_TOOLS = (
    "pytest",
    "pytest-xdist",
    # Every test has its tier's timeout (tests/conftest.py); a required plugin (pyproject.toml).
    "pytest-timeout",
    "hypothesis",
    "schemathesis",
    "openapi-core",
    "openapi-spec-validator",
    # tests/support/wheels.py builds wheels and tests/e2e/test_right_sized_install.py makes a
    # clean environment with it; on PATH in the session even when nox runs from .venv/bin.
    "uv",
    # tests/e2e/test_generated_client.py generates a client from the served document.
    "openapi-python-client",
    # tests/unit/test_import_graph.py reads the import graph (no cycles, ARCHITECTURE rule 11).
    "grimp",
    # The differential tests: canonical JSON against rfc8785 (tests/unit/test_values_rfc8785.py),
    # the format checkers against jsonschema's, which need fqdn and rfc3986-validator for
    # hostname and uri (tests/unit/definition/test_schema_formats_jsonschema.py).
    "rfc8785",
    "fqdn",
    "rfc3986-validator",
)

# Benchmark targets whose script takes the arguments that follow them.
ARGUMENTED = ("service", "reads", "parked")

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["generate_check", "lint", "typecheck", "tests"]
# pip byte-compiles on install, uv does not; this machine sets PYTHONDONTWRITEBYTECODE=1.
os.environ.setdefault("UV_COMPILE_BYTECODE", "1")


def uv_command() -> str:
    """The uv beside the running nox (`.venv/bin/python -m nox` need not have it on PATH)."""
    return shutil.which("uv", path=str(Path(sys.executable).parent)) or "uv"


def build_wheels(
    run: Callable[..., object],
    out: Path,
    distributions: Sequence[tuple[str, Path]] = DISTRIBUTIONS,
) -> None:
    """One wheel per distribution, built from the checkout into `out` (`uv build --wheel`,
    hatchling pinned by constraints.txt), with `run` (a session's `run` or `run_install`)."""
    for _, directory in distributions:
        run(
            uv_command(), "build", "--quiet", "--wheel", "--build-constraints",
            str(ROOT / "constraints.txt"), "--out-dir", str(out), str(directory),
            external=True, silent=True,
        )  # fmt: skip


# The wheels built in this nox run, by the first session that built them: the later sessions of
# the same run (`nox -s unit store api`) install those, the checkout being the same.
BUILT_THIS_RUN: list[Path] = []
# Beside a session's wheels, the digest of the sources each was built from; in the session's
# environment, what its last install of the workspace was (the wheels' digests and the tools).
DIGESTS_FILE = "sources.json"
INSTALLED_FILE = "coordinator-workspace.json"


def source_digest(directory: Path) -> str | None:
    """A digest of what a wheel of `directory` is built from: every file git does not ignore
    under it (tracked or not, as hatchling selects them), with the build constraints; None
    outside a git checkout (the wheel is then always built)."""
    import hashlib
    import subprocess

    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "."],
            cwd=directory, capture_output=True, check=True, timeout=60,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    digest = hashlib.sha256((ROOT / "constraints.txt").read_bytes())
    for name in sorted(set(listed.decode().split("\0")) - {""}):
        path = directory / name
        if path.is_file():  # a deleted file git still tracks is not part of the wheel
            digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def session_wheels(session: nox.Session) -> Path:
    """The wheels of this session, beside its environment, brought up to date with
    `run_install` (or the ones an earlier session of this nox run built): a wheel whose sources
    have not changed since it was built is kept, the others are built afresh. `--install-only`
    builds them, `--no-install` keeps the last build."""
    if BUILT_THIS_RUN:
        return BUILT_THIS_RUN[0]
    out = Path(session.virtualenv.location).parent / f"{session.name}-wheels"
    recorded_file = out / DIGESTS_FILE
    recorded = json.loads(recorded_file.read_text()) if recorded_file.is_file() else {}
    digests = {name: source_digest(directory) for name, directory in DISTRIBUTIONS}
    stale = [
        (name, directory)
        for name, directory in DISTRIBUTIONS
        if digests[name] is None
        or recorded.get(name) != digests[name]
        or next(out.glob(wheel_glob(name)), None) is None
    ]
    if not stale:
        BUILT_THIS_RUN.append(out)
        return out
    fresh = out.with_name(out.name + ".new")
    shutil.rmtree(fresh, ignore_errors=True)
    build_wheels(session.run_install, fresh, stale)
    if fresh.is_dir():  # not with --no-install
        out.mkdir(exist_ok=True)
        for name, _ in stale:
            for old in out.glob(wheel_glob(name)):
                old.unlink()
            for built in fresh.glob(wheel_glob(name)):
                built.rename(out / built.name)
            recorded[name] = digests[name]
        shutil.rmtree(fresh)
        recorded_file.write_text(json.dumps(recorded, indent=2, sort_keys=True))
        BUILT_THIS_RUN.append(out)
    return out


def wheel_glob(name: str) -> str:
    return name.replace("-", "_") + "-*.whl"


def install_workspace(session: nox.Session, *extra: str) -> None:
    """Install the built wheels (with the service and deploy extras) and `extra` into the
    session's environment, replacing any earlier install of the workspace, editable or not.
    When the environment already holds these very wheels and tools (the same sources, as
    `session_wheels` records them) nothing is installed again."""
    out = session_wheels(session)
    references = []
    for name, _ in DISTRIBUTIONS:
        wheel = next(out.glob(wheel_glob(name)), None)
        if wheel is None:
            session.error(f"no wheel of {name} in {out}: run the session without --no-install")
        references.append(f"{name}{EXTRAS.get(name, '')} @ {wheel.resolve().as_uri()}")
    session.env[WHEELS_VARIABLE] = str(out)
    digests = out / DIGESTS_FILE
    wanted = {
        "sources": json.loads(digests.read_text()) if digests.is_file() else None,
        "requirements": [*references, *extra],
        "constraints": (ROOT / "constraints.txt").read_text(),
    }
    # Outside a git checkout the sources have no digest: then the wheels are always installed.
    known = isinstance(wanted["sources"], dict) and None not in wanted["sources"].values()
    installed = Path(session.virtualenv.location) / INSTALLED_FILE
    if known and installed.is_file() and json.loads(installed.read_text()) == wanted:
        session.log("the workspace's wheels and the tools are installed already")
        return
    installed.unlink(missing_ok=True)
    if session.venv_backend == "uv":
        reinstall = [f"--reinstall-package={name}" for name, _ in DISTRIBUTIONS]
        session.install(*CONSTRAINTS, *reinstall, *references, *extra)
    else:
        session.install("--force-reinstall", "--no-deps", *references)
        session.install(*CONSTRAINTS, *references, *extra)
    if known:
        installed.write_text(json.dumps(wanted, indent=2))


# The tiers of the test suite: each folder of tests/ that `nox -s tests` runs has a session of
# its name that runs it alone (tests/chaos and tests/browser have their own sessions).
TIERS = ("unit", "store", "adapters", "api", "sandbox", "integration", "acceptance", "e2e")
# pytest's options when no arguments follow `--`, and the slowest tests every run prints.
PYTEST_DEFAULTS = ("-n", "2", "-q")
DURATIONS = "--durations=25"
# pytest keeps each test module it rewrote (its assertions) as bytecode in `__pycache__` (ignored by
# git) unless PYTHONDONTWRITEBYTECODE is set, as it is on this machine: then every run, and every
# xdist worker, rewrites and compiles the whole test tree again (seconds of each run's start).
PYTEST_ENV: dict[str, str | None] = {"PYTHONDONTWRITEBYTECODE": None}


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite (every tier in one pytest run) against the workspace installed from
    wheels; arguments after `--` replace `-n 2 -q` (and may name paths)."""
    install_workspace(session, *TEST_TOOLS)
    args = session.posargs or PYTEST_DEFAULTS
    session.run("pytest", DURATIONS, *args, env=PYTEST_ENV)


def tier_session(tier: str) -> Callable[[nox.Session], None]:
    def run(session: nox.Session) -> None:
        install_workspace(session, *TEST_TOOLS)
        args = session.posargs or PYTEST_DEFAULTS
        session.run("pytest", DURATIONS, *args, f"tests/{tier}", env=PYTEST_ENV)

    run.__doc__ = (
        f"tests/{tier} alone, installed as `tests` is; arguments after `--` replace `-n 2 -q`."
    )
    return run


for _tier in TIERS:
    nox.session(name=_tier, default=False)(tier_session(_tier))


# The browser suite's driver: Playwright on the system's Chromium (never a downloaded browser).
BROWSER_TOOLS = ("playwright",)
CHROMIUM = "/usr/bin/chromium"


@nox.session
def browser(session: nox.Session) -> None:
    """The operator console in headless Chromium (tests/browser) against a live service.
    Installs Debian's chromium when it is missing and this runs as root with apt-get; otherwise
    the suite skips with a message (and fails under CI=true)."""
    if not os.access(CHROMIUM, os.X_OK):
        if os.geteuid() == 0 and shutil.which("apt-get"):
            import subprocess

            env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
            install = ["apt-get", "install", "-y", "-q", "--no-install-recommends",
                       "chromium", "chromium-driver"]  # fmt: skip
            session.log("installing Debian's chromium and chromium-driver")
            if subprocess.run(install, env=env, check=False).returncode != 0:
                subprocess.run(["apt-get", "update", "-q"], env=env, check=True)
                subprocess.run(install, env=env, check=True)
        else:
            session.log(f"no {CHROMIUM} and not root with apt-get: the browser tests skip")
    install_workspace(session, *TEST_TOOLS, *BROWSER_TOOLS)
    session.run("pytest", "--browser", "-q", "-p", "no:warnings", "-p", "no:cacheprovider",
                "tests/browser", *session.posargs, env=PYTEST_ENV)  # fmt: skip


@nox.session
def chaos(session: nox.Session) -> None:
    """The chaos suite (tests/chaos): SIGKILLs at random moments and at every failpoint, lost
    product responses, PostgreSQL restarts and a killed postmaster, restore drills; prints each
    campaign's table. The bounded profile by default (CI); `nox -s chaos -- --long` for the
    long one."""
    install_workspace(session, *TEST_TOOLS)
    session.run("pytest", "--chaos", "-p", "no:cacheprovider", "-s", "-q", "tests/chaos",
                *session.posargs, env=PYTEST_ENV)  # fmt: skip


# `nox -s mutants` (docs/testing.md "Mutation testing"; never in CI, nor in `nox` alone): mutmut
# over the engine and the store's write fences. mutmut names a module by its path under `src/`
# and runs pytest beside the `tests/` it copies, so it runs in `mutants/` (git-ignored), where
# `src` is coordinator-core's sources and `tests` and `pyproject.toml` (`[tool.mutmut]`) are the
# workspace's; mutmut keeps its copies and results in `mutants/mutants/`.
MUTANTS = ROOT / "mutants"
MUTANTS_LINKS = (
    ("src", ROOT / "packages" / "coordinator-core" / "src"),
    ("tests", ROOT / "tests"),
    ("pyproject.toml", ROOT / "pyproject.toml"),
)
# What `nox -s mutants` mutates without arguments (mutmut's mutant names, globs allowed): the
# engine, the invariants every store write keeps, and the fences of writes.py (the mid-attempt
# fence and the finish, which names the claim); the sealing of protected values and the audit
# journal's entries, keyed references, verification, and what restore detection reads of it
# (the store's heads, torn tails, the restore witness). The rest of writes.py is mutated but
# not run.
MUTATION_SCOPE = (
    "coordinator_core.engine.*",
    "coordinator_core.shell.store.invariants.*",
    "coordinator_core.shell.store.writes.xǁRunWritesǁ_fence_txn__mutmut_*",
    "coordinator_core.shell.store.writes.xǁRunWritesǁrecord_step_progress__mutmut_*",
    "coordinator_core.shell.store.writes.xǁRunWritesǁcomplete_step__mutmut_*",
    "coordinator_core.shell.sealing.*",
    "coordinator_core.shell.audit.entries.*",
    "coordinator_core.shell.audit.heads.*",
    "coordinator_core.shell.audit.references.*",
    "coordinator_core.shell.audit.verify.*",
    "coordinator_core.shell.audit.witness.*",
)


@nox.session(default=False)
def mutants(session: nox.Session) -> None:
    """Mutation testing (mutmut) of the engine, the store's write fences, sealing and the audit
    journal; prints the survivors (`path:line: original → mutated [status]`). Arguments after
    `--` name the mutants to run instead
    (`nox -s mutants -- "coordinator_core.engine.steps.x__call_attempt*"`). The whole scope
    takes hours on a 2-core machine; each run starts afresh from the checkout."""
    install_workspace(session, *TEST_TOOLS, "mutmut", "mypy", "types-PyYAML")
    shutil.rmtree(MUTANTS / "mutants", ignore_errors=True)
    MUTANTS.mkdir(exist_ok=True)
    for name, target in MUTANTS_LINKS:
        link = MUTANTS / name
        if not link.is_symlink():
            link.symlink_to(target)
    with session.chdir(MUTANTS):
        session.run("mutmut", "run", *(session.posargs or MUTATION_SCOPE))
        session.run("python", str(ROOT / "scripts" / "mutants_report.py"))


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


@nox.session(venv_backend="none")
def wheels(session: nox.Session) -> None:
    """Build the wheel of every distribution into dist/ (or the directory given after `--`),
    for `pip install dist/….whl` (docs/installing.md)."""
    out = Path(session.posargs[0]) if session.posargs else ROOT / "dist"
    for stale in out.glob("*.whl"):
        stale.unlink()
    build_wheels(session.run, out)
    session.log("built " + ", ".join(sorted(path.name for path in out.glob("*.whl"))))


def peer_python(session: nox.Session) -> str:
    """The Python of the service benchmark's peer (DBOS Transact, pinned), in a virtual
    environment of its own beside the session's: never the workspace's environment."""
    location = Path(session.virtualenv.location).parent / "bench_peer"
    python = location / "bin" / "python"
    if not python.exists():
        session.run(
            uv_command(), "venv", "--quiet", "--python", sys.executable, str(location),
            external=True,
        )  # fmt: skip
    session.run(
        uv_command(), "pip", "install", "--quiet", "--python", str(python),
        "-r", str(ROOT / "scripts" / "bench_peer" / "requirements.txt"),
        external=True,
    )  # fmt: skip
    return str(python)


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks that print ratios against a baseline measured in the same run.

    `nox -s bench -- functions`, `-- check`, `-- sealing`, `-- service`, `-- reads` or
    `-- parked`; no argument runs the first three (`service`, our service beside DBOS Transact
    in one and in `--peer-processes` processes and PostgreSQL's commit rate, and on the
    embedded SQLite store beside DBOS on SQLite and SQLite's commit rate, `reads`, the serve CPU
    of a status GET, an inspection and a list beside DBOS's status read, and `parked`, many
    runs parked in waits, take minutes). Arguments after a `service`, `reads` or `parked`
    target go to its script: `nox -s bench -- service --runs 40 --rounds 1`,
    `nox -s bench -- reads --requests 500`, `nox -s bench -- parked --runs 20000`.
    `nox -s bench_smoke` runs every target once at a smoke size (CI).
    """
    install_workspace(session)
    targets = session.posargs or ["functions", "check", "sealing"]
    with_arguments = [index for index, target in enumerate(targets) if target in ARGUMENTED]
    arguments: list[str] = []
    if with_arguments:
        index = with_arguments[0]
        targets, arguments = targets[: index + 1], targets[index + 1 :]
    for target in targets:
        if target in ("service", "reads"):
            python = peer_python(session)
            script = f"scripts/bench_{target}.py"
            session.run("python", script, "--peer-python", python, *arguments)
        elif target == "parked":
            session.run("python", "scripts/bench_parked.py", *arguments)
        else:
            session.run("python", f"scripts/bench_{target}.py")


# Every benchmark target, in the order bench_smoke runs them.
BENCH_TARGETS = ("functions", "check", "sealing", "service", "reads", "parked")


@nox.session
def bench_smoke(session: nox.Session) -> None:
    """Every benchmark (`nox -s bench -- <target>`) once at a smoke size, in CI: a few runs,
    one round, no thresholds, so a broken benchmark fails the build. Its figures mean
    nothing. `parked` runs with `--worker`, as the README's command does; the service bench
    runs once more with its scaling options (`--extra-reads`, `--prefill`)."""
    install_workspace(session)
    python = peer_python(session)
    for target in BENCH_TARGETS:
        arguments = ["--smoke"]
        if target in ("service", "reads"):
            arguments += ["--peer-python", python]
        elif target == "parked":
            arguments.append("--worker")
        session.run("python", f"scripts/bench_{target}.py", *arguments)
    # The service bench's scaling options, on ours alone: a call step more, a prefilled store.
    session.run(
        "python",
        "scripts/bench_service.py",
        "--smoke",
        "--configurations",
        "serve+worker",
        "--concurrencies",
        "1",
        "--extra-reads",
        "1",
        "--prefill",
        "100",
    )
