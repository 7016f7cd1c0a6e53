"""``pgflow_coverage`` and ``pgflow_django.runs.coverage``: persisted routes and live
tasks vs live workers.

Workers are simulated by inserting ``pgflow.workers`` and ``pgflow.worker_support`` rows (live, stale,
stopped, deprecated, wrong step, wrong queue); one test runs a real worker process instead.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from pgflow_django import Flow, start_flow, with_step_queues
from pgflow_django.flows.compiler import compile_flow
from pgflow_django.runs.coverage import RouteCoverage, coverage, coverage_sql
from pgflow_django.runs.operations import pause
from tests.integration.commands_support import manage, stderr_lines
from tests.sql.support import q, val
from tests.support.db import tuples
from tests.workers import WorkerProcess, wait_until

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def fetch(flow_input: Any) -> Any:
    return flow_input


def deliver(deps: Any) -> Any:
    return deps


plain = Flow("cov_plain", timeout=5)
plain.step(slug="first")(fetch)
plain.step(slug="second", depends_on=["first"])(deliver)

stepped = Flow("cov_stepped", timeout=5)
stepped.step(slug="fetch")(fetch)
stepped.step(slug="deliver", depends_on=["fetch"])(deliver)
stepped_queues = with_step_queues(stepped)

SLUGS = ("cov_plain", "cov_stepped")
QUEUES = ("cov_plain", "cov_stepped__fetch", "cov_stepped__deliver", "cov_stepped_old")


def drop_coverage_flows() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "select pgflow.delete_flow_and_data(flow_slug) from pgflow.flows where flow_slug = any(%s)",
            [list(SLUGS)],
        )
        cursor.execute("delete from pgflow.workers where queue_name = any(%s)", [list(QUEUES)])


@pytest.fixture
def flows() -> Iterator[None]:
    compile_flow(plain)
    compile_flow(stepped_queues)
    yield
    drop_coverage_flows()


def add_worker(
    queue: str,
    flow: str,
    *steps: str,
    heartbeat_age: float = 0,
    stopped: bool = False,
    deprecated: bool = False,
) -> uuid.UUID:
    """A registered worker as ``pgflow_worker`` writes it, back-dated or ended as asked."""
    worker_id = uuid.uuid4()
    q(
        """
        insert into pgflow.workers (worker_id, queue_name, function_name, last_heartbeat_at, stopped_at,
                                    deprecated_at)
        values (%(id)s, %(queue)s, 'test', now() - make_interval(secs => %(age)s),
                case when %(stopped)s then now() end, case when %(deprecated)s then now() end)
        """,
        {"id": worker_id, "queue": queue, "age": heartbeat_age, "stopped": stopped, "deprecated": deprecated},
    )
    q(
        "insert into pgflow.worker_support (worker_id, flow_slug, step_slug) "
        "select %s, %s, unnest(%s::text[])",
        [worker_id, flow, list(steps)],
    )
    return worker_id


def run_command(*args: str) -> tuple[int, str, str]:
    """``call_command`` -> (exit code, stdout, stderr), the exit code of a ``CommandError`` included."""
    out, err = StringIO(), StringIO()
    try:
        call_command("pgflow_coverage", *args, stdout=out, stderr=err)
    except CommandError as exc:
        err.write(f"CommandError: {exc}\n")
        return exc.returncode, out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


def table(out: str) -> list[list[str]]:
    """The listing's rows (split on runs of 2+ spaces), header first; stops at the query."""
    lines = out.split("\n-- the query (copy into psql):\n")[0].splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith("FLOW "))
    return [re.split(r"\s{2,}", line.strip()) for line in lines[start:] if line.strip()]


def printed_query(out: str) -> str:
    heading = "\n-- the query (copy into psql):\n"
    assert heading in out, out
    return out.split(heading, 1)[1]


def as_rows(routes: list[RouteCoverage]) -> list[tuple[Any, ...]]:
    return [
        (
            r.flow_slug,
            r.step_slug,
            r.step_index,
            r.queue_name,
            r.queue_mode,
            r.in_route,
            r.pending_tasks,
            r.live_workers,
            r.paused,
        )
        for r in routes
    ]


def by_step(routes: list[RouteCoverage]) -> dict[tuple[str, str, str], RouteCoverage]:
    return {(r.flow_slug, r.step_slug, r.queue_name): r for r in routes}


