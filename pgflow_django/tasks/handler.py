"""The ``call`` step of a task flow: the task function run as a step handler."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from pgflow_django.flows.context import TaskContext as StepContext
from pgflow_django.tasks.framework import tasks_api
from pgflow_django.tasks.results import TaskFailure, task_output
from pgflow_django.tasks.task import STEP_SLUG


class TaskHandler:
    """The ``call`` step of a task flow: runs the task function with the run's arguments, and sends
    Django's task_started and task_finished signals around it."""

    def __init__(self, backend: Any, task: Any) -> None:
        self.backend = backend
        self.task = task
        self.__name__ = STEP_SLUG

    def __call__(self, payload: dict[str, Any], ctx: StepContext) -> Any:
        result = self.backend.get_result(str(ctx.run_id))
        object.__setattr__(result, "status", tasks_api.TaskResultStatus.RUNNING)
        tasks_api.task_started.send(type(self.backend), task_result=result)
        args, kwargs = payload["args"], payload["kwargs"]
        try:
            if self.task.takes_context:
                value = self.task.call(tasks_api.TaskContext(task_result=result), *args, **kwargs)
            else:
                value = self.task.call(*args, **kwargs)
        except BaseException as exc:  # SystemExit, CancelledError...: the task's own, recorded as FAILED
            raise self._failed(result, TaskFailure(exc)) from exc
        try:
            output = task_output(value)
        except (TypeError, ValueError, RecursionError) as exc:
            raise self._failed(result, TaskFailure(exc, permanent=True)) from exc
        except BaseException as exc:  # raised by the value's own code (a Mapping's items()...)
            raise self._failed(result, TaskFailure(exc)) from exc
        object.__setattr__(result, "status", tasks_api.TaskResultStatus.SUCCESSFUL)
        object.__setattr__(result, "finished_at", timezone.now())
        object.__setattr__(result, "_return_value", output)
        tasks_api.task_finished.send(type(self.backend), task_result=result)
        return output

    def _failed(self, result: Any, failure: TaskFailure) -> TaskFailure:
        """Record ``failure`` on ``result`` as FAILED and send task_finished; the caller raises it."""
        object.__setattr__(result, "status", tasks_api.TaskResultStatus.FAILED)
        object.__setattr__(result, "finished_at", timezone.now())
        result.errors.append(
            tasks_api.TaskError(
                exception_class_path=failure.exception_class_path, traceback=failure.traceback
            )
        )
        tasks_api.task_finished.send(type(self.backend), task_result=result)
        return failure
