"""Validate the error catalogue spec/errors.yaml and render it as Python and as Markdown.

    python scripts/generate_errors.py --spec spec/errors.yaml \\
        --python generated/coordinator_models/error_catalogue.py \\
        --markdown docs/reference/error-codes.md

`nox -s generate` calls the same pure functions (`load_catalogue`, `validate_catalogue`,
`render_python`, `render_markdown`). Both outputs are deterministic: the same catalogue always
gives the same bytes, so `nox -s generate_check` can detect drift.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TypeGuard

import yaml

__all__ = [
    "CatalogueError",
    "load_catalogue",
    "main",
    "render_markdown",
    "render_python",
    "validate_catalogue",
]

# One kebab-case segment of a code (contract 02 §10).
_SEGMENT: Final = r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*"
_SEGMENT_RE: Final = re.compile(rf"^{_SEGMENT}$")

# Code families and their exact number of dot-separated segments. `coordinator.<area>.<condition>`
# has exactly three (02 §10); the reader families have two (01 §2); `platform.runtime-config.*`
# has three (05); the two admission problems of the API have two (06 §3.1).
FAMILY_SEGMENTS: Final[Mapping[str, int]] = {
    "yaml": 2,
    "config": 2,
    "idempotency": 2,
    "admission": 2,
    "platform": 3,
    "coordinator": 3,
}

_TOP_LEVEL: Final = frozenset({"areas", "codes", "failureCodes"})
_CODE_REQUIRED: Final = ("title", "hint", "exit", "severity", "area", "contract")
_CODE_OPTIONAL: Final = ("http",)
_AREA_FIELDS: Final = frozenset({"title", "description"})
_SEVERITIES: Final = ("error", "warning")

# A sentence must be the same for every occurrence: nothing that reads like a slot for a value.
_PLACEHOLDER_RE: Final = re.compile(r"[{}\"\\…]|<[A-Za-z_][\w-]*>|%[sdrif]")
_CONTROL_RE: Final = re.compile(r"[\x00-\x1f\x7f-\x9f]")

PYTHON_HEADER: Final = (
    "# Generated from spec/errors.yaml by `nox -s generate` (scripts/generate_errors.py).\n"
    "# Do not edit by hand: change spec/errors.yaml and regenerate.\n"
)
LINE_LENGTH: Final = 100


class CatalogueError(ValueError):
    """The catalogue file cannot be read as a catalogue (YAML error or a duplicate key)."""


# -- loading ------------------------------------------------------------------------------------


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe loader that refuses a key repeated in one mapping (a code listed twice)."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if key in seen:
            raise CatalogueError(
                f"duplicate key {key!r} at line {line} (first at line {seen[key]})"
            )
        seen[key] = line
    return loader.construct_mapping(node, deep=True)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_unique_mapping,
)


def load_catalogue(path: str | Path) -> dict[str, Any]:
    """Read the catalogue YAML; a repeated key anywhere (a code listed twice) is refused."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass
    except yaml.YAMLError as error:
        raise CatalogueError(f"{path}: not valid YAML: {error}") from error
    except CatalogueError as error:
        raise CatalogueError(f"{path}: {error}") from error
    if not isinstance(data, dict):
        raise CatalogueError(f"{path}: the catalogue must be a mapping")
    return data


# -- validation ---------------------------------------------------------------------------------


def code_grammar_ok(code: str) -> bool:
    """Whether `code` has the grammar of its family (see FAMILY_SEGMENTS)."""
    segments = code.split(".")
    expected = FAMILY_SEGMENTS.get(segments[0])
    return (
        expected is not None
        and len(segments) == expected
        and all(_SEGMENT_RE.match(segment) for segment in segments)
    )


