"""The step graph: route edges, reachability (G1), cycles (G2) and edge-aware availability (A).

Availability follows contract 02 §6: a call or wait-for gives its output only on its success
edge, so a step's available outputs are the intersection, over every incoming edge, of what the
edge's source had plus what the edge itself gives. `graph_rules` runs G1–G2 and then A1–A3 over
the typed model.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from coordinator_core.authoring.model import (
    WORKFLOW_FILE,
    CallNode,
    RouteKind,
    StepNode,
    WaitForNode,
    WaitUntilNode,
    WorkflowModel,
    routes_of,
)
from coordinator_core.errors import Diagnostic, Related

__all__ = [
    "Edge",
    "EdgeKind",
    "GraphFacts",
    "RouteKind",
    "availability",
    "edges_of",
    "find_cycle",
    "graph_rules",
    "missing_route",
    "reachable_from",
    "topological_order",
]

EdgeKind = Literal["plain", "success", "refusal", "timeout", "cancel"]


@dataclass(frozen=True, slots=True)
class Edge:
    """One route from `source` to `target`; `pointer` is the route member in workflow.yaml."""

    source: str
    target: str
    kind: EdgeKind
    route: RouteKind
    pointer: str
    label: str | None = None

    def gives(self) -> str | None:
        """The output this edge makes available: its source's, on a success edge only."""
        return self.source if self.kind == "success" else None


_EDGE_KIND: dict[str, EdgeKind] = {
    "refusal": "refusal",
    "timeout": "timeout",
    "cancel": "cancel",
    "case": "plain",
}


def edges_of(step: StepNode) -> list[Edge]:
    """The outgoing edges of one decoded step, in document order of its route members."""
    edges: list[Edge] = []
    for route in routes_of(step):
        if route.kind == "next":
            kind: EdgeKind = "plain" if isinstance(step, WaitUntilNode) else "success"
        else:
            kind = _EDGE_KIND[route.kind]
        edges.append(Edge(step.id, route.target, kind, route.kind, route.pointer, route.label))
    return edges


def reachable_from(start: str, edges: Iterable[Edge]) -> list[str]:
    """Steps reachable from `start` along every route kind, in breadth-first order (G1)."""
    outgoing: dict[str, list[str]] = {}
    for edge in edges:
        outgoing.setdefault(edge.source, []).append(edge.target)
    seen = {start}
    order = [start]
    queue = deque([start])
    while queue:
        for target in outgoing.get(queue.popleft(), ()):
            if target not in seen:
                seen.add(target)
                order.append(target)
                queue.append(target)
    return order


def topological_order(
    start: str, nodes: Sequence[str], edges: Sequence[Edge]
) -> tuple[list[str], list[str]]:
    """Kahn's algorithm over `nodes`, beginning with `start`.

    Returns (order, stuck): `stuck` lists the nodes never freed, which lie on or behind a cycle.
    Ties are broken by the order of `nodes`, so the result is deterministic.
    """
    members = set(nodes)
    indegree = dict.fromkeys(nodes, 0)
    outgoing: dict[str, list[str]] = {node: [] for node in nodes}
    for edge in edges:
        if edge.source in members and edge.target in members:
            indegree[edge.target] += 1
            outgoing[edge.source].append(edge.target)
    rank = {node: index for index, node in enumerate(nodes)}
    ready = [node for node in nodes if indegree[node] == 0]
    ready.sort(key=lambda node: (node != start, rank[node]))
    order: list[str] = []
    while ready:
        node = ready.pop(0)
        order.append(node)
        for target in outgoing[node]:
            indegree[target] -= 1
            if indegree[target] == 0:
                ready.append(target)
                ready.sort(key=lambda n: rank[n])
    stuck = [node for node in nodes if node not in set(order)]
    return order, stuck


def find_cycle(stuck: Sequence[str], edges: Sequence[Edge]) -> list[str]:
    """One cycle among the steps Kahn could not free, as the list of its steps in route order."""
    members = set(stuck)
    incoming: dict[str, list[str]] = {node: [] for node in stuck}
    for edge in edges:
        if edge.source in members and edge.target in members:
            incoming[edge.target].append(edge.source)
    # Every stuck node kept a stuck predecessor (else Kahn would have freed it), so walking
    # backwards must repeat a node, and the repeated stretch is a cycle.
    if not stuck:
        return []
    path: list[str] = []
    position: dict[str, int] = {}
    node = stuck[0]
    while node not in position:
        position[node] = len(path)
        path.append(node)
        node = incoming[node][0]
    cycle = path[position[node] :]
    cycle.reverse()
    return cycle


def availability(
    order: Sequence[str], start: str, edges: Sequence[Edge]
) -> dict[str, frozenset[str]]:
    """AVAIL(s) for every step of `order` (a topological order beginning with `start`)."""
    incoming: dict[str, list[Edge]] = {}
    for edge in edges:
        incoming.setdefault(edge.target, []).append(edge)
    avail: dict[str, frozenset[str]] = {}
    for step in order:
        if step == start:
            avail[step] = frozenset()
            continue
        result: frozenset[str] | None = None
        for edge in incoming.get(step, ()):
            if edge.source not in avail:
                continue
            given = edge.gives()
            here = avail[edge.source] | {given} if given else avail[edge.source]
            result = here if result is None else result & here
        avail[step] = result if result is not None else frozenset()
    return avail


