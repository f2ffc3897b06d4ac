"""The step graph as a self-contained SVG 1.1 picture, drawn by our own layout (no Graphviz, no
script), and the run path that `inspect --graph` draws over any of the pictures.

Pure: text in, text out. The input is the `explain` result (its `steps`, in topological order,
with their `routes`); the picture carries step ids, step types, operation ids, completion names,
outcomes and route words only, never a value. Every label is escaped for XML.

Layout (deterministic, so the same project gives the same bytes):

1. layers by longest path from the start step (the first step of the topological order);
2. an edge that spans more than one layer passes through one waypoint per layer it crosses;
3. the order within each layer starts as the topological order and is improved by barycentre
   sweeps (down, up, down): each node moves to the mean position of its neighbours in the layer
   before, ties kept in the earlier order;
4. layers are centred; an edge leaves the bottom side of its source box and enters the top
   side of its target box, its ports spread along those sides in the order of their ends.

Readable without colour: the step type is the second line of every box and also its shape
(`call` square corners, `choose` a diamond mark, waits rounded ends, `finish` a double border);
routes on which the source produced nothing (`timeout`, `cancel`, `refusal: …`) are dashed.
With a run path, entered steps have a heavy border and a third line naming their record state
(and a call's effect), the current step says `now: …` and has a heavier dashed-double border,
taken routes are heavy lines whose label ends in `(taken)`, and steps the run did not enter are
drawn faint.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Final
from xml.sax.saxutils import escape, quoteattr

__all__ = [
    "DASHED_ROUTES",
    "GRAPH_NAMESPACE",
    "RunPath",
    "StepMark",
    "edge_label",
    "node_detail",
    "render_svg",
    "route_taken",
]

DASHED_ROUTES: Final = frozenset({"timeout", "cancel", "refusal"})
# The namespace of the two attributes that name a route's ends (`c:source`, `c:target`): SVG 1.1
# has no `data-*` attributes, but allows attributes of a foreign namespace.
GRAPH_NAMESPACE: Final = "https://id.registrystack.org/formats/coordinator/graph"

CHAR_WIDTH: Final = 7.2  # 12px monospace: the advance of one character
LINE_HEIGHT: Final = 15
BOX_PADDING: Final = 14
BOX_MIN_WIDTH: Final = 120
NODE_GAP: Final = 36
LAYER_GAP: Final = 84
WAYPOINT_WIDTH: Final = 16
MARGIN: Final = 24
LABEL_CHAR_WIDTH: Final = 6.0  # 10px monospace


@dataclass(frozen=True, slots=True)
class StepMark:
    """What a run did at one step: its record state (06 §11.3), the route it left by (kind and,
    for a case, the label), and for a call the state of its effect (06 §11.4), if it has one."""

    state: str
    route_kind: str | None = None
    route_label: str | None = None
    effect: str | None = None


@dataclass(frozen=True, slots=True)
class RunPath:
    """A run drawn over its workflow's graph: the steps it entered and the current step."""

    current: str
    status: str
    steps: Mapping[str, StepMark] = field(default_factory=dict)


def node_detail(step: Mapping[str, Any]) -> str:
    """The second line of a step's box: what the step does."""
    if step["type"] == "call":
        return str(step["operation"])
    if step["type"] == "wait-for":
        return f"wait for {step['call']}.{step['completion']}"
    if step["type"] == "finish":
        return f"finish: {step['outcome']}"
    return str(step["type"])


def edge_label(step_type: str, route: Mapping[str, Any]) -> str:
    """The route word of an edge: `success`, `completed`, `due`, a case label, `timeout`,
    `cancel` or `refusal: <code>`."""
    kind = route["kind"]
    if kind == "case":
        return str(route["label"])
    if kind == "refusal":
        return f"refusal: {route['code']}"
    if kind == "next":
        return {"call": "success", "wait-for": "completed", "wait-until": "due"}.get(
            step_type, "next"
        )
    return str(kind)


def route_taken(path: RunPath, source: str, route: Mapping[str, Any]) -> bool:
    """Whether the run left `source` by `route`: the step's recorded route has the route's kind
    (and label, for a case) and the run entered the route's target (which tells the declared
    refusals of one call apart)."""
    mark = path.steps.get(source)
    if mark is None or mark.route_kind != route["kind"] or route["target"] not in path.steps:
        return False
    return route["kind"] != "case" or mark.route_label == route.get("label")


