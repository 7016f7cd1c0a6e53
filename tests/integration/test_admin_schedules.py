"""The schedules' admin (issue 17 item 5): list and detail pages with next fire times and recent ticks
linked to their runs; pause, resume and trigger as actions and buttons, with permissions and CSRF."""

from __future__ import annotations

import re
import uuid

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from pgflow_django.flows.compiler import compile_flow
from pgflow_django.schedules import create_schedule, get_schedule, pause_schedule
from tests.integration import commands_flows
from tests.sql import support
from tests.sql.schedules.support import every_minute, fire, minute

FLOW = "cmd_greet"
LIST_URL = "/admin/pgflow/schedule/"


@pytest.fixture(autouse=True)
def greet() -> None:
    compile_flow(commands_flows.greet)


def _detail(name: str) -> str:
    return reverse("admin:pgflow_schedule_change", args=[name])


def _operate(name: str) -> str:
    return reverse("admin:pgflow_schedule_operate", args=[name])


def _fired(name: str) -> uuid.UUID:
    every_minute(name, FLOW, input={"name": "ada"})
    ((_, _, run_id),) = fire(minute(1))
    return run_id


def _page(client: Client, url: str, **params: str) -> str:
    response = client.get(url, params)
    assert response.status_code == 200, response.content[:2000]
    return response.content.decode()


def _staff(*permissions: str) -> Client:
    user = User.objects.create_user("ops", password="pw", is_staff=True)
    for codename in permissions:
        user.user_permissions.add(Permission.objects.get(codename=codename, content_type__app_label="pgflow"))
    client = Client()
    client.force_login(user)
    return client


def test_list_shows_next_and_last_fire_and_the_last_run(admin_client: Client) -> None:
    run_id = _fired("adm-minutely")
    create_schedule(FLOW, cron="30 2 * * *", name="adm-nightly", timezone="Europe/Paris")
    pause_schedule("adm-nightly", detail="vendor <b>down</b>")
    html = _page(admin_client, LIST_URL)
    assert "adm-minutely" in html and "adm-nightly" in html
    assert '<td class="field-next_fire">2026-01-05 12:02 UTC</td>' in html, "next fire, in its zone"
    assert "<code>30 2 * * *</code> Europe/Paris" in html
    url = reverse("admin:pgflow_run_change", args=[run_id])
    assert f'<a href="{url}" title="run {run_id}">started</a>' in html
    assert "paused: vendor &lt;b&gt;down&lt;/b&gt;" in html, "user text is escaped"
    assert "/admin/pgflow/schedule/add/" not in html
    assert "adm-nightly" not in _page(admin_client, LIST_URL, q="minutely")


def test_detail_shows_fire_times_in_its_zone_and_ticks_linked_to_runs(admin_client: Client) -> None:
    run_id = _fired("adm-detail")
    manual = support.val("select pgflow.trigger_schedule('adm-detail')")
    create_schedule(FLOW, cron="30 2 * * *", name="adm-paris", timezone="Europe/Paris")
    html = _page(admin_client, _detail("adm-detail"))
    assert '<ol class="pgflow-next-fires"><li>2026-01-05 12:02:00 UTC (+0000)</li>' in html
    assert 'class="pgflow-schedule-ticks"' in html
    for run in (run_id, manual):
        assert f'<a href="{reverse("admin:pgflow_run_change", args=[run])}">{run}</a>' in html
    assert "<td>manual</td>" in html and "<td>cron</td>" in html
    url = reverse("admin:pgflow_run_change", args=[manual])
    assert f'<div class="readonly"><a href="{url}">{manual}</a> (started)</div>' in html, "the last run"
    assert 'name="_save"' not in html
    paris = _page(admin_client, _detail("adm-paris"))
    assert " 02:30:00 CET (+0100)</li>" in paris, "a winter tick of Europe/Paris at 02:30 local"


def test_detail_buttons_follow_the_state(admin_client: Client) -> None:
    create_schedule(FLOW, cron="0 * * * *", name="adm-buttons")
    html = _page(admin_client, _detail("adm-buttons"))
    assert 'value="pause"' in html and 'value="trigger"' in html and 'value="resume"' not in html
    assert "csrfmiddlewaretoken" in html
    pause_schedule("adm-buttons")
    html = _page(admin_client, _detail("adm-buttons"))
    assert 'value="resume"' in html and 'value="pause"' not in html


def test_buttons_pause_resume_and_trigger_and_are_logged(admin_client: Client) -> None:
    create_schedule(FLOW, cron="0 0 1 1 *", name="adm-ops", input={"name": "bob"})
    response = admin_client.post(_operate("adm-ops"), {"operation": "pause", "reason": "deploying v42"})
    assert response.status_code == 302 and response["Location"] == _detail("adm-ops")
    view = get_schedule("adm-ops")
    assert (view.paused_reason, view.paused_detail) == ("operator", "deploying v42")
    followed = admin_client.post(_operate("adm-ops"), {"operation": "trigger"}, follow=True)
    (run_id,) = [row["run_id"] for row in support.q("select run_id from pgflow.schedule_ticks")]
    assert f"Triggered schedule adm-ops: run {run_id}." in followed.content.decode()
    assert support.run(run_id)["input"] == {"name": "bob"}
    admin_client.post(_operate("adm-ops"), {"operation": "resume"})
    assert get_schedule("adm-ops").active
    logged = list(
        LogEntry.objects.filter(object_id="adm-ops").order_by("id").values_list("change_message", flat=True)
    )
    assert logged == [
        "Paused schedule adm-ops: deploying v42.",
        f"Triggered schedule adm-ops: run {run_id}.",
        "Resumed schedule adm-ops; ticks missed while paused do not fire.",
    ]


