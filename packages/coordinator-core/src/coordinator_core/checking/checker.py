"""`check`: the whole offline proof of a project, in the order of contract 02 §4.1.

Every stage reports every independent problem it finds; later stages run only when the
conditions of 02 §4.1 hold, so no finding is the mere consequence of another (§4.2).
"""

from __future__ import annotations

import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from coordinator_core import limits
from coordinator_core.authoring.decode import AuthoredFile, read_authored_file
from coordinator_core.authoring.model import WorkflowModel, model_from_authored
from coordinator_core.config.read import RuntimeCheck, check_bindings, check_runtime_file
from coordinator_core.definition.graph import GraphFacts
from coordinator_core.definition.ir import Definition, build_definition
from coordinator_core.definition.rules import FUNCTIONS_FILE, WORKFLOW_FILE, check_workflow
from coordinator_core.definition.snapshot import Snapshot, build_snapshot
from coordinator_core.errors import Diagnostic
from coordinator_core.functions import CompiledFunctions, compile_functions
from coordinator_core.scenarios import ScenarioReport, run_scenarios

__all__ = [
    "DefinitionCheck",
    "GraphFacts",
    "ProjectCheck",
    "check_definition",
    "check_project",
    "check_runtime_only",
    "finalize",
]

RUNTIME_FILE: Final = "runtime.yaml"
SCENARIOS_FILE: Final = "scenarios.yaml"


@dataclass
class DefinitionCheck:
    """The definition part of `check` (02 §4.1 steps 2–7): the workflow as read, its typed
    model, the compiled functions, the graph facts and, when every rule passed, the IR."""

    diagnostics: list[Diagnostic]
    workflow: AuthoredFile | None = None
    source: str | None = None
    model: WorkflowModel | None = None
    program: CompiledFunctions | None = None
    graph: GraphFacts | None = None
    ir: Definition | None = None

    @property
    def decoded(self) -> dict[str, Any] | None:
        return self.workflow.decoded if self.workflow is not None else None

    @property
    def snapshot(self) -> Snapshot | None:
        """The IR's canonical form (02 §8), when the definition was accepted."""
        return self.ir.snapshot if self.ir is not None else None


@dataclass
class ProjectCheck:
    """Everything `check` learned about a project; diagnostics are final (sorted, capped)."""

    diagnostics: list[Diagnostic]
    definition: DefinitionCheck | None = None
    runtime: list[RuntimeCheck] = field(default_factory=list)
    scenarios: AuthoredFile | None = None
    scenario_report: ScenarioReport | None = None  # when cases ran
    # The text of every file read, as authored (never substituted), by its diagnostic `file`
    # name: what a text report shows back to the author around a position (its code frame).
    sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def has_errors(self) -> bool:
        return any(d.effective_severity == "error" for d in self.diagnostics)

    @property
    def has_warnings(self) -> bool:
        return any(d.effective_severity == "warning" for d in self.diagnostics)


# -- project directory --------------------------------------------------------------------


def _keep_source(sources: dict[str, str], name: str, data: bytes | None) -> None:
    if data is None:
        return
    try:
        sources[name] = data.decode("utf-8")
    except UnicodeDecodeError:
        return


def _entry_diagnostic(code: str, name: str) -> Diagnostic:
    return Diagnostic(code, path="", file=name)


def _read_regular(path: Path) -> bytes | None:
    """The bytes of a regular, non-symlink file, or None."""
    try:
        info = path.lstat()
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    try:
        return path.read_bytes()
    except OSError:
        return None


