"""The ``pgflow_worker`` process: claims the tasks of the queues it serves and runs their handlers.

See ``queue_worker`` for the thread and connection layout (at most ``concurrency + 3`` connections).
"""

from pgflow_django.flows.context import TaskContext
from pgflow_django.worker.options import WorkerOptions
from pgflow_django.worker.preflight import PreflightError
from pgflow_django.worker.queue_worker import QueueWorker

__all__ = ["PreflightError", "QueueWorker", "TaskContext", "WorkerOptions"]
