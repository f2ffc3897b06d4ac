"""Acceptance corpus: `coordinatorctl check` judged against the contract, project by project.

Every example under `examples/` and every project under `projects/good/` must be accepted; every
project under `projects/bad/` must be refused (or warned about) exactly as its `expect.yaml` says.
The expectations were written from the contract alone (files 01, 02, 05, 08), never from the
checker's code. See `projects/README.md` for the layout and the `expect.yaml` format.

Each project is copied to a temporary directory before it is checked, without its `expect.yaml`,
so that the harness's own file is never part of the project under test (the loader ignores YAML
files that name no Coordinator format, so it would not be refused; the copy keeps each run to the
authored files). The copy is also where `setup` steps (symlinks, padding, generated files) run,
so nothing unusual is ever committed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PROJECTS = Path(__file__).resolve().parent / "projects"
EXAMPLES = REPO / "examples"

REPORT_API_VERSION = "id.registrystack.org/formats/coordinator/ctl-report/v1alpha1"
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
CODE = re.compile(r"^[a-z0-9]+(?:[.-][a-z0-9]+)*$")
COORDINATOR_CODE = re.compile(r"^coordinator\.[a-z0-9]+(?:-[a-z0-9]+)*\.[a-z0-9]+(?:-[a-z0-9]+)*$")
TEXT_HEADER = re.compile(r"^(error|warning)\[([a-z0-9.-]+)\] (\S+) (/.*)$")
TEXT_FRAME = re.compile(r"^  (?:\d+ \| .*| + \|(?: +\^+)?)$")
TEXT_SUMMARY = re.compile(r"^(\d+) (errors?), (\d+) (warnings?) in (\d+) (files?)$")
MODELINE = (
    "# yaml-language-server: $schema="
    "https://id.registrystack.org/schemas/coordinator/project/project.v1alpha1.schema.json"
)
CANARY = "CANARY-7f3a91"
STATUS_BY_EXIT = {1: "domain-refusal", 2: "usage-error", 3: "operational-failure"}
EXPECT_KEYS = {"description", "exit", "exhaustive", "setup", "diagnostics"}
DIAGNOSTIC_KEYS = {
    "code",
    "path",
    "file",
    "line",
    "column",
    "severity",
    "count",
    "related_path",
    "related_paths",
    "related_file",
    "related_line",
}
FILE_ORDER = {"workflow.yaml": 0, "functions.rhai": 1, "runtime.yaml": 2, "scenarios.yaml": 3}


def _project_dirs(kind: str) -> list[Path]:
    root = EXAMPLES if kind == "examples" else PROJECTS / kind
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir())


def _ids(dirs: list[Path]) -> list[str]:
    return [f"{d.parent.name}/{d.name}" for d in dirs]


ACCEPTED = _project_dirs("examples") + _project_dirs("good")
REFUSED = _project_dirs("bad")


def _expectation(project: Path) -> dict[str, Any]:
    path = project / "expect.yaml"
    if not path.is_file():
        return {}
    loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict), f"{path}: expect.yaml must be a mapping"
    return loaded


# ---------------------------------------------------------------------------------------------
# Materialising a project and running the CLI
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One finished `coordinatorctl check` process."""

    returncode: int
    stdout: str
    stderr: str


