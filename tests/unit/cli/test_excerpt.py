"""The code frame of coordinatorctl.excerpt shows the structure of a line, never a value."""

from __future__ import annotations

from coordinator_core.errors import Diagnostic
from coordinatorctl.excerpt import frame_of

CANARY = "CANARY-e8c3-77f1"


def _frame(file: str, text: str, line: int, column: int, path: str = "") -> tuple[str, int, int]:
    frame = frame_of(
        Diagnostic("x.y", path=path, file=file, line=line, column=column), {file: text}
    )
    assert frame is not None
    return frame.text, frame.caret, frame.width


def test_rhai_strings_comments_and_numbers_are_masked_across_lines() -> None:
    source = (
        f'fn f(x) {{ // {CANARY}\n    let s = "{CANARY}\\\n{CANARY}"; let n = 42;\n'
        f"    /* {CANARY}\n {CANARY} */ let y = `{CANARY}\n{CANARY}` + ;\n}}\n"
    )
    for line in range(1, 6):
        text = source.split("\n")[line - 1]
        if not text:
            continue
        shown, _, _ = _frame("functions.rhai", source, line, 1)
        assert CANARY not in shown and "42" not in shown, (line, shown)
    shown, caret, width = _frame("functions.rhai", source, 2, 9)
    assert shown == '    let s = "…' and caret == 8 and width == 1
    assert _frame("functions.rhai", source, 3, 1)[0] == '…"; let n = …;'


def test_yaml_values_are_masked_except_names_in_workflow_yaml() -> None:
    text = f"steps:\n  a:\n    next: b  # {CANARY}\n    title: {CANARY}\n"
    assert _frame("workflow.yaml", text, 3, 11, "/steps/a/next") == ("    next: b", 10, 1)
    assert _frame("workflow.yaml", text, 4, 12, "/steps/a/title") == ("    title: …", 11, 1)
    assert _frame("scenarios.yaml", text, 3, 11, "/steps/a/next") == ("    next: …", 10, 1)


def test_no_frame_for_substitutions_block_scalars_or_other_members() -> None:
    runtime = f"connections:\n  a:\n    clientId: ${{X:-{CANARY}}}\n"
    at = Diagnostic("x.y", "/connections/a/clientId", "runtime.yaml", 3, 15)
    assert frame_of(at, {"runtime.yaml": runtime}) is None
    block = f"project:\n  description: |\n    next: {CANARY}\n"
    assert (
        frame_of(
            Diagnostic("x.y", "/project/next", "workflow.yaml", 3, 5), {"workflow.yaml": block}
        )
        is None
    )
    other = "steps:\n  a:\n    next: b\n"
    assert (
        frame_of(Diagnostic("x.y", "/steps/c", "workflow.yaml", 3, 5), {"workflow.yaml": other})
        is None
    )


def test_a_runtime_file_shows_keys_only() -> None:
    runtime = "connections:\n  notices:\n    product: messaging\n"
    shown = _frame("runtime.yaml", runtime, 3, 14, "/connections/notices/product")
    assert shown == ("    product: …", 13, 1)


def test_a_template_string_is_masked_with_its_interpolations() -> None:
    source = f"fn f(x) {{\n    let s = `a ${{ `{CANARY}` }} {CANARY}` + ;\n}}\n"
    shown, _, _ = _frame("functions.rhai", source, 2, 1)
    assert shown == "    let s = `…` + ;"
