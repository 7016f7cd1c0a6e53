"""Durable DAG workflows for Django, running inside PostgreSQL on PGMQ.

Importing the package needs no Django settings: the DSL is pure Python, and the client functions (which
use Django's database connection) load on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pgflow_django.flows.context import Deadline, TaskCancelled, TaskContext, TaskTimeout
from pgflow_django.flows.dsl import (
    Flow,
    FlowDefinitionError,
    FlowOptions,
    Retry,
    RoutedFlow,
    StepDefinition,
    StepKeywords,
    StepOptions,
    StepQueuedFlow,
    route_flow,
    with_step_queues,
)
from pgflow_django.flows.flow_control import Concurrency, RateLimit
from pgflow_django.flows.slugs import InvalidSlug
from pgflow_django.lazy import load_lazily

if TYPE_CHECKING:
    from pgflow_django.db.dbguard import NotMigrated
    from pgflow_django.flows.compiler import CompileResult, FlowMismatch, compile_flow
    from pgflow_django.runs.aclient import (
        acancel_run,
        aget_run,
        aretry_run,
        arun_now,
        asend_event,
        astart_flow,
        astart_flows,
        await_run,
    )
    from pgflow_django.runs.client import (
        CancelResult,
        RetryRefused,
        RunIdInUse,
        RunNotFound,
        RunNowRefused,
        RunView,
        StepStateView,
        cancel_run,
        get_run,
        retry_run,
        run_now,
        start_flow,
        start_flows,
        wait_for_run,
    )
    from pgflow_django.runs.events import send_event
    from pgflow_django.runs.operations import FlowNotFound
    from pgflow_django.schedules import schedule

_LAZY = {
    "start_flow": "pgflow_django.runs.client",
    "start_flows": "pgflow_django.runs.client",
    "get_run": "pgflow_django.runs.client",
    "wait_for_run": "pgflow_django.runs.client",
    "cancel_run": "pgflow_django.runs.client",
    "CancelResult": "pgflow_django.runs.client",
    "retry_run": "pgflow_django.runs.client",
    "RetryRefused": "pgflow_django.runs.client",
    "run_now": "pgflow_django.runs.client",
    "RunNowRefused": "pgflow_django.runs.client",
    "RunView": "pgflow_django.runs.client",
    "StepStateView": "pgflow_django.runs.client",
    "RunIdInUse": "pgflow_django.runs.client",
    "RunNotFound": "pgflow_django.runs.client",
    "compile_flow": "pgflow_django.flows.compiler",
    "CompileResult": "pgflow_django.flows.compiler",
    "FlowMismatch": "pgflow_django.flows.compiler",
    "FlowNotFound": "pgflow_django.runs.operations",
    "NotMigrated": "pgflow_django.db.dbguard",
    "schedule": "pgflow_django.schedules",
    "send_event": "pgflow_django.runs.events",
    "astart_flow": "pgflow_django.runs.aclient",
    "astart_flows": "pgflow_django.runs.aclient",
    "aget_run": "pgflow_django.runs.aclient",
    "await_run": "pgflow_django.runs.aclient",
    "acancel_run": "pgflow_django.runs.aclient",
    "aretry_run": "pgflow_django.runs.aclient",
    "arun_now": "pgflow_django.runs.aclient",
    "asend_event": "pgflow_django.runs.aclient",
}

__all__ = [
    "CancelResult",
    "CompileResult",
    "Concurrency",
    "Deadline",
    "Flow",
    "FlowDefinitionError",
    "FlowMismatch",
    "FlowNotFound",
    "FlowOptions",
    "InvalidSlug",
    "NotMigrated",
    "RateLimit",
    "Retry",
    "RetryRefused",
    "RoutedFlow",
    "RunIdInUse",
    "RunNotFound",
    "RunNowRefused",
    "RunView",
    "StepDefinition",
    "StepKeywords",
    "StepOptions",
    "StepQueuedFlow",
    "StepStateView",
    "TaskCancelled",
    "TaskContext",
    "TaskTimeout",
    "acancel_run",
    "aget_run",
    "aretry_run",
    "arun_now",
    "asend_event",
    "astart_flow",
    "astart_flows",
    "await_run",
    "cancel_run",
    "compile_flow",
    "get_run",
    "retry_run",
    "route_flow",
    "run_now",
    "schedule",
    "send_event",
    "start_flow",
    "start_flows",
    "wait_for_run",
    "with_step_queues",
]


def __getattr__(name: str) -> Any:
    return load_lazily(globals(), name, _LAZY.get(name))
