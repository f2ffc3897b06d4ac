"""The step graph: route edges, reachability (G1), cycles (G2) and edge-aware availability (A).

Availability follows contract 02 §6: a call or wait-for gives its output only on its success
edge, so a step's available outputs are the intersection, over every incoming edge, of what the
edge's source had plus what the edge itself gives.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from coordinator_core.values import pointer_token as escape_pointer_token

__all__ = [
    "Edge",
    "EdgeKind",
    "availability",
    "edges_of",
    "find_cycle",
    "missing_route",
    "reachable_from",
    "topological_order",
]

EdgeKind = Literal["plain", "success", "refusal", "timeout", "cancel"]
RouteKind = Literal["next", "case", "refusal", "timeout", "cancel"]


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


def edges_of(step_id: str, step: Mapping[str, Any]) -> list[Edge]:
    """The outgoing edges of one decoded step, in document order of its route members."""
    base = f"/steps/{escape_pointer_token(step_id)}"
    step_type = step.get("type")
    edges: list[Edge] = []

    def add(
        target: Any, kind: EdgeKind, route: RouteKind, member: str, label: str | None = None
    ) -> None:
        if isinstance(target, str):
            edges.append(Edge(step_id, target, kind, route, f"{base}/{member}", label))

    if step_type == "wait-until":
        add(step.get("next"), "plain", "next", "next")
    elif step_type == "call":
        add(step.get("next"), "success", "next", "next")
        for code, target in (step.get("onDeclaredRefusal") or {}).items():
            add(
                target,
                "refusal",
                "refusal",
                f"onDeclaredRefusal/{escape_pointer_token(code)}",
                code,
            )
    elif step_type == "wait-for":
        add(step.get("next"), "success", "next", "next")
        add(step.get("onTimeout"), "timeout", "timeout", "onTimeout")
        add(step.get("onCancel"), "cancel", "cancel", "onCancel")
    elif step_type == "choose":
        for label, target in (step.get("cases") or {}).items():
            add(target, "plain", "case", f"cases/{escape_pointer_token(label)}", label)
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
