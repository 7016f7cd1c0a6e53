"""What a worker serves: one subscription per queue it polls, and how a selection expands into them.

A worker process runs one claim loop over all its subscriptions, so serving thirty flows costs the
same threads and connections as serving one. A plain flow has one queue; a step-queued flow one per
step; routed flows (and the tasks backend's task flows) share named queues, each polled once for
every flow routed there.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pgflow_django.db.queries import Pause
from pgflow_django.flows.dsl import Flow, RoutedFlow
from pgflow_django.flows.slugs import version_of
from pgflow_django.worker.connection import Engine
from pgflow_django.worker.options import WorkerOptions
from pgflow_django.worker.preflight import PreflightError, check_shared_subscription, resolve_subscription
from pgflow_django.worker.unsupported import UnsupportedWork

logger = logging.getLogger("pgflow_django.worker")

StepKey = tuple[str, str]
"""(flow slug, step slug)."""


@dataclass(eq=False)
class Subscription:
    """One queue of a worker: the flows it runs there, and the claim loop's read state for it."""

    queue: str
    flows: list[Flow]
    step_slug: str | None
    """A step-queued flow's one step (its private queue); None otherwise."""
    shared: bool
    """A declared shared queue: tasks outside ``support`` are left for other workers."""
    support: tuple[StepKey, ...]
    """The (flow, step) pairs run here; a shared queue's come from the persisted routes at start."""
    function_name: str
    label: str
    """How logs name what it runs (``flow=F step=S``, ``flows=A,B``)."""
    resume_command: str
    queue_table: str = ""
    generations: dict[str, int] = field(default_factory=dict)
    """The generation of each of its flows the worker compiled against: a claim checks only these."""
    read_visibility: int = 5
    unsupported: UnsupportedWork = field(init=False)
    need_read: bool = False
    """The last read was full: read again without waiting, for a full share of the free slots."""
    notified: bool = False
    next_poll: float = 0.0
    idle_wait: float = 0.0
    paused: str | None = None
    """Why the subscription is paused (it is not polled meanwhile), or None."""
    failures: int = 0
    """Claims in a row that failed with an error of their own (the queue's back-off)."""
    steps: frozenset[StepKey] = frozenset()
    """``support`` as a set, once it is final (the worker's start)."""

    def __post_init__(self) -> None:
        self.unsupported = UnsupportedWork(self.queue)

    @property
    def flow(self) -> Flow:
        return self.flows[0]

    def pause_among(self, pauses: Sequence[Pause]) -> Pause | None:
        """The first of ``pauses`` that holds a (flow, step) this queue runs (an operator's pause of a
        flow's slug holds every version of it, as ``pgflow.subscription_pause`` says)."""
        return next(
            (
                pause
                for pause in pauses
                if any(
                    (
                        pause.flow_slug == flow
                        or (pause.flow_slug == version_of(flow) and pause.reason == "operator")
                    )
                    and pause.step_slug in ("", step)
                    for flow, step in self.support
                )
            ),
            None,
        )

    def prepare(
        self,
        engine: Engine,
        options: WorkerOptions,
        generations: dict[str, int],
        write_access: set[str],
        log_fields: dict[str, Any],
    ) -> None:
        """The queue's table, read visibility and notifications, each doubt logged once."""
        self.read_visibility = options.read_visibility_seconds
        if not self.shared:
            # every message of this queue is ours to claim: hide the batch as long as the claim would
            # (a shared queue's worker leaves other workers' messages as read, so it reads briefly)
            longest = engine.claim_visibility(self.support)
            self.read_visibility = max(options.read_visibility_seconds, longest or 0)
        self.queue_table = engine.queue_table(self.queue)
        self.generations = {flow.slug: generations[flow.slug] for flow in self.flows}
        self.idle_wait = options.poll_interval
        if self.queue not in write_access:
            logger.warning(
                "queue=%s: its tables are not laid out as PGMQ 1.11-1.13 makes them; sends, archives"
                " and visibility changes go through PGMQ's dynamic SQL",
                self.queue,
                extra=log_fields,
            )
        notifies, throttle_ms = engine.insert_notifications(self.queue, self.queue_table)
        if not notifies:
            logger.warning(
                "queue=%s sends no insert notifications: the worker relies on polling",
                self.queue,
                extra=log_fields,
            )
        elif throttle_ms > 0:
            logger.warning(
                "queue=%s throttles insert notifications to one per %d ms",
                self.queue,
                throttle_ms,
                extra=log_fields,
            )


