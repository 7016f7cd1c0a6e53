"""Runs per minute over the last hour as a small SVG bar chart, one per flow (the dashboard's panel).

Each minute is a slot with three bars side by side: runs started, completed and failed in that minute,
scaled to the busiest minute of the chart. The newest minute is on the right. Text is escaped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from django.utils.html import escape

from pgflow_django.admin.diagrams import size_style

MINUTES = 60
SLOT = 7
HEIGHT = 56
LEFT = 34
TOP = 6
BOTTOM = 18
FONT_SIZE = 12
SERIES: tuple[tuple[str, str], ...] = (
    ("started", "#60a5fa"),
    ("completed", "#22c55e"),
    ("failed", "#dc2626"),
)


def render(flow_slug: str, per_minute: Mapping[datetime, Sequence[int]], now: datetime) -> str:
    """``per_minute[minute] = (started, completed, failed)``; minutes are truncated to the minute."""
    newest = now.replace(second=0, microsecond=0)
    minutes = [newest - timedelta(minutes=MINUTES - 1 - i) for i in range(MINUTES)]
    peak = max((max(values) for values in per_minute.values()), default=0) or 1
    width = LEFT + SLOT * MINUTES + 4
    total = [sum(values[i] for values in per_minute.values()) for i in range(len(SERIES))]
    title = f"{flow_slug}: " + ", ".join(f"{n} {name}" for (name, _), n in zip(SERIES, total, strict=True))
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="pgflow-rates" data-flow="{escape(flow_slug)}" '
        f'width="100%" style="{size_style(width, FONT_SIZE)}" '
        f'viewBox="0 0 {width} {TOP + HEIGHT + BOTTOM}" '
        f'role="img" aria-label="{escape(title)}" font-family="sans-serif" font-size="{FONT_SIZE}">',
        f"<title>{escape(title)}</title>",
        f'<text x="{LEFT - 4}" y="{TOP + 9}" text-anchor="end" fill="#4b5563">{peak}</text>',
        f'<text x="{LEFT - 4}" y="{TOP + HEIGHT}" text-anchor="end" fill="#4b5563">0</text>',
        f'<line x1="{LEFT}" y1="{TOP + HEIGHT}" x2="{width - 4}" y2="{TOP + HEIGHT}" stroke="#9ca3af"/>',
    ]
    for index, minute in enumerate(minutes):
        values = per_minute.get(minute, (0, 0, 0))
        for series, ((name, colour), value) in enumerate(zip(SERIES, values, strict=True)):
            if not value:
                continue
            bar = HEIGHT * value / peak
            out.append(
                f'<rect class="pgflow-rate-{name}" x="{LEFT + index * SLOT + series * 2}" '
                f'y="{TOP + HEIGHT - bar:.1f}" width="2" height="{bar:.1f}" fill="{colour}">'
                f"<title>{minute:%H:%M} {value} {name}</title></rect>"
            )
    for index in (0, 30, MINUTES - 1):
        label = "now" if index == MINUTES - 1 else f"-{MINUTES - 1 - index}m"
        out.append(
            f'<text x="{LEFT + index * SLOT}" y="{TOP + HEIGHT + 14}" fill="#4b5563" '
            f'text-anchor="{"end" if index == MINUTES - 1 else "start"}">{label}</text>'
        )
    out.append("</svg>")
    return "".join(out)
