"""docs/howto/: every code block of the retry, PgBouncer and dashboard how-tos runs here as shown, on
the test database (its ``manage.py`` lines through ``call_command``); partition-history.md's run in
``tests/integration/test_partition_command.py``, on a database of their own. Each page's blocks are
counted, so a new block needs its test."""

from __future__ import annotations

import io
import re
import uuid
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core.management import call_command, load_command_class
from django.core.management.base import CommandError, SystemCheckError
from django.test import Client, override_settings

from pgflow_django.conf import get_settings
from pgflow_django.db import pooler
from pgflow_django.db.connect import connection_params, listen_params
from pgflow_django.db.pooler import SETTING
from pgflow_django.runs.operations import pause
from tests.docs_commands import DOCS, blocks, manage_py_lines
from tests.sql import support
from tests.support.db import tuples

HOWTO = DOCS / "howto"
DOC_RUN_ID = uuid.UUID("0b4e6c1e-8f5a-4d2b-9a57-3c1f2e8d9a10")
"""The run id the pages show: the tests start a run under it."""


@pytest.mark.parametrize(
    ("page", "languages"),
    [
        ("index.md", []),
        ("retry-failed-runs.md", ["sh", "sh", "python", "python", "sql"]),
        ("pgbouncer.md", ["python", "sh", "sh", "text"]),
        ("read-the-dashboard.md", ["sh"]),
        ("partition-history.md", ["sh", "sh", "text", "sh", "sql", "sql"]),
    ],
)
def test_each_block_of_each_page_has_its_test(page: str, languages: list[str]) -> None:
    text = (HOWTO / page).read_text(encoding="utf-8")
    assert re.findall(r"^ *```(\w+)\n", text, re.M) == languages
    assert text.count("```") == 2 * len(languages), "every block names its language"


def of(page: str, language: str) -> list[str]:
    return blocks(f"howto/{page}", language)


def commands(block: str) -> list[list[str]]:
    """Each ``manage.py`` line's words after ``manage.py``."""
    lines = manage_py_lines(block)
    assert len(lines) == len([line for line in block.splitlines() if line.strip()]), block
    return [words[1:] for words in lines]


# -- retry-failed-runs.md --------------------------------------------------------------------------------


@pytest.fixture
def failed_order() -> Any:
    """``process_order`` (one step, one attempt) and a failed run of it under the page's run id; call
    the result to fail the run again after each retry."""
    support.make_flow("process_order", support.step("charge"), max_attempts=1, base_delay=0)
    support.start("process_order", {"id": 42}, run_id=DOC_RUN_ID)

    def fail_again() -> None:
        assert support.fail(support.claim_one("process_order"), "card gateway down") == "failed"
        assert support.run(DOC_RUN_ID)["status"] == "failed"

    fail_again()
    return fail_again


def retried() -> bool:
    return bool(support.run(DOC_RUN_ID)["status"] == "started")


def test_the_retry_commands_run(failed_order: Any) -> None:
    finding, retrying = of("retry-failed-runs.md", "sh")
    for argv in commands(finding):
        out = io.StringIO()
        call_command(*argv, stdout=out)
        assert str(DOC_RUN_ID) in out.getvalue() or "card gateway down" in out.getvalue()
    by_id, dry_run, confirmed = commands(retrying)
    out = io.StringIO()
    call_command(*by_id, stdout=out)
    assert out.getvalue().strip() == f"retried run {DOC_RUN_ID}: 1 task(s) queued again" and retried()
    failed_order()
    out = io.StringIO()
    call_command(*dry_run, stdout=out)
    assert str(DOC_RUN_ID)[-8:] in out.getvalue() and not retried(), "a dry run changes nothing"
    call_command(*confirmed, stdout=io.StringIO())
    assert retried()


def test_the_retry_python_and_sql_examples_run(failed_order: Any, capsys: pytest.CaptureFixture[str]) -> None:
    plain, coroutine = of("retry-failed-runs.md", "python")
    exec(plain, {"run_id": DOC_RUN_ID})
    assert capsys.readouterr().out == "1 task(s) queued again\n" and retried()
    exec(plain, {"run_id": DOC_RUN_ID})  # a started run is refused, in one line
    assert capsys.readouterr().out == (
        f"run {DOC_RUN_ID} is started: only a failed or cancelled run can be retried\n"
    )
    failed_order()
    namespace: dict[str, Any] = {}
    exec(coroutine, namespace)
    assert async_to_sync(namespace["retry_later"])(DOC_RUN_ID) == 1 and retried()
    failed_order()
    [sql] = of("retry-failed-runs.md", "sql")
    assert tuples(sql) == [(1,)] and retried()


# -- pgbouncer.md -------------------------------------------------------------------------------------