def _scan_directory(directory: Path, out: list[Diagnostic]) -> list[str] | None:
    """P1, P3, P4, P5: the names of the project's other YAML files to consider under P6.

    A project may sit where people keep it, such as a repository root: only the files the
    project format names are the project's. An entry whose name starts with `.` (`.git`,
    `.github`, `.pre-commit-config.yaml`, `.coordinator`) is skipped without a word; a child
    directory otherwise gets the P4 warning; a symlink or special file is refused (P5) only
    under the names `runtime.yaml` and `scenarios.yaml` (`workflow.yaml` is P2's). The other
    regular `*.yaml`/`*.yml` files are returned: P6 reads only those that name a Coordinator
    format (`_names_a_coordinator_format`), so `docker-compose.yml` is never the project's.
    """
    try:
        names = sorted(entry.name for entry in directory.iterdir())
    except OSError:
        out.append(Diagnostic("coordinator.definition.read", path="", file=WORKFLOW_FILE))
        return None
    if len(names) > limits.PROJECT_MAX_ENTRIES:
        out.append(_entry_diagnostic("coordinator.project.too-many-files", "."))
        names = names[: limits.PROJECT_MAX_ENTRIES]
    extra_yaml: list[str] = []
    for name in names:
        if name.startswith("."):
            continue
        path = directory / name
        try:
            info = path.lstat()
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode):
            out.append(_entry_diagnostic("coordinator.project.unread-directory", name))
            continue
        if not name.endswith((".yaml", ".yml")):
            continue
        if not stat.S_ISREG(info.st_mode):
            if name in (RUNTIME_FILE, SCENARIOS_FILE):  # P2 speaks for workflow.yaml
                out.append(_entry_diagnostic("coordinator.project.not-a-regular-file", name))
            continue
        if name not in (WORKFLOW_FILE, RUNTIME_FILE, SCENARIOS_FILE):
            extra_yaml.append(name)
    return extra_yaml


_COORDINATOR_MARKERS: Final = (
    b"id.registrystack.org/formats/coordinator/",
    limits.KIND_PROJECT.encode("ascii"),
    limits.KIND_RUNTIME.encode("ascii"),
    limits.KIND_SCENARIOS.encode("ascii"),
)


def _names_a_coordinator_format(data: bytes) -> bool:
    """Whether another YAML file claims to be a Coordinator document: its text names a
    Coordinator `apiVersion` or one of the three authored kinds. Such a file is read under P6
    (a misplaced or broken project file is reported); any other YAML file is not the
    project's and is ignored, whatever it holds (anchors, tabs, a foreign `kind`, no envelope).
    """
    return any(marker in data for marker in _COORDINATOR_MARKERS)


def _read_workflow_bytes(directory: Path, out: list[Diagnostic]) -> bytes | None:
    """P1 (missing workflow.yaml) and P2 (not a regular file, too large)."""
    path = directory / WORKFLOW_FILE
    try:
        info = path.lstat()
    except OSError:
        out.append(Diagnostic("coordinator.definition.read", path="", file=WORKFLOW_FILE))
        return None
    if not stat.S_ISREG(info.st_mode) or info.st_size > limits.YAML_MAX_BYTES:
        out.append(Diagnostic("coordinator.definition.file", path="", file=WORKFLOW_FILE))
        return None
    data = _read_regular(path)
    if data is None:
        out.append(Diagnostic("coordinator.definition.read", path="", file=WORKFLOW_FILE))
    return data


def _functions_diagnostic(code: str, workflow: AuthoredFile | None) -> Diagnostic:
    line, column = workflow.position("/functionsFile") if workflow else (None, None)
    return Diagnostic(
        code,
        path="/functionsFile",
        file=WORKFLOW_FILE,
        line=line if workflow and workflow.document else None,
        column=column if workflow and workflow.document else None,
        artifact=limits.KIND_PROJECT,
    )


def _read_functions(
    directory: Path, workflow: AuthoredFile | None, out: list[Diagnostic]
) -> str | None:
    """W2: functions.rhai exists, is a regular non-symlink file and is valid UTF-8."""
    path = directory / FUNCTIONS_FILE
    try:
        info = path.lstat()
    except OSError:
        out.append(_functions_diagnostic("coordinator.definition.read", workflow))
        return None
    data = _read_regular(path) if stat.S_ISREG(info.st_mode) else None
    if data is None:
        out.append(_functions_diagnostic("coordinator.definition.functions-file", workflow))
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        out.append(_functions_diagnostic("coordinator.definition.functions-file", workflow))
        return None


# -- definition -----------------------------------------------------------------------------


def _compile(source: str, out: list[Diagnostic]) -> CompiledFunctions | None:
    """F1–F3: compile functions.rhai; its errors are reported at their own positions. A call
    that nothing defines (`timestamp()`, `s.len()`) compiles, but fails whenever it runs: it
    is a warning, `coordinator.function.unknown-call`, at the call."""
    result = compile_functions(source)
    for error in result.errors:
        out.append(
            Diagnostic(
                error.code,
                path="",
                file=FUNCTIONS_FILE,
                line=error.line,
                column=error.column,
                message=error.message,
                hint=error.hint,
                artifact="functions",
            )
        )
    if result.program is not None:
        for call in result.program.unresolved_calls:
            count = "1 argument" if call.arguments == 1 else f"{call.arguments} arguments"
            out.append(
                Diagnostic(
                    "coordinator.function.unknown-call",
                    path="",
                    file=FUNCTIONS_FILE,
                    line=call.line,
                    column=call.column,
                    message=(
                        f"The call of {call.name} with {count} (a method call's receiver"
                        " counts) matches no function of functions.rhai and none of the"
                        " function library; it fails whenever it runs."
                    ),
                    artifact="functions",
                )
            )
    return result.program


