"""Database-side health for exec probes and cron (``manage.py pgflow_health``): one line per problem.

It reads the same bounded statement as the database-wide metrics (``db.queries.database_metrics``), so a
probe costs what one scrape costs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pgflow_django.flows.slugs import version_of
from pgflow_django.worker.preflight import PreflightError, check_database


def problems(
    flows: Iterable[str] | None = None, max_queue_age: float | None = None, using: str = "default"
) -> list[str]:
    """What is wrong, one line each (empty: healthy): the database unreachable or not migrated, a
    flow step no live worker runs, a queue whose oldest visible message is older than
    ``max_queue_age`` seconds, a paused subscription. ``flows`` narrows it to some flows (default:
    every flow compiled in the database)."""
    from django.db import DatabaseError

    from pgflow_django.db.connect import first_line
    from pgflow_django.observability.metrics import database_samples

    try:
        check_database(using)
        samples = database_samples(using)
    except PreflightError as exc:
        return [str(exc)]
    except DatabaseError as exc:
        return [f"cannot read the database {using!r}: {first_line(exc)}"]
    wanted = None if flows is None else set(flows)
    return _judge(samples, wanted, max_queue_age)


def _judge(samples: list[Any], wanted: set[str] | None, max_queue_age: float | None) -> list[str]:
    found: list[str] = []
    steps = [s for s in samples if s.name == "live_workers" and _wanted(s.flow_slug, wanted)]
    known = {s.flow_slug for s in steps} | {version_of(s.flow_slug) for s in steps}
    for slug in sorted((wanted or set()) - known):
        found.append(f"flow {slug!r} is not compiled in the database; run manage.py pgflow_compile {slug}")
    paused = {
        (s.flow_slug, s.step_slug): s.status
        for s in samples
        if s.name == "paused" and s.value and _wanted(s.flow_slug, wanted)
    }
    for (flow, step), reason in sorted(paused.items()):
        found.append(
            f"flow {flow} step {step} is paused ({reason}); clear it with manage.py pgflow_resume {flow}"
        )
    unfinished = {s.flow_slug: int(s.value) for s in samples if s.name == "runs" and s.status == "started"}
    for sample in sorted(steps, key=lambda s: (s.flow_slug, s.step_slug)):
        if not sample.value and (sample.flow_slug, sample.step_slug) not in paused and sample.status:
            found.append(
                f"flow {version_of(sample.flow_slug)}: no live worker runs step {sample.step_slug} of an "
                f"earlier version ({sample.flow_slug}), which has {unfinished.get(sample.flow_slug, 0)} "
                "unfinished run(s); start a worker with that version's code, or cancel them "
                f"(manage.py pgflow_versions {version_of(sample.flow_slug)})"
            )
        elif not sample.value and (sample.flow_slug, sample.step_slug) not in paused:
            found.append(
                f"no live worker runs flow {sample.flow_slug} step {sample.step_slug}; start "
                f"manage.py pgflow_worker for it"
            )
    if max_queue_age is not None:
        queues = {s.queue_name for s in steps}
        for sample in samples:
            if (
                sample.name == "queue_oldest_visible_age"
                and sample.queue_name in queues
                and sample.value > max_queue_age
            ):
                found.append(
                    f"queue {sample.queue_name}: oldest visible message is {sample.value:.0f}s old "
                    f"(limit {max_queue_age:g}s); add workers or check they are running"
                )
    return found


def _wanted(flow_slug: str, wanted: set[str] | None) -> bool:
    """``--flow F`` asks about every version of F (or one version, by its stored slug)."""
    return wanted is None or flow_slug in wanted or version_of(flow_slug) in wanted
