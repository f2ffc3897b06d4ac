"""Every `§` reference in the repository resolves to a heading under `docs/reference/`.

The code, tests, scripts, spec and docs cite the product contract and the design notes by section
number. `docs/reference/` restates the cited sections inside the repository, so every citation
must name a page there and a heading that exists on that page. The grammar (also described in
`docs/reference/README.md`):

- A *qualified* reference is a source followed by whitespace and `§` and a section number, where
  the section number is digits separated by dots (`7`, `7.7`, `3.2.2`). The sources are

  - `NN`, two digits, for the contract file number `NN`: `07 §7.7` resolves to the page
    `docs/reference/07-*.md` and its heading `7.7`. A preceding word ("contract 06 §3",
    "file 02 §4.3", "contracts 05 §8.1") does not matter;
  - `rhai-subset` (or `rhai-subset.md`): the page `docs/reference/rhai-subset.md`;
  - `NAME.md`, an upper-case design note such as `STACK.md`: the page `docs/reference/NAME.md`;
  - `RFC NNNN`: an external standard, not checked.

- `file NN` without a `§` ("contract file 08 (§2–§8)") names the source for the bare references
  after it.
- A *bare* reference `§X.Y` takes the source of the nearest qualified reference (or `file NN`)
  before it in the same paragraph: earlier on the same line, or on an earlier line with no blank
  line between. So `02 §5.7, §9` is `02 §5.7` and `02 §9`; `07 §8–§9` is `07 §8` and `07 §9`;
  `(08 §7, §8; 07 §7.4 step 1, §9)` ends with `07 §9`. A bare reference with no source before it
  in its paragraph is unresolved.
- Whatever follows the number ("item 4", "step 2", a rule code such as "P1", "table") is not
  part of the reference: only the section number has to resolve. Both ends of a range
  `§A–§B` must resolve; the sections between them are not checked.
- A heading (`##` or deeper) resolves `X.Y` when its text begins with the number:
  `## 7. Worker` is `7`, `### 7.7 Carrying a run forward` is `7.7`. Headings inside fenced code
  blocks do not count.

The scan covers the text files of `packages/`, `tests/`, `scripts/`, `spec/`, `docs/`,
`examples/`, `generated/` and `ci/` and the repository's top-level `README.md`, `noxfile.py` and
`pyproject.toml`, skipping caches, virtualenvs and build output. Two files that describe the
grammar are not scanned: this one, whose examples of unresolved references are there on purpose,
and `docs/reference/README.md`. Anywhere else, a `§` with no number after it is unresolved.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"

SCAN_DIRS = ("packages", "tests", "scripts", "spec", "docs", "examples", "generated", "ci")
SCAN_FILES = ("README.md", "noxfile.py", "pyproject.toml")
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".json", ".toml", ".txt", ".rhai", ".mako", ".cfg"}
SKIP_DIRS = {
    "__pycache__",
    ".nox",
    ".git",
    ".venv",
    "venv",
    "build",
    "dist",
    "node_modules",
    ".pytest_cache",
    ".ruff_cache",
    ".mypy_cache",
}

SECTION = "\N{SECTION SIGN}"

TOKEN = re.compile(
    rf"""
      (?P<rfc>\bRFC\s+\d+\s+(?={SECTION}))
    | (?<![\w.])(?P<nn>\d\d)\s+(?={SECTION})
    | \b(?P<rhai>rhai-subset)(?:\.md)?\s+(?={SECTION})
    | (?<![\w./-])(?P<doc>[A-Z][A-Z0-9_]*\.md)\s+(?={SECTION})
    | \bfile\s+(?P<file>\d\d)\b
    | {SECTION}(?P<section>\d+(?:\.\d+)*)
    | (?P<stray>{SECTION})
    """,
    re.VERBOSE,
)
HEADING = re.compile(r"^#{2,6}\s+(\d+(?:\.\d+)*)\.?(?:\s|$)")
EXTERNAL = "external"


@dataclass(frozen=True)
class Reference:
    path: str
    line: int
    source: str | None  # "07", "rhai-subset", "STACK.md", EXTERNAL, or None for no source
    section: str | None  # None for a `§` with no number after it

    def __str__(self) -> str:
        number = f"{SECTION}{self.section}" if self.section else f"{SECTION} (no number)"
        return f"{self.source} {number}" if self.source else f"{number} (no file)"


def find_references(text: str, path: str, own: str | None = None) -> Iterator[Reference]:
    """Every `§` reference of `text`, with the source the grammar gives it; `own` is the
    source a bare `§` has where nothing precedes it (a reference page's own file)."""
    source: str | None = own
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            source = own  # a blank line ends the paragraph
            continue
        if own is not None:
            source = own  # on a reference page, a citation of another file holds on its line
        if SECTION not in line and "file" not in line:
            continue
        for match in TOKEN.finditer(line):
            if match["rfc"]:
                source = EXTERNAL
            elif match["nn"]:
                source = match["nn"]
            elif match["rhai"]:
                source = "rhai-subset"
            elif match["doc"]:
                source = match["doc"]
            elif match["file"]:
                source = match["file"]
            elif match["section"]:
                yield Reference(path, number, source, match["section"])
                if own is not None:
                    source = own  # on a reference page a bare `§` is the page's own
            else:
                yield Reference(path, number, source, None)


def page_for(source: str, reference: Path) -> Path | None:
    """The page of `docs/reference/` that a source names, or None when there is none."""
    if source.isdigit():
        pages = sorted(reference.glob(f"{source}-*.md"))
        return pages[0] if len(pages) == 1 else None
    page = reference / (source if source.endswith(".md") else f"{source}.md")
    return page if page.is_file() else None


def headings_of(text: str) -> set[str]:
    """The section numbers of a page's headings, outside fenced code blocks."""
    numbers: set[str] = set()
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and (match := HEADING.match(line)):
            numbers.add(match[1])
    return numbers


def unresolved(references: Iterable[Reference], headings: Mapping[str, set[str] | None]) -> list:
    """`path:line: reference (why)` for every reference that does not resolve.

    `headings` maps a source to the heading numbers of its page, or to None when the source names
    no page.
    """
    problems = []
    for ref in references:
        if ref.source == EXTERNAL:
            continue
        if ref.source is None or ref.section is None:
            why = "no file to resolve in" if ref.source is None else "no section number"
        elif (numbers := headings.get(ref.source)) is None:
            why = f"no page for {ref.source} in docs/reference"
        elif ref.section not in numbers:
            why = f"no heading {ref.section}"
        else:
            continue
        problems.append(f"{ref.path}:{ref.line}: {ref} ({why})")
    return problems


def repository_files(root: Path) -> Iterator[Path]:
    """The scanned files, in a stable order, without the two that describe the grammar."""
    skipped = {Path(__file__).resolve(), (REFERENCE / "README.md").resolve()}
    for name in SCAN_FILES:
        if (root / name).is_file():
            yield root / name
    for top in SCAN_DIRS:
        for folder, dirs, files in os.walk(root / top):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info"))
            for name in sorted(files):
                path = Path(folder, name)
                if path.suffix in SUFFIXES and path.resolve() not in skipped:
                    yield path


def _own_source(path: Path) -> str | None:
    """A page of `docs/reference/` is the file its bare `§` references point into."""
    if path.parent.resolve() != REFERENCE.resolve():
        return None
    prefix = path.name.split("-", 1)[0]
    if prefix.isdigit() and len(prefix) == 2:
        return prefix
    return {"rhai-subset.md": "rhai-subset", "STACK.md": "STACK.md"}.get(path.name)


def repository_references(root: Path) -> list[Reference]:
    references: list[Reference] = []
    for path in repository_files(root):
        text = path.read_text(encoding="utf-8", errors="replace")
        if SECTION in text:
            references.extend(
                find_references(text, path.relative_to(root).as_posix(), _own_source(path))
            )
    return references


def reference_headings(references: Iterable[Reference], reference: Path) -> dict:
    headings: dict[str, set[str] | None] = {}
    for source in {ref.source for ref in references if ref.source not in (None, EXTERNAL)}:
        page = page_for(source, reference)
        headings[source] = headings_of(page.read_text(encoding="utf-8")) if page else None
    return headings


def test_every_reference_resolves_to_a_heading_in_docs_reference():
    references = repository_references(ROOT)
    assert len(references) > 1000, "the scan found too few references: is ROOT right?"
    problems = unresolved(references, reference_headings(references, REFERENCE))
    assert not problems, f"{len(problems)} unresolved references:\n" + "\n".join(problems)


# -- the resolver itself ------------------------------------------------------------------------


def refs(text: str) -> list[str]:
    return [str(ref) for ref in find_references(text, "x.py")]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("see 07 §7.7 item 4", ["07 §7.7"]),
        ("(contract 02 §5.7, §9)", ["02 §5.7", "02 §9"]),
        ("06 §5.5–§5.7, 07 §8–§9", ["06 §5.5", "06 §5.7", "07 §8", "07 §9"]),
        ("(08 §7, §8; 07 §7.4 step 1, §9)", ["08 §7", "08 §8", "07 §7.4", "07 §9"]),
        ("(contract 03 §3, rhai-subset §10)", ["03 §3", "rhai-subset §10"]),
        ("routes (STACK.md §5: …)", ["STACK.md §5"]),
        ("(RFC 8785 §3.2.2.3)", ["external §3.2.2.3"]),
        ("contract file 08 (§2–§8)", ["08 §2", "08 §8"]),
        ("the claim (§7.7 item 2)", ["§7.7 (no file)"]),
        ("version 1.10 §3", ["§3 (no file)"]),
    ],
)
def test_grammar(text, expected):
    assert refs(text) == expected


