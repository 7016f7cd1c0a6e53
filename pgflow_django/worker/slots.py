"""What the supervisor waits on: free handler slots, new-message notifications, a stop request.

One condition variable covers all three, so the main loop sleeps in a single place and any of them
wakes it at once (the pipeline refills the moment enough slots are free, not when a whole batch is
done). A freed slot wakes the loop only when it waits for slots and now has as many as it asked for:
a wake-up per finished task was a large share of a short task's cost.

Slots follow the handlers' pace, learned per step: while every step the worker serves is known to be
short (its recent handlers under ``SHORT_HANDLER_SECONDS``), the worker holds up to ``prefetch`` tasks
instead of ``capacity`` (the extra ones wait for a thread), and a claim reads as many: a no-op handler
is done long before the next claim's round trip, so with ``capacity`` slots the threads would mostly
wait for the database. A step that has not finished a task yet is not known to be short, so the
tasks a fast first step makes ready for a slow one are never held beyond the threads. One slow
handler ends it at once (a step's pace follows a slower handler immediately and a faster one
gradually), and the worker returns to the queue whatever waited for a thread too long
(``QueueWorker``), marking those steps slow.

Steps whose ``async def`` handlers run on the worker's event loop (``loop_steps``) have slots of their
own, ``async_capacity`` of them, beside the threads': a claim of their tasks takes those, a claim on a
queue that mixes both kinds takes as many as both kinds have free, so no task claimed waits for
a slot of its kind. Their pace is not learned: the extra slots are threads'.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable

from pgflow_django.worker.connection import ClaimedTask

TaskKey = tuple[uuid.UUID, str, int]
StepKey = tuple[str, str]
"""(flow slug, step slug): the unit whose handlers' pace the worker learns."""

SHORT_HANDLER_SECONDS = 0.005
"""Handlers faster than this (a claim's round trip on a busy server) leave threads idle between claims."""
PACE_WEIGHT = 0.1
"""How much a faster handler moves the pace; a slower one sets it."""
ALL_QUEUES = "*"
"""A notification about every queue the worker polls."""


