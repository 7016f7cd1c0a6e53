"""Each read-only model in ``pgflow_django.models`` mirrors its table in the migrated test database.

Columns, types, nullability, primary and foreign keys and the value lists of ``in (...)`` checks are
compared directly. Indexes and unique constraints are compared by letting PostgreSQL render both
sides: the SQL Django would emit for each ``Meta.indexes`` / ``Meta.constraints`` entry is executed
under a probe name inside a rolled-back savepoint, and its ``pg_get_indexdef`` must equal the real
index's (so partial-index predicates are compared as PostgreSQL normalizes them).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.apps import apps
from django.db import connection, models, transaction

from tests.support.db import execute, rows, scalar

pytestmark = pytest.mark.django_db

SCHEMA = "pgflow"
MODELS: list[type[models.Model]] = list(apps.get_app_config("pgflow").get_models())
PROBE = "pgflow_model_catalog_probe"

# Relations the models declare that the tables keep without a foreign key (no lock on the flow's row
# per start and task): pgflow.refuse_flow_in_use refuses to delete a flow that runs still name. A wait
# row lives only while its task waits; its run's end (pgflow.fail_run, the completion) deletes it.
GUARDED_WITHOUT_KEY = frozenset(
    {
        ("pgflow.runs", "flow_slug", "pgflow.flows", "flow_slug"),
        ("pgflow.step_states", "flow_slug", "pgflow.flows", "flow_slug"),
        ("pgflow.step_tasks", "flow_slug", "pgflow.flows", "flow_slug"),
        ("pgflow.step_waits", "flow_slug", "pgflow.flows", "flow_slug"),
        ("pgflow.step_waits", "run_id", "pgflow.runs", "run_id"),
    }
)

# Django's PostgreSQL db_type spellings that format_type() writes differently.
TYPE_SPELLINGS = {"varchar": "character varying", "timestamp": "timestamp without time zone"}


def _table(model: type[models.Model]) -> str:
    """The schema-qualified table name as PostgreSQL prints it (db_table holds 'pgflow"."name')."""
    schema, _, name = model._meta.db_table.partition('"."')
    assert schema == SCHEMA and name, f"{model.__name__}.Meta.db_table must be 'pgflow\".\"<table>'"
    return f"{schema}.{name}"


def _columns(model: type[models.Model]) -> list[models.Field[Any, Any]]:
    return [field for field in model._meta.concrete_fields if field.column]


def _normalize_type(db_type: str) -> str:
    name, paren, rest = db_type.partition("(")
    name = TYPE_SPELLINGS.get(name.strip(), name.strip())
    return name + paren + rest.replace(", ", ",")


def _pk_columns(model: type[models.Model]) -> list[str]:
    pk = model._meta.pk
    assert pk is not None
    if isinstance(pk, models.CompositePrimaryKey):
        return [field.column for field in pk.fields]
    return [pk.column]


def _catalog_indexes(table: str) -> dict[str, dict[str, Any]]:
    return {
        row["name"]: row
        for row in rows(
            """
            select ic.relname as name, pg_get_indexdef(i.indexrelid) as definition,
                   k.contype as constraint_type, pg_get_constraintdef(k.oid) as constraint_definition
            from pg_index i
            join pg_class ic on ic.oid = i.indexrelid
            left join pg_constraint k on k.conindid = i.indexrelid and k.conrelid = i.indrelid
            where i.indrelid = %s::regclass and not i.indisprimary
            """,
            [table],
        )
    }


def _declared(model: type[models.Model]) -> dict[str, models.Index | models.UniqueConstraint]:
    declared: dict[str, models.Index | models.UniqueConstraint] = {}
    for index in model._meta.indexes:
        declared[index.name] = index
    for constraint in model._meta.constraints:
        assert isinstance(constraint, models.UniqueConstraint), (
            f"{model.__name__}: only unique constraints are mirrored, not {constraint!r}"
        )
        declared[constraint.name] = constraint
    return declared


def _probe(model: type[models.Model], declared: models.Index | models.UniqueConstraint) -> dict[str, Any]:
    """Create ``declared`` under the probe name, read back how PostgreSQL renders it, roll it back."""
    probe = declared.clone()
    probe.name = PROBE
    statement = str(probe.create_sql(model, connection.schema_editor()))
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(statement)
        rendered = _catalog_indexes(_table(model))[PROBE]
        transaction.set_rollback(True)
    for key in ("definition", "constraint_definition"):
        if rendered[key] is not None:
            rendered[key] = rendered[key].replace(PROBE, declared.name)
    rendered["name"] = declared.name
    return rendered


def test_every_pgflow_table_has_exactly_one_model() -> None:
    tables = {
        row["name"]
        for row in rows(
            """
            select format('%%s.%%s', n.nspname, c.relname) as name
            from pg_class c join pg_namespace n on n.oid = c.relnamespace
            where n.nspname = %s and c.relkind in ('r', 'p')
            """,
            [SCHEMA],
        )
    }
    modelled = [_table(model) for model in MODELS]
    assert len(modelled) == len(set(modelled))
    assert set(modelled) == tables
    assert all(not model._meta.managed for model in MODELS)


def _catalog_columns(model: type[models.Model]) -> dict[str, tuple[str, bool]]:
    return {
        row["name"]: (row["type"], row["not_null"])
        for row in rows(
            """
            select attname as name, format_type(atttypid, atttypmod) as type, attnotnull as not_null
            from pg_attribute where attrelid = %s::regclass and attnum > 0 and not attisdropped
            """,
            [_table(model)],
        )
    }


def _model_columns(model: type[models.Model]) -> dict[str, tuple[str, bool]]:
    return {
        field.column: (_normalize_type(field.db_type(connection) or ""), not field.null)
        for field in _columns(model)
    }


@pytest.mark.parametrize("model", MODELS, ids=lambda model: model.__name__)
def test_columns_types_and_nullability(model: type[models.Model]) -> None:
    assert _model_columns(model) == _catalog_columns(model)


def test_a_table_change_the_model_lacks_is_detected() -> None:
    from pgflow_django.models import Run

    with transaction.atomic():
        execute("alter table pgflow.runs add column model_probe integer")
        execute("create index runs_model_probe_idx on pgflow.runs (model_probe)")
        assert "model_probe" in set(_catalog_columns(Run)) - set(_model_columns(Run))
        assert "runs_model_probe_idx" in set(_catalog_indexes(_table(Run))) - set(_declared(Run))
        transaction.set_rollback(True)
    assert _model_columns(Run) == _catalog_columns(Run)


@pytest.mark.parametrize("model", MODELS, ids=lambda model: model.__name__)
def test_primary_key(model: type[models.Model]) -> None:
    catalog = scalar(
        """
        select array_agg(a.attname order by k.ord)
        from pg_index i
        cross join unnest(i.indkey) with ordinality as k(attnum, ord)
        join pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum
        where i.indrelid = %s::regclass and i.indisprimary
        """,
        [_table(model)],
    )
    assert _pk_columns(model) == catalog


@pytest.mark.parametrize("model", MODELS, ids=lambda model: model.__name__)
def test_single_column_foreign_keys(model: type[models.Model]) -> None:
    catalog = {
        (row["column"], row["target"], row["target_column"])
        for row in rows(
            """
            select a.attname as column, k.confrelid::regclass::text as target, fa.attname as target_column
            from pg_constraint k
            join pg_attribute a on a.attrelid = k.conrelid and a.attnum = k.conkey[1]
            join pg_attribute fa on fa.attrelid = k.confrelid and fa.attnum = k.confkey[1]
            where k.conrelid = %s::regclass and k.contype = 'f' and cardinality(k.conkey) = 1
            """,
            [_table(model)],
        )
    }
    mirrored = set()
    for field in _columns(model):
        if isinstance(field, models.ForeignKey):
            target = field.target_field
            assert not field.db_constraint, f"{model.__name__}.{field.name}: use db_constraint=False"
            relation = (field.column, _table(target.model), target.column)
            if (_table(model), *relation) not in GUARDED_WITHOUT_KEY:
                mirrored.add(relation)
    assert mirrored == catalog


@pytest.mark.parametrize("model", MODELS, ids=lambda model: model.__name__)
def test_choices_match_in_list_checks(model: type[models.Model]) -> None:
    checks = rows(
        """
        select a.attname as column, pg_get_constraintdef(k.oid) as definition
        from pg_constraint k
        join pg_attribute a on a.attrelid = k.conrelid and a.attnum = k.conkey[1]
        where k.conrelid = %s::regclass and k.contype = 'c' and cardinality(k.conkey) = 1
        """,
        [_table(model)],
    )
    catalog = {
        row["column"]: {
            value.replace("''", "'") for value in re.findall(r"'((?:[^']|'')*)'::text", row["definition"])
        }
        for row in checks
        if "= ANY (ARRAY[" in row["definition"]
    }
    mirrored = {
        field.column: {str(value) for value, _ in field.flatchoices}
        for field in _columns(model)
        if field.choices
    }
    assert mirrored == catalog


@pytest.mark.parametrize("model", MODELS, ids=lambda model: model.__name__)
def test_indexes_and_unique_constraints(model: type[models.Model]) -> None:
    field_level = [
        field.name for field in _columns(model) if (field.db_index or field.unique) and not field.primary_key
    ]
    assert field_level == [], "declare indexes in Meta.indexes/constraints under the table's index names"
    catalog = _catalog_indexes(_table(model))
    declared = _declared(model)
    assert sorted(declared) == sorted(catalog)
    assert [_probe(model, declared[name]) for name in sorted(declared)] == [
        catalog[name] for name in sorted(catalog)
    ]


def test_models_are_read_only() -> None:
    from pgflow_django.models import Flow, ReadOnlyError

    flow = Flow(flow_slug="read_only_probe", opt_max_attempts=1, opt_base_delay=0, opt_timeout=1)
    for attempt in (
        flow.save,
        flow.delete,
        lambda: Flow.objects.create(flow_slug="x", opt_max_attempts=1, opt_base_delay=0, opt_timeout=1),
        lambda: Flow.objects.bulk_create([flow]),
        lambda: Flow.objects.filter(flow_slug="x").update(opt_timeout=2),
        lambda: Flow.objects.all().delete(),
        lambda: Flow.objects.get_or_create(flow_slug="x"),
        lambda: Flow.objects.update_or_create(flow_slug="x"),
        lambda: Flow.objects.bulk_update([flow], ["opt_timeout"]),
    ):
        with pytest.raises(ReadOnlyError, match="SQL API"):
            attempt()
    assert Flow.objects.filter(flow_slug="read_only_probe").count() == 0


def test_models_read_rows_written_through_the_sql_api() -> None:
    from pgflow_django.models import Run, Step, StepState, StepTask

    scalar("select pgflow.create_flow('models_probe')")
    scalar("select pgflow.add_step('models_probe', 'first')")
    scalar("select pgflow.add_step('models_probe', 'second', array['first'])")
    run_id = scalar("select run_id from pgflow.start_flow('models_probe', '{\"n\": 0}'::jsonb)")
    run = Run.objects.select_related("flow").get(pk=run_id)
    assert (run.flow.flow_slug, run.status, run.input) == ("models_probe", "started", {"n": 0})
    assert [step.step_slug for step in Step.objects.filter(flow_id="models_probe")] == ["first", "second"]
    states = StepState.objects.filter(run=run).order_by("step_slug")
    assert [(state.step_slug, state.status) for state in states] == [
        ("first", "started"),
        ("second", "created"),
    ]
    task = StepTask.objects.get(pk=(run_id, "first", 0))
    assert (task.status, task.message_id is not None) == ("queued", True)
