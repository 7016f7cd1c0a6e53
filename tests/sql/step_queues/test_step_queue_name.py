"""``pgflow.step_queue_name(flow, step, index)``: readable ``lower(flow__step)`` when it fits 47
characters, else ``lower(flow__index)``, else an error naming both candidates. SQL is authoritative;
``pgflow_django.flows.slugs.step_queue_name`` mirrors it, and a property test keeps the two in agreement."""

from __future__ import annotations

import pytest
from django.db import connection
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pgflow_django.flows.slugs import InvalidSlug, is_valid_slug, step_queue_name
from tests.sql.support import db_error, val


def sql_name(flow_slug: str, step_slug: str, index: int) -> str:
    return str(val("select pgflow.step_queue_name(%s, %s, %s) as n", [flow_slug, step_slug, index]))


def test_readable_name_is_lowercase() -> None:
    assert sql_name("Support", "classifyThread", 0) == "support__classifythread"
    assert sql_name("f", "a", 5) == "f__a"


def test_readable_name_of_exactly_47_characters_is_kept() -> None:
    assert sql_name("f" * 40, "s" * 5, 3) == "f" * 40 + "__" + "s" * 5


def test_index_fallback_when_the_readable_name_is_too_long() -> None:
    assert sql_name("Billing", "s" * 39, 1) == "billing__1"
    assert sql_name("f" * 43, "long_step", 10) == "f" * 43 + "__10"


def test_neither_name_fits_raises_naming_both_candidates() -> None:
    message = db_error("select pgflow.step_queue_name(%s, 'pay', 12)", ["f" * 44])
    assert f"'{'f' * 44}__pay' (49 characters)" in message
    assert f"'{'f' * 44}__12' (48 characters)" in message
    assert "47-character limit" in message


@pytest.mark.parametrize(
    ("flow", "step", "index"), [(None, "a", 0), ("f", None, 0), ("f", "a", None), ("f", "a", -1)]
)
def test_missing_arguments_and_negative_index_are_refused(
    flow: str | None, step: str | None, index: int | None
) -> None:
    assert "required" in db_error("select pgflow.step_queue_name(%s, %s, %s::integer)", [flow, step, index])


def test_generated_names_are_valid_pgmq_names() -> None:
    """SQL calls pgmq.validate_queue_name on what it generates; the names also pass pgflow's own rule."""
    assert val(
        "select bool_and(pgflow.is_valid_queue_name(pgflow.step_queue_name(f, s, i))) as ok "
        "from (values ('Shop', 'Pay', 0), ('f', 'a_b', 1), (repeat('x', 43), 'yy', 10)) as v(f, s, i)"
    )


# -- Python and SQL agree ------------------------------------------------------------------------

SLUG_CHARS = "abcxyzABXZ019"
words = st.text(st.sampled_from(SLUG_CHARS), min_size=1, max_size=24)


def slugs(max_length: int) -> st.SearchStrategy[str]:
    """Valid slugs (a letter first, single inner underscores) of at most ``max_length`` characters."""
    return (
        st.tuples(st.sampled_from("abqzAQZ"), st.lists(words, max_size=8))
        .map(lambda parts: "_".join([parts[0] + (parts[1][0] if parts[1] else ""), *parts[1][1:]]))
        .map(lambda slug: slug[:max_length].rstrip("_"))
        .filter(is_valid_slug)
    )


triples = st.tuples(
    st.one_of(slugs(47), st.integers(min_value=30, max_value=47).map(lambda n: "f" * n)),
    st.one_of(slugs(128), st.integers(min_value=1, max_value=128).map(lambda n: "s" * n)),
    st.one_of(st.integers(min_value=0, max_value=10**6), st.integers(min_value=0, max_value=12)),
)


@pytest.fixture
def sql_names() -> None:
    """``pg_temp.try_step_queue_name(...)``: the generated name, or NULL when SQL raises."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            create or replace function pg_temp.try_step_queue_name(f text, s text, i integer) returns text
            language plpgsql as $$
            begin
              return pgflow.step_queue_name(f, s, i);
            exception when invalid_parameter_value then
              return null;
            end $$
            """
        )


def python_name(flow_slug: str, step_slug: str, index: int) -> str | None:
    try:
        return step_queue_name(flow_slug, step_slug, index)
    except InvalidSlug:
        return None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(triples, min_size=1, max_size=30))
@example([("f" * 44, "s" * 3, 0), ("f" * 45, "s", 0), ("f" * 43, "s" * 3, 10), ("f" * 40, "s" * 5, 0)])
def test_python_and_sql_generate_the_same_names(sql_names: None, batch: list[tuple[str, str, int]]) -> None:
    """One round trip per batch; a name SQL refuses is one Python refuses too."""
    with connection.cursor() as cursor:
        cursor.execute(
            "select pg_temp.try_step_queue_name(f, s, i), "
            "coalesce(pgflow.is_valid_queue_name(pg_temp.try_step_queue_name(f, s, i)), false) "
            "from unnest(%s::text[], %s::text[], %s::integer[]) with ordinality as x(f, s, i, n) order by n",
            [[t[0] for t in batch], [t[1] for t in batch], [t[2] for t in batch]],
        )
        answers = cursor.fetchall()
    for (flow_slug, step_slug, index), (ours, valid) in zip(batch, answers, strict=True):
        assert python_name(flow_slug, step_slug, index) == ours, (flow_slug, step_slug, index)
        assert ours is None or valid, f"SQL generated the invalid queue name {ours!r}"