def deployed_workers(stale_age: float = 60) -> None:
    """Plain flow fully covered; step-queued: fetch covered, deliver only by workers that do not count."""
    add_worker("cov_plain", "cov_plain", "first", "second")
    add_worker("cov_stepped__fetch", "cov_stepped", "fetch")
    add_worker("cov_stepped__deliver", "cov_stepped", "deliver", heartbeat_age=stale_age)  # stale
    add_worker("cov_stepped__deliver", "cov_stepped", "deliver", stopped=True)
    add_worker("cov_stepped__deliver", "cov_stepped", "deliver", deprecated=True)
    add_worker("cov_stepped__deliver", "cov_stepped", "fetch")  # right queue, wrong step
    add_worker("cov_stepped__fetch", "cov_stepped", "deliver")  # right step, wrong queue


@pytest.mark.usefixtures("flows")
class TestCoverage:
    def test_routes_without_workers_are_uncovered(self) -> None:
        routes = coverage(flow="cov_stepped")
        assert [(r.step_slug, r.queue_name, r.queue_mode, r.live_workers) for r in routes] == [
            ("fetch", "cov_stepped__fetch", "step", 0),
            ("deliver", "cov_stepped__deliver", "step", 0),
        ]
        assert all(r.in_route and not r.covered and r.paused is None for r in routes)

    def test_only_live_workers_on_the_queue_that_run_the_step_count(self) -> None:
        deployed_workers()
        routes = by_step(coverage())
        assert routes["cov_plain", "first", "cov_plain"].live_workers == 1
        assert routes["cov_plain", "second", "cov_plain"].live_workers == 1
        assert routes["cov_plain", "first", "cov_plain"].queue_mode == "flow"
        assert routes["cov_stepped", "fetch", "cov_stepped__fetch"].live_workers == 1
        assert routes["cov_stepped", "deliver", "cov_stepped__deliver"].live_workers == 0

    def test_the_window_decides_what_is_live(self) -> None:
        deployed_workers()
        routes = by_step(coverage(flow="cov_stepped", live_seconds=120))
        assert routes["cov_stepped", "deliver", "cov_stepped__deliver"].live_workers == 1  # the stale one

    def test_pending_tasks_count_queued_and_started_tasks_on_the_route(self) -> None:
        start_flow("cov_stepped", {"n": 1})
        start_flow("cov_stepped", {"n": 2})
        routes = by_step(coverage(flow="cov_stepped"))
        assert routes["cov_stepped", "fetch", "cov_stepped__fetch"].pending_tasks == 2
        assert routes["cov_stepped", "deliver", "cov_stepped__deliver"].pending_tasks == 0

    def test_tasks_left_on_an_older_route_are_listed_with_their_queue(self) -> None:
        start_flow("cov_stepped", {"n": 1})
        q("update pgflow.step_tasks set queue_name = 'cov_stepped_old' where flow_slug = 'cov_stepped'")
        routes = by_step(coverage(flow="cov_stepped"))
        old = routes["cov_stepped", "fetch", "cov_stepped_old"]
        assert (old.in_route, old.pending_tasks, old.live_workers) == (False, 1, 0)
        assert routes["cov_stepped", "fetch", "cov_stepped__fetch"].pending_tasks == 0
        add_worker("cov_stepped_old", "cov_stepped", "fetch")
        assert by_step(coverage(flow="cov_stepped"))["cov_stepped", "fetch", "cov_stepped_old"].covered

    def test_a_paused_subscription_is_named(self) -> None:
        pause("cov_plain", detail="deploying")
        pause("cov_stepped", "deliver")
        routes = by_step(coverage())
        assert routes["cov_plain", "first", "cov_plain"].paused == "operator"
        assert routes["cov_stepped", "deliver", "cov_stepped__deliver"].paused == "operator"
        assert routes["cov_stepped", "fetch", "cov_stepped__fetch"].paused is None

    def test_coverage_runs_the_sql_it_renders(self) -> None:
        deployed_workers()
        start_flow("cov_stepped", {"n": 1})
        query = coverage_sql(flow="cov_stepped", live_seconds=42)
        assert "values (42.0::float8, 'cov_stepped'::text)" in query
        assert "%(" not in query
        assert tuples(query) == as_rows(coverage(flow="cov_stepped", live_seconds=42))
        everything = coverage_sql(live_seconds=15)
        assert "values (15.0::float8, NULL::text)" in everything
        assert tuples(everything) == as_rows(coverage())

    def test_the_documented_query_is_the_rendered_default(self) -> None:
        text = DOC.read_text(encoding="utf-8")
        section = text[text.index("### Coverage check") :]
        block = re.search(r"```sql\n(.*?)```", section, re.DOTALL)
        assert block is not None
        assert block.group(1) == coverage_sql(live_seconds=15)


