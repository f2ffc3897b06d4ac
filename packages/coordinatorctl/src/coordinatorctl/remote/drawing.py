"""`inspect --graph mermaid|dot|svg|png --project DIR` (docs/graphs.md): a run's path drawn over
its workflow's step graph.

The service API has no route that answers a workflow's step graph (06 §6 `WorkflowInfo` carries
ids and digests only), so the graph is the local project's: it is checked offline before the
request is sent, and after the answer its definition digest must equal the run's
`definitionDigest` (`coordinator.command.graph-definition-mismatch` otherwise, and for an
inspection that names a step the graph lacks). With equal digests every step the run entered is
a step of the graph.

The picture carries the inspection's ids and closed words only — step ids, record states, route
kinds and case labels, effect states, the run status — never an input, output or product
response (ARCHITECTURE rule 4).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator_core.checking.graph_svg import RunPath, StepMark
from coordinator_core.errors import Diagnostic
from coordinatorctl import graphs
from coordinatorctl.remote.models import RunInspection, answer_of
from coordinatorctl.report import Outcome

__all__ = ["GraphRequest", "draw", "prepare", "run_path"]


@dataclass(frozen=True, slots=True)
class GraphRequest:
    """What `inspect --graph` draws over: the checked project's explain result."""

    style: str
    output: str | None
    explained: dict[str, Any]


def prepare(options: argparse.Namespace) -> GraphRequest | list[Diagnostic] | None:
    """The graph request of an `inspect` command line: None without `--graph`, `--project` or
    `--output`; the diagnostics of a misuse or of the project; or the checked project."""
    style: str | None = getattr(options, "graph", None)
    project: str | None = getattr(options, "project", None)
    output: str | None = getattr(options, "output", None)
    if style is None and project is None and output is None:
        return None
    if (style is None) != (project is None):
        return [
            Diagnostic(
                "coordinator.command.usage",
                path="",
                message="inspect draws a run's path with --graph over the graph of --project;"
                " each needs the other.",
                hint="Pass both, e.g. --graph svg --project DIR with the run's project directory.",
            )
        ]
    refused = graphs.check_request(style, output)
    if refused is not None:
        return [refused]
    assert style is not None and project is not None
    from coordinator_core.checking.checker import check_project
    from coordinator_core.checking.explain import explain_result

    checked = check_project(Path(project), runtime_config=None, environment=None)
    definition = checked.definition
    if checked.has_errors or definition is None or definition.snapshot is None:
        return [d for d in checked.diagnostics if d.effective_severity == "error"] or [
            Diagnostic("coordinator.command.usage", path="")
        ]
    explained = explain_result(definition, warnings=checked.has_warnings)
    return GraphRequest(style, output, explained)


def _mismatch(message: str) -> Diagnostic:
    return Diagnostic("coordinator.command.graph-definition-mismatch", path="", message=message)


def run_path(inspection: RunInspection, explained: dict[str, Any]) -> RunPath | Diagnostic:
    """The inspection as a RunPath over the explained graph, or the mismatch diagnostic."""
    digest = explained["definitionDigest"]
    if inspection.run.definition_digest != digest:
        return _mismatch(
            f"The run executes definition {inspection.run.definition_digest}; the project's"
            f" definition is {digest}."
        )
    known = {step["id"] for step in explained["steps"]}
    entered = [status.step for status in inspection.steps] + [inspection.run.step]
    if any(step not in known for step in entered):
        return _mismatch("The inspection names a step that the project's graph does not have.")
    effects = {effect.step: effect.state.value for effect in inspection.effects}
    marks: dict[str, StepMark] = {}
    for status in inspection.steps:  # ordered by enteredAt: a later record of a step wins
        route = status.route
        marks[status.step] = StepMark(
            state=status.state.value,
            route_kind=route.kind.value if route is not None else None,
            route_label=route.label if route is not None else None,
            effect=effects.get(status.step),
        )
    return RunPath(current=inspection.run.step, status=inspection.run.status.value, steps=marks)


def draw(request: GraphRequest, body: bytes, outcome: Outcome) -> Outcome:
    """The inspect outcome with the picture as its text (or its file written), or the refusal."""
    inspection = answer_of(RunInspection, body)
    if inspection is None:  # outcome_of has already read it; kept for the type checker
        return outcome
    path = run_path(inspection, request.explained)
    if isinstance(path, Diagnostic):
        return Outcome(outcome.command, [path])
    drawn = graphs.produce(request.explained, request.style, output=request.output, path=path)
    if isinstance(drawn, Diagnostic):
        return Outcome(outcome.command, [drawn])
    outcome.text = drawn
    return outcome
