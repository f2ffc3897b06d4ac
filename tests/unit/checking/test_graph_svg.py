"""The SVG step graph (coordinator_core.checking.graph_svg): valid SVG 1.1 structure, one box
per step and one path per route with its ends on the boxes, labels escaped for XML, the same
bytes for the same graph, and a run's path drawn by style and text, not colour alone."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from coordinator_core.checking.explain import render_graph
from coordinator_core.checking.graph_svg import (
    GRAPH_NAMESPACE,
    RunPath,
    StepMark,
    render_svg,
    route_taken,
)

SVG = "{http://www.w3.org/2000/svg}"
SOURCE = "{https://id.registrystack.org/formats/coordinator/graph}source"
TARGET = "{https://id.registrystack.org/formats/coordinator/graph}target"


def _step(step_id: str, kind: str, *routes: dict[str, Any], **members: Any) -> dict[str, Any]:
    return {"id": step_id, "type": kind, "routes": list(routes), **members}


def _graph() -> dict[str, Any]:
    """A call, a wait-for with a timeout and a cancel route, a choose with three cases, a call
    with a declared refusal, and finishes; in topological order as explain lists them."""
    return {
        "workflow": "sample",
        "steps": [
            _step(
                "ask",
                "call",
                {"kind": "next", "target": "wait"},
                operation="casework.submit-review-request/v1",
            ),
            _step(
                "wait",
                "wait-for",
                {"kind": "next", "target": "decide"},
                {"kind": "timeout", "target": "late"},
                {"kind": "cancel", "target": "withdrawn"},
                call="ask",
                completion="result",
            ),
            _step(
                "decide",
                "choose",
                {"kind": "case", "label": "approved", "target": "record"},
                {"kind": "case", "label": "rejected", "target": "no"},
                {"kind": "case", "label": "other", "target": "late"},
            ),
            _step(
                "record",
                "call",
                {"kind": "next", "target": "yes"},
                {"kind": "refusal", "code": "already-recorded", "target": "no"},
                operation="breg.invoke-action/v1",
            ),
            _step("yes", "finish", outcome="approved"),
            _step("no", "finish", outcome="rejected"),
            _step("late", "finish", outcome="timed-out"),
            _step("withdrawn", "finish", outcome="withdrawn"),
        ],
    }


def _routes(graph: dict[str, Any]) -> int:
    return sum(len(step["routes"]) for step in graph["steps"])


def _parse(svg: str) -> ET.Element:
    assert svg.startswith('<?xml version="1.0" encoding="UTF-8"?>\n<svg ')
    root = ET.fromstring(svg.encode())
    assert root.tag == SVG + "svg"
    assert root.get("version") == "1.1"
    return root


def _steps(root: ET.Element) -> dict[str, ET.Element]:
    groups = [g for g in root.iter(SVG + "g") if "step" in (g.get("class") or "").split()]
    return {str(g.get("id")).removeprefix("step-"): g for g in groups}


def _box(group: ET.Element) -> tuple[float, float, float, float]:
    boxes = [r for r in group.findall(SVG + "rect") if r.get("class") == "box"]
    assert len(boxes) == 1, "exactly one box per step"
    box = boxes[0]
    return tuple(float(box.get(name) or "nan") for name in ("x", "y", "width", "height"))  # type: ignore[return-value]


def _ends(d: str) -> tuple[tuple[float, float], tuple[float, float]]:
    numbers = [float(n) for n in re.findall(r"-?[0-9]+(?:\.[0-9]+)?", d)]
    assert d.startswith("M")
    return (numbers[0], numbers[1]), (numbers[-2], numbers[-1])


def _texts(element: ET.Element) -> list[str]:
    return [t.text or "" for t in element.iter(SVG + "text")]


def test_one_box_per_step_with_its_id_and_type() -> None:
    graph = _graph()
    root = _parse(render_svg(graph))
    steps = _steps(root)
    assert list(steps) == [step["id"] for step in graph["steps"]]
    for step in graph["steps"]:
        group = steps[step["id"]]
        assert step["type"] in (group.get("class") or "").split()
        texts = _texts(group)
        assert texts[0] == step["id"]
    assert _texts(steps["ask"])[1] == "casework.submit-review-request/v1"
    assert _texts(steps["wait"])[1] == "wait for ask.result"
    assert _texts(steps["decide"])[1] == "choose"
    assert _texts(steps["yes"])[1] == "finish: approved"
    # the type is also a shape: a double border for finishes, rounded ends for waits, a mark
    # on a choose; colour is never the only carrier
    assert steps["yes"].find(SVG + "rect[@class='inner']") is not None
    assert float(steps["wait"].find(SVG + "rect[@class='box']").get("rx") or 0) > 0  # type: ignore[union-attr]
    assert steps["decide"].find(SVG + "polygon") is not None


def test_one_path_per_route_from_its_source_box_to_its_target_box() -> None:
    graph = _graph()
    root = _parse(render_svg(graph))
    steps = _steps(root)
    routes = [g for g in root.iter(SVG + "g") if "route" in (g.get("class") or "").split()]
    assert len(routes) == _routes(graph)
    for group in routes:
        paths = group.findall(SVG + "path")
        assert len(paths) == 1
        (x0, y0), (x1, y1) = _ends(paths[0].get("d") or "")
        sx, sy, sw, sh = _box(steps[str(group.get(SOURCE))])
        tx, ty, tw, _ = _box(steps[str(group.get(TARGET))])
        assert y0 == pytest.approx(sy + sh) and sx <= x0 <= sx + sw, "leaves the source's bottom"
        assert y1 == pytest.approx(ty) and tx <= x1 <= tx + tw, "enters the target's top"
        assert y1 > y0, "every edge points down: layers follow the longest path"


def test_every_route_is_labelled_and_routes_without_output_are_dashed() -> None:
    root = _parse(render_svg(_graph()))
    labels: dict[str, str] = {}
    for group in root.iter(SVG + "g"):
        if "route" in (group.get("class") or "").split():
            path = group.find(SVG + "path")
            assert path is not None
            label = _texts(group)[0]
            labels[label] = path.get("class") or ""
    assert set(labels) == {
        "success",
        "completed",
        "timeout",
        "cancel",
        "approved",
        "rejected",
        "other",
        "refusal: already-recorded",
    }
    for label, classes in labels.items():
        dashed = label in ("timeout", "cancel") or label.startswith("refusal")
        assert ("dashed" in classes.split()) is dashed, label


def test_layers_are_the_longest_path_from_the_start() -> None:
    root = _parse(render_svg(_graph()))
    top = {step: _box(group)[1] for step, group in _steps(root).items()}
    # `late` is reached from `wait` (one layer down) and from `decide` (two): it sits below decide
    assert top["ask"] < top["wait"] < top["decide"] < top["late"]
    assert top["decide"] < top["record"] < top["yes"]
    assert top["no"] == top["yes"], "no is reached from decide and from record: longest path"


def test_the_same_graph_gives_the_same_bytes() -> None:
    assert render_svg(_graph()) == render_svg(_graph())
    path = RunPath("wait", "running", {"ask": StepMark("delivered", "next", None, "accepted")})
    assert render_svg(_graph(), path) == render_svg(_graph(), path)


def test_every_label_is_escaped_for_xml() -> None:
    graph = _graph()
    hostile = "<script>&\"'</script>"
    graph["workflow"] = hostile
    graph["steps"][2]["routes"][0]["label"] = hostile
    graph["steps"][4]["outcome"] = hostile
    svg = render_svg(graph)
    assert "<script>" not in svg
    root = _parse(svg)  # still well-formed
    assert any(hostile in text for text in _texts(root))
    assert root.find(SVG + "script") is None
    mermaid = render_graph(graph, "mermaid")
    assert "<script>" not in mermaid and '&"' not in mermaid
    dot = render_graph(graph, "dot")
    assert '&\\"' in dot and '&"' not in dot  # a quote inside a Graphviz string is escaped


def test_no_script_and_nothing_external() -> None:
    svg = render_svg(_graph(), _run_path())
    assert "<script" not in svg and "href" not in svg and "@import" not in svg
    declarations = ('xmlns="http://www.w3.org/2000/svg"', f'xmlns:c="{GRAPH_NAMESPACE}"')
    for declaration in declarations:
        assert svg.count(declaration) == 1
        svg = svg.replace(declaration, "")
    assert "://" not in svg


# The elements and attributes of SVG 1.1 the renderer may write; anything else (an SVG 2 or HTML
# `data-*` attribute, say) would make the picture invalid SVG 1.1. Foreign-namespace attributes
# (`c:source`, `c:target`) are allowed by SVG 1.1's extensibility rules.
SVG11_ATTRIBUTES = {
    "svg": {"version", "width", "height", "viewBox"},
    "title": set(),
    "defs": set(),
    "marker": {
        "id",
        "viewBox",
        "refX",
        "refY",
        "markerWidth",
        "markerHeight",
        "markerUnits",
        "orient",
    },
    "style": {"type"},
    "g": {"class", "id"},
    "rect": {"class", "x", "y", "width", "height", "rx", "ry", "fill"},
    "path": {"class", "d", "marker-end", "fill"},
    "polygon": {"class", "points"},
    "text": {"class", "x", "y", "text-anchor"},
}


@pytest.mark.parametrize("with_path", [False, True])
def test_only_svg_1_1_elements_and_attributes(with_path: bool) -> None:
    root = _parse(render_svg(_graph(), _run_path() if with_path else None))
    for element in root.iter():
        assert element.tag.startswith(SVG), element.tag
        name = element.tag.removeprefix(SVG)
        assert name in SVG11_ATTRIBUTES, name
        for attribute in element.attrib:
            if attribute.startswith("{"):
                assert attribute in (SOURCE, TARGET) and name == "g"
            else:
                assert attribute in SVG11_ATTRIBUTES[name], (name, attribute)


def _run_path() -> RunPath:
    return RunPath(
        current="record",
        status="attention",
        steps={
            "ask": StepMark("delivered", "next", None, "accepted"),
            "wait": StepMark("delivered", "next", None),
            "decide": StepMark("delivered", "case", "approved"),
            "record": StepMark("unknown", None, None, "unknown"),
        },
    )


def test_a_run_path_marks_entered_steps_the_current_step_and_taken_routes() -> None:
    root = _parse(render_svg(_graph(), _run_path()))
    steps = _steps(root)
    for step_id in ("ask", "wait", "decide", "record"):
        assert "entered" in (steps[step_id].get("class") or "").split()
    assert "current" in (steps["record"].get("class") or "").split()
    assert _texts(steps["record"])[2] == "now: unknown, effect unknown"
    assert _texts(steps["ask"])[2] == "delivered, effect accepted"
    assert _texts(steps["yes"])[2] == "not entered"
    assert "faint" in (steps["yes"].get("class") or "").split()
    taken = [
        (g.get(SOURCE), g.get(TARGET))
        for g in root.iter(SVG + "g")
        if any(t.endswith("(taken)") for t in _texts(g)) and "route" in (g.get("class") or "")
    ]
    assert taken == [("ask", "wait"), ("wait", "decide"), ("decide", "record")]


def test_a_refusal_route_is_taken_only_towards_the_step_the_run_entered() -> None:
    path = RunPath(
        current="no",
        status="finished",
        steps={
            "record": StepMark("delivered", "refusal", None),
            "no": StepMark("delivered", None, None),
        },
    )
    record = _graph()["steps"][3]
    success, refusal = record["routes"]
    assert route_taken(path, "record", refusal)
    assert not route_taken(path, "record", success)


@pytest.mark.parametrize("style", ["mermaid", "dot"])
def test_text_pictures_carry_the_run_path_in_words(style: str) -> None:
    drawn = render_graph(_graph(), style, _run_path())
    assert "now: unknown, effect unknown" in drawn
    assert "delivered, effect accepted" in drawn
    assert drawn.count("(taken)") == 3
    assert "not entered" in drawn
