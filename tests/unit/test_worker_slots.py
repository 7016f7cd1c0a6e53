"""Slots that follow the handlers' pace (learned per step), and the slots a completion reserves for a
hand-off."""

from __future__ import annotations

import threading
import time
import uuid

from pgflow_django.worker.connection import ClaimedTask
from pgflow_django.worker.slots import SHORT_HANDLER_SECONDS, WorkerState


def task(index: int, step: str = "step") -> ClaimedTask:
    return ClaimedTask("f", uuid.UUID(int=index + 1), step, 0, index, 1, None)


def test_short_handlers_let_the_worker_hold_its_prefetch_and_claim_as_many() -> None:
    state = WorkerState(capacity=10, prefetch=100, steps=[("f", "step")])
    assert (state.free_slots(), state.batch_limit(10)) == (10, 10), "no handler has finished yet"
    state.take(task(0))
    state.release(task(0), SHORT_HANDLER_SECONDS / 10)
    assert (state.free_slots(), state.batch_limit(10)) == (100, 100)


def test_one_slow_handler_brings_the_slots_back_to_one_per_thread() -> None:
    state = WorkerState(capacity=10, prefetch=100, steps=[("f", "step")])
    for index in range(5):
        state.take(task(index))
        state.release(task(index), SHORT_HANDLER_SECONDS / 10)
    state.take(task(9))
    state.release(task(9), 1.0)
    assert (state.free_slots(), state.batch_limit(10)) == (10, 10)
    state.take(task(10))
    state.release(task(10), SHORT_HANDLER_SECONDS / 10)
    assert state.free_slots() == 10, "one fast handler after a slow one is not enough"


def test_no_prefetch_above_the_capacity_changes_nothing() -> None:
    state = WorkerState(capacity=100, prefetch=100, steps=[("f", "step")])
    state.take(task(0))
    state.release(task(0), 0.0)
    assert (state.free_slots(), state.batch_limit(100)) == (100, 100)
    zero = WorkerState(capacity=4, prefetch=0, steps=[("f", "step")])
    zero.take(task(0))
    zero.release(task(0), 0.0)
    assert (zero.free_slots(), zero.batch_limit(2)) == (4, 2)


def test_a_fast_step_does_not_make_a_step_that_has_not_finished_a_task_short() -> None:
    state = WorkerState(capacity=4, prefetch=100, steps=[("f", "fast"), ("f", "slow")])
    for index in range(20):
        state.take(task(index, "fast"))
        state.release(task(index, "fast"), SHORT_HANDLER_SECONDS / 10)
    assert (state.free_slots(), state.batch_limit(4)) == (4, 4), "the slow step's speed is unknown"
    state.take(task(20, "slow"))
    state.release(task(20, "slow"), 1.0)
    for index in range(21, 60):
        state.take(task(index, "fast"))
        state.release(task(index, "fast"), SHORT_HANDLER_SECONDS / 10)
    assert state.free_slots() == 4, "a fast step's pace is never carried to a slow one"


def test_a_step_whose_tasks_waited_for_a_thread_is_slow_until_it_proves_otherwise() -> None:
    state = WorkerState(capacity=2, prefetch=50, steps=[("f", "step")])
    state.take(task(0))
    state.release(task(0), SHORT_HANDLER_SECONDS / 10)
    assert state.free_slots() == 50
    state.slow_down([("f", "step")], 0.5)
    assert (state.free_slots(), state.batch_limit(2)) == (2, 2)


def test_a_worker_that_does_not_know_its_steps_never_prefetches() -> None:
    state = WorkerState(capacity=2, prefetch=50)
    state.take(task(0))
    state.release(task(0), 0.0)
    assert state.free_slots() == 2


def test_slots_reserved_for_a_hand_off_are_not_free_until_taken_or_given_back() -> None:
    state = WorkerState(capacity=3)
    state.take(task(0))
    assert state.reserve(5) == 2
    assert state.free_slots() == 0 and state.reserve(1) == 0
    state.take_reserved([task(1)], 2)
    assert state.free_slots() == 1 and state.in_flight == 2
    state.request_stop()
    assert state.reserve(1) == 0, "a stopping worker is handed nothing"


def test_event_loop_slots_are_their_own_and_a_mixed_queue_takes_what_both_kinds_have() -> None:
    state = WorkerState(capacity=2, async_capacity=5)
    state.loop_steps = frozenset({("f", "fetch")})
    loop_only, threads_only = frozenset({("f", "fetch")}), frozenset({("f", "step")})
    mixed = loop_only | threads_only
    assert (state.free_slots_for(loop_only), state.free_slots_for(threads_only)) == (5, 2)
    assert state.free_slots_for(mixed) == 2 and state.free_slots() == 7
    for index in range(5):
        state.take(task(index, "fetch"))
    assert (state.free_slots_for(loop_only), state.free_slots_for(threads_only)) == (0, 2)
    assert state.free_slots_for(mixed) == 0, "a task of either kind may come: none is claimed"
    assert not state.wait_for_room([loop_only], 0.01), "nothing frees an event-loop slot"
    assert state.wait_for_room([loop_only, threads_only], 0.01), "a thread is free for the other queue"
    state.release(task(0, "fetch"), 5.0)
    assert state.free_slots_for(loop_only) == 1 and state.free_slots() == 3
    assert state.wait_for_room([loop_only], 0.01)


def test_an_event_loop_step_does_not_make_the_worker_prefetch_for_threads() -> None:
    state = WorkerState(capacity=2, prefetch=50, steps=[("f", "fetch")], async_capacity=5)
    state.loop_steps = frozenset({("f", "fetch")})
    state.set_groups((frozenset({("f", "fetch")}),))
    for index in range(10):
        state.take(task(index, "fetch"))
        state.release(task(index, "fetch"), 0.0)
    assert state.free_slots() == 7, "the pace of async handlers grants no extra thread slots"
    assert state.batch_limit(10, frozenset({("f", "fetch")})) == 10


def test_releasing_an_earlier_attempt_keeps_the_later_one_held_and_the_counts_right() -> None:
    state = WorkerState(capacity=2, async_capacity=3)
    state.loop_steps = frozenset({("f", "fetch")})
    first = ClaimedTask("f", uuid.UUID(int=1), "fetch", 0, 1, 1, None)
    again = ClaimedTask("f", uuid.UUID(int=1), "fetch", 0, 2, 2, None)
    state.take(first)
    state.take(again)  # recovery gave the task to this worker again while the first attempt ran
    state.release(first, 1.0)
    assert state.in_flight == 1, "the later attempt is still held"
    state.release(again, 1.0)
    assert state.in_flight == 0
    assert state.free_slots_for(frozenset({("f", "fetch")})) == 3, "no event-loop slot was lost"


def test_a_short_thread_queue_beside_an_async_one_is_woken_by_one_free_thread() -> None:
    state = WorkerState(capacity=2, prefetch=20, steps=[("f", "step"), ("f", "fetch")], async_capacity=4)
    state.loop_steps = frozenset({("f", "fetch")})
    short = frozenset({("f", "step")})
    state.set_groups((short, frozenset({("f", "fetch")})))
    state.take(task(0))
    state.release(task(0), 0.0)  # the step is known short: the extra slots are granted
    held = [task(index) for index in range(1, 21)]
    for item in held:
        state.take(item)
    waker = threading.Timer(0.05, state.release, [held[0], 0.0])
    waker.start()
    began = time.monotonic()
    assert state.wait_for_room([short], 2.0)
    assert time.monotonic() - began < 1.0, "one freed slot is room for a short queue"