def _sentence_problems(where: str, value: Any) -> list[str]:
    if not isinstance(value, str) or not value:
        return [f"{where}: must be a non-empty string"]
    problems: list[str] = []
    if value != value.strip() or "  " in value:
        problems.append(f"{where}: has leading, trailing or doubled spaces")
    if _CONTROL_RE.search(value):
        problems.append(f"{where}: contains a control character")
    if _PLACEHOLDER_RE.search(value):
        problems.append(
            f"{where}: contains a placeholder-like or escaped character "
            "(braces, <name>, %s, quotes, backslash or an ellipsis)"
        )
    if not value[0].isupper() and value[0] not in "`(":
        problems.append(f"{where}: must start with a capital letter")
    if not value.endswith("."):
        problems.append(f"{where}: must be one sentence ending with a full stop")
    return problems


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _code_problems(code: str, entry: Any, areas: Mapping[str, Any]) -> list[str]:
    where = f"codes.{code}"
    problems: list[str] = []
    if not code_grammar_ok(code):
        problems.append(
            f"{where}: bad code grammar (families {', '.join(sorted(FAMILY_SEGMENTS))}; "
            "`coordinator.<area>.<condition>` has exactly three kebab-case segments)"
        )
    if not isinstance(entry, dict):
        return [*problems, f"{where}: must be a mapping"]
    for name in _CODE_REQUIRED:
        if name not in entry:
            problems.append(f"{where}: missing field `{name}`")
    for name in sorted(set(entry) - set(_CODE_REQUIRED) - set(_CODE_OPTIONAL)):
        problems.append(f"{where}: unknown field `{name}`")
    if "title" in entry:
        problems.extend(_sentence_problems(f"{where}.title", entry["title"]))
    if "hint" in entry:
        problems.extend(_sentence_problems(f"{where}.hint", entry["hint"]))
    severity = entry.get("severity")
    if "severity" in entry and severity not in _SEVERITIES:
        problems.append(f"{where}.severity: must be one of {', '.join(_SEVERITIES)}")
    exit_code = entry.get("exit")
    if "exit" in entry:
        if not _is_int(exit_code) or not 0 <= exit_code <= 3:
            problems.append(f"{where}.exit: must be an integer from 0 to 3")
        elif severity == "warning" and exit_code != 0:
            problems.append(f"{where}.exit: a warning has exit class 0")
        elif severity == "error" and exit_code == 0:
            problems.append(f"{where}.exit: an error has exit class 1, 2 or 3")
    if "http" in entry:
        http = entry["http"]
        if not _is_int(http) or not 400 <= http <= 599:
            problems.append(f"{where}.http: must be a 4xx or 5xx status")
        elif _is_int(exit_code) and exit_code != (1 if http < 500 else 3):
            # 02 §3: a problem's exit class follows its HTTP status (4xx -> 1, 5xx -> 3).
            problems.append(
                f"{where}.exit: a {http} problem has exit class {1 if http < 500 else 3}"
            )
        if severity == "warning":
            problems.append(f"{where}.http: a warning is never an HTTP problem")
    if "area" in entry and entry["area"] not in areas:
        problems.append(f"{where}.area: `{entry['area']}` is not declared under `areas`")
    contract = entry.get("contract")
    if "contract" in entry and (not isinstance(contract, str) or not contract.strip()):
        problems.append(f"{where}.contract: must name where the contract defines the code")
    return problems


