"""What one worker process does and how hard it pushes: command-line values over ``PGFLOW`` settings."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from pgflow_django.conf import SETTINGS, get_settings

_DEFAULT = {setting.option: setting.default for setting in SETTINGS if setting.option}


@dataclass(frozen=True)
class WorkerOptions:
    """Validated once at startup so a bad value is one clear error, never a crash mid-loop."""

    step_slug: str | None = None
    """A step worker's step (its flow is step-queued); None for a plain flow's worker."""
    queue: str | None = None
    """A shared queue: the worker polls it for every routed flow it was given."""
    concurrency: int = _DEFAULT["concurrency"]
    batch_size: int = _DEFAULT["batch_size"]
    async_concurrency: int = _DEFAULT["async_concurrency"]
    """``async def`` handlers run at once on the worker's event loop (0: on the handler threads)."""
    prefetch: int = _DEFAULT["prefetch"]
    """Tasks held while handlers are short (at most; never fewer than ``concurrency``). Off (0) when
    the concurrency or the batch size was chosen (flag or setting) and the prefetch was not."""
    poll_interval: float = _DEFAULT["poll_interval"]
    max_poll_seconds: float = _DEFAULT["max_poll_seconds"]
    shutdown_timeout: float = _DEFAULT["shutdown_timeout"]
    heartbeat_seconds: float = _DEFAULT["heartbeat_seconds"]
    stalled_check_seconds: float = _DEFAULT["stalled_check_seconds"]
    completion_flush_ms: float = _DEFAULT["completion_flush_ms"]
    completion_batch_size: int = _DEFAULT["completion_batch_size"]
    conn_max_age: float | None = _DEFAULT["conn_max_age"]
    """CONN_MAX_AGE of the handler threads' Django connections (None: for the worker's life)."""
    metrics_port: int | None = _DEFAULT["metrics_port"]
    """Serve ``/metrics``, ``/healthz`` and ``/readyz`` on this port (0: any free one; None: off)."""
    metrics_host: str = _DEFAULT["metrics_host"]
    pooler: str | None = _DEFAULT["pooler"]
    """``"transaction"``: the database is reached through a transaction-pooling PgBouncer."""
    listen_database: str | None = _DEFAULT["listen_database"]
    """The Django alias of a direct session for LISTEN (``PGFLOW["LISTEN_DATABASE"]``)."""
    listen_url: str | None = None
    """``--listen-url``: a libpq URL of a direct session for LISTEN (wins over ``listen_database``)."""
    read_visibility_seconds: int = 5
    """The shortest time a claim's read hides its batch; a plain or step worker hides it for its
    longest step timeout + 2 s, the visibility the claim gives a task, so the claim need not write it."""
    using: str = "default"
    max_tasks: int | None = None
    """``--max-tasks``: stop (exit 0) once this many tasks were claimed and have finished."""
    until_empty: bool = False
    """``--until-empty``: stop (exit 0) once a read finds nothing runnable and no task is in flight."""
    scheduler: bool = True
    """Fire due schedules on the maintenance loop (``--no-scheduler`` turns it off)."""

    @classmethod
    def from_settings(cls, **overrides: Any) -> WorkerOptions:
        """Settings fill every value the caller leaves as None."""
        conf = get_settings()
        values: dict[str, Any] = {
            setting.option: getattr(conf, setting.attribute) for setting in SETTINGS if setting.option
        }
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise TypeError(f"unknown worker option(s): {', '.join(unknown)}")
        given = {key: value for key, value in overrides.items() if value is not None}
        values.update(given)
        chosen = set(given) | {setting.option for setting in SETTINGS if setting.key in _user_keys()}
        if "prefetch" not in chosen and chosen & {"concurrency", "batch_size"}:
            values["prefetch"] = 0  # threads or batch size chosen explicitly: honoured exactly
        options = cls(**values)
        options.validate()
        return options

    def validate(self) -> None:
        """Raise ValueError naming the first option out of range."""
        positive_ints = ("concurrency", "batch_size", "completion_batch_size", "read_visibility_seconds")
        for name in positive_ints:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name.replace('_', '-')} must be a whole number >= 1, got {value!r}")
        for name in ("prefetch", "async_concurrency"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name.replace('_', '-')} must be a whole number >= 0, got {value!r}")
        positive = ("poll_interval", "max_poll_seconds", "heartbeat_seconds", "stalled_check_seconds")
        for name in positive:
            if not getattr(self, name) > 0:
                raise ValueError(f"{name.replace('_', '-')} must be > 0, got {getattr(self, name)!r}")
        if self.max_tasks is not None and (
            isinstance(self.max_tasks, bool) or not isinstance(self.max_tasks, int) or self.max_tasks < 1
        ):
            raise ValueError(f"max-tasks must be a whole number >= 1, got {self.max_tasks!r}")
        if self.conn_max_age is not None and self.conn_max_age < 0:
            raise ValueError(f"WORKER_CONN_MAX_AGE must be None or >= 0, got {self.conn_max_age!r}")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ValueError(f"metrics-port must be a port from 0 to 65535, got {self.metrics_port!r}")
        for name in ("shutdown_timeout", "completion_flush_ms"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name.replace('_', '-')} must be >= 0, got {getattr(self, name)!r}")

    def limits_text(self) -> str:
        """How the start-up line names the limits that end the worker (empty when none)."""
        parts = [f" max-tasks={self.max_tasks}"] if self.max_tasks else []
        if self.until_empty:
            parts.append(" until-empty")
        return "".join(parts)

    @property
    def max_connections(self) -> int:
        """Engine + completer + listener, plus one Django connection per handler thread."""
        return self.concurrency + 3


def _user_keys() -> set[str]:
    """The ``PGFLOW`` keys the project set itself (a default is not a choice)."""
    from django.conf import settings

    return set(getattr(settings, "PGFLOW", {}) or {})
