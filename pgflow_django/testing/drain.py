"""``drain`` and ``run_flow``: the worker's claim, handlers and completions, in the calling thread.

Each pass claims every subscription a worker fleet would poll for the flows in scope (a plain flow's
queue, each step queue of a step-queued flow, each shared queue of routed flows, with the same
selectors), runs the claimed handlers one by one, and records their results through the worker's
completer. When a pass finds nothing visible, delayed work is brought forward (``clock``) instead of
waited for. What cannot finish is reported, never waited on.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import connections

from pgflow_django.db import queries as db_queries
from pgflow_django.db.query import fetch_all, fetch_value
from pgflow_django.flows.dsl import Flow, RoutedFlow, descendant_flows
from pgflow_django.flows.slugs import default_queue_name
from pgflow_django.testing import clock, overrides, queries
from pgflow_django.testing.flows import known_flows, resolve_flow
from pgflow_django.testing.inprocess import (
    BATCH_SIZE,
    IN_PROCESS_WORKER_ID,
    InlineCompleter,
    InlineRunner,
    InProcessEngine,
    together,
)
from pgflow_django.testing.results import Run, load_run
from pgflow_django.worker.connection import Claim
from pgflow_django.worker.options import WorkerOptions
from pgflow_django.worker.slots import WorkerState


class DrainStuck(AssertionError):
    """Work that no drain can finish: it would wait forever (or longer than ``max_tasks`` allows)."""


@dataclass(frozen=True)
class DrainSummary:
    """What one ``drain`` did."""

    tasks: int
    """Handler calls (attempts) it ran."""
    failed_attempts: int
    """Of those, attempts that failed (each retried or exhausted as the flow's options say)."""
    runs: dict[uuid.UUID, str] = field(default_factory=dict)
    """Status, at the end, of every run it ran a task for."""
    skipped_seconds: float = 0.0
    """Delays (back-off, start delays, run delays) brought forward instead of waited for."""
    waiting: tuple[clock.Waiting, ...] = ()
    """Tasks left waiting for their delay (only with ``skip_delays=False``)."""

    @property
    def completed(self) -> list[uuid.UUID]:
        return [run_id for run_id, status in self.runs.items() if status == "completed"]

    @property
    def failed(self) -> list[uuid.UUID]:
        return [run_id for run_id, status in self.runs.items() if status == "failed"]


@dataclass(frozen=True)
class _Subscription:
    """What one worker polls: a queue, with a step selector or a shared queue's support set."""

    flow_slug: str
    queue: str
    step_slug: str | None
    support: tuple[tuple[str, str], ...]
    shared: bool
    visibility: int


_QUEUE_TABLES: dict[str, str] = {}


def _subscriptions(flows: Sequence[Flow]) -> list[_Subscription]:
    """The subscriptions of the workers that would run ``flows``: one per plain flow, one per step of
    a step-queued flow, one per shared queue (with every routed flow in scope that uses it)."""
    minimum = WorkerOptions.read_visibility_seconds
    found: list[_Subscription] = []
    shared: dict[str, list[tuple[str, str]]] = {}
    for flow in flows:
        if isinstance(flow, RoutedFlow):
            for slug, queue_name in flow.step_queues.items():
                shared.setdefault(queue_name, []).append((flow.slug, slug))
            continue
        timeouts = {slug: step.options.timeout or flow.options.timeout for slug, step in flow.steps.items()}
        if flow.queue_mode == "step":
            found.extend(
                _Subscription(
                    flow.slug,
                    flow.queue_for(slug),
                    slug,
                    ((flow.slug, slug),),
                    False,
                    max(minimum, timeouts[slug] + 2),
                )
                for slug in flow.steps
            )
        else:
            found.append(
                _Subscription(
                    flow.slug,
                    default_queue_name(flow.slug),
                    None,
                    tuple((flow.slug, slug) for slug in flow.steps),
                    False,
                    max([minimum, *(timeout + 2 for timeout in timeouts.values())]),
                )
            )
    found.extend(
        _Subscription(support[0][0], queue_name, None, tuple(support), True, minimum)
        for queue_name, support in shared.items()
    )
    return found


class _Session:
    """One drain's engine, state, completer and runner on the caller's connection."""

    def __init__(self, flows: Sequence[Flow], using: str) -> None:
        self.using = using
        self.engine = InProcessEngine(using)
        self.state = WorkerState(BATCH_SIZE)
        self.completer = InlineCompleter(self.engine, self.state)
        self.runner = InlineRunner(overrides.effective_flows(list(flows)), self.state, self.completer, using)
        self.tasks = 0
        self.failed_attempts = 0
        self.run_ids: set[uuid.UUID] = set()

    def queue_table(self, queue_name: str) -> str:
        table = _QUEUE_TABLES.get(queue_name)
        if table is None:
            table = _QUEUE_TABLES[queue_name] = self.engine.queue_table(queue_name)
        return table

    def claim_args(self, sub: _Subscription, qty: int) -> tuple[Any, ...]:
        return (
            sub.flow_slug,
            sub.queue,
            self.queue_table(sub.queue),
            IN_PROCESS_WORKER_ID,
            sub.visibility,
            qty,
            sub.step_slug,
            sub.support if sub.shared else None,
        )

    def claim(self, sub: _Subscription, qty: int) -> Claim:
        claim = self.engine.claim(*self.claim_args(sub, qty))
        if claim.fatal:
            raise DrainStuck(
                f"unsupported work on queue={sub.queue} msg_ids={','.join(map(str, claim.fatal))}: "
                "as a worker would, the claim made the batch visible and paused flow={sub.flow_slug}"
                + (f" step={sub.step_slug}" if sub.step_slug else "")
                + "; a message there matches no task of this flow (was it sent by hand?)"
            )
        return claim

    def refuse_more(self, sub: _Subscription, max_tasks: int, scope: tuple[str, ...]) -> None:
        """At ``max_tasks``: raise if ``sub`` still has a task to run (given back at once, as a
        stopping worker releases its claims)."""
        claim = self.claim(sub, 1)
        if claim.tasks:
            self.engine.release(claim.tasks)
            raise DrainStuck(
                f"drain ran max_tasks={max_tasks} attempts and work remains (flows: {', '.join(scope)}); "
                "raise max_tasks if that much work is expected"
            )

    def run_claimed(self, claim: Claim, following: tuple[_Subscription, int] | None = None) -> int:
        """Run the claimed handlers and record their results; ``following`` (the claim the drain makes
        next) is sent in the same round trip as the results when one statement records them all."""
        for task in claim.tasks:
            self.state.take(task)
            self.runner.run(task)
            self.run_ids.add(task.run_id)
        failures_before = self.completer.failures
        ahead = None
        if following is not None:
            ahead = functools.partial(self.engine.claim_next, *self.claim_args(*following))
        self.completer.flush_pending(ahead)
        self.tasks += len(claim.tasks)
        self.failed_attempts += self.completer.failures - failures_before
        return len(claim.tasks)


def _scope(flows: list[Flow] | None, using: str) -> tuple[list[Flow], list[str] | None]:
    """The flows to run (``flows``, bound by ``_requested``), and the slugs that limit the checks
    (None: every flow with a started run, each version run by the code that defines it, if any)."""
    if flows is not None:
        return flows, [flow.slug for flow in flows]
    with connections[using].cursor() as cursor:
        active = fetch_all(cursor, queries.FLOWS_WITH_STARTED_RUNS)
    if not active:
        return [], None
    available = known_flows()
    return [
        available[row.version_of].bound_to(row.flow_slug)
        for row in active
        if row.version_of in available and row.version in (None, available[row.version_of].version_key)
    ], None


def _requested(flows: list[Flow | str], using: str) -> list[Flow]:
    """The flows a drain was asked for, with their child flows (a parent waits for them), each bound
    to the version its definition is compiled as."""
    named = [resolve_flow(flow) for flow in flows]
    resolved = list(
        {(f.version_of, f.version_key): f for flow in named for f in (*descendant_flows(flow), flow)}.values()
    )
    if not resolved:
        return []
    with connections[using].cursor() as cursor:
        stored = fetch_value(
            cursor,
            queries.BOUND_VERSIONS,
            [[flow.version_of for flow in resolved], [flow.version_key for flow in resolved]],
        )
    return [flow.bound_to(slug) for flow, slug in zip(resolved, stored, strict=True)]


def _paused(flow_slugs: Sequence[str], using: str) -> dict[tuple[str, str], str]:
    """The reason of the pause holding each paused (flow, step) of these flows (as
    ``pgflow.subscription_pause`` says, the workers' own definition): their workers would not poll."""
    held: list[queries.PausedStep] = together(using, [(queries.PAUSED_STEPS, [list(flow_slugs)])])[0]
    return {(row.flow_slug, row.step_slug): row.reason for row in held}


def _is_paused(sub: _Subscription, pauses: dict[tuple[str, str], str]) -> bool:
    return any(pair in pauses for pair in sub.support)


def drain(
    *,
    flows: Iterable[Flow | str] | None = None,
    using: str = "default",
    max_tasks: int = 10_000,
    skip_delays: bool = True,
) -> DrainSummary:
    """Run everything runnable now, in this thread on this connection, until nothing is left.

    ``flows`` limits it to those flows (default: every flow with a started run). With
    ``skip_delays`` (the default), retry back-off and start or run delays are brought forward rather
    than waited for; without it, delayed tasks are left and listed in ``waiting`` (``advance()``
    moves time on). Raises ``DrainStuck`` for work that would wait forever: a task held by another
    worker, a paused subscription, a run with no task left, a flow no Python ``Flow`` is known for,
    or more than ``max_tasks`` attempts."""
    if isinstance(max_tasks, bool) or not isinstance(max_tasks, int) or max_tasks < 1:
        raise ValueError(f"drain: max_tasks must be a whole number >= 1, got {max_tasks!r}")
    return _drain(None if flows is None else list(flows), using, max_tasks, skip_delays)


def _drain(
    requested: list[Flow | str] | None,
    using: str,
    max_tasks: int,
    skip_delays: bool,
    statuses: bool = True,
) -> DrainSummary:
    skipped = 0.0
    session: _Session | None = None
    pauses: dict[tuple[str, str], str] = {}
    scope_key: tuple[str, ...] = ()
    subscriptions: list[_Subscription] = []
    recorded = 0
    """Claimed batches whose results have been recorded so far (each may have sent new messages)."""
    bound = None if requested is None else _requested(requested, using)
    while True:
        scope, limit = _scope(bound, using)
        key = tuple(flow.slug for flow in scope)
        if session is None or key != scope_key:
            previous = session
            session = _Session(scope, using)
            if previous is not None:
                session.tasks, session.failed_attempts = previous.tasks, previous.failed_attempts
                session.run_ids = previous.run_ids
            scope_key = key
            subscriptions = _subscriptions(scope)
            pauses = _paused(key, using) if key else {}
        progressed, empty_at, nothing_hidden, recorded = _one_pass(
            session, subscriptions, pauses, scope_key, requested is not None, max_tasks, recorded
        )
        # With a fixed scope, a pass whose every claim came after the last recorded result and read
        # nothing ends the drain: another pass would read the same. Without one, the next pass looks
        # for flows the handlers started runs of.
        settled = requested is not None and all(
            empty_at.get(index) == recorded
            for index, sub in enumerate(subscriptions)
            if not _is_paused(sub, pauses)
        )
        if progressed and not settled:
            continue
        if any(not step.runs_handler for flow in scope for step in flow.steps.values()):
            with connections[using].cursor() as cursor:  # sleeps due now, events pinned, children ended
                if clock.wake_due_waits(cursor):
                    continue
        # The claims that read nothing also saw no hidden message on their queues: nothing to bring forward
        if skip_delays and not (settled and nothing_hidden):
            queues = [(sub.queue, session.queue_table(sub.queue)) for sub in subscriptions]
            first = _following(subscriptions, len(subscriptions), False, pauses, requested is not None)
            left = max_tasks - session.tasks
            if first is not None and left > 0:  # the next pass's first claim travels with the skip
                session.engine.claim_next(*session.claim_args(first, min(BATCH_SIZE, left)))
            seconds = clock.skip_to_next(
                limit if limit is not None else list(scope_key),
                list(dict.fromkeys(queues)),
                using=using,
                fetch=session.engine.fetch,
            )
            if seconds is not None:
                skipped += seconds
                continue
            if session.engine.sent_ahead():  # due by now without a skip: the next pass runs it
                continue
        break
    assert session is not None
    _check_stuck(limit, scope_key, pauses, skip_delays, using)
    return DrainSummary(
        tasks=session.tasks,
        failed_attempts=session.failed_attempts,
        runs=_statuses(session.run_ids, using) if statuses else {},
        skipped_seconds=skipped,
        waiting=() if skip_delays else tuple(clock.waiting(limit, using=using)),
    )


def _one_pass(
    session: _Session,
    subscriptions: list[_Subscription],
    pauses: dict[tuple[str, str], str],
    scope_key: tuple[str, ...],
    fixed_scope: bool,
    max_tasks: int,
    recorded: int,
) -> tuple[bool, dict[int, int], bool, int]:
    """One pass over the subscriptions, each claimed until a claim reads less than it asked for.

    Returns whether a result was recorded, per subscription the ``recorded`` count at which its
    last claim read nothing, whether every claim that read nothing also saw no hidden message, and
    the new ``recorded`` count (claimed batches whose results have been recorded)."""
    progressed = False
    empty_at: dict[int, int] = {}
    nothing_hidden = True
    for index, sub in enumerate(subscriptions):
        if _is_paused(sub, pauses):
            nothing_hidden = False
            continue
        while True:
            qty = min(BATCH_SIZE, max_tasks - session.tasks)
            if qty <= 0:
                session.refuse_more(sub, max_tasks, scope_key)
                nothing_hidden = False
                break
            claim = session.claim(sub, qty)
            following = None
            if claim.tasks:
                following = _following(subscriptions, index, claim.read_count == qty, pauses, fixed_scope)
            left = max_tasks - session.tasks - len(claim.tasks)
            if session.run_claimed(
                claim, None if following is None or left < 1 else (following, min(BATCH_SIZE, left))
            ):
                progressed = True
                recorded += 1
            elif claim.read_count == 0:
                empty_at[index] = recorded
            if claim.read_count < qty:
                nothing_hidden = nothing_hidden and claim.read_count == 0 and claim.next_visible is None
                break
    return progressed, empty_at, nothing_hidden, recorded


def _following(
    subscriptions: list[_Subscription],
    index: int,
    full: bool,
    pauses: dict[tuple[str, str], str],
    fixed_scope: bool,
) -> _Subscription | None:
    """The subscription the drain claims from after a batch from ``subscriptions[index]``: the same
    one after a full batch, else the next one polled (with a fixed scope, the next pass's first)."""
    if full:
        return subscriptions[index]
    polled = [sub for sub in subscriptions if not _is_paused(sub, pauses)]
    later = [sub for sub in subscriptions[index + 1 :] if not _is_paused(sub, pauses)]
    if later:
        return later[0]
    return polled[0] if fixed_scope and polled else None


def _statuses(run_ids: set[uuid.UUID], using: str) -> dict[uuid.UUID, str]:
    if not run_ids:
        return {}
    with connections[using].cursor() as cursor:
        rows = fetch_all(cursor, db_queries.RUN_STATUSES, [list(run_ids)])
    return {uuid.UUID(str(row.run_id)): row.status for row in rows}


def _check_stuck(
    limit: list[str] | None,
    scope: tuple[str, ...],
    pauses: dict[tuple[str, str], str],
    skip_delays: bool,
    using: str,
) -> None:
    """Raise ``DrainStuck`` naming what no drain could finish; delayed tasks are not stuck."""
    rows: list[queries.OpenTask] = together(using, [(queries.OPEN_TASKS, {"flows": limit})])[0]
    if not rows:
        return
    delayed = set()
    if not skip_delays:
        delayed = {item.message_id for item in clock.waiting(limit, using=using)}
    problems: list[str] = []
    for row in rows:
        run_id, flow_slug, step_slug, task_index = row.run_id, row.flow_slug, row.step_slug, row.task_index
        status, attempts, worker_id, message_id = row.status, row.attempts, row.last_worker_id, row.message_id
        where = f"run {run_id} of flow {flow_slug!r}"
        if step_slug is None:
            problems.append(f"{where} is started but has no queued or running task (an engine fault)")
            continue
        task = f"{where}: task {step_slug}[{task_index}]"
        if flow_slug not in scope:
            problems.append(
                f"{task} is {status} but no Python Flow is known for it; pass it in flows=[...] or add "
                "it to PGFLOW['FLOWS']"
            )
        elif status == "started":
            holder = (
                "this process's in-process runner" if worker_id == IN_PROCESS_WORKER_ID else str(worker_id)
            )
            problems.append(
                f"{task} is held by worker {holder} (attempt {attempts}); only that worker or stalled-task "
                "recovery (manage.py pgflow_requeue_stalled) can finish it"
            )
        elif (flow_slug, step_slug) in pauses:
            reason = pauses[(flow_slug, step_slug)]
            problems.append(
                f"{task} is queued but its subscription is paused ({reason}); manage.py pgflow_resume "
                f"{flow_slug} clears it"
            )
        elif message_id in delayed:
            continue
        else:
            problems.append(f"{task} is queued but its message cannot be claimed (message {message_id})")
    if problems:
        shown = problems[:5] + ([f"... and {len(problems) - 5} more"] if len(problems) > 5 else [])
        raise DrainStuck("drain cannot finish:\n  " + "\n  ".join(shown))


def run_flow(
    flow_or_slug: Flow | str,
    input: Any,
    *,
    using: str = "default",
    max_tasks: int = 10_000,
) -> Run:
    """Compile the flow if needed, start a run and drive it to its end in this thread, on the
    caller's connection (inside ``TestCase`` everything rolls back). Delays are skipped. Other
    runnable tasks of the same flow run too. Returns the run with its steps and tasks."""
    from pgflow_django.flows.compiler import compile_flow
    from pgflow_django.runs.client import start_flow

    flow = resolve_flow(flow_or_slug)
    compile_flow(flow, using=using)
    run_id = start_flow(flow, input, using=using)
    _drain([flow], using, max_tasks, True, statuses=False)
    return load_run(run_id, using=using)