def validate_catalogue(data: Mapping[str, Any]) -> list[str]:
    """Every problem of the catalogue, as one sentence each; empty when it is valid."""
    problems: list[str] = []
    for name in sorted(set(data) - _TOP_LEVEL):
        problems.append(f"unknown top-level member `{name}`")
    areas = data.get("areas")
    if not isinstance(areas, dict) or not areas:
        problems.append("`areas` must be a non-empty mapping of area id to {title, description}")
        areas = {}
    for area, body in areas.items():
        if not isinstance(area, str) or not _SEGMENT_RE.match(area):
            problems.append(f"areas.{area}: the area id must be kebab-case")
        if not isinstance(body, dict) or set(body) != _AREA_FIELDS:
            problems.append(f"areas.{area}: must have exactly `title` and `description`")
            continue
        for field in sorted(_AREA_FIELDS):
            if not isinstance(body[field], str) or not body[field].strip():
                problems.append(f"areas.{area}.{field}: must be a non-empty string")
    codes = data.get("codes")
    if not isinstance(codes, dict) or not codes:
        problems.append("`codes` must be a non-empty mapping of code to entry")
        codes = {}
    seen_lower: dict[str, str] = {}
    for code, entry in codes.items():
        if not isinstance(code, str):
            problems.append(f"codes: key {code!r} is not a string")
            continue
        if code.lower() in seen_lower:
            problems.append(f"codes.{code}: duplicate of `{seen_lower[code.lower()]}`")
        seen_lower[code.lower()] = code
        problems.extend(_code_problems(code, entry, areas))
    used_areas = {entry.get("area") for entry in codes.values() if isinstance(entry, dict)}
    for area in areas:
        if area not in used_areas:
            problems.append(f"areas.{area}: no code uses this area")
    failures = data.get("failureCodes")
    if not isinstance(failures, dict) or not failures:
        problems.append("`failureCodes` must be a non-empty mapping of failure code to meaning")
        failures = {}
    for code, meaning in failures.items():
        if code in codes:
            problems.append(f"failureCodes.{code}: also listed under `codes`")
        if not isinstance(code, str) or not _SEGMENT_RE.match(code):
            problems.append(f"failureCodes.{code}: a failure code is one kebab-case word group")
            continue
        problems.extend(_sentence_problems(f"failureCodes.{code}", meaning))
    return problems


# -- Python -------------------------------------------------------------------------------------


def _py_str(value: str) -> str:
    """A double-quoted Python literal (validated sentences hold no quote or backslash)."""
    out = []
    for char in value:
        if char in '"\\':
            out.append("\\" + char)
        elif _CONTROL_RE.match(char):
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _py_entry(key: str, parts: Sequence[str], indent: str = "    ") -> list[str]:
    """One dict entry as `ruff format` writes it: on one line, or exploded one part per line."""
    key_text = _py_str(key)
    if len(parts) == 1:
        line = f"{indent}{key_text}: {parts[0]},"
        if len(line) <= LINE_LENGTH:
            return [line]
        return [f"{indent}{key_text}: (", f"{indent}    {parts[0]}", f"{indent}),"]
    line = f"{indent}{key_text}: ({', '.join(parts)}),"
    if len(line) <= LINE_LENGTH:
        return [line]
    return [f"{indent}{key_text}: (", *(f"{indent}    {part}," for part in parts), f"{indent}),"]


def render_python(data: Mapping[str, Any]) -> str:
    """The text of generated/coordinator_models/error_catalogue.py."""
    codes: Mapping[str, Mapping[str, Any]] = data["codes"]
    failures: Mapping[str, str] = data["failureCodes"]
    lines = [
        PYTHON_HEADER.rstrip("\n"),
        '"""The stable error codes of Registry Coordinator and the closed run failure codes.',
        "",
        "CODES maps a code to (title, hint, exit class, severity, HTTP status or None): the title is",
        "the default diagnostic message, the hint the default `suggestedAction`. FAILURE_CODES maps",
        "each closed run failure code (contract 08 §10) to its meaning.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from typing import Final, Literal",
        "",
        'CODES: Final[dict[str, tuple[str, str, int, Literal["error", "warning"], int | None]]] = {',
    ]
    for code in sorted(codes):
        entry = codes[code]
        http = entry.get("http")
        parts = [
            _py_str(entry["title"]),
            _py_str(entry["hint"]),
            str(entry["exit"]),
            _py_str(entry["severity"]),
            "None" if http is None else str(http),
        ]
        lines.extend(_py_entry(code, parts))
    lines.append("}")
    lines.append("")
    lines.append("FAILURE_CODES: Final[dict[str, str]] = {")
    for code in sorted(failures):
        lines.extend(_py_entry(code, [_py_str(failures[code])]))
    lines.append("}")
    return "\n".join(lines) + "\n"


# -- Markdown -----------------------------------------------------------------------------------


def _md_cell(value: str) -> str:
    return value.replace("|", "\\|").replace("\n", " ")


