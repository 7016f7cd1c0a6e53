"""SIGTERM and SIGINT for a worker process: the first stops polling and lets in-flight tasks finish,
the second exits at once."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import NoReturn

logger = logging.getLogger("pgflow_django.worker")


def exit_now(signum: int) -> NoReturn:
    """A second stop signal: exit at once and leave in-flight tasks to stalled-task recovery."""
    logger.warning(
        "second %s: exiting now; stalled-task recovery will take over", signal.Signals(signum).name
    )
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(128 + signum)


class GracefulStop:
    """Installed once per process: ``announce(signal_name)`` logs what the stop will wait for, then
    ``stop()`` asks every loop to finish."""

    def __init__(self, announce: Callable[[str], None], stop: Callable[[], None]) -> None:
        self._announce = announce
        self._stop = stop
        self._signalled = False

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._signalled:
            exit_now(signum)
        self._signalled = True
        self._announce(signal.Signals(signum).name)
        self._stop()
