"""django-pgmigrate's lock watcher (``pglock.prioritize``'s thread) leaves no database session behind.

The watcher's queries open a connection of its own thread; before pgflow closed it, the session
lived on until the garbage collector freed the connection, and blocked the test runner's
``DROP DATABASE`` of the test database. The garbage collector is off here, so a session left open
stays visible (with it on, whether it is freed in time is luck).
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator

import pglock
import psycopg
import pytest
from django.db import connection
from pglock import core

from pgflow_django.db import lock_watcher
from tests.support.scratch import server_params

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def no_garbage_collection() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def sessions() -> set[int]:
    """Backend pids connected to the test database, from a connection of its own (not listed)."""
    with psycopg.connect(**server_params(), autocommit=True) as admin:
        rows = admin.execute(
            "select pid from pg_stat_activity where datname = %s and pid <> pg_backend_pid()",
            [connection.settings_dict["NAME"]],
        ).fetchall()
    return {row[0] for row in rows}


def test_the_watcher_is_pgflows_closing_timer() -> None:
    assert getattr(core._PeriodicTimer, "closes_connections", False)
    assert lock_watcher.install()  # a second install keeps the one class
    assert core._PeriodicTimer.__mro__[1].__name__ == "_PeriodicTimer"


def test_no_session_outlives_prioritize(no_garbage_collection: None) -> None:
    connection.ensure_connection()
    before = sessions()
    checked = threading.Event()

    def side_effect(blocked: object) -> list[int]:
        pids = list(blocked)  # a query on the watcher's connection
        checked.set()
        return pids

    with pglock.prioritize(interval=0.05, side_effect=side_effect):
        assert checked.wait(10), "the watcher did not run its check"
        assert len(sessions() - before) == 1  # the watcher's own

    deadline = time.monotonic() + 5
    while (left := sessions() - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, f"the watcher's session {left} outlived pglock.prioritize()"


def test_an_error_in_the_watchers_check_still_reaches_the_caller(no_garbage_collection: None) -> None:
    connection.ensure_connection()
    before = sessions()

    def side_effect(blocked: object) -> list[int]:
        list(blocked)
        raise ValueError("check failed")

    with (
        pytest.raises(RuntimeError, match="Exception raised in side effect") as raised,
        pglock.prioritize(interval=0.05, side_effect=side_effect),
    ):
        time.sleep(0.5)
    assert isinstance(raised.value.__cause__, ValueError)
    deadline = time.monotonic() + 5
    while (left := sessions() - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left
