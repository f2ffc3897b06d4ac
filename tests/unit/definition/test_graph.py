"""Graph rules: reachability, cycles and the edge-aware availability analysis (02 §5.3, §6)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from coordinator_core.authoring.model import model_from_json
from coordinator_core.definition import graph

STEP_TYPES = ("call", "choose", "wait-until", "wait-for", "finish")


def _edges(steps: dict[str, dict[str, Any]]) -> list[graph.Edge]:
    """The edges of these steps, read as the typed model reads them (other members absent)."""
    document = {
        "apiVersion": "id.registrystack.org/formats/coordinator/project/v1alpha1",
        "kind": "CoordinatorProject",
        "steps": steps,
    }
    model = model_from_json(document, file="workflow.yaml", artifact=None, out=[])
    assert model is not None and model.steps is not None
    edges: list[graph.Edge] = []
    for node in model.steps.values():
        edges.extend(graph.edges_of(node))
    return edges


@st.composite
def acyclic_workflows(draw: st.DrawFn) -> dict[str, dict[str, Any]]:
    """Random acyclic step graphs: step i only routes to steps after it."""
    count = draw(st.integers(min_value=2, max_value=12))
    ids = [f"s{i}" for i in range(count)]
    steps: dict[str, dict[str, Any]] = {}
    for index, step_id in enumerate(ids):
        later = ids[index + 1 :]
        if not later:
            steps[step_id] = {"type": "finish", "outcome": "done"}
            continue
        kind = draw(st.sampled_from(STEP_TYPES))
        target = st.sampled_from(later)
        if kind == "finish":
            steps[step_id] = {"type": "finish", "outcome": "done"}
        elif kind == "call":
            step: dict[str, Any] = {"type": "call", "next": draw(target)}
            refusals = draw(st.lists(target, max_size=2))
            if refusals:
                step["onDeclaredRefusal"] = {f"r{i}": t for i, t in enumerate(refusals)}
            steps[step_id] = step
        elif kind == "choose":
            cases = draw(st.lists(target, min_size=1, max_size=3))
            steps[step_id] = {"type": "choose", "cases": {f"c{i}": t for i, t in enumerate(cases)}}
        elif kind == "wait-until":
            steps[step_id] = {"type": "wait-until", "next": draw(target)}
        else:
            step = {"type": "wait-for", "next": draw(target)}
            if draw(st.booleans()):
                step["onTimeout"] = draw(target)
            if draw(st.booleans()):
                step["onCancel"] = draw(target)
            steps[step_id] = step
    return steps


def _brute_force(start: str, steps: dict[str, dict[str, Any]]) -> dict[str, frozenset[str]]:
    """Enumerate every route from start; X is available at s iff every route into s left X
    through its success edge."""
    outgoing: dict[str, list[graph.Edge]] = {}
    for edge in _edges(steps):
        outgoing.setdefault(edge.source, []).append(edge)
    seen: dict[str, frozenset[str] | None] = {}

    def walk(node: str, gathered: frozenset[str]) -> None:
        previous = seen.get(node)
        seen[node] = gathered if previous is None else previous & gathered
        for edge in outgoing.get(node, []):
            given = edge.gives()
            walk(edge.target, gathered | {given} if given else gathered)

    walk(start, frozenset())
    return {node: value for node, value in seen.items() if value is not None}


@given(acyclic_workflows())
def test_availability_agrees_with_brute_force_route_enumeration(
    steps: dict[str, dict[str, Any]],
) -> None:
    start = "s0"
    edges = _edges(steps)
    reached = graph.reachable_from(start, edges)
    reachable_edges = [e for e in edges if e.source in set(reached)]
    nodes = [s for s in steps if s in set(reached)]
    order, stuck = graph.topological_order(start, nodes, reachable_edges)
    assert not stuck
    computed = graph.availability(order, start, reachable_edges)
    expected = _brute_force(start, steps)
    assert computed == expected


def test_success_edge_gives_its_source_and_other_edges_give_nothing() -> None:
    steps = {
        "call": {"type": "call", "next": "wait", "onDeclaredRefusal": {"no": "end"}},
        "wait": {"type": "wait-for", "next": "end", "onTimeout": "end", "onCancel": "end"},
        "end": {"type": "finish"},
    }
    edges = _edges(steps)
    order, _ = graph.topological_order("call", list(steps), edges)
    available = graph.availability(order, "call", edges)
    assert available["wait"] == {"call"}
    assert available["end"] == frozenset()  # the refusal route never had call's output


def test_unreachable_steps_are_not_visited() -> None:
    steps = {
        "a": {"type": "wait-until", "next": "b"},
        "b": {"type": "finish"},
        "c": {"type": "wait-until", "next": "b"},
    }
    assert graph.reachable_from("a", _edges(steps)) == ["a", "b"]


def test_cycle_is_found_even_behind_a_stuck_tail() -> None:
    steps = {
        "a": {"type": "wait-until", "next": "b"},
        "b": {"type": "choose", "cases": {"x": "c", "y": "d"}},
        "c": {"type": "wait-until", "next": "b"},
        "d": {"type": "finish"},
    }
    edges = _edges(steps)
    order, stuck = graph.topological_order("a", list(steps), edges)
    assert order == ["a"]
    cycle = graph.find_cycle(stuck, edges)
    assert sorted(cycle) == ["b", "c"]


def test_missing_route_names_the_edge_where_the_output_was_lost() -> None:
    steps = {
        "ask": {"type": "call", "next": "wait"},
        "wait": {"type": "wait-for", "next": "use", "onTimeout": "use"},
        "use": {"type": "finish"},
    }
    edges = _edges(steps)
    order, _ = graph.topological_order("ask", list(steps), edges)
    available = graph.availability(order, "ask", edges)
    edge = graph.missing_route("use", "wait", edges, available)
    assert edge is not None and edge.pointer == "/steps/wait/onTimeout"
