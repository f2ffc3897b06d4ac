"""The `CoordinatorCtlReport` envelope, exit codes and the text rendering of diagnostics."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TextIO

from coordinator_core import limits
from coordinator_core.errors import Diagnostic, exit_code_of
from coordinatorctl.excerpt import frame_of

__all__ = ["Outcome", "emit", "render_text", "sanitize"]

FAILURE_STATUS: Final = {1: "domain-refusal", 2: "usage-error", 3: "operational-failure"}
RESERVED_MEMBERS: Final = frozenset(
    {"apiVersion", "kind", "command", "ok", "status", "diagnostics"}
)


@dataclass
class Outcome:
    """What one command produced: its diagnostics, success status word and result members."""

    command: str
    diagnostics: list[Diagnostic] = field(default_factory=list)
    status: str = "completed"
    result: Mapping[str, Any] | None = None
    text: str | None = None  # text-mode stdout; None prints the result as indented JSON
    raw: str | None = None  # json-mode stdout instead of the envelope on success (`openapi`)
    lines: list[tuple[str, str]] | None = None  # styled text-mode stdout, printed on failure too
    deny_warnings: bool = False
    # The files the command read, as written, by diagnostic `file`: text mode shows a code
    # frame from them (coordinatorctl.excerpt decides what of a line may be shown).
    sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return exit_code_of(self.diagnostics, deny_warnings=self.deny_warnings)

    def envelope(self) -> dict[str, Any]:
        code = self.exit_code
        report: dict[str, Any] = {
            "apiVersion": limits.REPORT_API_VERSION,
            "kind": limits.KIND_REPORT,
            "command": self.command,
            "ok": code == 0,
            "status": self.status if code == 0 else FAILURE_STATUS[code],
            "diagnostics": [d.to_json() for d in self.diagnostics],
        }
        if self.result is not None:
            for key, value in self.result.items():
                if key in RESERVED_MEMBERS:
                    raise ValueError(f"result member {key} would replace an envelope member")
                report[key] = value
        return report


def sanitize(text: str) -> str:
    """Write control characters as \\u{XX} (02 §2.2) so a rendered line stays one line."""
    return "".join(
        f"\\u{{{ord(ch):02X}}}" if ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F else ch for ch in text
    )


def _location(d: Diagnostic) -> str:
    if d.file is None:
        return ""
    where = sanitize(d.file)
    if d.line is not None:
        where += f":{d.line}"
        if d.column is not None:
            where += f":{d.column}"
    return where


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _frame_lines(d: Diagnostic, sources: Mapping[str, str]) -> list[tuple[str, str]]:
    """The code frame under a diagnostic's first three lines: the line, then a caret run."""
    frame = frame_of(d, sources)
    if frame is None:
        return []
    number = str(frame.line)
    gutter = " " * len(number)
    return [
        ("frame", f"  {gutter} |"),
        ("frame", f"  {number} | {sanitize(frame.text)}"),
        (f"caret-{d.effective_severity}", f"  {gutter} | {' ' * frame.caret}{'^' * frame.width}"),
    ]


def render_text(
    diagnostics: Sequence[Diagnostic], sources: Mapping[str, str] | None = None
) -> list[tuple[str, str]]:
    """The text blocks of 02 §2.2 as (style, line) pairs; style is for the terminal only.

    After its `next:` line a block shows the code frame when `sources` holds the file, and a
    `help:` line with the suggested name when there is one; the `note:` lines come last.
    """
    lines: list[tuple[str, str]] = []
    files: set[str] = set()
    errors = warnings = 0
    for d in diagnostics:
        severity = d.effective_severity
        if severity == "error":
            errors += 1
        else:
            warnings += 1
        if d.file is not None:
            files.add(d.file)
        location = _location(d)
        head = f"{severity}[{d.code}]"
        if location:
            head += f" {location}"
        head += f" {sanitize(d.path) or '/'}"
        lines.append((severity, head))
        lines.append(("message", f"  {sanitize(d.effective_message)}"))
        lines.append(("hint", f"  next: {sanitize(d.effective_hint)}"))
        lines.extend(_frame_lines(d, sources or {}))
        if d.suggestion is not None:
            lines.append(("help", f"  help: did you mean `{sanitize(d.suggestion)}`?"))
        for related in d.related:
            where = sanitize(related.file)
            if related.line is not None:
                where += f":{related.line}"
                if related.column is not None:
                    where += f":{related.column}"
            lines.append(
                (
                    "note",
                    f"  note: {where} {sanitize(related.path) or '/'}: {sanitize(related.message)}",
                )
            )
    if diagnostics:
        summary = f"{_plural(errors, 'error')}, {_plural(warnings, 'warning')}"
        if files:
            summary += f" in {_plural(len(files), 'file')}"
        lines.append(("summary", summary))
    return lines


_STYLES: Final = {
    "error": "bold red",
    "warning": "bold yellow",
    "message": "",
    "hint": "cyan",
    "note": "dim",
    "frame": "bold blue",
    "caret-error": "bold red",
    "caret-warning": "bold yellow",
    "help": "green",
    "summary": "bold",
    "pass": "green",
    "fail": "bold red",
}


def _coloured(stream: TextIO) -> bool:
    """Colour (through rich) on a terminal, or anywhere under FORCE_COLOR (force-color.org: set
    and not empty); never under NO_COLOR (no-color.org: set and not empty), which wins over
    FORCE_COLOR. Empty values count as unset, for both."""
    if os.environ.get("NO_COLOR"):
        return False
    return bool(os.environ.get("FORCE_COLOR")) or stream.isatty()


def _write_lines(stream: TextIO, lines: Sequence[tuple[str, str]]) -> None:
    if _coloured(stream):
        from rich.console import Console
        from rich.text import Text

        # force_terminal: the decision is made above (rich alone would read an empty
        # FORCE_COLOR as "no colour"); rich still picks the colour system (none for TERM=dumb).
        console = Console(file=stream, force_terminal=True, highlight=False, soft_wrap=True)
        for style, line in lines:
            console.print(Text(line, style=_STYLES.get(style, "")))
        return
    for _, line in lines:
        stream.write(line + "\n")


def emit(outcome: Outcome, output_format: str) -> int:
    """Write the outcome as the envelope (json; jsonl: the same one line, or the stream's lines
    in `raw`) or as text; return the exit code."""
    if output_format in ("json", "jsonl"):
        if outcome.raw is not None and outcome.exit_code == 0:
            sys.stdout.write(outcome.raw)  # the document itself, without the envelope (09 §2)
        else:
            envelope = outcome.envelope()
            sys.stdout.write(json.dumps(envelope, ensure_ascii=False, separators=(",", ":")))
            sys.stdout.write("\n")
        sys.stdout.flush()
        return outcome.exit_code
    if outcome.lines is not None:
        _write_lines(sys.stdout, outcome.lines)  # `test`: every case, failed ones included
        sys.stdout.flush()
    if outcome.diagnostics:
        _write_lines(sys.stderr, render_text(outcome.diagnostics, outcome.sources))
    if outcome.exit_code == 0 and outcome.lines is None:
        if outcome.text is not None:
            sys.stdout.write(outcome.text)
        elif outcome.result is not None:
            sys.stdout.write(json.dumps(outcome.result, indent=2, ensure_ascii=False) + "\n")
    sys.stdout.flush()
    return outcome.exit_code