def test_the_pgbouncer_settings_pool_and_listen_directly() -> None:
    [settings] = of("pgbouncer.md", "python")
    namespace: dict[str, Any] = {}
    exec(settings, namespace)
    databases, pgflow = namespace["DATABASES"], namespace["PGFLOW"]
    with override_settings(PGFLOW=pgflow):
        conf = get_settings()
    assert conf.pooler == "transaction" and conf.listen_database in databases
    assert databases["default"]["DISABLE_SERVER_SIDE_CURSORS"] is True
    assert "prepare_threshold" not in databases["default"].get("OPTIONS", {})
    assert connection_params("default", "transaction")["prepare_threshold"] is None


def test_the_pgbouncer_check_runs_and_names_a_missing_listen_alias() -> None:
    check, _ = of("pgbouncer.md", "sh")
    [argv] = commands(check)
    call_command(*argv, stdout=io.StringIO(), stderr=io.StringIO())
    with (
        override_settings(PGFLOW={"POOLER": "transaction", "LISTEN_DATABASE": "direct"}),
        pytest.raises(SystemCheckError, match=r"pgflow\.E040"),
    ):
        call_command(*argv, stdout=io.StringIO(), stderr=io.StringIO())


def test_the_pgbouncer_worker_lines_listen_where_the_page_says() -> None:
    _, workers = of("pgbouncer.md", "sh")
    parsed = []
    for argv in commands(workers):
        assert argv[0] == "pgflow_worker"
        command = load_command_class("pgflow_django", argv[0])
        parsed.append(vars(command.create_parser("manage.py", argv[0]).parse_args(argv[1:])))
    setting, url, polling = parsed
    own = connection_params("default", "transaction")
    assert listen_params(own, "transaction", "default", setting["listen_url"]) == connection_params("default")
    direct = listen_params(own, "transaction", "default", url["listen_url"])
    assert direct is not None and (direct["host"], direct["port"]) == ("db.internal", "5432")
    assert listen_params(own, "transaction", None, polling["listen_url"]) is None
    assert polling["poll_interval"] == 0.5


@pytest.mark.django_db
def test_the_forgotten_setting_line_is_the_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's own start-up probe, made to see what a transaction pooler shows it (both sessions
    on one server backend, not their own): the page's line is the one ``manage.py`` prints."""
    [line] = of("pgbouncer.md", "text")
    assert get_settings().pooler != "transaction"
    monkeypatch.setattr(pooler, "_server_pid", lambda conn: -1)
    with pytest.raises(CommandError) as raised:
        call_command("pgflow_worker", stdout=io.StringIO(), stderr=io.StringIO())
    assert line.strip() == f"CommandError: {raised.value}"
    assert SETTING in line


# -- read-the-dashboard.md ----------------------------------------------------------------------------


def test_the_dashboard_panels_are_the_pages_sections_in_order(admin_client: Client) -> None:
    text = (HOWTO / "read-the-dashboard.md").read_text(encoding="utf-8")
    sections = [title for title in re.findall(r"^## (.+?):", text, re.M)]
    response = admin_client.get("/admin/pgflow/run/dashboard/")
    assert response.status_code == 200
    shown = re.findall(
        r'<section class="module pgflow-panel" id="panel-[\w-]+">\s*<h2>(.+?)</h2>', response.content.decode()
    )
    assert sections == shown
    columns = re.search(r"\| column \| meaning \|\n\|.*\|\n((?:\|.*\|\n)+)", text)
    assert columns is not None
    support.make_flow("process_order", support.step("charge"))
    html = admin_client.get("/admin/pgflow/run/dashboard/").content.decode()
    queues = html.split('id="panel-queues"', 1)[1].split("</section>", 1)[0]
    documented = re.findall(r"^\| (.+?) \|", columns.group(1), re.M)
    assert re.findall(r"<th>(.+?)</th>", queues) == ["queue", *documented]


def test_the_dashboard_commands_run() -> None:
    support.make_flow("process_order", support.step("charge"), timeout=5)
    pause("process_order", detail="supplier down")
    support.start("process_order", {"id": 42})
    support.claim_one("process_order")
    support.q("update pgflow.step_tasks set started_at = now() - interval '36 seconds'")
    [block] = of("read-the-dashboard.md", "sh")
    listed, resumed, requeued, limits = commands(block)
    outputs = []
    for argv in (listed, resumed, requeued, limits):
        out = io.StringIO()
        call_command(*argv, stdout=out)
        outputs.append(out.getvalue())
    assert "supplier down" in outputs[0]
    assert support.q("select * from pgflow.worker_pauses") == []
    assert outputs[2].startswith("requeued 1 stalled task(s)")
