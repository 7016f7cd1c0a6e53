"""The admin run page shows what a run waits for (event and key, sleep, child run), links child and
parent runs both ways, and marks waiting steps on the DAG."""

from __future__ import annotations

from django.test import Client
from django.urls import reverse

from pgflow_django import compile_flow, get_run, start_flow
from pgflow_django.testing import drain
from tests.integration.durable.docs_flows import approval, orders, reminder
from tests.sql import support


def page(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, response.content[:2000]
    return response.content.decode()


def test_a_waiting_runs_page_shows_the_event_the_key_and_the_timeout(admin_client: Client) -> None:
    compile_flow(approval)
    run_id = start_flow(approval, {"order_id": 77, "total": 3})
    drain(flows=[approval])
    html = page(admin_client, reverse("admin:pgflow_run_change", args=[run_id]))
    assert 'class="pgflow-waits"' in html
    assert "event order.approved with key 77" in html
    assert "(timeout)" in html
    assert ">waiting</text>" in html and "waits for order.approved" in html  # the DAG's box
    assert "waiting for an event" in html  # the timeline's bar


def test_a_sleeping_runs_page_shows_the_sleep(admin_client: Client) -> None:
    compile_flow(reminder)
    run_id = start_flow(reminder, {"email": "a@example.com", "trial_ends": "2031-01-01T00:00:00Z"})
    drain(flows=[reminder])
    html = page(admin_client, reverse("admin:pgflow_run_change", args=[run_id]))
    assert "<td>a_day_later</td><td>sleep</td>" in html and "<td>2031-01-01 00:00:00</td>" in html
    assert "sleeps 86400s" in html and "sleeps until $.sign_up.re" in html  # the DAG's boxes (clipped)


def test_parent_and_child_runs_link_to_each_other(admin_client: Client) -> None:
    compile_flow(orders)
    run_id = start_flow(orders, {"parcels": [{"id": 5}, {"id": 6}]})
    support.run_step("durable_orders", "pack", [{"id": 5}, {"id": 6}])
    children = get_run(run_id).child_run_ids
    assert len(children) == 2

    parent = page(admin_client, reverse("admin:pgflow_run_change", args=[run_id]))
    assert 'class="pgflow-children"' in parent and "<td>ship[1]</td>" in parent
    assert "waiting for 2 child run(s)" in parent
    for child in children:
        assert reverse("admin:pgflow_run_change", args=[child]) in parent  # in the waits and the children

    child = page(admin_client, reverse("admin:pgflow_run_change", args=[children[0]]))
    assert f'href="{reverse("admin:pgflow_run_change", args=[run_id])}"' in child
    assert "(step ship, task 0)" in child
