"""Callable inputs: a module-level function, stored by its dotted path, that the scheduler calls with
each tick. A leaf of the package, so the firing side (which the worker imports) reaches none of the
definition side (which reaches the tasks backend, which imports the worker).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from importlib import import_module
from typing import Any, TypeAlias, cast

from pgflow_django.schedules.cron import InvalidSchedule

InputCallable: TypeAlias = Callable[[datetime], Any]


def resolve_callable(path: str) -> InputCallable:
    """Import a callable input by its dotted path."""
    module_name, _, attribute = path.rpartition(".")
    try:
        value = getattr(import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError):
        raise InvalidSchedule(f"the input callable {path} cannot be imported here") from None
    if not callable(value):
        raise InvalidSchedule(f"the input callable {path} is not callable")
    return cast(InputCallable, value)
