"""Django tasks are shown by their function path wherever a person reads a list of flows: the known
flows of an unknown slug, the admin's runs filter, run list and dashboard, and ``pgflow_runs``. Their
hashed slugs (one per function and queue) stay out unless asked for."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management.base import CommandError
from django.test import Client

from pgflow_django import FlowNotFound, start_flow
from pgflow_django.flows.compiler import compile_flow
from pgflow_django.tasks import module_path
from tests.integration import commands_flows
from tests.integration.commands_support import call, drop_command_flows
from tests.integration.test_admin import page
from tests.tasks_support import backend, clean_task_flows, task


@task()
def send_welcome(user_id: int) -> str:
    return f"welcome {user_id}"


@task(queue_name="mail")
def send_digest() -> None:
    return None


PATH = module_path(send_welcome)
DIGEST = module_path(send_digest)


@pytest.fixture
def enqueued(settings: Any) -> dict[str, str]:
    """Runs of two tasks (one on two queues) beside a workflow's run: ``{name: flow slug}``."""
    settings.PGFLOW = {"FLOWS": list(commands_flows.REGISTERED)}
    compile_flow(commands_flows.greet)
    start_flow("cmd_greet", {"name": "ada"})
    send_welcome.enqueue(1)
    send_welcome.using(queue_name="mail").enqueue(2)
    send_digest.enqueue()
    return {
        "welcome": backend().flow_for(send_welcome).slug,
        "welcome_mail": backend().flow_for(send_welcome, "mail").slug,
        "digest": backend().flow_for(send_digest).slug,
    }


@pytest.fixture
def committed(transactional_db: None) -> Iterator[None]:
    """Outside a test transaction: the known flows are read from the database only in autocommit (a
    command, a script), since a failed statement aborts the caller's transaction."""
    yield
    clean_task_flows()
    drop_command_flows()


@pytest.mark.usefixtures("committed")
def test_an_unknown_flow_lists_the_workflows_not_the_task_flows(enqueued: dict[str, str]) -> None:
    with pytest.raises(CommandError) as caught:
        call("pgflow_start", "cmd_gret", "--input", "{}")
    message = str(caught.value)
    assert "cmd_greet" in message and "did you mean 'cmd_greet'?" in message
    assert not any(slug in message for slug in enqueued.values()), message


@pytest.mark.usefixtures("committed")
def test_a_mistyped_task_flow_slug_is_answered_with_task_flows(enqueued: dict[str, str]) -> None:
    """A slug shaped like a task flow's is asked for by its shape: the suggestions include them."""
    typo = enqueued["digest"][:-1] + ("0" if enqueued["digest"][-1] != "0" else "1")
    with pytest.raises(FlowNotFound, match=rf"did you mean '{enqueued['digest']}'\?$"):
        start_flow(typo, {})


def test_the_runs_filter_names_tasks_by_function_path(admin_client: Client, enqueued: dict[str, str]) -> None:
    html = page(admin_client, "/admin/pgflow/run/")
    choices = re.findall(r'href="\?flow__flow_slug__exact=([^"&]+)"[^>]*>([^<]+)</a>', html)
    assert choices == [
        ("cmd_greet", "cmd_greet"),
        (enqueued["digest"], DIGEST),
        (enqueued["welcome"], f"{PATH} (queue default)"),
        (enqueued["welcome_mail"], f"{PATH} (queue mail)"),
    ]
    filtered = page(admin_client, "/admin/pgflow/run/", flow__flow_slug__exact=enqueued["digest"])
    assert re.findall(r'<td class="field-flow_name">([^<]*)</td>', filtered) == [DIGEST]


def test_the_run_list_names_a_task_run_by_function_path(
    admin_client: Client, enqueued: dict[str, str]
) -> None:
    html = page(admin_client, "/admin/pgflow/run/")
    shown = re.findall(r'<td class="field-flow_name">([^<]*)</td>', html)
    assert sorted(shown) == sorted(["cmd_greet", PATH, PATH, DIGEST])
    table = html.split("<tbody>")[1].split("</tbody>")[0]
    for slug in enqueued.values():
        assert slug not in table, table[max(0, table.index(slug) - 300) : table.index(slug) + 100]


def test_the_dashboard_charts_a_task_under_its_function_path(
    admin_client: Client, enqueued: dict[str, str]
) -> None:
    html = page(admin_client, "/admin/pgflow/run/dashboard/")
    headings = re.findall(r'<div class="pgflow-rate-chart"><h3>([^<]*)</h3>', html)
    assert sorted(headings) == sorted(
        ["cmd_greet", DIGEST, f"{PATH} (queue default)", f"{PATH} (queue mail)"]
    )


def test_pgflow_runs_lists_and_filters_tasks_by_function_path(enqueued: dict[str, str]) -> None:
    out, _ = call("pgflow_runs", "--format", "json")
    rows = json.loads(out)
    assert sorted((row["flow_slug"], row["task"]) for row in rows) == sorted(
        [
            ("cmd_greet", None),
            (enqueued["welcome"], PATH),
            (enqueued["welcome_mail"], PATH),
            (enqueued["digest"], DIGEST),
        ]
    )
    text, _ = call("pgflow_runs", "--no-color")
    assert DIGEST in text and not any(slug in text for slug in enqueued.values()), text
    mine, _ = call("pgflow_runs", "--flow", PATH, "--format", "json")
    assert sorted(row["flow_slug"] for row in json.loads(mine)) == sorted(
        [enqueued["welcome"], enqueued["welcome_mail"]]
    )
    with pytest.raises(CommandError, match=r"^--flow: no task 'tests\.nope' has runs \(tasks: "):
        call("pgflow_runs", "--flow", "tests.nope")


def test_deleting_an_unknown_flow_lists_the_compiled_workflows_only(enqueued: dict[str, str]) -> None:
    with pytest.raises(
        CommandError, match=r"^no flow 'cmd_gret' in the database \(compiled flows: "
    ) as caught:
        call("pgflow_delete_flow", "cmd_gret", "--yes")
    assert "cmd_greet" in str(caught.value)
    assert not any(slug in str(caught.value) for slug in enqueued.values()), caught.value
