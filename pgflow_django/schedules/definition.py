"""What a schedule is: one validated definition, built the same way for declared and runtime schedules.

A schedule starts a flow, or a ``@task`` function of the pgflow tasks backend, on the ticks of a cron
expression. Its input is a JSON value, or a module-level callable (by dotted path) that the Python
scheduler calls with each tick, as an aware datetime in the schedule's time zone, right before firing
it. For a task the input (or the callable's result) is the task's keyword arguments.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeAlias, TypedDict, get_args

from pgflow_django.flows.dsl import Flow
from pgflow_django.flows.slugs import validate_flow_slug
from pgflow_django.schedules.callables import resolve_callable
from pgflow_django.schedules.cron import InvalidSchedule, check_cron, check_timezone

CatchUp: TypeAlias = Literal["all", "latest", "none"]
CATCH_UP_POLICIES: Final = get_args(CatchUp)


class ScheduleOptions(TypedDict, total=False):
    """The optional arguments of a definition, taken by ``schedule()`` and ``create_schedule()`` and
    passed on to ``build_spec``, which holds their defaults and checks them."""

    input: Any
    name: str | None
    timezone: str
    catch_up: CatchUp
    max_catch_up: int
    jitter: int
    enabled: bool


MAX_NAME_LENGTH: Final = 200
MAX_CATCH_UP: Final = 1000


@dataclass(frozen=True)
class TaskTarget:
    """How a task schedule's input becomes a run input: the task's call payload with these kwargs."""

    task_path: str

    def payload(self, kwargs: Any) -> dict[str, Any]:
        if not isinstance(kwargs, Mapping):
            raise InvalidSchedule(
                f"the input of a schedule of task {self.task_path} is its keyword arguments: a dict, "
                f"got {type(kwargs).__name__}"
            )
        return {"task": self.task_path, "args": [], "kwargs": dict(kwargs)}


@dataclass(frozen=True)
class ScheduleSpec:
    """One schedule's definition as stored in ``pgflow.schedules`` (``input`` is the run input, or for
    a callable-input task schedule the payload the callable's result is put into)."""

    name: str
    flow_slug: str
    cron: str
    timezone: str = "UTC"
    input: Any = field(default_factory=dict)
    input_callable: str | None = None
    catch_up: CatchUp = "latest"
    max_catch_up: int = 10
    jitter: int = 0
    enabled: bool = True
    task: TaskTarget | None = None
    flow: Flow | None = field(default=None, compare=False, repr=False)
    """The flow object when the target was one (compiled by the sync); None for a slug."""

    def input_json(self) -> str:
        return json.dumps(self.input, separators=(",", ":"), sort_keys=True)

    def parameters(self) -> dict[str, Any]:
        """The statement parameters that write this definition (``queries.CREATE_SCHEDULE`` and the
        other writes of a definition)."""
        return {
            "name": self.name,
            "flow_slug": self.flow_slug,
            "cron": self.cron,
            "timezone": self.timezone,
            "input": self.input_json(),
            "input_callable": self.input_callable,
            "catch_up": self.catch_up,
            "max_catch_up": self.max_catch_up,
            "jitter": self.jitter,
            "enabled": self.enabled,
        }

    def stored(self) -> dict[str, Any]:
        """The columns the definition owns, as the database compares them."""
        return {
            "flow_slug": self.flow_slug,
            "cron": self.cron,
            "timezone": self.timezone,
            "input": self.input,
            "input_callable": self.input_callable,
            "catch_up": self.catch_up,
            "max_catch_up": self.max_catch_up,
            "jitter_seconds": self.jitter,
            "enabled": self.enabled,
        }


