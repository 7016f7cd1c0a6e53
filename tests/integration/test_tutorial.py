"""docs/tutorial.md: the shop it builds is ``tests/tutorial_shop``, installed here for the module (as
``tests/tutorial_settings.py`` installs it for ``manage.py``) with its own migration applied. Its
``tests.py`` runs as the page says; the order flow runs end to end from the view, on a real worker;
each of the page's Python blocks is a slice of the module its first line names, and together they
show every line of it; every ``manage.py`` line parses with the real command (``pgflow_runs`` ones
also run)."""

from __future__ import annotations

import json
import re
import shlex
import uuid
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core import mail
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client, override_settings

from pgflow_django import compile_flow, wait_for_run
from pgflow_django.flows.registry import get_flows
from tests import tutorial_settings
from tests.docs_commands import blocks, manage_py_lines, parse
from tests.support.db import tuples
from tests.workers import InProcessWorker

SHOP = Path(__file__).resolve().parents[1] / "tutorial_shop"
INSTALLED = override_settings(
    INSTALLED_APPS=tutorial_settings.INSTALLED_APPS,
    ROOT_URLCONF=tutorial_settings.ROOT_URLCONF,
)

with INSTALLED:  # the app's models can only be defined while it is installed
    from tests.tutorial_shop.flows import order_flow
    from tests.tutorial_shop.models import Order, Product
    from tests.tutorial_shop.tests import OrderFlowTests  # noqa: F401 (collected: the tutorial's tests)


@pytest.fixture(scope="module", autouse=True)
def shop_installed(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """The shop app installed and migrated (its own migration, committed) for this module's tests."""
    with INSTALLED, django_db_blocker.unblock():
        MigrationExecutor(connection).migrate([("shop", "0001_initial")])
        try:
            yield
        finally:
            MigrationExecutor(connection).migrate([("shop", None)])


def test_the_flow_is_discovered_in_the_apps_flows_module() -> None:
    assert get_flows()["shop_order"] is order_flow


def test_the_migration_matches_the_models() -> None:
    call_command("makemigrations", "shop", "--check", "--dry-run", stdout=StringIO())


@pytest.mark.django_db(transaction=True)
def test_an_order_from_the_view_is_confirmed_by_a_real_worker() -> None:
    compile_flow(order_flow)
    worker = InProcessWorker(order_flow)
    try:
        exec(_shell_code().replace("from shop.", "from tests.tutorial_shop."), {})
        url, body = _curl()
        response = Client().post(url, body, content_type="application/json")
        assert response.status_code == 202, response.content
        run = wait_for_run(response.json()["run_id"], timeout=30)

        assert run.status == "completed", run.error_message
        assert run.output == {"send_confirmation": {"sent_to": "ada@example.com"}}
        order = Order.objects.get(pk=response.json()["order_id"])
        assert (order.status, order.run_id) == ("confirmed", run.run_id)
        assert order.payment_id.startswith("pay_")
        assert dict(Product.objects.values_list("sku", "stock")) == {"MUG": 3, "TEA": 4}
        assert [message.to for message in mail.outbox] == [["ada@example.com"]]
        for words in _runs_commands():
            out = StringIO()
            call_command(*[str(run.run_id) if w == "RUN_ID" else w for w in words[1:]], stdout=out)
            assert "completed" in out.getvalue(), out.getvalue()
            if "--tasks" in words:
                shown = [line.rstrip() for line in out.getvalue().splitlines()]
                [table] = blocks("tutorial.md", "text")
                for line in table.splitlines():
                    assert line.rstrip() in shown, f"pgflow_runs does not show {line!r}"
    finally:
        worker.stop()
        tuples("select pgflow.delete_flow_and_data('shop_order')")
        tuples("delete from pgflow.workers where queue_name = 'shop_order'")


def _shell_code() -> str:
    """The code of the page's ``manage.py shell -c`` line (it creates the products)."""
    [options] = [
        parse(words)[1]
        for block in blocks("tutorial.md", "sh")
        for words in manage_py_lines(block)
        if words[1] == "shell"
    ]
    return options.command


def _curl() -> tuple[str, dict[str, Any]]:
    """The URL path and JSON body of the page's ``curl`` line."""
    [line] = [line for block in blocks("tutorial.md", "sh") for line in block.splitlines() if "curl" in line]
    words = shlex.split(line)
    url = next(word for word in words if "/shop/" in word)
    return url[url.index("/shop/") :], json.loads(words[words.index("-d") + 1])


def _runs_commands() -> list[list[str]]:
    found = [
        words
        for block in blocks("tutorial.md", "sh")
        for words in manage_py_lines(block)
        if words[1] == "pgflow_runs"
    ]
    assert len(found) >= 2
    return found


def test_every_manage_py_line_parses() -> None:
    commands = [
        [str(uuid.uuid4()) if word == "RUN_ID" else word for word in words]
        for block in blocks("tutorial.md", "sh")
        for words in manage_py_lines(block)
    ]
    names = [parse(words)[0] for words in commands]
    assert {"startapp", "makemigrations", "migrate", "pgflow_worker", "pgflow_runs"} <= set(names)
    [worker] = [parse(words)[1] for words in commands if words[1] == "pgflow_worker"]
    assert worker.flow == [order_flow.slug]


def test_every_python_block_is_copied_from_the_shop() -> None:
    """Each block is a slice of its module, line for line and in order, and the blocks of a module
    together show all of it: what is left once they are cut out is blank."""
    found = blocks("tutorial.md", "python")
    assert len(found) >= 6
    left: dict[str, str] = {}
    for block in found:
        first, *lines = block.splitlines()
        named = re.fullmatch(r"# shop/(\w+\.py)(?: .*)?", first)
        assert named, f"a block of docs/tutorial.md does not start with its file's name: {first!r}"
        source = (SHOP / named[1]).read_text(encoding="utf-8")
        shown = "\n".join(lines).strip("\n")
        assert shown in source, f"a block of docs/tutorial.md is not a slice of shop/{named[1]}:\n{shown}"
        rest = left.get(named[1], source)
        assert shown in rest, f"docs/tutorial.md shows this part of shop/{named[1]} twice:\n{shown}"
        left[named[1]] = rest.replace(shown, "", 1)
    for module, rest in left.items():
        assert not rest.strip(), f"shop/{module} has lines docs/tutorial.md does not show:\n{rest.strip()}"
