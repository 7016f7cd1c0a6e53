"""Test flows on the real engine, inside the test's own transaction, without a worker.

``run_flow`` and ``drain`` claim, run and complete tasks in the calling thread on the caller's Django
connection with the worker's own statements and handler code, so they work inside ``TestCase``
(whose transaction is never committed, so a worker process would never see its runs). Delays are
brought forward in the database instead of slept through. docs/testing.md has the guide.
"""

from __future__ import annotations

from pgflow_django.testing.clock import Waiting, advance
from pgflow_django.testing.drain import DrainStuck, DrainSummary, drain, run_flow
from pgflow_django.testing.events import send_event
from pgflow_django.testing.inprocess import IN_PROCESS_WORKER_ID
from pgflow_django.testing.overrides import FailNext, fail_next, override_handler, reset
from pgflow_django.testing.results import Run, TaskView, load_run

__all__ = [
    "IN_PROCESS_WORKER_ID",
    "DrainStuck",
    "DrainSummary",
    "FailNext",
    "Run",
    "TaskView",
    "Waiting",
    "advance",
    "drain",
    "fail_next",
    "load_run",
    "override_handler",
    "reset",
    "run_flow",
    "send_event",
]
