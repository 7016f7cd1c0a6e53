"""Helpers of the command tests: run a command in-process or as ``manage.py`` and capture its output."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, redirect_stderr, redirect_stdout
from io import StringIO
from typing import Any
from unittest import mock

from django.core.management import ManagementUtility, call_command
from django.core.management import base as management_base
from django.db import connection
from django.test import override_settings

from tests import workers
from tests.integration.commands_flows import REGISTERED, SLUGS
from tests.support.db import scalar

SETTINGS_ENV = {"DJANGO_SETTINGS_MODULE": "tests.integration.commands_settings"}
COMMAND_SETTINGS = {"PGFLOW": {"FLOWS": REGISTERED}}
"""What ``tests/integration/commands_settings.py`` changes, for :func:`manage_in_process`."""


def call(*args: str, **options: Any) -> tuple[str, str]:
    """``call_command`` with stdout and stderr captured; returns both."""
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err, **options)
    return out.getvalue(), err.getvalue()


def manage_in_process(
    *args: str, env: dict[str, str] | None = None, stdin: str = "", settings: dict[str, Any] | None = None
) -> subprocess.CompletedProcess[str]:
    """``manage.py ARGS`` in this process, as :func:`manage` runs it in a subprocess: the exit code
    (``SystemExit`` caught), stdout and stderr (``pgflow_django``'s log lines included), on the test's
    connection and transaction.

    Why both: a subprocess costs 1-2 s of CPU to import Django and the project, and most command tests
    check what a command prints, its exit code or what it wrote, which is the same in this process.
    :func:`manage` stays for the few tests per command family whose subject is the process itself
    (the exit status and stderr of a real ``manage.py``, ``--traceback``) or another database.

    ``settings`` defaults to the command tests' flows (``COMMAND_SETTINGS``); ``{}`` keeps the test
    process's own (``testproject.settings``). ``env`` is set in ``os.environ`` for the call (``COLUMNS``),
    ``stdin`` is what the command reads there (never a terminal, as under ``manage``)."""
    out, err = StringIO(), StringIO()
    argv = ["manage.py", *args]
    with ExitStack() as stack:
        stack.enter_context(override_settings(**(COMMAND_SETTINGS if settings is None else settings)))
        stack.enter_context(mock.patch.dict(os.environ, env or {}))
        stack.enter_context(mock.patch.object(sys, "stdin", StringIO(stdin)))
        # run_from_argv closes every connection at the end, the test's (and its transaction) with them
        stack.enter_context(mock.patch.object(management_base.connections, "close_all"))
        stack.enter_context(_restored_signal_handlers())
        stack.enter_context(_log_lines_to(err))
        stack.enter_context(redirect_stdout(out))
        stack.enter_context(redirect_stderr(err))
        try:
            ManagementUtility(argv).fetch_command(args[0]).run_from_argv(argv)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


@contextmanager
def _restored_signal_handlers() -> Iterator[None]:
    """A command that waits (the scheduler, ``--watch``) installs SIGINT/SIGTERM handlers."""
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


@contextmanager
def _log_lines_to(stream: StringIO) -> Iterator[None]:
    """``pgflow_django``'s console handler (``LOGGING``) writes where a process's stderr would be."""
    handlers = [h for h in logging.getLogger("pgflow_django").handlers if type(h) is logging.StreamHandler]
    saved = [handler.setStream(stream) for handler in handlers]
    try:
        yield
    finally:
        for handler, previous in zip(handlers, saved, strict=True):
            if previous is not None:
                handler.setStream(previous)


def manage(database_url: str, *args: str, timeout: float = 120) -> Any:
    """``manage.py`` in a subprocess, with the command tests' flows (see :func:`manage_in_process`)."""
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
