"""pytest fixtures, registered through the ``pytest11`` entry point; defined only when pytest-django is
installed (they stand on its database fixtures).

``pgflow``: the ``pgflow_django.testing`` helpers bound to the test database; overrides and armed
failures are cleared at teardown. ``pgflow_worker``: starts real ``pgflow_worker`` subprocesses for
``transaction=True`` tests, stops them at teardown, and attaches their logs to a failing test's report.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pgflow_django.flows.dsl import Flow, StepRef
    from pgflow_django.testing import DrainSummary, FailNext, Run, Waiting, override_handler
    from pgflow_django.testing.worker_process import WorkerProcess

try:
    import pytest_django  # noqa: F401
except ImportError:
    ENABLED = False
else:
    ENABLED = True

_WORKERS = pytest.StashKey[list["WorkerProcess"]]()


class PgflowHelpers:
    """``pgflow_django.testing`` with ``using`` bound to one database alias."""

    def __init__(self, using: str = "default") -> None:
        self.using = using

    def run_flow(self, flow: Flow | str, input: Any, **options: Any) -> Run:
        from pgflow_django.testing import run_flow

        return run_flow(flow, input, using=self.using, **options)

    def drain(self, **options: Any) -> DrainSummary:
        from pgflow_django.testing import drain

        return drain(using=self.using, **options)

    def advance(self, seconds: float, flows: Iterable[Any] | None = None) -> int:
        from pgflow_django.testing import advance

        return advance(seconds, flows=None if flows is None else list(flows), using=self.using)

    def waiting(self) -> list[Waiting]:
        from pgflow_django.testing.clock import waiting

        return waiting(using=self.using)

    def start_flow(self, flow: Flow | str, input: Any, **options: Any) -> Any:
        from pgflow_django.runs.client import start_flow

        return start_flow(flow, input, using=self.using, **options)

    def get_run(self, run_id: Any) -> Run:
        from pgflow_django.testing import load_run

        return load_run(run_id, using=self.using)

    def override_handler(
        self, flow: Flow | str, step: StepRef, handler: Callable[..., Any]
    ) -> override_handler:
        from pgflow_django.testing import override_handler

        return override_handler(flow, step, handler)

    def fail_next(self, flow: Flow | str, step: StepRef, **options: Any) -> FailNext:
        from pgflow_django.testing import fail_next

        return fail_next(flow, step, **options)

    def using_database(self, alias: str) -> PgflowHelpers:
        """The same helpers on another database alias."""
        return PgflowHelpers(alias)


class WorkerSpawner:
    """``pgflow_worker("--flow", "orders")`` starts a worker (ready unless ``ready=False``);
    ``settings="myproject.worker_settings"`` gives it another settings module."""

    def __init__(self, item: pytest.Item, log_dir: Path, using: str = "default") -> None:
        self.item = item
        self.log_dir = log_dir
        self.using = using
        self.started: list[WorkerProcess] = []

    def __call__(
        self, *args: str, ready: bool = True, timeout: float = 60.0, settings: str | None = None
    ) -> WorkerProcess:
        from pgflow_django.testing.worker_process import WorkerProcess

        log = self.log_dir / f"pgflow-worker-{len(self.started)}.log"
        worker = WorkerProcess(list(args), log, using=self.using, settings_module=settings)
        self.started.append(worker)
        self.item.stash.setdefault(_WORKERS, []).append(worker)
        return worker.wait_ready(timeout) if ready else worker

    def stop_all(self) -> None:
        for worker in self.started:
            worker.stop()


def attach_worker_logs(report: pytest.TestReport, workers: list[WorkerProcess]) -> None:
    """Add each worker's log to a failed report, as captured output is."""
    if not report.failed:
        return
    for worker in workers:
        report.sections.append((f"pgflow_worker pid={worker.pid} {' '.join(worker.args)}", worker.log()))


if ENABLED:

    @pytest.fixture
    def pgflow(db: None) -> Iterator[PgflowHelpers]:
        """The testing helpers on the test database (works with and without ``transaction=True``)."""
        from pgflow_django.testing import reset

        reset()
        yield PgflowHelpers()
        reset()

    @pytest.fixture
    def pgflow_worker(
        transactional_db: None, request: pytest.FixtureRequest, tmp_path: Path
    ) -> Iterator[WorkerSpawner]:
        """Real worker subprocesses on the test database; what they need must be committed, so the
        test runs as ``transaction=True``. Stopped (SIGTERM, then killed) at teardown."""
        spawner = WorkerSpawner(request.node, tmp_path)
        yield spawner
        spawner.stop_all()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        attach_worker_logs(report, item.stash.get(_WORKERS, []))
        return report