def test_changelist_actions(admin_client: Client) -> None:
    for name in ("adm-a", "adm-b"):
        create_schedule(FLOW, cron="0 0 1 1 *", name=name)
    selected = {"_selected_action": ["adm-a", "adm-b"]}
    admin_client.post(LIST_URL, {"action": "pause_schedules", **selected})
    assert [get_schedule(n).paused_reason for n in ("adm-a", "adm-b")] == ["operator", "operator"]
    admin_client.post(LIST_URL, {"action": "trigger_schedules", **selected})
    assert support.val("select count(*) from pgflow.schedule_ticks where kind = 'manual'") == 2
    admin_client.post(LIST_URL, {"action": "resume_schedules", **selected})
    assert all(get_schedule(n).active for n in ("adm-a", "adm-b"))


def test_an_error_is_a_message_not_a_crash(admin_client: Client) -> None:
    create_schedule(FLOW, cron="0 * * * *", name="adm-removed")
    support.q(
        "update pgflow.schedules set origin = 'code', paused_reason = 'removed_from_code' "
        "where schedule_name = 'adm-removed'"
    )
    html = _page(admin_client, _detail("adm-removed"))
    assert "removed from code" in html and 'value="resume"' not in html
    response = admin_client.post(
        LIST_URL, {"action": "resume_schedules", "_selected_action": ["adm-removed"]}, follow=True
    )
    assert "was removed from code: declare it again" in response.content.decode()
    assert get_schedule("adm-removed").paused_reason == "removed_from_code"


def test_operations_need_the_change_permission() -> None:
    create_schedule(FLOW, cron="0 * * * *", name="adm-perm")
    viewer = _staff("view_schedule")
    html = _page(viewer, _detail("adm-perm"))
    assert 'value="pause"' not in html and 'value="trigger"' not in html
    assert "pause_schedules" not in _page(viewer, LIST_URL)
    assert viewer.post(_operate("adm-perm"), {"operation": "trigger"}).status_code == 403
    viewer.post(LIST_URL, {"action": "pause_schedules", "_selected_action": ["adm-perm"]})
    assert get_schedule("adm-perm").active
    assert support.val("select count(*) from pgflow.schedule_ticks") == 0
    User.objects.all().delete()
    operator = _staff("view_schedule", "change_schedule")
    assert 'value="pause"' in _page(operator, _detail("adm-perm"))
    assert operator.post(_operate("adm-perm"), {"operation": "pause"}).status_code == 302
    assert get_schedule("adm-perm").paused_reason == "operator"


def test_operations_need_post_and_a_csrf_token() -> None:
    create_schedule(FLOW, cron="0 * * * *", name="adm-csrf")
    User.objects.create_superuser("root", password="pw")
    client = Client(enforce_csrf_checks=True)
    client.login(username="root", password="pw")
    assert client.get(_operate("adm-csrf")).status_code == 405
    assert client.post(_operate("adm-csrf"), {"operation": "pause"}).status_code == 403
    assert get_schedule("adm-csrf").active
    html = _page(client, _detail("adm-csrf"))
    token = html.split('name="csrfmiddlewaretoken" value="', 1)[1].split('"', 1)[0]
    response = client.post(_operate("adm-csrf"), {"operation": "pause", "csrfmiddlewaretoken": token})
    assert response.status_code == 302
    assert get_schedule("adm-csrf").paused_reason == "operator"


def test_an_unknown_schedule_or_operation(admin_client: Client) -> None:
    create_schedule(FLOW, cron="0 * * * *", name="adm-unknown")
    response = admin_client.post(_operate("adm-nope"), {"operation": "pause"})
    assert response.status_code == 302 and response["Location"] == LIST_URL
    followed = admin_client.post(_operate("adm-unknown"), {"operation": "delete"}, follow=True)
    assert "Unknown operation &#x27;delete&#x27;." in followed.content.decode()
    assert get_schedule("adm-unknown").active


def test_a_schedule_that_cannot_be_planned_shows_why_and_breaks_no_page(admin_client: Client) -> None:
    """Its stored zone is unknown to this host: the list still renders every schedule (its times in
    UTC), its state says it cannot plan, and its page shows the reason."""
    from django.db import connection

    from pgflow_django.schedules.planner import plan_schedules

    _fired("adm-fine")
    create_schedule(FLOW, cron="0 * * * *", name="adm-broken")
    support.q(
        "update pgflow.schedules set timezone = 'Mars/Olympus', upcoming = '{}', next_fire_at = null, "
        "last_fired_at = %s where schedule_name = 'adm-broken'",
        [minute(1)],
    )
    with connection.cursor() as cursor:
        plan_schedules(cursor, now=minute(2))
    html = _page(admin_client, LIST_URL)
    states = sorted(re.findall(r'<td class="field-state">([^<]*)', html))
    assert states == ["active", "active; cannot plan"], "the broken one says so, the other is listed as usual"
    assert '<td class="field-last_fire">2026-01-05 12:01 UTC</td>' in html
    detail = _page(admin_client, _detail("adm-broken"))
    assert "timezone &#x27;Mars/Olympus&#x27; is not a known IANA time zone" in detail
