"""The admin on a chosen database: ``PGFLOW["ADMIN_DATABASE"]``, and reads routed to a replica.

Two pgflow databases in one project: ``default`` (the test database) and ``second`` (made for this
module on the same server, migrated, dropped afterwards). Both hold the flow ``cmd_greet`` and a run
with the same run id; only ``second`` has ``cmd_boom``. Every page must show the chosen database's
rows and every action must change that database only.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.db import connections
from django.test import Client, override_settings
from django.urls import reverse
from psycopg import sql

from pgflow_django import start_flow
from pgflow_django.checks import check_pooler
from pgflow_django.db.query import fetch_value
from pgflow_django.flows.compiler import compile_flow
from pgflow_django.schedules import create_schedule
from pgflow_django.worker import queries as worker_queries
from tests import workers
from tests.integration import commands_flows
from tests.integration.test_admin import said

SECOND = "second"
pytestmark = pytest.mark.django_db(databases=["default", SECOND])


@pytest.fixture(scope="module")
def second_database(django_db_setup: None) -> Iterator[str]:
    """A second pgflow database under the alias ``second``, migrated, for this module's tests."""
    base = dict(connections["default"].settings_dict)
    name = f"{base['NAME']}_admin_b"
    server = workers.url_from_settings({**base, "NAME": "postgres"})
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    url = workers.url_from_settings({**base, "NAME": name})
    # in a process of its own: migrate's lock watcher leaves a session behind on the default alias
    migrated = workers.run_manage(url, "migrate", "--noinput", timeout=300)
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    connections.settings[SECOND] = settings.DATABASES[SECOND] = {
        **base,
        "NAME": name,
        "TEST": {**base.get("TEST", {}), "NAME": name},
    }
    try:
        yield SECOND
    finally:
        connections[SECOND].close()
        del connections[SECOND]
        connections.settings.pop(SECOND, None)
        settings.DATABASES.pop(SECOND, None)
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))


