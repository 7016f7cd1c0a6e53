"""The DAG picture: layered layout, crossings reduced, no edge behind a box, every text escaped."""

from __future__ import annotations

import pytest

from pgflow_django.admin.diagrams import dag, layered
from pgflow_django.admin.diagrams.dag import Node
from tests.diagram_geometry import Rect, edges_behind_boxes, layered_dag, parse_svg, segment_hits_rect


def diamond() -> list[Node]:
    return [
        Node("a"),
        Node("b", deps=("a",)),
        Node("c", deps=("a",)),
        Node("d", deps=("b", "c")),
        Node("e"),
    ]


def document_flow() -> list[Node]:
    """The shape the old straight-line drawing got wrong: ``load -> detect_language`` skips a layer."""
    return [
        Node("load"),
        Node("split_pages", deps=("load",)),
        Node("ocr_page", deps=("split_pages",)),
        Node("detect_language", deps=("load", "ocr_page")),
        Node("summarise", deps=("detect_language", "ocr_page")),
        Node("index", deps=("summarise",)),
        Node("notify", deps=("index", "load")),
    ]


def random_flow(seed: int, steps: int = 50, columns: int = 10) -> list[Node]:
    return [Node(slug, deps=deps) for slug, deps in layered_dag(seed, steps, columns)]


def test_layers_by_longest_path_in_definition_order() -> None:
    placed = dag.arrange(diamond()).placed
    assert [sorted(layer) for layer in placed.layers] == [["a", "e"], ["b", "c"], ["d"]]
    assert placed.boxes["a"].u < placed.boxes["b"].u == placed.boxes["c"].u < placed.boxes["d"].u
    assert layered.layers_of(["a", "b", "c"], {"b": ["a"], "c": ["a", "b"]}) == {"a": 0, "b": 1, "c": 2}


def test_a_long_edge_gets_a_lane_in_every_layer_it_crosses() -> None:
    placed = dag.arrange(document_flow()).placed
    long_edge = next(e for e in placed.edges if (e.source, e.target) == ("load", "detect_language"))
    assert len(long_edge.points) == 2 + 2 * 2, "two layers crossed: one lane (two points) in each"
    lanes = [slug for layer in placed.layers for slug in layer if slug.startswith("\0load\0detect")]
    assert len(lanes) == 2


@pytest.mark.parametrize("nodes", [diamond(), document_flow()], ids=["diamond", "document"])
def test_no_edge_passes_behind_a_box(nodes: list[Node]) -> None:
    rects, edges = parse_svg(dag.render_svg(nodes))
    assert len(rects) == len(nodes)
    assert len(edges) == sum(len(node.deps) for node in nodes)
    assert edges_behind_boxes(rects, edges) == []


@pytest.mark.parametrize("seed", range(12))
def test_fifty_steps_in_ten_columns_draw_no_edge_behind_a_box(seed: int) -> None:
    nodes = random_flow(seed)
    svg = dag.render_svg(nodes)
    rects, edges = parse_svg(svg)
    assert len(rects) == 50
    assert edges_behind_boxes(rects, edges) == []
    for a in rects:
        for b in rects:
            apart = (
                a.x + a.width <= b.x or b.x + b.width <= a.x or a.y + a.height <= b.y or b.y + b.height <= a.y
            )
            assert a is b or apart, f"{a.slug} overlaps {b.slug}"
    width = int(svg.split('data-width="', 1)[1].split('"', 1)[0])
    assert width <= 1.4 * dag.FIT_WIDTH, "scaled to fit, the text keeps most of its size"


def test_crossing_reduction_untangles_a_crossed_definition_order() -> None:
    nodes = [Node("a"), Node("b"), Node("x", deps=("b",)), Node("y", deps=("a",))]
    placed = dag.arrange(nodes).placed
    assert placed.crossings == 0
    assert placed.layers[1] == ["y", "x"]


def test_the_geometry_check_sees_an_edge_behind_a_box() -> None:
    box = Rect("middle", 100, 0, 50, 50)
    assert segment_hits_rect((0, 25), (300, 25), box)
    assert not segment_hits_rect((0, 60), (300, 60), box)
    assert edges_behind_boxes([box], [("a", "b", [(0, 25), (300, 25)])]) == ["a -> b behind middle"]


def test_a_wide_flow_is_drawn_top_to_bottom_when_that_is_narrower() -> None:
    chain = [Node(f"s{i}", deps=((f"s{i - 1}",) if i else ())) for i in range(10)]
    picture = dag.arrange(chain)
    assert not picture.across
    assert picture.width < dag.FIT_WIDTH
    short = dag.arrange(chain[:4])
    assert short.across


def test_empty_flow_renders() -> None:
    svg = dag.render_svg([])
    assert svg.startswith("<svg") and "pgflow-step" not in svg


def test_run_boxes_link_to_their_tasks_and_show_the_duration() -> None:
    from pgflow_django.models import Step

    steps = [Step(step_slug="a", step_index=0), Step(step_slug="b", step_index=1)]
    nodes = dag.run_nodes(
        steps,
        {"b": ["a"]},
        {"a": dag.StepProgress("completed", 3, 3, "1.25s"), "b": dag.StepProgress("started", 0, 1, "")},
        {"a": "/tasks/?q=1&step_slug__exact=a"},
    )
    svg = dag.render_svg(nodes)
    link = '<a href="/tasks/?q=1&amp;step_slug__exact=a">'
    assert link + '<g class="pgflow-step pgflow-status-completed"' in svg
    assert ">completed</text>" in svg and "tasks 3/3 \u00b7 1.25s" in svg
    assert 'data-step="b"' in svg and svg.count("<a href") == 1


def test_durations_are_short() -> None:
    assert [dag.duration_text(s) for s in (0.42, 12.34, 245, 7380)] == ["0.42s", "12.3s", "4m05s", "2h03m"]


def test_every_text_is_escaped() -> None:
    nodes = [
        Node("<script>", lines=('x"><b>',), css_class="<i>", href='"><script>'),
        Node("ok", deps=("<script>",)),
    ]
    svg = dag.render_svg(nodes, legend=[("<queue>", "#fff")], title="<t>")
    assert "<script>" not in svg
    assert "&lt;script&gt;" in svg
    assert "<b>" not in svg and "<i>" not in svg and "<queue>" not in svg and "<t>" not in svg
    assert 'data-from="&lt;script&gt;" data-to="ok"' in svg
