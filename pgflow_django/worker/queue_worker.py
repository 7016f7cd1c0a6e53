"""The worker process: start-up checks, the claim loop, and a graceful stop (its chores on their own
timers, the heartbeat, recovery, upkeep, the wait pass and the scheduler pass, live in ``worker.chores``).

Threads: the main thread claims (engine connection), one listener thread (LISTEN connection), one
completer thread (completion connection), and ``concurrency`` handler threads, each with at most one
Django connection. That is at most ``concurrency + 3`` database connections, however many queues the
worker polls: they share the loop, the slots and the threads. A worker whose flows have ``async def``
handlers adds one event-loop thread for them, and their ORM calls share one more thread and
connection (``--async-concurrency``).
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import psycopg

from pgflow_django.db.connect import (
    connection_params,
    describe_database,
    first_line,
    keep_handler_connections,
    listen_params,
)
from pgflow_django.db.queries import SEVERAL_QUEUES
from pgflow_django.flows.dsl import Flow
from pgflow_django.observability import tracing
from pgflow_django.runs.queries import WAITS_CHANNEL
from pgflow_django.worker.backoff import Backoff
from pgflow_django.worker.chores import Chore, next_due, run_due
from pgflow_django.worker.chores.heartbeat import Heartbeat
from pgflow_django.worker.chores.recovery import StalledRecovery
from pgflow_django.worker.chores.scheduler import SchedulerPass
from pgflow_django.worker.chores.upkeep import HistoryUpkeep
from pgflow_django.worker.chores.waits import WaitPass
from pgflow_django.worker.completer import Completer
from pgflow_django.worker.connection import (
    Claim,
    ClaimedTask,
    Engine,
    HandOffScope,
    WorkerRegistration,
    is_transient,
)
from pgflow_django.worker.event_loop import HandlerLoop
from pgflow_django.worker.limits import TaskBudget, UntilEmpty
from pgflow_django.worker.listener import WAITS_DUE, Listener, insert_channel
from pgflow_django.worker.observe import Observer
from pgflow_django.worker.options import WorkerOptions
from pgflow_django.worker.pool import HandlerPool
from pgflow_django.worker.preflight import PreflightError, check_database
from pgflow_django.worker.runner import Runner, runs_on_event_loop
from pgflow_django.worker.slots import ALL_QUEUES, WorkerState
from pgflow_django.worker.stop_calls import StopCalls
from pgflow_django.worker.stop_signals import GracefulStop
from pgflow_django.worker.subscription import StepKey, Subscription, bind_versions, subscriptions_of

if TYPE_CHECKING:
    from pgflow_django.observability.metrics import WorkerMetrics

logger = logging.getLogger("pgflow_django.worker")

CLAIM_COALESCE_SECONDS = 0.001
"""With a backlog waiting, a claim waits this long for more free slots: fast handlers free slots one
by one, and claiming each alone would spend a round trip per task (a third of the throughput)."""
DELAYED_MESSAGE_SLACK = 0.005
"""Read a delayed message this long after it becomes visible, not a hair before."""
HOLD_SECONDS = 0.5
"""The longest a claimed task waits for a handler thread: then it goes back to the queue for any
worker, with its attempt returned. Well inside the 2 s a claim's lease adds to the step's timeout, so
a handler always starts with its whole timeout ahead of it."""
STOP: Final = object()
"""A claim's verdict: the worker stops (a signal-free drain)."""
BUDGET_HELD: Final = object()
"""A claim's verdict: a hand-off holds the rest of ``--max-tasks`` for now."""
BUDGET_WAIT_SECONDS = 0.05
"""How soon a claim looks again when a hand-off holds the rest of ``--max-tasks``."""
QUEUE_RETRY_SECONDS = 0.2
QUEUE_RETRY_CAP_SECONDS = 30.0
"""The back-off of one queue whose claims fail (doubling from the first to the cap)."""


