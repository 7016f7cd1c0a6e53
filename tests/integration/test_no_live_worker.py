"""Issue 36 item 3: waits on a worker that is not there are not silent.

A schedule whose flow no live worker runs shows ``no live worker`` in ``pgflow_schedules`` and the
admin, ``check --database`` warns (``pgflow.W031``), and ``pgflow_start --wait`` names the worker to
start once the run has waited a few seconds on tasks no live worker would claim. A live worker is
``pgflow_django.runs.coverage``'s: not stopped, not deprecated, a heartbeat within 3 periods,
polling the step's queue and registered for that (flow, step). Workers are ``pgflow.workers`` rows here, as
``pgflow_worker`` writes them; one test runs ``manage.py pgflow_start --wait`` for real.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from io import StringIO

import pytest
from django.core.checks import CheckMessage, run_checks
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import Client, override_settings
from django.urls import reverse

from pgflow_django import with_step_queues
from pgflow_django.flows.compiler import compile_flow
from pgflow_django.management.commands import pgflow_start
from pgflow_django.schedules import create_schedule, pause_schedule
from tests.integration import commands_flows
from tests.integration.commands_support import call, manage_in_process
from tests.sql import support

FLOW = "cmd_greet"
STEPPED = "cmd_greet_steps"


def live_worker(
    queue: str, flow: str, *steps: str, heartbeat_age: float = 0, stopped: bool = False
) -> uuid.UUID:
    """A worker as ``pgflow_worker`` registers it: its row and its support set."""
    worker_id = uuid.uuid4()
    support.q(
        "insert into pgflow.workers (worker_id, queue_name, function_name, last_heartbeat_at, stopped_at) "
        "values (%s, %s, 'tests', now() - make_interval(secs => %s), case when %s then now() end)",
        [worker_id, queue, heartbeat_age, stopped],
    )
    support.q(
        "insert into pgflow.worker_support (worker_id, flow_slug, step_slug) "
        "select %s, %s, unnest(%s::text[])",
        [worker_id, flow, list(steps)],
    )
    return worker_id


@pytest.fixture(autouse=True)
def greet(monkeypatch: pytest.MonkeyPatch) -> None:
    """cmd_greet (steps hello, shout, on one queue) compiled; no worker live at all."""
    monkeypatch.setenv("COLUMNS", "80")
    compile_flow(commands_flows.greet)
    support.q("update pgflow.workers set stopped_at = now() where stopped_at is null")


def listed() -> dict[str, dict[str, object]]:
    return {item["name"]: item for item in json.loads(call("pgflow_schedules", "--format", "json")[0])}


def shown(name: str) -> str:
    return " ".join(call("pgflow_schedules", "show", name)[0].split())


def warnings() -> list[tuple[str, object, str, str]]:
    messages: list[CheckMessage] = run_checks(tags=["database"], databases=["default"])
    return [(m.id, m.obj, m.msg, m.hint or "") for m in messages if m.id == "pgflow.W031"]


class TestSchedulesCommand:
    def test_an_active_schedule_of_a_flow_no_worker_runs_says_so(self) -> None:
        create_schedule(FLOW, cron="0 * * * *", name="nw-hourly")
        create_schedule(FLOW, cron="0 3 * * *", name="nw-paused")
        pause_schedule("nw-paused", detail="on hold")
        out, _ = call("pgflow_schedules")
        assert out.count("no live worker") == 1, out
        assert max(len(line) for line in out.splitlines()) <= 80
        items = listed()
        assert items["nw-hourly"]["worker_warning"] == "no live worker"
        assert items["nw-paused"]["worker_warning"] is None, "a paused schedule fires nothing"
        text = shown("nw-hourly")
        assert (
            "workers no live worker runs flow cmd_greet: its runs wait in the queue until one starts" in text
        )
        assert "nothing fires it unless manage.py pgflow_scheduler runs" in text
        assert "start manage.py pgflow_worker --flow cmd_greet" in text
        assert json.loads(call("pgflow_schedules", "show", "nw-hourly", "--format", "json")[0])[
            "worker_warning"
        ] == ("no live worker")

    def test_a_live_worker_for_every_step_clears_it(self) -> None:
        create_schedule(FLOW, cron="0 * * * *", name="nw-served")
        live_worker(FLOW, FLOW, "hello", "shout")
        out, _ = call("pgflow_schedules")
        assert "no live worker" not in out
        assert listed()["nw-served"]["worker_warning"] is None
        assert "workers a live worker runs each step of its flow" in shown("nw-served")

    def test_stale_stopped_or_other_step_workers_do_not_count(self) -> None:
        create_schedule(FLOW, cron="0 * * * *", name="nw-partial")
        live_worker(FLOW, FLOW, "hello", "shout", heartbeat_age=60)
        live_worker(FLOW, FLOW, "hello", "shout", stopped=True)
        live_worker("another_queue", FLOW, "hello", "shout")
        assert listed()["nw-partial"]["worker_warning"] == "no live worker"
        live_worker(FLOW, FLOW, "hello")
        assert listed()["nw-partial"]["worker_warning"] == "no live worker for step shout"
        text = shown("nw-partial")
        assert "no live worker runs step(s) shout of flow cmd_greet: its runs wait there" in text
        assert "nothing fires it" not in text, "a live worker fires schedules"

    def test_a_step_queued_flow_names_the_worker_of_each_missing_step(self) -> None:
        stepped = with_step_queues(commands_flows.greet.copy(slug=STEPPED))
        compile_flow(stepped)
        create_schedule(STEPPED, cron="0 * * * *", name="nw-steps")
        queue = support.val(
            "select queue_name as q from pgflow.steps where flow_slug = %s and step_slug = 'hello'", [STEPPED]
        )
        live_worker(queue, STEPPED, "hello")
        text = shown("nw-steps")
        assert f"start manage.py pgflow_worker --flow {STEPPED} --step shout" in text
        assert "--step hello" not in text

    def test_with_pg_cron_firing_needs_no_worker_but_the_runs_do(self) -> None:
        create_schedule(FLOW, cron="0 * * * *", name="nw-cron")
        with override_settings(PGFLOW={"SCHEDULER": "pg_cron"}):
            text = shown("nw-cron")
        assert "no live worker runs flow cmd_greet" in text and "nothing fires it" not in text


class TestCheck:
    def test_w031_for_an_active_schedule_no_worker_runs(self) -> None:
        create_schedule(FLOW, cron="0 * * * *", name="nw-check")
        create_schedule(FLOW, cron="0 3 * * *", name="nw-check-paused")
        pause_schedule("nw-check-paused")
        ((check_id, obj, message, hint),) = warnings()
        assert (check_id, obj) == ("pgflow.W031", "nw-check")
        assert message.startswith(
            "database 'default': schedule 'nw-check': no live worker runs flow cmd_greet"
        )
        assert hint.startswith("start manage.py pgflow_worker --flow cmd_greet and keep it running")

    def test_no_warning_once_a_worker_runs_every_step(self) -> None:
        create_schedule(FLOW, cron="0 * * * *", name="nw-check-served")
        live_worker(FLOW, FLOW, "hello", "shout")
        assert warnings() == []
        call_command("check", "--database", "default", "--fail-level", "WARNING")


class TestAdmin:
    def test_list_and_page_show_no_live_worker(self, admin_client: Client) -> None:
        create_schedule(FLOW, cron="0 * * * *", name="nw-admin")
        html = admin_client.get("/admin/pgflow/schedule/").content.decode()
        assert '<strong class="pgflow-no-worker"' in html and ">no live worker</strong>" in html
        page = admin_client.get(reverse("admin:pgflow_schedule_change", args=["nw-admin"])).content.decode()
        assert "no live worker runs flow cmd_greet: its runs wait in the queue until one starts" in page
        assert "<code>manage.py pgflow_worker --flow cmd_greet</code>" in page

    def test_nothing_shown_when_served(self, admin_client: Client) -> None:
        create_schedule(FLOW, cron="0 * * * *", name="nw-admin-served")
        live_worker(FLOW, FLOW, "hello", "shout")
        html = admin_client.get("/admin/pgflow/schedule/").content.decode()
        assert "pgflow-no-worker" not in html
        page = admin_client.get(reverse("admin:pgflow_schedule_change", args=["nw-admin-served"])).content
        assert b"a live worker runs each step of its flow" in page


@pytest.fixture
def quick_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hint after 0.3 s instead of 5, so that a test waits 1 s, not 6."""
    monkeypatch.setattr(pgflow_start, "WORKER_HINT_SECONDS", 0.3)


