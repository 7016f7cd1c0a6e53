"""Names a package exports without importing their modules (and Django) until first used."""

from __future__ import annotations

from importlib import import_module
from typing import Any


def load_lazily(namespace: dict[str, Any], name: str, module: str | None) -> Any:
    """A package's ``__getattr__``: ``name`` from ``module`` (None: the package exports no such
    name), kept in the package's ``namespace`` so the next use finds it there."""
    if module is None:
        raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    namespace[name] = value
    return value
