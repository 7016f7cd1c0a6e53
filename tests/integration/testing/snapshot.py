"""A run's rows without what legitimately differs between two executions (ids, times, worker ids)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.db import connection


def snapshot(run_id: uuid.UUID) -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute(
            "select flow_slug, status, input::text, output::text, error_message, remaining_steps"
            " from pgflow.runs where run_id = %s",
            [run_id],
        )
        run = cursor.fetchone()
        cursor.execute(
            "select step_slug, status, output::text, error_message, skip_reason, remaining_tasks,"
            " initial_tasks, remaining_deps from pgflow.step_states where run_id = %s order by step_slug",
            [run_id],
        )
        steps = cursor.fetchall()
        cursor.execute(
            "select step_slug, task_index, status, attempts_count, output::text, error_message,"
            " (select coalesce(jsonb_agg(e->'attempt' || jsonb_build_array(e->'error')), '[]')"
            "    from jsonb_array_elements(attempt_errors) as e)::text, requeued_count"
            " from pgflow.step_tasks where run_id = %s order by step_slug, task_index",
            [run_id],
        )
        tasks = cursor.fetchall()
    assert run is not None, f"no run {run_id}"

    def decode(row: tuple[Any, ...], json_columns: tuple[int, ...]) -> tuple[Any, ...]:
        return tuple(
            json.loads(value) if index in json_columns and value is not None else value
            for index, value in enumerate(row)
        )

    return {
        "run": decode(run, (2, 3)),
        "steps": [decode(row, (2,)) for row in steps],
        "tasks": [decode(row, (4, 6)) for row in tasks],
    }
