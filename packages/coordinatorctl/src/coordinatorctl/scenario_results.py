"""What `coordinatorctl test` shows of each case: the text lines, the JSON detail, JUnit XML.

Only identifiers, status words, failure codes and virtual seconds are shown: the expected and the
actual `status`, `path` (the steps), `outcome`, `failureCode`, `effects` and elapsed time. An
`output` that differs is named, never printed (the actual one is built from scripted product
replies, the expected one is a value); `--format json` carries the actual `output` in the case
result as file 04 §5 defines it. Diagnostics keep their own rule: they never contain a value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final
from xml.etree import ElementTree

from coordinator_core.errors import Diagnostic
from coordinatorctl.report import sanitize

__all__ = ["CaseView", "case_views", "differences_json", "junit_document", "text_lines"]

_WORD: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
_NOT_SHOWN: Final = "(not an identifier; not shown)"
MEMBER_WIDTH: Final = len("workflowElapsedSeconds")


def _word(value: Any) -> str:
    """An identifier or status word as written, or a fixed stand-in for anything else."""
    return value if isinstance(value, str) and _WORD.match(value) else _NOT_SHOWN


@dataclass(frozen=True)
class CaseView:
    """One case as `test` shows it: its result member and the members that differ."""

    id: str
    passed: bool
    ran: bool
    result: Mapping[str, Any]  # the case object of the JSON report (04 §5)
    expect: Mapping[str, Any]  # the case's decoded `expect`, or {} when it did not decode
    differences: tuple[str, ...]  # the differing `expect` members (04 §2.4 order)
    diagnostics: tuple[Diagnostic, ...]


def case_views(
    cases: Sequence[Any], results: Sequence[Mapping[str, Any]], authored: Sequence[Any]
) -> list[CaseView]:
    """Join each `CaseResult` with its JSON result and the expectation it was compared with."""
    views = []
    for case, result in zip(cases, results, strict=True):
        written = authored[case.index] if 0 <= case.index < len(authored) else None
        expect = written.get("expect") if isinstance(written, Mapping) else None
        shown = case.id if isinstance(case.id, str) else f"cases/{case.index}"
        views.append(
            CaseView(
                id=sanitize(shown),
                passed=case.passed,
                ran=case.ran,
                result=result,
                expect=expect if isinstance(expect, Mapping) else {},
                differences=tuple(case.differences),
                diagnostics=tuple(case.diagnostics),
            )
        )
    return views


# -- one member, expected and actual, as JSON and as text ------------------------------------


def _outcome_json(value: Any) -> Any:
    if isinstance(value, Mapping) and value.get("type") == "named":
        return {"type": "named", "value": _word(value.get("value"))}
    return {"type": "none"}


def _effects_json(value: Any) -> list[dict[str, str]]:
    effects = value if isinstance(value, list) else []
    return [
        {"step": _word(e.get("step")), "state": _word(e.get("state"))}
        for e in effects
        if isinstance(e, Mapping)
    ]


def _member_json(member: str, value: Any) -> Any:
    if member == "status":
        return _word(value)
    if member == "path":
        return [_word(step) for step in value] if isinstance(value, list) else []
    if member == "outcome":
        return _outcome_json(value)
    if member == "failureCode":
        return None if value is None else _word(value)
    if member == "effects":
        return _effects_json(value)
    if member in ("workflowElapsedSeconds", "elapsedSeconds"):
        return value if isinstance(value, int | float) and not isinstance(value, bool) else None
    raise ValueError(member)


_ACTUAL_MEMBER: Final = {"workflowElapsedSeconds": "elapsedSeconds"}


def differences_json(view: CaseView) -> list[dict[str, Any]]:
    """The `differences` member of a case that ran: each differing `expect` member with the
    expected and the actual value (no values for `output`: it is only named)."""
    out: list[dict[str, Any]] = []
    for member in view.differences:
        if member == "output":
            out.append({"member": "output"})
            continue
        actual = view.result.get(_ACTUAL_MEMBER.get(member, member))
        out.append(
            {
                "member": member,
                "expected": _member_json(member, view.expect.get(member)),
                "actual": _member_json(member, actual),
            }
        )
    return out


def _member_text(member: str, value: Any) -> str:
    if member == "path":
        return ", ".join(value) if value else "(no step)"
    if member == "outcome":
        return str(value["value"]) if value.get("type") == "named" else "none"
    if member == "failureCode":
        return "none" if value is None else str(value)
    if member == "effects":
        return ", ".join(f"{e['step']} {e['state']}" for e in value) if value else "none"
    if member == "workflowElapsedSeconds":
        return "-" if value is None else f"{value}s"
    return str(value)


def detail_lines(view: CaseView) -> list[str]:
    """The lines under a failed case: expected against actual, or why it did not run."""
    lines: list[str] = []
    for difference in differences_json(view):
        member = difference["member"]
        label = f"  {member:<{MEMBER_WIDTH}}  "
        if member == "output":
            lines.append(f"{label}differs (values are not shown; compare with --format json)")
            continue
        lines.append(f"{label}expected: {_member_text(member, difference['expected'])}")
        lines.append(f"{' ' * len(label)}actual:   {_member_text(member, difference['actual'])}")
    if not view.differences:
        for d in view.diagnostics:
            lines.append(
                f"  {d.code} at {sanitize(d.path) or '/'}: {sanitize(d.effective_message)}"
            )
    return lines


def head_line(view: CaseView) -> str:
    """`PASS|FAIL <id> <status> <outcome or -> <elapsed>s` (04 §5), or `FAIL <id> not run`."""
    verdict = "PASS" if view.passed else "FAIL"
    if not view.ran:
        return f"{verdict} {view.id} not run"
    outcome = view.result.get("outcome") or {}
    shown = outcome.get("value") if outcome.get("type") == "named" else "-"
    return f"{verdict} {view.id} {view.result['status']} {shown} {view.result['elapsedSeconds']}s"


def text_lines(views: Sequence[CaseView], coverage: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every case on its own line (and, for a failure, its detail), the route coverage, and
    the closing count, as (style, line) pairs for report.py's terminal decision."""
    lines: list[tuple[str, str]] = []
    for view in views:
        lines.append(("pass" if view.passed else "fail", head_line(view)))
        if not view.passed:
            lines.extend(("detail", line) for line in detail_lines(view))
    lines.append(
        (
            "coverage",
            f"routes covered: {len(coverage['covered'])} of {len(coverage['routes'])}"
            f" ({coverage['percent']}%)",
        )
    )
    lines.extend(("coverage", f"  not covered: {route}") for route in coverage["uncovered"])
    passed = sum(1 for view in views if view.passed)
    lines.append(("summary", f"{passed} passed, {len(views) - passed} failed"))
    return lines


