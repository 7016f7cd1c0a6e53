"""``pgflow_audit`` (the read-only pre-upgrade and health report) on a database that holds a step-queued
flow: a step-queued flow owns only its private step queues, so it has no default queue to report."""

from __future__ import annotations

from django.db import connection

from pgflow_django.db.upgrade import run_audit
from tests.sql.step_queues.support import chain


def test_a_step_queued_flow_is_not_reported() -> None:
    chain()
    with connection.cursor() as cursor:
        failing = {f.check: f.samples for f in run_audit(cursor) if not f.ok}
    assert failing == {}
