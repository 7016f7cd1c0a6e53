"""The examples of docs/schedules.md run: the declared schedules of its flows.py (imported as a real
module, as Django imports an app's flows.py) sync and fire, and the runtime API block runs as shown."""

from __future__ import annotations

import importlib
import json
import re
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pgflow_django import compile_flow
from pgflow_django.schedules import sync_declared_schedules
from pgflow_django.schedules.declare import declared_schedules, forget_declarations
from tests.sql.schedules.support import fire, plan
from tests.sql.support import make_flow, q, step, val

pytestmark = pytest.mark.django_db

DOC = Path(__file__).resolve().parents[3] / "docs" / "schedules.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


@pytest.fixture
def flows_module(tmp_path: Path) -> Iterator[object]:
    [source] = [block for block in BLOCKS if block.startswith("# myapp/flows.py")]
    (tmp_path / "schedules_doc_flows.py").write_text(source, encoding="utf-8")
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module("schedules_doc_flows")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("schedules_doc_flows", None)
        forget_declarations("nightly", "every-15s")


def test_the_declared_schedules_sync_and_fire(flows_module: object) -> None:
    specs = [spec for spec in declared_schedules() if spec.name in {"nightly", "every-15s"}]
    assert [spec.name for spec in specs] == ["every-15s", "nightly"]
    compile_flow(flows_module.reports)  # type: ignore[attr-defined]
    assert sync_declared_schedules(specs).created == ["every-15s", "nightly"]
    now = datetime(2026, 3, 29, 1, 0, 5, tzinfo=UTC)  # 03:00:05 in Paris, on the spring-forward day
    for name, planned_from in (("nightly", datetime(2026, 3, 28, 12, tzinfo=UTC)), ("every-15s", now)):
        q(
            "update pgflow.schedules set upcoming = '{}', planned_until = %s where schedule_name = %s",
            [planned_from.replace(second=0) if name == "every-15s" else planned_from, name],
        )
        plan(planned_from, [name])
    fired = fire(now)
    nightly = [run_id for name, _, run_id in fired if name == "nightly"]
    assert len(nightly) == 1
    run_input = json.loads(val("select input::text from pgflow.runs where run_id = %s", [nightly[0]]))
    assert run_input == {"day": "2026-03-29"}
    assert [name for name, _, _ in fired].count("every-15s") == 0  # its first tick is 01:00:15
    assert [name for name, _, _ in fire(now.replace(second=16))] == ["every-15s"]


def test_the_runtime_api_block_runs() -> None:
    make_flow("docs_example", step("sync"))
    [source] = [block for block in BLOCKS if block.startswith("# example: runtime schedules")]
    exec(source, {})
    assert val("select count(*) from pgflow.schedules where schedule_name = 'hourly-sync'") == 0
    assert val("select count(*) from pgflow.runs where flow_slug = 'docs_example'") == 1
