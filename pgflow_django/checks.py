"""System checks (``manage.py check``): flow definitions, and with ``--database`` PGMQ and migrations.

Ids:

- ``pgflow.E001`` the registered flows cannot be loaded (a bad ``PGFLOW['FLOWS']`` entry, an import error);
- ``pgflow.E002`` invalid flow slug; ``pgflow.E003`` invalid step slug;
- ``pgflow.E004`` a generated queue name longer than PGMQ allows;
- ``pgflow.E005`` flow slugs that differ only in case; ``pgflow.E006`` step slugs of one flow that do;
- ``pgflow.E007`` one slug registered twice, by two different flows;
- ``pgflow.E008`` PGMQ missing or older than supported (database check);
- ``pgflow.E009`` the database cannot be inspected (database check);
- ``pgflow.E020`` a database alias pgflow uses (``default``, and each ``PgflowTaskBackend``'s
  ``DATABASE``) is not PostgreSQL; ``pgflow.E021`` its server is older than PostgreSQL 15 (database
  check);
- ``pgflow.E022`` ``pgmigrate`` installed without its companion apps ``pgactivity`` and ``pglock``
  (its ``migrate`` then fails with ``LookupError`` as soon as it waits for a lock);
- ``pgflow.E023`` ``PGMIGRATE_LOCK_TIMEOUT`` that is not a number of seconds or a timedelta;
- ``pgflow.E030`` a declared schedule is invalid (cron, time zone, input, or one name declared twice
  with different definitions); ``pgflow.E031`` a declared schedule's flow is not registered;
- ``pgflow.E034`` a task module (an installed app's ``tasks``, or ``OPTIONS['MODULES']`` of a
  ``PgflowTaskBackend``) raises while it is imported;
- ``pgflow.E032`` a stored schedule's cron or time zone no longer parses (or the zone is a host's
  own, 'localtime'), ``pgflow.E035`` a scheduler recorded that a stored schedule cannot be planned
  (its reason, when E032 does not already say it), ``pgflow.E033`` a name declared in code is taken
  by a runtime schedule, ``pgflow.W030`` an active schedule's flow is not compiled, ``pgflow.W031``
  no live worker runs (a step of) an active schedule's flow (database checks;
  ``pgflow_django.schedules.checks``);
- ``pgflow.E040`` ``PGFLOW['LISTEN_DATABASE']`` is not a ``DATABASES`` alias; ``pgflow.W040`` with
  ``PGFLOW['POOLER'] = 'transaction'``, an alias pgflow uses asks psycopg for prepared statements
  (``OPTIONS['prepare_threshold']``), which break behind a transaction pooler;
- ``pgflow.E041`` ``PGFLOW['ADMIN_DATABASE']`` is not a ``DATABASES`` alias;
- ``pgflow.W001`` pgflow migrations not applied, counted, with the command that applies them (database
  check; a warning, because deploy scripts often run ``check --database default`` before ``migrate``;
  not raised while ``migrate`` itself runs the checks);
- ``pgflow.I001`` what ``check --database`` found: the PostgreSQL and PGMQ versions and how far pgflow
  is migrated (an info, shown by ``manage.py check`` itself, left out while ``migrate`` or the test
  runner runs the checks).

The flow checks collect the registrations themselves, so every problem is reported at once instead of
the registry's first exception.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

from django.apps import apps
from django.core import checks
from django.db import DatabaseError, connections

from pgflow_django.db import queries as db_queries
from pgflow_django.db.dbguard import vendor_problem, version_problem
from pgflow_django.db.query import fetch_one, fetch_value
from pgflow_django.flows.dsl import Flow
from pgflow_django.flows.slugs import MAX_FLOW_SLUG_LENGTH, RULE, default_queue_name, slug_problem
from pgflow_django.schedules import checks as _schedule_checks  # noqa: F401  (registers them)
from pgflow_django.schedules.cron import InvalidSchedule

INSTALL_LINE = 'INSTALLED_APPS += ["pgactivity", "pglock", "pgmigrate", "pgflow_django"]'
"""The one install line of the README, the quickstart and docs/django-tasks.md."""
PGMIGRATE_COMPANIONS = ("pgactivity", "pglock")
"""Apps django-pgmigrate's ``migrate`` looks up by label (pglock's models, pgactivity's pid)."""
TASK_BACKEND_PATH = "pgflow_django.tasks.PgflowTaskBackend"

PGMQ_QUEUE_NAME_LIMIT = MAX_FLOW_SLUG_LENGTH
"""PGMQ refuses longer queue names (its table names carry a prefix within PostgreSQL's 63 bytes)."""


