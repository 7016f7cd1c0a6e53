"""A flow's DAG as an SVG picture, drawn server-side with no JavaScript.

The layout is :mod:`pgflow_django.admin.diagrams.layered`: layers by dependency depth, crossings reduced,
long edges routed through lanes of their own so that no arrow passes behind a box. The picture is
left to right when that fits the admin's content width at 1400 px with the sidebar open
(``FIT_WIDTH``), otherwise top to bottom when that is narrower; the SVG scales down to its container
(``width="100%"``, natural size as ``max-width``) but not below 9 px text (``diagrams.size_style``),
past which it scrolls inside its box. The flow picture colours each step by its queue route; the run
picture by its status, with task counts and duration, and each step links to its tasks. Every text
that reaches the SVG goes through ``escape``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Q
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape
from django.utils.http import urlencode

from pgflow_django.admin.database import database_of
from pgflow_django.admin.diagrams import layered, size_style, timeline
from pgflow_django.models import Dep, Flow, Run, Step, StepState, StepTask

BOX_WIDTH = 168
BOX_HEIGHT = 58
LAYER_GAP = 44
SLOT_GAP = 14
LANE = 10
MARGIN = 12
LEGEND_ROW = 20
COMPACT_WIDTH = 104
COMPACT_LAYER_GAP = 24
SMALLEST_FONT = 11
"""Font size of the smallest text of a step's box (its status and task lines)."""
FIT_WIDTH = 960
"""Width in px the picture gets in the admin's change form at a 1400 px window, sidebar open."""

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
    """One step of the picture: its slug, its dependencies, text lines, fill, class and link."""

    slug: str
    deps: tuple[str, ...] = ()
    lines: tuple[str, ...] = ()
    fill: str = UNKNOWN_COLOUR
    css_class: str = ""
    href: str = ""


@dataclass(frozen=True)
class Picture:
    """A laid-out picture on x/y: boxes' top-left corners, edge polylines, and the natural size."""

    placed: layered.Placed
    across: bool
    """True when layers run left to right (x is the layer axis)."""

    def xy(self, u: int, v: int) -> tuple[int, int]:
        return (u + MARGIN, v + MARGIN) if self.across else (v + MARGIN, u + MARGIN)

    @property
    def width(self) -> int:
        inner = self.placed.extent_u if self.across else self.placed.extent_v
        return inner + 2 * MARGIN

    @property
    def height(self) -> int:
        inner = self.placed.extent_v if self.across else self.placed.extent_u
        return inner + 2 * MARGIN

    def box(self, slug: str) -> tuple[int, int, int, int]:
        """``(x, y, width, height)`` of a step's box."""
        b = self.placed.boxes[slug]
        x, y = self.xy(b.u, b.v)
        return (x, y, b.size_u, b.size_v) if self.across else (x, y, b.size_v, b.size_u)


def _sizes(box_width: int, across: bool) -> layered.Sizes:
    if not across:
        return layered.Sizes(BOX_HEIGHT, box_width, LAYER_GAP, SLOT_GAP, LANE)
    gap = LAYER_GAP if box_width == BOX_WIDTH else COMPACT_LAYER_GAP
    return layered.Sizes(box_width, BOX_HEIGHT, gap, SLOT_GAP, LANE)


