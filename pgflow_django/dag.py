"""A flow's DAG as an SVG picture, drawn server-side with no JavaScript.

Steps are boxes laid out in columns by dependency depth (a root is in column 0, a step one column
right of its deepest dependency), in definition order within a column; dependencies are arrows. The
flow picture colours each step by its queue route, the run picture by its status with the step's
task counts (completed/total). Every text that reaches the SVG goes through ``escape``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from django.db.models import Count, Q
from django.utils.html import escape

from pgflow_django.models import Dep, Flow, Run, Step, StepState, StepTask

BOX_WIDTH = 180
BOX_HEIGHT = 52
COLUMN_GAP = 60
ROW_GAP = 20
MARGIN = 16
LEGEND_ROW = 22

#: Fill colours of step statuses in the run picture.
STATUS_COLOURS: dict[str, str] = {
    "created": "#e5e7eb",
    "started": "#bfdbfe",
    "completed": "#bbf7d0",
    "failed": "#fecaca",
    "skipped": "#fde68a",
    "cancelled": "#fed7aa",
}
UNKNOWN_COLOUR = "#f3f4f6"

#: Fill colours of queue routes in the flow picture, assigned in sorted queue-name order.
QUEUE_PALETTE: tuple[str, ...] = (
    "#bfdbfe",
    "#bbf7d0",
    "#fde68a",
    "#fbcfe8",
    "#ddd6fe",
    "#fed7aa",
    "#a5f3fc",
    "#d9f99d",
)


@dataclass(frozen=True)
class Node:
    """One step of the picture: its slug, its dependencies, extra text lines and its fill colour."""

    slug: str
    deps: tuple[str, ...] = ()
    lines: tuple[str, ...] = ()
    fill: str = UNKNOWN_COLOUR
    css_class: str = ""


@dataclass(frozen=True)
class Layout:
    """Where each box goes: ``positions[slug] = (x, y)`` of its top-left corner."""

    columns: list[list[str]]
    positions: dict[str, tuple[int, int]] = field(default_factory=dict)
    width: int = 0
    height: int = 0


def depths(nodes: Sequence[Node]) -> dict[str, int]:
    """Dependency depth of every step; dependencies outside ``nodes`` are ignored."""
    by_slug = {node.slug: node for node in nodes}
    result: dict[str, int] = {}

    def depth(slug: str, seen: frozenset[str]) -> int:
        if slug in result:
            return result[slug]
        if slug in seen:  # a cycle cannot be persisted; refuse to loop rather than recurse forever
            return 0
        deps = [dep for dep in by_slug[slug].deps if dep in by_slug]
        value = 1 + max((depth(dep, seen | {slug}) for dep in deps), default=-1)
        result[slug] = value
        return value

    for node in nodes:
        depth(node.slug, frozenset())
    return result


def layout(nodes: Sequence[Node]) -> Layout:
    """Columns by dependency depth, rows in the given (definition) order."""
    by_depth = depths(nodes)
    count = max(by_depth.values(), default=-1) + 1
    columns: list[list[str]] = [[] for _ in range(count)]
    for node in nodes:
        columns[by_depth[node.slug]].append(node.slug)
    positions: dict[str, tuple[int, int]] = {}
    for col, slugs in enumerate(columns):
        for row, slug in enumerate(slugs):
            positions[slug] = (
                MARGIN + col * (BOX_WIDTH + COLUMN_GAP),
                MARGIN + row * (BOX_HEIGHT + ROW_GAP),
            )
    rows = max((len(slugs) for slugs in columns), default=0)
    width = MARGIN * 2 + max(count, 1) * BOX_WIDTH + max(count - 1, 0) * COLUMN_GAP
    height = MARGIN * 2 + max(rows, 1) * BOX_HEIGHT + max(rows - 1, 0) * ROW_GAP
    return Layout(columns=columns, positions=positions, width=width, height=height)


def _clip(text: str, limit: int = 26) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def render_svg(nodes: Sequence[Node], legend: Sequence[tuple[str, str]] = (), title: str = "") -> str:
    """The SVG document of ``nodes``; ``legend`` is ``(label, colour)`` pairs drawn below the graph."""
    placed = layout(nodes)
    legend_height = (LEGEND_ROW * len(legend) + MARGIN) if legend else 0
    width = max(placed.width, 260)
    height = placed.height + legend_height
    out: list[str] = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="pgflow-dag" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}" '
        'font-family="sans-serif" font-size="12">',
        f"<title>{escape(title)}</title>",
        '<defs><marker id="pgflow-arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" '
        'markerHeight="8" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#4b5563"/>'
        "</marker></defs>",
    ]
    for node in nodes:
        x2, y2 = placed.positions[node.slug]
        for dep in node.deps:
            if dep not in placed.positions:
                continue
            x1, y1 = placed.positions[dep]
            out.append(
                f'<line class="pgflow-edge" data-from="{escape(dep)}" data-to="{escape(node.slug)}" '
                f'x1="{x1 + BOX_WIDTH}" y1="{y1 + BOX_HEIGHT // 2}" x2="{x2}" y2="{y2 + BOX_HEIGHT // 2}" '
                'stroke="#4b5563" stroke-width="1.5" marker-end="url(#pgflow-arrow)"/>'
            )
    for node in nodes:
        x, y = placed.positions[node.slug]
        classes = escape(f"pgflow-step {node.css_class}".strip())
        out.append(f'<g class="{classes}" data-step="{escape(node.slug)}">')
        out.append(
            f'<rect x="{x}" y="{y}" width="{BOX_WIDTH}" height="{BOX_HEIGHT}" rx="6" ry="6" '
            f'fill="{escape(node.fill)}" stroke="#374151" stroke-width="1"/>'
        )
        out.append(f"<title>{escape(node.slug)}</title>")
        out.append(f'<text x="{x + 8}" y="{y + 18}" font-weight="bold">{escape(_clip(node.slug))}</text>')
        for index, line in enumerate(node.lines[:2]):
            out.append(f'<text x="{x + 8}" y="{y + 34 + 13 * index}">{escape(_clip(line, 30))}</text>')
        out.append("</g>")
    top = placed.height
    for index, (label, colour) in enumerate(legend):
        y = top + index * LEGEND_ROW
        out.append(
            f'<rect x="{MARGIN}" y="{y}" width="14" height="14" fill="{escape(colour)}" stroke="#374151"/>'
        )
        out.append(f'<text x="{MARGIN + 20}" y="{y + 12}">{escape(label)}</text>')
    out.append("</svg>")
    return "".join(out)


def queue_colours(queue_names: Iterable[str]) -> dict[str, str]:
    """One colour per queue name, in sorted order (the palette repeats after eight queues)."""
    return {name: QUEUE_PALETTE[i % len(QUEUE_PALETTE)] for i, name in enumerate(sorted(set(queue_names)))}


def _deps_by_step(flow_slug: str) -> dict[str, list[str]]:
    deps: dict[str, list[str]] = {}
    for dep in Dep.objects.filter(flow_id=flow_slug).order_by("step_slug", "dep_slug"):
        deps.setdefault(dep.step_slug, []).append(dep.dep_slug)
    return deps


def flow_nodes(steps: Sequence[Step], deps: Mapping[str, Sequence[str]]) -> tuple[list[Node], dict[str, str]]:
    colours = queue_colours(step.queue_name for step in steps)
    nodes = [
        Node(
            slug=step.step_slug,
            deps=tuple(deps.get(step.step_slug, ())),
            lines=(f"{step.step_type} \u2192 {step.queue_name}",),
            fill=colours[step.queue_name],
            css_class=f"pgflow-queue-{step.queue_name}",
        )
        for step in steps
    ]
    return nodes, colours


def flow_svg(flow: Flow) -> str:
    """The flow's DAG coloured by queue route (one colour per queue name)."""
    steps = list(Step.objects.filter(flow_id=flow.flow_slug).order_by("step_index"))
    nodes, colours = flow_nodes(steps, _deps_by_step(flow.flow_slug))
    legend = [(f"queue {name}", colour) for name, colour in colours.items()]
    return render_svg(nodes, legend, title=f"flow {flow.flow_slug}")


