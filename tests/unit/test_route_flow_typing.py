"""Typing of ``route_flow`` (issue 6, item 1): what mypy infers for routed flows and decorated handlers
(``typing.assert_type``, checked statically by running mypy on this very module), and calls mypy must
reject (``tests/typing/reject_route_flow.py``, each expected error marked on its line). At runtime the
assertions are no-ops, so the test below also runs them as ordinary code."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, assert_type

from pgflow_django import Flow, RoutedFlow, StepDefinition, route_flow

ROOT = Path(__file__).resolve().parents[2]
THIS = Path(__file__).resolve().relative_to(ROOT)
REJECT = Path("tests/typing/reject_route_flow.py")
MARKER = re.compile(r"#\s*reject:\s*([a-z-]+)")
ERROR = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+): error: .*\[(?P<code>[a-z-]+)\]$")


def typed_usage() -> RoutedFlow:
    """What an editor sees: the routed flow, its queues and the handlers' own signatures."""
    flow = Flow("typing_support")

    @flow.step()
    def classify(thread: dict[str, Any]) -> list[str]:
        return ["billing"]

    @flow.step(depends_on=[classify])
    def deliver(deps: dict[str, Any], ctx: Any) -> str:
        return "sent"

    # the decorators return the handler itself: its parameter and return types survive
    assert_type(classify({"id": 1}), list[str])
    assert_type(deliver({"classify": ["billing"]}, None), str)

    routed = route_flow(flow, queues={"classify": "typing_fast", "deliver": "typing_bulk"})
    assert_type(routed, RoutedFlow)
    assert_type(routed.queue_for("classify"), str)
    assert_type(routed.queue_for(deliver), str)
    assert_type(routed.step_queues, Mapping[str, str])
    assert_type(routed.queues, tuple[str, ...])
    assert_type(routed.steps_on("typing_fast"), tuple[str, ...])
    assert_type(routed.copy(slug="typing_support_v2"), RoutedFlow)
    assert_type(routed.get_step(classify), StepDefinition)
    assert_type(routed.shape(), dict[str, Any])
    plain: Flow = routed  # a routed flow is a Flow wherever one is expected
    assert_type(plain.queue_for("deliver"), str)
    return routed


def expected_rejections() -> set[tuple[int, str]]:
    lines = (ROOT / REJECT).read_text().splitlines()
    found = {(n, m.group(1)) for n, line in enumerate(lines, 1) if (m := MARKER.search(line))}
    assert len(found) >= 3, "the snippet file marks its rejected lines"
    return found


def test_the_typed_usage_runs() -> None:
    routed = typed_usage()
    assert routed.queues == ("typing_fast", "typing_bulk")
    assert routed.copy(slug="typing_support_v2").queue_for("deliver") == "typing_bulk"


def test_mypy_accepts_the_typed_usage_and_rejects_each_marked_call() -> None:
    """One mypy run, with ``make lint``'s configuration (pyproject, the django-stubs plugin, strict):
    no error in this module, and exactly the marked errors in the snippet file (typically ~1 s with
    mypy's cache, ~30 s cold)."""
    env = {**os.environ, "DATABASE_URL": "postgresql://localhost/unused"}
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "--show-error-codes", str(THIS), str(REJECT)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    errors = [m for line in result.stdout.splitlines() if (m := ERROR.match(line.strip()))]
    unexplained = [
        line for line in result.stdout.splitlines() if ": error:" in line and not ERROR.match(line)
    ]
    assert not unexplained and not result.stderr.strip(), result.stdout + result.stderr
    assert [m.group(0) for m in errors if Path(m["path"]) == THIS] == [], result.stdout
    got = {(int(m["line"]), m["code"]) for m in errors if Path(m["path"]) == REJECT}
    assert got == expected_rejections(), result.stdout
    assert result.returncode == 1, result.stdout
