"""The README's quickstart runs as pasted: its flows.py defines the flow with nothing left to write,
and its snippet starts a run and waits for it (the worker's part played by ``drain``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from pgflow_django import Flow
from pgflow_django.flows.compiler import compile_flow
from pgflow_django.testing import drain

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def _blocks() -> tuple[str, str]:
    blocks = BLOCK.findall(README.read_text(encoding="utf-8"))
    flows = next(block for block in blocks if block.startswith("# myapp/flows.py"))
    start = next(block for block in blocks if "start_flow(" in block)
    return flows, start


def test_the_readme_names_no_module_it_does_not_show() -> None:
    for block in _blocks():
        assert "from myapp" not in block and "import myapp" not in block, block


def test_the_readme_quickstart_runs_as_pasted(capsys: pytest.CaptureFixture[str]) -> None:
    flows, start = _blocks()
    defined: dict[str, Any] = {}
    exec(flows, defined)  # as pasted: no line left out, no name supplied
    (orders,) = [value for value in defined.values() if isinstance(value, Flow)]
    compile_flow(orders)
    before, wait, after = start.partition("run = wait_for_run(")
    assert wait, "the snippet waits for its run"
    shell: dict[str, Any] = {}
    exec(before, shell)
    drain(flows=[orders])  # what the worker of the quickstart does
    exec(wait + after, shell)
    assert shell["run"].status == "completed"
    printed = capsys.readouterr().out
    comment = re.search(r"print\(run\.status, run\.output\)\s+# (.+)", start)
    assert comment and printed.strip() == comment[1].strip(), printed
