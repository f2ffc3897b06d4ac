"""The survivors of the last `nox -s mutants` run, one line each: where, what changed, status.

Run in `mutants/` (the session's working directory) in an environment with mutmut installed:
it reads mutmut's results there and prints, for every mutant that was checked and not killed
(survived, no tests, timeout, suspicious), `path:line: original → mutated  [status]`, the line
being the original source's. Killed mutants, mutants mypy refused and mutants outside the run's
selection (`not checked`) are left out. `--markdown` prints a table instead.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

from mutmut.mutation.data import SourceFileMutationData
from mutmut.mutation.diff_apply import get_diff_for_mutant
from mutmut.stats import status_by_exit_code
from mutmut.utils.file_utils import walk_mutatable_files

SEPARATOR = "ǁ"  # mutmut's separator of class and method in a mutant's name
LEFT_OUT = {"killed", "caught by type check", "not checked", "skipped"}


@dataclass(frozen=True)
class Survivor:
    path: Path
    line: int
    original: str
    mutated: str
    status: str
    name: str


def _function(tree: ast.Module, mangled: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The function of a mutant's mangled name (`x_name` or `xǁClassǁmethod`)."""
    if mangled.startswith("x" + SEPARATOR):
        owner, _, method = mangled[2:].partition(SEPARATOR)
        scopes: list[ast.stmt] = [
            node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == owner
        ]
        body = [stmt for scope in scopes if isinstance(scope, ast.ClassDef) for stmt in scope.body]
        name = method
    else:
        body, name = tree.body, mangled.removeprefix("x_")
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            return node
    return None


def _changed(diff: str) -> tuple[int, str, str]:
    """The first changed line of a function's diff: its index in the function's text (from 1),
    the original line and the mutated one."""
    index, original, mutated = 0, "", ""
    for line in diff.splitlines():
        if line.startswith(("---", "+++")):
            continue
        if line.startswith("@@"):
            index = int(line.split()[1].split(",")[0].lstrip("-")) - 1
            continue
        if line.startswith("-") and not original:
            index += 1
            original = line[1:]
        elif line.startswith("+") and not mutated:
            mutated = line[1:]
        elif not original and not line.startswith("+"):
            index += 1
    return index, original, mutated


def _line(
    source: list[str],
    function: ast.FunctionDef | ast.AsyncFunctionDef | None,
    index: int,
    original: str,
) -> int:
    """The line of the original source the change is on: the function's line `index`, or the
    nearest line of the function with the same text (a comment above a `def` shifts it)."""
    if function is None:
        return 0
    start = min([function.lineno] + [d.lineno for d in function.decorator_list])
    end = function.end_lineno or start
    guess = start + index - 1
    matches = [n for n in range(start, end + 1) if source[n - 1].strip() == original.strip()]
    return min(matches, key=lambda n: abs(n - guess)) if matches else guess


def survivors() -> list[Survivor]:
    found = []
    for path in walk_mutatable_files():
        data = SourceFileMutationData(path=path)
        data.load()
        text = Path(path).read_text()
        tree, source = ast.parse(text), text.splitlines()
        for name, exit_code in data.exit_code_by_key.items():
            status = status_by_exit_code[exit_code]
            if status in LEFT_OUT:
                continue
            mangled = name.rpartition(".")[2].partition("__mutmut_")[0]
            index, original, mutated = _changed(get_diff_for_mutant(name, path=path))
            line = _line(source, _function(tree, mangled), index, original)
            found.append(Survivor(Path(path), line, original, mutated, status, name))
    return sorted(found, key=lambda s: (str(s.path), s.line, s.name))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    options = parser.parse_args(argv)
    found = survivors()
    if options.markdown:
        print("| where | original | mutated | status |")
        print("|---|---|---|---|")
    for s in found:
        where = f"{s.path.relative_to('src')}:{s.line}"
        if options.markdown:
            cells = (where, f"`{s.original.strip()}`", f"`{s.mutated.strip()}`", s.status)
            print("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
        else:
            print(f"{where}: {s.original.strip()}  →  {s.mutated.strip()}  [{s.status}] {s.name}")
    print(f"{len(found)} mutants not killed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