def run_nodes(
    steps: Sequence[Step],
    deps: Mapping[str, Sequence[str]],
    statuses: Mapping[str, str],
    counts: Mapping[str, tuple[int, int]],
) -> list[Node]:
    nodes = []
    for step in steps:
        status = statuses.get(step.step_slug, "")
        done, total = counts.get(step.step_slug, (0, 0))
        nodes.append(
            Node(
                slug=step.step_slug,
                deps=tuple(deps.get(step.step_slug, ())),
                lines=(f"{status or 'unknown'} \u00b7 tasks {done}/{total}",),
                fill=STATUS_COLOURS.get(status, UNKNOWN_COLOUR),
                css_class=f"pgflow-status-{status or 'unknown'}",
            )
        )
    return nodes


def run_svg(run: Run) -> str:
    """The run's DAG coloured by step status, with completed/total task counts per step."""
    steps = list(Step.objects.filter(flow_id=run.flow_id).order_by("step_index"))
    statuses = dict(StepState.objects.filter(run_id=run.run_id).values_list("step_slug", "status"))
    counts = {
        row["step_slug"]: (row["done"], row["total"])
        for row in StepTask.objects.filter(run_id=run.run_id)
        .values("step_slug")
        .annotate(total=Count("task_index"), done=Count("task_index", filter=Q(status="completed")))
        .order_by()
    }
    nodes = run_nodes(steps, _deps_by_step(run.flow_id), statuses, counts)
    legend = list(STATUS_COLOURS.items())
    return render_svg(nodes, legend, title=f"run {run.run_id}")
