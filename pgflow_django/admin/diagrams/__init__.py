"""Server-side SVG diagrams for the admin: the layered DAG layout and its geometry checks."""

from __future__ import annotations

from math import ceil

SMALLEST_TEXT = 9
"""Pixels under which no text of a picture is drawn: a picture shrinks to its box only that far."""


def size_style(width: int, smallest_font: int) -> str:
    """The inline style of an SVG ``width`` user units wide whose smallest text is ``smallest_font``:
    its natural size at most, shrunk to its container's width but never below the scale that draws
    that text at ``SMALLEST_TEXT`` px; a narrower box scrolls sideways (``.pgflow-diagram``)."""
    least = min(width, ceil(width * SMALLEST_TEXT / smallest_font))
    return f"width:100%;max-width:{width}px;min-width:{least}px;display:block"
