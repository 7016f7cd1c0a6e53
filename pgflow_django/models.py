"""Read-only Django models of the tables in schema ``pgflow``, for queries, the admin and reports.

The engine's state changes only through its SQL API (functions in schema ``pgflow``), whose locks and
claim fencing keep runs consistent; an ORM write would bypass them, so every write path here raises
``ReadOnlyError``. The tables are created by migrations, never by Django (``managed = False``), and
``tests/migration/test_models_catalog.py`` proves each model matches its table, indexes included.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from django.db import models
from django.db.models import F, Func, Q
from django.db.models.functions import Lower

from pgflow_django.flows.task_names import run_flow_name

_M = TypeVar("_M", bound=models.Model)


class ReadOnlyError(RuntimeError):
    """An ORM write was attempted on a pgflow table."""


def _refuse(target: str, operation: str) -> NoReturn:
    raise ReadOnlyError(
        f"{target}.{operation}() is not allowed: pgflow tables are read-only from Django; writes go "
        "through the SQL API (functions in schema pgflow, e.g. pgflow_django.start_flow)"
    )


class ReadOnlyQuerySet(models.QuerySet[_M]):
    """A queryset whose bulk writes raise ``ReadOnlyError``."""

    def _refuse(self, operation: str) -> NoReturn:
        _refuse(f"{self.model.__name__}.objects", operation)

    def create(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse("create")

    def get_or_create(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse("get_or_create")

    def update_or_create(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse("update_or_create")

    def bulk_create(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse("bulk_create")

    def bulk_update(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse("bulk_update")

    def update(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse("update")

    def delete(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse("delete")


ReadOnlyManager = models.Manager.from_queryset(ReadOnlyQuerySet)


class ReadOnlyModel(models.Model):
    """Base of the pgflow models: reads only; ``save()`` and ``delete()`` raise ``ReadOnlyError``."""

    objects = ReadOnlyManager()

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse(type(self).__name__, "save")

    def delete(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse(type(self).__name__, "delete")


class PauseReason(models.TextChoices):
    FATAL = "fatal"
    OPERATOR = "operator"


class StepType(models.TextChoices):
    SINGLE = "single"
    MAP = "map"


class StepKind(models.TextChoices):
    HANDLER = "handler", "runs a handler"
    EVENT = "event", "waits for an event"
    SLEEP = "sleep", "sleeps until a time"
    SUBFLOW = "subflow", "runs a child flow"


class WaitKind(models.TextChoices):
    EVENT = "event"
    SLEEP = "sleep"
    SUBFLOW = "subflow"


class QueueMode(models.TextChoices):
    FLOW = "flow", "one queue for the flow"
    STEP = "step", "a private queue per step"
    ROUTED = "routed", "declared shared queues"


class WhenPolicy(models.TextChoices):
    """What a step does when its condition is unmet (``when_unmet``) or its retries run out."""

    FAIL = "fail"
    SKIP = "skip"
    SKIP_CASCADE = "skip-cascade"


class RunStatus(models.TextChoices):
    STARTED = "started"
    COMPLETED = "completed"
    FAILED = "failed"


class StepStatus(models.TextChoices):
    CREATED = "created"
    STARTED = "started"
    COMPLETED = "completed"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"


class SkipReason(models.TextChoices):
    CONDITION_UNMET = "condition_unmet"
    HANDLER_FAILED = "handler_failed"
    DEPENDENCY_SKIPPED = "dependency_skipped"


class TaskStatus(models.TextChoices):
    QUEUED = "queued"
    STARTED = "started"
    COMPLETED = "completed"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"


def _flow_fk(related_name: str) -> models.ForeignKey[Flow, Flow]:
    return models.ForeignKey(
        "Flow",
        models.DO_NOTHING,
        db_column="flow_slug",
        db_constraint=False,
        db_index=False,
        related_name=related_name,
    )


def _run_fk(related_name: str) -> models.ForeignKey[Run, Run]:
    return models.ForeignKey(
        "Run",
        models.DO_NOTHING,
        db_column="run_id",
        db_constraint=False,
        db_index=False,
        related_name=related_name,
    )


class Flow(ReadOnlyModel):
    """``pgflow.flows``: one row per compiled flow; its options are the defaults of its steps."""

    flow_slug = models.TextField(primary_key=True)
    opt_max_attempts = models.IntegerField()
    opt_base_delay = models.IntegerField()
    opt_timeout = models.IntegerField()
    created_at = models.DateTimeField()
    queue_mode = models.TextField(choices=QueueMode.choices, default=QueueMode.FLOW)
    generation = models.BigIntegerField(editable=False)
    """A fresh number per compilation: a worker compiled against another one claims nothing."""
    opt_priority = models.SmallIntegerField(default=0)
    """The claim priority of a run started without one (a step's own ``opt_priority`` comes first)."""
    version_of = models.TextField(editable=False)
    """The slug the flow was defined with: version 1 is stored under it, version N >= 2 as ``slug___vN``."""
    version_number = models.IntegerField(editable=False)
    version = models.TextField(null=True)
    """The code's ``Flow(..., version=)`` name, or ``shape:`` and a digest of its definition."""

    class Meta:
        managed = False
        db_table = 'pgflow"."flows'
        constraints = [
            models.UniqueConstraint(Lower("flow_slug"), name="flows_slug_lower_key"),
            models.UniqueConstraint(
                fields=["version_of", "version"], name="flows_version_key", condition=Q(version__isnull=False)
            ),
        ]
        indexes = [models.Index(fields=["version_of", "version_number"], name="flows_version_of_idx")]
        permissions = [("pause_flow", "Can pause and resume a flow's workers")]

    def __str__(self) -> str:
        return self.flow_slug


class Step(ReadOnlyModel):
    """``pgflow.steps``: the steps of a flow in definition order (``step_index``)."""

    pk = models.CompositePrimaryKey("flow_id", "step_slug")
    flow = _flow_fk("steps")
    step_slug = models.TextField()
    step_type = models.TextField(choices=StepType.choices)
    step_index = models.IntegerField()
    deps_count = models.IntegerField()
    opt_max_attempts = models.IntegerField(null=True)
    opt_base_delay = models.IntegerField(null=True)
    opt_timeout = models.IntegerField(null=True)
    opt_start_delay = models.IntegerField(null=True)
    required_input_pattern = models.JSONField(null=True)
    forbidden_input_pattern = models.JSONField(null=True)
    when_unmet = models.TextField(choices=WhenPolicy.choices)
    when_exhausted = models.TextField(choices=WhenPolicy.choices)
    created_at = models.DateTimeField()
    queue_name = models.TextField()
    opt_priority = models.SmallIntegerField(null=True)
    """The claim priority of this step's tasks in a run started without one (None: the flow's)."""
    step_kind = models.TextField(choices=StepKind.choices, default=StepKind.HANDLER)
    """What completes the step's task: a worker's handler, an event, or a time (docs/durable.md)."""
    wait_event = models.TextField(null=True)
    wait_key = models.TextField(null=True)
    """An event step's key: a JSON path into the run's input whose value the event is sent with."""
    wait_seconds = models.IntegerField(null=True)
    """An event step's timeout; a sleep step's fixed duration."""
    sleep_until = models.TextField(null=True)
    """A sleep step's time: a JSON path into its input naming an ISO-8601 timestamp."""
    subflow_slug = models.TextField(null=True)
    """A subflow step's child flow: each of its tasks is one run of it."""

    class Meta:
        managed = False
        db_table = 'pgflow"."steps'
        ordering = ["flow_id", "step_index"]
        constraints = [
            models.UniqueConstraint(fields=["flow", "step_index"], name="steps_flow_slug_step_index_key"),
            models.UniqueConstraint("flow", Lower("step_slug"), name="steps_slug_lower_key"),
        ]

    def __str__(self) -> str:
        return f"{self.flow_id}.{self.step_slug}"


class Dep(ReadOnlyModel):
    """``pgflow.deps``: ``step_slug`` depends on ``dep_slug`` within one flow."""

    pk = models.CompositePrimaryKey("flow_id", "dep_slug", "step_slug")
    flow = _flow_fk("deps")
    dep_slug = models.TextField()
    step_slug = models.TextField()
    created_at = models.DateTimeField()

    class Meta:
        managed = False
        db_table = 'pgflow"."deps'
        indexes = [models.Index(fields=["flow", "step_slug"], name="deps_step_idx")]

    def __str__(self) -> str:
        return f"{self.flow_id}: {self.dep_slug} -> {self.step_slug}"


class Worker(ReadOnlyModel):
    """``pgflow.workers``: one row per worker process, kept alive by its heartbeat."""

    worker_id = models.UUIDField(primary_key=True)
    queue_name = models.TextField()
    function_name = models.TextField()
    started_at = models.DateTimeField()
    last_heartbeat_at = models.DateTimeField()
    deprecated_at = models.DateTimeField(null=True)
    stopped_at = models.DateTimeField(null=True)

    class Meta:
        managed = False
        db_table = 'pgflow"."workers'
        indexes = [
            models.Index(fields=["queue_name", "last_heartbeat_at"], name="workers_queue_heartbeat_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.queue_name}/{self.worker_id}"


class SharedQueue(ReadOnlyModel):
    """``pgflow.shared_queues``: a queue declared shared by pgflow, which routed flows select."""

    queue_name = models.TextField(primary_key=True)
    declared_at = models.DateTimeField()

    class Meta:
        managed = False
        db_table = 'pgflow"."shared_queues'

    def __str__(self) -> str:
        return self.queue_name


class HistoryPartitioning(ReadOnlyModel):
    """``pgflow.history_partitioning``: one row once ``pgflow_partition`` partitioned the history."""

    singleton = models.BooleanField(primary_key=True)
    partition_interval = models.DurationField()
    ahead = models.IntegerField()
    partitioned_at = models.DateTimeField()
    archives = models.BooleanField(default=False)

    class Meta:
        managed = False
        db_table = 'pgflow"."history_partitioning'

    def __str__(self) -> str:
        return f"{self.partition_interval} per partition"


class WorkerSupport(ReadOnlyModel):
    """``pgflow.worker_support``: the exact (flow, step) pairs a worker runs, each on its queue."""

    pk = models.CompositePrimaryKey("worker_id", "flow_slug", "step_slug")
    worker = models.ForeignKey(
        Worker,
        models.DO_NOTHING,
        db_column="worker_id",
        db_constraint=False,
        db_index=False,
        related_name="supports",
    )
    flow_slug = models.TextField()
    step_slug = models.TextField()
    queue_name = models.TextField(null=True)
    """Null in rows of workers older than migration 0038: their worker's one queue."""

    class Meta:
        managed = False
        db_table = 'pgflow"."worker_support'
        indexes = [models.Index(fields=["flow_slug", "step_slug"], name="worker_support_step_idx")]

    def __str__(self) -> str:
        return f"{self.worker_id}: {self.flow_slug}/{self.step_slug}"


class Run(ReadOnlyModel):
    """``pgflow.runs``: one execution of a flow."""

    run_id = models.UUIDField(primary_key=True)
    flow = _flow_fk("runs")
    status = models.TextField(choices=RunStatus.choices)
    input = models.JSONField()
    output = models.JSONField(null=True)
    error_message = models.TextField(null=True)
    remaining_steps = models.IntegerField()
    started_at = models.DateTimeField()
    completed_at = models.DateTimeField(null=True)
    failed_at = models.DateTimeField(null=True)
    rerun_of = models.ForeignKey(
        "self",
        models.DO_NOTHING,
        db_column="rerun_of",
        db_constraint=False,
        db_index=False,
        null=True,
        related_name="reruns",
    )
    not_before = models.DateTimeField(null=True)
    trace_context = models.JSONField(null=True)
    """The W3C trace context of the code that started the run (OpenTelemetry), when it was traced."""
    priority = models.SmallIntegerField(null=True)
    """The claim priority the run was started with (-100..100), or None: its steps' and flow's defaults."""
    parent_run_id = models.UUIDField(null=True)
    """A child run's parent: the run whose subflow step started it (docs/durable.md)."""
    parent_step_slug = models.TextField(null=True)
    parent_task_index = models.IntegerField(null=True)

    class Meta:
        managed = False
        db_table = 'pgflow"."runs'
        indexes = [
            models.Index(fields=["flow", "status"], name="runs_flow_status_idx"),
            models.Index(fields=["started_at"], name="runs_started_at_idx"),
            models.Index(fields=["rerun_of"], name="runs_rerun_of_idx", condition=Q(rerun_of__isnull=False)),
            models.Index(
                fields=["parent_run_id"],
                name="runs_parent_run_id_idx",
                condition=Q(parent_run_id__isnull=False),
            ),
        ]
        permissions = [
            ("cancel_run", "Can cancel a started run"),
            ("rerun_run", "Can start a new run of a finished run's flow and input"),
            ("retry_run", "Can retry a failed run from where it failed"),
            ("run_now", "Can run a delayed run's waiting work now"),
        ]

    def __str__(self) -> str:
        """A Django task's run is named by its function path, not its flow's hashed slug."""
        return f"{run_flow_name(self.flow_id, self.input)}/{self.run_id}"


class StepState(ReadOnlyModel):
    """``pgflow.step_states``: the state of one step within one run."""

    pk = models.CompositePrimaryKey("run_id", "step_slug")
    flow = _flow_fk("step_states")
    run = _run_fk("step_states")
    step_slug = models.TextField()
    status = models.TextField(choices=StepStatus.choices)
    remaining_tasks = models.IntegerField(null=True)
    initial_tasks = models.IntegerField(null=True)
    remaining_deps = models.IntegerField()
    output = models.JSONField(null=True)
    error_message = models.TextField(null=True)
    skip_reason = models.TextField(choices=SkipReason.choices, null=True)
    created_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True)
    completed_at = models.DateTimeField(null=True)
    failed_at = models.DateTimeField(null=True)
    skipped_at = models.DateTimeField(null=True)

    class Meta:
        managed = False
        db_table = 'pgflow"."step_states'

    def __str__(self) -> str:
        return f"{self.run_id}.{self.step_slug}"


class StepTask(ReadOnlyModel):
    """``pgflow.step_tasks``: one unit of work of a step (one per array element for a map)."""

    pk = models.CompositePrimaryKey("run_id", "step_slug", "task_index")
    flow = _flow_fk("step_tasks")
    run = _run_fk("step_tasks")
    step_slug = models.TextField()
    task_index = models.IntegerField()
    message_id = models.BigIntegerField(null=True)
    status = models.TextField(choices=TaskStatus.choices)
    attempts_count = models.IntegerField()
    error_message = models.TextField(null=True)
    output = models.JSONField(null=True)
    last_worker_id = models.UUIDField(null=True)
    requeued_count = models.IntegerField()
    last_requeued_at = models.DateTimeField(null=True)
    permanently_stalled_at = models.DateTimeField(null=True)
    queued_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True)
    completed_at = models.DateTimeField(null=True)
    failed_at = models.DateTimeField(null=True)
    queue_name = models.TextField()
    attempt_errors = models.JSONField(default=list)
    attempts_base = models.IntegerField(default=0)
    """Attempts made before the run's last retry (``pgflow.retry_run``); max_attempts counts after it."""

    class Meta:
        managed = False
        db_table = 'pgflow"."step_tasks'
        constraints = [
            models.UniqueConstraint(
                fields=["queue_name", "message_id"],
                name="step_tasks_queue_message_key",
                condition=Q(message_id__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}.{self.step_slug}[{self.task_index}]"


class StepWait(ReadOnlyModel):
    """``pgflow.step_waits``: an event or sleep task that waits now (the row goes when the wait ends)."""

    pk = models.CompositePrimaryKey("run_id", "step_slug", "task_index")
    run = _run_fk("step_waits")
    step_slug = models.TextField()
    task_index = models.IntegerField(default=0)
    flow = _flow_fk("step_waits")
    attempt = models.IntegerField()
    kind = models.TextField(choices=WaitKind.choices)
    event_name = models.TextField(null=True)
    event_key = models.TextField(null=True)
    """The text of the run's value at the step's wait key (None: the wait is not keyed)."""
    due_at = models.DateTimeField(null=True)
    """A sleep's time, an event wait's timeout (None: it waits for its event however long)."""
    since = models.DateTimeField()
    event_seq = models.BigIntegerField(null=True)
    """An event pinned to the wait, delivered by the next ``pgflow.wake_waits``."""
    error_message = models.TextField(null=True)
    child_run_id = models.UUIDField(null=True)
    """A subflow task's child run, whose end makes the wait due."""

    class Meta:
        managed = False
        db_table = 'pgflow"."step_waits'
        indexes = [
            models.Index(fields=["due_at"], name="step_waits_due_at_idx", condition=Q(due_at__isnull=False)),
            models.Index(
                fields=["event_name", "event_key"],
                name="step_waits_event_key_idx",
                condition=Q(event_key__isnull=False),
            ),
            models.Index(
                fields=["child_run_id"],
                name="step_waits_child_run_id_idx",
                condition=Q(child_run_id__isnull=False),
            ),
            models.Index(
                fields=["event_seq"],
                name="step_waits_event_seq_idx",
                condition=Q(event_seq__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}.{self.step_slug}[{self.task_index}] waits"


class Event(ReadOnlyModel):
    """``pgflow.events``: a sent event, kept until ``expires_at`` for the waits that start later."""

    event_seq = models.BigIntegerField(primary_key=True)
    event_name = models.TextField()
    run_id = models.UUIDField(null=True)
    event_key = models.TextField(null=True)
    payload = models.JSONField()
    event_id = models.TextField(null=True)
    sent_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    class Meta:
        managed = False
        db_table = 'pgflow"."events'
        indexes = [
            models.Index(
                fields=["event_name", "run_id", "event_seq"],
                name="events_run_idx",
                condition=Q(run_id__isnull=False),
            ),
            models.Index(
                fields=["event_name", "event_key", "event_seq"],
                name="events_key_idx",
                condition=Q(event_key__isnull=False),
            ),
            models.Index(fields=["expires_at"], name="events_expires_at_idx"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["event_name", "event_id"],
                name="events_event_id_key",
                condition=Q(event_id__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event_name} #{self.event_seq}"


class WorkerPause(ReadOnlyModel):
    """``pgflow.worker_pauses``: a paused worker subscription (``step_slug`` '' for a whole flow)."""

    pk = models.CompositePrimaryKey("flow_slug", "step_slug")
    flow_slug = models.TextField()
    step_slug = models.TextField()
    queue_name = models.TextField()
    reason = models.TextField(choices=PauseReason.choices)
    detail = models.TextField(null=True)
    paused_at = models.DateTimeField()

    class Meta:
        managed = False
        db_table = 'pgflow"."worker_pauses'

    def __str__(self) -> str:
        return f"{self.flow_slug}/{self.step_slug or '*'}: {self.reason}"


class ScheduleCatchUp(models.TextChoices):
    """Which missed ticks fire after an outage (see docs/schedules.md)."""

    ALL = "all"
    LATEST = "latest"
    NONE = "none"


class SchedulePauseReason(models.TextChoices):
    OPERATOR = "operator"
    REMOVED_FROM_CODE = "removed_from_code", "removed from code"


class ScheduleOrigin(models.TextChoices):
    CODE = "code", "declared in code"
    RUNTIME = "runtime", "created at run time"


class TickKind(models.TextChoices):
    CRON = "cron"
    MANUAL = "manual"


if TYPE_CHECKING:
    _ListField = models.Field[list[Any], list[Any]]
else:
    _ListField = models.Field


class TimestampList(_ListField):
    """A ``timestamptz[]`` column read as a list of datetimes (psycopg decodes the array itself).

    Not ``django.contrib.postgres``'s ArrayField: that one requires ``django.contrib.postgres`` in
    INSTALLED_APPS (a system check error on Django 6), which pgflow's install line does not ask for."""

    def db_type(self, connection: Any) -> str:
        return "timestamp with time zone[]"

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> list[Any]:
        return [] if value is None else list(value)


class Schedule(ReadOnlyModel):
    """``pgflow.schedules``: a flow started on cron ticks; changed through ``pgflow_django.schedules``.

    ``upcoming`` holds the planned ticks (before jitter); the schedule fires while ``enabled`` and
    ``paused_reason`` is null. ``plan_error`` says why it could not be planned (cleared once it is);
    ``last_error`` is firing's."""

    schedule_name = models.TextField(primary_key=True)
    flow_slug = models.TextField()
    cron = models.TextField()
    timezone = models.TextField(default="UTC")
    input = models.JSONField(default=dict)
    input_callable = models.TextField(null=True)
    catch_up = models.TextField(choices=ScheduleCatchUp.choices, default=ScheduleCatchUp.LATEST)
    max_catch_up = models.IntegerField(default=10)
    jitter_seconds = models.IntegerField(default=0)
    enabled = models.BooleanField(default=True)
    paused_reason = models.TextField(choices=SchedulePauseReason.choices, null=True)
    paused_detail = models.TextField(null=True)
    paused_at = models.DateTimeField(null=True)
    origin = models.TextField(choices=ScheduleOrigin.choices)
    revision = models.BigIntegerField(default=1)
    upcoming = TimestampList(default=list)
    planned_until = models.DateTimeField(null=True)
    next_fire_at = models.DateTimeField(null=True)
    last_tick = models.DateTimeField(null=True)
    last_fired_at = models.DateTimeField(null=True)
    last_run_id = models.UUIDField(null=True)
    missed_ticks = models.BigIntegerField(default=0)
    last_error = models.TextField(null=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    plan_error = models.TextField(null=True)
    plan_failed_at = models.DateTimeField(null=True)

    class Meta:
        managed = False
        db_table = 'pgflow"."schedules'
        indexes = [
            models.Index(
                fields=["next_fire_at"],
                name="schedules_due_idx",
                condition=Q(enabled=True, paused_reason__isnull=True),
            ),
            models.Index(
                Func(F("upcoming"), function="cardinality"),
                name="schedules_plan_idx",
                condition=Q(enabled=True, paused_reason__isnull=True),
            ),
        ]

    def __str__(self) -> str:
        return self.schedule_name


class ScheduleTick(ReadOnlyModel):
    """``pgflow.schedule_ticks``: the ledger of fired ticks, one per (schedule, tick), with its run."""

    pk = models.CompositePrimaryKey("schedule_id", "tick")
    schedule = models.ForeignKey(
        "Schedule",
        models.DO_NOTHING,
        db_column="schedule_name",
        db_constraint=False,
        db_index=False,
        related_name="ticks",
    )
    tick = models.DateTimeField()
    run_id = models.UUIDField()
    kind = models.TextField(choices=TickKind.choices, default=TickKind.CRON)
    fired_at = models.DateTimeField()

    class Meta:
        managed = False
        db_table = 'pgflow"."schedule_ticks'
        indexes = [models.Index(fields=["run_id"], name="schedule_ticks_run_idx")]

    def __str__(self) -> str:
        return f"{self.schedule_id}@{self.tick.isoformat()}"


class LimitKind(models.TextChoices):
    CONCURRENCY = "concurrency"
    RATE = "rate"


class KeySource(models.TextChoices):
    NONE = "none"
    INPUT = "input", "an input field"
    STORED = "stored", "computed where the run started"


class FlowLimit(ReadOnlyModel):
    """``pgflow.flow_limits``: a flow's (``step_slug`` '') or a step's concurrency key or rate limit."""

    pk = models.CompositePrimaryKey("flow_id", "step_slug", "kind")
    flow = _flow_fk("limits")
    step_slug = models.TextField()
    kind = models.TextField(choices=LimitKind.choices)
    key_source = models.TextField(choices=KeySource.choices)
    key_field = models.TextField(null=True)
    amount = models.IntegerField()
    period = models.FloatField(null=True)
    burst = models.IntegerField(null=True)

    class Meta:
        managed = False
        db_table = 'pgflow"."flow_limits'

    def __str__(self) -> str:
        return f"{self.step_slug or '(flow)'}: {self.kind} {self.amount}"


class RunLimitKey(ReadOnlyModel):
    """``pgflow.run_limit_keys``: a callable limit key, computed where the run started."""

    pk = models.CompositePrimaryKey("run_id", "step_slug", "kind")
    run = _run_fk("limit_keys")
    step_slug = models.TextField()
    kind = models.TextField(choices=LimitKind.choices)
    key = models.TextField()

    class Meta:
        managed = False
        db_table = 'pgflow"."run_limit_keys'

    def __str__(self) -> str:
        return f"{self.step_slug or '(flow)'} {self.kind}: {self.key}"


class LimitSlot(ReadOnlyModel):
    """``pgflow.limit_slots``: the row each claim of a key locks; a rate key's tokens."""

    pk = models.CompositePrimaryKey("flow_id", "step_slug", "kind", "key")
    flow = _flow_fk("limit_slots")
    step_slug = models.TextField()
    kind = models.TextField(choices=LimitKind.choices)
    key = models.TextField()
    tokens = models.FloatField()
    refilled_at = models.DateTimeField()
    granted_at = models.DateTimeField(null=True)

    class Meta:
        managed = False
        db_table = 'pgflow"."limit_slots'

    def __str__(self) -> str:
        return f"{self.step_slug or '(flow)'} {self.kind} {self.key!r}"


class LimitHold(ReadOnlyModel):
    """``pgflow.limit_holds``: a concurrency slot a started task holds (counted while it is started)."""

    pk = models.CompositePrimaryKey("run_id", "task_step_slug", "task_index", "step_slug")
    run_id = models.UUIDField()
    task_step_slug = models.TextField()
    task_index = models.IntegerField()
    flow_slug = models.TextField()
    step_slug = models.TextField()
    key = models.TextField()
    attempt = models.IntegerField()
    held_at = models.DateTimeField()

    class Meta:
        managed = False
        db_table = 'pgflow"."limit_holds'
        indexes = [models.Index(fields=["flow_slug", "step_slug", "key"], name="limit_holds_key_idx")]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.task_step_slug}[{self.task_index}] holds {self.key!r}"


class LimitWait(ReadOnlyModel):
    """``pgflow.limit_waits``: a task a limit deferred (queued, no attempt spent)."""

    pk = models.CompositePrimaryKey("run_id", "task_step_slug", "task_index")
    run_id = models.UUIDField()
    task_step_slug = models.TextField()
    task_index = models.IntegerField()
    flow_slug = models.TextField()
    step_slug = models.TextField()
    kind = models.TextField(choices=LimitKind.choices)
    key = models.TextField()
    queue_name = models.TextField()
    message_id = models.BigIntegerField()
    deferrals = models.IntegerField()
    deferred_at = models.DateTimeField()
    visible_at = models.DateTimeField()
    woken_at = models.DateTimeField(null=True)

    class Meta:
        managed = False
        db_table = 'pgflow"."limit_waits'
        indexes = [
            models.Index(
                fields=["flow_slug", "step_slug", "kind", "key", "deferred_at", "message_id"],
                name="limit_waits_key_idx",
            ),
            models.Index(fields=["queue_name", "visible_at"], name="limit_waits_queue_due_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.task_step_slug}[{self.task_index}] waits for {self.kind} {self.key!r}"
