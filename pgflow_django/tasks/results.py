"""What a task's run records and returns: a failure as Django's task error, an output as Django stores it."""

from __future__ import annotations

import json
import traceback
from collections.abc import Mapping
from typing import Any, Final

from pgflow_django.runs.encoding import OutputNotSerialisable, clean_text, encode_output
from pgflow_django.runs.recorded_errors import ERROR_PREFIX, MAX_ERROR_LENGTH
from pgflow_django.tasks.framework import tasks_api

MAX_TRACEBACK: Final = 8000
"""Characters of traceback kept per failed attempt (the engine stores at most 10,000 per error)."""


class TaskFailure(Exception):
    """A task function raised (or returned what cannot be stored): carries the class path and
    traceback the engine records verbatim; an output that cannot be stored (``permanent``) is not
    retried."""

    def __init__(self, exc: BaseException, *, permanent: bool = False) -> None:
        self.exception_class_path = f"{type(exc).__module__}.{type(exc).__qualname__}"
        self.pgflow_permanent = permanent or isinstance(exc, OutputNotSerialisable)
        text = clean_text("".join(traceback.format_exception(exc)))
        keep = MAX_TRACEBACK
        while True:
            self.traceback = text[-keep:]
            self.pgflow_error_text = ERROR_PREFIX + json.dumps(
                {"exception_class_path": self.exception_class_path, "traceback": self.traceback},
                ensure_ascii=False,
            )
            # the engine keeps MAX_ERROR_LENGTH characters: cut the traceback, never the JSON
            excess = len(self.pgflow_error_text) - MAX_ERROR_LENGTH
            if excess <= 0 or keep == 0:
                break
            keep = max(0, keep - excess - 16)
        super().__init__(f"{self.exception_class_path}: {exc}")


def task_output(value: Any) -> Any:
    """The return value as Django's tasks framework stores it (``normalize_json``), refused here when
    the engine cannot store it, before task_finished says SUCCESSFUL.

    Refused with the exception Django's ImmediateBackend records for it, so a result's ``errors``
    read alike on both: ``normalize_json``'s own ``TypeError`` (a type it cannot normalise) or
    ``ValueError`` (bytes that are not UTF-8), a ``RecursionError`` past Python's recursion limit, and
    a ``ValueError`` for what it accepts but JSON cannot hold (NaN, infinities, the engine's bounds),
    as ``json.dumps(allow_nan=False)`` raises one."""
    try:
        output = tasks_api.normalize_json(value)
    except RecursionError:
        raise RecursionError("output not encodable: nested deeper than Python's recursion limit") from None
    except TypeError as exc:
        raise TypeError(f"output not encodable: {exc}") from None
    except ValueError as exc:
        raise ValueError(f"output not encodable: {exc}") from None
    try:
        encode_output(output)
    except OutputNotSerialisable as exc:
        raise ValueError(str(exc)) from None
    return output


def error_of_attempt(entry: Mapping[str, Any]) -> Any:
    text = str(entry.get("error") or "")
    if text.startswith(ERROR_PREFIX):
        try:
            detail = json.loads(text[len(ERROR_PREFIX) :])
            return tasks_api.TaskError(
                exception_class_path=str(detail["exception_class_path"]), traceback=str(detail["traceback"])
            )
        except (ValueError, KeyError, TypeError):
            pass
    return tasks_api.TaskError(exception_class_path="builtins.RuntimeError", traceback=text)
