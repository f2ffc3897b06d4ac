"""The one diagnostic type and the one error type, backed by the catalogue in spec/errors.yaml.

A diagnostic names a stable code, where it happened (a JSON pointer into the document as
written and, where known, a file with a 1-based line and column) and what to do next. It never
carries a submitted value, a product response or a secret: messages are fixed sentences that
may only name structural identifiers (file names, member names, step ids, function names).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from coordinator_models.error_catalogue import CODES

Severity = Literal["error", "warning"]


@dataclass(frozen=True, slots=True)
class CatalogueEntry:
    code: str
    title: str
    hint: str
    exit: int
    severity: Severity
    http: int | None


_FALLBACK: Final = CatalogueEntry(
    code="",
    title="The input was refused.",
    hint="Correct the reported member and try again.",
    exit=1,
    severity="error",
    http=None,
)

_catalogue: dict[str, CatalogueEntry] | None = None


def catalogue() -> dict[str, CatalogueEntry]:
    """The error catalogue generated from spec/errors.yaml (loaded once, read-only)."""
    global _catalogue  # noqa: PLW0603 - a lazily built read-only cache
    if _catalogue is None:
        _catalogue = {
            code: CatalogueEntry(code, title, hint, exit_code, severity, http)
            for code, (title, hint, exit_code, severity, http) in CODES.items()
        }
    return _catalogue


def entry(code: str) -> CatalogueEntry:
    """The catalogue entry of `code`; unknown codes fall back to a generic refusal."""
    return catalogue().get(code, _FALLBACK)


@dataclass(frozen=True, slots=True)
class Related:
    """A further position that explains a diagnostic (file 02 §2.1 `related`)."""

    file: str
    path: str
    message: str
    line: int | None = None
    column: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"file": self.file}
        if self.line is not None:
            out["line"] = self.line
            if self.column is not None:
                out["column"] = self.column
        out["path"] = self.path
        out["message"] = self.message
        return out


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One finding. `message`, `hint` and `severity` default to the catalogue's entry."""

    code: str
    path: str = ""
    file: str | None = None
    line: int | None = None
    column: int | None = None
    message: str | None = None
    hint: str | None = None
    severity: Severity | None = None
    artifact: str | None = None
    related: tuple[Related, ...] = field(default=())
    # The declared name closest to an unknown one ("did you mean"): always an identifier that
    # exists in the project or the catalog, never a value.
    suggestion: str | None = None

    @property
    def effective_severity(self) -> Severity:
        return self.severity or entry(self.code).severity

    @property
    def effective_message(self) -> str:
        return self.message or entry(self.code).title

    @property
    def effective_hint(self) -> str:
        return self.hint or entry(self.code).hint

    @property
    def exit_code(self) -> int:
        if self.effective_severity == "warning":
            return 0
        return entry(self.code).exit

    def dedupe_key(self) -> tuple[str, str | None, str, int | None, int | None]:
        """At most one diagnostic per (code, file, path, line, column) (file 02 §4.2)."""
        return (self.code, self.file, self.path, self.line, self.column)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"severity": self.effective_severity, "code": self.code}
        if self.artifact is not None:
            out["artifact"] = self.artifact
        out["path"] = self.path
        out["message"] = self.effective_message
        out["suggestedAction"] = self.effective_hint
        if self.file is not None:
            source: dict[str, Any] = {"file": self.file}
            if self.line is not None:
                source["line"] = self.line
                if self.column is not None:
                    source["column"] = self.column
            out["source"] = source
        if self.related:
            out["related"] = [r.to_json() for r in self.related]
        if self.suggestion is not None:
            out["suggestion"] = self.suggestion
        return out


# What a message may name: an identifier of the authored formats (step ids, aliases, outcome
# ids, completion and connection names, function names, operation ids). Anything else an
# author wrote where a name belongs is not repeated back: it could be a value.
IDENTIFIER: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-/]{0,127}$")


def is_identifier(name: object) -> bool:
    """Whether a message may name `name` (a structural identifier, never a value)."""
    return isinstance(name, str) and bool(IDENTIFIER.match(name))


def closest_name(name: str, candidates: Iterable[str]) -> str | None:
    """The declared name most like `name` (a typo's "did you mean"), or None when none is close."""
    names = sorted({c for c in candidates if c != name})
    if not names:
        return None
    by_fold = {c.casefold(): c for c in names}
    if name.casefold() in by_fold:
        return by_fold[name.casefold()]
    matches = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return matches[0] if matches else None


class CoordinatorError(Exception):
    """An error that ends an operation, carrying exactly one diagnostic."""

    def __init__(self, diagnostic: Diagnostic) -> None:
        super().__init__(diagnostic.code)
        self.diagnostic = diagnostic

    @property
    def code(self) -> str:
        return self.diagnostic.code


def exit_code_of(diagnostics: list[Diagnostic], *, deny_warnings: bool = False) -> int:
    """The maximum exit class over all diagnostics (file 02 §3: 3 > 2 > 1 > 0)."""
    worst = 0
    for diagnostic in diagnostics:
        code = diagnostic.exit_code
        if diagnostic.effective_severity == "warning" and deny_warnings:
            code = 1
        worst = max(worst, code)
    return worst
