"""The support pipeline's second step-queued version, for ``bench.support_validation`` only: with it,
both deployment styles carry two concrete versions during a drain."""

from __future__ import annotations

from pgflow_django import with_step_queues
from testproject.example.support import support_thread

support_thread_steps_v2 = with_step_queues(support_thread.copy(slug="support_thread_steps_v2"))
