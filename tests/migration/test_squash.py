"""The squash of the post-seed migrations: the generator's statement rules, and the one-line refusal of
a database stopped between two of the development migrations that ``0007_squashed_0038`` replaces."""

from __future__ import annotations

import weakref

import pytest
from django.apps import apps
from django.core.management.base import CommandError
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.db.models.signals import pre_migrate

from pgflow_django.migrations import _squashed
from pgflow_django.sql.squash import split_statements, squash, superseded


def _define(name: str, body: str) -> str:
    return (
        f"create or replace function pgflow.{name}(a int) returns int language sql as $$ select {body} $$;\n"
    )


def test_statements_split_outside_comments_strings_and_dollar_quotes() -> None:
    script = (
        "-- a comment; with a semicolon\n"
        "create function pgflow.f() returns text language plpgsql as $body$ begin return ';'; end $body$;\n"
        "select 'it''s; one', E'\\'; two', \"odd;name\" from t /* ; */;\n"
        "-- trailing comment\n"
    )
    statements = split_statements(script)
    assert [statement.code.split()[0] for statement in statements] == ["create", "select"]
    assert statements[0].text.startswith("-- a comment; with a semicolon\n")


def test_a_definition_is_dropped_only_when_a_later_one_replaces_it_unseen() -> None:
    script = (
        _define("f", "101")  # 0: replaced by 2, nothing in between names it
        + "alter table pgflow.runs add column x int;\n"
        + _define("f", "2")  # 2: kept, 4 names f before 5 redefines it
        + _define("g", "1")  # 3: another function's definition is no barrier
        + "select pgflow.f(1);\n"
        + _define("f", "3")  # 5: the last one
    )
    statements = split_statements(script)
    assert superseded(statements) == {0}
    text, kept, dropped = squash([("0001_a.sql", script)])
    assert (kept, dropped) == (5, 1)
    assert "select 101" not in text
    assert text.count("create or replace function pgflow.f(") == 2


def test_a_setting_changed_in_between_goes_with_the_definition_it_changed() -> None:
    script = (
        _define("f", "101")
        + "alter function pgflow.f(integer) set search_path = pg_catalog;\n"
        + "alter function pgflow.f(int) set schema other;\n"
        + _define("f", "102")
        + "alter function pgflow.f(a int) reset all;\n"
        + _define("f", "103")
    )
    assert superseded(split_statements(script)) == {3, 4}


def test_overloads_and_drops_are_kept_apart() -> None:
    script = (
        _define("f", "1")
        + "drop function pgflow.f(int);\n"
        + _define("f", "2")
        + "create or replace function pgflow.f(a int, b int) returns int language sql as $$ select 3 $$;\n"
    )
    assert superseded(split_statements(script)) == set()


def test_the_guard_lists_what_the_squashed_migration_replaces() -> None:
    loader = MigrationLoader(None, ignore_no_migrations=True)
    migration = loader.disk_migrations[("pgflow", _squashed.SQUASHED)]
    assert [name for app, name in migration.replaces] == list(_squashed.REPLACED)
    assert all(app == "pgflow" for app, _ in migration.replaces)


def test_only_a_database_stopped_inside_the_squash_is_refused() -> None:
    assert _squashed.partial_squash_error(set()) is None
    assert _squashed.partial_squash_error({"0006_shared_queues"}) is None
    assert _squashed.partial_squash_error(set(_squashed.REPLACED)) is None
    message = _squashed.partial_squash_error(set(_squashed.REPLACED[:14]), "other")
    assert message is not None
    assert "\n" not in message
    assert message.startswith("database 'other' stopped at the development migration pgflow.0020_priorities,")
    assert "manage.py migrate --database other pgflow 0038_worker_support_queue" in message


@pytest.mark.django_db
def test_migrate_stops_before_it_runs_anything_on_such_a_database() -> None:
    receivers = [entry[1] for entry in pre_migrate.receivers]
    receivers = [item() if isinstance(item, weakref.ReferenceType) else item for item in receivers]
    assert _squashed.refuse_partial_squash in receivers
    config = apps.get_app_config("pgflow")
    _squashed.refuse_partial_squash(config, "default")  # the test database applied all of them
    with connection.cursor() as cursor:
        cursor.execute(
            "delete from django_migrations where app = 'pgflow' and name > '0020_priorities'"
            " and name not like '0007%%'"
        )
    with pytest.raises(CommandError, match=r"^the database stopped at .*pgflow\.0020_priorities, which"):
        _squashed.refuse_partial_squash(config, "default")
