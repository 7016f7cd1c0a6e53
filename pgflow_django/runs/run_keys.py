"""Callable limit keys, evaluated where a run starts and stored with it in the starting transaction.

The database reads a string key from the run input itself; a callable (``Concurrency(key=lambda i:
...)``) only Python can run, so ``start_flow``/``start_flows`` call it on each input before anything is
written (a failing key starts nothing) and store its text in ``pgflow.run_limit_keys``. A run started
without the flow's Python definition (from SQL, or a process that does not register the flow) has no
stored key: its tasks share the key ''.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, NamedTuple

from pgflow_django.db.query import fetch_value
from pgflow_django.flows.dsl import Flow
from pgflow_django.runs import queries
from pgflow_django.runs.encoding import clean_text


class RunKey(NamedTuple):
    run_id: uuid.UUID
    step_slug: str
    kind: str
    key: str


NO_RUN = uuid.UUID(int=0)
"""The run id of a key computed before its run has one."""


class KeyFailed(ValueError):
    """A callable key raised on a run input: nothing was started."""


def stored_keys(flow_or_slug: Flow | str, inputs: Sequence[Any]) -> list[list[RunKey]]:
    """Every callable key of the flow for each input (the run id filled in by :func:`record`); empty
    lists for a flow without one, or a bare slug that no registered flow has."""
    flow = flow_or_slug if isinstance(flow_or_slug, Flow) else _registered(flow_or_slug)
    if flow is None:
        return [[] for _ in inputs]
    limits = [limit for limit in flow.limits if limit.key_source == "stored"]
    found: list[list[RunKey]] = []
    for value in inputs:
        keys: list[RunKey] = []
        for limit in limits:
            scope = f"step {limit.step_slug!r}" if limit.step_slug else "the flow"
            try:
                key = limit.key_of(value)
            except Exception as exc:
                raise KeyFailed(
                    f"the {limit.kind} key of {scope} of flow {flow.slug!r} raised {type(exc).__name__}: "
                    f"{exc}; fix the key function or the input (nothing was started)"
                ) from None
            if clean_text(key) != key:
                raise KeyFailed(
                    f"the {limit.kind} key of {scope} of flow {flow.slug!r} is {key!r}, which PostgreSQL "
                    "cannot store (NUL or a lone surrogate); fix the key function (nothing was started)"
                )
            keys.append(RunKey(NO_RUN, limit.step_slug, limit.kind, key))
        found.append(keys)
    return found


def record(cursor: Any, run_ids: Sequence[uuid.UUID], keys: Sequence[Sequence[RunKey]]) -> None:
    """Store each run's keys, in the caller's transaction (the one that starts the runs)."""
    rows = [key._replace(run_id=run_id) for run_id, run in zip(run_ids, keys, strict=True) for key in run]
    if rows:
        fetch_value(
            cursor,
            queries.RECORD_RUN_KEYS,
            [
                [k.run_id for k in rows],
                [k.step_slug for k in rows],
                [k.kind for k in rows],
                [k.key for k in rows],
            ],
        )


def _registered(slug: str) -> Flow | None:
    from pgflow_django.flows.registry import get_flows

    return get_flows().get(slug)
