"""Which Python ``Flow`` runs a slug's tasks: the registered flows, then the Django tasks backends' flows."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured

from pgflow_django.flows.dsl import Flow


def known_flows() -> dict[str, Flow]:
    """Every flow this process can run: ``PGFLOW["FLOWS"]``, the apps' ``flows`` modules, and the task
    flows of each ``PgflowTaskBackend`` (those its workers discover and those enqueued here)."""
    from pgflow_django.flows.registry import get_flows

    flows = dict(get_flows())
    for backend in _task_backends():
        for task in backend.discover_tasks():
            flow = backend.flow_for(task)
            flows.setdefault(flow.slug, flow)
        for slug, flow in dict(backend._flows).items():
            flows.setdefault(slug, flow)
    return flows


def _task_backends() -> list[Any]:
    try:
        from pgflow_django.tasks.backend import pgflow_backends
    except (ImportError, ImproperlyConfigured):  # no Django tasks framework installed
        return []
    return list(pgflow_backends())


def resolve_flow(flow_or_slug: Flow | str) -> Flow:
    """The flow itself, or the known flow with this slug; the error lists the known slugs."""
    from pgflow_django.flows.registry import get_flow

    return flow_or_slug if isinstance(flow_or_slug, Flow) else get_flow(flow_or_slug, known_flows())
