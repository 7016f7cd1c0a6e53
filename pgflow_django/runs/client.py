"""Start and observe runs on Django's own database connection.

Using Django's connection (not a private one) is the point: ``start_flow`` inside ``transaction.atomic()``
commits or rolls back with the caller's writes, so a run never starts for an order that was not saved.
"""

from __future__ import annotations

import json
import math
import os
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal, TypeAlias, cast

from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, IntegrityError, ProgrammingError, connections, transaction

from pgflow_django.conf import get_settings
from pgflow_django.db.dbguard import raise_if_not_migrated, require_postgresql
from pgflow_django.db.query import Query, Value, fetch_all, fetch_one, fetch_value
from pgflow_django.flows import task_names
from pgflow_django.flows.dsl import Flow, StepType, priority_problem
from pgflow_django.flows.slugs import validate_flow_slug, version_number, version_of
from pgflow_django.flows.waits import StepKind
from pgflow_django.observability import tracing
from pgflow_django.runs import queries, run_keys
from pgflow_django.runs.encoding import (
    MAX_INT_DIGITS,
    MAX_JSON_BYTES,
    MAX_JSON_DEPTH,
    NotEncodable,
    check_storable_text,
    encode_json,
    idempotency_key_problem,
)
from pgflow_django.runs.operations import FlowNotFound
from pgflow_django.signals import send_run_cancelled, send_run_started
from pgflow_django.suggest import known_and_closest

RunStatus: TypeAlias = Literal["started", "completed", "failed"]
StepStatus: TypeAlias = Literal["created", "started", "completed", "failed", "skipped", "cancelled"]
TERMINAL_RUN_STATUSES: Final = frozenset({"completed", "failed"})

_NO_DATA_FOUND: Final = "P0002"
"""The SQLSTATE ``pgflow.cancel_run``, ``retry_run`` and ``run_now`` raise for an unknown run."""
_LISTED_FLOWS: Final = 20
"""At most this many flow slugs in a not-found message."""


class InvalidInput(ValueError):
    """A run input the database cannot store as jsonb (or that the flow's first step cannot take)."""


class RunNotFound(LookupError):
    """No run has this id (yet: it may belong to a transaction that has not committed)."""


class RunIdInUse(ValueError):
    """A chosen run id already names a run of another flow or with another input."""


IDEMPOTENCY_NAMESPACE: Final = uuid.UUID("5b0f3a57-1c2d-4e8a-9f61-7d0c2e4b9a13")
"""The UUIDv5 namespace of idempotency keys: a key's run id is ``uuid5(namespace, flow + NUL + key)``."""


def new_run_id(at: datetime | None = None) -> uuid.UUID:
    """A new run id: a UUIDv7 (48 bits of Unix milliseconds, of now or ``at``, then random bits), the
    layout of the ids ``pgflow.uuid_v7()`` makes, so run ids sort by start time and a partitioned
    history finds a run's partition from its id."""
    millis = time.time_ns() // 1_000_000 if at is None else int(at.timestamp() * 1000)
    value = millis << 80 | int.from_bytes(os.urandom(10), "big")
    return uuid.UUID(int=value & ~(0xF << 76) & ~(0x3 << 62) | 0x7 << 76 | 0x2 << 62)


def is_run_id_conflict(constraint_name: str | None) -> bool:
    """Whether a unique violation is a taken run id: the primary key of runs, or of one of its
    partitions on a partitioned history (runs_default_pkey, runs_p20260101_pkey)."""
    return (
        constraint_name is not None
        and constraint_name.startswith("runs_")
        and constraint_name.endswith("pkey")
    )


def idempotency_run_id(flow_slug: str, key: str) -> uuid.UUID:
    """The run id an idempotency key stands for: one key of one flow is one run id, so the runs
    table's primary key is what makes concurrent starts with one key agree on one run."""
    problem = idempotency_key_problem(key)
    if problem is not None:
        raise ValueError(f"idempotency_key {problem}")
    return uuid.uuid5(IDEMPOTENCY_NAMESPACE, f"{flow_slug}\x00{key}")