def wait(*args: str) -> tuple[int, str, str]:
    out, err = StringIO(), StringIO()
    try:
        call_command("pgflow_start", *args, "--wait", "--timeout", "1", stdout=out, stderr=err)
    except CommandError as exc:
        return exc.returncode, out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


@pytest.mark.usefixtures("quick_hint")
class TestStartWait:
    def test_names_the_worker_to_start_once(self) -> None:
        code, out, err = wait(FLOW, "--input", '{"name": "ada"}')
        assert code == 3, "the run is still started when --timeout passes"
        assert "no worker" not in out, "stdout keeps the run's table"
        assert err.splitlines() == [
            "no worker is serving flow cmd_greet: start one with  manage.py pgflow_worker --flow cmd_greet"
        ]

    def test_silent_while_a_live_worker_serves_the_waiting_step(self) -> None:
        live_worker(FLOW, FLOW, "hello", "shout")
        code, _, err = wait(FLOW, "--input", '{"name": "ada"}')
        assert (code, err) == (3, "")

    def test_a_step_queued_flow_names_the_step(self) -> None:
        compile_flow(with_step_queues(commands_flows.greet.copy(slug=STEPPED)))
        code, _, err = wait(STEPPED, "--input", '{"name": "ada"}')
        assert code == 3
        assert err.splitlines() == [
            f"no worker is serving step(s) hello of flow {STEPPED}: start one with  "
            f"manage.py pgflow_worker --flow {STEPPED} --step hello"
        ]

    def test_quiet_at_verbosity_0(self) -> None:
        code, _, err = wait(FLOW, "--input", '{"name": "ada"}', "-v", "0")
        assert (code, err) == (3, "")


@pytest.fixture
def committed_greet(database_url: str) -> Iterator[None]:
    compile_flow(commands_flows.greet)
    yield
    with connection.cursor() as cursor:
        cursor.execute("select pgflow.delete_flow_and_data(%s)", [FLOW])


def test_start_wait_says_it_after_a_few_seconds(committed_greet: None) -> None:
    """At the real delay (no ``quick_hint``): ``manage.py pgflow_start --wait`` with no worker prints
    the line after about 5 s, once, on stderr, then the time-out line; stdout keeps the run's table."""
    result = manage_in_process("pgflow_start", FLOW, "--input", '{"name": "ada"}', "--wait", "--timeout", "7")
    assert result.returncode == 3, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[0] == (
        "no worker is serving flow cmd_greet: start one with  manage.py pgflow_worker --flow cmd_greet"
    )
    assert lines[1].startswith("CommandError: run ") and "still started after 7.0 s" in lines[1]
    assert "no worker" not in result.stdout
