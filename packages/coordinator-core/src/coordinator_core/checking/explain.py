"""What `explain` reports about a checked definition (contract 02 §11), and its graph pictures."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from coordinator_core import limits
from coordinator_core.authoring.model import (
    MappingNode,
    StepNode,
    WaitForNode,
    mapping_of,
    routes_of,
)
from coordinator_core.checking.checker import DefinitionCheck
from coordinator_core.checking.graph_svg import (
    DASHED_ROUTES,
    RunPath,
    edge_label,
    mark_line,
    node_detail,
    render_svg,
    route_taken,
)
from coordinator_core.definition.ir import (
    CallStep,
    ChooseStep,
    FinishStep,
    WaitForStep,
)

__all__ = ["LIMITS", "RECOVERY_SENTENCE", "check_result", "explain_result", "render_graph"]

LIMITS: Final = {
    "operations": limits.FUNCTION_MAX_OPERATIONS,
    "callLevels": limits.FUNCTION_MAX_CALL_LEVELS,
    "expressionDepth": limits.FUNCTION_MAX_EXPRESSION_DEPTH,
    "stringBytes": limits.FUNCTION_MAX_STRING_BYTES,
    "arrayItems": limits.FUNCTION_MAX_ARRAY_ITEMS,
    "mapEntries": limits.FUNCTION_MAX_MAP_ENTRIES,
    "sourceBytes": limits.FUNCTION_MAX_SOURCE_BYTES,
    "jsonBytes": limits.JSON_MAX_CANONICAL_BYTES,
    "jsonDepth": limits.JSON_MAX_DEPTH,
    "jsonNodes": limits.JSON_MAX_NODES,
    "maximumArguments": limits.FUNCTION_MAX_ARGUMENTS,
    "maximumFunctions": limits.FUNCTION_MAX_FUNCTIONS,
    "modules": 0,
}

RECOVERY_SENTENCE: Final = (
    "A run restores exactly this snapshot; retry-same resends saved commands and never adopts "
    "edited mappings."
)


def check_result(definition: DefinitionCheck, *, warnings: bool) -> dict[str, Any]:
    """The `check` result members of 02 §12 (without scenario counts)."""
    ir = definition.ir
    assert ir is not None
    return {
        "status": "valid-with-warnings" if warnings else "valid",
        "workflow": ir.workflow_id,
        "version": ir.version,
        "revision": ir.revision,
        "definitionDigest": ir.definition_digest,
        "steps": len(ir.steps),
    }


def _mapping(mapping: MappingNode) -> dict[str, Any]:
    arguments = []
    for argument in mapping.arguments or ():
        shown: dict[str, Any] = {"type": argument.kind}
        if argument.kind == "step":
            shown["step"] = argument.step
        arguments.append(shown)  # literal values are never printed
    return {"function": mapping.function, "arity": len(arguments), "arguments": arguments}


def _routes(step: StepNode) -> list[dict[str, Any]]:
    routes: list[dict[str, Any]] = []
    for route in routes_of(step):
        shown: dict[str, Any] = {"kind": route.kind}
        if route.kind == "case":
            shown["label"] = route.label
        elif route.kind == "refusal":
            shown["code"] = route.label
        shown["target"] = route.target
        routes.append(shown)
    return routes


def explain_result(definition: DefinitionCheck, *, warnings: bool) -> dict[str, Any]:
    """The `explain` result of 02 §11: the check result extended with the whole structure."""
    ir, model, facts = definition.ir, definition.model, definition.graph
    assert ir is not None and model is not None and facts is not None
    assert model.project is not None and model.steps is not None
    result = check_result(definition, warnings=warnings)
    if model.project.title is not None:
        result["title"] = model.project.title
    result["start"] = ir.start
    result["deadlineSeconds"] = ir.deadline_seconds
    operations: dict[str, Any] = {}
    connections: dict[str, str] = {}
    for name, alias in ir.aliases.items():
        described: dict[str, Any] = {
            "operation": alias.operation.id,
            "connection": alias.connection,
        }
        if alias.action is not None:
            described["action"] = alias.action
        identity = alias.operation.to_json()
        for member in (
            "product",
            "effect",
            "keyRequirement",
            "recovery",
            "readReceipt",
            "declaredRefusals",
            "completions",
        ):
            described[member] = identity[member]
        operations[name] = described
        connections[alias.connection] = alias.operation.product
    result["operations"] = operations
    result["connections"] = dict(sorted(connections.items()))
    result["triggers"] = [
        {
            "id": trigger.id,
            "source": trigger.source,
            "event": trigger.event,
            "mapping": _mapping(trigger.input),
        }
        for trigger in (model.triggers or {}).values()
        if trigger.input is not None
    ]
    result["outcomes"] = list(ir.outcomes)
    steps = []
    for step_id in facts.order:
        spec = ir.steps[step_id]
        node = model.steps[step_id]
        described = {"id": step_id, "type": spec.type}
        if node.title is not None:
            described["title"] = node.title
        described["routes"] = _routes(node)
        mapping = mapping_of(node)
        if mapping is not None:
            described["mapping"] = _mapping(mapping)
        if isinstance(spec, CallStep):
            descriptor = spec.alias.operation
            described.update(
                alias=spec.alias.name,
                operation=descriptor.id,
                product=descriptor.product,
                effect=descriptor.effect,
                recovery=descriptor.recovery,
            )
        elif isinstance(spec, WaitForStep):
            node_wait = model.steps[step_id]
            assert isinstance(node_wait, WaitForNode)
            described.update(
                call=spec.call,
                completion=node_wait.completion,
                timeoutSeconds=spec.timeout_seconds,
                observeOperation=spec.completion.observe,
                defaultIntervalSeconds=spec.completion.default_interval_seconds,
            )
        elif isinstance(spec, ChooseStep):
            described["cases"] = dict(spec.cases)
        elif isinstance(spec, FinishStep):
            described["outcome"] = spec.outcome
        described["available"] = sorted(facts.available[step_id])
        steps.append(described)
    result["steps"] = steps
    result["limits"] = dict(LIMITS)
    result["interpreterAbi"] = limits.INTERPRETER_ABI
    result["schemaAbi"] = limits.SCHEMA_ABI
    result["adapterAbi"] = limits.ADAPTER_ABI
    result["networkAccess"] = False
    result["databaseAccess"] = False
    result["secretResolution"] = False
    result["recovery"] = RECOVERY_SENTENCE
    return result


def render_graph(explained: Mapping[str, Any], style: str, path: RunPath | None = None) -> str:
    """The step graph as Mermaid (`mermaid`), Graphviz (`dot`) or SVG (`svg`, graph_svg.py),
    edges labelled by route; with `path`, a run's steps, routes and current step drawn over it."""
    if style == "svg":
        return render_svg(explained, path)
    steps = explained["steps"]
    node_id = {step["id"]: f"s{index}" for index, step in enumerate(steps)}
    lines: list[str] = []

    def taken(step: Mapping[str, Any], route: Mapping[str, Any]) -> bool:
        return path is not None and route_taken(path, step["id"], route)

    def label_of(step: Mapping[str, Any], route: Mapping[str, Any]) -> str:
        return edge_label(step["type"], route) + (" (taken)" if taken(step, route) else "")

    if style == "mermaid":
        lines.append("flowchart TD")
        shapes = {
            "call": ('["', '"]'),
            "choose": ('{"', '"}'),
            "wait-until": ('(["', '"])'),
            "wait-for": (('(["', '"])')),
            "finish": ('[["', '"]]'),
        }
        for step in steps:
            opening, closing = shapes[step["type"]]
            label = f"{_mermaid(step['id'])}<br/><small>{_mermaid(node_detail(step))}</small>"
            if path is not None:
                label += f"<br/><small>{_mermaid(mark_line(path, step['id']))}</small>"
            lines.append(f"    {node_id[step['id']]}{opening}{label}{closing}")
        for step in steps:
            for route in step["routes"]:
                if taken(step, route):
                    arrow = "==>"
                elif route["kind"] in DASHED_ROUTES:
                    arrow = "-.->"
                else:
                    arrow = "-->"
                label = _mermaid(label_of(step, route))
                lines.append(
                    f'    {node_id[step["id"]]} {arrow}|"{label}"| {node_id[route["target"]]}'
                )
        lines.append("    classDef finish fill:#e8f5e9,stroke:#2e7d32")
        lines.append("    classDef wait fill:#e3f2fd,stroke:#1565c0")
        finishes = [node_id[s["id"]] for s in steps if s["type"] == "finish"]
        waits = [node_id[s["id"]] for s in steps if s["type"] in ("wait-for", "wait-until")]
        if finishes:
            lines.append(f"    class {','.join(finishes)} finish")
        if waits:
            lines.append(f"    class {','.join(waits)} wait")
        if path is not None:
            lines.append("    classDef entered stroke-width:3px")
            lines.append("    classDef current stroke-width:5px,stroke-dasharray:6 3,fill:#fff59d")
            lines.append("    classDef faint opacity:0.5")
            groups = {
                "entered": [
                    node_id[s["id"]]
                    for s in steps
                    if s["id"] in path.steps and s["id"] != path.current
                ],
                "current": [node_id[s["id"]] for s in steps if s["id"] == path.current],
                "faint": [node_id[s["id"]] for s in steps if s["id"] not in path.steps],
            }
            for name, members in groups.items():
                if members:
                    lines.append(f"    class {','.join(members)} {name}")
        return "\n".join(lines) + "\n"
    shapes_dot = {
        "call": "box",
        "choose": "diamond",
        "wait-until": "ellipse",
        "wait-for": "ellipse",
        "finish": "doubleoctagon",
    }
    lines.append(f"digraph {_dot(str(explained['workflow']))} {{")
    lines.append("    rankdir=TB;")
    lines.append('    node [fontname="Helvetica"]; edge [fontname="Helvetica", fontsize=10];')
    for step in steps:
        parts = [str(step["id"]), node_detail(step)]
        attributes = f"shape={shapes_dot[step['type']]}"
        if path is not None:
            parts.append(mark_line(path, step["id"]))
            if step["id"] == path.current:
                attributes += ', penwidth=4, style="bold,dashed,filled", fillcolor="#fff59d"'
            elif step["id"] in path.steps:
                attributes += ", penwidth=3"
            else:
                attributes += ', color="#999999", fontcolor="#777777"'
        label = _dot("\n".join(parts))
        lines.append(f"    {node_id[step['id']]} [{attributes}, label={label}];")
    for step in steps:
        for route in step["routes"]:
            styles = []
            if route["kind"] in DASHED_ROUTES:
                styles.append("dashed")
            attributes = ""
            if taken(step, route):
                styles.append("bold")
                attributes += ", penwidth=3"
            elif path is not None:
                attributes += ', color="#999999", fontcolor="#777777"'
            if styles:
                attributes += f", style={_dot(','.join(styles))}"
            label = _dot(label_of(step, route))
            lines.append(
                f"    {node_id[step['id']]} -> {node_id[route['target']]}"
                f" [label={label}{attributes}];"
            )
    lines.append("}")
    return "\n".join(lines) + "\n"


def _mermaid(text: str) -> str:
    """Text inside a quoted Mermaid label: quotes and markup characters as entity codes."""
    return "".join(f"#{ord(ch)};" if ch in '"<>&#' else ch for ch in text)


def _dot(text: str) -> str:
    """A Graphviz quoted string: backslashes and quotes escaped, line feeds as `\\n`."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
