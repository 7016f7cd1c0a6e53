"""The run timeline: one row per step, a map step's tasks as one row, failed attempts as ticks."""

from __future__ import annotations

import re
from typing import Any

from django.test import Client
from django.urls import reverse

from pgflow_django import Flow, start_flow
from pgflow_django.admin.diagrams import timeline
from pgflow_django.flows.compiler import compile_flow
from pgflow_django.models import Run
from tests.integration.test_admin import page
from tests.sql import support


def _handler(value: Any) -> Any:
    return value


def timeline_flow() -> Flow:
    flow = Flow("adm_timeline", max_attempts=2, base_delay=0, timeout=30)
    flow.map(slug="square")(_handler)
    flow.step(slug="total", depends_on=["square"])(_handler)
    return flow


def test_run_page_timeline_shows_rows_map_aggregate_and_failed_attempts(admin_client: Client) -> None:
    compile_flow(timeline_flow())
    run_id = start_flow("adm_timeline", [1, 2, 3])
    records = support.claim("adm_timeline", step_slug="square")
    assert len(records) == 3
    assert support.fail(records[1], '<b>boom</b> "quoted"', retry_delay=0) == "retrying"
    assert support.complete(records[0], 1) == "completed"
    assert support.complete(records[2], 9) == "completed"
    support.run_step("adm_timeline", "square", 4)
    html = page(admin_client, reverse("admin:pgflow_run_change", args=[run_id]))
    svg = re.search(r'<svg[^>]*class="pgflow-timeline".*?</svg>', html, re.S)
    assert svg, "the run page has a timeline"
    chart = svg[0]
    assert chart.count('class="pgflow-timeline-row') == 2, "one row per step, the map's three tasks in one"
    assert "square \u00d73" in chart and "3 completed \u00b7 1 failure<" in chart
    assert chart.count('class="pgflow-failure"') == 1
    assert "task 1 attempt 1 failed: &lt;b&gt;boom&lt;/b&gt; &quot;quoted&quot;" in chart
    assert "<b>boom" not in html
    assert 'data-step="total"' in chart and 'pgflow-status-started" data-step="total"' in chart
    link = f'href="/admin/pgflow/run/tasks/?q={run_id}&amp;step_slug__exact=square"'
    assert link in chart, "a row links to its tasks"
    assert re.search(r'class="pgflow-tick"[^>]*>\+0\.00s<', chart)


def test_rows_of_a_run_that_has_not_claimed_anything(admin_client: Client) -> None:
    compile_flow(timeline_flow())
    run_id = start_flow("adm_timeline", [1])
    rows = timeline.run_rows(Run.objects.get(run_id=run_id))
    assert [(r.step_slug, r.status, r.started) for r in rows] == [
        ("square", "started", None),
        ("total", "created", None),
    ]
    assert rows[0].queued is not None and rows[1].queued is None


def test_tick_labels_are_as_precise_as_the_span_needs() -> None:
    assert [timeline.tick_label(t, 0.3) for t in (0, 0.05)] == ["+0.00s", "+0.05s"]
    assert timeline.tick_label(2.5, 5) == "+2.5s" and timeline.tick_label(25, 60) == "+25s"
    assert timeline.tick_label(90, 900) == "+1.5m" and timeline.tick_label(1800, 7200) == "+30m"
