"""What a shared-queue worker says about work it leaves alone: once per flow step, naming it.

A shared queue's claim leaves tasks outside the worker's support set untouched, and reads them again
each time their visibility expires. Warning at every read would repeat one line every few seconds
forever; instead each (flow, step) is named once, and a Django task (a flow whose one step runs a
``@task`` function) is named by its function, since the cure is to deploy the code that defines it.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from pgflow_django.db.query import fetch_all
from pgflow_django.flows.slugs import task_flow_slug, version_of
from pgflow_django.worker import queries

logger = logging.getLogger("pgflow_django.worker")


class UnsupportedWork:
    """Remembers which (flow, step) this worker has already warned about."""

    def __init__(self, queue: str) -> None:
        self.queue = queue
        self.warned: set[tuple[str, str]] = set()

    def report(self, conn: psycopg.Connection[Any], message_ids: list[int]) -> None:
        with conn.cursor() as cursor:
            groups = fetch_all(cursor, queries.UNSUPPORTED_WORK, [self.queue, message_ids])
        for group in groups:
            key = (group.flow_slug, group.step_slug)
            task_path = group.task_path
            shown = ",".join(map(str, group.message_ids))
            if key in self.warned:
                logger.debug("left %s.%s untouched again queue=%s msg_ids=%s", *key, self.queue, shown)
                continue
            self.warned.add(key)
            if _is_task_flow(key[0], task_path, self.queue):
                logger.warning(
                    "task %s was enqueued on queue=%s, but this worker's code does not define it: "
                    "restart or deploy this worker with the code that defines it (its runs wait "
                    "meanwhile; flow %s msg_ids=%s; said once per task)",
                    task_path,
                    self.queue,
                    key[0],
                    shown,
                )
            else:
                logger.warning(
                    "flow %s step %s is not run by this worker: its tasks are left for their workers "
                    "queue=%s msg_ids=%s (manage.py pgflow_coverage lists the handlers each queue "
                    "needs; said once per step)",
                    key[0],
                    key[1],
                    self.queue,
                    shown,
                )


def _is_task_flow(flow_slug: str, task_path: str | None, queue: str) -> bool:
    """True for the flow the tasks backend makes of ``task_path`` on ``queue`` (its slug carries a
    hash of both, so a flow input that merely has a "task" key does not qualify)."""
    if not task_path:
        return False
    return task_flow_slug(task_path, queue) == version_of(flow_slug)
