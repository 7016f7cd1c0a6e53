"""A database that stopped between two of the migrations ``0007_squashed_0038`` replaces cannot take it.

Django uses a squashed migration only when all or none of the migrations it replaces are applied; for
one stopped in between it would silently migrate nothing. Those migrations were development states
before the first release (docs/upgrading.md, "A development database stopped between 0007 and 0038"),
so ``migrate`` stops with one line naming the fix. A module whose name starts with ``_`` is not loaded
as a migration.
"""

from __future__ import annotations

from typing import Any

SQUASHED = "0007_squashed_0038"
REPLACED = (
    "0007_task_backend",
    "0008_fast_paths",
    "0009_shape_safety",
    "0010_pgflow_fidelity",
    "0011_lock_order",
    "0012_poison_paths",
    "0013_transition_times",
    "0014_schedules",
    "0015_consolidation",
    "0016_observability",
    "0017_admin_console",
    "0018_hot_path",
    "0019_hand_off",
    "0020_priorities",
    "0021_concurrency_limits",
    "0022_partitioned_history",
    "0023_one_home",
    "0024_batch_joins",
    "0025_batch_probes",
    "0026_completion_probe",
    "0027_key_only_probes",
    "0028_wake_after_claims",
    "0029_hot_path_without_jit",
    "0030_limit_wakeups",
    "0031_queue_access",
    "0032_archive_partitions",
    "0033_limit_wake_locked_messages",
    "0034_queue_provisioning",
    "0035_schedule_catch_up",
    "0036_return_unstarted_tasks",
    "0037_schedule_isolation",
    "0038_worker_support_queue",
)


def partial_squash_error(applied: set[str], using: str = "default") -> str | None:
    """The one-line error for a database whose applied pgflow migrations (names) stop inside the squash."""
    done = [name for name in REPLACED if name in applied]
    if not done or len(done) == len(REPLACED):
        return None
    where, option = (
        ("the database", "") if using == "default" else (f"database {using!r}", f" --database {using}")
    )
    return (
        f"{where} stopped at the development migration pgflow.{done[-1]}, which {SQUASHED} replaces: "
        f"with the pgflow-django checkout from before the squash, run `manage.py migrate{option} pgflow "
        "0038_worker_support_queue` (or `pgflow 0006_shared_queues`), then migrate with this release "
        "(docs/upgrading.md)"
    )


def refuse_partial_squash(sender: Any, using: str, **kwargs: Any) -> None:
    """``pre_migrate`` receiver: stop ``migrate`` before it runs anything on such a database."""
    from django.core.management.base import CommandError
    from django.db import connections, router
    from django.db.migrations.recorder import MigrationRecorder

    if not router.allow_migrate(using, sender.label):
        return
    applied = {
        name
        for app, name in MigrationRecorder(connections[using]).applied_migrations()
        if app == sender.label
    }
    message = partial_squash_error(applied, using)
    if message:
        raise CommandError(message)
