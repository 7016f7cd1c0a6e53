"""Queue-name rules (issue 8, item 4): ``pgflow.is_valid_queue_name`` against PGMQ and the Python DSL.

pgflow_django has no Python queue-name check of its own: a flow's queue is ``default_queue_name(slug)``
of a slug ``validate_flow_slug`` accepted. So the properties are:

- every name SQL accepts is one PGMQ accepts too (``pgmq.validate_queue_name`` and
  ``pgmq.format_table_name`` raise nothing) and addresses exactly ``q_<name>`` (no case folding);
- SQL accepts exactly the lowercase ``[a-z0-9_]{1,47}`` names (a reference model);
- every flow slug Python accepts yields a queue name SQL accepts.

Each batch is one round trip (``unnest`` over the generated list).
"""

from __future__ import annotations

import re

import pytest
from django.db import connection
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pgflow_django.flows.slugs import InvalidSlug, default_queue_name, validate_flow_slug

# The interesting alphabet first (what PGMQ and identifiers care about), then any text PostgreSQL stores.
near = st.sampled_from("abcxyzAZ0189_-$;'\" .\n\tİ\u0131\u212aé🙂")
names = st.one_of(
    st.text(near, max_size=60),
    st.from_regex(r"[a-z0-9_]{0,60}", fullmatch=True),
    st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,50}", fullmatch=True),
    st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=140),
    st.integers(min_value=40, max_value=140).map(lambda n: "q" * n),
)

REFERENCE = re.compile(r"[a-z0-9_]{1,47}")
EDGES = [
    "",
    "a",
    "A",
    "_",
    "9",
    "a" * 47,
    "a" * 48,
    "a;b",
    "a--b",
    "a$b",
    "a'b",
    "a b",
    "a\n",
    "\u0131",
    "\u212a",
]


@pytest.fixture
def pgmq_verdicts() -> None:
    """``pg_temp.pgmq_accepts(name)``: PGMQ's own checks raise nothing and the table name is q_<name>."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            create or replace function pg_temp.pgmq_accepts(name text) returns boolean
            language plpgsql as $$
            begin
              perform pgmq.validate_queue_name(name);
              return pgmq.format_table_name(name, 'q') = 'q_' || name;
            exception when others then
              return false;
            end $$
            """
        )


def verdicts(values: list[str]) -> list[tuple[bool, bool]]:
    """(pgflow.is_valid_queue_name, PGMQ accepts) per value, in one query."""
    with connection.cursor() as cursor:
        cursor.execute(
            "select coalesce(pgflow.is_valid_queue_name(v), false), pg_temp.pgmq_accepts(v) "
            "from unnest(%s::text[]) with ordinality as x(v, n) order by n",
            [values],
        )
        return [(bool(a), bool(b)) for a, b in cursor.fetchall()]


def _check(values: list[str]) -> None:
    for value, (ours, pgmq) in zip(values, verdicts(values), strict=True):
        assert ours == bool(REFERENCE.fullmatch(value)), f"is_valid_queue_name({value!r}) = {ours}"
        if ours:
            assert pgmq, f"pgflow accepts {value!r} but PGMQ refuses it or renames its table"


def test_edge_cases(pgmq_verdicts: None) -> None:
    _check(EDGES)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(names, min_size=1, max_size=40))
@example(["a" * 47, "a" * 48, "x;drop", "Orders"])
def test_generated_queue_names(pgmq_verdicts: None, values: list[str]) -> None:
    _check(values)


def _python_queue(slug: str) -> str | None:
    try:
        return default_queue_name(validate_flow_slug(slug))
    except InvalidSlug:
        return None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,50}", fullmatch=True), names), max_size=40))
def test_every_flow_slug_python_accepts_has_a_queue_name_sql_accepts(
    pgmq_verdicts: None, slugs: list[str]
) -> None:
    queues = [queue for queue in map(_python_queue, slugs) if queue is not None]
    if queues:
        assert verdicts(queues) == [(True, True)] * len(queues), queues
