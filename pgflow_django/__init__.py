"""Durable DAG workflows for Django, running inside PostgreSQL on PGMQ.

Importing the package needs no Django settings: the DSL is pure Python, and the client functions (which
use Django's database connection) load on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pgflow_django.dsl import (
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
from pgflow_django.flow_control import Concurrency, RateLimit
from pgflow_django.lazy import load_lazily
from pgflow_django.slugs import InvalidSlug

if TYPE_CHECKING:
    from pgflow_django.client import (
        CancelResult,
        RunIdInUse,
        RunNotFound,
        RunView,
        StepStateView,
        cancel_run,
        get_run,
        start_flow,
        start_flows,
        wait_for_run,
    )
    from pgflow_django.compiler import CompileResult, FlowMismatch, compile_flow
    from pgflow_django.dbguard import NotMigrated
    from pgflow_django.operations import FlowNotFound
    from pgflow_django.schedules import schedule

_LAZY = {
    "start_flow": "pgflow_django.client",
    "start_flows": "pgflow_django.client",
    "get_run": "pgflow_django.client",
    "wait_for_run": "pgflow_django.client",
    "cancel_run": "pgflow_django.client",
    "CancelResult": "pgflow_django.client",
    "RunView": "pgflow_django.client",
    "StepStateView": "pgflow_django.client",
    "RunIdInUse": "pgflow_django.client",
    "RunNotFound": "pgflow_django.client",
    "compile_flow": "pgflow_django.compiler",
    "CompileResult": "pgflow_django.compiler",
    "FlowMismatch": "pgflow_django.compiler",
    "FlowNotFound": "pgflow_django.operations",
    "NotMigrated": "pgflow_django.dbguard",
    "schedule": "pgflow_django.schedules",
}

__all__ = [
    "CancelResult",
    "CompileResult",
    "Concurrency",
    "Flow",
    "FlowDefinitionError",
    "FlowMismatch",
    "FlowNotFound",
    "FlowOptions",
    "InvalidSlug",
    "NotMigrated",
    "RateLimit",
    "Retry",
    "RoutedFlow",
    "RunIdInUse",
    "RunNotFound",
    "RunView",
    "StepDefinition",
    "StepKeywords",
    "StepOptions",
    "StepQueuedFlow",
    "StepStateView",
    "cancel_run",
    "compile_flow",
    "get_run",
    "route_flow",
    "schedule",
    "start_flow",
    "start_flows",
    "wait_for_run",
    "with_step_queues",
]


def __getattr__(name: str) -> Any:
    return load_lazily(globals(), name, _LAZY.get(name))
