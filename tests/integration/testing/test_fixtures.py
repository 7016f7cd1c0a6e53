"""The pytest plugin's fixtures: ``pgflow`` on the test database, ``pgflow_worker`` subprocesses."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from pgflow_django import compile_flow, start_flow, wait_for_run
from pgflow_django.testing import overrides
from pgflow_django.testing.pytest_plugin import attach_worker_logs
from testproject.example import flows as example


def test_the_pgflow_fixture_clears_what_a_test_armed(pgflow: Any) -> None:
    compile_flow(example.chain)
    pgflow.fail_next(example.chain, "first", times=5)
    pgflow.override_handler(example.chain, "third", lambda deps: "fake").__enter__()
    assert overrides.active()
    # what its teardown runs (this test then leaves nothing armed for the next)
    overrides.reset()
    assert not overrides.active()
    assert pgflow.run_flow(example.chain, {"n": 1}).status == "completed"


@pytest.mark.django_db(transaction=True)
def test_pgflow_worker_runs_committed_work_and_its_log_reaches_failures(
    pgflow_worker: Any, clean_example_flows: None
) -> None:
    worker = pgflow_worker("--flow", "example_chain", "--concurrency", "2")
    run = wait_for_run(start_flow("example_chain", {"n": 2}), timeout=60)
    assert run.status == "completed"

    failed = pytest.TestReport("t", ("t", 0, "t"), {}, "failed", "boom", "call")
    passed = pytest.TestReport("t", ("t", 0, "t"), {}, "passed", None, "call")
    attach_worker_logs(failed, [worker])
    attach_worker_logs(passed, [worker])
    assert passed.sections == []
    [(title, log)] = failed.sections
    assert title == f"pgflow_worker pid={worker.pid} --flow example_chain --concurrency 2"
    assert " started queue=example_chain" in log
    assert worker.stop() == 0


def test_the_plugin_defines_nothing_without_pytest_django() -> None:
    code = (
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'pytest_django' or name.startswith('pytest_django.'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import pgflow_django.testing.pytest_plugin as plugin\n"
        "print(plugin.ENABLED, hasattr(plugin, 'pgflow'), hasattr(plugin, 'pgflow_worker'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False", "False"]
