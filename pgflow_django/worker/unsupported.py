"""What a shared-queue worker says about work it leaves alone: once per flow step, naming it.

A shared queue's claim leaves tasks outside the worker's support set untouched, and reads them again
each time their visibility expires. Warning at every read would repeat one line every few seconds
forever; instead each (flow, step) is named once, and a Django task (a flow whose one step runs a
``@task`` function) is named by its function, since the cure is to deploy the code that defines it.
"""

from __future__ import annotations

import logging
from typing import Any, Final

import psycopg

from pgflow_django.slugs import task_flow_slug

logger = logging.getLogger("pgflow_django.worker")

_UNSUPPORTED_SQL: Final = """
select t.flow_slug, t.step_slug, r.input ->> 'task', array_agg(t.message_id order by t.message_id)
  from pgflow.step_tasks as t
  join pgflow.runs as r on r.run_id = t.run_id
 where t.queue_name = %s and t.message_id = any(%s)
 group by 1, 2, 3
 order by 1, 2, 3
"""


class UnsupportedWork:
    """Remembers which (flow, step) this worker has already warned about."""

    def __init__(self, queue: str) -> None:
        self.queue = queue
        self.warned: set[tuple[str, str]] = set()

    def report(self, conn: psycopg.Connection[Any], message_ids: list[int]) -> None:
        with conn.cursor() as cursor:
            cursor.execute(_UNSUPPORTED_SQL, [self.queue, message_ids])
            rows = cursor.fetchall()
        for flow_slug, step_slug, task_path, ids in rows:
            key = (str(flow_slug), str(step_slug))
            shown = ",".join(map(str, ids))
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
    return task_flow_slug(task_path, queue) == flow_slug