@dataclass(frozen=True)
class StepStateView:
    """One step of one run, as ``pgflow.step_states`` records it."""

    step_slug: str
    step_type: StepType
    step_index: int
    status: StepStatus
    output: Any
    error_message: str | None
    skip_reason: str | None
    remaining_tasks: int | None
    initial_tasks: int | None
    created_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    failed_at: datetime | None
    skipped_at: datetime | None
    kind: StepKind = "handler"
    """``handler``, or ``event`` / ``sleep`` for a step that waits without a worker (docs/durable.md)."""
    waiting: WaitView | None = None
    """What the step waits for now (None: it does not wait)."""


@dataclass(frozen=True)
class WaitView:
    """What an event or sleep step waits for now."""

    event: str | None
    """The event's name (None for a sleep)."""
    key: str | None
    """The run's value of the step's wait key, as text (None: only events sent to the run reach it)."""
    since: datetime
    until: datetime | None
    """A sleep's time, or an event wait's timeout (None: no timeout)."""
    child_run_id: uuid.UUID | None = None
    """A subflow step's (first unfinished) child run."""


def delayed_until(status: str, not_before: datetime | None) -> datetime | None:
    """Until when a started run waits to begin (a delayed start, ``start_flow(delay=...)`` or a Django
    task's ``run_after``, still ahead), else None."""
    if status != "started" or not_before is None:
        return None
    return not_before if not_before > datetime.now(UTC) else None


def run_priority(value: int | None) -> str:
    """A run's priority, or ``default`` when it was started without one (its steps' and flow's apply)."""
    return "default" if value is None else str(value)


@dataclass(frozen=True)
class RunView:
    """A run and its step states, read in one statement (one consistent snapshot)."""

    run_id: uuid.UUID
    flow_slug: str
    """The flow's slug, whichever version the run is on (``version_slug``)."""
    status: RunStatus
    input: Any
    output: Any
    error_message: str | None
    remaining_steps: int
    started_at: datetime
    completed_at: datetime | None
    failed_at: datetime | None
    steps: tuple[StepStateView, ...]
    parent_run_id: uuid.UUID | None = None
    """A child run's parent: the run whose subflow step started it (docs/durable.md)."""
    child_run_ids: tuple[uuid.UUID, ...] = ()
    """The runs this run's subflow steps started, in step and element order."""
    version_slug: str = ""
    """The stored slug of the flow version the run is on: ``flow_slug`` for version 1, ``slug___vN``
    for version N (docs/upgrading.md, "Deploying a changed flow")."""
    not_before: datetime | None = None
    """A delayed start's time (``start_flow(delay=...)``, a Django task's ``run_after``): the run's
    steps start no earlier; None when it was not delayed, or ``run_now`` ran it."""

    @property
    def delayed_until(self) -> datetime | None:
        return delayed_until(self.status, self.not_before)

    @property
    def version(self) -> int:
        """The number of the flow version the run is on."""
        return version_number(self.version_slug or self.flow_slug)

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_RUN_STATUSES

    @property
    def outputs(self) -> dict[str, Any]:
        """Outputs of the completed steps, by slug."""
        return {state.step_slug: state.output for state in self.steps if state.status == "completed"}

    def step(self, slug: str) -> StepStateView:
        for state in self.steps:
            if state.step_slug == slug:
                return state
        known = ", ".join(state.step_slug for state in self.steps) or "none"
        raise KeyError(f"run {self.run_id} of flow {self.flow_slug!r} has no step {slug!r} (steps: {known})")


def start_flow(
    flow_or_slug: Flow | str,
    input: Any,
    *,
    run_id: uuid.UUID | str | None = None,
    delay: timedelta | int | None = None,
    idempotency_key: str | None = None,
    priority: int | None = None,
    using: str = "default",
) -> uuid.UUID:
    """Start one run and return its id; inside ``transaction.atomic()`` it commits with the caller.

    ``delay`` (seconds, or a timedelta rounded up to whole seconds) keeps the run's first tasks
    invisible to workers until then. ``idempotency_key`` returns the run an earlier start of this
    flow with that key made, while that run exists, instead of starting another; a ``run_id`` already
    in use returns its run when the flow and input are the same, else raises ``RunIdInUse``.
    ``priority`` (-100..100; None: the steps' and the flow's defaults) orders its tasks' claims:
    among visible tasks of one queue, higher priority first, FIFO within a priority.

    On a database without pgflow's schema it raises ``NotMigrated`` (an ``ImproperlyConfigured``),
    one line naming ``manage.py migrate``, and ``INSTALLED_APPS`` when ``pgflow_django`` is not in it."""
    return start_flow_reporting(
        flow_or_slug,
        input,
        run_id=run_id,
        delay=delay,
        idempotency_key=idempotency_key,
        priority=priority,
        using=using,
    )[0]


