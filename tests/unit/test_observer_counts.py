"""The worker's observer counts a batch (a claim, a completion flush) once per label set and times
handlers without a context manager: the exported series come out as if each task were counted alone."""

from __future__ import annotations

import uuid

import pytest

from pgflow_django.observability.metrics import WorkerMetrics
from pgflow_django.worker.connection import ClaimedTask
from pgflow_django.worker.observe import Observer


def task(step: str, index: int, queue: str = "") -> ClaimedTask:
    return ClaimedTask(
        flow_slug="counted",
        run_id=uuid.uuid4(),
        step_slug=step,
        task_index=index,
        message_id=index + 1,
        attempt=1,
        input=None,
        queue=queue,
    )


def sample(metrics: WorkerMetrics, name: str, step: str, queue: str = "counted") -> float | None:
    return metrics.registry.get_sample_value(name, {"flow": "counted", "step": step, "queue": queue})


def test_a_claim_counts_each_label_set_once_with_its_tasks() -> None:
    metrics = WorkerMetrics()
    observer = Observer(queue="counted", metrics=metrics)
    tasks = [task("a", 0), task("b", 0), task("a", 1), task("a", 2, queue="other"), task("a", 3)]
    observer.claimed(tasks, 0.002)
    observer.claimed([task("b", 1)], 0.001)
    assert sample(metrics, "pgflow_tasks_claimed_total", "a") == 3
    assert sample(metrics, "pgflow_tasks_claimed_total", "b") == 2
    assert sample(metrics, "pgflow_tasks_claimed_total", "a", "other") == 1
    assert metrics.registry.get_sample_value("pgflow_claim_duration_seconds_count", {"queue": "counted"}) == 2


def test_recorded_results_count_each_outcome_and_label_set() -> None:
    metrics = WorkerMetrics()
    observer = Observer(queue="counted", metrics=metrics)
    a0, a1, a2, b0 = task("a", 0), task("a", 1), task("a", 2), task("b", 0)
    results = [
        (a0, "completed", None),
        (a1, "completed", None),
        (b0, "retrying", "E"),
        (a2, "failed", "E"),
        (b0, "skipped", "E"),
        (a0, "stale", None),
        (a1, "unknown outcome", None),
    ]
    observer.recorded(results, lambda tasks: [], seconds=0.003)
    assert sample(metrics, "pgflow_tasks_completed_total", "a") == 2
    assert sample(metrics, "pgflow_tasks_retried_total", "b") == 1
    assert sample(metrics, "pgflow_tasks_failed_total", "a") == 1
    assert sample(metrics, "pgflow_tasks_failed_total", "b") == 1
    assert sample(metrics, "pgflow_tasks_stale_total", "a") == 1
    assert sample(metrics, "pgflow_tasks_completed_total", "b") is None


def test_handling_times_the_call_and_lets_its_exception_through() -> None:
    metrics = WorkerMetrics()
    observer = Observer(queue="counted", metrics=metrics)
    with observer.handling(task("a", 0)):
        pass
    with pytest.raises(ValueError), observer.handling(task("a", 1)):
        raise ValueError("the handler's")
    assert sample(metrics, "pgflow_task_duration_seconds_count", "a") == 2