def check_definition(
    authored: AuthoredFile | None,
    source: str | None,
    out: list[Diagnostic],
) -> DefinitionCheck:
    """02 §4.1 steps 3–7 over an already read workflow and functions source: the typed model
    is built once, every definition rule runs on it, and a clean one becomes the IR."""
    result = DefinitionCheck(diagnostics=out, workflow=authored, source=source)
    functions_start = len(out)
    if source is not None:
        result.program = _compile(source, out)
    functions_failed = source is None or len(out) > functions_start
    if authored is None:
        return result
    model = model_from_authored(authored)
    if model is None:
        return result
    result.model = model
    program = result.program
    functions = program.functions if not functions_failed and program is not None else None
    result.graph = check_workflow(model, functions, out)
    definition_errors = any(
        d.effective_severity == "error" and d.file in (WORKFLOW_FILE, FUNCTIONS_FILE) for d in out
    )
    if definition_errors or source is None or program is None:
        return result
    snapshot = build_snapshot(model.document, source)
    if len(snapshot.canonical) > limits.SNAPSHOT_MAX_BYTES:
        out.append(
            Diagnostic(
                "coordinator.definition.snapshot-limit",
                path="",
                file=WORKFLOW_FILE,
                artifact=limits.KIND_PROJECT,
            )
        )
    else:
        result.ir = build_definition(model, snapshot, program)
    return result


# -- the whole check ------------------------------------------------------------------------


def _file_rank(name: str | None, runtime_files: Sequence[str]) -> tuple[int, str]:
    if name == WORKFLOW_FILE:
        return (0, "")
    if name == FUNCTIONS_FILE:
        return (1, "")
    if name in runtime_files:
        return (2, str(name))
    if name == SCENARIOS_FILE:
        return (3, "")
    return (4, name or "")


def finalize(
    diagnostics: Sequence[Diagnostic], runtime_files: Sequence[str] = ()
) -> list[Diagnostic]:
    """Deduplicate, cap at 100 per file and sort as contract 02 §4.2–§4.3 require."""
    seen: set[tuple[Any, ...]] = set()
    per_file: dict[str | None, int] = {}
    capped: set[str | None] = set()
    kept: list[Diagnostic] = []
    for diagnostic in diagnostics:
        key = diagnostic.dedupe_key()
        if key in seen:
            continue
        seen.add(key)
        if diagnostic.file in capped:
            continue
        count = per_file.get(diagnostic.file, 0)
        if count == limits.MAX_DIAGNOSTICS_PER_FILE:
            capped.add(diagnostic.file)
            kept.append(
                Diagnostic(
                    "config.too-many-problems",
                    path="",
                    file=diagnostic.file,
                    artifact=diagnostic.artifact,
                )
            )
            continue
        per_file[diagnostic.file] = count + 1
        kept.append(diagnostic)

    def order(d: Diagnostic) -> tuple[Any, ...]:
        whole_file = d.line is None
        return (
            _file_rank(d.file, runtime_files),
            not whole_file,
            d.line or 0,
            d.column or 0,
            d.path.encode("utf-8"),
            d.code,
        )

    return sorted(kept, key=order)


