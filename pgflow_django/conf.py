"""The ``PGFLOW`` settings dictionary, with defaults."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

Scheduler: TypeAlias = Literal["workers", "pg_cron"]
SCHEDULERS: tuple[Scheduler, ...] = ("workers", "pg_cron")
OnShapeChange: TypeAlias = Literal["refuse", "replace-if-idle"]
SHAPE_CHANGE_POLICIES: tuple[OnShapeChange, ...] = ("refuse", "replace-if-idle")
"""What start-up compilation may do with a changed flow. Never "replace": deleting runs that are
still running is asked for per invocation (``pgflow_compile F --replace``), not configured."""

DEFAULTS: dict[str, Any] = {
    "FLOWS": [],
    "ON_SHAPE_CHANGE": "refuse",
    "ALLOW_RECOMPILE": None,  # removed; False is accepted (it meant "refuse"), True is an error
    "WORKER_CONCURRENCY": 10,
    "WORKER_BATCH_SIZE": 10,
    "WORKER_POLL_INTERVAL": 1.0,
    "WORKER_MAX_POLL_SECONDS": 5.0,
    "WORKER_SHUTDOWN_TIMEOUT": 30.0,
    "WORKER_HEARTBEAT_SECONDS": 5.0,
    "STALLED_CHECK_SECONDS": 15.0,
    "COMPLETION_FLUSH_MS": 2.0,
    "COMPLETION_BATCH_SIZE": 100,
    # CONN_MAX_AGE for the Django connections of a worker's handler threads (None: kept for the
    # worker's life, health-checked before reuse). A fresh connection per task costs a connect and
    # re-planning the engine's functions, so a worker should not inherit a web process's 0.
    "WORKER_CONN_MAX_AGE": None,
    # "pg_cron": a pg_cron job also fires due schedules, on the server's clock (see docs/schedules.md)
    "SCHEDULER": "workers",
}


@dataclass(frozen=True)
class PgflowSettings:
    flows: list[str] = field(default_factory=list)
    on_shape_change: OnShapeChange = "refuse"
    worker_concurrency: int = 10
    worker_batch_size: int = 10
    worker_poll_interval: float = 1.0
    worker_max_poll_seconds: float = 5.0
    worker_shutdown_timeout: float = 30.0
    worker_heartbeat_seconds: float = 5.0
    stalled_check_seconds: float = 15.0
    completion_flush_ms: float = 2.0
    completion_batch_size: int = 100
    worker_conn_max_age: float | None = None
    scheduler: Scheduler = "workers"


def get_settings() -> PgflowSettings:
    """Read ``settings.PGFLOW`` now (not at import), so tests can override it."""
    from django.conf import settings

    raw: dict[str, Any] = dict(DEFAULTS)
    user = getattr(settings, "PGFLOW", {}) or {}
    unknown = sorted(set(user) - set(DEFAULTS))
    if unknown:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(
            f"PGFLOW has unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(sorted(DEFAULTS))}"
        )
    raw.update(user)
    return PgflowSettings(
        flows=list(raw["FLOWS"]),
        on_shape_change=_on_shape_change(raw),
        worker_concurrency=int(raw["WORKER_CONCURRENCY"]),
        worker_batch_size=int(raw["WORKER_BATCH_SIZE"]),
        worker_poll_interval=float(raw["WORKER_POLL_INTERVAL"]),
        worker_max_poll_seconds=float(raw["WORKER_MAX_POLL_SECONDS"]),
        worker_shutdown_timeout=float(raw["WORKER_SHUTDOWN_TIMEOUT"]),
        worker_heartbeat_seconds=float(raw["WORKER_HEARTBEAT_SECONDS"]),
        stalled_check_seconds=float(raw["STALLED_CHECK_SECONDS"]),
        completion_flush_ms=float(raw["COMPLETION_FLUSH_MS"]),
        completion_batch_size=int(raw["COMPLETION_BATCH_SIZE"]),
        worker_conn_max_age=None if raw["WORKER_CONN_MAX_AGE"] is None else float(raw["WORKER_CONN_MAX_AGE"]),
        scheduler=_scheduler(raw),
    )


def _scheduler(raw: dict[str, Any]) -> Scheduler:
    from django.core.exceptions import ImproperlyConfigured

    for scheduler in SCHEDULERS:
        if raw["SCHEDULER"] == scheduler:
            return scheduler
    raise ImproperlyConfigured(
        f"PGFLOW['SCHEDULER'] must be one of {', '.join(map(repr, SCHEDULERS))}, got {raw['SCHEDULER']!r}"
    )


def _on_shape_change(raw: dict[str, Any]) -> OnShapeChange:
    """``ON_SHAPE_CHANGE``, validated; the removed ``ALLOW_RECOMPILE = True`` is refused, never
    mapped, because it used to delete unfinished runs and no setting may do that any more."""
    from django.core.exceptions import ImproperlyConfigured

    if raw["ALLOW_RECOMPILE"]:
        raise ImproperlyConfigured(
            "PGFLOW['ALLOW_RECOMPILE'] = True was removed (it deleted every run of a changed flow "
            "without asking): set PGFLOW['ON_SHAPE_CHANGE'] = 'replace-if-idle' in development, or "
            "replace a flow explicitly with manage.py pgflow_compile FLOW --replace"
        )
    value = raw["ON_SHAPE_CHANGE"]
    for policy in SHAPE_CHANGE_POLICIES:
        if value == policy:
            return policy
    raise ImproperlyConfigured(
        f"PGFLOW['ON_SHAPE_CHANGE'] must be one of {', '.join(map(repr, SHAPE_CHANGE_POLICIES))}, "
        f"got {value!r}"
    )
