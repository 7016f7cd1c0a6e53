"""A Django task's recorded failure always fits the engine's error column as valid JSON: the traceback
is shortened, never the JSON, even when escaping would have multiplied its length."""

from __future__ import annotations

import json

import pytest

from pgflow_django.runs.recorded_errors import ERROR_PREFIX, MAX_ERROR_LENGTH, error_text
from pgflow_django.tasks.results import TaskFailure


def _raised(message: str) -> BaseException:
    try:
        raise ValueError(message)
    except ValueError as exc:
        return exc


@pytest.mark.parametrize("message", ["ascii " * 3000, "ж" * 20000, "plain"])
def test_recorded_error_is_json_within_the_limit(message: str) -> None:
    failure = TaskFailure(_raised(message))
    recorded = error_text(failure)
    assert len(recorded) <= MAX_ERROR_LENGTH
    assert recorded.startswith(ERROR_PREFIX)
    detail = json.loads(recorded[len(ERROR_PREFIX) :])
    assert detail["exception_class_path"] == "builtins.ValueError"
    assert detail["traceback"].endswith(message[-20:] + "\n")