def check_project(
    directory: Path,
    *,
    runtime_config: Path | None = None,
    environment: Mapping[str, str] | None = None,
    definition_only: bool = False,
) -> ProjectCheck:
    """Check a project directory, its runtime file(s) and its scenarios document.

    `definition_only` is the part `package` runs (02 §9.1): the definition, plus only the
    runtime file given by `runtime_config`; the project's own runtime.yaml and scenarios.yaml
    are not read.
    """
    out: list[Diagnostic] = []
    runtime_names: list[str] = []
    sources: dict[str, str] = {}
    if not directory.is_dir():
        out.append(Diagnostic("coordinator.definition.read", path="", file=WORKFLOW_FILE))
        return ProjectCheck(finalize(out))
    extra_yaml = _scan_directory(directory, out)
    if extra_yaml is None:
        return ProjectCheck(finalize(out))
    workflow_bytes = _read_workflow_bytes(directory, out)
    _keep_source(sources, WORKFLOW_FILE, workflow_bytes)
    authored = None
    if workflow_bytes is not None:
        authored = read_authored_file(
            workflow_bytes, file=WORKFLOW_FILE, expected_kind=limits.KIND_PROJECT
        )
        out.extend(authored.diagnostics)
    source = _read_functions(directory, authored, out) if workflow_bytes is not None else None
    if workflow_bytes is None and (directory / FUNCTIONS_FILE).exists():
        source = _read_functions(directory, None, out)
    if source is not None:
        sources[FUNCTIONS_FILE] = source
    for name in extra_yaml:
        data = _read_regular(directory / name)
        if data is not None and _names_a_coordinator_format(data):
            _keep_source(sources, name, data)
            out.extend(read_authored_file(data, file=name, expected_kind=None).diagnostics)
    definition = check_definition(authored, source, out)

    runtime_checks = _check_runtime_files(
        None if definition_only else directory,
        runtime_config,
        environment,
        definition,
        out,
        runtime_names,
        sources,
    )
    # C13 (04 §3): the responseSchemas of the runtime file given with --runtime-config, which
    # _check_runtime_files checks first.
    given = runtime_checks[0].response_schemas() if runtime_config and runtime_checks else {}
    scenarios = None
    report = None
    scenarios_path = directory / SCENARIOS_FILE
    if not definition_only and _is_regular(scenarios_path):
        data = _read_regular(scenarios_path)
        _keep_source(sources, SCENARIOS_FILE, data)
        if data is not None:
            scenarios = read_authored_file(
                data, file=SCENARIOS_FILE, expected_kind=limits.KIND_SCENARIOS
            )
            out.extend(scenarios.diagnostics)
            if definition.ir is not None and scenarios.decoded is not None:
                # 02 §4.1 step 9: the document rules, then every case, on a valid definition.
                report = run_scenarios(scenarios, definition.ir, given)
                out.extend(report.diagnostics)
    return ProjectCheck(
        finalize(out, runtime_names), definition, runtime_checks, scenarios, report, sources
    )


def _check_runtime_files(
    directory: Path | None,
    runtime_config: Path | None,
    environment: Mapping[str, str] | None,
    definition: DefinitionCheck | None,
    out: list[Diagnostic],
    names: list[str],
    sources: dict[str, str] | None = None,
) -> list[RuntimeCheck]:
    """02 §4.1 step 8: each runtime file alone, then its bindings against the workflow."""
    candidates: list[tuple[Path, str]] = []
    if runtime_config is not None:
        candidates.append((runtime_config, str(runtime_config)))
    if directory is not None:
        own = directory / RUNTIME_FILE
        if _is_regular(own):  # a symlink or special file is P5's finding alone
            same = runtime_config is not None and _same_file(own, runtime_config)
            if not same:
                candidates.append((own, RUNTIME_FILE))
    checks = []
    for path, display in candidates:
        names.append(display)
        if sources is not None:
            # The file as written: a code frame never shows a substituted value (the frame
            # renderer also shows no value of a runtime file at all).
            _keep_source(sources, display, _read_regular(path))
        runtime = check_runtime_file(path, display_file=display, environment=environment)
        out.extend(runtime.diagnostics)
        workflow_ok = (
            definition is not None
            and definition.decoded is not None
            and definition.workflow is not None
            and not definition.workflow.has_findings_under("/operations")
            and not definition.workflow.has_findings_under("/triggers")
        )
        if workflow_ok and runtime.ok_for_bindings and definition is not None:
            assert definition.decoded is not None
            assert definition.workflow is not None
            out.extend(check_bindings(definition.decoded, runtime, definition.workflow.position))
        checks.append(runtime)
    return checks


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False


def _same_file(first: Path, second: Path) -> bool:
    try:
        return first.resolve() == second.resolve()
    except OSError:
        return False


def check_runtime_only(
    runtime_config: Path, environment: Mapping[str, str] | None = None
) -> ProjectCheck:
    """`check --runtime-config FILE` without `--project`: the standalone runtime-file check."""
    out: list[Diagnostic] = []
    names: list[str] = []
    sources: dict[str, str] = {}
    checks = _check_runtime_files(None, runtime_config, environment, None, out, names, sources)
    return ProjectCheck(finalize(out, names), None, checks, sources=sources)
