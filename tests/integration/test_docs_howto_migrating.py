"""The Python of docs/howto/from-celery.md and docs/howto/from-django-tasks-db.md, as pasted: the flow
module is imported as a real module, its schedule declared, and its run started and waited for by the
page's own code with a real worker; the settings build a working backend, and the task module's task
runs through it. (docs/howto/deploy-workers.md is checked in ``tests/unit/test_docs_howto_deploy.py``.)"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from django.utils.module_loading import import_string

from pgflow_django import compile_flow
from pgflow_django.schedules.declare import declared_schedules, forget_declarations
from pgflow_django.tasks import PgflowTaskBackend
from pgflow_django.testing import drain
from tests.docs_commands import blocks
from tests.support.db import tuples
from tests.tasks_support import status
from tests.workers import InProcessWorker

TASK_IMPORT = "from django.tasks import task  # Django 5.2: from django_tasks import task"


@pytest.fixture
def doc_module(tmp_path: Path) -> Iterator[Callable[[str, str], ModuleType]]:
    """``load(name, source)``: ``source`` imported as the module ``name``."""
    sys.path.insert(0, str(tmp_path))
    loaded: list[str] = []

    def load(name: str, source: str) -> ModuleType:
        (tmp_path / f"{name}.py").write_text(source, encoding="utf-8")
        loaded.append(name)
        return importlib.import_module(name)

    try:
        yield load
    finally:
        sys.path.remove(str(tmp_path))
        for name in loaded:
            sys.modules.pop(name, None)


@pytest.fixture
def celery_blocks() -> list[str]:
    found = blocks("howto/from-celery.md", "python")
    assert len(found) == 2
    return found


@pytest.mark.django_db(transaction=True)
def test_the_celery_pipeline_as_a_flow_runs_on_a_worker(
    doc_module: Callable[[str, str], ModuleType], celery_blocks: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    flows, start = celery_blocks
    assert flows.startswith("# myapp/flows.py\n")
    try:
        module = doc_module("howto_celery_flows", flows)
        [spec] = [spec for spec in declared_schedules() if spec.name == "nightly-thumbnails"]
        assert (spec.cron, spec.flow_slug) == ("0 3 * * *", "thumbnails")
        compile_flow(module.thumbnails)
        worker = InProcessWorker(module.thumbnails)
        try:
            exec(start, {})
        finally:
            worker.stop()
        printed = capsys.readouterr().out.strip()
        promised = re.search(r"# (completed .*)$", start, re.MULTILINE)
        assert promised and printed == promised[1]
    finally:
        forget_declarations("nightly-thumbnails")
        tuples("select pgflow.delete_flow_and_data('thumbnails')")
        tuples("delete from pgflow.workers where queue_name = 'thumbnails'")


def test_a_busy_storage_retries_with_its_delay(
    doc_module: Callable[[str, str], ModuleType], celery_blocks: list[str]
) -> None:
    from pgflow_django import Retry

    try:
        module = doc_module("howto_celery_flows_retry", celery_blocks[0])

        def busy(url: str, size: int) -> Any:
            raise module.StorageBusy()

        module.store_thumbnail = busy
        with pytest.raises(Retry) as raised:
            module.resize({"url": "https://example.com/a.png", "size": 64})
        assert raised.value.delay == 30
    finally:
        forget_declarations("nightly-thumbnails")


def test_the_django_tasks_db_settings_make_a_pgflow_backend() -> None:
    settings_block, _ = blocks("howto/from-django-tasks-db.md", "python")
    namespace: dict[str, Any] = {"INSTALLED_APPS": ["django.contrib.contenttypes"]}
    exec(settings_block, namespace)
    assert namespace["INSTALLED_APPS"][-1] == "pgflow_django"
    params = namespace["TASKS"]["default"]
    backend = PgflowTaskBackend("default", params)
    assert set(backend.queues) == {"default", "mail"}
    assert import_string(params["BACKEND"]) is PgflowTaskBackend


def test_the_retried_task_runs_on_the_backend(doc_module: Callable[[str, str], ModuleType]) -> None:
    _, tasks_block = blocks("howto/from-django-tasks-db.md", "python")
    assert TASK_IMPORT in tasks_block
    module = doc_module(
        "howto_tasks_db_tasks",
        tasks_block.replace(TASK_IMPORT, "from testproject.example.task_api import task"),
    )
    assert (module.send_receipt.queue_name, module.send_receipt.max_attempts) == ("mail", 3)
    result = module.send_receipt.enqueue(42)
    drain()
    result.refresh()
    assert result.status == status.SUCCESSFUL
    assert result.return_value == {"order_id": 42, "sent": True}