def test_a_bare_reference_inherits_within_its_paragraph_only():
    text = '"""Runs (07 §4):\nthe cancel of §8.\n\nand §9 after a blank line."""'
    assert refs(text) == ["07 §4", "07 §8", "§9 (no file)"]


def test_headings_are_numbers_first_and_skip_code_blocks():
    page = "# 07 — Execution\n## 7. Steps\n### 7.7 Carry\n```\n## 8. Not a heading\n```\n"
    assert headings_of(page) == {"7", "7.7"}


def test_an_unresolved_reference_fails():
    text = "07 §7.7, §99.1 and 05 §1; rhai-subset §2 and §7.7 (no file)\n\nalone §3\n"
    problems = unresolved(
        find_references(text, "x.py"), {"07": {"7", "7.7"}, "05": None, "rhai-subset": {"2"}}
    )
    assert problems == [
        "x.py:1: 07 §99.1 (no heading 99.1)",
        "x.py:1: 05 §1 (no page for 05 in docs/reference)",
        "x.py:1: rhai-subset §7.7 (no heading 7.7)",
        "x.py:3: §3 (no file) (no file to resolve in)",
    ]


def test_the_pages_are_found_by_number(tmp_path):
    (tmp_path / "07-execution.md").write_text("## 7. Steps\n", encoding="utf-8")
    (tmp_path / "STACK.md").write_text("## 5. Notes\n", encoding="utf-8")
    refs_ = list(find_references("07 §7, 08 §1 and STACK.md §5", "x.py"))
    assert unresolved(refs_, reference_headings(refs_, tmp_path)) == [
        "x.py:1: 08 §1 (no page for 08 in docs/reference)"
    ]
