"""Flows for the command tests, registered by dotted path (``PGFLOW["FLOWS"]``), one attribute each.

``greet``, ``greet_retimed`` and ``greet_changed`` share the slug ``cmd_greet`` on purpose: switching the
setting between them is how a test changes a flow's options or its shape.
"""

from __future__ import annotations

from typing import Any

from pgflow_django import Flow


def hello(flow_input: Any) -> Any:
    return {"greeting": f"hello {flow_input['name']}"}


def shout(deps: Any) -> Any:
    return deps["hello"]["greeting"].upper()


def square(item: Any) -> Any:
    return item * item


def explode(flow_input: Any) -> Any:
    raise RuntimeError("boom on purpose")


def _greet(**options: Any) -> Flow:
    flow = Flow("cmd_greet", **options)
    flow.step(slug="hello")(hello)
    flow.step(slug="shout", depends_on=["hello"])(shout)
    return flow


greet = _greet(max_attempts=2, timeout=5)
greet_retimed = _greet(max_attempts=2, timeout=9)

greet_changed = Flow("cmd_greet", max_attempts=2, timeout=5)
greet_changed.step(slug="hello")(hello)
greet_changed.map(slug="shout", array="hello")(shout)

squares = Flow("cmd_squares", max_attempts=1, timeout=5)
squares.map(slug="square")(square)

boom = Flow("cmd_boom", max_attempts=1, timeout=5)
boom.step(slug="explode")(explode)

MODULE = __name__
REGISTERED = [f"{MODULE}.greet", f"{MODULE}.squares", f"{MODULE}.boom"]
SLUGS = ("cmd_greet", "cmd_squares", "cmd_boom")
