"""What an error about an unknown name offers: the known names, the first few of them, and the
closest match, so a typo is fixed from the message alone."""

from __future__ import annotations

import difflib
from collections.abc import Sequence


def known_and_closest(name: str, known: Sequence[str], *, most: int) -> tuple[str, str]:
    """``known`` listed up to ``most`` (``"a, b and 3 more"``, or ``"none"``), and the hint
    ``"; did you mean 'x'?"`` naming the closest match to ``name`` (empty when none is close)."""
    listed = ", ".join(known[:most]) or "none"
    if len(known) > most:
        listed += f" and {len(known) - most} more"
    close = difflib.get_close_matches(name, known, n=1)
    return listed, (f"; did you mean {close[0]!r}?" if close else "")
