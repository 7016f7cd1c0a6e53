"""Compile or verify a flow against the database: the one path used by worker startup and ``pgflow_compile``.

All the comparing happens in SQL (``pgflow.ensure_flow_compiled``) under a per-flow advisory lock, so two
workers starting at once cannot both compile, and a changed definition is reported, never half-applied.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, cast

from django.db import connections

from pgflow_django.conf import get_settings
from pgflow_django.dsl import Flow

CompileStatus: TypeAlias = Literal["compiled", "verified", "recompiled", "mismatch"]


@dataclass(frozen=True)
class CompileResult:
    """What ``ensure_flow_compiled`` did: created the flow, found it identical, or deleted and rebuilt it."""

    flow_slug: str
    status: CompileStatus
    differences: tuple[str, ...] = ()
    options_updated: tuple[str, ...] = ()


class FlowMismatch(Exception):
    """The database holds a different definition under this slug, and recompiling is not allowed.

    ``kinds`` says what differs: ``shape`` (the DAG), ``routing`` (queue mode and step queues), or both.
    """

    def __init__(self, flow_slug: str, differences: Iterable[str], kinds: Iterable[str] = ("shape",)) -> None:
        self.flow_slug = flow_slug
        self.differences = tuple(differences)
        self.kinds = tuple(kinds)
        what = " and ".join(
            {"shape": "shape", "routing": "routing (queue mode and step queues)"}.get(kind, kind)
            for kind in self.kinds
        )
        super().__init__(
            f"flow {flow_slug!r} differs from its compiled definition in the database "
            f"({what or 'definition'} differs: {'; '.join(self.differences) or 'see pgflow.flow_shape'}); "
            "give the changed flow a new slug "
            f"(e.g. flow.copy(slug='{flow_slug}_v2')), or set PGFLOW['ALLOW_RECOMPILE'] = True in "
            "development to delete the flow with its runs and compile it again"
        )


def compile_flow(flow: Flow, *, allow_recompile: bool | None = None, using: str = "default") -> CompileResult:
    """Compile ``flow`` if new, verify it (updating runtime options) if known; raise ``FlowMismatch``.

    ``allow_recompile`` None follows ``PGFLOW["ALLOW_RECOMPILE"]`` (default: ``settings.DEBUG``).
    """
    if allow_recompile is None:
        allow_recompile = get_settings().allow_recompile
    with connections[using].cursor() as cursor:
        cursor.execute(
            "select pgflow.ensure_flow_compiled(%s, %s::jsonb, %s)::text",
            [flow.slug, json.dumps(flow.shape()), allow_recompile],
        )
        answer: dict[str, Any] = json.loads(cursor.fetchone()[0])
    result = CompileResult(
        flow_slug=flow.slug,
        status=cast(CompileStatus, answer["status"]),
        differences=tuple(answer.get("differences") or ()),
        options_updated=tuple(answer.get("options_updated") or ()),
    )
    if result.status == "mismatch":
        raise FlowMismatch(flow.slug, result.differences, answer.get("mismatch") or ("shape",))
    return result


def compile_flows(
    flows: Iterable[Flow], *, allow_recompile: bool | None = None, using: str = "default"
) -> list[CompileResult]:
    """Compile several flows in order; the first mismatch stops and raises."""
    return [compile_flow(flow, allow_recompile=allow_recompile, using=using) for flow in flows]
