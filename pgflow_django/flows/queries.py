"""The statements only flow definition sends: compiling a flow and naming task flows."""

from __future__ import annotations

from typing import Final, NamedTuple

from pgflow_django.db.query import Query, value_query

RUN_INPUT: Final = value_query("run_input", "select input::text as value from pgflow.runs where run_id = %s")
"""A run's input as JSON text (a handler's ``ctx.flow_input``)."""


SET_FLOW_LIMITS: Final = value_query(
    "set_flow_limits", "select pgflow.set_flow_limits(%s, %s::jsonb) as value"
)
"""Replace a flow's concurrency and rate limits (after every compile or verification)."""


COMPILE_FLOW_VERSION: Final = value_query(
    "compile_flow_version",
    "select pgflow.compile_flow_version(%s, %s::jsonb, %s::text, %s::text, %s::bigint)::text as value",
)
"""Compile or verify a flow as one of its versions (slug, shape json, version key, shape-change policy,
confirmed run count): a JSON answer naming the version's stored slug."""


class TaskFlowRow(NamedTuple):
    flow_slug: str
    queue_name: str
    task_path: str | None
    """The function a run of it names (``input ->> 'task'``; every run names the same one, which the
    slug's hash fixes); None when it has no run."""


TASK_FLOWS: Final = Query(
    "task_flows",
    """
    select f.flow_slug, s.queue_name,
           (select r.input ->> 'task' from pgflow.runs r
             where r.flow_slug = f.flow_slug limit 1) as task_path
      from pgflow.flows f
      join pgflow.steps s on s.flow_slug = f.flow_slug and s.step_slug = %(step)s
     where f.queue_mode = 'routed' and f.flow_slug ~ %(pattern)s
     order by f.flow_slug
    """,
    TaskFlowRow,
)
"""The flows the tasks backend made (routed, a ``call`` step, a hashed slug), each with the function
path one of its runs names: one probe of the index ``runs (flow_slug, status)`` per task flow."""
