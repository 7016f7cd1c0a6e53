"""A layered (Sugiyama) layout of a DAG, in which no edge passes behind a box.

Steps go to layers by longest path from a root (a step sits one layer after its deepest dependency).
An edge that spans several layers gets one dummy slot in every layer it crosses, a thin lane of its
own in that layer's order, so its polyline runs straight through the lane and never over a box; the
segments between layers lie in the gap between them, where there are no boxes. Orders within layers
come from barycentre sweeps (down and up, keeping the order with the fewest crossings), then each
layer is placed as near to its neighbours' mean positions as its order and spacing allow (an
isotonic regression per layer, alternately against the layer before and the layer after).

Written here rather than taken from grandalf (the one pure-Python layered layout on PyPI): its last
release is from January 2023, it has no type information, and this layout is small enough to own.

Coordinates are computed on two axes: ``u`` runs across layers and ``v`` along a layer. The caller
maps them to ``x``/``y`` for a left-to-right or a top-to-bottom picture.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

SWEEPS = 8
"""Barycentre passes (each one down and one up); small graphs settle in two or three."""

ALIGN_PASSES = 4


@dataclass(frozen=True)
class Sizes:
    """Box and gap sizes along the two axes of a layout."""

    box_u: int
    box_v: int
    layer_gap: int
    slot_gap: int
    lane: int


@dataclass(frozen=True)
class Box:
    """A placed step: its top-left corner on (u, v) and its extent."""

    u: int
    v: int
    size_u: int
    size_v: int


@dataclass(frozen=True)
class Edge:
    """A dependency drawn as a polyline of (u, v) points from ``source`` to ``target``."""

    source: str
    target: str
    points: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Placed:
    layers: list[list[str]]
    boxes: dict[str, Box]
    edges: list[Edge]
    extent_u: int
    extent_v: int
    crossings: int


def layers_of(order: Sequence[str], deps: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """Longest-path layer of each node; dependencies outside ``order`` and cycles are ignored."""
    known = set(order)
    result: dict[str, int] = {}
    visiting: set[str] = set()

    def layer(slug: str) -> int:
        if slug in result:
            return result[slug]
        if slug in visiting:  # a persisted flow has no cycle; refuse to loop on a broken one
            return 0
        visiting.add(slug)
        value = 1 + max((layer(d) for d in deps.get(slug, ()) if d in known), default=-1)
        visiting.discard(slug)
        result[slug] = value
        return value

    for slug in order:
        layer(slug)
    return result


def _crossings(upper: Sequence[str], lower: Sequence[str], up_links: Mapping[str, list[str]]) -> int:
    """Crossings between two adjacent layers (edges are the links of ``lower`` into ``upper``)."""
    position = {slug: i for i, slug in enumerate(upper)}
    pairs = sorted(
        (j, position[s]) for j, slug in enumerate(lower) for s in up_links.get(slug, ()) if s in position
    )
    count = 0
    for a in range(len(pairs)):
        for b in range(a + 1, len(pairs)):
            if pairs[a][0] < pairs[b][0] and pairs[a][1] > pairs[b][1]:
                count += 1
    return count


def _total_crossings(layers: Sequence[Sequence[str]], up_links: Mapping[str, list[str]]) -> int:
    return sum(_crossings(layers[i], layers[i + 1], up_links) for i in range(len(layers) - 1))


def _reorder(layer: list[str], fixed: Sequence[str], links: Mapping[str, list[str]]) -> list[str]:
    position = {slug: i for i, slug in enumerate(fixed)}

    def key(item: tuple[int, str]) -> tuple[float, int]:
        index, slug = item
        near = [position[s] for s in links.get(slug, ()) if s in position]
        return (sum(near) / len(near) if near else float(index), index)

    return [slug for _, slug in sorted(enumerate(layer), key=key)]


def _isotonic(values: Sequence[float]) -> list[float]:
    """The non-decreasing sequence closest to ``values`` in squares (pool adjacent violators).

    Slot centres minus their minimum offsets must be non-decreasing for the slots not to overlap, so
    this places a layer as near to its neighbours' mean positions as order and spacing allow."""
    blocks: list[list[float]] = []  # [mean, weight]
    for value in values:
        blocks.append([value, 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            mean, weight = blocks.pop()
            blocks[-1][0] = (blocks[-1][0] * blocks[-1][1] + mean * weight) / (blocks[-1][1] + weight)
            blocks[-1][1] += weight
    return [mean for mean, weight in blocks for _ in range(int(weight))]


def _fewest_crossings(
    layers: list[list[str]], up: dict[str, list[str]], down: dict[str, list[str]]
) -> tuple[list[list[str]], int]:
    """The order of each layer with the fewest edge crossings found in ``SWEEPS`` down-and-up sweeps
    of barycentre reordering, and that number."""
    count = len(layers)
    best = [list(slugs) for slugs in layers]
    best_crossings = _total_crossings(best, up)
    current = [list(slugs) for slugs in layers]
    for _ in range(SWEEPS):
        if best_crossings == 0:
            break
        for i in range(1, count):
            current[i] = _reorder(current[i], current[i - 1], up)
        for i in range(count - 2, -1, -1):
            current[i] = _reorder(current[i], current[i + 1], down)
        crossings = _total_crossings(current, up)
        if crossings < best_crossings:
            best, best_crossings = [list(slugs) for slugs in current], crossings
    return best, best_crossings


def layout(order: Sequence[str], deps: Mapping[str, Sequence[str]], sizes: Sizes) -> Placed:
    """Place the nodes of ``order`` (definition order breaks ties) with their ``deps`` as edges."""
    layer = layers_of(order, deps)
    count = max(layer.values(), default=-1) + 1
    layers: list[list[str]] = [[] for _ in range(count)]
    for slug in order:
        layers[layer[slug]].append(slug)
    up: dict[str, list[str]] = {}
    down: dict[str, list[str]] = {}
    chains: list[tuple[str, str, list[str]]] = []
    for target in order:
        for source in deps.get(target, ()):
            if source not in layer:
                continue
            chain = [source]
            for between in range(layer[source] + 1, layer[target]):
                dummy = f"\0{source}\0{target}\0{between}"
                layers[between].append(dummy)
                chain.append(dummy)
            chain.append(target)
            for a, b in pairwise(chain):
                down.setdefault(a, []).append(b)
                up.setdefault(b, []).append(a)
            chains.append((source, target, chain))

    best, best_crossings = _fewest_crossings(layers, up, down)

    def extent(slug: str) -> int:
        return sizes.lane if slug.startswith("\0") else sizes.box_v

    centre: dict[str, float] = {}
    for slugs in best:
        v = 0.0
        for slug in slugs:
            centre[slug] = v + extent(slug) / 2
            v += extent(slug) + sizes.slot_gap
    for _ in range(ALIGN_PASSES):
        for links in (up, down):
            for slugs in best:
                offsets, wanted = [], []
                offset = 0.0
                for index, slug in enumerate(slugs):
                    if index:
                        offset += (extent(slugs[index - 1]) + extent(slug)) / 2 + sizes.slot_gap
                    near = [centre[s] for s in links.get(slug, ())]
                    offsets.append(offset)
                    wanted.append((sum(near) / len(near) if near else centre[slug]) - offset)
                for slug, z, offset in zip(slugs, _isotonic(wanted), offsets, strict=True):
                    centre[slug] = z + offset
    top = min((centre[s] - extent(s) / 2 for s in centre), default=0.0)
    vpos = {slug: round(centre[slug] - extent(slug) / 2 - top) for slug in centre}

    def u_of(index: int) -> int:
        return index * (sizes.box_u + sizes.layer_gap)

    boxes = {
        slug: Box(u_of(layer[slug]), vpos[slug], sizes.box_u, sizes.box_v) for slug in order if slug in vpos
    }
    edges: list[Edge] = []
    for source, target, chain in chains:
        points: list[tuple[int, int]] = [(u_of(layer[source]) + sizes.box_u, vpos[source] + sizes.box_v // 2)]
        for index, dummy in enumerate(chain[1:-1], start=layer[source] + 1):
            lane = vpos[dummy] + sizes.lane // 2
            points += [(u_of(index), lane), (u_of(index) + sizes.box_u, lane)]
        points.append((u_of(layer[target]), vpos[target] + sizes.box_v // 2))
        edges.append(Edge(source, target, tuple(points)))
    extent_u = u_of(count) - sizes.layer_gap if count else 0
    extent_v = max((vpos[s] + extent(s) for s in vpos), default=0)
    return Placed(best, boxes, edges, extent_u, extent_v, best_crossings)