def start_flow_reporting(
    flow_or_slug: Flow | str,
    input: Any,
    *,
    run_id: uuid.UUID | str | None = None,
    delay: timedelta | int | None = None,
    idempotency_key: str | None = None,
    priority: int | None = None,
    using: str = "default",
) -> tuple[uuid.UUID, bool]:
    """``start_flow``, also saying whether this call started the run (False: an idempotency key's or
    a chosen run id's existing run was returned)."""
    require_postgresql(using)
    try:
        return _start_flow(flow_or_slug, input, run_id, delay, idempotency_key, priority, using)
    except ProgrammingError as exc:
        raise_if_not_migrated(exc, using)
        raise


def _start_flow(
    flow_or_slug: Flow | str,
    input: Any,
    run_id: uuid.UUID | str | None,
    delay: timedelta | int | None,
    idempotency_key: str | None,
    priority: int | None,
    using: str,
) -> tuple[uuid.UUID, bool]:
    slug = _flow_slug(flow_or_slug)
    version = _version_key(flow_or_slug)
    body = encode_run_input(flow_or_slug, input, f"input of flow {slug!r}")
    chosen_priority = _priority(priority, "start_flow")
    keys = run_keys.stored_keys(flow_or_slug, [input])
    if idempotency_key is not None:
        if run_id is not None:
            raise ValueError("start_flow takes run_id or idempotency_key, not both")
        chosen = idempotency_run_id(slug, idempotency_key)
        return _start_chosen(
            (slug, version), body, chosen, delay, chosen_priority, using, keyed=True, keys=keys
        )
    if run_id is not None:
        return _start_chosen(
            (slug, version), body, _as_uuid(run_id), delay, chosen_priority, using, keyed=False, keys=keys
        )
    trace_context = tracing.current_context()
    with _traced(trace_context, using, keys), connections[using].cursor() as cursor:
        with _start_refusals(slug, using):
            started = fetch_value(
                cursor,
                queries.START_FLOW,
                _start_params(
                    slug,
                    version,
                    input=body,
                    run_id=None,
                    delay=_delay_seconds(delay),
                    priority=chosen_priority,
                ),
            )
        new_id = _as_uuid(started)
        run_keys.record(cursor, [new_id], keys)
        if trace_context is not None:
            tracing.record_on_runs(cursor, [new_id], trace_context)
    send_run_started(slug, [new_id], using)
    return new_id, True


def _priority(value: object, caller: str) -> int | None:
    """A start's priority, or None for the defaults; anything else is one line naming the fix."""
    if value is None:
        return None
    problem = priority_problem(value)
    if problem is not None:
        raise ValueError(f"{caller}: priority {problem}")
    return cast(int, value)


def _start_chosen(
    flow: tuple[str, str | None],
    body: str,
    chosen: uuid.UUID,
    delay: timedelta | int | None,
    priority: int | None,
    using: str,
    *,
    keyed: bool,
    keys: list[list[run_keys.RunKey]],
) -> tuple[uuid.UUID, bool]:
    """Start a run under a chosen id in a savepoint; when the id is taken (a concurrent start of the
    same id waits for the other's commit first), return the run it names if it is the same start.
    ``flow`` is the slug and the version key the start asks for."""
    slug, version = flow
    seconds = _delay_seconds(delay)
    trace_context = tracing.current_context()
    for _ in range(2):  # the run found taken may be deleted before it is read: then start it again
        try:
            with transaction.atomic(using=using), connections[using].cursor() as cursor:
                with _start_refusals(slug, using):
                    fetch_value(
                        cursor,
                        queries.START_FLOW,
                        _start_params(
                            slug, version, input=body, run_id=chosen, delay=seconds, priority=priority
                        ),
                    )
                run_keys.record(cursor, [chosen], keys)
                if trace_context is not None:
                    tracing.record_on_runs(cursor, [chosen], trace_context)
        except IntegrityError as exc:
            if not is_run_id_conflict(getattr(getattr(exc.__cause__, "diag", None), "constraint_name", None)):
                raise
            with connections[using].cursor() as cursor:
                existing = fetch_one(cursor, queries.EXISTING_RUN, [body, chosen])
            if existing is None:
                continue
            if existing.flow_slug != slug or not (keyed or existing.same_input):
                what = (
                    f"of flow {existing.flow_slug!r}" if existing.flow_slug != slug else "with another input"
                )
                raise RunIdInUse(f"run id {chosen} already names a run {what}: choose a new run_id") from None
            return chosen, False
        else:
            send_run_started(slug, [chosen], using)
            return chosen, True
    raise RunIdInUse(f"run id {chosen} was taken and deleted while starting: start it again")