class WorkerState:
    def __init__(
        self, capacity: int, prefetch: int = 0, steps: Iterable[StepKey] = (), async_capacity: int = 0
    ) -> None:
        self.capacity = capacity
        self.async_capacity = async_capacity
        """Handlers the event loop runs at once (``--async-concurrency``)."""
        self.loop_steps: frozenset[StepKey] = frozenset()
        """The steps whose handlers run on the event loop (set by the worker once it knows its flows)."""
        self._on_loop = 0
        """Held tasks of ``loop_steps``."""
        self.prefetch = prefetch
        """Tasks held while handlers are short (no more than ``capacity`` when not above it)."""
        self.steps = frozenset(steps)
        """The (flow, step) pairs whose tasks a claim or a hand-off may give this worker: all of them
        must be known short before it holds more than a task per thread (none given: it never does)."""
        self.groups: tuple[frozenset[StepKey], ...] = ()
        """The steps of each queue the worker polls (none given: ``steps`` is the one queue's): a claim
        on a queue whose steps are all known short may hold extra tasks; another takes free threads."""
        self._pace: dict[StepKey, float] = {}
        """Recent handler duration in seconds of each step that has finished a task here."""
        self._extra = 0
        """Slots beyond ``capacity`` granted by the pace."""
        self._cond = threading.Condition()
        self._in_flight: dict[TaskKey, ClaimedTask] = {}
        self._awaiting: set[TaskKey] = set()
        """Tasks taken whose result is not yet handed on: the completer waits for them, briefly."""
        self._cancelled: dict[TaskKey, threading.Event] = {}
        """Each held task's cancellation, set once its run is found cancelled (a handler's ``ctx``)."""
        self._executing = 0
        self._reserved = 0
        """Slots a completion holds for the tasks it may hand this worker (see ``reserve``)."""
        self._notified: set[str] = set()
        """The queues whose insert channel spoke since the loop last looked (``ALL_QUEUES``: any)."""
        self._slots_wanted = 0
        """Free slots the waiting loop needs before it is worth waking (0: nobody waits for slots)."""
        self.stopping = threading.Event()
        """Set by the first signal (or a deprecation): stop polling, drain. Handlers see it as ctx."""
        self.aborted = threading.Event()
        """Set when draining is over (timeout or second signal): pending work is abandoned."""

    # -- slots -----------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        with self._cond:
            return len(self._in_flight)

    @property
    def executing(self) -> int:
        """Handlers running right now (a stopped worker with some left must not wait for them)."""
        return self._executing

    def free_slots(self) -> int:
        """Free slots of either kind."""
        with self._cond:
            return self._free()

    def _free(self) -> int:
        if self.loop_steps:
            return max(0, self._free_threads()) + max(0, self._free_loop())
        return self._free_threads()

    def _free_threads(self) -> int:
        return self.capacity + self._extra - (len(self._in_flight) - self._on_loop) - self._reserved

    def _free_loop(self) -> int:
        """A hand-off's reservation counts against both kinds: it lasts one statement."""
        return self.async_capacity - self._on_loop - self._reserved

    def _free_for(self, steps: frozenset[StepKey]) -> int:
        on_loop = steps & self.loop_steps
        if on_loop:
            free_loop = self._free_loop()
            if on_loop == steps:
                return free_loop
            return min(free_loop, self._free_threads() - (0 if self._short(steps) else self._extra))
        return self._free_threads() - (0 if self._short(steps) else self._extra)

    def free_slots_for(self, steps: frozenset[StepKey]) -> int:
        """Free slots a claim of tasks of ``steps`` may fill: the event loop's for its steps, the
        threads' for the others, extra ones only while those are all short."""
        with self._cond:
            return self._free_for(steps)

    def batch_limit(self, batch_size: int, steps: frozenset[StepKey] | None = None) -> int:
        """Messages a claim may read: ``batch_size``, or every held slot while handlers are short (all
        of ``steps``, when given)."""
        if self._extra and (steps is None or self._short(steps)):
            return max(batch_size, self.capacity + self._extra)
        return batch_size

    def _paced(self, step: StepKey, seconds: float) -> None:
        pace = self._pace.get(step)
        paced = seconds if pace is None or seconds > pace else pace + PACE_WEIGHT * (seconds - pace)
        self._pace[step] = paced
        if self.prefetch <= self.capacity:
            return  # no extra slot to grant, whatever the pace
        if pace is None or (pace < SHORT_HANDLER_SECONDS) != (paced < SHORT_HANDLER_SECONDS):
            self._regrant()  # a step became known, short or slow: only then can the extra slots change

    def _regrant(self) -> None:
        """Grant the extra slots again from the paces; a loop waiting for slots sees the change."""
        extra = max(0, self.prefetch - self.capacity) if self._some_queue_short() else 0
        if extra != self._extra:
            self._extra = extra
            self._cond.notify_all()

    def set_groups(self, groups: tuple[frozenset[StepKey], ...]) -> None:
        """The steps of each queue the worker polls (a queue was added or dropped)."""
        with self._cond:
            self.groups = groups
            self._regrant()

    def _some_queue_short(self) -> bool:
        return any(self._short(group) for group in (self.groups or (self.steps,)))

    def _short(self, steps: frozenset[StepKey]) -> bool:
        on_threads = steps - self.loop_steps
        return bool(on_threads) and all(
            self._pace.get(step, SHORT_HANDLER_SECONDS) < SHORT_HANDLER_SECONDS for step in on_threads
        )

    def slow_down(self, steps: Iterable[StepKey], seconds: float) -> None:
        """Tasks of ``steps`` waited ``seconds`` for a thread: their handlers are not short, whatever
        the ones that finished said (the slow ones have not finished yet)."""
        with self._cond:
            for step in steps:
                self._paced(step, max(seconds, self._pace.get(step, 0.0)))

    def reserve(self, wanted: int, steps: frozenset[StepKey] | None = None) -> int:
        """Hold up to ``wanted`` free slots for a completion's hand-off of tasks of ``steps`` (0 once
        stopping), so the claim loop does not fill them meanwhile; ``take_reserved`` gives back what
        was not used."""
        with self._cond:
            if self.stopping.is_set():
                return 0
            free = self._free_threads() if steps is None else self._free_for(steps)
            granted = max(0, min(wanted, free))
            self._reserved += granted
            return granted

    def take_reserved(self, tasks: list[ClaimedTask], reserved: int) -> None:
        """The hand-off returned ``tasks`` for the ``reserved`` slots: hold them, free the rest."""
        with self._cond:
            for task in tasks:
                self._hold(task)
            self._reserved -= reserved
            if self._slots_wanted and self._free() >= self._slots_wanted:
                self._cond.notify_all()

    @property
    def awaiting_results(self) -> int:
        """Tasks taken (queued for a thread or running) whose result is not handed on yet."""
        return len(self._awaiting)

    def take(self, task: ClaimedTask) -> None:
        with self._cond:
            self._hold(task)

    def _hold(self, task: ClaimedTask) -> None:
        """A later attempt of a task held here (recovery gave it back meanwhile) takes the earlier
        one's entry: one entry, one slot, released by the attempt that holds it."""
        if self._in_flight.get(task.key) is None and (task.flow_slug, task.step_slug) in self.loop_steps:
            self._on_loop += 1
        self._in_flight[task.key] = task
        self._awaiting.add(task.key)
        self._cancelled[task.key] = threading.Event()

    def runs_on_loop(self, task: ClaimedTask) -> bool:
        return (task.flow_slug, task.step_slug) in self.loop_steps

    def result_ready(self, task: ClaimedTask) -> None:
        """The task's result is handed on (or never will be): it no longer holds a completion batch."""
        with self._cond:
            self._awaiting.discard(task.key)

    def started(self) -> None:
        with self._cond:
            self._executing += 1

    def finished(self) -> None:
        """The handler returned; its result is queued or recorded, but the slot is still held."""
        with self._cond:
            self._executing -= 1

    def release(self, task: ClaimedTask, seconds: float | None = None) -> None:
        """Give the task's slot back; ``seconds``: how long its handler took (the pace)."""
        with self._cond:
            step = (task.flow_slug, task.step_slug)
            on_loop = step in self.loop_steps
            if seconds is not None and not on_loop:
                self._paced(step, seconds)
            held = self._in_flight.get(task.key)
            if held is not None and held.attempt == task.attempt:  # not a later attempt held meanwhile
                del self._in_flight[task.key]
                self._awaiting.discard(task.key)
                self._cancelled.pop(task.key, None)
                if on_loop:
                    self._on_loop -= 1
            if self._slots_wanted and self._free() >= self._slots_wanted:
                self._cond.notify_all()

    def held_tasks(self) -> list[ClaimedTask]:
        with self._cond:
            return list(self._in_flight.values())

    def cancellation(self, task: ClaimedTask) -> threading.Event:
        """The event set when ``task``'s run is cancelled (a fresh, never-set one for a task not held)."""
        with self._cond:
            return self._cancelled.get(task.key) or threading.Event()

    def cancel(self, keys: set[TaskKey]) -> int:
        """Tell the handlers of the held tasks in ``keys`` that their run was cancelled; how many were new."""
        told = 0
        with self._cond:
            for key in keys:
                event = self._cancelled.get(key)
                if event is not None and not event.is_set():
                    event.set()
                    told += 1
        return told

    # -- wake-ups ------------------------------------------------------------------------------

    def notify_messages(self, queue: str = ALL_QUEUES) -> None:
        """A new message may be waiting on ``queue`` (a LISTEN notification, a retry), or on any
        queue (the listener just reconnected, or recovery made messages visible)."""
        with self._cond:
            self._notified.add(queue)
            self._cond.notify_all()

    def take_notifications(self) -> set[str]:
        """Clear and return the notified queues, before a read, so a later insert counts again."""
        with self._cond:
            notified, self._notified = self._notified, set()
            return notified

    def request_stop(self) -> None:
        with self._cond:
            self.stopping.set()
            self._cond.notify_all()

    def wait(self, timeout: float, until: Callable[[], bool], slots: int = 0) -> bool:
        """Sleep up to ``timeout`` s, or until stopping or ``until()`` holds (checked under the lock);
        ``slots``: the free slots ``until`` waits for, so that releases wake us only once there (a
        change of the extra slots wakes us too)."""
        deadline = time.monotonic() + max(0.0, timeout)
        with self._cond:
            self._slots_wanted = slots
            try:
                while not (self.stopping.is_set() or until()):
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    self._cond.wait(remaining)
                return True
            finally:
                self._slots_wanted = 0

    def wait_for_slot(self, timeout: float) -> bool:
        return self.wait(timeout, lambda: self._free() > 0, slots=1)

    def wait_for_room(self, groups: Iterable[frozenset[StepKey]], timeout: float) -> bool:
        """Until one of ``groups`` (the steps of a queue) has a slot it may fill: a free thread beyond
        the extra ones, or a free event-loop slot for its async steps."""
        wanted = list(groups)
        return self.wait(
            timeout,
            lambda: any(self._free_for(group) > 0 for group in wanted),
            slots=min((self._room_hint(group) for group in wanted), default=1),
        )

    def _room_hint(self, group: frozenset[StepKey]) -> int:
        """The free slots (``_free``) from which ``group`` may have room: releases wake a waiter
        only from there. One for a group with async steps or a short one, else beyond the extra."""
        if group & self.loop_steps or self._short(group):
            return 1
        return self._extra + 1

    def wait_for_slots(self, wanted: int, timeout: float) -> bool:
        return self.wait(timeout, lambda: self._free() >= wanted, slots=wanted)

    def wait_for_messages(self, timeout: float) -> bool:
        return self.wait(timeout, lambda: bool(self._notified))

    def wait_for_drain(self, timeout: float) -> bool:
        """Used after stopping: returns True once no task is held (nor a slot reserved for a hand-off)."""
        deadline = time.monotonic() + max(0.0, timeout)
        with self._cond:
            self._slots_wanted = self.capacity
            try:
                while self._in_flight or self._reserved:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or self.aborted.is_set():
                        return False
                    self._cond.wait(min(remaining, 0.2))
                return True
            finally:
                self._slots_wanted = 0