@pytest.mark.usefixtures("flows")
class TestCommand:
    @pytest.fixture(autouse=True)
    def wide(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The listing's columns are parsed as a wide terminal shows them (test_commands_80_columns
        checks the 80-column layout)."""
        monkeypatch.setenv("COLUMNS", "200")

    def test_lists_uncovered_routes_then_the_query_and_exits_3(self) -> None:
        deployed_workers()
        start_flow("cov_stepped", {"n": 1})
        code, out, err = run_command("--flow", "cov_stepped", "-v", "2")
        assert code == 3
        assert out.startswith(
            "1 of 2 route(s) of flow cov_stepped have no live worker "
            "(live: not stopped, not deprecated, heartbeat within 15 s)\n"
        )
        assert table(out) == [
            ["FLOW", "STEP", "QUEUE", "MODE", "PENDING", "LIVE", "NOTE"],
            ["cov_stepped", "deliver", "cov_stepped__deliver", "step", "0", "0"],
        ]
        assert err.strip() == "CommandError: 1 of 2 (flow, step, queue) route(s) have no live worker"
        query = printed_query(out)
        assert query == coverage_sql(flow="cov_stepped")
        assert tuples(query) == as_rows(coverage(flow="cov_stepped"))

    def test_all_routes_of_every_flow(self) -> None:
        deployed_workers()
        code, out, _ = run_command("--all")
        assert code == 3
        rows = [row for row in table(out)[1:] if row[0] in SLUGS]
        assert rows == [
            ["cov_plain", "first", "cov_plain", "flow", "0", "1"],
            ["cov_plain", "second", "cov_plain", "flow", "0", "1"],
            ["cov_stepped", "fetch", "cov_stepped__fetch", "step", "0", "1"],
            ["cov_stepped", "deliver", "cov_stepped__deliver", "step", "0", "0"],
        ]

    def test_a_covered_flow_exits_0(self) -> None:
        deployed_workers()
        code, out, err = run_command("--flow", "cov_plain")
        assert code == 0, err
        assert out.startswith("all 2 route(s) of flow cov_plain have a live worker (")
        assert "FLOW " not in out  # nothing to list without --all
        assert "-- the query" not in out and "select" not in out  # the SQL only at -v 2
        code, out, err = run_command("--flow", "cov_plain", "-v", "2")
        assert printed_query(out) == coverage_sql(flow="cov_plain")
        code, out, _ = run_command("--flow", "cov_plain", "-v", "0")
        assert (code, out.splitlines()) == (0, [out.splitlines()[0]])  # -v 0: the summary, no query

    def test_live_seconds_widens_the_window(self) -> None:
        deployed_workers()
        code, out, _ = run_command("--flow", "cov_stepped", "--live-seconds", "90", "-v", "2")
        assert code == 0
        assert "heartbeat within 90 s" in out
        assert "values (90.0::float8, 'cov_stepped'::text)" in printed_query(out)

    def test_notes_name_older_routes_and_pauses(self) -> None:
        start_flow("cov_stepped", {"n": 1})
        q("update pgflow.step_tasks set queue_name = 'cov_stepped_old' where flow_slug = 'cov_stepped'")
        pause("cov_stepped", "fetch")
        code, out, _ = run_command("--flow", "cov_stepped")
        assert code == 3
        assert table(out)[1:] == [
            ["cov_stepped", "fetch", "cov_stepped__fetch", "step", "0", "0", "paused (operator)"],
            [
                "cov_stepped",
                "fetch",
                "cov_stepped_old",
                "step",
                "1",
                "0",
                "live tasks only: not in the persisted route (an older route); paused (operator)",
            ],
            ["cov_stepped", "deliver", "cov_stepped__deliver", "step", "0", "0"],
        ]

    def test_json(self) -> None:
        deployed_workers()
        code, out, _ = run_command("--format", "json", "--flow", "cov_stepped")
        assert code == 3
        report = json.loads(out)
        assert report == {
            "ok": False,
            "flow": "cov_stepped",
            "live_seconds": 15.0,
            "total": 2,
            "uncovered": 1,
            "routes": [
                {
                    "flow_slug": "cov_stepped",
                    "step_slug": "deliver",
                    "step_index": 1,
                    "queue_name": "cov_stepped__deliver",
                    "queue_mode": "step",
                    "in_route": True,
                    "pending_tasks": 0,
                    "live_workers": 0,
                    "paused": None,
                    "covered": False,
                }
            ],
            "sql": coverage_sql(flow="cov_stepped"),
        }
        code, out, _ = run_command("--format", "json", "--flow", "cov_plain", "--all")
        report = json.loads(out)
        assert (code, report["ok"], [r["live_workers"] for r in report["routes"]]) == (0, True, [1, 1])

    def test_sql_prints_only_the_query_which_runs_unchanged(self) -> None:
        deployed_workers()
        code, out, _ = run_command("--sql", "--flow", "cov_stepped", "--live-seconds", "120")
        assert code == 0
        assert out == coverage_sql(flow="cov_stepped", live_seconds=120)
        assert out.startswith("-- pgflow coverage:") and out.rstrip().endswith(";")
        assert tuples(out) == as_rows(coverage(flow="cov_stepped", live_seconds=120))

    def test_sql_refuses_output_options(self) -> None:
        code, _, err = run_command("--sql", "--all", "--format", "json")
        assert code == 1
        assert "it cannot be combined with --all, --format json" in err

    def test_unknown_flow_is_one_line(self) -> None:
        code, out, err = run_command("--flow", "cov_nope")
        assert (code, out) == (1, "")
        assert err.startswith("CommandError: no flow 'cov_nope' in the database (compiled flows: ")
        assert "cov_plain" in err

    def test_no_flows_compiled(self) -> None:
        q("select pgflow.delete_flow_and_data(flow_slug) from pgflow.flows")  # rolled back after the test
        code, out, _ = run_command("-v", "2")
        assert code == 0
        assert out.startswith("no flows compiled")
        assert printed_query(out) == coverage_sql()


PROCESS_WINDOW = 3600.0
"""The live window of the ``manage.py`` runs: the default 15 s is less than a start of Django takes on a
busy machine, and the fake heartbeats, written before it, would go stale while it starts."""


def test_manage_py_exit_codes(database_url: str) -> None:
    """The real process: exit 3 with the listing on stdout and one line on stderr; 1 and 2 for errors."""
    compile_flow(plain)
    compile_flow(stepped_queues)
    window = ("--live-seconds", f"{PROCESS_WINDOW:g}")
    try:
        deployed_workers(stale_age=2 * PROCESS_WINDOW)
        result = manage(database_url, "pgflow_coverage", "--flow", "cov_stepped", "-v", "2", *window)
        assert result.returncode == 3, result.stderr
        assert "cov_stepped  deliver  cov_stepped__deliver" in result.stdout
        assert stderr_lines(result) == [
            "CommandError: 1 of 2 (flow, step, queue) route(s) have no live worker"
        ]
        assert tuples(printed_query(result.stdout)) == as_rows(
            coverage(flow="cov_stepped", live_seconds=PROCESS_WINDOW)
        )

        result = manage(database_url, "pgflow_coverage", "--flow", "cov_plain", *window)
        assert result.returncode == 0, result.stderr

        result = manage(database_url, "pgflow_coverage", "--flow", "cov_nope")
        assert result.returncode == 1
        assert len(stderr_lines(result)) == 1

        result = manage(database_url, "pgflow_coverage", "--live-seconds", "0")
        assert result.returncode == 2
        assert len(stderr_lines(result)) == 1
    finally:
        drop_coverage_flows()


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_covers_its_routes_until_it_stops(spawn_worker: Callable[..., WorkerProcess]) -> None:
    slug = "example_chain"
    worker = spawn_worker(slug)

    def covered() -> list[RouteCoverage]:
        routes = coverage(flow=slug)
        return routes if all(r.live_workers == 1 for r in routes) else []

    routes = wait_until(covered, 10, "the worker's registration to cover example_chain")
    assert [(r.step_slug, r.queue_name, r.queue_mode) for r in routes] == [
        ("first", "example_chain", "flow"),
        ("second", "example_chain", "flow"),
        ("third", "example_chain", "flow"),
    ]
    assert val("select count(*) from pgflow.worker_support where worker_id = %s", [worker.worker_id]) == 3
    code, _, _ = run_command("--flow", slug)
    assert code == 0

    worker.terminate()
    assert worker.wait(20) == 0
    assert [r.live_workers for r in coverage(flow=slug)] == [0, 0, 0]
    code, out, _ = run_command("--flow", slug)
    assert code == 3
    assert [row[1] for row in table(out)[1:]] == ["first", "second", "third"]
