"""Why a mapping stopped a step: the `detail` of a dead-lettered record (07 §5, 04 §4.1).

A step record's `detail` names the detailed code of a mapping failure (`coordinator.mapping.*`
or the `coordinator.function.*` code of the failing call). For a failed call it also keeps the
cause class, the function that was running and the statement's position in functions.rhai; for
a `choose` whose label is no case, the returned label (only when it is an identifier) and the
declared labels. Nothing here is ever a value of the run: causes are a closed set, functions,
labels and positions come from the definition.

The text form is the bare code when there is nothing more (so a record written before this
form reads the same), else the canonical JSON object `{code, cause?, function?, line?, column?,
label?, labels?}`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from coordinator_core.errors import is_identifier
from coordinator_core.functions.errors import FunctionError
from coordinator_core.values import canonical_json

__all__ = ["FailureDetail"]


@dataclass(frozen=True, slots=True)
class FailureDetail:
    """The detailed code of a mapping failure and what explains it (see the module)."""

    code: str
    cause: str | None = None
    function: str | None = None
    line: int | None = None
    column: int | None = None
    label: str | None = None
    labels: tuple[str, ...] = ()

    @classmethod
    def of_call(cls, error: FunctionError) -> FailureDetail:
        """The detail of a failed function call."""
        return cls(error.code, error.cause, error.function, error.line, error.column)

    @classmethod
    def of_branch(cls, returned: Any, labels: tuple[str, ...]) -> FailureDetail:
        """`coordinator.mapping.branch`: the returned label when it is an identifier (else
        nothing of it), and the declared labels."""
        label = returned if is_identifier(returned) else None
        return cls("coordinator.mapping.branch", label=label, labels=labels)

    def text(self) -> str:
        members = self.to_json()
        if set(members) == {"code"}:
            return self.code
        return canonical_json(members).decode("utf-8")

    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {"code": self.code}
        for name in ("cause", "function", "line", "column", "label"):
            value = getattr(self, name)
            if value is not None:
                found[name] = value
        if self.labels:
            found["labels"] = list(self.labels)
        return found

    @classmethod
    def parse(cls, text: str) -> FailureDetail:
        """The detail of a record's `detail` text (a bare code, or the JSON object)."""
        if not text.startswith("{"):
            return cls(text)
        try:
            found = json.loads(text)
        except ValueError:
            return cls(text)
        if not isinstance(found, dict) or not isinstance(found.get("code"), str):
            return cls(text)

        def text_of(name: str) -> str | None:
            value = found.get(name)
            return value if isinstance(value, str) else None

        def number(name: str) -> int | None:
            value = found.get(name)
            return value if isinstance(value, int) and not isinstance(value, bool) else None

        labels = found.get("labels")
        return cls(
            found["code"],
            text_of("cause"),
            text_of("function"),
            number("line"),
            number("column"),
            text_of("label"),
            tuple(str(x) for x in labels) if isinstance(labels, list) else (),
        )

    def sentence(self) -> str:
        """One fixed sentence for people (names, causes and positions only)."""
        if self.code == "coordinator.mapping.branch":
            declared = ", ".join(self.labels)
            if self.label is not None:
                return (
                    f"The choose function returned {self.label}, which is not one of the case "
                    f"labels {declared}."
                )
            return f"The choose function returned no case label; the labels are {declared}."
        if self.cause is None:
            return f"The mapping stopped with {self.code}."
        where = f" at line {self.line}, column {self.column}" if self.line is not None else ""
        function = f"Function {self.function}" if self.function else "The function"
        return f"{function} failed with {self.code} ({self.cause}){where} of functions.rhai."