def mark_line(path: RunPath, step_id: str) -> str:
    """The third line of a step's box under a run path."""
    mark = path.steps.get(step_id)
    if mark is None:
        return "not entered"
    text = f"now: {mark.state}" if step_id == path.current else mark.state
    if mark.effect is not None:
        text += f", effect {mark.effect}"
    return text


# --------------------------------------------------------------------------------------------
# Layout.


@dataclass(slots=True)
class _Node:
    key: str  # a step id, or "~<edge index>~<layer>" for a waypoint
    layer: int
    width: float
    step: Mapping[str, Any] | None  # None for a waypoint
    x: float = 0.0  # centre
    y: float = 0.0  # top


@dataclass(frozen=True, slots=True)
class _Edge:
    source: str
    target: str
    route: Mapping[str, Any]
    label: str
    dashed: bool
    chain: tuple[str, ...]  # node keys from source to target, waypoints between


def _layers(steps: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    layer = {step["id"]: 0 for step in steps}
    for step in steps:  # topological order: every predecessor is final before its successors
        for route in step["routes"]:
            layer[route["target"]] = max(layer[route["target"]], layer[step["id"]] + 1)
    return layer


def _box_width(lines: Sequence[str]) -> float:
    return max(BOX_MIN_WIDTH, max(len(line) for line in lines) * CHAR_WIDTH + 2 * BOX_PADDING)


def _box_lines(step: Mapping[str, Any], path: RunPath | None) -> list[str]:
    lines = [str(step["id"]), node_detail(step)]
    if path is not None:
        lines.append(mark_line(path, step["id"]))
    return lines


def _order(rows: list[list[str]], edges: Sequence[_Edge]) -> None:
    """Barycentre sweeps over the layer rows, in place (stable: ties keep the earlier order)."""
    above: dict[str, list[str]] = {}
    below: dict[str, list[str]] = {}
    for edge in edges:
        for upper, lower in pairwise(edge.chain):
            below.setdefault(upper, []).append(lower)
            above.setdefault(lower, []).append(upper)

    def sweep(indices: Sequence[int], neighbours: Mapping[str, list[str]], ref: int) -> None:
        for index in indices:
            fixed = {key: position for position, key in enumerate(rows[index + ref])}
            current = {key: position for position, key in enumerate(rows[index])}

            def centre(
                key: str, fixed: dict[str, int] = fixed, current: dict[str, int] = current
            ) -> float:
                linked = [fixed[other] for other in neighbours.get(key, []) if other in fixed]
                return sum(linked) / len(linked) if linked else float(current[key])

            rows[index].sort(key=lambda key: (centre(key), current[key]))

    count = len(rows)
    sweep(range(1, count), above, -1)
    sweep(range(count - 2, -1, -1), below, +1)
    sweep(range(1, count), above, -1)


def _place(rows: list[list[str]], nodes: dict[str, _Node], edges: Sequence[_Edge]) -> None:
    """Horizontal centres, layer by layer from the top: each node as near as it can be to the
    mean centre of its neighbours in the layer above, in its row's order, the row kept at least
    NODE_GAP apart and shifted as a whole so that it sits, on average, under its parents."""
    above: dict[str, list[str]] = {}
    for edge in edges:
        for upper, lower in pairwise(edge.chain):
            above.setdefault(lower, []).append(upper)
    for index, row in enumerate(rows):
        packed: list[float] = []
        x = 0.0
        for key in row:
            packed.append(x + nodes[key].width / 2)
            x += nodes[key].width + NODE_GAP
        offset = (x - NODE_GAP) / 2
        packed = [centre - offset for centre in packed]  # the row centred on 0
        if index == 0:
            for key, centre in zip(row, packed, strict=True):
                nodes[key].x = centre
            continue
        desired = []
        for key, centre in zip(row, packed, strict=True):
            parents = [nodes[other].x for other in above.get(key, [])]
            desired.append(sum(parents) / len(parents) if parents else centre)
        placed: list[float] = []
        for position, key in enumerate(row):
            want = desired[position]
            if placed:
                previous = nodes[row[position - 1]]
                want = max(want, placed[-1] + previous.width / 2 + NODE_GAP + nodes[key].width / 2)
            placed.append(want)
        shift = sum(d - p for d, p in zip(desired, placed, strict=True)) / len(placed)
        for key, centre in zip(row, placed, strict=True):
            nodes[key].x = centre + shift


@dataclass(slots=True)
class _Layout:
    nodes: dict[str, _Node]
    edges: list[_Edge]
    width: float
    height: float
    box_height: float
    ports: dict[tuple[int, str], float]  # (edge index, "out"|"in") → x


def _layout(steps: Sequence[Mapping[str, Any]], path: RunPath | None) -> _Layout:
    layer = _layers(steps)
    line_count = 3 if path is not None else 2
    box_height = line_count * LINE_HEIGHT + 14
    nodes: dict[str, _Node] = {}
    for step in steps:
        nodes[step["id"]] = _Node(
            step["id"], layer[step["id"]], _box_width(_box_lines(step, path)), step
        )
    edges: list[_Edge] = []
    for step in steps:
        for route in step["routes"]:
            index = len(edges)
            source, target = step["id"], route["target"]
            chain = [source]
            for between in range(layer[source] + 1, layer[target]):
                key = f"~{index}~{between}"
                nodes[key] = _Node(key, between, WAYPOINT_WIDTH, None)
                chain.append(key)
            chain.append(target)
            edges.append(
                _Edge(
                    source,
                    target,
                    route,
                    edge_label(step["type"], route),
                    route["kind"] in DASHED_ROUTES,
                    tuple(chain),
                )
            )
    depth = max(layer.values(), default=0) + 1
    rows: list[list[str]] = [[] for _ in range(depth)]
    for key, node in nodes.items():  # steps in topological order, then waypoints by edge
        rows[node.layer].append(key)
    _order(rows, edges)
    _place(rows, nodes, edges)
    left = min((node.x - node.width / 2 for node in nodes.values()), default=0.0)
    right = max((node.x + node.width / 2 for node in nodes.values()), default=0.0)
    for node in nodes.values():
        node.x += MARGIN - left
        node.y = MARGIN + node.layer * (box_height + LAYER_GAP)
    inner = right - left
    ports: dict[tuple[int, str], float] = {}
    for key, node in nodes.items():
        if node.step is None:
            continue
        leaving = [i for i, edge in enumerate(edges) if edge.source == key]
        entering = [i for i, edge in enumerate(edges) if edge.target == key]
        leaving.sort(key=lambda i: (nodes[edges[i].chain[1]].x, i))
        entering.sort(key=lambda i: (nodes[edges[i].chain[-2]].x, i))
        for side, group in (("out", leaving), ("in", entering)):
            span = node.width - 2 * BOX_PADDING
            for position, i in enumerate(group):
                ports[(i, side)] = node.x - span / 2 + span * (position + 1) / (len(group) + 1)
    height = MARGIN * 2 + depth * box_height + (depth - 1) * LAYER_GAP
    return _Layout(nodes, edges, inner + 2 * MARGIN, height, box_height, ports)


# --------------------------------------------------------------------------------------------
# Drawing.

_STYLE: Final = (
    "text{font-family:monospace;fill:#111}"
    ".box{stroke:#222;stroke-width:1.5}"
    ".call .box{fill:#fafafa}.choose .box{fill:#fff8e1}"
    ".wait-for .box,.wait-until .box{fill:#e3f2fd}.finish .box{fill:#e8f5e9}"
    ".inner{fill:none;stroke:#222;stroke-width:1}"
    ".mark{fill:#222}"
    ".id{font-size:12px;font-weight:bold}.detail{font-size:11px}.state{font-size:11px}"
    ".edge{fill:none;stroke:#333;stroke-width:1.3}"
    ".dashed{stroke-dasharray:6,4}"
    ".label{font-size:10px}.label-bg{fill:#fff;opacity:0.9}"
    ".entered .box{stroke-width:3}.current .box{stroke-width:4.5;stroke:#000}"
    ".current .inner{stroke-width:2}.current .box{fill:#fff59d}"
    ".faint{opacity:0.45}.taken{stroke-width:3.2;stroke:#000}.taken-label{font-weight:bold}"
)


def _num(value: float) -> str:
    """A coordinate with at most one decimal, the same text on every platform."""
    text = f"{round(value, 1):.1f}"
    return text[:-2] if text.endswith(".0") else text


def _text(x: float, y: float, css: str, content: str, anchor: str = "middle") -> str:
    return (
        f'<text x="{_num(x)}" y="{_num(y)}" class="{css}" text-anchor="{anchor}">'
        f"{escape(content)}</text>"
    )


def _step_group(node: _Node, layout: _Layout, path: RunPath | None) -> list[str]:
    step = node.step
    assert step is not None
    step_id = str(step["id"])
    classes = ["step", str(step["type"])]
    if path is not None:
        if step_id == path.current:
            classes.append("current")
        if step_id in path.steps:
            classes.append("entered")
        else:
            classes.append("faint")
    left, top, width, height = node.x - node.width / 2, node.y, node.width, layout.box_height
    radius = height / 2 if step["type"] in ("wait-for", "wait-until") else 0
    out = [
        f"<g class={quoteattr(' '.join(classes))} id={quoteattr('step-' + step_id)}>",
        f"<title>{escape(step_id + ' (' + str(step['type']) + ')')}</title>",
        f'<rect class="box" x="{_num(left)}" y="{_num(top)}" width="{_num(width)}"'
        f' height="{_num(height)}" rx="{_num(radius)}" ry="{_num(radius)}"/>',
    ]
    if step["type"] == "finish":
        out.append(
            f'<rect class="inner" x="{_num(left + 4)}" y="{_num(top + 4)}"'
            f' width="{_num(width - 8)}" height="{_num(height - 8)}"/>'
        )
    if step["type"] == "choose":
        cx, cy, r = left + 9, top + 12, 5
        out.append(
            f'<polygon class="mark" points="{_num(cx)},{_num(cy - r)} {_num(cx + r)},{_num(cy)}'
            f' {_num(cx)},{_num(cy + r)} {_num(cx - r)},{_num(cy)}"/>'
        )
    lines = _box_lines(step, path)
    css = ("id", "detail", "state")
    for index, line in enumerate(lines):
        baseline = top + 7 + LINE_HEIGHT * index + 11
        out.append(_text(node.x, baseline, css[index], line))
    out.append("</g>")
    return out


def _edge_points(index: int, edge: _Edge, layout: _Layout) -> list[tuple[float, float]]:
    nodes = layout.nodes
    source, target = nodes[edge.source], nodes[edge.target]
    points = [(layout.ports[(index, "out")], source.y + layout.box_height)]
    for key in edge.chain[1:-1]:
        waypoint = nodes[key]
        points.append((waypoint.x, waypoint.y))
        points.append((waypoint.x, waypoint.y + layout.box_height))
    points.append((layout.ports[(index, "in")], target.y))
    return points


def _path_data(points: Sequence[tuple[float, float]]) -> str:
    """Vertical-tangent curves between successive layers, straight runs through waypoints."""
    data = [f"M{_num(points[0][0])},{_num(points[0][1])}"]
    for (x1, y1), (x2, y2) in pairwise(points):
        if x1 == x2:
            data.append(f"L{_num(x2)},{_num(y2)}")
        else:
            middle = (y1 + y2) / 2
            data.append(
                f"C{_num(x1)},{_num(middle)} {_num(x2)},{_num(middle)} {_num(x2)},{_num(y2)}"
            )
    return " ".join(data)


def _on_leg(start: tuple[float, float], end: tuple[float, float], t: float) -> tuple[float, float]:
    """The point at parameter `t` of the curve _path_data draws from `start` to `end`."""
    (x1, y1), (x2, y2) = start, end
    middle = (y1 + y2) / 2
    u = 1 - t
    x = u**3 * x1 + 3 * u * u * t * x1 + 3 * u * t * t * x2 + t**3 * x2
    y = u**3 * y1 + 3 * u * u * t * middle + 3 * u * t * t * middle + t**3 * y2
    return x, y


_LABEL_SPOTS: Final = (0.3, 0.5, 0.18, 0.66, 0.42, 0.78)


def _label_spots(layout: _Layout, path: RunPath | None) -> list[tuple[float, float]]:
    """Where each edge's label sits: on the first leg of its curve, at the first of a few fixed
    places along it that overlaps no label placed before (greedy, in edge order)."""
    placed: list[tuple[float, float, float, float]] = []
    spots = []
    for index, edge in enumerate(layout.edges):
        start, end = _edge_points(index, edge, layout)[:2]
        taken = path is not None and route_taken(path, edge.source, edge.route)
        half = (len(edge.label + (" (taken)" if taken else "")) * LABEL_CHAR_WIDTH + 6) / 2
        chosen = None
        for t in _LABEL_SPOTS:
            x, y = _on_leg(start, end, t)
            box = (x - half, y - 8, x + half, y + 4)
            if all(
                box[2] < other[0] or other[2] < box[0] or box[3] < other[1] or other[3] < box[1]
                for other in placed
            ):
                chosen = (x, y, box)
                break
        if chosen is None:
            x, y = _on_leg(start, end, _LABEL_SPOTS[0])
            chosen = (x, y, (x - half, y - 8, x + half, y + 4))
        placed.append(chosen[2])
        spots.append((chosen[0], chosen[1]))
    return spots


def _edge_group(
    index: int, edge: _Edge, layout: _Layout, path: RunPath | None, spot: tuple[float, float]
) -> list[str]:
    points = _edge_points(index, edge, layout)
    taken = path is not None and route_taken(path, edge.source, edge.route)
    line_classes = ["edge"]
    if edge.dashed:
        line_classes.append("dashed")
    if taken:
        line_classes.append("taken")
    label = edge.label + (" (taken)" if taken else "")
    group_classes = ["route", str(edge.route["kind"])]
    if path is not None and not taken:
        group_classes.append("faint")
    lx, ly = spot
    label_width = len(label) * LABEL_CHAR_WIDTH + 6
    return [
        f"<g class={quoteattr(' '.join(group_classes))}"
        f" c:source={quoteattr(edge.source)} c:target={quoteattr(edge.target)}>",
        f"<title>{escape(edge.source + ' → ' + edge.target + ': ' + label)}</title>",
        f'<path class="{" ".join(line_classes)}" d="{_path_data(points)}"'
        f' marker-end="url(#arrow)"/>',
        f'<rect class="label-bg" x="{_num(lx - label_width / 2)}" y="{_num(ly - 8)}"'
        f' width="{_num(label_width)}" height="12"/>',
        _text(lx, ly + 2, "label taken-label" if taken else "label", label),
        "</g>",
    ]


def render_svg(explained: Mapping[str, Any], path: RunPath | None = None) -> str:
    """The step graph of an `explain` result as one SVG 1.1 document (text, ending in a line
    feed), optionally with a run's path drawn over it."""
    steps = explained["steps"]
    layout = _layout(steps, path)
    title = f"Step graph of {explained['workflow']}"
    if path is not None:
        title += f", run at {path.current} ({path.status})"
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        '<svg xmlns="http://www.w3.org/2000/svg" version="1.1"'
        f' xmlns:c="{GRAPH_NAMESPACE}"'
        f' width="{_num(layout.width)}" height="{_num(layout.height)}"'
        f' viewBox="0 0 {_num(layout.width)} {_num(layout.height)}">',
        f"<title>{escape(title)}</title>",
        "<defs>",
        '<marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7"'
        ' markerHeight="7" markerUnits="userSpaceOnUse" orient="auto">'
        '<path d="M0,0 L10,5 L0,10 z" fill="#333"/></marker>',
        f'<style type="text/css">{_STYLE}</style>',
        "</defs>",
        f'<rect x="0" y="0" width="{_num(layout.width)}" height="{_num(layout.height)}"'
        ' fill="#fff"/>',
        '<g class="edges">',
    ]
    spots = _label_spots(layout, path)
    for index, edge in enumerate(layout.edges):
        out.extend(_edge_group(index, edge, layout, path, spots[index]))
    out.append("</g>")
    out.append('<g class="steps">')
    for step in steps:
        out.extend(_step_group(layout.nodes[step["id"]], layout, path))
    out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"
