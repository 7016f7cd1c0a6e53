"""What the engine records for a failed attempt, and how a recorded error is shown to a person.

The tasks backend stores a task function's failure as ``django-task-error:`` followed by JSON (class
path and traceback), so that ``get_result()`` can rebuild Django's ``TaskError``. That blob is for
machines; people see ``ExceptionClass: message``, with the traceback only on request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

from pgflow_django.runs.encoding import clean_text

ERROR_PREFIX: Final = "django-task-error:"
MAX_ERROR_LENGTH: Final = 10_000
"""Characters of one recorded error; longer texts are cut."""


def error_text(exc: BaseException) -> str:
    """What the engine records for a failed attempt; an exception may supply it (``pgflow_error_text``)."""
    recorded = getattr(exc, "pgflow_error_text", None)
    if isinstance(recorded, str):
        return clean_text(recorded)[:MAX_ERROR_LENGTH]
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return clean_text(text)[:MAX_ERROR_LENGTH]


@dataclass(frozen=True)
class RecordedError:
    summary: str
    """``ExceptionClass: message`` for a Django task's failure; any other error as recorded."""
    traceback: str | None = None
    """The task function's traceback, when one was recorded."""


def read_error(text: str) -> RecordedError:
    """The summary and traceback of a recorded error; text without a task blob is its own summary.

    The blob may follow a prefix: a run's error reads ``step call failed: django-task-error:{...}``."""
    head, found, blob = text.partition(ERROR_PREFIX)
    if not found:
        return RecordedError(text)
    try:
        detail = json.loads(blob)
        class_path = str(detail["exception_class_path"])
        trace = str(detail["traceback"])
    except (ValueError, KeyError, TypeError, RecursionError):
        return RecordedError(text)
    return RecordedError(head + _summary(class_path, trace), trace or None)


def _summary(class_path: str, trace: str) -> str:
    """``Name: message`` from the traceback's last line that names the class (Python prints it with
    its module unless it is a builtin); the class name alone when no line does."""
    name = class_path.rpartition(".")[2] or class_path
    shown_names = {class_path, class_path.removeprefix("builtins."), name}
    for line in reversed(trace.splitlines()):
        head, colon, message = line.partition(":")
        if head in shown_names and (colon or line == head):
            return f"{name}: {message.strip()}" if message.strip() else name
    return name
