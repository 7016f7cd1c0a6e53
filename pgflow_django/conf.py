"""The ``PGFLOW`` settings dictionary, with defaults."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias

Scheduler: TypeAlias = Literal["workers", "pg_cron"]
SCHEDULERS: tuple[Scheduler, ...] = ("workers", "pg_cron")
OnShapeChange: TypeAlias = Literal["version", "refuse", "replace-if-idle"]
SHAPE_CHANGE_POLICIES: tuple[OnShapeChange, ...] = ("version", "refuse", "replace-if-idle")
"""What start-up compilation may do with a changed flow: add a version beside the others (the default;
runs stay on the version they started on), refuse, or replace an idle flow. Never "replace": deleting
runs that are still running is asked for per invocation (``pgflow_compile F --replace``), not configured."""


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _retention_seconds(value: Any) -> int:
    """``EVENT_RETENTION_SECONDS``: whole seconds, 0 or more."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(
            f"PGFLOW['EVENT_RETENTION_SECONDS'] must be whole seconds (0 or more), got {value!r}"
        )
    return value


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


Pooler: TypeAlias = Literal["transaction"]
POOLERS: tuple[Pooler, ...] = ("transaction",)


def _sample_rate(value: Any) -> float:
    """``TRACE_SAMPLE_RATE``: the share of runs the worker traces, a number from 0 to 1."""
    if not isinstance(value, bool) and isinstance(value, int | float) and 0.0 <= float(value) <= 1.0:
        return float(value)
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(f"PGFLOW['TRACE_SAMPLE_RATE'] must be a number from 0 to 1, got {value!r}")


def _pooler(value: Any) -> Pooler | None:
    """``POOLER``: None (a direct connection, or a session-mode pooler) or ``"transaction"``."""
    if value is None:
        return None
    for pooler in POOLERS:
        if value == pooler:
            return pooler
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(f"PGFLOW['POOLER'] must be None or 'transaction', got {value!r}")


@dataclass(frozen=True)
class Setting:
    """One ``PGFLOW`` key: its default, how its value is read, and the worker option it fills."""

    key: str
    default: Any
    read: Callable[[Any], Any]
    option: str | None = None
    """The ``WorkerOptions`` field (and ``pgflow_worker`` flag) the setting is the default of."""

    @property
    def attribute(self) -> str:
        """Its name on :class:`PgflowSettings`."""
        return self.key.lower()