def arrange(nodes: Sequence[Node]) -> Picture:
    """Left to right, with boxes narrowed (down to ``COMPACT_WIDTH``) to fit ``FIT_WIDTH``; else top
    to bottom if that fits; else left to right at ``COMPACT_WIDTH``, scaled down by the browser."""
    order = [node.slug for node in nodes]
    deps = {node.slug: node.deps for node in nodes}
    across = Picture(layered.layout(order, deps, _sizes(BOX_WIDTH, True)), True)
    if across.width <= FIT_WIDTH:
        return across
    count = len(across.placed.layers)
    room = (FIT_WIDTH - 2 * MARGIN - (count - 1) * COMPACT_LAYER_GAP) // count
    narrow = Picture(layered.layout(order, deps, _sizes(max(room, COMPACT_WIDTH), True)), True)
    if narrow.width <= FIT_WIDTH:
        return narrow
    down = Picture(layered.layout(order, deps, _sizes(BOX_WIDTH, False)), False)
    return down if down.width <= FIT_WIDTH else narrow


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def render_svg(nodes: Sequence[Node], legend: Sequence[tuple[str, str]] = (), title: str = "") -> str:
    """The SVG document of ``nodes``; ``legend`` is ``(label, colour)`` pairs drawn below the graph."""
    picture = arrange(nodes)
    legend_height = (LEGEND_ROW * ((len(legend) + 3) // 4) + MARGIN) if legend else 0
    width = max(picture.width, 4 * 150 + 2 * MARGIN if legend else 260)
    height = picture.height + legend_height
    out: list[str] = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="pgflow-dag" width="100%" '
        f'style="{size_style(width, SMALLEST_FONT)}" viewBox="0 0 {width} {height}" '
        f'data-width="{width}" data-height="{height}" role="img" aria-label="{escape(title)}" '
        'font-family="sans-serif" font-size="12">',
        f"<title>{escape(title)}</title>",
        '<defs><marker id="pgflow-arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#4b5563"/>'
        "</marker></defs>",
    ]
    for edge in picture.placed.edges:
        points = " ".join("{},{}".format(*picture.xy(u, v)) for u, v in edge.points)
        out.append(
            f'<polyline class="pgflow-edge" data-from="{escape(edge.source)}" '
            f'data-to="{escape(edge.target)}" points="{points}" fill="none" stroke="#4b5563" '
            'stroke-width="1.5" stroke-linejoin="round" marker-end="url(#pgflow-arrow)"/>'
        )
    for node in nodes:
        x, y, w, h = picture.box(node.slug)
        classes = escape(f"pgflow-step {node.css_class}".strip())
        if node.href:
            out.append(f'<a href="{escape(node.href)}">')
        out.append(f'<g class="{classes}" data-step="{escape(node.slug)}">')
        out.append(
            f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="6" ry="6" '
            f'fill="{escape(node.fill)}" stroke="#374151" stroke-width="1"/>'
        )
        out.append(f"<title>{escape(node.slug)}</title>")
        chars = (w - 14) * 10 // 68
        out.append(
            f'<text x="{x + 7}" y="{y + 17}" font-weight="bold">{escape(_clip(node.slug, chars))}</text>'
        )
        for index, line in enumerate(node.lines[:2]):
            out.append(
                f'<text x="{x + 7}" y="{y + 33 + 14 * index}" font-size="{SMALLEST_FONT}">'
                f"{escape(_clip(line, chars + 4))}</text>"
            )
        out.append("</g>")
        if node.href:
            out.append("</a>")
    top = picture.height
    for index, (label, colour) in enumerate(legend):
        x = MARGIN + (index % 4) * 150
        y = top + (index // 4) * LEGEND_ROW
        out.append(
            f'<rect class="pgflow-legend" x="{x}" y="{y}" width="14" height="14" '
            f'fill="{escape(colour)}" stroke="#374151"/>'
        )
        out.append(f'<text x="{x + 20}" y="{y + 12}">{escape(_clip(label, 18))}</text>')
    out.append("</svg>")
    return "".join(out)


def queue_colours(queue_names: Iterable[str]) -> dict[str, str]:
    """One colour per queue name, in sorted order (the palette repeats after eight queues)."""
    return {name: QUEUE_PALETTE[i % len(QUEUE_PALETTE)] for i, name in enumerate(sorted(set(queue_names)))}


def _deps_by_step(flow_slug: str, database: str) -> dict[str, list[str]]:
    deps: dict[str, list[str]] = {}
    for dep in Dep.objects.using(database).filter(flow_id=flow_slug).order_by("step_slug", "dep_slug"):
        deps.setdefault(dep.step_slug, []).append(dep.dep_slug)
    return deps


def wait_line(step: Step) -> str:
    """What an event, sleep or subflow step waits for, in a few words ("" for a handler step)."""
    if step.step_kind == "event":
        return f"waits for {step.wait_event}"
    if step.step_kind == "sleep":
        return (
            f"sleeps {step.wait_seconds}s"
            if step.wait_seconds is not None
            else f"sleeps until {step.sleep_until}"
        )
    if step.step_kind == "subflow":
        return f"runs flow {step.subflow_slug}"
    return ""


def flow_nodes(steps: Sequence[Step], deps: Mapping[str, Sequence[str]]) -> tuple[list[Node], dict[str, str]]:
    colours = queue_colours(step.queue_name for step in steps)
    nodes = [
        Node(
            slug=step.step_slug,
            deps=tuple(deps.get(step.step_slug, ())),
            lines=(step.step_type, wait_line(step) or f"\u2192 {step.queue_name}"),
            fill=colours[step.queue_name],
            css_class=f"pgflow-queue-{step.queue_name}",
        )
        for step in steps
    ]
    return nodes, colours


def flow_svg(flow: Flow) -> str:
    """The flow's DAG coloured by queue route (one colour per queue name), from the flow's database."""
    database = database_of(flow)
    steps = list(Step.objects.using(database).filter(flow_id=flow.flow_slug).order_by("step_index"))
    nodes, colours = flow_nodes(steps, _deps_by_step(flow.flow_slug, database))
    legend = [(f"queue {name}", colour) for name, colour in colours.items()]
    return render_svg(nodes, legend, title=f"flow {flow.flow_slug}")


def duration_text(seconds: float) -> str:
    """``0.42s``, ``12.3s``, ``4m05s``, ``2h03m``: short enough for a box."""
    if seconds < 10:
        return f"{seconds:.2f}s"
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


def elapsed(
    start: datetime | None, end: datetime | None, now: datetime | None = None, ongoing: str = " so far"
) -> str:
    """Duration from ``start`` to ``end`` (to now, followed by ``ongoing``, while there is no end)."""
    if start is None:
        return ""
    if end is None:
        return f"{duration_text(max(0.0, ((now or timezone.now()) - start).total_seconds()))}{ongoing}"
    return duration_text(max(timedelta(0), end - start).total_seconds())


@dataclass(frozen=True)
class StepProgress:
    """What the run picture shows of one step."""

    status: str
    done: int
    total: int
    duration: str = ""


def run_nodes(
    steps: Sequence[Step],
    deps: Mapping[str, Sequence[str]],
    progress: Mapping[str, StepProgress],
    tasks_href: Mapping[str, str] | None = None,
) -> list[Node]:
    nodes = []
    for step in steps:
        state = progress.get(step.step_slug, StepProgress("", 0, 0))
        status = state.status or "unknown"
        counts = f"tasks {state.done}/{state.total}"
        waits = wait_line(step)
        if waits and step.step_type != "map":
            counts = waits  # one task, and what it waits for says more than 0/1
        shown = "waiting" if waits and status == "started" else status
        lines = [shown, f"{counts} \u00b7 {state.duration}" if state.duration else counts]
        nodes.append(
            Node(
                slug=step.step_slug,
                deps=tuple(deps.get(step.step_slug, ())),
                lines=tuple(lines),
                fill=STATUS_COLOURS.get(state.status, UNKNOWN_COLOUR),
                css_class=f"pgflow-status-{status}",
                href=(tasks_href or {}).get(step.step_slug, ""),
            )
        )
    return nodes


def step_tasks_url(run_id: object, step_slug: str) -> str:
    """The step tasks list filtered to one step of one run."""
    query = urlencode({"q": str(run_id), "step_slug__exact": step_slug})
    return f"{reverse('admin:pgflow_steptask_changelist')}?{query}"


def _step_duration(state: StepState, now: datetime) -> str:
    end = state.completed_at or state.failed_at or state.skipped_at
    if end is None and state.status != "started":
        return ""  # created, or cancelled (which records no time): nothing ran to measure
    return elapsed(state.started_at, end, now, ongoing="")  # the status says it is still running


def run_svg(run: Run) -> str:
    """The run's DAG coloured by step status, with task counts, duration and a link to the tasks,
    from the run's database."""
    database = database_of(run)
    steps = list(Step.objects.using(database).filter(flow_id=run.flow_id).order_by("step_index"))
    counts = {
        row["step_slug"]: (row["done"], row["total"])
        for row in StepTask.objects.using(database)
        .filter(run_id=run.run_id)
        .values("step_slug")
        .annotate(total=Count("task_index"), done=Count("task_index", filter=Q(status="completed")))
        .order_by()
    }
    now = timezone.now()
    progress = {
        s.step_slug: StepProgress(
            s.status,
            *counts.get(s.step_slug, (0, 0)),
            duration=_step_duration(s, now),
        )
        for s in StepState.objects.using(database).filter(run_id=run.run_id)
    }
    nodes = run_nodes(steps, _deps_by_step(run.flow_id, database), progress, step_links(run, steps))
    return render_svg(nodes, list(STATUS_COLOURS.items()), title=f"run {run.run_id}")


def step_links(run: Run, steps: Sequence[Step]) -> dict[str, str]:
    return {step.step_slug: step_tasks_url(run.run_id, step.step_slug) for step in steps}


def run_timeline_svg(run: Run) -> str:
    """The run's Gantt chart (:mod:`pgflow_django.admin.diagrams.timeline`) in the run picture's colours."""
    steps = list(Step.objects.using(database_of(run)).filter(flow_id=run.flow_id).order_by("step_index"))
    return timeline.run_timeline_svg(run, STATUS_COLOURS, FIT_WIDTH, step_links(run, steps))