KEYED_START_ATTEMPTS: Final = 3
"""A keyed batch whose keys another start takes meanwhile reads them again, this many times at most."""


def _start_keyed(
    flow: tuple[str, str | None],
    bodies: list[str],
    ids: list[uuid.UUID],
    priority: int | None,
    using: str,
    keys: list[list[run_keys.RunKey]],
) -> list[uuid.UUID]:
    """Start the runs of the keys that have none, in one savepointed call; a key repeated in the batch
    is one run (its first input). A concurrent start of one of the keys makes the call fail on the
    primary key once the other commits: the keys are read again and the rest started."""
    slug, version = flow
    first_bodies: dict[uuid.UUID, str] = {}
    first_keys: dict[uuid.UUID, list[run_keys.RunKey]] = {}
    for run_id, body, run_key in zip(ids, bodies, keys, strict=True):
        first_bodies.setdefault(run_id, body)
        first_keys.setdefault(run_id, run_key)
    trace_context = tracing.current_context()
    for _ in range(KEYED_START_ATTEMPTS):
        with connections[using].cursor() as cursor:
            taken = fetch_all(cursor, queries.TAKEN_RUN_IDS, [list(first_bodies)])
        foreign = [row for row in taken if row.flow_slug != slug]
        if foreign:
            raise RunIdInUse(
                f"run id {foreign[0].run_id} already names a run of flow {foreign[0].flow_slug!r}"
            )
        started = {row.run_id for row in taken}
        todo = [run_id for run_id in first_bodies if run_id not in started]
        if not todo:
            return ids
        try:
            with transaction.atomic(using=using), connections[using].cursor() as cursor:
                with _start_refusals(slug, using):
                    body = f"[{','.join(first_bodies[run_id] for run_id in todo)}]"
                    fetch_value(
                        cursor,
                        queries.START_FLOWS,
                        _start_params(slug, version, inputs=body, run_ids=todo, priority=priority),
                    )
                run_keys.record(cursor, todo, [first_keys[run_id] for run_id in todo])
                if trace_context is not None:
                    tracing.record_on_runs(cursor, todo, trace_context)
        except IntegrityError as exc:
            if not is_run_id_conflict(getattr(getattr(exc.__cause__, "diag", None), "constraint_name", None)):
                raise
            continue
        send_run_started(slug, todo, using)
        return ids
    raise RunIdInUse(
        f"the keys of this start_flows call kept being taken by other starts of {slug!r}: call again"
    )


def _traced(trace_context: str | None, using: str, keys: list[list[run_keys.RunKey]]) -> Any:
    """A traced start records its context, and a start with callable limit keys its keys, in the
    starting transaction, so no worker claims the run before they are there; other starts add nothing."""
    if trace_context is None and not any(keys):
        return nullcontext()
    return transaction.atomic(using=using)


def _delay_seconds(delay: timedelta | int | None) -> int | None:
    if delay is None:
        return None
    seconds = math.ceil(delay.total_seconds()) if isinstance(delay, timedelta) else delay
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not 0 <= seconds <= 2**31 - 1:
        raise ValueError(f"delay must be whole seconds from 0 to {2**31 - 1} (or a timedelta), got {delay!r}")
    return max(seconds, 0)