def _anchor(title: str) -> str:
    """The GitHub-style anchor of a heading."""
    slug = re.sub(r"[^\w\- ]", "", title.lower()).strip()
    return slug.replace(" ", "-")


def render_markdown(data: Mapping[str, Any]) -> str:
    """The text of docs/reference/error-codes.md."""
    areas: Mapping[str, Mapping[str, str]] = data["areas"]
    codes: Mapping[str, Mapping[str, Any]] = data["codes"]
    failures: Mapping[str, str] = data["failureCodes"]
    by_area: dict[str, list[str]] = {area: [] for area in areas}
    for code in sorted(codes):
        by_area[codes[code]["area"]].append(code)
    failure_title = "Run failure codes"
    out = [
        "# Error codes",
        "",
        "<!-- Generated from spec/errors.yaml by `nox -s generate`. Do not edit by hand. -->",
        "",
        "Every diagnostic that `coordinatorctl` and the `coordinator` service report, and every",
        "problem the HTTP API answers with, carries one of the stable codes below. Clients and",
        "scripts branch on the code, never on the message. The message is a fixed English sentence",
        "(it may name structural identifiers such as a step id, never a submitted value), and the",
        "suggested action tells the author or operator what to do next.",
        "",
        "**Exit classes**: 0 accepted (warnings only), 1 refused, 2 usage error, 3 a resource is",
        "unavailable. A command exits with the highest class among its diagnostics; under",
        "`--deny-warnings` a warning counts as 1. Remote commands take the class from the HTTP",
        "status: 1 for a 4xx problem, 3 for a 5xx problem or a transport failure.",
        "",
        f"The closed **run failure codes** that a run's `failureCode` may hold are listed at the "
        f"end ([{failure_title}](#{_anchor(failure_title)})); they are not diagnostic codes.",
        "",
        "| Area | Codes |",
        "|---|---|",
    ]
    for area, body in areas.items():
        out.append(
            f"| [{_md_cell(body['title'])}](#{_anchor(body['title'])}) | {len(by_area[area])} |"
        )
    out.append(f"| [{failure_title}](#{_anchor(failure_title)}) | {len(failures)} |")
    for area, body in areas.items():
        out.extend(["", f"## {body['title']}", "", body["description"].strip(), ""])
        out.append("| Code | Severity | Exit | HTTP | Meaning | What to do |")
        out.append("|---|---|---|---|---|---|")
        for code in by_area[area]:
            entry = codes[code]
            http = entry.get("http")
            out.append(
                f"| `{code}` | {entry['severity']} | {entry['exit']} | "
                f"{'—' if http is None else http} | {_md_cell(entry['title'])} | "
                f"{_md_cell(entry['hint'])} |"
            )
    out.extend(
        [
            "",
            f"## {failure_title}",
            "",
            "A run that fails, expires or needs attention records one of these codes as its",
            "`failureCode` (contract 08 §10). Adapter and fallback codes are also the codes that",
            "scenario replies and observations may use.",
            "",
            "| Code | Meaning |",
            "|---|---|",
        ]
    )
    out.extend(f"| `{code}` | {_md_cell(failures[code])} |" for code in sorted(failures))
    return "\n".join(out) + "\n"


# -- command line -------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Validate the catalogue and write both outputs; exit 1 on any catalogue problem."""
    parser = argparse.ArgumentParser(description="Render spec/errors.yaml as Python and Markdown.")
    parser.add_argument("--spec", required=True, type=Path, help="the catalogue YAML")
    parser.add_argument("--python", type=Path, help="where to write error_catalogue.py")
    parser.add_argument("--markdown", type=Path, help="where to write error-codes.md")
    arguments = parser.parse_args(argv)
    try:
        data = load_catalogue(arguments.spec)
    except (OSError, CatalogueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    problems = validate_catalogue(data)
    if problems:
        for problem in problems:
            print(f"error: {arguments.spec}: {problem}", file=sys.stderr)
        return 1
    outputs = ((arguments.python, render_python), (arguments.markdown, render_markdown))
    for target, render in outputs:
        if target is not None:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(render(data), encoding="utf-8", newline="\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
