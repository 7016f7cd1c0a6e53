"""The DAG picture: layers by dependency depth, one arrow per dependency, every text escaped."""

from __future__ import annotations

from pgflow_django import dag
from pgflow_django.dag import Node


def diamond() -> list[Node]:
    return [
        Node("a"),
        Node("b", deps=("a",)),
        Node("c", deps=("a",)),
        Node("d", deps=("b", "c")),
        Node("e"),
    ]


def test_columns_by_dependency_depth_in_definition_order() -> None:
    placed = dag.layout(diamond())
    assert placed.columns == [["a", "e"], ["b", "c"], ["d"]]
    ax, _ = placed.positions["a"]
    bx, by = placed.positions["b"]
    cx, cy = placed.positions["c"]
    dx, _ = placed.positions["d"]
    assert ax < bx == cx < dx
    assert by < cy
    assert placed.positions["e"][0] == ax


def test_depth_is_the_longest_path_not_the_shortest() -> None:
    nodes = [Node("a"), Node("b", deps=("a",)), Node("c", deps=("a", "b"))]
    assert dag.depths(nodes) == {"a": 0, "b": 1, "c": 2}


def test_one_arrow_per_dependency() -> None:
    svg = dag.render_svg(diamond())
    assert svg.count('class="pgflow-edge"') == 4
    assert 'data-from="b" data-to="d"' in svg
    assert svg.count('class="pgflow-step') == 5
    assert svg.startswith("<svg") and svg.endswith("</svg>")


def test_empty_flow_renders() -> None:
    svg = dag.render_svg([])
    assert svg.startswith("<svg") and "pgflow-step" not in svg


def test_every_text_is_escaped() -> None:
    nodes = [
        Node("<script>", lines=('x"><b>',), css_class="<i>"),
        Node("ok", deps=("<script>",)),
    ]
    svg = dag.render_svg(nodes, legend=[("<queue>", "#fff")], title="<t>")
    assert "<script>" not in svg
    assert "&lt;script&gt;" in svg
    assert "<b>" not in svg and "<i>" not in svg and "<queue>" not in svg and "<t>" not in svg
    assert 'data-from="&lt;script&gt;" data-to="ok"' in svg


def test_queue_colours_one_per_queue() -> None:
    colours = dag.queue_colours(["b", "a", "b", "c"])
    assert list(colours) == ["a", "b", "c"]
    assert len(set(colours.values())) == 3


def test_run_nodes_carry_status_colour_and_task_counts() -> None:
    class FakeStep:
        def __init__(self, slug: str) -> None:
            self.step_slug = slug

    steps = [FakeStep("first"), FakeStep("second")]
    nodes = dag.run_nodes(
        steps,  # type: ignore[arg-type]
        {"second": ["first"]},
        {"first": "completed", "second": "started"},
        {"first": (1, 1), "second": (2, 5)},
    )
    assert nodes[0].fill == dag.STATUS_COLOURS["completed"]
    assert nodes[1].lines == ("started \u00b7 tasks 2/5",)
    assert nodes[1].css_class == "pgflow-status-started"
    assert nodes[1].deps == ("first",)