def start_flows(
    flow_or_slug: Flow | str,
    inputs: Iterable[Any],
    *,
    run_ids: Sequence[uuid.UUID | str] | None = None,
    idempotency_keys: Sequence[str] | None = None,
    priority: int | None = None,
    using: str = "default",
) -> list[uuid.UUID]:
    """Start one run per input in a single database call; returns the run ids in input order.

    ``idempotency_keys`` (one per input) start only the keys with no run yet and return the existing
    runs of the others, as ``start_flow(..., idempotency_key=)`` does for one. ``priority`` is every
    run's, as for ``start_flow``; so is ``NotMigrated`` on a database without pgflow's schema."""
    require_postgresql(using)
    try:
        return _start_flows(flow_or_slug, inputs, run_ids, idempotency_keys, priority, using)
    except ProgrammingError as exc:
        raise_if_not_migrated(exc, using)
        raise


def _start_flows(
    flow_or_slug: Flow | str,
    inputs: Iterable[Any],
    run_ids: Sequence[uuid.UUID | str] | None,
    idempotency_keys: Sequence[str] | None,
    priority: int | None,
    using: str,
) -> list[uuid.UUID]:
    slug = _flow_slug(flow_or_slug)
    version = _version_key(flow_or_slug)
    chosen_priority = _priority(priority, "start_flows")
    values = list(inputs)
    bodies = [
        encode_run_input(flow_or_slug, item, f"input #{index} of flow {slug!r}")
        for index, item in enumerate(values)
    ]
    keys = run_keys.stored_keys(flow_or_slug, values)
    if idempotency_keys is not None:
        if run_ids is not None:
            raise ValueError("start_flows takes run_ids or idempotency_keys, not both")
        if len(idempotency_keys) != len(bodies):
            raise ValueError(
                f"start_flows got {len(bodies)} inputs but {len(idempotency_keys)} idempotency_keys; "
                "pass one key per input"
            )
        for index, key in enumerate(idempotency_keys):
            problem = idempotency_key_problem(key)
            if problem is not None:
                raise ValueError(f"idempotency_keys[{index}] {problem}")
        keyed_ids = [idempotency_run_id(slug, key) for key in idempotency_keys]
        return _start_keyed((slug, version), bodies, keyed_ids, chosen_priority, using, keys)
    if run_ids is None:
        ids = [new_run_id() for _ in bodies]
    elif len(run_ids) != len(bodies):
        raise ValueError(
            f"start_flows got {len(bodies)} inputs but {len(run_ids)} run_ids; pass one id per input"
        )
    else:
        ids = [_as_uuid(value) for value in run_ids]
    if not bodies:
        return []
    trace_context = tracing.current_context()
    with _traced(trace_context, using, keys), connections[using].cursor() as cursor:
        with _start_refusals(slug, using):
            fetch_value(
                cursor,
                queries.START_FLOWS,
                _start_params(
                    slug, version, inputs=f"[{','.join(bodies)}]", run_ids=ids, priority=chosen_priority
                ),
            )
        run_keys.record(cursor, ids, keys)
        if trace_context is not None:
            tracing.record_on_runs(cursor, ids, trace_context)
    send_run_started(slug, ids, using)
    return ids


def get_run(run_id: uuid.UUID | str, *, using: str = "default") -> RunView:
    """The run with its step states (in step order) and outputs; ``RunNotFound`` for an unknown id."""
    require_postgresql(using)
    key = _as_uuid(run_id)
    try:
        with connections[using].cursor() as cursor:
            rows = fetch_all(cursor, queries.GET_RUN, [key])
    except ProgrammingError as exc:
        raise_if_not_migrated(exc, using)
        raise
    if not rows:
        raise _run_not_found(key)
    first = rows[0]
    steps = tuple(
        StepStateView(
            step_slug=row.step_slug,
            step_type=cast(StepType, row.step_type),
            step_index=cast(int, row.step_index),
            status=cast(StepStatus, row.step_status),
            output=_loads(row.step_output),
            error_message=row.step_error_message,
            skip_reason=row.skip_reason,
            remaining_tasks=row.remaining_tasks,
            initial_tasks=row.initial_tasks,
            created_at=cast(datetime, row.step_created_at),
            started_at=row.step_started_at,
            completed_at=row.step_completed_at,
            failed_at=row.step_failed_at,
            skipped_at=row.step_skipped_at,
            kind=cast(StepKind, row.step_kind),
            waiting=None
            if row.waiting_since is None
            else WaitView(
                row.wait_event, row.wait_key, row.waiting_since, row.waiting_until, row.waiting_child_run_id
            ),
        )
        for row in rows
        if row.step_slug is not None
    )
    return RunView(
        run_id=_as_uuid(first.run_id),
        flow_slug=version_of(first.flow_slug),
        status=cast(RunStatus, first.status),
        input=_loads(first.input),
        output=_loads(first.output),
        error_message=first.error_message,
        remaining_steps=first.remaining_steps,
        started_at=first.started_at,
        completed_at=first.completed_at,
        failed_at=first.failed_at,
        steps=steps,
        parent_run_id=first.parent_run_id,
        child_run_ids=tuple(first.child_run_ids or ()),
        version_slug=first.flow_slug,
        not_before=first.not_before,
    )