def flow_subscription(flow: Flow, step_slug: str | None = None) -> Subscription:
    """The queue of a plain flow, or of one step of a step-queued flow."""
    queue = resolve_subscription(flow, step_slug)
    steps = (step_slug,) if step_slug else tuple(flow.steps)
    return Subscription(
        queue=queue,
        flows=[flow],
        step_slug=step_slug,
        shared=False,
        support=tuple((flow.slug, step) for step in steps),
        function_name=flow.slug if step_slug is None else f"{flow.slug}.{step_slug}",
        label=f"flow={flow.slug}" + (f" step={step_slug}" if step_slug else ""),
        resume_command=f"manage.py pgflow_resume {flow.slug}" + (f" --step {step_slug}" if step_slug else ""),
    )


def shared_subscription(queue: str, flows: Sequence[Flow]) -> Subscription:
    """A shared queue, polled for every routed flow given (its support is read at start)."""
    check_shared_subscription(list(flows), queue)
    slugs = ",".join(flow.slug for flow in flows)
    return Subscription(
        queue=queue,
        flows=list(flows),
        step_slug=None,
        shared=True,
        support=(),
        function_name=f"{queue}:{slugs}",
        label=f"flows={slugs}",
        resume_command="manage.py pgflow_resume FLOW [--step STEP] for each paused flow",
    )


def subscriptions_for(
    flows: Iterable[Flow], step_slug: str | None = None, shared_flows: Iterable[tuple[str, Flow]] = ()
) -> list[Subscription]:
    """Every queue ``flows`` use: a plain flow's queue, each step queue of a step-queued flow (only
    ``step_slug``'s when given), each shared queue of routed flows, with ``shared_flows`` (queue,
    routed flow) pairs such as task flows added to their queues. One subscription per queue."""
    plain: list[Subscription] = []
    shared: dict[str, dict[str, Flow]] = {}
    for flow in flows:
        if isinstance(flow, RoutedFlow):
            if step_slug:
                resolve_subscription(flow, step_slug)  # refuses --step for a routed flow, naming its queues
            for queue in flow.queues:
                shared.setdefault(queue, {}).setdefault(flow.slug, flow)
        elif flow.queue_mode == "step" and not step_slug:
            plain.extend(
                flow_subscription(flow, slug) for slug, step in flow.steps.items() if step.runs_handler
            )
        else:
            plain.append(flow_subscription(flow, step_slug))
    for queue, flow in shared_flows:
        shared.setdefault(queue, {}).setdefault(flow.slug, flow)
    taken = {subscription.queue for subscription in plain}
    clash = sorted(taken & set(shared))
    if clash:
        raise PreflightError(f"queue {clash[0]!r} is both a flow's own queue and a shared queue; rename one")
    return plain + [
        shared_subscription(queue, list(found.values())) for queue, found in sorted(shared.items())
    ]


def bind_versions(subscriptions: list[Subscription], bound: Mapping[str, Flow]) -> list[Subscription]:
    """The subscriptions again, each flow replaced by the version compiling bound it to (``bound``: by
    the flow's slug): a version other than the first has queues of its own, and its tasks carry its
    stored slug. A shared queue stays; its support is read at start for the bound slugs."""
    rebuilt: list[Subscription] = []
    for sub in subscriptions:
        flows = [bound.get(flow.slug, flow) for flow in sub.flows]
        if sub.shared:
            rebuilt.append(shared_subscription(sub.queue, flows))
        else:
            rebuilt.append(flow_subscription(flows[0], sub.step_slug))
    return rebuilt


def without_queues(subscriptions: list[Subscription], excluded: Sequence[str]) -> list[Subscription]:
    """``--exclude-queue``: leave those queues out; an unknown name is refused, listing the queues."""
    names = sorted(subscription.queue for subscription in subscriptions)
    unknown = sorted(set(excluded) - set(names))
    if unknown:
        raise PreflightError(f"--exclude-queue {', '.join(unknown)}: not a served queue ({', '.join(names)})")
    kept = [subscription for subscription in subscriptions if subscription.queue not in excluded]
    if not kept:
        raise PreflightError("--exclude-queue leaves no queue to serve")
    return kept


def subscriptions_of(
    work: Flow | Sequence[Flow] | Sequence[Subscription], queue: str | None, step_slug: str | None
) -> list[Subscription]:
    """What a worker built from flows serves: ``queue`` for them all (a shared queue), else every
    queue of each (only ``step_slug``'s of a step-queued flow); subscriptions are taken as given."""
    if isinstance(work, Flow):
        work = [work]
    if not work:
        raise PreflightError("nothing to serve: no flow, task or queue was found")
    if all(isinstance(item, Subscription) for item in work):
        return [item for item in work if isinstance(item, Subscription)]
    flows = [item for item in work if isinstance(item, Flow)]
    if queue is not None:
        return [shared_subscription(queue, flows)]
    return subscriptions_for(flows, step_slug)
