"""The flow definitions shown in the README and the quickstart are valid flows (they run at import)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pgflow_django import Flow

ROOT = Path(__file__).resolve().parents[2]
FLOW_BLOCK = re.compile(r"```python\n(# myapp/flows\.py.*?)```", re.S)


@pytest.mark.parametrize("doc", ["README.md", "docs/quickstart.md"])
def test_flow_examples_define_valid_flows(doc: str) -> None:
    blocks = FLOW_BLOCK.findall((ROOT / doc).read_text(encoding="utf-8"))
    assert blocks, f"{doc} shows no flows.py example"
    namespace: dict[str, object] = {}
    exec(blocks[0], namespace)  # as pasted: the example imports nothing the reader must write first
    flows = [value for value in namespace.values() if isinstance(value, Flow)]
    assert flows
    assert all(flow.shape()["steps"] for flow in flows)