def build_spec(
    target: Any,
    *,
    cron: str,
    input: Any = None,
    name: str | None = None,
    timezone: str = "UTC",
    catch_up: CatchUp = "latest",
    max_catch_up: int = 10,
    jitter: int = 0,
    enabled: bool = True,
    task_path: str | None = None,
) -> ScheduleSpec:
    """Validate a definition; every error is one InvalidSchedule naming the field and the fix.

    ``target`` is a Flow (any kind), a flow slug, or a task of the pgflow tasks backend; with a slug,
    ``task_path`` says it is the flow of that task (an edit of a stored task schedule).
    """
    flow, flow_slug, task = _target(target)
    if task is None and task_path is not None:
        task = TaskTarget(task_path)
    schedule_name = _name(name if name is not None else (task.task_path if task else flow_slug))
    prefix = f"schedule {schedule_name!r}"
    expression = check_cron(cron)
    try:
        check_timezone(timezone)
    except InvalidSchedule as exc:
        raise InvalidSchedule(f"{prefix}: {exc}") from None
    if catch_up not in CATCH_UP_POLICIES:
        raise InvalidSchedule(
            f"{prefix}: catch_up must be one of {', '.join(CATCH_UP_POLICIES)}, got {catch_up!r}"
        )
    _whole(prefix, "max_catch_up", max_catch_up, 1, MAX_CATCH_UP)
    _whole(prefix, "jitter", jitter, 0, 86_400)
    if not isinstance(enabled, bool):
        raise InvalidSchedule(f"{prefix}: enabled must be True or False, got {enabled!r}")
    callable_path: str | None = None
    if callable(input):
        callable_path = callable_path_of(input, prefix)
        stored: Any = task.payload({}) if task else {}
    else:
        value = {} if input is None else input
        stored = json.loads(_encoded(prefix, flow or flow_slug, task.payload(value) if task else value))
    return ScheduleSpec(
        name=schedule_name,
        flow_slug=flow_slug,
        cron=expression,
        timezone=timezone,
        input=stored,
        input_callable=callable_path,
        catch_up=catch_up,
        max_catch_up=max_catch_up,
        jitter=jitter,
        enabled=enabled,
        task=task,
        flow=flow,
    )


def callable_path_of(function: Callable[..., Any], prefix: str) -> str:
    """The dotted path a callable input is stored under; it must import back to the same object."""
    module = getattr(function, "__module__", None)
    qualname = getattr(function, "__qualname__", "")
    if not module or not qualname or "<" in qualname or "." in qualname:
        raise InvalidSchedule(
            f"{prefix}: a callable input must be a module-level function (it is imported by dotted path "
            f"where the schedule fires), got {function!r}"
        )
    path = f"{module}.{qualname}"
    if resolve_callable(path) is not function:
        raise InvalidSchedule(f"{prefix}: the callable input {path} does not import back as itself")
    return path


def _target(target: Any) -> tuple[Flow | None, str, TaskTarget | None]:
    if isinstance(target, Flow):
        return target, target.slug, None
    if isinstance(target, str):
        return None, validate_flow_slug(target), None
    if hasattr(target, "func") and hasattr(target, "get_backend"):
        from pgflow_django.tasks.backend import PgflowTaskBackend
        from pgflow_django.tasks.task import module_path

        backend = target.get_backend()
        if not isinstance(backend, PgflowTaskBackend):
            raise InvalidSchedule(
                f"task {module_path(target)} uses backend {type(backend).__name__}; schedules run tasks of "
                "pgflow_django.tasks.PgflowTaskBackend"
            )
        flow = backend.flow_for(target)
        return flow, flow.slug, TaskTarget(module_path(target))
    raise InvalidSchedule(
        f"a schedule targets a Flow, a flow slug or a @task function, got {type(target).__name__}"
    )


def _name(name: object) -> str:
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_LENGTH:
        raise InvalidSchedule(f"a schedule name must be 1 to {MAX_NAME_LENGTH} characters, got {name!r}")
    if any(ord(char) < 32 or ord(char) == 127 for char in name):
        raise InvalidSchedule(f"schedule name {name!r} contains control characters; rename it")
    return name


def _whole(prefix: str, what: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidSchedule(f"{prefix}: {what} must be a whole number from {low} to {high}, got {value!r}")


def _encoded(prefix: str, flow_or_slug: Flow | str, value: Any) -> str:
    from pgflow_django.runs.client import InvalidInput, encode_run_input

    try:
        return encode_run_input(flow_or_slug, value, f"{prefix}: input")
    except InvalidInput as exc:
        raise InvalidSchedule(str(exc)) from None