# -- JUnit XML -------------------------------------------------------------------------------


def _diagnostic_line(d: Diagnostic) -> str:
    where = [sanitize(d.file)] if d.file is not None else []
    if where and d.line is not None:
        where[0] += f":{d.line}"
    return (
        " ".join([d.code, *where, sanitize(d.path) or "/"]) + f": {sanitize(d.effective_message)}"
    )


def junit_document(
    suite: str,
    views: Sequence[CaseView] | None,
    diagnostics: Sequence[Diagnostic],
    *,
    seconds: float,
    properties: Mapping[str, str] | None = None,
) -> bytes:
    """A JUnit XML report: one `testcase` per scenario case (classname = the workflow id).

    A failed case is a `failure` whose `type` is its diagnostic code, whose `message` is the
    diagnostic message and whose text is the expected-against-actual detail of the text mode.
    When no case could run (`views` is None: the definition or the scenarios document was
    refused, or the file is missing), the report holds one failed `testcase` named `scenarios`
    listing the diagnostics, so a CI job never reads an earlier run's report as this one's.
    """
    suites = ElementTree.Element("testsuites", name="coordinatorctl test")
    element = ElementTree.SubElement(suites, "testsuite", name=suite)
    if properties:
        holder = ElementTree.SubElement(element, "properties")
        for name, value in properties.items():
            ElementTree.SubElement(holder, "property", name=name, value=value)
    failures = 0
    count = 0
    if views is None:
        count = failures = 1
        case = ElementTree.SubElement(element, "testcase", classname=suite, name="scenarios")
        errors = [d for d in diagnostics if d.effective_severity == "error"] or list(diagnostics)
        first = errors[0] if errors else None
        failure = ElementTree.SubElement(
            case,
            "failure",
            type=first.code if first is not None else "coordinator.command.usage",
            message="The scenarios did not run.",
        )
        failure.text = "\n".join(_diagnostic_line(d) for d in errors) + "\n"
    else:
        for view in views:
            count += 1
            case = ElementTree.SubElement(element, "testcase", classname=suite, name=view.id)
            if view.passed:
                continue
            failures += 1
            first = view.diagnostics[0] if view.diagnostics else None
            failure = ElementTree.SubElement(
                case,
                "failure",
                type=first.code if first is not None else "coordinator.scenario.expectation",
                message=(
                    sanitize(first.effective_message) if first is not None else "The case failed."
                ),
            )
            failure.text = "\n".join([head_line(view), *detail_lines(view)]) + "\n"
    for holder in (suites, element):
        holder.set("tests", str(count))
        holder.set("failures", str(failures))
        holder.set("errors", "0")
        holder.set("skipped", "0")
        holder.set("time", f"{seconds:.3f}")
    ElementTree.indent(suites)
    written: bytes = ElementTree.tostring(suites, encoding="utf-8", xml_declaration=True)
    return written + b"\n"
