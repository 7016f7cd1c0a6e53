"""docs/schedules.md, *Operating schedules*: the table shown is what ``pgflow_schedules`` prints at
80 columns for the two schedules it describes (digits aside: times are the clock's), and every
``manage.py pgflow_schedules`` line of its examples runs and exits 0."""

from __future__ import annotations

import io
import re
import shlex
from pathlib import Path

import pytest
from django.core.management import call_command
from rich.console import Console

from pgflow_django.management.commands import pgflow_schedules
from pgflow_django.schedules import create_schedule, pause_schedule, trigger_now
from tests.sql import support
from tests.sql.support import make_flow, step

DOC = Path(__file__).resolve().parents[2] / "docs" / "schedules.md"
SECTION = DOC.read_text(encoding="utf-8").split("## Operating schedules", 1)[1].split("\n## ", 1)[0]
BLOCKS = re.findall(r"```\n(.*?)```", SECTION, re.S)


@pytest.fixture
def described() -> None:
    """The doc's two schedules: nightly (last run completed) and supplier-sync (paused, last run failed)."""
    make_flow("nightly_report", step("build"))
    make_flow("sync_supplier", step("fetch"), max_attempts=1)
    create_schedule("nightly_report", cron="30 2 * * *", timezone="Europe/Paris", name="nightly", input={})
    create_schedule("sync_supplier", cron="*/10 * * * *", name="supplier-sync")
    trigger_now("nightly")
    support.run_step("nightly_report", "build", {"rows": 3})
    trigger_now("supplier-sync")
    assert support.fail(support.claim_one("sync_supplier"), "HTTP 503") == "failed"
    pause_schedule("supplier-sync", detail="supplier API down")


def _masked(text: str) -> list[str]:
    lines = [re.sub(r"\d", "N", line).rstrip() for line in text.splitlines()]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines


@pytest.mark.usefixtures("described")
def test_the_table_shown_is_what_the_list_prints() -> None:
    [shown] = [block for block in BLOCKS if block.startswith("manage.py pgflow_schedules\n")]
    out = io.StringIO()
    command = pgflow_schedules.Command(stdout=out)
    command.console = lambda **_: Console(file=out, width=80, no_color=True, highlight=False)  # type: ignore[method-assign]
    command._list({"format": "text", "no_color": True})
    assert _masked(shown.split("\n", 1)[1]) == _masked(out.getvalue())


@pytest.mark.usefixtures("described")
def test_every_example_line_runs() -> None:
    [examples] = [block for block in BLOCKS if block.startswith("manage.py pgflow_schedules show")]
    lines = [re.split(r"\s{2,}", line)[0] for line in examples.splitlines() if line.strip()]
    assert len(lines) == 6
    for line in lines:
        argv = shlex.split(line)[1:]
        call_command(*argv, stdout=io.StringIO(), stderr=io.StringIO())
    assert support.val("select count(*) from pgflow.schedule_ticks where schedule_name = 'nightly'") == 3
