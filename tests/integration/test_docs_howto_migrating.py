"""The Python of docs/howto/from-celery.md and docs/howto/from-django-tasks-db.md, as pasted: the flow
module is imported as a real module, its schedule declared, and its run started and waited for by the
page's own code with a real worker; the settings build a working backend, and the task module's task
runs through it. docs/django-tasks.md's task module builds its tasks, with their options, on this
Django. (docs/howto/deploy-workers.md is checked in ``tests/unit/test_docs_howto_deploy.py``.)"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from django.utils.module_loading import import_string

from pgflow_django import compile_flow
from pgflow_django.schedules.declare import declared_schedules, forget_declarations
from pgflow_django.tasks import PgflowTaskBackend
from pgflow_django.testing import drain
from tests.docs_commands import DOCS, blocks
from tests.support.db import tuples
from tests.tasks_support import status
from tests.workers import InProcessWorker


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
    """The block as shown, on whichever framework this Django has (django.tasks, or the backport on
    5.2): its task carries its own options and runs through the backend."""
    _, tasks_block = blocks("howto/from-django-tasks-db.md", "python")
    module = doc_module("howto_tasks_db_tasks", tasks_block)
    receipt = module.send_receipt
    options = (receipt.queue_name, receipt.max_attempts, receipt.base_delay, receipt.timeout)
    assert options == ("mail", 3, 5, 30)
    assert receipt.func.__module__ == "howto_tasks_db_tasks"
    result = receipt.enqueue(42)
    drain()
    result.refresh()
    assert result.status == status.SUCCESSFUL
    assert result.return_value == {"order_id": 42, "sent": True}


def test_the_django_tasks_page_defines_its_tasks(doc_module: Callable[[str, str], ModuleType]) -> None:
    """docs/django-tasks.md's task module, as shown: its per-task options hold on Django 6.0 too."""
    found = blocks("django-tasks.md", "python")
    [tasks_block] = [block for block in found if block.startswith("# myapp/tasks.py")]
    module = doc_module("django_tasks_doc_tasks", tasks_block)
    welcome = module.send_welcome
    options = (welcome.queue_name, welcome.max_attempts, welcome.base_delay, welcome.timeout)
    assert options == ("mail", 3, 0, 20)
    assert module.which_attempt.takes_context and module.add.max_attempts is None


def send_receipt(order_id: int) -> dict[str, Any]:
    return {"order_id": order_id, "sent": True}


def test_the_one_line_task_options_are_refused_only_by_django_6_0() -> None:
    """The page: Django 6.0's ``@task`` raises TypeError on ``max_attempts``/``base_delay``/``timeout``;
    the backport (and 6.1) passes them on to the backend's task class."""
    import django

    from pgflow_django.tasks.framework import FRAMEWORK

    text = (DOCS / "howto" / "from-django-tasks-db.md").read_text(encoding="utf-8")
    one_line = re.search(r"`@task\((queue_name=[^`]*)\)`", text)
    assert one_line, "the page no longer shows the one-line form"
    call = ast.parse(f"task({one_line[1]})", mode="eval").body
    assert isinstance(call, ast.Call)
    options = {keyword.arg: ast.literal_eval(keyword.value) for keyword in call.keywords}
    assert options == {"queue_name": "mail", "max_attempts": 3, "base_delay": 5, "timeout": 30}
    framework_task = import_string(f"{FRAMEWORK}.task")
    if FRAMEWORK == "django.tasks" and django.VERSION[:2] == (6, 0):
        with pytest.raises(TypeError):
            framework_task(**options)
    else:
        built = framework_task(**options)(send_receipt)  # module-level, as Django requires
        assert (built.max_attempts, built.base_delay, built.timeout) == (3, 5, 30)
