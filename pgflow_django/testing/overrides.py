"""Handler replacements for one test: ``override_handler`` and ``fail_next``.

They change what the in-process runner calls (``run_flow``, ``drain``), never the flow objects
themselves, so the flow's shape, its compiled definition and other tests are untouched. A worker
subprocess runs the real handlers.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import threading
from collections.abc import Callable
from contextlib import ContextDecorator
from typing import Any

from pgflow_django.flows.dsl import Flow, StepDefinition, StepRef, handler_accepts_context

_lock = threading.Lock()
_handlers: dict[tuple[str, str], list[Callable[..., Any]]] = {}
"""Replacement handlers by (flow slug, step slug); the last one entered wins."""
_failures: list[FailNext] = []


def _step(flow: Flow | str, step: StepRef) -> tuple[Flow, StepDefinition]:
    from pgflow_django.testing.flows import resolve_flow

    resolved = resolve_flow(flow)
    return resolved, resolved.get_step(step)


class override_handler(ContextDecorator):
    """Run ``handler`` instead of a step's own handler, as a context manager or a decorator.

    ``handler`` takes ``(input, ctx)`` or ``(input)``, sync or async, like any step handler; the
    step keeps its options (``atomic``, retries, conditions)."""

    def __init__(self, flow: Flow | str, step: StepRef, handler: Callable[..., Any]) -> None:
        resolved, definition = _step(flow, step)
        self.key = (resolved.version_of, definition.slug)
        self.handler = handler
        handler_accepts_context(f"override of step {definition.slug!r} of flow {resolved.slug!r}", handler)

    def __enter__(self) -> override_handler:
        with _lock:
            _handlers.setdefault(self.key, []).append(self.handler)
        return self

    def __exit__(self, *exc: object) -> None:
        with _lock:
            stack = _handlers.get(self.key, [])
            if self.handler in stack:
                stack.reverse()
                stack.remove(self.handler)
                stack.reverse()
            if not stack:
                _handlers.pop(self.key, None)


class FailNext:
    """Armed failures of one step: its next ``times`` calls raise ``error`` without running the handler."""

    def __init__(
        self,
        flow: Flow | str,
        step: StepRef,
        times: int,
        error: BaseException | type[BaseException] | str | None,
        task_index: int | None,
    ) -> None:
        if isinstance(times, bool) or not isinstance(times, int) or times < 1:
            raise ValueError(f"fail_next: times must be a whole number >= 1, got {times!r}")
        resolved, definition = _step(flow, step)
        self.key = (resolved.version_of, definition.slug)
        self.remaining = times
        self.task_index = task_index
        self.error = error
        self.raised = 0
        with _lock:
            _failures.append(self)

    def _exception(self) -> BaseException:
        if isinstance(self.error, BaseException):
            return self.error
        if isinstance(self.error, type):
            return self.error(f"fail_next: injected failure of {self.key[1]}")
        return RuntimeError(self.error or f"fail_next: injected failure of {self.key[1]}")

    def take(self, task_index: int) -> BaseException | None:
        """The exception for this call, if one is still armed for it."""
        with _lock:
            if self.remaining <= 0 or (self.task_index is not None and self.task_index != task_index):
                return None
            self.remaining -= 1
            self.raised += 1
        return self._exception()

    def cancel(self) -> None:
        with _lock:
            if self in _failures:
                _failures.remove(self)

    def __enter__(self) -> FailNext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()


def fail_next(
    flow: Flow | str,
    step: StepRef,
    *,
    times: int = 1,
    error: BaseException | type[BaseException] | str | None = None,
    task_index: int | None = None,
) -> FailNext:
    """Make the next ``times`` attempts of ``step`` fail with ``error`` (an exception, a class, or a
    message for a ``RuntimeError``; ``pgflow_django.Retry(delay=...)`` works too), counted over all
    its tasks or only ``task_index``'s. Armed at once; a ``with`` block, ``cancel()`` or
    ``pgflow_django.testing.reset()`` disarms what is left."""
    return FailNext(flow, step, times, error, task_index)


def reset() -> None:
    """Disarm every ``fail_next`` and drop every ``override_handler`` (the pytest fixture does this)."""
    with _lock:
        _failures.clear()
        _handlers.clear()


def active() -> bool:
    return bool(_handlers or _failures)


def effective_flows(flows: list[Flow]) -> list[Flow]:
    """The flows as the in-process runner should see them: overridden steps with their replacements,
    steps with armed failures wrapped. Flows with neither are returned as they are."""
    if not active():
        return flows
    return [_effective(flow) for flow in flows]


def _effective(flow: Flow) -> Flow:
    with _lock:
        replaced = {step: stack[-1] for (slug, step), stack in _handlers.items() if slug == flow.version_of}
        failing = {failure.key[1] for failure in _failures if failure.key[0] == flow.version_of}
    if not replaced and not failing:
        return flow
    steps = dict(flow.steps)
    for slug in set(replaced) | failing:
        definition = steps[slug]
        handler = replaced.get(slug, definition.handler)
        takes_context = (
            handler_accepts_context(f"step {slug!r}", handler)
            if slug in replaced
            else definition.accepts_context
        )
        if slug in failing:
            handler = _failing(flow.version_of, slug, handler, takes_context)
            takes_context = True
        steps[slug] = dataclasses.replace(definition, handler=handler, accepts_context=takes_context)
    twin = copy.copy(flow)
    twin._steps = steps
    return twin


def _armed(flow_slug: str, step_slug: str, task_index: int) -> BaseException | None:
    with _lock:
        candidates = [failure for failure in _failures if failure.key == (flow_slug, step_slug)]
    for failure in candidates:
        error = failure.take(task_index)
        if error is not None:
            return error
    return None


def _failing(
    flow_slug: str, step_slug: str, handler: Callable[..., Any], takes_context: bool
) -> Callable[..., Any]:
    """``handler`` behind a check for an armed failure; async stays async, so it runs as the original."""

    def arguments(value: Any, ctx: Any) -> tuple[Any, ...]:
        return (value, ctx) if takes_context else (value,)

    if inspect.iscoroutinefunction(handler):

        @functools.wraps(handler)
        async def async_wrapper(value: Any, ctx: Any) -> Any:
            error = _armed(flow_slug, step_slug, ctx.task_index)
            if error is not None:
                raise error
            return await handler(*arguments(value, ctx))

        return async_wrapper

    @functools.wraps(handler)
    def wrapper(value: Any, ctx: Any) -> Any:
        error = _armed(flow_slug, step_slug, ctx.task_index)
        if error is not None:
            raise error
        return handler(*arguments(value, ctx))

    return wrapper
