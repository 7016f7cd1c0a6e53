"""Issue 36 item 6: every command that prints a table fits an 80-column terminal.

Piped output (``call_command``'s streams, a subprocess's pipe) is as wide as ``COLUMNS``, else 80.
At that width no line is longer, no run id or message id is split across lines, and no word is cut:
a table whose columns do not fit at the width of their longest word becomes one record per row.
``--format json`` is not laid out at all. The data has the long slugs that wrapped before: a 47-character
flow slug, long step slugs, queue names and schedule names, errors and pause notes of many words.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from pgflow_django import Concurrency, Flow, RateLimit, start_flow, with_step_queues
from pgflow_django.flows.compiler import compile_flow
from pgflow_django.runs.operations import pause
from pgflow_django.schedules import create_schedule, pause_schedule, trigger_now
from tests import workers
from tests.integration.commands_support import SETTINGS_ENV, call
from tests.sql import support

WIDTH = 80
LONG_FLOW = "priority_reports_for_every_region_and_currency"
"""47 characters: the longest flow slug a PGMQ queue name allows."""
STEPPED = "quarterly_priority_summaries_by_region"
SLUGS = (LONG_FLOW, STEPPED)
ERROR = (
    "the payment provider refused the priority settlement because the merchant account "
    "for region emea-west was closed yesterday"
)
NOTE = "waiting for the vendor to fix their priority rate limits, see ticket 4411 and its follow-ups"
SCHEDULE = "reports.monthly-revenue-by-region-and-currency-with-priority"


def collect_the_priority_figures(flow_input: object) -> object:
    return flow_input


def summarize_the_priority_figures_per_region(deps: object) -> object:
    return deps


long_flow = Flow(
    LONG_FLOW, max_attempts=1, timeout=5, concurrency=Concurrency(limit=2, key="tenant_identifier")
)
long_flow.step(slug="collect_the_priority_figures")(collect_the_priority_figures)
long_flow.step(
    slug="summarize_the_priority_figures_per_region",
    depends_on=["collect_the_priority_figures"],
    rate_limit=RateLimit("100/60s", key="tenant_identifier"),
)(summarize_the_priority_figures_per_region)

stepped = Flow(STEPPED, max_attempts=1, timeout=5)
stepped.step(slug="collect_the_priority_figures")(collect_the_priority_figures)
stepped.step(slug="summarize_the_priority_figures_per_region", depends_on=["collect_the_priority_figures"])(
    summarize_the_priority_figures_per_region
)


@pytest.fixture(autouse=True)
def at_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", str(WIDTH))


@pytest.fixture
def runs() -> dict[str, uuid.UUID]:
    """A completed, a failed (a long error) and a started run of the 47-character flow."""
    compile_flow(long_flow)
    compile_flow(with_step_queues(stepped))
    made = {}
    made["completed"] = start_flow(LONG_FLOW, {"tenant_identifier": "acme-emea-west"})
    support.run_step(LONG_FLOW, "collect_the_priority_figures", {"rows": 3})
    support.run_step(LONG_FLOW, "summarize_the_priority_figures_per_region", {"ok": True})
    made["failed"] = start_flow(LONG_FLOW, {"tenant_identifier": "initech-us"}, priority=75)
    assert support.fail(support.claim_one(LONG_FLOW), ERROR) == "failed"
    made["started"] = start_flow(STEPPED, {"tenant_identifier": "acme"})
    return made


def assert_fits(text: str, *, words: tuple[str, ...] = (), ids: tuple[str, ...] = ()) -> None:
    """No line is wider than the terminal, each id is whole on one line, and each word of ``words``
    (slugs, the error, the note) is whole on a line: nothing was cut mid-way."""
    lines = text.splitlines()
    assert lines, "nothing printed"
    wide = [line for line in lines if len(line) > WIDTH]
    assert wide == [], "\n".join(lines)
    for value in ids:
        assert any(value in line for line in lines), f"{value} is split or missing:\n{text}"
    tokens = {token.strip(",;:()'") for line in lines for token in line.split()}
    for phrase in words:
        for word in phrase.split():
            assert word.strip(",;:()'") in tokens, f"{word!r} is cut or missing:\n{text}"


def test_runs_list_fits(runs: dict[str, uuid.UUID]) -> None:
    out, _ = call("pgflow_runs")
    assert_fits(out, words=(LONG_FLOW, STEPPED, ERROR, "priority"), ids=tuple(map(str, runs.values())))


def test_one_run_with_its_steps_and_tasks_fits(runs: dict[str, uuid.UUID]) -> None:
    out, _ = call("pgflow_runs", str(runs["failed"]), "--tasks")
    assert_fits(
        out,
        words=(LONG_FLOW, "collect_the_priority_figures", "summarize_the_priority_figures_per_region", ERROR),
        ids=(str(runs["failed"]),),
    )
    message_id = support.val(
        "select message_id::text as m from pgflow.step_tasks where run_id = %s", [runs["failed"]]
    )
    assert any(line.split().count(message_id) for line in out.splitlines()), out


def test_watch_fits(runs: dict[str, uuid.UUID]) -> None:
    out, _ = call("pgflow_runs", "--watch", "--iterations", "1")
    assert_fits(
        out,
        words=(STEPPED, f"{STEPPED}__0", LONG_FLOW, "collect_the_priority_figures"),
        ids=(str(runs["started"]),),
    )


def test_coverage_fits(runs: dict[str, uuid.UUID]) -> None:
    pause(STEPPED, "summarize_the_priority_figures_per_region", detail="deploying")
    out, _ = _exits_3("pgflow_coverage", "--all")
    assert_fits(
        out,
        words=(
            LONG_FLOW,
            STEPPED,
            f"{STEPPED}__1",
            "summarize_the_priority_figures_per_region",
            "paused (operator)",
        ),
    )


def test_limits_fits(runs: dict[str, uuid.UUID]) -> None:
    out, _ = call("pgflow_limits")
    assert_fits(
        out,
        words=(
            LONG_FLOW,
            "concurrency 2 per tenant_identifier",
            "'initech-us'",
            "summarize_the_priority_figures_per_region",
        ),
    )


def test_schedules_list_and_show_fit(runs: dict[str, uuid.UUID]) -> None:
    create_schedule(
        LONG_FLOW, cron="*/15 8-18 * * 1-5", name=SCHEDULE, timezone="America/Argentina/Buenos_Aires"
    )
    run_id = trigger_now(SCHEDULE)
    create_schedule(STEPPED, cron="0 3 * * *", name="quarterly-summaries")
    pause_schedule("quarterly-summaries", detail=NOTE)
    out, _ = call("pgflow_schedules")
    assert_fits(out, words=(SCHEDULE, LONG_FLOW, "America/Argentina/Buenos_Aires", NOTE, "*/15 8-18 * * 1-5"))
    out, _ = call("pgflow_schedules", "show", SCHEDULE)
    assert_fits(out, words=(SCHEDULE, LONG_FLOW, "America/Argentina/Buenos_Aires"), ids=(str(run_id),))


@pytest.mark.parametrize(
    "args",
    [("pgflow_runs",), ("pgflow_limits",), ("pgflow_coverage", "--all"), ("pgflow_schedules",)],
    ids=lambda args: args[0],
)
def test_json_is_not_laid_out(
    runs: dict[str, uuid.UUID], args: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    create_schedule(LONG_FLOW, cron="0 3 * * *", name=SCHEDULE)
    narrow = _exits_3(*args, "--format", "json")[0]
    monkeypatch.setenv("COLUMNS", "300")
    wide = _exits_3(*args, "--format", "json")[0]
    tokens = re.compile(r'"tokens": [0-9.]+')  # a rate key's tokens refill as time passes
    assert tokens.sub("", wide) == tokens.sub("", narrow)
    assert json.loads(narrow)


@pytest.fixture
def committed(database_url: str) -> Iterator[str]:
    """The runs, committed for a ``manage.py`` subprocess; dropped afterwards."""
    drop()
    compile_flow(long_flow)
    started = start_flow(LONG_FLOW, {"tenant_identifier": "acme-emea-west"})
    assert support.fail(support.claim_one(LONG_FLOW), ERROR) == "failed"
    yield str(started)
    drop()


def drop() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "select pgflow.delete_flow_and_data(flow_slug) from pgflow.flows where flow_slug = any(%s)",
            [list(SLUGS)],
        )


@pytest.mark.parametrize("columns", ["80", None], ids=["COLUMNS=80", "no COLUMNS"])
def test_a_pipe_is_as_wide_as_columns_else_80(
    database_url: str, committed: str, columns: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``manage.py pgflow_runs | ...``: stdout is a pipe, not a terminal."""
    monkeypatch.delenv("COLUMNS", raising=False)
    result = workers.run_manage(
        database_url,
        "pgflow_runs",
        "--flow",
        LONG_FLOW,
        env={**SETTINGS_ENV, **({"COLUMNS": columns} if columns else {})},
    )
    assert result.returncode == 0, result.stderr
    assert_fits(result.stdout, words=(LONG_FLOW, ERROR), ids=(committed,))
    wide = workers.run_manage(
        database_url, "pgflow_runs", "--flow", LONG_FLOW, env={**SETTINGS_ENV, "COLUMNS": "200"}
    )
    assert max(len(line) for line in wide.stdout.splitlines()) > WIDTH, "a wide COLUMNS gives a table"
    assert committed in wide.stdout.splitlines()[2], wide.stdout


def _exits_3(*args: str) -> tuple[str, str]:
    """``call_command``'s output, whether or not it exits non-zero (pgflow_coverage: 3 when uncovered)."""
    out, err = StringIO(), StringIO()
    try:
        call_command(*args, stdout=out, stderr=err)
    except CommandError as exc:
        assert exc.returncode == 3, exc
    return out.getvalue(), err.getvalue()
