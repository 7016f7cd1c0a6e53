"""The admin shows a flow's versions: a version column on the flow list, and on each version's page a
table of every version (state, runs by status, workers, starts) linking to the others; the dashboard
names a later version ``slug vN``."""

from __future__ import annotations

from django.test import Client
from django.urls import reverse

from pgflow_django import compile_flow, start_flow
from pgflow_django.testing import drain
from tests.integration.versions.test_versions import release


def page(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, response.content[:2000]
    return response.content.decode()


def test_the_flow_pages_list_every_version(admin_client: Client) -> None:
    v1, v2 = release(1), release(2)
    compile_flow(v1)
    done = start_flow(v1, {})
    drain(flows=[v1])
    compile_flow(v2)
    start_flow(v2, {})
    assert done

    listing = page(admin_client, reverse("admin:pgflow_flow_changelist") + "?q=vers")
    assert '<td class="field-version_shown">v1</td>' in listing
    assert '<td class="field-version_shown">v2</td>' in listing

    html = page(admin_client, reverse("admin:pgflow_flow_change", args=["vers"]))
    assert 'class="pgflow-steps pgflow-versions"' in html
    first_row = (
        f'<td><a href="{reverse("admin:pgflow_flow_change", args=["vers"])}">v1</a></td><td>vers</td>'
        "<td>drained</td><td>0</td><td>1</td><td>0</td><td>0</td>"
    )
    second_row = (
        f'<td><a href="{reverse("admin:pgflow_flow_change", args=["vers___v2"])}">v2</a></td>'
        "<td>vers___v2</td><td>newest</td><td>1</td><td>0</td><td>0</td><td>0</td>"
    )
    assert first_row in html and second_row in html
    assert (
        page(admin_client, reverse("admin:pgflow_flow_change", args=["vers___v2"])).count("pgflow-versions")
        == 1
    )


def test_the_dashboard_names_a_later_version(admin_client: Client) -> None:
    v1, v2 = release(1), release(2)
    compile_flow(v1)
    compile_flow(v2)
    start_flow(v2, {})
    html = page(admin_client, reverse("admin:pgflow_dashboard"))
    assert "<h3>vers v2</h3>" in html
