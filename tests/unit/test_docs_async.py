"""docs/async.md's "Async client API" examples are the views ``tests/async_views.py`` defines, which
``tests/integration/test_async_client_asgi.py`` serves with uvicorn and calls: every line of that
section's Python blocks (imports and comments aside) is in one of those two files. Later sections of
the page test their own examples."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "async.md"
TESTED = (ROOT / "tests" / "async_views.py", ROOT / "tests" / "integration" / "test_async_client_asgi.py")


def _section() -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index("\n## Async client API\n")
    end = text.find("\n## ", start + 1)
    return text[start : None if end == -1 else end]


def test_every_line_of_the_async_client_examples_is_tested() -> None:
    tested = {line.strip() for path in TESTED for line in path.read_text(encoding="utf-8").splitlines()}
    blocks = re.findall(r"```python\n(.*?)```", _section(), re.S)
    assert len(blocks) >= 2
    for block in blocks:
        for line in textwrap.dedent(block).splitlines():
            if line.strip() and not line.lstrip().startswith(("#", "from ", "import ")):
                assert line.strip() in tested, f"docs/async.md line not in the tested examples: {line!r}"