@dataclass(frozen=True)
class CancelResult:
    """What ``cancel_run`` did to one run."""

    run_id: uuid.UUID
    cancelled: bool
    """False when the run had already finished: nothing changed."""
    status: RunStatus
    """The run's status after the call: ``failed`` once cancelled, else the status it finished with."""


def cancel_run(run_id: uuid.UUID | str, *, reason: str | None = None, using: str = "default") -> CancelResult:
    """Cancel a started run (``pgflow.cancel_run``): it ends failed with the error ``cancelled`` (or
    ``cancelled: <reason>``), its unfinished tasks are cancelled and their messages archived, so no
    worker claims or completes anything of it afterwards; a handler already running finishes, but its
    completion is ignored. A finished run is left as it is (``cancelled`` False); ``RunNotFound`` for
    an unknown id. Joins the caller's transaction when there is one (the cancel commits with it)."""
    key = _as_uuid(run_id)
    if reason is not None:
        check_storable_text(reason, "reason")
    try:
        with transaction.atomic(using=using), connections[using].cursor() as cursor:
            row = fetch_one(cursor, queries.CANCEL_RUN, {"run_id": key, "reason": reason})
            assert row is not None
            if row.outcome == "cancelled":
                send_run_cancelled(row.flow_slug, key, reason, using)
    except DatabaseError as exc:
        if getattr(exc.__cause__, "sqlstate", None) == _NO_DATA_FOUND:
            raise _run_not_found(key) from None
        raise_if_not_migrated(exc, using)
        raise
    if row.outcome == "cancelled":
        return CancelResult(run_id=key, cancelled=True, status="failed")
    return CancelResult(run_id=key, cancelled=False, status=cast(RunStatus, row.outcome))


class RetryRefused(RuntimeError):
    """``pgflow.retry_run`` refused the run (it is not failed, or it failed outside its tasks); the
    message says why and what to do."""


class RunNowRefused(RuntimeError):
    """``pgflow.run_now`` refused the run: it has finished, so nothing of it waits to run; the message
    says what to do instead (retry a failed run; start a completed one's flow again)."""


_REFUSED: Final = "55000"
"""The SQLSTATE (object_not_in_prerequisite_state) ``pgflow.retry_run`` and ``pgflow.run_now`` raise
for a run in a status they do not act on."""


def retry_run(run_id: uuid.UUID | str, *, using: str = "default") -> int:
    """Continue a failed or cancelled run from where it failed (``pgflow.retry_run``): completed work
    is kept, failed and cancelled tasks are queued again, their attempt numbers continuing, each with
    its full ``max_attempts`` again, counted from the retry. Returns how many
    tasks were queued; ``RunNotFound`` for an unknown id, ``RetryRefused`` when the run cannot be
    retried now (nothing changed then)."""
    return _act_on_run(queries.RETRY_RUN, run_id, RetryRefused, using)


def run_now(run_id: uuid.UUID | str, *, using: str = "default") -> int:
    """Run a started run's waiting work now (``pgflow.run_now``): the messages of its queued tasks that
    are hidden until later (a delayed start, ``start_flow(delay=...)`` or a Django task's
    ``run_after``; a step's ``start_delay``; a retry's back-off) become visible at once and its
    workers are woken; its later steps are not delayed either. Tasks a worker holds, tasks a
    concurrency or rate limit deferred, and event, sleep and subflow steps are left as they are.
    Returns how many messages became visible (0 when nothing was waiting); ``RunNotFound`` for an
    unknown id, ``RunNowRefused`` for a run that has finished (nothing changed then). Joins the
    caller's transaction when there is one (workers are woken when it commits)."""
    return _act_on_run(queries.RUN_NOW, run_id, RunNowRefused, using)