def _pad(path: Path, to_bytes: int, line: str) -> None:
    data = path.read_bytes()
    if not data.endswith(b"\n"):
        data += b"\n"
    chunk = (line + "\n").encode()
    missing = max(0, to_bytes - len(data))
    data += chunk * (missing // len(chunk) + 1)
    path.write_bytes(data)


def _inflate(
    project: Path, properties: int, description_length: int, functions_to_bytes: int
) -> None:
    """Grow the snapshot with schema annotations (each schema stays within the JSON value bounds)."""
    workflow = project / "workflow.yaml"
    out: list[str] = []
    for line in workflow.read_text(encoding="utf-8").splitlines():
        out.append(line)
        match = re.fullmatch(r"( *)properties:", line)
        if match:
            indent = match.group(1)
            for number in range(1, properties + 1):
                out.append(f"{indent}  annotation-{number:02d}:")
                out.append(f"{indent}    description: {'d' * description_length}")
    workflow.write_text("\n".join(out) + "\n", encoding="utf-8")
    _pad(
        project / "functions.rhai",
        functions_to_bytes,
        "// annotation padding: comments are part of the snapshot",
    )


def _apply_setup(project: Path, steps: list[dict[str, Any]]) -> None:
    for step in steps:
        ((action, args),) = step.items()
        if action == "symlink":
            os.symlink(args["target"], project / args["path"])
        elif action == "pad":
            _pad(project / args["file"], int(args["to_bytes"]), str(args["line"]))
        elif action == "many_files":
            for number in range(1, int(args["count"]) + 1):
                (project / f"{args['prefix']}{number:04d}{args['suffix']}").write_text("filler\n")
        elif action == "inflate":
            _inflate(
                project,
                int(args["properties"]),
                int(args["description_length"]),
                int(args["functions_to_bytes"]),
            )
        else:
            raise AssertionError(f"unknown setup action {action!r} in {project.name}")


class Workspace:
    """Copies projects into a scratch directory once and caches each CLI run."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._copies: dict[Path, Path] = {}
        self._runs: dict[tuple[Path, str], Run] = {}

    def copy(self, source: Path) -> Path:
        if source not in self._copies:
            target = self.root / source.parent.name / source.name
            shutil.copytree(
                source, target, symlinks=True, ignore=shutil.ignore_patterns("expect.yaml")
            )
            _apply_setup(target, _expectation(source).get("setup") or [])
            self._copies[source] = target
        return self._copies[source]

    def check(self, source: Path, fmt: str) -> Run:
        key = (source, fmt)
        if key not in self._runs:
            project = self.copy(source)
            command = [
                sys.executable,
                "-m",
                "coordinatorctl",
                "check",
                "--project",
                str(project),
                "--format",
                fmt,
            ]
            env = {
                k: v for k, v in os.environ.items() if not k.startswith(("COORDINATOR", "CANARY"))
            }
            proc = subprocess.run(
                command, cwd=REPO, capture_output=True, timeout=300, env=env, check=False
            )
            self._runs[key] = Run(
                proc.returncode, proc.stdout.decode("utf-8"), proc.stderr.decode("utf-8")
            )
        return self._runs[key]


@pytest.fixture(scope="session")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    yield Workspace(tmp_path_factory.mktemp("acceptance-projects"))


# ---------------------------------------------------------------------------------------------
# Report checks shared by all projects
# ---------------------------------------------------------------------------------------------


def _report(run: Run) -> dict[str, Any]:
    """stdout must be exactly one JSON object followed by one line feed (file 02 §3)."""
    context = (
        f"exit {run.returncode}; stdout {run.stdout[:300]!r}; stderr tail {run.stderr[-1500:]!r}"
    )
    assert run.stdout.endswith("\n"), f"stdout must end with a line feed ({context})"
    try:
        report, end = json.JSONDecoder().raw_decode(run.stdout)
    except json.JSONDecodeError as exc:
        raise AssertionError(f"stdout is not a JSON report: {exc} ({context})") from None
    assert run.stdout[end:] == "\n", (
        f"stdout holds more than one JSON object and a line feed: {run.stdout[end:]!r:.300}"
    )
    assert isinstance(report, dict)
    assert report.get("apiVersion") == REPORT_API_VERSION
    assert report.get("kind") == "CoordinatorCtlReport"
    assert report.get("command") == "check"
    assert isinstance(report.get("diagnostics"), list)
    for diagnostic in report["diagnostics"]:
        _assert_diagnostic_shape(diagnostic)
    _assert_unique(report["diagnostics"])
    _assert_sorted(report["diagnostics"])
    return report


def _assert_diagnostic_shape(d: dict[str, Any]) -> None:
    assert d.get("severity") in ("error", "warning"), d
    code = d.get("code")
    assert isinstance(code, str) and CODE.match(code), d
    if code.startswith("coordinator."):
        assert COORDINATOR_CODE.match(code), (
            f"coordinator.* codes have exactly three kebab-case segments: {code}"
        )
    path = d.get("path")
    assert isinstance(path, str) and (path == "" or path.startswith("/")), d
    assert isinstance(d.get("message"), str) and d["message"].strip(), d
    assert isinstance(d.get("suggestedAction"), str) and d["suggestedAction"].strip(), d
    source = d.get("source")
    assert isinstance(source, dict) and isinstance(source.get("file"), str), d
    for member in ("line", "column"):
        if member in source:
            assert isinstance(source[member], int) and source[member] >= 1, d
    for related in d.get("related") or []:
        assert isinstance(related.get("file"), str), d
        assert isinstance(related.get("path"), str), d
        assert isinstance(related.get("message"), str), d


def _identity(d: dict[str, Any]) -> tuple[Any, ...]:
    source = d.get("source") or {}
    return (d["code"], source.get("file"), d["path"], source.get("line"), source.get("column"))


def _assert_unique(diagnostics: list[dict[str, Any]]) -> None:
    """At most one diagnostic per (code, file, path, line, column) (file 02 §4.2, item 5)."""
    seen: set[tuple[Any, ...]] = set()
    for d in diagnostics:
        identity = _identity(d)
        assert identity not in seen, f"duplicate diagnostic {identity}"
        seen.add(identity)


def _sort_key(d: dict[str, Any]) -> tuple[Any, ...]:
    source = d.get("source") or {}
    name = source.get("file", "")
    line = source.get("line")
    return (
        FILE_ORDER.get(name, len(FILE_ORDER)),
        "" if name in FILE_ORDER else name,
        0 if line is None else 1,
        line or 0,
        source.get("column") or 0,
        d["path"].encode("utf-8"),
        d["code"],
    )


def _assert_sorted(diagnostics: list[dict[str, Any]]) -> None:
    """File, whole-file first, line, column, path (bytes), code (file 02 §4.3)."""
    keys = [_sort_key(d) for d in diagnostics]
    assert keys == sorted(keys), "diagnostics are not in the order of file 02 §4.3:\n" + _listing(
        diagnostics
    )


def _listing(diagnostics: list[dict[str, Any]]) -> str:
    rows = []
    for d in diagnostics:
        source = d.get("source") or {}
        where = ":".join(
            str(x)
            for x in (source.get("file"), source.get("line"), source.get("column"))
            if x is not None
        )
        related = [r.get("path") for r in d.get("related") or []]
        rows.append(
            f"  {d['severity']}[{d['code']}] {where} {d['path'] or '/'}"
            + (f" related={related}" if related else "")
        )
    return "\n".join(rows) or "  (no diagnostics)"


def _assert_no_canary(run: Run) -> None:
    assert CANARY not in run.stdout, "a data value (canary) leaked to stdout"
    assert CANARY not in run.stderr, "a data value (canary) leaked to stderr"


# ---------------------------------------------------------------------------------------------
# Expectation matching
# ---------------------------------------------------------------------------------------------


def _matches(expected: dict[str, Any], d: dict[str, Any]) -> bool:
    source = d.get("source") or {}
    related = d.get("related") or []
    checks = [
        d["code"] == expected["code"],
        d["severity"] == expected.get("severity", "error"),
        "path" not in expected or d["path"] == expected["path"],
        "file" not in expected or source.get("file") == expected["file"],
        "line" not in expected or source.get("line") == expected["line"],
        "column" not in expected or source.get("column") == expected["column"],
    ]
    wanted_paths = list(expected.get("related_paths") or [])
    if "related_path" in expected:
        wanted_paths.append(expected["related_path"])
    checks += [any(r.get("path") == p for r in related) for p in wanted_paths]
    if "related_file" in expected or "related_line" in expected:
        checks.append(
            any(
                ("related_file" not in expected or r.get("file") == expected["related_file"])
                and ("related_line" not in expected or r.get("line") == expected["related_line"])
                for r in related
            )
        )
    return all(checks)


def _match(slots: list[dict[str, Any]], diagnostics: list[dict[str, Any]]) -> list[int | None]:
    """Maximum bipartite matching of expected slots to distinct diagnostics (augmenting paths)."""
    owner: list[int | None] = [None] * len(diagnostics)
    candidates = [[j for j, d in enumerate(diagnostics) if _matches(slot, d)] for slot in slots]

    def augment(i: int, visited: set[int]) -> bool:
        for j in candidates[i]:
            if j in visited:
                continue
            visited.add(j)
            current = owner[j]
            if current is None or augment(current, visited):
                owner[j] = i
                return True
        return False

    for i in range(len(slots)):
        augment(i, set())
    assignment: list[int | None] = [None] * len(slots)
    for j, i in enumerate(owner):
        if i is not None:
            assignment[i] = j
    return assignment


def _assert_expectations(expect: dict[str, Any], diagnostics: list[dict[str, Any]]) -> None:
    expected = expect.get("diagnostics") or []
    slots = [entry for entry in expected for _ in range(int(entry.get("count", 1)))]
    assignment = _match(slots, diagnostics)
    missing = [slot for slot, j in zip(slots, assignment, strict=True) if j is None]
    assert not missing, (
        "expected diagnostics not reported:\n"
        + "\n".join(f"  {m}" for m in missing)
        + "\nreported:\n"
        + _listing(diagnostics)
    )
    for entry in expected:
        if "count" in entry:
            found = sum(1 for d in diagnostics if _matches(entry, d))
            assert found == entry["count"], (
                f"{entry['code']}: expected exactly {entry['count']}, got {found}"
            )
    if expect.get("exhaustive"):
        matched = {j for j in assignment if j is not None}
        extra = [
            d for j, d in enumerate(diagnostics) if d["severity"] == "error" and j not in matched
        ]
        assert not extra, (
            "errors beyond the expected ones (a cascade or a wrong rule?):\n" + _listing(extra)
        )


# ---------------------------------------------------------------------------------------------
# Tests that need the CLI
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("project", ACCEPTED, ids=_ids(ACCEPTED))
def test_project_is_accepted(workspace: Workspace, project: Path) -> None:
    run = workspace.check(project, "json")
    report = _report(run)
    assert run.returncode == 0, f"exit {run.returncode}:\n" + _listing(report["diagnostics"])
    assert report["ok"] is True
    warnings = [d for d in report["diagnostics"] if d["severity"] == "warning"]
    errors = [d for d in report["diagnostics"] if d["severity"] == "error"]
    assert not errors, _listing(errors)
    assert report["status"] == ("valid-with-warnings" if warnings else "valid")
    assert DIGEST.match(str(report.get("revision"))), report.get("revision")
    assert DIGEST.match(str(report.get("definitionDigest"))), report.get("definitionDigest")
    workflow = yaml.safe_load((project / "workflow.yaml").read_text(encoding="utf-8"))
    assert report.get("workflow") == workflow["project"]["id"]
    assert report.get("version") == str(workflow["project"]["version"])
    assert report.get("steps") == len(workflow["steps"])
    _assert_no_canary(run)


@pytest.mark.parametrize("project", ACCEPTED, ids=_ids(ACCEPTED))
def test_project_is_accepted_in_text_mode(workspace: Workspace, project: Path) -> None:
    run = workspace.check(project, "text")
    report = _report(workspace.check(project, "json"))
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        f"Valid workflow {report['workflow']} version {report['version']}",
        f"Revision: {report['revision']}",
        f"Definition: {report['definitionDigest']}",
    ]
    _assert_text_diagnostics(run.stderr, report["diagnostics"])
    _assert_no_canary(run)


@pytest.mark.parametrize("project", REFUSED, ids=_ids(REFUSED))
def test_project_is_refused_as_expected(workspace: Workspace, project: Path) -> None:
    expect = _expectation(project)
    run = workspace.check(project, "json")
    report = _report(run)
    assert run.returncode == expect["exit"], (
        f"exit {run.returncode}, expected {expect['exit']}:\n" + _listing(report["diagnostics"])
    )
    if expect["exit"] == 0:
        assert report["ok"] is True
        assert report["status"] in ("valid", "valid-with-warnings")
    else:
        assert report["ok"] is False
        assert report["status"] == STATUS_BY_EXIT[expect["exit"]]
    _assert_expectations(expect, report["diagnostics"])
    _assert_no_canary(run)


@pytest.mark.parametrize("project", REFUSED, ids=_ids(REFUSED))
def test_project_is_refused_in_text_mode(workspace: Workspace, project: Path) -> None:
    expect = _expectation(project)
    run = workspace.check(project, "text")
    report = _report(workspace.check(project, "json"))
    assert run.returncode == expect["exit"], run.stderr
    if expect["exit"] != 0:
        assert run.stdout == "", f"a refused check prints no result: {run.stdout!r:.300}"
    _assert_text_diagnostics(run.stderr, report["diagnostics"])
    _assert_no_canary(run)


def _assert_text_diagnostics(stderr: str, diagnostics: list[dict[str, Any]]) -> None:
    """Blocks of file 02 §2.2, in the JSON report's order, then one summary line."""
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f]", stderr), (
        "control characters must be rendered as \\u{XX}"
    )
    lines = stderr.splitlines()
    if not diagnostics and not lines:
        return
    assert lines, "text mode printed no summary line"
    summary = TEXT_SUMMARY.match(lines[-1])
    assert summary, f"last line is not the summary line: {lines[-1]!r}"
    errors = sum(1 for d in diagnostics if d["severity"] == "error")
    warnings = len(diagnostics) - errors
    assert int(summary.group(1)) == errors and int(summary.group(3)) == warnings, lines[-1]
    for count, word in (
        (summary.group(1), summary.group(2)),
        (summary.group(3), summary.group(4)),
        (summary.group(5), summary.group(6)),
    ):
        assert word.endswith("s") == (int(count) != 1), f"singular/plural: {lines[-1]!r}"
    blocks: list[list[str]] = []
    for line in lines[:-1]:
        if line.startswith("  "):
            assert blocks, f"continuation line before any diagnostic: {line!r}"
            blocks[-1].append(line)
        else:
            assert TEXT_HEADER.match(line), f"not a diagnostic header: {line!r}"
            blocks.append([line])
    assert len(blocks) == len(diagnostics), (
        f"{len(blocks)} text blocks for {len(diagnostics)} diagnostics"
    )
    for block, d in zip(blocks, diagnostics, strict=True):
        header = TEXT_HEADER.match(block[0])
        assert header is not None
        source = d["source"]
        location = ":".join(
            str(x)
            for x in (source["file"], source.get("line"), source.get("column"))
            if x is not None
        )
        assert (header.group(1), header.group(2), header.group(3), header.group(4)) == (
            d["severity"],
            d["code"],
            location,
            d["path"] or "/",
        ), block[0]
        assert len(block) >= 3, block
        assert block[1] == "  " + _render(d["message"]), block
        assert block[2] == "  next: " + _render(d["suggestedAction"]), block
        extra = block[3:]
        notes = [line for line in extra if line.startswith("  note: ")]
        assert extra[len(extra) - len(notes) :] == notes, f"notes come last: {block}"
        for line in extra[: len(extra) - len(notes)]:
            # The code frame (gutter, source line, caret run) and the `help:` suggestion.
            assert TEXT_FRAME.match(line) or line == (
                f"  help: did you mean `{d.get('suggestion')}`?"
            ), (line, block)
        related = d.get("related") or []
        assert len(notes) == len(related), block
        for note, entry in zip(notes, related, strict=True):
            where = ":".join(
                str(x)
                for x in (entry["file"], entry.get("line"), entry.get("column"))
                if x is not None
            )
            assert note.startswith(f"  note: {where} "), (note, entry)


