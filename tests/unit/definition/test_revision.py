"""Revision, definition digest and packages (contract 02 §7–§9)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from coordinator_core.checking.checker import check_project
from coordinator_core.definition.restore import restore_definition
from coordinator_core.errors import CoordinatorError
from coordinator_core.shell.package_files import load_package, write_package

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "reviewed-notice"


def _copy(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("*.md", "scenarios.yaml"))
    return project


def _identities(project: Path) -> tuple[str, str]:
    checked = check_project(project)
    errors = [d.code for d in checked.diagnostics if d.effective_severity == "error"]
    assert not errors, errors
    assert checked.definition is not None and checked.definition.snapshot is not None
    snapshot = checked.definition.snapshot
    return snapshot.revision, snapshot.definition_digest


def _edit_workflow(project: Path, edit: Callable[[dict], None]) -> None:
    path = project / "workflow.yaml"
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    edit(document)
    # Dumped without sort, quoted where YAML 1.1 would misread a string.
    path.write_text(json.dumps(document, indent=2), encoding="utf-8")


def _set(path: list[str], value: object) -> Callable[[dict], None]:
    def edit(document: dict) -> None:
        target = document
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return edit


def _remove(path: list[str]) -> Callable[[dict], None]:
    def edit(document: dict) -> None:
        target = document
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]

    return edit


DISPLAY_ONLY = {
    "project-version": _set(["project", "version"], "release_B-2"),
    "project-title": _set(["project", "title"], "Another title"),
    "project-description-removed": _remove(["project", "description"]),
    "step-title": _set(["steps", "decide", "title"], "A new step title"),
    "step-description": _set(["steps", "read-application", "description"], "Some words."),
    "input-schema-description": _remove(["input", "properties", "applicationId", "description"]),
    "outcome-title": _set(["outcomes", "notice-sent", "title"], "Renamed outcome title"),
    "outcome-nested-title": _set(
        ["outcomes", "notice-sent", "properties", "messageId", "title"], "Message id"
    ),
}

EXECUTION = {
    "deadline": _set(["deadlineSeconds"], 1209601),
    "timeout": _set(["steps", "await-review", "timeoutSeconds"], 604801),
    "literal": _set(["steps", "request-review", "input", "arguments", 2, "value"], "other-kind"),
    "schema-keyword": _set(["input", "properties", "applicationId", "format"], "uri"),
    "route": _set(["steps", "decide", "cases", "maybe"], "review-inconclusive"),
    "connection": _set(["operations", "applicant-notice", "connection"], "notices-two"),
    "trigger-event": _set(
        ["triggers", "application-submitted", "event"], "application-submitted-v2"
    ),
}


def test_revision_and_digest_are_sha256_labels(tmp_path: Path) -> None:
    revision, digest = _identities(_copy(tmp_path))
    for label in (revision, digest):
        assert label.startswith("sha256:") and len(label) == 71
        int(label[7:], 16)


def test_yaml_comments_formatting_and_key_order_leave_both_identities_unchanged(
    tmp_path: Path,
) -> None:
    project = _copy(tmp_path)
    before = _identities(project)
    path = project / "workflow.yaml"
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    reordered = dict(reversed(list(document.items())))
    path.write_text("# a comment\n" + json.dumps(reordered, indent=4), encoding="utf-8")
    assert _identities(project) == before


@pytest.mark.parametrize("name", sorted(DISPLAY_ONLY))
def test_display_members_leave_the_revision_unchanged_but_change_the_digest(
    tmp_path: Path, name: str
) -> None:
    project = _copy(tmp_path)
    revision, digest = _identities(project)
    _edit_workflow(project, DISPLAY_ONLY[name])
    new_revision, new_digest = _identities(project)
    assert new_revision == revision
    assert new_digest != digest


def test_a_property_named_title_is_a_name_and_changes_the_revision(tmp_path: Path) -> None:
    project = _copy(tmp_path)
    revision, _ = _identities(project)
    _edit_workflow(
        project,
        _set(["input", "properties", "title"], {"type": "string"}),
    )
    assert _identities(project)[0] != revision


@pytest.mark.parametrize("name", sorted(EXECUTION))
def test_any_execution_change_changes_the_revision(tmp_path: Path, name: str) -> None:
    project = _copy(tmp_path)
    if name == "connection":
        runtime = project / "runtime.yaml"
        runtime.unlink()
    revision, digest = _identities(project)
    _edit_workflow(project, EXECUTION[name])
    new_revision, new_digest = _identities(project)
    assert new_revision != revision
    assert new_digest != digest


def test_a_comment_in_functions_changes_the_revision(tmp_path: Path) -> None:
    project = _copy(tmp_path)
    revision, _ = _identities(project)
    functions = project / "functions.rhai"
    functions.write_text(functions.read_text(encoding="utf-8") + "// one more comment\n")
    assert _identities(project)[0] != revision


def _package(tmp_path: Path, name: str) -> tuple[Path, str]:
    checked = check_project(EXAMPLE)
    assert checked.definition is not None and checked.definition.snapshot is not None
    output = tmp_path / name
    return output, write_package(checked.definition.snapshot, output)


def test_packaging_the_same_project_twice_is_byte_identical(tmp_path: Path) -> None:
    first, first_digest = _package(tmp_path, "one")
    second, second_digest = _package(tmp_path, "two")
    assert first_digest == second_digest
    for name in ("definition.json", "SHA256SUMS"):
        assert (first / name).read_bytes() == (second / name).read_bytes()
    loaded = load_package(first, first_digest)
    assert loaded.package_digest == first_digest
    assert not (first / "definition.json").read_bytes().endswith(b"\n")


def test_package_refuses_an_existing_output(tmp_path: Path) -> None:
    output, _ = _package(tmp_path, "one")
    checked = check_project(EXAMPLE)
    assert checked.definition is not None and checked.definition.snapshot is not None
    with pytest.raises(CoordinatorError) as refused:
        write_package(checked.definition.snapshot, output)
    assert refused.value.code == "coordinator.package.output-exists"


def _refusal(root: Path, expected: str | None = None) -> str:
    with pytest.raises(CoordinatorError) as refused:
        load_package(root, expected)
    return refused.value.code


def test_k1_an_extra_file_is_refused(tmp_path: Path) -> None:
    root, _ = _package(tmp_path, "p")
    (root / "notes.txt").write_text("x")
    assert _refusal(root) == "coordinator.package.invalid"


def test_k1_a_missing_file_is_refused(tmp_path: Path) -> None:
    root, _ = _package(tmp_path, "p")
    (root / "SHA256SUMS").unlink()
    assert _refusal(root) == "coordinator.package.invalid"


def test_k2_a_tampered_definition_fails_its_checksum(tmp_path: Path) -> None:
    root, _ = _package(tmp_path, "p")
    data = (root / "definition.json").read_bytes()
    (root / "definition.json").write_bytes(data.replace(b"approved", b"approveD", 1))
    assert _refusal(root) == "coordinator.package.checksum"


def test_k3_a_different_expected_digest_is_refused(tmp_path: Path) -> None:
    root, _ = _package(tmp_path, "p")
    assert _refusal(root, "sha256:" + "0" * 64) == "coordinator.package.digest-mismatch"


def _rewrite(root: Path, data: bytes) -> None:
    import hashlib

    (root / "definition.json").write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    (root / "SHA256SUMS").write_text(f"{digest}  definition.json\n")


def test_k4_a_non_canonical_definition_is_refused_even_with_a_matching_checksum(
    tmp_path: Path,
) -> None:
    root, _ = _package(tmp_path, "p")
    document = json.loads((root / "definition.json").read_bytes())
    _rewrite(root, json.dumps(document, indent=1).encode())
    assert _refusal(root) == "coordinator.definition.canonical"


def test_k5_a_foreign_interpreter_abi_is_refused(tmp_path: Path) -> None:
    from coordinator_core.values import canonical_json

    root, _ = _package(tmp_path, "p")
    document = json.loads((root / "definition.json").read_bytes())
    document["interpreterAbi"] = "coordinator/pure-rhai-py/v0"
    _rewrite(root, canonical_json(document))
    assert _refusal(root) == "coordinator.definition.abi"


def test_k5_a_rule_broken_inside_the_snapshot_is_refused(tmp_path: Path) -> None:
    from coordinator_core.values import canonical_json

    root, _ = _package(tmp_path, "p")
    document = json.loads((root / "definition.json").read_bytes())
    document["workflow"]["steps"]["decide"]["cases"]["approved"] = "nowhere"
    _rewrite(root, canonical_json(document))
    assert _refusal(root) == "coordinator.definition.target"


def test_restore_recomputes_identities_from_reordered_members(tmp_path: Path) -> None:
    root, _ = _package(tmp_path, "p")
    canonical = (root / "definition.json").read_bytes()
    document = json.loads(canonical)
    reordered = json.dumps(dict(reversed(list(document.items())))).encode()
    restored = restore_definition(reordered)
    original = restore_definition(canonical)
    assert (restored.revision, restored.definition_digest) == (
        original.revision,
        original.definition_digest,
    )
