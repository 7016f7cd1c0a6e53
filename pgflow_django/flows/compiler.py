"""Compile or verify a flow against the database: the one path used by worker startup and ``pgflow_compile``.

All the comparing happens in SQL (``pgflow.compile_flow_version``) under a per-flow advisory lock, so two
workers starting at once cannot both compile, and a changed definition is never half-applied. By default
a changed definition becomes a new version of the flow, beside the others: runs stay on the version they
started on (docs/upgrading.md, "Deploying a changed flow"). ``PGFLOW["ON_SHAPE_CHANGE"] = "refuse"``
refuses it instead; a flow is replaced only when asked: ``on_change="replace"`` (``pgflow_compile F
--replace``, after showing the runs it deletes), or ``"replace-if-idle"`` for a flow with no unfinished
run. Nothing is ever inferred from ``settings.DEBUG``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, cast

from django.db import ProgrammingError, connections

from pgflow_django.conf import get_settings
from pgflow_django.db.dbguard import raise_if_not_migrated
from pgflow_django.db.query import fetch_value
from pgflow_django.flows import queries
from pgflow_django.flows.dsl import Flow, descendant_flows

logger = logging.getLogger("pgflow_django.flows.compiler")

CompileStatus: TypeAlias = Literal["compiled", "verified", "versioned", "recompiled", "mismatch"]
OnChange: TypeAlias = Literal["version", "refuse", "replace-if-idle", "replace"]


@dataclass(frozen=True)
class CompileResult:
    """What ``compile_flow_version`` did: created the flow, found its version, added a version
    (``versioned``), or replaced it.

    ``flow_slug`` is the version's stored slug (``orders``, ``orders___v2``): bind the definition to it
    (``flow.bound_to(result.flow_slug)``) to serve that version. ``generation`` is the number the
    database gave this compilation (a worker's claim compares it); after a replacement, ``runs`` and
    ``unfinished_runs`` count what was deleted.
    """

    flow_slug: str
    status: CompileStatus
    version_number: int = 1
    differences: tuple[str, ...] = ()
    options_updated: tuple[str, ...] = ()
    generation: int = 0
    runs: int = 0
    unfinished_runs: int = 0


def runs_phrase(runs: int, unfinished: int) -> str:
    """``deletes 7 runs (1 unfinished)``: what replacing a flow costs, shown before it happens."""
    return f"deletes {runs} run{'' if runs == 1 else 's'} ({unfinished} unfinished)"


class FlowMismatch(Exception):
    """The database holds a different definition under this slug, and it was not replaced.

    ``kinds`` says what differs: ``shape`` (the DAG), ``routing`` (queue mode and step queues), or both.
    ``runs``/``unfinished_runs`` count what a replacement would delete; ``refused`` says why a
    requested replacement did not happen (``unfinished``, ``confirmation``), None when none was asked.
    """

    def __init__(
        self,
        flow_slug: str,
        differences: Iterable[str],
        kinds: Iterable[str] = ("shape",),
        *,
        runs: int = 0,
        unfinished_runs: int = 0,
        refused: str | None = None,
    ) -> None:
        self.flow_slug = flow_slug
        self.differences = tuple(differences)
        self.kinds = tuple(kinds)
        self.runs = runs
        self.unfinished_runs = unfinished_runs
        self.refused = refused
        what = " and ".join(
            {"shape": "shape", "routing": "routing (queue mode and step queues)"}.get(kind, kind)
            for kind in self.kinds
        )
        cost = runs_phrase(runs, unfinished_runs)
        why = {
            "unfinished": f"PGFLOW['ON_SHAPE_CHANGE'] = 'replace-if-idle' left it alone: "
            f"{unfinished_runs} of its runs are unfinished; ",
            "confirmation": f"runs were started since the count was confirmed (it now {cost}), "
            "nothing was deleted; ",
        }.get(refused or "", "")
        listed = "; ".join(self.differences) or "see pgflow.flow_shape"
        super().__init__(
            f"flow {flow_slug!r} differs from its compiled definition in the database "
            f"({what or 'definition'} differs: {listed}); {why}"
            f"add it as a new version (PGFLOW['ON_SHAPE_CHANGE'] = 'version', the default; a named version "
            f"needs a new name), or replace it with manage.py pgflow_compile {flow_slug} --replace ({cost})"
        )


def compile_flow(
    flow: Flow,
    *,
    on_change: OnChange | None = None,
    confirmed_runs: int | None = None,
    using: str = "default",
) -> CompileResult:
    """Compile ``flow`` if new, verify it (updating runtime options) if known; raise ``FlowMismatch``.

    ``on_change`` None follows ``PGFLOW["ON_SHAPE_CHANGE"]`` (default ``"version"``). ``"replace"``
    deletes the flow with its runs and compiles it again; with ``confirmed_runs`` (the run count a
    person confirmed) it refuses instead when the flow has more runs by then.

    The flows it starts as child flows (``flow.subflow(flow=<Flow>)``) are compiled first, under
    ``PGFLOW["ON_SHAPE_CHANGE"]``; a cycle of child flows is a ``FlowDefinitionError``.
    """
    children = descendant_flows(flow)
    try:
        for child in children:
            _compile_flow(child, None, None, using)
        return _compile_flow(flow, on_change, confirmed_runs, using)
    except ProgrammingError as exc:
        raise_if_not_migrated(exc, using)
        raise


def _compile_flow(
    flow: Flow, on_change: OnChange | None, confirmed_runs: int | None, using: str
) -> CompileResult:
    policy: OnChange = get_settings().on_shape_change if on_change is None else on_change
    with connections[using].cursor() as cursor:
        answer: dict[str, Any] = json.loads(
            fetch_value(
                cursor,
                queries.COMPILE_FLOW_VERSION,
                [flow.version_of, json.dumps(flow.shape()), flow.version_key, policy, confirmed_runs],
            )
        )
    result = CompileResult(
        flow_slug=str(answer.get("flow_slug") or flow.slug),
        status=cast(CompileStatus, answer["status"]),
        version_number=int(answer.get("version_number") or 1),
        differences=tuple(answer.get("differences") or ()),
        options_updated=tuple(answer.get("options_updated") or ()),
        generation=int(answer.get("generation") or 0),
        runs=int(answer.get("runs") or 0),
        unfinished_runs=int(answer.get("unfinished_runs") or 0),
    )
    if result.status == "mismatch":
        raise FlowMismatch(
            result.flow_slug,
            result.differences,
            answer.get("mismatch") or ("shape",),
            runs=result.runs,
            unfinished_runs=result.unfinished_runs,
            refused=answer.get("refused"),
        )
    with connections[using].cursor() as cursor:
        fetch_value(
            cursor,
            queries.SET_FLOW_LIMITS,
            [result.flow_slug, json.dumps([lim.row() for lim in flow.limits])],
        )
    if result.status == "versioned":
        logger.info(
            "flow %s: its changed definition is version %d (%s); runs of earlier versions finish there",
            flow.version_of,
            result.version_number,
            result.flow_slug,
        )
    if result.status == "recompiled":
        logger.warning(
            "replaced flow %s (on_change=%s): deleted %d run(s) (%d unfinished) and compiled it again: %s",
            result.flow_slug,
            policy,
            result.runs,
            result.unfinished_runs,
            "; ".join(result.differences),
        )
    return result


def compile_flows(
    flows: Iterable[Flow], *, on_change: OnChange | None = None, using: str = "default"
) -> list[CompileResult]:
    """Compile several flows in order; the first mismatch stops and raises."""
    return [compile_flow(flow, on_change=on_change, using=using) for flow in flows]