class QueueWorker:
    """One worker process: every queue it serves (a subscription each) in one claim loop, with one
    slot budget, one pool of handler threads and the same few connections whatever their number."""

    def __init__(self, work: Flow | Sequence[Flow] | Sequence[Subscription], options: WorkerOptions) -> None:
        self.options = options
        self.worker_id = uuid.uuid4()
        self.until_empty = UntilEmpty()
        """``--until-empty``: every queue's last read found nothing while the worker held nothing."""
        self.observe = Observer(self.worker_id)
        """Metrics, signals, log fields and probes of this worker (``instrument`` adds metrics)."""
        self._serve(subscriptions_of(work, options.queue, options.step_slug))
        self.state = WorkerState(
            options.concurrency, options.prefetch, async_capacity=options.async_concurrency
        )
        self._params: dict[str, Any] = {}
        self._listen_params: dict[str, Any] | None = None
        """The LISTEN session's connection keywords (None: poll only; see ``listen_params``)."""
        self.engine: Engine | None = None
        self.completer: Completer | None = None
        self.listener: Listener | None = None
        self.pool: HandlerPool[ClaimedTask] | None = None
        self.handler_loop: HandlerLoop[ClaimedTask] | None = None
        """Runs the ``async def`` handlers (None: the flows have none, or ``--async-concurrency 0``)."""
        self.runner: Runner | None = None
        self.generations: dict[str, int] = {}
        """The generation of each flow this worker compiled against; its claims read nothing once the
        database holds another one (the flow was replaced under it)."""
        self._registered = False
        self.fatal = False
        """Set when a claim met unsupported work or a replaced flow: the process exits non-zero."""
        self._fed_by: dict[StepKey, list[Subscription]] = {}
        """For each (flow, step): the queues where a step that depends on it runs (its completions
        hand off there)."""
        self._rotation = 0
        """Which subscription claims first in the next round: each round starts one further."""
        self.budget = TaskBudget(options.max_tasks)
        """``--max-tasks``, across every queue."""

    def _serve(self, subscriptions: list[Subscription]) -> None:
        """Serve ``subscriptions``: at construction, and again at start once compiling has bound each
        flow to its version (a version other than the first has queues of its own)."""
        self.subscriptions = subscriptions
        self.flows = list({flow.slug: flow for sub in self.subscriptions for flow in sub.flows}.values())
        self.flow = self.flows[0]
        single = self.subscriptions[0] if len(self.subscriptions) == 1 else None
        self.queue = single.queue if single else SEVERAL_QUEUES
        """The one queue this worker polls, or ``*`` when it polls several (its registration's queue)."""
        self.subscription = single.label if single else f"queues={','.join(self._queue_names())}"
        """How logs name what it runs."""
        self.registration = WorkerRegistration(
            worker_id=self.worker_id,
            queue=self.queue,
            function_name=single.function_name
            if single
            else f"{len(self.flows)} flows on {len(self.subscriptions)} queues",
            support=(),
        )
        self.until_empty = UntilEmpty()
        for sub in self.subscriptions:
            self.until_empty.join(sub, self._idle)
        self.observe.queue = self.queue
        self.observe.fields["pgflow_queue"] = self.queue

    @property
    def read_visibility(self) -> int:
        """How long the first queue's reads hide their batch (see ``prepare``)."""
        return self.subscriptions[0].read_visibility

    def _queue_names(self) -> list[str]:
        return [sub.queue for sub in self.subscriptions]

    def instrument(self, metrics: WorkerMetrics) -> None:
        """Count this worker's work in ``metrics`` (the process's ``--metrics-port`` registry)."""
        self.observe.metrics = metrics
        metrics.watch_queue(
            self.queue, self.worker_id, self.subscription, lambda: self.state.in_flight, self.state.free_slots
        )

    # -- start-up ------------------------------------------------------------------------------

    def prepare(self) -> str:
        """Check the database and compile (or verify) the flows; returns the compile status.

        Raises PreflightError or FlowMismatch before anything is registered or polled.
        """
        from django.db import connections

        from pgflow_django.flows.compiler import compile_flow

        check_database(self.options.using)
        results = [compile_flow(flow, using=self.options.using) for flow in self.flows]
        statuses = [result.status for result in results]
        self.generations = {result.flow_slug: result.generation for result in results}
        bound = {
            flow.slug: flow.bound_to(result.flow_slug)
            for flow, result in zip(self.flows, results, strict=True)
        }
        if any(bound[flow.slug] is not flow for flow in self.flows):
            self._serve(bind_versions(self.subscriptions, bound))
        self._params = connection_params(self.options.using, self.options.pooler)
        self._listen_params = listen_params(
            self._params, self.options.pooler, self.options.listen_database, self.options.listen_url
        )
        self.engine = engine = Engine(self._params, "supervisor")
        for sub in self.subscriptions:
            if sub.shared:
                sub.support = tuple(engine.shared_support(sub.queue, [flow.slug for flow in sub.flows]))
                logger.info(
                    "queue=%s supports %s",
                    sub.queue,
                    ", ".join(f"{flow_slug}.{step_slug}" for flow_slug, step_slug in sub.support),
                    extra=self.observe.fields,
                )
        self.registration = dataclasses.replace(
            self.registration,
            support=tuple(pair for sub in self.subscriptions for pair in sub.support),
            support_queues=tuple(sub.queue for sub in self.subscriptions for _ in sub.support),
        )
        every_pause = self.check_pauses(engine)
        if every_pause is not None:
            what, reason, detail, sub = every_pause
            raise PreflightError(
                f"{what} is paused ({reason}{': ' + detail if detail else ''}); "
                f"clear it with {sub.resume_command} once it is safe to run"
            )
        write_access = set(engine.write_queue_access())
        for sub in self.subscriptions:
            sub.prepare(engine, self.options, self.generations, write_access, self.observe.fields)
        connections[self.options.using].close()
        keep_handler_connections(self.options.using, self.options.conn_max_age)
        return statuses[0] if len(set(statuses)) == 1 else ", ".join(sorted(set(statuses)))

    def check_pauses(self, engine: Engine) -> tuple[str, str, str | None, Subscription] | None:
        """Mark each subscription a pause holds (it is not polled) and clear the resumed ones, saying
        so once each; returns the first pause (what, reason, detail, its subscription) when every
        subscription is paused, since the worker then has nothing left to poll."""
        pauses = engine.pauses(self.registration.support)
        first: tuple[str, str, str | None, Subscription] | None = None
        for sub in self.subscriptions:
            held = sub.pause_among(pauses)
            if held is None:
                if sub.paused is not None:
                    logger.info(
                        "queue=%s was resumed: polling it again", sub.queue, extra=self.observe.fields
                    )
                    sub.paused = None
                    sub.need_read = True
                    self.until_empty.join(sub, self._idle)
                continue
            what = held.what
            if first is None:
                first = (what, held.reason, held.detail, sub)
            if sub.paused is None and len(self.subscriptions) > 1:
                logger.warning(
                    "%s is paused (%s): not polling queue=%s until %s",
                    what,
                    held.reason,
                    sub.queue,
                    sub.resume_command,
                    extra=self.observe.fields,
                )
            if sub.paused is None:
                self.until_empty.leave(sub)  # nothing of it is runnable for this worker meanwhile
            sub.paused = held.reason
        if all(sub.paused is not None for sub in self.subscriptions):
            return first
        return None

    def start(self) -> None:
        """Register, then start the listener, completer and handler threads."""
        assert self.engine is not None, "call prepare() first"
        opts = self.options
        for sub in self.subscriptions:
            sub.steps = supported = frozenset(sub.support)
            feeding = {
                (flow.slug, dep)
                for flow in sub.flows
                for step in flow.steps.values()
                if (flow.slug, step.slug) in supported
                for dep in step.deps
            }
            for key in feeding:
                self._fed_by.setdefault(key, []).append(sub)
        self.state.set_groups(tuple(sub.steps for sub in self.subscriptions))
        self.engine.register(self.registration)
        self._registered = True
        self.completer = Completer(
            Engine(self._params, "completer"),
            self.state,
            opts.completion_batch_size,
            opts.completion_flush_ms,
            hand_off=self,
        )
        self.observe.tracing = tracing.recording()
        self.completer.observe = self.observe
        self.completer.start()
        self.listener = Listener(
            self._listen_params or {},
            {insert_channel(sub.queue_table): sub.queue for sub in self.subscriptions}
            | {WAITS_CHANNEL: WAITS_DUE},
            self.state,
        )
        if self._listen_params is None:
            logger.warning(
                "queue=%s: no LISTEN through a transaction pooler (PGFLOW POOLER); polling every %.1fs. "
                "Give a direct session with PGFLOW['LISTEN_DATABASE'] or --listen-url to react at once",
                self.queue,
                opts.poll_interval,
                extra=self.observe.fields,
            )
        else:
            self.listener.start()
        self.runner = Runner(self.flows, self.state, self.completer, opts.using)
        self.runner.observe = self.observe
        self.pool = HandlerPool(
            opts.concurrency, self.runner.run, on_exit=self.runner.thread_done, priority=_priority
        )
        if opts.async_concurrency:
            self.state.loop_steps = frozenset(
                (flow.slug, slug)
                for flow in self.flows
                for slug, step in flow.steps.items()
                if runs_on_event_loop(step)
            )
        if self.state.loop_steps:
            self.handler_loop = HandlerLoop(
                self.runner.run_on_loop,
                _step_of,
                abandon=self.runner.abandon,
                tidy=self.runner.tidy,
                died=self._loop_died,
            )
            self.handler_loop.start()
        logger.info(
            "worker %s started queue=%s %s concurrency=%d%s batch=%d database=%s%s "
            "(at most %d database connections)",
            self.worker_id,
            self.queue,
            self.subscription,
            opts.concurrency,
            f" async-concurrency={opts.async_concurrency}" if self.handler_loop else "",
            opts.batch_size,
            describe_database(opts.using, self._params),
            opts.limits_text(),
            opts.max_connections + (1 if self.handler_loop else 0),
            extra=self.observe.fields,
        )
        if len(self.subscriptions) > 1:
            for sub in self.subscriptions:
                logger.info("serving queue=%s %s", sub.queue, sub.label, extra=self.observe.fields)
        # What start-up loaded (the project's modules, flows, settings) lives as long as the process:
        # leave it out of the collector's full passes, whose cost grows with everything tracked.
        gc.freeze()

    def run(self) -> int:
        """Start, loop until stopped, shut down; returns the process exit code."""
        self.install_signal_handlers()
        self.start()
        try:
            self.loop()
        finally:
            self.shutdown()
        return 1 if self.fatal else 0

    def install_signal_handlers(self) -> None:
        """A first signal drains (a drain after --max-tasks, --until-empty or a pause is not a
        signal, so a supervisor's SIGTERM still drains); a second exits at once."""
        GracefulStop(self._announce_stop, self.state.request_stop).install()

    def _announce_stop(self, signal_name: str) -> None:
        logger.info(
            "%s: stopped polling; finishing %d in-flight task(s) within %.0fs",
            signal_name,
            self.state.in_flight,
            self.options.shutdown_timeout,
            extra=self.observe.fields,
        )

    # -- the loop ------------------------------------------------------------------------------

    def loop(self) -> None:
        """Claim and dispatch until stopped: one round reads every queue that is due (notified, last
        read full, or its fallback poll is up), starting one queue further each round and sharing the
        free slots among them, so a backlog on one queue delays another by at most one round."""
        assert self.engine is not None and self.listener is not None
        opts = self.options
        engine = self.engine
        backoff = Backoff()
        chores = self._chores()
        wait_pass = next(chore for chore in chores if isinstance(chore, WaitPass))
        while not self.state.stopping.is_set():
            self.observe.beat()
            try:
                if not run_due(chores, engine, time.monotonic()):
                    break
                maintenance_at = min(next_due(chores), self._hold_deadline(engine))

                free = self.state.free_slots()
                if free <= 0:
                    self.state.wait_for_slot(maintenance_at - time.monotonic())
                    continue
                notified = self.state.take_notifications()
                if WAITS_DUE in notified:  # a child run ended: its parent's wait is due now
                    notified.discard(WAITS_DUE)
                    wait_pass.next_at = 0.0
                    if not notified:
                        continue
                due = self._due(notified)
                if not due:
                    next_poll = min(
                        (sub.next_poll for sub in self.subscriptions if sub.paused is None),
                        default=float("inf"),
                    )
                    self.state.wait_for_messages(min(next_poll, maintenance_at) - time.monotonic())
                    continue

                if all(self.state.free_slots_for(sub.steps) <= 0 for sub in due):
                    # only extra slots, or slots of the other kind, are free for the due queues
                    self.state.wait_for_room([sub.steps for sub in due], maintenance_at - time.monotonic())
                    continue
                wanted = min(self.state.batch_limit(opts.batch_size), opts.concurrency)
                if free < wanted and any(sub.need_read for sub in due):
                    self.state.wait_for_slots(wanted, CLAIM_COALESCE_SECONDS)
                verdict = self._claim_round(engine, due)
                if verdict is STOP:
                    return
                if verdict is BUDGET_HELD:  # a hand-off holds the rest of --max-tasks for a moment
                    self.state.wait_for_messages(BUDGET_WAIT_SECONDS)
                backoff.reset()
            except Exception as exc:
                self.observe.loop_failed()
                delay = backoff.next()
                transient = engine.recover(exc)
                if transient:
                    logger.warning(
                        "database unavailable (%s); retrying in %.1fs",
                        first_line(exc),
                        delay,
                        extra=self.observe.fields,
                    )
                else:
                    logger.error(
                        "worker loop error; retrying in %.1fs", delay, exc_info=exc, extra=self.observe.fields
                    )
                self.state.stopping.wait(delay)
                for sub in self.subscriptions:
                    sub.next_poll = 0.0

    def _chores(self) -> list[Chore]:
        """The services the loop runs between claims, each on its own timer."""
        opts = self.options
        chores: list[Chore] = [
            Heartbeat(self, opts.heartbeat_seconds),
            StalledRecovery(self.state, self.observe, opts.stalled_check_seconds),
            HistoryUpkeep(self.observe, opts.stalled_check_seconds),
            WaitPass(self.observe),
        ]
        if opts.scheduler:
            chores.append(SchedulerPass())
        return chores

    def _claim_round(self, engine: Engine, due: list[Subscription]) -> object:
        """Claim on each due queue in turn, sharing the free slots among those known to have work; a
        queue with no slot it may fill is skipped and goes first next round. A queue whose claim
        fails with an error of its own (not the database's) waits alone and the others go on."""
        claimers = sum(1 for sub in due if not self._probe(sub, due))
        first_skipped: Subscription | None = None
        verdict: object = None
        for sub in due:
            probe = self._probe(sub, due)
            free = self.state.free_slots_for(sub.steps)
            share = max(1, free // max(1, claimers))
            if not probe:
                claimers -= 1
            if free <= 0:
                first_skipped = first_skipped or sub
                continue
            wanted = 1 if probe else min(self.state.batch_limit(self.options.batch_size, sub.steps), share)
            try:
                verdict = self._claim_queue(engine, sub, wanted)
            except Exception as exc:
                if is_transient(exc):
                    raise
                self._queue_failed(engine, sub, exc)
                continue
            if verdict is STOP:
                return STOP
            if verdict is BUDGET_HELD:
                first_skipped = first_skipped or sub
                break
        nxt = first_skipped or due[0]
        if nxt in self.subscriptions:
            index = self.subscriptions.index(nxt)
            self._rotation = index if first_skipped is not None else index + 1
        return verdict

    def _queue_failed(self, engine: Engine, sub: Subscription, exc: BaseException) -> None:
        """A claim on ``sub`` raised an error of the statement itself: that queue is read again after
        a back-off of its own (0.2 s doubling up to 30 s), the others are not held up."""
        engine.recover(exc)
        sub.failures += 1
        delay = min(QUEUE_RETRY_CAP_SECONDS, QUEUE_RETRY_SECONDS * 2 ** (sub.failures - 1))
        sub.need_read = sub.notified = False
        sub.next_poll = time.monotonic() + delay
        logger.error(
            "queue=%s: claim failed; reading it again in %.1fs (the other queues go on)",
            sub.queue,
            delay,
            exc_info=exc,
            extra=self.observe.fields,
        )

    @staticmethod
    def _probe(sub: Subscription, due: list[Subscription]) -> bool:
        """A queue due only for its fallback poll, beside others: read one message to see whether it
        has any (a full read makes it due for a full share next round), leaving the free slots to the
        queues known to have work."""
        return len(due) > 1 and not (sub.need_read or sub.notified)

    def _due(self, notified: set[str]) -> list[Subscription]:
        """The queues to read this round, in this round's order: notified, last read full, or their
        fallback poll is up (with ``--until-empty`` and nothing held: all of them, to decide)."""
        now = time.monotonic()
        everything = ALL_QUEUES in notified
        start = self._rotation % len(self.subscriptions)
        deciding = self.options.until_empty and self._idle()
        due = []
        for sub in self.subscriptions[start:] + self.subscriptions[:start]:
            if sub.queue in notified:
                sub.notified = True
            elif everything:  # a reconnect or a recovery pass: look at each queue, as a poll does
                sub.next_poll = now
            undecided = deciding and not self.until_empty.looked(sub)
            if sub.paused is None and (undecided or sub.need_read or sub.notified or now >= sub.next_poll):
                due.append(sub)
        return due

    def _claim_queue(self, engine: Engine, sub: Subscription, wanted: int) -> object:
        """Read and claim up to ``wanted`` tasks on one queue and dispatch them; ``STOP`` when the
        worker must stop, ``BUDGET_HELD`` when a hand-off holds what ``--max-tasks`` leaves."""
        opts = self.options
        qty = self.budget.reserve(wanted)
        if qty == 0:
            return STOP if self._stop_when_spent() else BUDGET_HELD
        sub.notified = False
        snapshot = self.until_empty.snapshot() if opts.until_empty else None
        claimed = 0
        claim_started = time.perf_counter()
        try:
            claim = engine.claim(
                sub.flow.slug,
                sub.queue,
                sub.queue_table,
                self.worker_id,
                sub.read_visibility,
                qty,
                sub.step_slug,
                sub.support if sub.shared else None,
                sub.generations,
                self.observe.tracing,
            )
            claimed = len(claim.tasks)
            self.observe.claimed(claim.tasks, time.perf_counter() - claim_started, sub.queue)
        except psycopg.errors.UndefinedTable as exc:
            engine.recover(exc)
            return self._queue_gone(sub, exc)
        finally:
            self.budget.settle(qty, claimed)
            self.until_empty.claimed(claimed)
        sub.failures = 0
        if not self._accept(engine, sub, claim):
            return STOP
        for task in claim.tasks:
            self._dispatch(task)
        if self._stop_when_spent():
            return STOP
        if (
            snapshot is not None
            and not claim.tasks
            and claim.read_count < qty
            and self.until_empty.found_nothing(sub, snapshot)
        ):
            logger.info(
                "nothing runnable on queue(s) %s: stopping (--until-empty)",
                ",".join(self._queue_names()),
                extra=self.observe.fields,
            )
            self.state.request_stop()
            return STOP
        self._schedule_next_read(sub, claim, qty)
        return None

    def _schedule_next_read(self, sub: Subscription, claim: Claim, qty: int) -> None:
        """A full read reads again at once; otherwise the queue waits for a notification, its next
        delayed message, or its fallback poll (backing off while notifications arrive)."""
        opts = self.options
        if claim.read_count >= qty:
            sub.need_read = True
            sub.idle_wait = opts.poll_interval
            return
        sub.need_read = False
        listening = self.listener is not None and self.listener.listening.is_set()
        if claim.read_count or not listening:
            sub.idle_wait = opts.poll_interval
        wait = sub.idle_wait
        if claim.next_visible is not None:
            wait = min(wait, max(claim.next_visible, 0.0) + DELAYED_MESSAGE_SLACK)
        sub.next_poll = time.monotonic() + wait
        if listening and not claim.read_count:
            sub.idle_wait = min(sub.idle_wait * 2, max(opts.poll_interval, opts.max_poll_seconds))

    def _queue_gone(self, sub: Subscription, exc: BaseException) -> object:
        """A queue whose table is gone (its flow deleted): stop polling it; stop when none is left."""
        logger.error(
            "queue %s no longer exists (was flow %s deleted?): %s; %s",
            sub.queue,
            ", ".join(flow.slug for flow in sub.flows),
            "stopping" if len(self.subscriptions) == 1 else "no longer polling it",
            first_line(exc),
            extra=self.observe.fields,
        )
        if len(self.subscriptions) == 1:
            self.state.request_stop()
            return STOP
        self._drop(sub)
        return None

    def _drop(self, sub: Subscription) -> None:
        """Stop serving ``sub`` for good: no more reads, hand-offs or ``--until-empty`` votes."""
        self.subscriptions = [other for other in self.subscriptions if other is not sub]
        self.until_empty.leave(sub)
        for key, subs in self._fed_by.items():
            self._fed_by[key] = [other for other in subs if other is not sub]
        self.state.set_groups(tuple(other.steps for other in self.subscriptions))

    def _accept(self, engine: Engine, sub: Subscription, claim: Claim) -> bool:
        """Log what a claim did not turn into tasks; False when the worker must stop (a replaced
        flow, or unsupported work on a queue of its own)."""
        if claim.stale:
            logger.error(
                "flow %s was replaced or deleted in the database after this worker compiled "
                "it: claimed nothing and stopping; restart the worker with the code that defines "
                "the current flow (or deploy a changed flow under a new slug: flow.copy(slug=...))",
                ", ".join(claim.stale),
                extra=self.observe.fields,
            )
            self.fatal = True
            self.state.request_stop()
            return False
        if claim.fatal:
            logger.error(
                "unsupported work on queue=%s msg_ids=%s: claimed nothing, made the batch "
                "visible and paused %s; stopping (inspect the messages, then %s)",
                sub.queue,
                ",".join(map(str, claim.fatal)),
                sub.label,
                sub.resume_command,
                extra=self.observe.fields,
            )
            self.observe.paused("fatal", sub.queue)
            self.fatal = True
            self.state.request_stop()
            return False
        self.observe.unclaimed(engine.conn, sub, claim)
        return True

    def _hold_deadline(self, engine: Engine) -> float:
        """When the longest-waiting held task will have waited ``HOLD_SECONDS``; the tasks that
        already have go back to the queue first."""
        assert self.pool is not None
        oldest = self.pool.oldest_wait()
        if oldest is None:
            return float("inf")
        if time.monotonic() - oldest >= HOLD_SECONDS:
            self._return_unstarted(engine)
            oldest = self.pool.oldest_wait()
        return float("inf") if oldest is None else oldest + HOLD_SECONDS

    def _return_unstarted(self, engine: Engine) -> None:
        """Give the tasks no thread took within ``HOLD_SECONDS`` back to the queue, where an idle
        worker (or this one, once a thread is free) claims them; their steps no longer count as short."""
        assert self.pool is not None
        tasks = self.pool.withdraw(time.monotonic() - HOLD_SECONDS)
        if not tasks:
            return
        self.state.slow_down({(task.flow_slug, task.step_slug) for task in tasks}, HOLD_SECONDS)
        try:
            returned = engine.return_unstarted(tasks)
        except Exception:
            for task in tasks:  # still ours: run them when a thread frees, or release them at shutdown
                self.pool.submit(task)
            raise
        for task in tasks:
            self.state.release(task)
        self.budget.give_back(len(tasks))
        self.observe.released(returned)
        logger.info(
            "returned %d task(s) no handler thread took within %.1fs to queue=%s msg_ids=%s",
            returned,
            HOLD_SECONDS,
            self.queue,
            ",".join(str(task.message_id) for task in tasks),
            extra=self.observe.fields,
        )

    def _stop_when_spent(self) -> bool:
        if not self.budget.spent:
            return False
        logger.info(
            "claimed %d task(s) of --max-tasks %s: stopping queue=%s once in-flight tasks finish",
            self.budget.claimed,
            self.budget.limit,
            ",".join(self._queue_names()),
            extra=self.observe.fields,
        )
        self.state.request_stop()
        return True

    def _idle(self) -> bool:
        """No task held and every handed result recorded: nothing of ours can start new work."""
        return self.state.in_flight == 0 and (self.completer is None or self.completer.unrecorded == 0)

    def _dispatch(self, task: ClaimedTask) -> None:
        self.state.take(task)
        try:
            self._submit(task)
        except RuntimeError:  # PoolClosed, or no thread could be started
            self.state.release(task)
            raise

    def _submit(self, task: ClaimedTask) -> None:
        """Start a held task: on the event loop when its handler runs there, else on a thread."""
        assert self.pool is not None
        if self.handler_loop is not None and self.state.runs_on_loop(task):
            self.handler_loop.submit(task)
        else:
            self.pool.submit(task)

    # -- direct hand-off (the completer's target) ----------------------------------------------

    def reserve_hand_off(self, tasks: list[ClaimedTask]) -> tuple[int, HandOffScope | None]:
        """Free slots held for the completion of ``tasks`` to fill, and the queue it may fill them
        from: the one whose steps the most of ``tasks`` feed (a last step feeds none, and has nothing
        to hand off), one slot per such task, so the claim loop keeps the others for its reads;
        within a claim's batch and ``--max-tasks``."""
        fed: Counter[Subscription] = Counter()
        for key, count in Counter((task.flow_slug, task.step_slug) for task in tasks).items():
            for sub in self._fed_by.get(key, ()):
                if sub.paused is None:
                    fed[sub] += count
        if not fed:
            return 0, None
        best, feeding = fed.most_common(1)[0]
        wanted = self.state.reserve(
            min(feeding, self.state.batch_limit(self.options.batch_size, best.steps)), best.steps
        )
        granted = self.budget.reserve(wanted)
        if granted < wanted:
            self.state.take_reserved([], wanted - granted)
        return granted, HandOffScope(
            best.queue, self.worker_id, best.support, self.generations, self.observe.tracing
        )

    def take_hand_off(self, tasks: list[ClaimedTask], reserved: int, seconds: float) -> list[ClaimedTask]:
        """Run the tasks a completion claimed for this worker, as the loop runs claimed ones."""
        assert self.pool is not None and self.completer is not None
        self.budget.settle(reserved, len(tasks))
        self.until_empty.claimed(len(tasks))
        self.state.take_reserved(tasks, reserved)
        if not tasks:
            return []
        self.observe.claimed(tasks, seconds)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "handed off %d task(s) queue=%s msg_ids=%s",
                len(tasks),
                tasks[0].queue,
                ",".join(str(task.message_id) for task in tasks),
                extra=self.observe.fields,
            )
        left = []
        for task in tasks:
            try:
                self._submit(task)
            except RuntimeError:  # PoolClosed: the worker is stopping
                self.state.release(task)
                left.append(task)
        return left

    def tell_cancelled(self, engine: Engine) -> None:
        """Set the cancellation of each in-flight task whose run was cancelled, for its handler's ``ctx``."""
        cancelled = engine.cancelled_tasks(self.state.held_tasks())
        told = self.state.cancel(cancelled)
        if told and self.handler_loop is not None:
            self.handler_loop.cancel(lambda task: task.key in cancelled)
        if told:
            logger.info(
                "told %d running handler(s) that their run was cancelled queue=%s",
                told,
                self.queue,
                extra=self.observe.fields,
            )

    # -- stopping ------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Drain within the timeout, record finished results, release the rest, mark the worker stopped."""
        opts = self.options
        self.state.request_stop()
        deadline = time.monotonic() + opts.shutdown_timeout
        drained = self.state.wait_for_drain(min(opts.shutdown_timeout, opts.heartbeat_seconds))
        while not drained and time.monotonic() < deadline:
            logger.info(
                "draining queue=%s: %d task(s) still running, %.0fs left before they are released",
                self.queue,
                self.state.in_flight,
                max(0.0, deadline - time.monotonic()),
                extra=self.observe.fields,
            )
            if self.engine is not None and self._registered:
                StopCalls(self.engine, self.observe, self.queue).bounded(
                    lambda engine: engine.heartbeat(self.registration), "heartbeat while draining", attempts=1
                )
            drained = self.state.wait_for_drain(min(deadline - time.monotonic(), opts.heartbeat_seconds))
        unstarted: list[ClaimedTask] = []
        if self.pool is not None:
            # no task waiting for a thread may start once the drain is over: it is given back below
            unstarted = self.pool.shutdown()
        if self.handler_loop is not None:
            self.handler_loop.shutdown()
        if self.listener is not None:
            self.listener.stop()
        if self.completer is not None:
            self.completer.stop()
            self.completer.join(max(1.0, deadline - time.monotonic()))
        self.state.aborted.set()
        if self.completer is not None and self.completer.is_alive():
            self.completer.join(2.0)
        left = self.state.held_tasks()
        if self.handler_loop is not None and self.runner is not None:
            self.handler_loop.stop(self.runner.thread_done, 2.0)
        if self.engine is not None:
            calls = StopCalls(self.engine, self.observe, self.queue)
            if unstarted:
                calls.return_unstarted(unstarted)
            waiting = {task.key for task in unstarted}
            running = [task for task in left if task.key not in waiting]
            if running:
                calls.release(running)
            if self._registered:
                calls.bounded(lambda engine: engine.mark_stopped(self.worker_id), "mark the worker stopped")
            self.engine.close()
        logger.info(
            "worker %s stopped queue=%s%s",
            self.worker_id,
            self.queue,
            "" if drained else f" ({len(left)} unfinished task(s) released)",
            extra=self.observe.fields,
        )

    @property
    def ready(self) -> bool:
        """Registered, polling, and its last claim reached the database (``/readyz``)."""
        return self._registered and not self.state.stopping.is_set() and self.observe.database_ok

    @property
    def abandoned_handlers(self) -> bool:
        """Handlers still running after shutdown: the process must exit without joining them."""
        return (
            self.state.in_flight > 0
            or self.state.executing > 0
            or (self.handler_loop is not None and self.handler_loop.abandoned)
        )

    def _loop_died(self) -> None:
        """The event loop stopped on its own: no async handler can run, so the worker stops."""
        self.fatal = True
        self.state.request_stop()


def _priority(task: ClaimedTask) -> int:
    return task.priority


def _step_of(task: ClaimedTask) -> str:
    return f"{task.flow_slug}.{task.step_slug}"
