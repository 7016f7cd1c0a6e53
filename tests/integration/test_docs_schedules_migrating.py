"""The pgflow-django side of docs/schedules-migrating.md runs: its tasks.py and flows.py are imported
as real modules, synced, and fired over simulated time with the inputs the doc promises."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import pytest

from pgflow_django import compile_flow
from pgflow_django.schedules import sync_declared_schedules
from pgflow_django.schedules.declare import declared_schedules, forget_declarations
from tests.sql.schedules.support import fire, plan
from tests.sql.support import q

DOC = Path(__file__).resolve().parents[2] / "docs" / "schedules-migrating.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
TASK_IMPORT = "from django.tasks import task  # Django 5.2: from django_tasks import task"
NAMES = ("nightly-report", "weekly-board-report", "poll-inbox", "supplier-sync")


def _block(first_line: str) -> str:
    [source] = [block for block in BLOCKS if block.startswith(first_line)]
    return source


@pytest.fixture
def doc_module(doc_module: Callable[[str, str], ModuleType]) -> Iterator[Callable[[str, str], ModuleType]]:
    """The shared loader; the pages' schedule declarations are forgotten afterwards."""
    try:
        yield doc_module
    finally:
        forget_declarations(*NAMES)


def _replan(name: str, at: datetime) -> None:
    q("update pgflow.schedules set upcoming = '{}', planned_until = %s where schedule_name = %s", [at, name])
    plan(at, [name])


def test_the_celery_beat_replacement(doc_module: Callable[[str, str], ModuleType]) -> None:
    source = _block("# myapp/tasks.py (pgflow-django)")
    assert TASK_IMPORT in source
    module = doc_module(
        "migrating_doc_tasks", source.replace(TASK_IMPORT, "from testproject.example.task_api import task")
    )
    specs = {spec.name: spec for spec in declared_schedules() if spec.name in NAMES}
    assert sorted(specs) == ["nightly-report", "poll-inbox", "weekly-board-report"]
    assert (specs["nightly-report"].cron, specs["nightly-report"].timezone) == ("30 2 * * *", "Europe/Paris")
    assert sync_declared_schedules(list(specs.values())).created == sorted(specs)
    monday = datetime(2026, 1, 5, 7, 59, tzinfo=UTC)  # 08:59 in Paris
    for name in specs:
        _replan(name, monday)
    fired = fire(datetime(2026, 1, 5, 8, 0, 1, tzinfo=UTC))
    assert sorted(name for name, _, _ in fired) == ["poll-inbox", "weekly-board-report"]
    [board] = [run_id for name, _, run_id in fired if name == "weekly-board-report"]
    [row] = q("select input from pgflow.runs where run_id = %s", [board])
    assert row["input"] == {
        "task": "migrating_doc_tasks.build_report",
        "args": [],
        "kwargs": {"audience": "board"},
    }
    assert module.build_report.func(audience="board") == {"audience": "board"}
    night = datetime(2026, 1, 6, 1, 29, tzinfo=UTC)  # 02:29 in Paris
    _replan("nightly-report", night)
    assert [name for name, _, _ in fire(night.replace(minute=30))] == ["nightly-report"]


def test_the_procrastinate_periodic_replacement(doc_module: Callable[[str, str], ModuleType]) -> None:
    module = doc_module("migrating_doc_flows", _block("# myapp/flows.py (pgflow-django)"))
    [spec] = [spec for spec in declared_schedules() if spec.name == "supplier-sync"]
    assert (spec.catch_up, spec.max_catch_up) == ("all", 6)
    compile_flow(module.supplier_sync)
    sync_declared_schedules([spec])
    start = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
    _replan("supplier-sync", start)
    fired = fire(datetime(2026, 1, 5, 12, 35, tzinfo=UTC))  # three ticks came while nothing fired
    assert [tick for _, tick, _ in fired] == [start.replace(minute=m) for m in (10, 20, 30)]
    inputs = [
        q("select input from pgflow.runs where run_id = %s", [run_id])[0]["input"] for _, _, run_id in fired
    ]
    assert inputs == [{"timestamp": int(start.replace(minute=m).timestamp())} for m in (10, 20, 30)]
    assert module.fetch(inputs[0], None) == {"since": inputs[0]["timestamp"] - 600}
