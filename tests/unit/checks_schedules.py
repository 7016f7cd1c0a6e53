"""Schedules for the system-check tests: ``scheduled`` is registered (listed in PGFLOW["FLOWS"] by the
tests), ``orphan`` is not, so its schedule starts a flow no worker runs."""

from __future__ import annotations

from typing import Any

from pgflow_django import Flow
from pgflow_django.schedules import schedule

scheduled = Flow("checks_scheduled")


@scheduled.step()
def only(flow_input: Any) -> Any:
    return flow_input


orphan = Flow("checks_orphan")
orphan.step(slug="only")(only)

schedule(scheduled, cron="*/5 * * * *", name="checks-ok")
schedule(orphan, cron="0 * * * *", name="checks-orphan")