def _act_on_run(query: Query[Value], run_id: uuid.UUID | str, refused: type[RuntimeError], using: str) -> int:
    """Call one of the SQL API's run actions that return a count, in the caller's transaction when
    there is one: ``RunNotFound`` for P0002, ``refused`` with the function's message for 55000."""
    key = _as_uuid(run_id)
    try:
        with transaction.atomic(using=using), connections[using].cursor() as cursor:
            return int(fetch_value(cursor, query, [key]))
    except DatabaseError as exc:
        cause = exc.__cause__
        state = getattr(cause, "sqlstate", None)
        if state == _NO_DATA_FOUND:
            raise _run_not_found(key) from None
        if state == _REFUSED:
            primary = getattr(getattr(cause, "diag", None), "message_primary", None)
            raise refused(str(primary or exc)) from None
        raise_if_not_migrated(exc, using)
        raise


def wait_for_run(
    run_id: uuid.UUID | str, timeout: float = 60.0, poll: float = 0.2, *, using: str = "default"
) -> RunView:
    """Poll until the run is completed or failed; ``TimeoutError`` after ``timeout`` seconds."""
    check_wait_arguments("wait_for_run", timeout, poll)
    deadline = time.monotonic() + timeout
    while True:
        view = get_run(run_id, using=using)
        if view.is_terminal:
            return view
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise wait_timed_out(view, timeout)
        time.sleep(min(poll, remaining))


def check_wait_arguments(caller: str, timeout: float, poll: float) -> None:
    """``wait_for_run``'s and ``await_run``'s rule for their arguments: ValueError naming both."""
    if timeout < 0 or poll <= 0:
        raise ValueError(f"{caller} needs timeout >= 0 and poll > 0, got timeout={timeout}, poll={poll}")


def wait_timed_out(view: RunView, timeout: float) -> TimeoutError:
    """The error of a wait that ended before its run did: what is unfinished, and the likely cause."""
    pending = [state.step_slug for state in view.steps if state.status in ("created", "started")]
    return TimeoutError(
        f"run {view.run_id} of flow {view.flow_slug!r} is still {view.status} after {timeout}s "
        f"(unfinished steps: {', '.join(pending) or 'none'}); is a worker running for this flow?"
    )


def flow_not_found(slug: str, compiled: Iterable[str] = (), task_flows: Iterable[str] = ()) -> str:
    """One line for a slug no compiled flow has: the known flows (registered in this project, plus
    ``compiled`` ones the caller read from the database) and the closest match.

    The ``task_flows`` among them (the tasks backend's, one per task function and queue, with hashed
    slugs) are left out, unless ``slug`` itself looks like one of theirs."""
    registered = _registered_slugs()
    if slug in registered:
        return (
            f"flow {slug!r} is registered but not compiled in this database: run "
            f"`manage.py pgflow_compile {slug}` (a worker for it compiles it too), or in a test call "
            "pgflow_django.compile_flow(flow) first (run_flow compiles for you)"
        )
    hidden = set() if task_names.asks_for_task_flows(slug) else set(task_flows)
    known = sorted({*registered, *compiled} - hidden)
    listed, hint = known_and_closest(slug, known, most=_LISTED_FLOWS)
    if not hint:  # not a typo: perhaps defined in code that nothing registers or compiles
        hint = (
            "; a flow is known once registered (in a flows.py module of an installed app, or "
            "PGFLOW['FLOWS']) and compiled (manage.py pgflow_compile, or a worker that serves it)"
        )
    return f"no flow {slug!r} (known flows: {listed}){hint}"


def _registered_slugs() -> list[str]:
    from pgflow_django.flows.registry import get_flows

    try:
        return list(get_flows())
    except (ImproperlyConfigured, ImportError):
        return []  # a broken registry is reported by `manage.py check`, not by this message


