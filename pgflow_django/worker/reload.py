"""``pgflow_worker --reload``: restart the worker when the project's code changes, for development.

It uses Django's autoreloader, as ``runserver`` does, with one difference: a change stops the worker
gracefully (in-flight tasks finish or are given back) before the new process starts, so no claim is
left to stalled-task recovery. The parent process only restarts the child, which runs in a process
group of its own: the parent passes each SIGINT (Ctrl-C) and SIGTERM on once, and after one it starts
no new child.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from django.utils import autoreload

logger = logging.getLogger("pgflow_django.worker")

RESTART_CODE = 3
"""The exit code that asks the parent for a new child (Django's reloader uses the same)."""


def in_reloaded_child() -> bool:
    return os.environ.get(autoreload.DJANGO_AUTORELOAD_ENV) == "true"


def restart_on_change() -> int:
    """The parent: run the command again in a child until it exits other than for a code change.
    It holds no database connection meanwhile (the command's checks may have opened one)."""
    from django.db import connections

    connections.close_all()
    environment = {**os.environ, autoreload.DJANGO_AUTORELOAD_ENV: "true"}
    arguments = [str(argument) for argument in autoreload.get_child_arguments()]
    stopped: list[int] = []
    while True:
        child = subprocess.Popen(arguments, env=environment, close_fds=False, process_group=0)
        previous = _pass_signals_to(child, stopped)
        try:
            code = child.wait()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        if code != RESTART_CODE or stopped:
            return 0 if code == RESTART_CODE else code


def _pass_signals_to(child: subprocess.Popen[bytes], stopped: list[int]) -> dict[int, Any]:
    """The child is in a group of its own, out of the terminal's reach: send each signal on once."""

    def forward(signum: int, frame: FrameType | None) -> None:
        stopped.append(signum)
        if child.poll() is None:
            child.send_signal(signum)

    return {signum: signal.signal(signum, forward) for signum in (signal.SIGINT, signal.SIGTERM)}


def watch_code(stop: Callable[[str], None]) -> None:
    """The child: watch the loaded modules (and what Django's ``autoreload_started`` receivers add) in
    a daemon thread; the first change calls ``stop(path)`` instead of exiting at once."""
    reloader = autoreload.get_reloader()

    def changed(sender: object, file_path: Any, **kwargs: Any) -> bool:
        reloader.stop()
        stop(str(file_path))
        return True  # handled: Django's reloader does not exit the process itself

    autoreload.file_changed.connect(changed, weak=False)
    autoreload.autoreload_started.send(sender=reloader)
    threading.Thread(target=reloader.run_loop, name="pgflow-reloader", daemon=True).start()
    logger.info("watching the code with %s: a change restarts the worker (--reload)", type(reloader).__name__)
