"""The offline scenario runner (file 04): document rules C1–C13, cases run through the engine,
the `test` report, and route coverage.

`check_scenario_document` is what `check` step 9 runs on every document; `run_scenarios` runs
the document rules and then every case they let through. Both speak only of scenarios.yaml:
their diagnostics point into it and never carry a scenario value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from coordinator_core.authoring.decode import AuthoredFile
from coordinator_core.definition.ir import Definition
from coordinator_core.errors import Diagnostic
from coordinator_core.scenarios.rules import SCENARIOS_FILE, document_rules
from coordinator_core.scenarios.runner import CaseResult, ScenarioKeys, run_case

__all__ = [
    "SCENARIOS_FILE",
    "CaseResult",
    "ScenarioKeys",
    "ScenarioReport",
    "check_scenario_document",
    "run_scenarios",
]


@dataclass(frozen=True)
class ScenarioReport:
    """Every case's result, the scenario diagnostics, and route coverage.

    `diagnostics` holds the document-rule and runner diagnostics of scenarios.yaml, sorted as
    02 §4.3 sorts one file; the reader's own findings stay in `AuthoredFile.diagnostics`.
    `routes` lists every route of the graph by its JSON pointer in workflow.yaml (document
    order); `covered` holds those some case took.
    """

    cases: tuple[CaseResult, ...]
    diagnostics: tuple[Diagnostic, ...]
    routes: tuple[str, ...]
    covered: frozenset[str]

    @property
    def passed(self) -> bool:
        return bool(self.cases) and all(case.passed for case in self.cases)

    @property
    def uncovered(self) -> tuple[str, ...]:
        return tuple(route for route in self.routes if route not in self.covered)

    def to_json(self) -> dict[str, Any]:
        """The `test` result (04 §5) with a `coverage` member."""
        total = len(self.routes)
        covered = [route for route in self.routes if route in self.covered]
        percent = round(100 * len(covered) / total, 1) if total else 100.0
        return {
            "scenarios": [case.to_json(self.routes) for case in self.cases],
            "coverage": {
                "routes": list(self.routes),
                "covered": covered,
                "uncovered": list(self.uncovered),
                "percent": percent,
            },
        }


def _sort_key(diagnostic: Diagnostic) -> tuple[Any, ...]:
    return (
        diagnostic.line is not None,
        diagnostic.line or 0,
        diagnostic.column or 0,
        diagnostic.path.encode("utf-8"),
        diagnostic.code,
    )


def check_scenario_document(
    scenarios: AuthoredFile,
    definition: Definition,
    response_schemas: Mapping[str, Any] | None = None,
) -> list[Diagnostic]:
    """The document rules C1–C13 (04 §3) of a read scenarios document against a checked
    definition; reader findings are not repeated."""
    findings = document_rules(scenarios, definition, response_schemas)
    return sorted(findings.diagnostics, key=_sort_key)


def _unread_cases(scenarios: AuthoredFile) -> list[CaseResult]:
    """Cases of a document whose `cases` did not decode: listed as not passed, by id."""
    root = scenarios.document.value if scenarios.document is not None else None
    cases = root.get("cases") if isinstance(root, dict) else None
    if not isinstance(cases, list):
        return []
    results = []
    for index, case in enumerate(cases):
        case_id = case.get("id") if isinstance(case, dict) else None
        results.append(CaseResult(case_id if isinstance(case_id, str) else None, index, False))
    return results


def run_scenarios(
    scenarios: AuthoredFile,
    definition: Definition,
    response_schemas: Mapping[str, Any] | None = None,
) -> ScenarioReport:
    """04 §3–§5: check the document, run every case it lets through, report and cover.

    `response_schemas` are the `responseSchema`s of the external connections of the runtime
    file given with `--runtime-config`, by connection name (C13)."""
    findings = document_rules(scenarios, definition, response_schemas)
    decoded = scenarios.decoded or {}
    cases = decoded.get("cases")
    results: list[CaseResult] = []
    if not isinstance(cases, list):
        results = _unread_cases(scenarios)
    else:
        for index, case in enumerate(cases):
            case_id = case.get("id")
            own = tuple(
                d
                for d in findings.diagnostics
                if d.path == f"/cases/{index}" or d.path.startswith(f"/cases/{index}/")
            )
            if findings.whole_document or index in findings.blocked:
                results.append(CaseResult(case_id, index, False, diagnostics=own))
            else:
                results.append(run_case(definition, scenarios, index, case))
    diagnostics = list(findings.diagnostics)
    for result in results:
        diagnostics.extend(d for d in result.diagnostics if d not in findings.diagnostics)
    covered = frozenset().union(*(result.routes for result in results)) if results else frozenset()
    return ScenarioReport(
        cases=tuple(results),
        diagnostics=tuple(sorted(diagnostics, key=_sort_key)),
        routes=definition.routes,
        covered=covered,
    )
