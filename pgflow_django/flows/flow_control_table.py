"""How one key of a flow-control limit reads in a table: the admin's panels and ``pgflow_limits``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pgflow_django.flows.flow_control import describe

if TYPE_CHECKING:
    from pgflow_django.db.queries import FlowControlRow

FLOW_CONTROL_HEADERS = ("flow", "step", "limit", "key", "started", "deferred", "tokens")
"""Columns of a flow-control table (the dashboard's panel and a flow's page)."""


def flow_control_cells(row: FlowControlRow) -> tuple[str, ...]:
    """One key of one limit: the limit, the key, its started tasks, deferred tasks and tokens now."""
    return (
        row.flow_slug,
        row.step_slug or "(flow)",
        describe(row.kind, row.key_source, row.key_field, row.amount, row.period, row.burst),
        "-" if row.key is None else repr(row.key),
        str(row.started) if row.kind == "concurrency" else "-",
        str(row.deferred),
        "-" if row.tokens is None else f"{row.tokens:.2f}",
    )
