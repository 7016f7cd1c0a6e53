"""The worker's event loop on its own: items it could not start, a loop that dies, a stop."""

from __future__ import annotations

import asyncio
import sys
import threading
import time

from pgflow_django.worker.event_loop import HandlerLoop


class Recorder:
    def __init__(self) -> None:
        self.began: list[str] = []
        self.cancelled: list[str] = []
        self.abandoned: list[str] = []
        self.died = threading.Event()
        self.closed = threading.Event()

    async def run(self, item: str) -> None:
        self.began.append(item)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            self.cancelled.append(item)

    def loop(self) -> HandlerLoop[str]:
        handlers = HandlerLoop(
            self.run, str, abandon=self.abandoned.append, tidy=lambda: None, died=self.died.set
        )
        handlers.start()
        return handlers


def until(check: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_handler_cancelled_before_it_began_is_given_back() -> None:
    seen = Recorder()
    handlers = seen.loop()
    gate = threading.Event()
    handlers._loop.call_soon_threadsafe(gate.wait, 5)  # the loop is busy: nothing begins yet
    handlers.submit("a")
    handlers.cancel(lambda item: True)
    gate.set()
    until(lambda: seen.abandoned == ["a"])
    assert seen.began == [] and handlers.running == 0
    handlers.stop(seen.closed.set, 2.0)


def test_stop_cancels_the_running_handlers_closes_on_the_orm_thread_and_ends_the_loop() -> None:
    seen = Recorder()
    handlers = seen.loop()
    handlers.submit("a")
    until(lambda: seen.began == ["a"])
    handlers.stop(seen.closed.set, 2.0)
    assert seen.cancelled == ["a"] and seen.closed.is_set()
    assert not handlers._thread.is_alive() and not handlers.abandoned and not seen.died.is_set()


def test_a_loop_that_stops_on_its_own_tells_the_worker_and_takes_nothing_more() -> None:
    seen = Recorder()
    handlers = seen.loop()
    handlers._loop.call_soon_threadsafe(sys.exit)
    assert seen.died.wait(5)
    try:
        handlers.submit("a")
    except RuntimeError as exc:
        assert "shut down" in str(exc)
    else:
        raise AssertionError("a dead loop accepted work")
