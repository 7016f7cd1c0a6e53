"""Each status vocabulary is one list: the typed Literal, the model's TextChoices and the SQL check
constraint of its column name the same values, so none can gain or lose a value alone."""

from __future__ import annotations

import re
from typing import Any, get_args

import pytest
from django.db import connection, models

from pgflow_django import models as pgflow_models
from pgflow_django.flows import dsl
from pgflow_django.runs import client

LITERALS = [
    (client.RunStatus, pgflow_models.RunStatus),
    (client.StepStatus, pgflow_models.StepStatus),
    (dsl.StepType, pgflow_models.StepType),
    (dsl.QueueMode, pgflow_models.QueueMode),
    (dsl.WhenMode, pgflow_models.WhenPolicy),
]


@pytest.mark.parametrize(("literal", "choices"), LITERALS, ids=[c.__name__ for _, c in LITERALS])
def test_typed_literals_match_the_models_choices(literal: Any, choices: type[models.TextChoices]) -> None:
    assert sorted(get_args(literal)) == sorted(choices.values)


def _choice_fields() -> list[tuple[str, str, list[str]]]:
    """(table, column, values) for every pgflow model field with choices."""
    found = []
    for model in (m for m in pgflow_models.ReadOnlyModel.__subclasses__() if not m._meta.abstract):
        _schema, table = model._meta.db_table.split('"."')
        for field in model._meta.get_fields():
            if isinstance(field, models.Field) and field.choices:
                found.append((table, field.column, sorted(str(value) for value, _ in field.flatchoices)))
    return found


FIELDS = _choice_fields()


def _check_values(table: str, column: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            """
            select pg_get_constraintdef(c.oid)
              from pg_constraint as c
              join pg_attribute as a on a.attrelid = c.conrelid and a.attnum = any(c.conkey)
             where c.conrelid = format('pgflow.%%I', %s::text)::regclass and c.contype = 'c'
               and cardinality(c.conkey) = 1 and a.attname = %s
            """,
            [table, column],
        )
        definitions = [row[0] for row in cursor.fetchall() if "ANY" in row[0]]
    assert len(definitions) == 1, definitions
    return sorted(re.findall(r"'([^']*)'::text", definitions[0]))


@pytest.mark.django_db
@pytest.mark.parametrize(("table", "column", "values"), FIELDS, ids=[f"{t}.{c}" for t, c, _ in FIELDS])
def test_sql_check_constraints_match_the_models_choices(table: str, column: str, values: list[str]) -> None:
    assert _check_values(table, column) == values


def test_every_vocabulary_is_checked() -> None:
    assert {(table, column) for table, column, _ in FIELDS} >= {
        ("runs", "status"),
        ("step_states", "status"),
        ("step_tasks", "status"),
        ("step_states", "skip_reason"),
        ("worker_pauses", "reason"),
        ("steps", "step_type"),
        ("flows", "queue_mode"),
        ("steps", "when_unmet"),
        ("steps", "when_exhausted"),
    }
