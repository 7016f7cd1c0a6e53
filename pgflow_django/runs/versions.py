"""The versions of a flow: what ``pgflow_versions`` and the admin list, and deleting a drained one.

A changed definition compiled under an existing slug is a new version (``pgflow.compile_flow_version``):
version 1 keeps the flow's slug, version N >= 2 is stored as ``slug___vN`` with its own queues. Runs stay
on the version they started on; a version is *drained* once it is not the newest and has no unfinished
run, and only then can it be deleted.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import connections, transaction

from pgflow_django.conf import live_worker_seconds
from pgflow_django.db.query import fetch_all, fetch_value
from pgflow_django.flows.slugs import validate_flow_slug, version_of
from pgflow_django.runs import queries
from pgflow_django.runs.operations import FlowNotFound, FlowSummary, delete_flow, not_found

__all__ = ["FlowVersion", "VersionInUse", "delete_version", "find_version", "flow_versions", "version_label"]


def version_label(number: int, version: str | None) -> str:
    """``v2``, or ``v2 (2026-12)`` for a version the code names (a ``shape:`` digest is not shown)."""
    named = version is not None and not version.startswith("shape:")
    return f"v{number} ({version})" if named else f"v{number}"


class VersionInUse(Exception):
    """A version that cannot be deleted: it is the newest one, or it has unfinished runs."""


@dataclass(frozen=True)
class FlowVersion:
    """One version of a flow, with its runs by status and the live workers that serve it."""

    flow_slug: str
    """Its stored slug: the flow's slug for version 1, ``slug___vN`` for version N."""
    version_of: str
    number: int
    version: str | None
    """The code's ``Flow(..., version=)`` name, ``shape:`` and a digest, or None (not claimed yet)."""
    created_at: datetime
    newest: bool
    unfinished: int
    completed: int
    failed: int
    first_started_at: datetime | None
    last_started_at: datetime | None
    live_workers: int

    @property
    def name(self) -> str:
        return version_label(self.number, self.version)

    @property
    def drained(self) -> bool:
        """Not the newest version, and no unfinished run: nothing needs its workers any more."""
        return not self.newest and self.unfinished == 0

    @property
    def state(self) -> str:
        """``newest`` (new runs start there), ``serving`` (earlier, with unfinished runs) or ``drained``."""
        if self.newest:
            return "newest"
        return "drained" if self.drained else "serving"


def flow_versions(slug: str, *, using: str = "default") -> list[FlowVersion]:
    """Every version of the flow ``slug`` (its own slug, or one version's stored slug), oldest first;
    ``FlowNotFound`` when none is compiled."""
    validate_flow_slug(version_of(slug))
    with connections[using].cursor() as cursor:
        rows = fetch_all(cursor, queries.FLOW_VERSIONS, {"slug": slug, "live_seconds": live_worker_seconds()})
    if not rows:
        raise FlowNotFound(not_found(version_of(slug), using))
    return [
        FlowVersion(
            flow_slug=row.flow_slug,
            version_of=row.version_of,
            number=row.version_number,
            version=row.version,
            created_at=row.created_at,
            newest=row.newest,
            unfinished=row.started,
            completed=row.completed,
            failed=row.failed,
            first_started_at=row.first_started_at,
            last_started_at=row.last_started_at,
            live_workers=row.live_workers,
        )
        for row in rows
    ]


def find_version(versions: list[FlowVersion], wanted: str) -> FlowVersion:
    """The version ``wanted`` names: its number (``2`` or ``v2``), its name, or its stored slug."""
    number = wanted[1:] if wanted[:1] in ("v", "V") else wanted
    for candidate in versions:
        if wanted in (candidate.version, candidate.flow_slug) or number == str(candidate.number):
            return candidate
    listed = ", ".join(candidate.name for candidate in versions)
    raise FlowNotFound(f"flow {versions[0].version_of!r} has no version {wanted!r} (versions: {listed})")


def delete_version(slug: str, wanted: str, *, using: str = "default") -> FlowSummary:
    """Delete one drained version of a flow with its runs and queues; ``VersionInUse`` for the newest
    version or one with unfinished runs. Inside the deletion's transaction, its starts are held and its
    runs locked before they are counted, so no run started or retried meanwhile is deleted."""
    with transaction.atomic(using=using):
        found = find_version(flow_versions(slug, using=using), wanted)
        with connections[using].cursor() as cursor:
            fetch_value(cursor, queries.HOLD_FLOW_STARTS, [found.flow_slug])
            unfinished = int(fetch_value(cursor, queries.LOCK_VERSION_RUNS, [found.flow_slug]))
        chosen = find_version(flow_versions(slug, using=using), found.flow_slug)
        if chosen.newest:
            raise VersionInUse(
                f"{chosen.name} is the newest version of flow {chosen.version_of!r}: new runs start there; "
                f"it goes with the flow, once the earlier versions are deleted (manage.py pgflow_delete_flow "
                f"{chosen.version_of})"
            )
        if unfinished:
            raise VersionInUse(
                f"{chosen.name} of flow {chosen.version_of!r} has {unfinished} unfinished run(s): "
                "let a worker with its code finish them, or cancel them, then delete it"
            )
        return delete_flow(chosen.flow_slug, using=using)
