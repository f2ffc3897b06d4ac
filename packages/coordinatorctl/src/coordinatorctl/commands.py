"""The offline commands of contract 09 §2, each returning an Outcome for the report layer."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
from collections.abc import Mapping
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coordinator_core import limits
from coordinator_core.errors import Diagnostic
from coordinatorctl.report import Outcome

if TYPE_CHECKING:
    from coordinator_core.shell.audit.writer import JournalPosition

__all__ = [
    "audit_verify",
    "check",
    "evaluate",
    "explain",
    "init",
    "package",
    "schema",
    "schema_operation",
    "test",
]


def _valid_text(result: Mapping[str, Any]) -> str:
    return (
        f"Valid workflow {result['workflow']} version {result['version']}\n"
        f"Revision: {result['revision']}\n"
        f"Definition: {result['definitionDigest']}\n"
    )


def check(
    project: Path | None,
    *,
    runtime_config: Path | None,
    explain: bool = False,
    deny_warnings: bool = False,
    environment: Mapping[str, str] | None = None,
    graph: str | None = None,
    output: str | None = None,
    command: str = "check",
) -> Outcome:
    """`check` (02 §4.1, §12) and, with `explain`, the explain result (§11); with `graph`, the
    step graph drawn (printed, or written to `output`: graphs.py)."""
    from coordinator_core.checking.checker import check_project, check_runtime_only

    if graph is not None or output is not None:
        from coordinatorctl import graphs

        refused = graphs.check_request(graph, output)
        if refused is not None:
            return Outcome(command, [refused])

    if project is None:
        assert runtime_config is not None
        runtime_only = check_runtime_only(runtime_config, environment)
        outcome = Outcome(command, runtime_only.diagnostics, deny_warnings=deny_warnings)
        outcome.sources = runtime_only.sources
        outcome.status = "valid-with-warnings" if runtime_only.has_warnings else "valid"
        outcome.result = {"runtimeConfig": str(runtime_config)}
        outcome.text = f"Valid runtime file {runtime_config}\n"
        return outcome
    checked = check_project(project, runtime_config=runtime_config, environment=environment)
    outcome = Outcome(command, checked.diagnostics, deny_warnings=deny_warnings)
    outcome.sources = checked.sources
    definition = checked.definition
    if checked.has_errors or definition is None or definition.snapshot is None:
        return outcome
    from coordinator_core.checking.explain import check_result, explain_result

    warnings = checked.has_warnings
    result = (
        explain_result(definition, warnings=warnings)
        if explain or graph
        else check_result(definition, warnings=warnings)
    )
    outcome.status = result.pop("status")
    report = checked.scenario_report
    if report is not None:
        # Counts only: check never carries per-case results or scenario values (02 §12).
        passed = sum(1 for case in report.cases if case.passed)
        result["scenarios"] = {"passed": passed, "failed": len(report.cases) - passed}
    outcome.result = result
    if graph is not None:
        from coordinatorctl import graphs

        drawn = graphs.produce({"status": outcome.status, **result}, graph, output=output)
        if isinstance(drawn, Diagnostic):
            return Outcome(command, [*checked.diagnostics, drawn], deny_warnings=deny_warnings)
        outcome.text = drawn
    elif explain:
        outcome.text = _valid_text(result) + _explain_text(result)
    else:
        outcome.text = _valid_text(result)
    return outcome


def explain(
    project: Path,
    *,
    runtime_config: Path | None,
    graph: str | None = None,
    output: str | None = None,
    deny_warnings: bool = False,
) -> Outcome:
    """`explain --project DIR` is `check --project DIR --explain`; `--graph` draws the graph
    (`--output FILE` writes it to a file)."""
    return check(
        project,
        runtime_config=runtime_config,
        explain=True,
        deny_warnings=deny_warnings,
        graph=graph,
        output=output,
        command="explain",
    )


def _explain_text(result: Mapping[str, Any]) -> str:
    lines = [
        f"Start: {result['start']}    Deadline: {result['deadlineSeconds']}s",
        "",
        "Steps (topological order):",
    ]
    for step in result["steps"]:
        routes = ", ".join(
            f"{route.get('label') or route.get('code') or route['kind']} → {route['target']}"
            for route in step["routes"]
        )
        detail = step.get("operation") or step.get("outcome") or ""
        lines.append(f"  {step['id']:<28} {step['type']:<10} {detail}".rstrip())
        if routes:
            lines.append(f"      routes: {routes}")
        if step.get("available"):
            lines.append(f"      available: {', '.join(step['available'])}")
    lines.append("")
    lines.append("Operations:")
    for alias, operation in result["operations"].items():
        lines.append(
            f"  {alias:<28} {operation['operation']} on {operation['connection']}"
            f" ({operation['effect']}, recovery {operation['recovery']})"
        )
    lines.append("")
    lines.append(str(result["recovery"]))
    return "\n".join(lines) + "\n"


def package(project: Path, output: Path, *, runtime_config: Path | None) -> Outcome:
    """`package` (02 §9.1): the definition part of check, then the immutable package."""
    from coordinator_core.checking.checker import check_project
    from coordinator_core.shell.package_files import write_package

    checked = check_project(
        project, runtime_config=runtime_config, environment=None, definition_only=True
    )
    outcome = Outcome("package", checked.diagnostics)
    outcome.sources = checked.sources
    definition = checked.definition
    if outcome.exit_code != 0 or definition is None or definition.snapshot is None:
        return outcome
    assert definition.decoded is not None
    root = output.absolute()
    digest = write_package(definition.snapshot, root)
    outcome.status = "packaged"
    outcome.result = {
        "packageDigest": digest,
        "revision": definition.snapshot.revision,
        "definitionDigest": definition.snapshot.definition_digest,
        "workflow": definition.decoded["project"]["id"],
        "version": definition.decoded["project"]["version"],
        "root": str(root),
    }
    outcome.text = (
        f"Packaged workflow {outcome.result['workflow']} version {outcome.result['version']}"
        f" into {root}\nPackage: {digest}\nRevision: {outcome.result['revision']}\n"
        f"Definition: {outcome.result['definitionDigest']}\n"
    )
    return outcome


def schema(name: str) -> Outcome:
    """`schema workflow|runtime|scenarios`: the published JSON Schema of an authored format."""
    from coordinator_core.authoring.decode import load_schema

    document = load_schema(name)
    outcome = Outcome("schema", status="printed")
    outcome.result = {"schema": document}
    outcome.text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    return outcome


def schema_operation(operation_id: str | None, completion: str | None) -> Outcome:
    """`schema operation [ID [--completion NAME]]`: the catalogue's operations, or the JSON
    Schema of one operation's output (of one of its completions' with `completion`), as the
    adapters apply it to live answers and `test` to scripted replies (08; 04 §3 C13)."""
    from coordinator_core.errors import closest_name
    from coordinator_core.operations import CATALOG
    from coordinator_core.outputs import completion_output_schema, operation_output_schema

    outcome = Outcome("schema")
    if operation_id is None:
        if completion is not None:
            outcome.diagnostics.append(
                Diagnostic(
                    "coordinator.command.usage",
                    path="",
                    message="`--completion` needs an operation id.",
                    hint="Run `coordinatorctl schema operation ID --completion NAME`.",
                )
            )
            return outcome
        listed = [
            {
                "id": operation.id,
                "product": operation.product,
                "effect": operation.effect,
                "completions": sorted(operation.completions),
            }
            for operation in CATALOG.values()
        ]
        outcome.status = "printed"
        outcome.result = {"operations": listed}
        lines = [
            (
                f"{entry['id']:<38} {entry['effect']:<10}"
                + "".join(f" --completion {name}" for name in entry["completions"])
            ).rstrip()
            for entry in listed
        ]
        outcome.text = "\n".join(lines) + "\n"
        return outcome
    if completion is None:
        schema = operation_output_schema(operation_id)
    else:
        schema = completion_output_schema(operation_id, completion)
    if schema is None:
        known = operation_id in CATALOG
        candidates = sorted(CATALOG[operation_id].completions) if known else sorted(CATALOG)
        outcome.diagnostics.append(
            Diagnostic(
                "coordinator.command.unknown-operation",
                path="",
                message=(
                    f"Operation {operation_id} exposes no such completion." if known else None
                ),
                suggestion=closest_name(
                    completion if known and completion else operation_id, candidates
                ),
            )
        )
        return outcome
    outcome.status = "printed"
    outcome.result = {"schema": schema}
    outcome.text = json.dumps(schema, indent=2, ensure_ascii=False) + "\n"
    return outcome


INIT_FILES = (
    "workflow.yaml",
    "functions.rhai",
    "runtime.yaml",
    "scenarios.yaml",
    "input.example.json",
    "sandbox.json",
)
# Copied as they are: the project files, a sample run input and the sandbox data that input
# needs (the BReg record it reads), which `coordinatorctl dev` loads (docs/running-locally.md).
_COPIED = (
    "workflow.yaml",
    "functions.rhai",
    "scenarios.yaml",
    "input.example.json",
    "sandbox.json",
)


def _json_string(text: str) -> str:
    """A path written as its RFC 8785 JSON string, which is also a YAML double-quoted scalar."""
    from coordinator_core.values import canonical_json

    return canonical_json(text).decode("utf-8")


INIT_SECRETS = ("state-1.key", "admission.key", "audit.key")


def init(directory: Path) -> Outcome:
    """`init` (09 §2): the delayed-follow-up project with generated development keys, its
    `scenarios.yaml` (cases that pass and take every route), so `test` runs right away, and
    `input.example.json` with the `sandbox.json` it needs, so that `dev` and one `start` finish
    a live run."""
    outcome = Outcome("init")
    if directory.exists() or directory.is_symlink():
        outcome.diagnostics.append(
            Diagnostic("coordinator.project.init", path="", file=str(directory))
        )
        return outcome
    root = Path(os.path.abspath(directory))
    created: list[Path] = [p for p in reversed(root.parents) if not p.exists()]
    template = files("coordinatorctl").joinpath("templates", "delayed-follow-up")
    runtime = (
        template.joinpath("runtime.yaml.in")
        .read_text(encoding="utf-8")
        .replace("@SECRETS_ROOT@", _json_string(f"{root}/.coordinator/secrets"))
        .replace("@DATABASE_PATH@", _json_string(f"{root}/.coordinator/coordinator.db"))
    )
    try:
        root.mkdir(parents=True)
        created.append(root)
        for name in _COPIED:
            (root / name).write_bytes(template.joinpath(name).read_bytes())
        (root / "runtime.yaml").write_bytes(runtime.encode("utf-8"))
        secrets = root / ".coordinator" / "secrets"
        secrets.mkdir(parents=True, mode=0o700)
        os.chmod(root / ".coordinator", 0o700)
        os.chmod(secrets, 0o700)
        for name in INIT_SECRETS:
            descriptor = os.open(secrets / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(os.urandom(32))
            os.chmod(secrets / name, stat.S_IRUSR | stat.S_IWUSR)
    except OSError:
        for path in reversed(created):
            shutil.rmtree(path, ignore_errors=True)
        outcome.diagnostics.append(
            Diagnostic("coordinator.command.output-unavailable", path="", file=str(directory))
        )
        return outcome
    created_files = sorted(
        [f".coordinator/secrets/{name}" for name in INIT_SECRETS] + list(INIT_FILES)
    )
    outcome.status = "initialized"
    outcome.result = {"directory": str(root), "files": created_files}
    outcome.text = (
        f"Initialized project delayed-follow-up in {root}\n"
        + "".join(f"  {name}\n" for name in created_files)
        + f"Next: `coordinatorctl dev --project {directory}` runs it live"
        " (docs/running-locally.md).\n"
    )
    return outcome


def evaluate(functions_file: Path, name: str, arguments_text: str) -> Outcome:
    """`eval` (03 §10): one function, exactly as the worker would call it."""
    from coordinator_core.functions import FunctionError, compile_functions
    from coordinator_core.values import StrictJsonError, canonical_json, parse_strict_json

    outcome = Outcome("eval")
    display = str(functions_file)

    def fail(
        code: str,
        line: int | None = None,
        column: int | None = None,
        message: str | None = None,
        hint: str | None = None,
    ) -> Outcome:
        outcome.diagnostics.append(
            Diagnostic(
                code,
                path="",
                file=display,
                line=line,
                column=column,
                message=message,
                hint=hint,
                artifact="functions",
            )
        )
        return outcome

    try:
        info = functions_file.stat()
        if not stat.S_ISREG(info.st_mode):
            return fail("coordinator.command.input-unavailable")
        data = functions_file.read_bytes()
    except OSError:
        return fail("coordinator.command.input-unavailable")
    if len(data) > limits.FUNCTION_MAX_SOURCE_BYTES:
        return fail("coordinator.function.source-limit")
    try:
        source = data.decode("utf-8")
    except UnicodeDecodeError:
        return fail(
            "coordinator.function.definition", message="The functions file is not valid UTF-8."
        )
    outcome.sources = {display: source}  # the code frame of a position in the file
    compiled = compile_functions(source)
    if compiled.program is None:
        for error in compiled.errors:
            fail(error.code, error.line, error.column, error.message, error.hint)
        return outcome
    try:
        arguments = parse_strict_json(arguments_text)
    except (StrictJsonError, ValueError):
        return fail(
            "coordinator.command.input-invalid", message="--arguments is not a strict JSON array."
        )
    if not isinstance(arguments, list):
        return fail(
            "coordinator.command.input-invalid", message="--arguments is not a strict JSON array."
        )
    try:
        result = compiled.program.call(name, arguments)
    except FunctionError as error:
        # A failed call names its cause, the function and the statement (never a value), and
        # its hint is the cause's own repair, not "run eval".
        return fail(error.code, error.line, error.column, error.message, error.hint)
    outcome.status = "evaluated"
    outcome.result = {"function": name, "result": result}
    outcome.text = canonical_json(result).decode("utf-8") + "\n"
    return outcome


def test(
    project: Path,
    scenarios_file: Path | None,
    junit: Path | None = None,
    *,
    runtime_config: Path | None = None,
) -> Outcome:
    """`test` (04 §5): the definition check, then every case of the scenarios document.

    Text mode shows every case on its own line, the expected against the actual result of each
    failure, the route coverage and `N passed, N failed`, on a failure too. `junit` also writes
    a JUnit XML report there (replacing an earlier one), whatever the outcome.
    """
    import time

    started = time.monotonic()
    path = scenarios_file if scenarios_file is not None else project / "scenarios.yaml"
    if junit is not None and _names_a_project_file(junit, project, path):
        return Outcome(
            "test",
            [
                Diagnostic(
                    "coordinator.command.usage",
                    path="",
                    message="--junit names a file of the project or the scenarios file.",
                    hint="Write the JUnit report outside the project's own files, e.g. "
                    "--junit reports/scenarios.xml.",
                )
            ],
        )
    outcome, views, suite, revision = _run_test(project, scenarios_file, path, runtime_config)
    if junit is not None:
        from coordinatorctl.scenario_results import junit_document

        document = junit_document(
            suite or project.absolute().name,
            views,
            outcome.diagnostics,
            seconds=time.monotonic() - started,
            properties={"revision": revision} if revision is not None else None,
        )
        if not _write_replacing(junit, document):
            outcome.diagnostics.append(
                Diagnostic("coordinator.command.output-unavailable", path="", file=str(junit))
            )
    return outcome


def _names_a_project_file(junit: Path, project: Path, scenarios: Path) -> bool:
    """Whether `--junit` would replace the scenarios file or a file of the project itself."""
    from coordinator_core.checking.checker import RUNTIME_FILE, SCENARIOS_FILE
    from coordinator_core.definition.rules import FUNCTIONS_FILE, WORKFLOW_FILE

    names = (WORKFLOW_FILE, FUNCTIONS_FILE, RUNTIME_FILE, SCENARIOS_FILE)
    protected = [project / name for name in names] + [scenarios]
    try:
        target = junit.resolve()
        return any(target == candidate.resolve() for candidate in protected)
    except (OSError, RuntimeError):
        return False


def _write_replacing(target: Path, data: bytes) -> bool:
    """Write `data` to `target` through a temporary file beside it, so a reader never sees a
    half-written report; an earlier report is replaced (the usual CI behaviour)."""
    import tempfile

    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(
            prefix=f".{target.name}.", suffix=".tmp", dir=target.parent
        )
        try:
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(data)
            os.chmod(temporary, 0o644)
            os.replace(temporary, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
    except OSError:
        return False
    return True


def _run_test(
    project: Path, scenarios_file: Path | None, path: Path, runtime_config: Path | None
) -> tuple[Outcome, Any, str | None, str | None]:
    """The `test` outcome, the case views (None when no case ran), the workflow id and the
    revision (None when the definition was refused)."""
    import dataclasses

    from coordinator_core.authoring.decode import read_authored_file
    from coordinator_core.checking.checker import check_project
    from coordinator_core.scenarios import run_scenarios
    from coordinatorctl.scenario_results import case_views, differences_json, text_lines

    checked = check_project(
        project, runtime_config=runtime_config, environment=None, definition_only=True
    )
    outcome = Outcome("test", list(checked.diagnostics))
    outcome.sources = checked.sources
    definition = checked.definition
    if outcome.exit_code != 0 or definition is None or definition.snapshot is None:
        return outcome, None, None, None
    suite = str((definition.decoded or {}).get("project", {}).get("id") or "") or None
    revision = definition.snapshot.revision
    display = str(scenarios_file) if scenarios_file is not None else "scenarios.yaml"
    try:
        if not stat.S_ISREG(path.lstat().st_mode):
            raise OSError
        data = path.read_bytes()
    except OSError:
        missing = scenarios_file is None and not path.exists() and not path.is_symlink()
        outcome.diagnostics.append(
            Diagnostic(
                "coordinator.command.input-unavailable",
                path="",
                file=display,
                message="The project has no scenarios.yaml: there is nothing to test."
                if missing
                else None,
                hint="Write scenarios.yaml in the project (docs/scenarios.md; `coordinatorctl"
                " init` writes one to start from), or name a scenarios file with --scenarios."
                if missing
                else None,
            )
        )
        return outcome, None, suite, revision
    authored = read_authored_file(data, file=display, expected_kind=limits.KIND_SCENARIOS)
    outcome.diagnostics.extend(authored.diagnostics)
    if authored.decoded is None:
        return outcome, None, suite, revision
    assert definition.ir is not None
    given = checked.runtime[0].response_schemas() if runtime_config and checked.runtime else {}
    report = run_scenarios(authored, definition.ir, given)
    outcome.diagnostics.extend(
        dataclasses.replace(d, file=display) if d.file == "scenarios.yaml" else d
        for d in report.diagnostics
    )
    result = report.to_json()
    written = authored.decoded.get("cases")
    views = case_views(
        report.cases, result["scenarios"], written if isinstance(written, list) else []
    )
    for view, case in zip(views, result["scenarios"], strict=True):
        if view.ran:
            case["differences"] = differences_json(view)
    passed = sum(1 for view in views if view.passed)
    result["counts"] = {"passed": passed, "failed": len(views) - passed}
    outcome.result = result
    outcome.status = "passed"
    outcome.lines = text_lines(views, result["coverage"])
    return outcome, views, suite, revision


def audit_verify(directory: Path, heads: Mapping[str, JournalPosition] | None = None) -> Outcome:
    """`audit verify` (09 §2, 07 §11): every journal file group of a directory, chain by chain;
    with `heads` (`--runtime-config`: the store's journal heads, 07 §12.1 item 4), also that
    every group the store recorded is there and reaches its head (`journal-truncated`).

    A torn last line (a failed write, 07 §12.1 item 6) is a warning `coordinator.audit.torn-tail`
    naming the file and line, never a break of the chain; without `heads` the warning
    `coordinator.audit.heads-unchecked` says that a deleted last line or file cannot be seen."""
    from coordinator_core.shell.audit import verify_directory
    from coordinator_core.shell.audit.heads import check_heads

    verified = verify_directory(directory)  # raises chain-broken (exit 1) or unreadable (exit 3)
    if heads is not None:
        check_heads(directory, heads)  # raises journal-truncated (exit 1)
    warnings = [
        Diagnostic(
            "coordinator.audit.torn-tail",
            file=torn.file,
            line=torn.line,
            message=(
                "A torn last line was set aside to the file's `.torn` copy at a start."
                if torn.moved_aside
                else "The file's last line is torn (a failed write): it is set aside at the"
                " next start."
            ),
        )
        for torn in verified.torn
    ]
    if heads is None:
        warnings.append(Diagnostic("coordinator.audit.heads-unchecked"))
    outcome = Outcome("audit verify", warnings)
    outcome.status = "verified"
    outcome.result = verified.to_json() | {"headsChecked": heads is not None}
    unchecked = (
        ""
        if heads is not None
        else "The tail of each group was not compared with the store's journal heads (no"
        " --runtime-config): a deleted last line or file cannot be seen.\n"
    )
    outcome.text = (
        f"Verified {verified.entries} entries in {verified.files} files\n"
        + "".join(
            f"  {group.prefix}: {group.entries} entries, head {group.head}\n"
            for group in verified.groups
        )
        + "".join(
            f"  torn tail: {torn.file} line {torn.line}"
            f"{' (set aside)' if torn.moved_aside else ''}\n"
            for torn in verified.torn
        )
        + unchecked
    )
    return outcome