def missing_route(
    step: str,
    needed: str,
    edges: Sequence[Edge],
    avail: Mapping[str, frozenset[str]],
) -> Edge | None:
    """An incoming route on which `needed` is missing, for the `related` entry of A2/A3.

    Walks back from `step` along edges that lack `needed`; stops at the edge where the output
    was lost (a non-success route out of `needed` itself) or, when the route never passed
    through `needed`, reports the first edge into `step`.
    """
    incoming: dict[str, list[Edge]] = {}
    for edge in edges:
        incoming.setdefault(edge.target, []).append(edge)
    first: Edge | None = None
    current = step
    visited: set[str] = set()
    while current not in visited:
        visited.add(current)
        chosen = None
        for edge in incoming.get(current, ()):
            if edge.source not in avail:
                continue
            if needed not in avail[edge.source] and edge.gives() != needed:
                chosen = edge
                break
        if chosen is None:
            return first
        if first is None:
            first = chosen
        if chosen.source == needed:
            return chosen
        current = chosen.source
    return first


# -- the graph and availability rules (02 §5.3, §6) ---------------------------------------------


@dataclass(frozen=True)
class GraphFacts:
    """The graph of a definition that passed G1–G2: edges, order and availability."""

    edges: tuple[Edge, ...]
    order: tuple[str, ...]
    available: Mapping[str, frozenset[str]]


Report = Callable[..., None]


def graph_rules(model: WorkflowModel, out: list[Diagnostic]) -> GraphFacts | None:
    """G1, G2 and then A1–A3 over a model whose steps all decoded and whose route targets all
    resolved (02 §4.1 steps 5–6); None when G1 or G2 found something."""
    assert model.steps is not None and model.start is not None
    steps = model.steps
    start = model.start
    edges: list[Edge] = []
    for step in steps.values():
        edges.extend(edges_of(step))

    def report(code: str, pointer: str, **extra: Any) -> None:
        out.append(model.diagnostic(code, pointer, **extra))

    reached = reachable_from(start, edges)
    reached_set = set(reached)
    found = False
    for step in steps.values():
        if step.id not in reached_set:
            found = True
            out.append(
                model.diagnostic(
                    "coordinator.definition.unreachable",
                    step.pointer,
                    key=True,
                    message=f"Step {step.id} cannot be reached from the start step.",
                )
            )
    nodes = [step_id for step_id in steps if step_id in reached_set]
    reachable_edges = [e for e in edges if e.source in reached_set]
    order, stuck = topological_order(start, nodes, reachable_edges)
    if stuck:
        found = True
        cycle = find_cycle(stuck, reachable_edges)
        related = []
        for step_id in cycle:
            pointer = steps[step_id].pointer
            line, column = model.key_position(pointer)
            related.append(
                Related(WORKFLOW_FILE, pointer, "a step on the cycle", line=line, column=column)
            )
        report("coordinator.definition.cycle", "/steps", related=tuple(related))
    if found:
        return None
    available = availability(order, start, reachable_edges)
    _availability_rules(model, reachable_edges, available, report)
    return GraphFacts(tuple(reachable_edges), tuple(order), available)


def _availability_rules(
    model: WorkflowModel,
    edges: Sequence[Edge],
    available: Mapping[str, frozenset[str]],
    report: Report,
) -> None:
    """A2 and A3: every step argument and every `wait-for.call` names a step whose output is
    available on every route in (A1 is the analysis itself)."""
    steps = model.steps or {}

    def missing_note(step_id: str, needed: str) -> tuple[Related, ...]:
        edge = missing_route(step_id, needed, edges, available)
        if edge is None:
            return ()
        line, column = model.position(edge.pointer)
        return (
            Related(
                WORKFLOW_FILE,
                edge.pointer,
                "a route on which it is missing",
                line=line,
                column=column,
            ),
        )

    for use in model.mappings():
        if use.step is None or use.mapping.arguments is None:
            continue
        for argument in use.mapping.arguments:
            if argument.kind != "step" or argument.step is None:
                continue
            needed = argument.step
            if not isinstance(steps.get(needed), CallNode | WaitForNode):
                report(
                    "coordinator.mapping.reference",
                    f"{argument.pointer}/step",
                    message=f"Step {needed} is not a call or wait-for step with an output.",
                )
            elif needed not in available.get(use.step, frozenset()):
                report(
                    "coordinator.mapping.dominance",
                    argument.pointer,
                    message=f"Step {needed} is not available on every route into step {use.step}.",
                    related=missing_note(use.step, needed),
                )
    for step in steps.values():
        if not isinstance(step, WaitForNode) or step.call is None:
            continue
        called = step.call
        if isinstance(steps.get(called), CallNode) and called not in available.get(
            step.id, frozenset()
        ):
            report(
                "coordinator.mapping.dominance",
                f"{step.pointer}/call",
                message=f"Step {called} has not succeeded on every route into step {step.id}.",
                related=missing_note(step.id, called),
            )
