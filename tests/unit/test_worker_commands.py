"""``coverage.worker_commands``: the ``pgflow_worker`` command line that runs steps no live worker
runs, per queue mode (the hint of ``pgflow_start --wait``, ``pgflow_schedules show``, the admin and
``pgflow.W031``)."""

from __future__ import annotations

from pgflow_django.flows.slugs import task_flow_slug
from pgflow_django.runs.coverage import worker_commands
from pgflow_django.runs.queries import StepServiceRow


def step(flow: str, mode: str, slug: str, queue: str) -> StepServiceRow:
    return StepServiceRow(flow, mode, slug, queue, 0)


def test_a_plain_flow_is_one_worker_for_every_step() -> None:
    steps = [step("orders", "flow", "charge", "orders"), step("orders", "flow", "ship", "orders")]
    assert worker_commands(steps) == ["manage.py pgflow_worker --flow orders"]


def test_a_step_queued_flow_is_one_worker_per_step() -> None:
    steps = [
        step("orders", "step", "charge", "orders__charge"),
        step("orders", "step", "ship", "orders__ship"),
    ]
    assert worker_commands(steps) == [
        "manage.py pgflow_worker --flow orders --step charge",
        "manage.py pgflow_worker --flow orders --step ship",
    ]


def test_a_routed_flow_is_one_worker_per_shared_queue() -> None:
    steps = [step("support", "routed", "classify", "bulk"), step("support", "routed", "reply", "bulk")]
    assert worker_commands(steps) == ["manage.py pgflow_worker --queue bulk --flow support"]


def test_a_task_is_the_tasks_worker_of_its_queue() -> None:
    slug = task_flow_slug("myapp.tasks.send_digest", "mail")
    steps = [step(slug, "routed", "call", "mail")]
    assert worker_commands(steps, task_path="myapp.tasks.send_digest") == [
        "manage.py pgflow_worker --tasks --queue mail"
    ]
    assert worker_commands(steps, task_path="myapp.tasks.other") == [
        f"manage.py pgflow_worker --queue mail --flow {slug}"
    ], "a task path that does not name this flow is not trusted"