def rows(alias: str, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    with connections[alias].cursor() as cursor:
        cursor.execute(query, params)
        return list(cursor.fetchall())


def status(alias: str, run_id: uuid.UUID) -> tuple[str, str | None]:
    [row] = rows(alias, "select status, error_message from pgflow.runs where run_id = %s", [run_id])
    return row[0], row[1]


@pytest.fixture
def both(second_database: str) -> dict[str, Any]:
    """``cmd_greet`` in both databases with a started run of the same id (different inputs), one
    more greet run in ``default`` only, ``cmd_boom`` and a worker row and a schedule in ``second``."""
    shared = uuid.uuid4()
    for alias in ("default", SECOND):
        compile_flow(commands_flows.greet, using=alias)
        start_flow("cmd_greet", {"name": alias}, run_id=shared, using=alias)
    only_default = start_flow("cmd_greet", {"name": "only in default"})
    compile_flow(commands_flows.boom, using=SECOND)
    boom = start_flow("cmd_boom", {}, using=SECOND)
    worker = uuid.uuid4()
    with connections[SECOND].cursor() as cursor:
        fetch_value(
            cursor,
            worker_queries.HEARTBEAT,
            {
                "id": worker,
                "queue": "cmd_boom",
                "name": "cmd_boom",
                "flows": ["cmd_boom"],
                "steps": ["explode"],
                "queues": ["cmd_boom"],
            },
        )
        cursor.execute("select pgflow.pause_subscription('cmd_boom', '', 'operator', 'by test')")
    create_schedule("cmd_boom", cron="0 3 * * *", name="nightly_boom", using=SECOND)
    return {"shared": shared, "only_default": only_default, "boom": boom, "worker": worker}


def page(client: Client, url: str, **params: Any) -> str:
    response = client.get(url, params)
    assert response.status_code == 200, response.content[:2000]
    return response.content.decode()


def act(client: Client, url: str, action: str, *ids: object) -> str:
    response = client.post(url, {"action": action, "_selected_action": [str(i) for i in ids]}, follow=True)
    assert response.status_code == 200
    return response.content.decode()


@override_settings(PGFLOW={"ADMIN_DATABASE": SECOND})
def test_every_page_shows_the_chosen_database(admin_client: Client, both: dict[str, Any]) -> None:
    runs = page(admin_client, "/admin/pgflow/run/")
    assert str(both["shared"]) in runs and str(both["boom"]) in runs
    assert str(both["only_default"]) not in runs
    assert "?flow__flow_slug__exact=cmd_boom" in runs, "the flow filter lists the second database's flows"

    run = page(admin_client, reverse("admin:pgflow_run_change", args=[both["shared"]]))
    assert "second" in run and "only in default" not in run, "the run's input is the second database's"
    assert 'class="pgflow-dag"' in run and 'data-step="hello"' in run
    assert 'class="pgflow-step-states"' in run and "pgflow-timeline" in run
    missing = admin_client.get(reverse("admin:pgflow_run_change", args=[both["only_default"]]))
    assert missing.status_code == 302, "a run of the other database is not found"

    flows = page(admin_client, "/admin/pgflow/flow/")
    assert "cmd_boom" in flows and "cmd_greet" in flows
    boom = page(admin_client, reverse("admin:pgflow_flow_change", args=["cmd_boom"]))
    assert 'data-step="explode"' in boom and "<td>explode</td>" in boom

    tasks = page(admin_client, "/admin/pgflow/run/tasks/")
    assert str(both["boom"]) in tasks and str(both["only_default"]) not in tasks

    worker_list = page(admin_client, "/admin/pgflow/worker/")
    assert str(both["worker"]) in worker_list and "(flow): operator" in worker_list
    page(admin_client, reverse("admin:pgflow_worker_change", args=[both["worker"]]))

    dashboard = page(admin_client, "/admin/pgflow/run/dashboard/")
    assert 'data-flow="cmd_boom"' in dashboard and "by test" in dashboard

    schedules = page(admin_client, "/admin/pgflow/schedule/")
    assert "nightly_boom" in schedules
    page(admin_client, reverse("admin:pgflow_schedule_change", args=["nightly_boom"]))


def test_the_default_alias_is_the_default(admin_client: Client, both: dict[str, Any]) -> None:
    runs = page(admin_client, "/admin/pgflow/run/")
    assert str(both["only_default"]) in runs and str(both["boom"]) not in runs
    assert "cmd_boom" not in page(admin_client, "/admin/pgflow/flow/")
    assert 'data-flow="cmd_boom"' not in page(admin_client, "/admin/pgflow/run/dashboard/")


@override_settings(PGFLOW={"ADMIN_DATABASE": SECOND})
def test_actions_change_the_chosen_database_only(admin_client: Client, both: dict[str, Any]) -> None:
    html = act(admin_client, "/admin/pgflow/run/", "cancel_runs", both["shared"])
    assert said(html) == [f"Cancelled run {both['shared']}."]
    assert status(SECOND, both["shared"]) == ("failed", "cancelled")
    assert status("default", both["shared"]) == ("started", None)

    html = act(admin_client, "/admin/pgflow/run/", "rerun_runs", both["shared"])
    assert said(html)[0].startswith(f"Re-ran run {both['shared']} as new run ")
    assert rows(SECOND, "select count(*) from pgflow.runs where rerun_of = %s", [both["shared"]]) == [(1,)]
    assert rows("default", "select count(*) from pgflow.runs where rerun_of is not null") == [(0,)]

    act(admin_client, "/admin/pgflow/flow/", "pause_flows", "cmd_greet")
    paused = "select count(*) from pgflow.worker_pauses where flow_slug = 'cmd_greet'"
    assert rows(SECOND, paused) == [(1,)] and rows("default", paused) == [(0,)]

    act(admin_client, "/admin/pgflow/schedule/", "trigger_schedules", "nightly_boom")
    assert rows(SECOND, "select count(*) from pgflow.runs where flow_slug = 'cmd_boom'") == [(2,)]


@override_settings(PGFLOW={"ADMIN_DATABASE": SECOND})
def test_run_now_changes_the_chosen_database_only(admin_client: Client, both: dict[str, Any]) -> None:
    delayed = uuid.uuid4()
    for alias in ("default", SECOND):
        start_flow("cmd_greet", {"name": alias}, run_id=delayed, delay=timedelta(hours=1), using=alias)
    html = act(admin_client, "/admin/pgflow/run/", "run_runs_now", delayed)
    assert said(html) == [f"Ran run {delayed} now: 1 waiting task can start at once."]
    hidden = (
        "select count(*) from pgflow.step_tasks as t join pgmq.q_cmd_greet as m on m.msg_id = t.message_id"
        " where t.run_id = %s and m.vt > clock_timestamp()"
    )
    assert rows(SECOND, hidden, [delayed]) == [(0,)] and rows("default", hidden, [delayed]) == [(1,)]


class ReplicaRouter:
    """The documented example: pgflow's reads from the replica, its writes to the primary (here the
    "replica" is the second database, so which one a page read is visible)."""

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return SECOND if model._meta.app_label == "pgflow" else None

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        return "default" if model._meta.app_label == "pgflow" else None


@override_settings(DATABASE_ROUTERS=[f"{__name__}.ReplicaRouter"], PGFLOW={"ADMIN_DATABASE": "default"})
def test_a_router_sends_the_pages_to_the_replica_and_the_actions_to_the_primary(
    admin_client: Client, both: dict[str, Any]
) -> None:
    runs = page(admin_client, "/admin/pgflow/run/")
    assert str(both["boom"]) in runs and str(both["only_default"]) not in runs, "the list is the replica's"
    assert "by test" in page(admin_client, "/admin/pgflow/run/dashboard/")
    html = act(admin_client, "/admin/pgflow/run/", "cancel_runs", both["shared"])
    assert said(html) == [f"Cancelled run {both['shared']}."]
    assert status("default", both["shared"]) == ("failed", "cancelled"), "the primary was written"
    assert status(SECOND, both["shared"]) == ("started", None), "the replica was not"


def test_an_unknown_admin_alias_is_a_check_error(second_database: str) -> None:
    with override_settings(PGFLOW={"ADMIN_DATABASE": "replica"}):
        messages = check_pooler()
    assert [m.id for m in messages] == ["pgflow.E041"]
    assert "'replica', which DATABASES does not have (default, second)" in messages[0].msg
    with override_settings(PGFLOW={"ADMIN_DATABASE": SECOND}):
        assert check_pooler() == []