@contextmanager
def _start_refusals(slug: str, using: str) -> Iterator[None]:
    """The SQL API's "flow does not exist" (SQLSTATE 22023) becomes ``FlowNotFound``, one line, and its
    refusal of a root map's input (pgflow's P0001 text) ``InvalidInput``, as a ``Flow``'s own check.

    The compiled flows are listed too when the connection is in autocommit (a command, a script):
    inside the caller's transaction the failed statement has aborted it, so only the registered
    ones are."""
    try:
        yield
    except DatabaseError as exc:
        cause = exc.__cause__
        primary = getattr(getattr(cause, "diag", None), "message_primary", None) or ""
        if getattr(cause, "sqlstate", None) == "P0001" and " has root map steps but input is " in primary:
            raise InvalidInput(primary) from None
        if getattr(cause, "sqlstate", None) != "22023":
            raise
        if primary.startswith(f"flow '{slug}': the version this code defines"):
            raise FlowNotFound(primary) from None
        if not primary.startswith(f"flow '{slug}' does not exist"):
            raise
        compiled: list[str] = []
        tasks: list[str] = []
        if connections[using].get_autocommit():  # else the failed statement aborted the transaction
            with connections[using].cursor() as cursor:
                compiled = [row.flow_slug for row in fetch_all(cursor, queries.COMPILED_FLOWS)]
                tasks = [flow.flow_slug for flow in task_names.task_flows(cursor)]
        raise FlowNotFound(flow_not_found(slug, compiled, tasks)) from None


def _flow_slug(flow_or_slug: Flow | str) -> str:
    """The flow's own slug (a bound version's too): idempotency keys and signals are per flow."""
    if isinstance(flow_or_slug, Flow):
        return flow_or_slug.version_of
    return validate_flow_slug(flow_or_slug)


def _version_key(flow_or_slug: Flow | str) -> str | None:
    """Which version a start asks for: the one the code defines (a ``Flow``, or a slug this project
    registers), else None for the newest compiled one. Under ``ON_SHAPE_CHANGE`` other than
    ``"version"`` a slug has one definition, whatever options the code changed: the newest."""
    if get_settings().on_shape_change != "version":
        return None
    if isinstance(flow_or_slug, Flow):
        return flow_or_slug.version_key
    from pgflow_django.flows.registry import get_flows

    try:
        flow = get_flows().get(flow_or_slug)
    except Exception:  # a project whose flows do not load starts by name, on the newest version
        return None
    return None if flow is None else flow.version_key


def _start_params(slug: str, version: str | None, **values: Any) -> dict[str, Any]:
    """The parameters of ``START_FLOW``/``START_FLOWS``: the flow and version, then the rest."""
    return {"flow": slug, "version": version, **values}


def encode_run_input(flow_or_slug: Flow | str, value: Any, what: str) -> str:
    """Serialise before any SQL runs, so bad input is one clear error and nothing is written; the
    same JSON rule and bounds as handler outputs (``pgflow_django.runs.encoding``)."""
    try:
        text = encode_json(value, escape_text=False)
    except NotEncodable as exc:
        if exc.kind == "text":
            raise InvalidInput(f"{what} {exc.reason}; remove it") from None
        if exc.kind == "bound":
            raise InvalidInput(
                f"{what} cannot be stored: {exc.reason} (the engine's limits: {MAX_JSON_DEPTH} nested "
                f"levels, {MAX_JSON_BYTES} bytes, integers of {MAX_INT_DIGITS} digits)"
            ) from None
        raise InvalidInput(
            f"{what} is {exc.reason.replace(': ', ' (', 1)}); pass dicts, lists, strings, finite "
            "numbers, booleans, None, or datetimes, decimals and UUIDs (stored as strings)"
        ) from None
    if isinstance(flow_or_slug, Flow) and not isinstance(value, list | tuple):
        root_maps = [step.slug for step in flow_or_slug.steps.values() if step.is_map and step.is_root]
        if root_maps:
            raise InvalidInput(
                f"{what} must be a JSON array, because root map step {root_maps[0]!r} runs one task per "
                f"element; got {type(value).__name__}"
            )
    return text


def _run_not_found(key: uuid.UUID) -> RunNotFound:
    """The error for an unknown run id, as every call here raises it (and ``--dry-run`` reports it)."""
    return RunNotFound(
        f"no run {key}: check the id, or commit the transaction that started it (it may also be pruned)"
    )


def _as_uuid(value: object) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise ValueError(f"run id {value!r} is not a UUID; pass a uuid.UUID or its string form") from None


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)