@dataclass(frozen=True)
class Registration:
    flow: Flow
    source: str


def collect_registrations() -> list[Registration]:
    """Every (flow, where it was registered), in the registry's order, duplicates included."""
    from pgflow_django.flows.registry import registered

    return [Registration(flow, source) for flow, source in registered()]


@checks.register("pgflow")
def check_flows(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[checks.CheckMessage]:
    try:
        registrations = collect_registrations()
    except Exception as exc:  # any failure to load flows is the finding itself
        if isinstance(exc, InvalidSchedule):
            return []  # a schedule(...) declaration failed: pgflow.E030 reports it
        return [
            checks.Error(
                f"the registered pgflow flows cannot be loaded: {_one_line(exc)}",
                hint="fix PGFLOW['FLOWS'] or the failing flows module; "
                "`manage.py pgflow_worker` and `start_flow` fail the same way",
                id="pgflow.E001",
            )
        ]
    return list(_flow_messages(registrations))


def _flow_messages(registrations: Sequence[Registration]) -> Iterable[checks.CheckMessage]:
    by_slug: dict[str, Registration] = {}
    by_lower: dict[str, Registration] = {}
    for item in registrations:
        slug = item.flow.slug
        first = by_slug.get(slug)
        if first is not None:
            if first.flow is not item.flow:
                yield checks.Error(
                    f"flow slug {slug!r} is registered twice, by two different flows "
                    f"({first.source} and {item.source})",
                    hint="give one of them another slug, e.g. with flow.copy(slug=...), or register only one",
                    obj=slug,
                    id="pgflow.E007",
                )
            continue
        by_slug[slug] = item
        twin = by_lower.get(slug.lower())
        if twin is not None:
            yield checks.Error(
                f"flow slugs {twin.flow.slug!r} ({twin.source}) and {slug!r} ({item.source}) differ only in "
                "case and would share one queue",
                hint="give one of them another slug",
                obj=slug,
                id="pgflow.E005",
            )
        else:
            by_lower[slug.lower()] = item
        yield from _one_flow(item)


def _one_flow(item: Registration) -> Iterable[checks.CheckMessage]:
    slug = item.flow.slug
    problem = slug_problem(slug)
    if problem is not None:
        yield checks.Error(
            f"flow slug {slug!r} ({item.source}) {problem}",
            hint=f"rename the flow: a slug is {RULE}",
            obj=slug,
            id="pgflow.E002",
        )
    elif len(default_queue_name(slug)) > PGMQ_QUEUE_NAME_LIMIT:
        queue = default_queue_name(slug)
        yield checks.Error(
            f"flow {slug!r} ({item.source}) would use the PGMQ queue {queue!r}, {len(queue)} characters "
            f"long; PGMQ allows at most {PGMQ_QUEUE_NAME_LIMIT}",
            hint=f"choose a flow slug of at most {PGMQ_QUEUE_NAME_LIMIT} characters",
            obj=slug,
            id="pgflow.E004",
        )
    lowered: dict[str, str] = {}
    for step_slug in item.flow.steps:
        step_problem = slug_problem(step_slug)
        if step_problem is not None:
            yield checks.Error(
                f"flow {slug!r}: step slug {step_slug!r} {step_problem}",
                hint=f"rename the step (slug=... or the function): a slug is {RULE}",
                obj=f"{slug}.{step_slug}",
                id="pgflow.E003",
            )
        twin = lowered.setdefault(step_slug.lower(), step_slug)
        if twin != step_slug:
            yield checks.Error(
                f"flow {slug!r}: step slugs {twin!r} and {step_slug!r} differ only in case",
                hint="queue names are lowercase; give one of the steps another slug",
                obj=f"{slug}.{step_slug}",
                id="pgflow.E006",
            )


def pgflow_aliases() -> list[str]:
    """The database aliases pgflow works on: ``default`` (unless a router keeps pgflow's migrations
    off it), ``PGFLOW['ADMIN_DATABASE']`` and the ``DATABASE`` of every configured
    ``PgflowTaskBackend``, read from settings so that a broken backend cannot hide the finding."""
    from django.conf import settings
    from django.db import router

    aliases = ["default"] if router.allow_migrate("default", "pgflow") else []
    admin_alias = (getattr(settings, "PGFLOW", None) or {}).get("ADMIN_DATABASE", "default")
    if admin_alias not in aliases and admin_alias in connections.settings:
        aliases.append(str(admin_alias))
    tasks = getattr(settings, "TASKS", None)
    for config in tasks.values() if isinstance(tasks, dict) else ():
        if isinstance(config, dict) and config.get("BACKEND") == TASK_BACKEND_PATH:
            raw = config.get("OPTIONS")
            options = {
                str(key).upper(): value for key, value in (raw if isinstance(raw, dict) else {}).items()
            }
            alias = str(options.get("DATABASE", "default"))
            if alias not in aliases and alias in connections.settings:
                aliases.append(alias)
    return aliases


@checks.register("pgflow")
def check_install(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """The install line and the database engine: known from settings alone, so plain ``check`` (and
    ``migrate``, ``runserver``) reports them before anything touches the database."""
    messages = _companion_messages()
    for alias in pgflow_aliases():
        connection = connections[alias]
        problem = vendor_problem(alias, connection.settings_dict, connection.vendor)
        if problem is not None:
            messages.append(
                checks.Error(
                    problem,
                    hint="pgflow's tables, SQL functions and PGMQ queues exist only in PostgreSQL",
                    obj=alias,
                    id="pgflow.E020",
                )
            )
    return messages


@checks.register("pgflow")
def check_pooler(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """``POOLER``, ``LISTEN_DATABASE`` and ``ADMIN_DATABASE`` against ``DATABASES``, from settings alone."""
    from django.core.exceptions import ImproperlyConfigured

    from pgflow_django.conf import get_settings

    try:
        conf = get_settings()
    except ImproperlyConfigured:
        return []  # reported where the settings are read, in one line
    messages: list[checks.CheckMessage] = []
    if conf.listen_database is not None and conf.listen_database not in connections.settings:
        messages.append(
            checks.Error(
                f"PGFLOW['LISTEN_DATABASE'] is {conf.listen_database!r}, which DATABASES does not have "
                f"({', '.join(sorted(connections.settings))})",
                hint="name the alias of a direct connection (not through a transaction pooler) to the "
                "workers' database, or remove the key",
                id="pgflow.E040",
            )
        )
    if conf.admin_database not in connections.settings:
        messages.append(
            checks.Error(
                f"PGFLOW['ADMIN_DATABASE'] is {conf.admin_database!r}, which DATABASES does not have "
                f"({', '.join(sorted(connections.settings))})",
                hint="name the alias of the pgflow database the admin manages (its primary, not a replica)",
                id="pgflow.E041",
            )
        )
    if conf.pooler == "transaction":
        for alias in pgflow_aliases():
            threshold = (connections.settings[alias].get("OPTIONS") or {}).get("prepare_threshold")
            if threshold is not None:
                messages.append(
                    checks.Warning(
                        f"DATABASES[{alias!r}]['OPTIONS']['prepare_threshold'] is {threshold!r} while "
                        "PGFLOW['POOLER'] is 'transaction': psycopg prepares statements on one server "
                        "connection, and PgBouncer runs the next transaction on another",
                        hint="remove prepare_threshold from OPTIONS (Django then passes None)",
                        obj=alias,
                        id="pgflow.W040",
                    )
                )
    return messages


def _companion_messages() -> list[checks.CheckMessage]:
    from django.conf import settings

    from pgflow_django.db.upgrade import lock_timeout_milliseconds

    messages: list[checks.CheckMessage] = []
    if apps.is_installed("pgmigrate"):
        missing = [name for name in PGMIGRATE_COMPANIONS if not apps.is_installed(name)]
        if missing:
            messages.append(
                checks.Error(
                    f"INSTALLED_APPS has 'pgmigrate' without {', '.join(map(repr, missing))}: its migrate "
                    "command fails with LookupError as soon as it waits for a lock",
                    hint=f"use {INSTALL_LINE}, or drop 'pgmigrate' (pgflow's migrations do not need it)",
                    id="pgflow.E022",
                )
            )
    timeout = getattr(settings, "PGMIGRATE_LOCK_TIMEOUT", None)
    try:
        lock_timeout_milliseconds(timeout)
    except TypeError:
        messages.append(
            checks.Error(
                f"PGMIGRATE_LOCK_TIMEOUT must be a number of seconds or a timedelta, got {timeout!r}",
                hint="for example PGMIGRATE_LOCK_TIMEOUT = 10",
                id="pgflow.E023",
            )
        )
    return messages


@checks.register("pgflow", checks.Tags.database)
def check_database(
    app_configs: Sequence[Any] | None = None, databases: Sequence[str] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """Only with ``manage.py check --database ALIAS``: Django passes the aliases to inspect."""
    messages: list[checks.CheckMessage] = []
    for alias in databases or ():
        messages.extend(_database_messages(alias))
    return messages


def _database_messages(alias: str) -> list[checks.CheckMessage]:
    from pgflow_django.db.pgmq_install import BUNDLED_PGMQ_VERSION, MIN_PGMQ_VERSION, missing_functions
    from pgflow_django.worker.preflight import pending_migrations

    connection = connections[alias]
    if connection.vendor != "postgresql":
        return []  # pgflow.E020 when pgflow uses the alias; nothing to inspect either way
    try:
        server_version = int(connection.pg_version)  # type: ignore[attr-defined]
        too_old = version_problem(alias, server_version)
        if too_old is not None:
            return [checks.Error(too_old, obj=alias, id="pgflow.E021")]
        pending = pending_migrations(alias)
        with connections[alias].cursor() as cursor:
            has_schema = bool(fetch_value(cursor, db_queries.HAS_PGMQ_SCHEMA))
            missing = missing_functions(cursor) if has_schema else []
            pgmq = _pgmq_text(cursor, has_schema)
    except DatabaseError as exc:
        hint = "check DATABASES and that the server is reachable"
        if 'database "' in str(exc) and "does not exist" in str(exc):
            name = connection.settings_dict.get("NAME") or ""
            hint = f"create the database first: createdb {name} (or CREATE DATABASE {name} in psql)"
        return [
            checks.Error(
                f"database {alias!r}: cannot inspect PGMQ and pgflow migrations: {_one_line(exc)}",
                hint=hint,
                obj=alias,
                id="pgflow.E009",
            )
        ]
    messages: list[checks.CheckMessage] = []
    if pending and not _inside_migrate():
        applies = pending[0] if len(pending) == 1 else f"{pending[0]} to {pending[-1]}"
        messages.append(
            checks.Warning(
                f"database {alias!r}: {len(pending)} pgflow migration(s) not applied ({applies})",
                hint=f"run `manage.py migrate --database {alias}`; workers refuse to start until then",
                obj=alias,
                id="pgflow.W001",
            )
        )
    if not _inside_migrate() and not _inside_test_run():
        messages.append(
            checks.Info(
                f"database {alias!r}: PostgreSQL {_version_text(server_version)}, {pgmq}, "
                + ("pgflow migrated" if not pending else f"pgflow {len(pending)} migration(s) behind"),
                obj=alias,
                id="pgflow.I001",
            )
        )
    if has_schema and missing:
        messages.append(
            checks.Error(
                f"database {alias!r}: the pgmq schema lacks {', '.join(missing)}; pgflow needs "
                f"PGMQ >= {MIN_PGMQ_VERSION}",
                hint="upgrade PGMQ (ALTER EXTENSION pgmq UPDATE), then `manage.py migrate`",
                obj=alias,
                id="pgflow.E008",
            )
        )
    elif not has_schema and not pending:
        messages.append(
            checks.Error(
                f"database {alias!r}: PGMQ is not installed (no pgmq schema) although pgflow is migrated",
                hint=f"install PGMQ >= {MIN_PGMQ_VERSION}: CREATE EXTENSION pgmq, or run the SQL-only "
                "install bundled with pgflow-django "
                f"(pgflow_django/sql/pgmq/{BUNDLED_PGMQ_VERSION}/pgmq.sql)",
                obj=alias,
                id="pgflow.E008",
            )
        )
    return messages


def _version_text(server_version: int) -> str:
    """``server_version_num`` as people write it: 150020 is 15.20."""
    return f"{server_version // 10000}.{server_version % 10000}"


def _pgmq_text(cursor: Any, has_schema: bool) -> str:
    """Which PGMQ the database has, or what ``migrate`` will install."""
    from pgflow_django.db.pgmq_install import BUNDLED_PGMQ_VERSION

    versions = fetch_one(cursor, db_queries.PGMQ_VERSIONS)
    installed, available = (None, None) if versions is None else versions
    if installed:
        return f"PGMQ {installed} (extension)"
    if has_schema:
        return "PGMQ (SQL-only install, no version recorded)"
    bundled = f"the bundled PGMQ {BUNDLED_PGMQ_VERSION}"
    offered = f"the server's pgmq extension {available}" if available else bundled
    return f"PGMQ not installed yet (`migrate` installs {offered})"


def _inside_test_run() -> bool:
    """True when Django's test runner runs the checks: its test databases need no report."""
    from django.test.runner import DiscoverRunner

    return _called_by(DiscoverRunner)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _inside_migrate() -> bool:
    """True when ``migrate`` runs these checks before migrating: its pending migrations are the point."""
    from django.core.management.commands.migrate import Command as Migrate

    return _called_by(Migrate)


def _called_by(kind: type) -> bool:
    """True when a method of a ``kind`` instance is on the call stack (Django tells checks nothing of
    who runs them)."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        if isinstance(frame.f_locals.get("self"), kind):
            return True
        frame = frame.f_back
    return False
