"""A production backend for Django's tasks framework on pgflow.

``TASKS = {"default": {"BACKEND": "pgflow_django.tasks.PgflowTaskBackend", "QUEUES": ["default"]}}``.
Each task function runs as a one-step routed flow (``route_flow``) whose one step, ``call``, is routed
to the shared queue named by the task's ``queue_name``; ``pgflow_worker --tasks --queue Q`` runs them.
Works with Django 6's ``django.tasks`` and, on Django 5.2, with the ``django-tasks`` backport (the
same API under the name ``django_tasks``). docs/django-tasks.md has the details.
"""

from __future__ import annotations

import dataclasses
import json
import math
import threading
import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.db import ProgrammingError, connections, transaction
from django.utils import timezone
from django.utils.module_loading import import_string, module_has_submodule

from pgflow_django.db.dbguard import raise_if_not_migrated, require_postgresql
from pgflow_django.db.query import fetch_one
from pgflow_django.flows.dsl import Flow, RoutedFlow, priority_problem, route_flow
from pgflow_django.flows.registry import import_task_module
from pgflow_django.flows.slugs import shared_queue_problem, task_flow_slug, version_of
from pgflow_django.runs.encoding import idempotency_key_problem
from pgflow_django.tasks import queries
from pgflow_django.tasks.framework import tasks_api
from pgflow_django.tasks.handler import TaskHandler
from pgflow_django.tasks.results import error_of_attempt
from pgflow_django.tasks.task import STEP_SLUG, PgflowTask, module_path


