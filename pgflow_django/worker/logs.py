"""The worker's default log output: like ``runserver`` or a Celery worker, it speaks on stderr.

A project without ``LOGGING`` for ``pgflow_django`` would otherwise see nothing (Python drops INFO
records that reach no handler): no start-up line, no drain, no stop. A project that routes the
``pgflow_django`` logger (or the root logger) keeps its own handlers, so nothing prints twice.
"""

from __future__ import annotations

import logging
import sys
from typing import Final, TextIO

LOGGER_NAME: Final = "pgflow_django"
LEVELS: Final = ("debug", "info", "warning", "error")
FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"
EXPECTED_FAILURE: Final = "pgflow_expected_failure"
"""Set on the record of a handler's failed attempt: expected work, one line on the worker's stderr."""


class WorkerFormatter(logging.Formatter):
    """The worker's stderr format: a handler's failed attempt is logged with its exception (for error
    trackers and a project's own handlers), yet shown here as one line unless the logger is at debug."""

    def format(self, record: logging.LogRecord) -> str:
        if (
            record.exc_info
            and getattr(record, EXPECTED_FAILURE, False)
            and not logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        ):
            record = logging.makeLogRecord({**record.__dict__, "exc_info": None, "exc_text": None})
        return super().format(record)


def level_for(verbosity: int, log_level: str | None) -> int:
    """``--log-level`` when given, else from ``-v``: 0 warnings and errors, 1 info, 2 and 3 debug."""
    if log_level:
        return int(getattr(logging, log_level.upper()))
    if verbosity <= 0:
        return logging.WARNING
    return logging.INFO if verbosity == 1 else logging.DEBUG


def configure(verbosity: int = 1, log_level: str | None = None, stream: TextIO | None = None) -> bool:
    """Make the worker's records visible; returns True when it added its own stderr handler.

    The level is set on the ``pgflow_django`` logger when the project left it unset, or when
    ``--log-level`` was given explicitly; handlers are added only when none would receive a record.
    """
    logger = logging.getLogger(LOGGER_NAME)
    if log_level or logger.level == logging.NOTSET:
        logger.setLevel(level_for(verbosity, log_level))
    if logger.hasHandlers():
        return False
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(WorkerFormatter(FORMAT))
    logger.addHandler(handler)
    return True
