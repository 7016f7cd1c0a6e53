"""One process serving several queues (``--queue '*'``): one claim loop per queue, each in a thread.

Every queue keeps its own worker registration, slots (``--concurrency`` per queue) and connections;
they share the process's signals, its ``--max-tasks`` budget and its ``--until-empty`` decision, and
the process exits once every loop has stopped and drained.
"""

from __future__ import annotations

import logging
import threading

from pgflow_django.worker.queue_worker import QueueWorker
from pgflow_django.worker.stop_signals import GracefulStop

logger = logging.getLogger("pgflow_django.worker")

JOIN_SLICE_SECONDS = 0.2
"""The main thread joins in slices so that it keeps handling signals."""


class WorkerGroup:
    def __init__(self, workers: list[QueueWorker]) -> None:
        self.workers = workers
        workers[0].share_limits(workers)
        self._failed = False

    def run(self) -> int:
        """Start every loop, wait for all of them; the process exit code (1 if any could not run)."""
        GracefulStop(self._announce_stop, self._stop_all).install()
        threads = [
            threading.Thread(target=self._serve, args=(worker,), name=f"pgflow-queue-{worker.queue}")
            for worker in self.workers
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(JOIN_SLICE_SECONDS)
        return 1 if self._failed or any(worker.fatal for worker in self.workers) else 0

    @property
    def abandoned_handlers(self) -> bool:
        return any(worker.abandoned_handlers for worker in self.workers)

    def _serve(self, worker: QueueWorker) -> None:
        try:
            try:
                worker.start()
                worker.loop()
            finally:
                worker.shutdown()
        except Exception:
            logger.exception("queue=%s stopped on an error", worker.queue)
            self._failed = True
            self._stop_all()  # one queue failing stops the process, not half of it

    def _announce_stop(self, signal_name: str) -> None:
        logger.info(
            "%s: stopped polling queues %s; finishing %d in-flight task(s) within %.0fs",
            signal_name,
            ",".join(worker.queue for worker in self.workers),
            sum(worker.state.in_flight for worker in self.workers),
            self.workers[0].options.shutdown_timeout,
        )

    def _stop_all(self) -> None:
        for worker in self.workers:
            worker.state.request_stop()
