"""Geometry of a drawn DAG, read back from its SVG: boxes, edge segments, and their intersections.

Shared by the unit tests of the layout and the browser tests, which read the same numbers from the
page that Chromium rendered."""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

Point = tuple[float, float]


@dataclass(frozen=True)
class Rect:
    slug: str
    x: float
    y: float
    width: float
    height: float


def segment_hits_rect(a: Point, b: Point, rect: Rect, inset: float = 1.0) -> bool:
    """True when segment ``a``-``b`` enters ``rect`` shrunk by ``inset`` (Liang-Barsky clipping)."""
    left, top = rect.x + inset, rect.y + inset
    right, bottom = rect.x + rect.width - inset, rect.y + rect.height - inset
    t0, t1 = 0.0, 1.0
    dx, dy = b[0] - a[0], b[1] - a[1]
    for p, q in ((-dx, a[0] - left), (dx, right - a[0]), (-dy, a[1] - top), (dy, bottom - a[1])):
        if p == 0:
            if q < 0:
                return False
            continue
        t = q / p
        if p < 0:
            t0 = max(t0, t)
        else:
            t1 = min(t1, t)
        if t0 > t1:
            return False
    return True


def edges_behind_boxes(rects: Sequence[Rect], edges: Iterable[tuple[str, str, Sequence[Point]]]) -> list[str]:
    """Every ``source -> target`` edge with a segment through a box that is neither of its ends."""
    found = []
    for source, target, points in edges:
        for a, b in pairwise(points):
            for rect in rects:
                if rect.slug not in (source, target) and segment_hits_rect(a, b, rect):
                    found.append(f"{source} -> {target} behind {rect.slug}")
    return found


def parse_svg(svg: str) -> tuple[list[Rect], list[tuple[str, str, list[Point]]]]:
    """The step boxes and edge polylines of an SVG drawn by
    :func:`pgflow_django.admin.diagrams.dag.render_svg`."""
    rects = [
        Rect(m[1], float(m[2]), float(m[3]), float(m[4]), float(m[5]))
        for m in re.finditer(
            r'data-step="([^"]*)"><rect x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" height="([\d.]+)"', svg
        )
    ]
    edges = [
        (
            m[1],
            m[2],
            [(float(x), float(y)) for x, y in (pair.split(",") for pair in m[3].split())],
        )
        for m in re.finditer(r'data-from="([^"]*)" data-to="([^"]*)" points="([^"]*)"', svg)
    ]
    return rects, edges


def layered_dag(seed: int, steps: int = 50, columns: int = 10) -> list[tuple[str, tuple[str, ...]]]:
    """A random DAG of ``steps`` steps in exactly ``columns`` layers: ``(slug, deps)`` in order.

    Every step past the first layer depends on one step of the layer before (so it lands in its
    layer) and on up to two random earlier steps (long edges, the hard case for drawing)."""
    rng = random.Random(seed)
    layer_of = [min(columns - 1, i * columns // steps) for i in range(steps)]
    result = []
    for i in range(steps):
        earlier = [j for j in range(i) if layer_of[j] < layer_of[i]]
        deps: set[int] = set()
        if earlier:
            deps.add(max(j for j in earlier if layer_of[j] == layer_of[i] - 1))
            deps.update(rng.sample(earlier, k=min(len(earlier), rng.randint(0, 2))))
        result.append((f"step_{i:02d}", tuple(f"step_{j:02d}" for j in sorted(deps))))
    return result