def _render(text: str) -> str:
    """Control characters are written as \\u{XX} (file 02 §2.2)."""
    return re.sub(r"[\x00-\x1f\x7f-\x9f]", lambda m: f"\\u{{{ord(m.group()):02X}}}", text)


# ---------------------------------------------------------------------------------------------
# Corpus self-checks (no CLI needed)
# ---------------------------------------------------------------------------------------------


def test_corpus_size() -> None:
    assert len(_project_dirs("good")) >= 6
    assert len(REFUSED) >= 45
    assert {p.name for p in _project_dirs("examples")} >= {
        "reviewed-notice",
        "delayed-follow-up",
        "appointment-booking",
        "recorded-decision",
        "holiday-routing",
    }


@pytest.mark.parametrize("project", ACCEPTED, ids=_ids(ACCEPTED))
def test_accepted_project_starts_with_the_schema_modeline(project: Path) -> None:
    first = (project / "workflow.yaml").read_text(encoding="utf-8").splitlines()[0]
    assert first == MODELINE
    assert (project / "functions.rhai").is_file()


@pytest.mark.parametrize("project", REFUSED, ids=_ids(REFUSED))
def test_expectation_is_well_formed(project: Path) -> None:
    expect = _expectation(project)
    assert set(expect) <= EXPECT_KEYS, set(expect) - EXPECT_KEYS
    assert isinstance(expect.get("description"), str) and expect["description"].strip()
    assert expect.get("exit") in (0, 1, 2, 3)
    assert isinstance(expect.get("exhaustive"), bool)
    entries = expect.get("diagnostics")
    assert isinstance(entries, list) and entries
    for entry in entries:
        assert set(entry) <= DIAGNOSTIC_KEYS, set(entry) - DIAGNOSTIC_KEYS
        assert CODE.match(entry["code"]), entry
        assert entry.get("severity", "error") in ("error", "warning")
        if "path" in entry:
            assert entry["path"] == "" or entry["path"].startswith("/"), entry
    has_error = any(e.get("severity", "error") == "error" for e in entries)
    assert has_error == (expect["exit"] != 0), "exit 0 exactly when no error is expected"