class PgflowTaskBackend(tasks_api.BaseTaskBackend):  # type: ignore[misc]
    """Runs Django tasks as pgflow runs: durable, retried, recovered, on shared PGMQ queues.

    OPTIONS: ``MAX_ATTEMPTS`` (default 1: a failed task is FAILED, as Django's semantics expect),
    ``BASE_DELAY`` (seconds, default 1), ``TIMEOUT`` (seconds, default 60), ``MODULES`` (extra
    modules whose tasks workers load, beside every installed app's ``tasks`` module) and ``DATABASE``
    (the Django database alias, default ``default``).
    """

    task_class = PgflowTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True
    """A task's ``priority`` (-100..100) orders the claims of its queue: higher first, FIFO within a
    priority (docs/flow-control.md)."""

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        options = {str(key).upper(): value for key, value in (self.options or {}).items()}
        unknown = sorted(set(options) - {"MAX_ATTEMPTS", "BASE_DELAY", "TIMEOUT", "MODULES", "DATABASE"})
        if unknown:
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}]['OPTIONS'] has unknown key(s) {', '.join(unknown)}; valid: MAX_ATTEMPTS, "
                "BASE_DELAY, TIMEOUT, MODULES, DATABASE"
            )
        self.max_attempts = _option(alias, "MAX_ATTEMPTS", options.get("MAX_ATTEMPTS", 1), 1)
        self.base_delay = _option(alias, "BASE_DELAY", options.get("BASE_DELAY", 1), 0)
        self.timeout = _option(alias, "TIMEOUT", options.get("TIMEOUT", 60), 1)
        modules = options.get("MODULES", ())
        if isinstance(modules, str) or not all(isinstance(name, str) for name in modules):
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}]['OPTIONS']['MODULES'] must be a list of module names, got {modules!r}"
            )
        self.modules = tuple(modules)
        self.using = str(options.get("DATABASE", "default"))
        for queue in self.queues:
            problem = shared_queue_problem(queue)
            if problem is not None:
                raise ImproperlyConfigured(f"TASKS[{alias!r}]['QUEUES']: queue {queue!r} {problem}")
        self._flows: dict[str, RoutedFlow] = {}
        self._tasks_by_slug: dict[str, Any] = {}
        self._compiled: set[str] = set()
        self._lock = threading.Lock()

    # -- the framework's contract ----------------------------------------------------------------

    def validate_task(self, task: Any) -> None:
        problem = priority_problem(getattr(task, "priority", 0))
        if problem is not None:
            raise tasks_api.InvalidTask(f"priority of task {module_path(task)} {problem}")
        key = getattr(task, "idempotency_key", None)
        problem = None if key is None else idempotency_key_problem(key)
        if problem is not None:
            raise tasks_api.InvalidTask(f"idempotency_key of task {module_path(task)} {problem}")
        super().validate_task(task)
        problem = shared_queue_problem(task.queue_name)
        if problem is not None:
            raise tasks_api.InvalidTask(
                f"queue_name {task.queue_name!r} of task {module_path(task)} {problem} (it names a pgflow "
                "shared queue)"
            )
        for name in ("max_attempts", "timeout", "base_delay"):
            value = getattr(task, name, None)
            minimum = 0 if name == "base_delay" else 1
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < minimum
            ):
                raise tasks_api.InvalidTask(
                    f"{name} of task {module_path(task)} must be a whole number >= {minimum}, got {value!r}"
                )

    def enqueue(self, task: Any, args: Iterable[Any], kwargs: Mapping[str, Any]) -> Any:
        """Start the task's run on Django's connection: inside ``transaction.atomic()`` it commits or
        rolls back with the caller. The flow is compiled first if this process has not yet seen it.

        With an ``idempotency_key`` (``task.using(idempotency_key=...)``) an enqueue whose key already
        has a run of this task returns that run's result and sends no ``task_enqueued``; concurrent
        enqueues with one key get one run."""
        from pgflow_django.runs.client import InvalidInput, start_flow_reporting

        require_postgresql(self.using)
        self.validate_task(task)
        flow = self.flow_for(task)
        try:
            payload = {
                "task": module_path(task),
                "args": tasks_api.normalize_json(list(args)),
                "kwargs": tasks_api.normalize_json(dict(kwargs)),
            }
        except RecursionError:
            raise InvalidInput(
                f"arguments of task {module_path(task)} are nested deeper than Python's recursion limit"
            ) from None
        if task.run_after is not None:
            payload["run_after"] = task.run_after.isoformat()
        self._ensure_compiled(flow)
        delay = None
        if task.run_after is not None:
            delay = max(0, math.ceil((task.run_after - timezone.now()).total_seconds()))
        # read back in the starting transaction: a worker cannot have claimed the task yet, so the
        # result is READY (as Django's database backends return it), never a racing RUNNING
        with transaction.atomic(using=self.using):
            run_id, started = start_flow_reporting(
                flow,
                payload,
                delay=delay,
                priority=task.priority,
                idempotency_key=getattr(task, "idempotency_key", None),
                using=self.using,
            )
            result = self.get_result(str(run_id))
        if started:
            tasks_api.task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> Any:
        try:
            run_id = uuid.UUID(str(result_id))
        except ValueError:
            raise tasks_api.TaskResultDoesNotExist(result_id) from None
        require_postgresql(self.using)
        try:
            with connections[self.using].cursor() as cursor:
                row = fetch_one(cursor, queries.TASK_RESULT, [STEP_SLUG, run_id])
        except ProgrammingError as exc:
            raise_if_not_migrated(exc, self.using)
            raise
        if row is None:
            raise tasks_api.TaskResultDoesNotExist(result_id)
        values = row._asdict()
        for name in ("payload", "attempt_errors", "output"):  # jsonb: Django's cursor hands it over as text
            if isinstance(values[name], str):
                values[name] = json.loads(values[name])
        return self._result(str(run_id), **values)

    def check(self, **kwargs: Any) -> Iterable[Any]:
        return []

    # -- flows -----------------------------------------------------------------------------------

    def flow_for(self, task: Any, queue_name: str | None = None) -> RoutedFlow:
        """The routed one-step flow that runs ``task`` on ``queue_name`` (default: the task's own)."""
        queue = queue_name or task.queue_name
        slug = task_flow_slug(module_path(task), queue)
        with self._lock:
            flow = self._flows.get(slug)
            if flow is None:
                plain = Flow(
                    slug,
                    max_attempts=self.max_attempts,
                    base_delay=self.base_delay,
                    timeout=self.timeout,
                )
                plain.step(
                    slug=STEP_SLUG,
                    max_attempts=getattr(task, "max_attempts", None),
                    timeout=getattr(task, "timeout", None),
                    base_delay=getattr(task, "base_delay", None),
                )(TaskHandler(self, task))
                flow = route_flow(plain, queues={STEP_SLUG: queue})
                self._flows[slug] = flow
                # results of this flow report its queue, and each run's own run_after (see _result)
                plain_task = dataclasses.replace(task, queue_name=queue, run_after=None, priority=0)
                if getattr(plain_task, "idempotency_key", None) is not None:
                    plain_task = dataclasses.replace(plain_task, idempotency_key=None)
                self._tasks_by_slug[slug] = plain_task
        return flow

    def discover_tasks(self) -> list[Any]:
        """Every module-level task of this backend: in installed apps' ``tasks`` modules and in
        ``OPTIONS['MODULES']``, so workers know the functions without reading them from messages."""
        modules = [
            f"{config.name}.tasks"
            for config in apps.get_app_configs()
            if module_has_submodule(config.module, "tasks")
        ]
        found: dict[str, Any] = {}
        for name in [*modules, *self.modules]:
            module = import_task_module(name)
            for value in vars(module).values():
                if isinstance(value, tasks_api.Task) and value.backend == self.alias:
                    found.setdefault(module_path(value), value)
        return list(found.values())

    def worker_flows(self, queue_name: str) -> list[RoutedFlow]:
        """The flows a ``pgflow_worker --tasks --queue Q`` runs: every discovered task on that queue."""
        problem = shared_queue_problem(queue_name)
        if problem is not None:
            raise ImproperlyConfigured(f"queue {queue_name!r} {problem}")
        if self.queues and queue_name not in self.queues:
            raise ImproperlyConfigured(
                f"queue {queue_name!r} is not in TASKS[{self.alias!r}]['QUEUES'] "
                f"({', '.join(sorted(self.queues))})"
            )
        return [self.flow_for(task, queue_name) for task in self.discover_tasks()]

    def _ensure_compiled(self, flow: RoutedFlow) -> None:
        """Compile on first enqueue in this process; remembered only once the caller's transaction
        commits (a rolled-back compilation is done again next time)."""
        from pgflow_django.flows.compiler import compile_flow

        if flow.slug in self._compiled:
            return
        compile_flow(flow, using=self.using)
        transaction.on_commit(lambda: self._compiled.add(flow.slug), using=self.using)

    # -- results ---------------------------------------------------------------------------------

    def _task_of(self, flow_slug: str, payload: Mapping[str, Any], queue_name: str) -> Any:
        task = self._tasks_by_slug.get(version_of(flow_slug))  # a later version of the task's flow too
        if task is not None:
            return task
        try:
            found = import_string(str(payload.get("task")))
        except ImportError:
            found = None
        if not isinstance(found, tasks_api.Task):
            raise tasks_api.TaskResultDoesNotExist(
                f"run of flow {flow_slug} names task {payload.get('task')!r}, which cannot be imported here"
            )
        return found.using(queue_name=queue_name) if found.queue_name != queue_name else found

    def _result(
        self,
        result_id: str,
        flow_slug: str,
        run_status: str,
        payload: dict[str, Any],
        enqueued_at: datetime,
        finished_at: datetime | None,
        task_status: str | None,
        started_at: datetime | None,
        last_worker_id: uuid.UUID | None,
        attempt_errors: list[dict[str, Any]],
        output: Any,
        queue_name: str,
        exhausted_by_recovery: bool = False,
        task_error: str | None = None,
        priority: int = 0,
    ) -> Any:
        if not isinstance(payload, dict) or "args" not in payload or "kwargs" not in payload:
            raise tasks_api.TaskResultDoesNotExist(result_id)
        task = self._task_of(flow_slug, payload, queue_name)
        if isinstance(payload.get("run_after"), str):
            task = dataclasses.replace(task, run_after=datetime.fromisoformat(payload["run_after"]))
        if task.priority != priority:
            task = dataclasses.replace(task, priority=priority)
        statuses = tasks_api.TaskResultStatus
        if run_status == "completed":
            status = statuses.SUCCESSFUL
        elif run_status == "failed":
            status = statuses.FAILED
        elif task_status == "started":
            status = statuses.RUNNING
        else:
            status = statuses.READY
        worker_ids = [str(entry.get("worker_id")) for entry in attempt_errors if entry.get("worker_id")]
        errors = [error_of_attempt(entry) for entry in attempt_errors]
        if task_status in ("started", "completed") and last_worker_id is not None:
            worker_ids.append(str(last_worker_id))
        elif task_status == "failed" and exhausted_by_recovery:
            # the attempt whose worker vanished failed without an attempt_errors entry: report it
            if last_worker_id is not None:
                worker_ids.append(str(last_worker_id))
            errors.append(error_of_attempt({"error": task_error or "permanently stalled"}))
        result = tasks_api.TaskResult(
            task=task,
            id=result_id,
            status=status,
            enqueued_at=enqueued_at,
            started_at=started_at,
            finished_at=finished_at,
            last_attempted_at=started_at,
            args=payload["args"],
            kwargs=payload["kwargs"],
            backend=self.alias,
            errors=errors,
            worker_ids=worker_ids,
        )
        if status == statuses.SUCCESSFUL:
            object.__setattr__(result, "_return_value", output)
        return result


def _option(alias: str, name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ImproperlyConfigured(
            f"TASKS[{alias!r}]['OPTIONS']['{name}'] must be a whole number >= {minimum}, got {value!r}"
        )
    return value


def pgflow_backends() -> list[PgflowTaskBackend]:
    """Every configured TASKS backend that is a PgflowTaskBackend."""
    handler = tasks_api.package.task_backends
    return [handler[alias] for alias in handler.settings if isinstance(handler[alias], PgflowTaskBackend)]
