"""Helpers of the command tests: run a command in-process or as ``manage.py`` and capture its output."""

from __future__ import annotations

import uuid
from io import StringIO
from typing import Any

from django.core.management import call_command
from django.db import connection

from tests import workers
from tests.integration.commands_flows import SLUGS
from tests.support.db import scalar

SETTINGS_ENV = {"DJANGO_SETTINGS_MODULE": "tests.integration.commands_settings"}


def call(*args: str, **options: Any) -> tuple[str, str]:
    """``call_command`` with stdout and stderr captured; returns both."""
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err, **options)
    return out.getvalue(), err.getvalue()


def manage(database_url: str, *args: str, timeout: float = 120) -> Any:
    """``manage.py`` in a subprocess, with the command tests' flows registered."""
    return workers.run_manage(database_url, *args, env=SETTINGS_ENV, timeout=timeout)


def stderr_lines(result: Any) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


def drop_command_flows() -> None:
    """Transactional tests commit; this removes what they left (flows, runs, queues, worker rows)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "select pgflow.delete_flow_and_data(flow_slug) from pgflow.flows where flow_slug = any(%s)",
            [list(SLUGS)],
        )
        cursor.execute("delete from pgflow.workers where queue_name = any(%s)", [list(SLUGS)])


def flow_exists(slug: str) -> bool:
    return bool(scalar("select exists (select 1 from pgflow.flows where flow_slug = %s)", [slug]))


def queue_exists(slug: str) -> bool:
    return bool(scalar("select exists (select 1 from pgmq.meta where queue_name = %s)", [slug]))


def run_status(run_id: uuid.UUID | str) -> str | None:
    return scalar("select status from pgflow.runs where run_id = %s", [str(run_id)])