SETTINGS: Final[tuple[Setting, ...]] = (
    Setting("WORKER_CONCURRENCY", 10, int, "concurrency"),
    Setting("WORKER_BATCH_SIZE", 10, int, "batch_size"),
    # How many ``async def`` handlers a worker runs at once on its event loop, beside its threads
    # (0: they run on the handler threads, one per thread).
    Setting("WORKER_ASYNC_CONCURRENCY", 100, int, "async_concurrency"),
    # Tasks a worker holds (claimed, running or waiting for a thread) while its handlers are short
    # (see worker/slots.py): a claim then reads up to this many, beyond --concurrency and --batch-size.
    Setting("WORKER_PREFETCH", 100, int, "prefetch"),
    Setting("WORKER_POLL_INTERVAL", 1.0, float, "poll_interval"),
    Setting("WORKER_MAX_POLL_SECONDS", 5.0, float, "max_poll_seconds"),
    Setting("WORKER_SHUTDOWN_TIMEOUT", 30.0, float, "shutdown_timeout"),
    Setting("WORKER_HEARTBEAT_SECONDS", 5.0, float, "heartbeat_seconds"),
    Setting("STALLED_CHECK_SECONDS", 15.0, float, "stalled_check_seconds"),
    Setting("COMPLETION_FLUSH_MS", 2.0, float, "completion_flush_ms"),
    Setting("COMPLETION_BATCH_SIZE", 100, int, "completion_batch_size"),
    # CONN_MAX_AGE for the Django connections of a worker's handler threads (None: kept for the
    # worker's life, health-checked before reuse). A fresh connection per task costs a connect and
    # re-planning the engine's functions, so a worker should not inherit a web process's 0.
    Setting("WORKER_CONN_MAX_AGE", None, _optional_float, "conn_max_age"),
    # The worker's Prometheus port (/metrics, /healthz, /readyz; needs the [metrics] extra); None: off.
    Setting("WORKER_METRICS_PORT", None, _optional_int, "metrics_port"),
    Setting("WORKER_METRICS_HOST", "0.0.0.0", str, "metrics_host"),
    # "transaction": the database aliases reach PostgreSQL through a transaction-pooling PgBouncer, so
    # the worker's own connections prepare no statement and LISTEN needs a direct session of its own.
    Setting("POOLER", None, _pooler, "pooler"),
    # The Django alias of a direct (unpooled) connection for the worker's LISTEN (None: the worker's
    # own database, or polling alone when POOLER is "transaction").
    Setting("LISTEN_DATABASE", None, _optional_str, "listen_database"),
    # The Django alias of the pgflow database the admin shows and whose runs its actions change; its
    # pages read where the project's routers send pgflow reads (a replica), see admin_database.
    Setting("ADMIN_DATABASE", "default", str),
    # How long a sent event is kept for the waits that start after it (and its event_id remembered).
    Setting("EVENT_RETENTION_SECONDS", 86400, _retention_seconds),
)
"""The one table of the settings' defaults: ``PgflowSettings``, ``WorkerOptions`` and the
``pgflow_worker`` options (which default to the setting) all take theirs from here."""

DEFAULTS: dict[str, Any] = {
    "FLOWS": [],
    "ON_SHAPE_CHANGE": "version",
    "ALLOW_RECOMPILE": None,  # removed; False is accepted (it meant "refuse"), True is an error
    **{setting.key: setting.default for setting in SETTINGS},
    # "pg_cron": a pg_cron job also fires due schedules, on the server's clock (see docs/schedules.md)
    "SCHEDULER": "workers",
    # The share of runs whose task attempts the worker traces (with an OpenTelemetry SDK), decided
    # per run from its id; a run started inside a trace follows that trace's decision instead.
    "TRACE_SAMPLE_RATE": 1.0,
}


@dataclass(frozen=True)
class PgflowSettings:
    """``settings.PGFLOW`` read with the defaults of :data:`SETTINGS` (built by :func:`get_settings`)."""

    flows: list[str]
    on_shape_change: OnShapeChange
    worker_concurrency: int
    worker_batch_size: int
    worker_async_concurrency: int
    worker_prefetch: int
    worker_poll_interval: float
    worker_max_poll_seconds: float
    worker_shutdown_timeout: float
    worker_heartbeat_seconds: float
    stalled_check_seconds: float
    completion_flush_ms: float
    completion_batch_size: int
    worker_conn_max_age: float | None
    worker_metrics_port: int | None
    worker_metrics_host: str
    pooler: Pooler | None
    listen_database: str | None
    admin_database: str
    event_retention_seconds: int
    scheduler: Scheduler
    trace_sample_rate: float = 1.0


LIVE_HEARTBEATS: Final = 3
"""A worker is live while its last heartbeat is younger than this many heartbeat periods."""


def live_worker_seconds() -> float:
    """The heartbeat window that makes a worker live: ``LIVE_HEARTBEATS`` x
    ``PGFLOW["WORKER_HEARTBEAT_SECONDS"]`` (15 s with the defaults); ``db.queries.LIVE_WORKER`` applies it."""
    return LIVE_HEARTBEATS * get_settings().worker_heartbeat_seconds


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
        **{setting.attribute: setting.read(raw[setting.key]) for setting in SETTINGS},
        scheduler=_scheduler(raw),
        trace_sample_rate=_sample_rate(raw["TRACE_SAMPLE_RATE"]),
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
