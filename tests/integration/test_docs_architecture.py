"""The statement example of docs/architecture.md runs as shown, on the test database."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_where_a_statement_lives_example_runs() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 1
    namespace: dict[str, object] = {}
    exec(blocks[0], namespace)
    assert isinstance(namespace["version"], int) and namespace["version"] > 0
    assert namespace["missing"] == []
