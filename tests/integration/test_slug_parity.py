"""The Python slug rules give the same answer as SQL ``pgflow.is_valid_slug`` and ``create_flow``."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pgflow_django.flows.slugs import MAX_FLOW_SLUG_LENGTH, InvalidSlug, is_valid_slug, validate_flow_slug

# PostgreSQL text cannot hold NUL or lone surrogates; every other code point is fair game.
any_char = st.characters(exclude_categories=("Cs",), exclude_characters="\x00")
# Lookalikes: dotless i, fullwidth A, Kelvin sign, Arabic-Indic digits (none is an ASCII letter or digit).
near_valid_char = st.sampled_from("aZ_09-. \n\téßİ\u0131\uff21\u212a\u0660\u0661")

slugs = st.one_of(
    st.text(any_char, max_size=140),
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,140}", fullmatch=True),
    st.text(near_valid_char, max_size=8),
    st.sampled_from(["run", "RUN", "Run", "rUN", "run_", "_run", "runs"]),
    st.integers(min_value=0, max_value=200).map(lambda n: "s" * n),
    st.integers(min_value=0, max_value=140).map(lambda n: "1" + "a" * n),
)

EDGE_CASES = [
    "",
    "a",
    "_",
    "1",
    "9lives",
    "run",
    "RUN",
    "Run",
    "rUn",
    "run_",
    "s" * 128,
    "s" * 129,
    "with space",
    "dash-ed",
    "dot.ted",
    "tab\t",
    "trailing\n",
    "\nleading",
    "\uff52\uff55\uff4e",
    "\u212a",
    "k\u212a",
    "İ",
    "\u0131",
    "é",
    "\u0661",
    "a\u0661",
    "emoji_🙂",
    "x" * 1000,
]


def sql_verdicts(values: list[str]) -> list[bool]:
    """One round trip for a whole batch: ``pgflow.is_valid_slug`` of each value, in order."""
    with connection.cursor() as cursor:
        cursor.execute(
            "select pgflow.is_valid_slug(v) from unnest(%s::text[]) with ordinality as x(v, n) order by n",
            [values],
        )
        return [bool(row[0]) for row in cursor.fetchall()]


def test_edge_cases_agree() -> None:
    expected = sql_verdicts(EDGE_CASES)
    assert {value: is_valid_slug(value) for value in EDGE_CASES} == dict(
        zip(EDGE_CASES, expected, strict=True)
    )


def test_null_is_invalid_in_both() -> None:
    with connection.cursor() as cursor:
        cursor.execute("select pgflow.is_valid_slug(null)")
        assert cursor.fetchone()[0] in (False, None)
    assert not is_valid_slug(None)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(slugs, min_size=1, max_size=40))
@example(["run", "RUN", "", "s" * 128, "s" * 129, "1a", "a1", "ö"])
def test_generated_slugs_agree(values: list[str]) -> None:
    assert [is_valid_slug(value) for value in values] == sql_verdicts(values)


@pytest.mark.parametrize(
    "length", [1, MAX_FLOW_SLUG_LENGTH - 1, MAX_FLOW_SLUG_LENGTH, MAX_FLOW_SLUG_LENGTH + 1, 128]
)
def test_flow_slug_length_limit_agrees_with_create_flow(length: int) -> None:
    slug = "f" * length
    try:
        validate_flow_slug(slug)
        python_accepts = True
    except InvalidSlug:
        python_accepts = False
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("select flow_slug from pgflow.create_flow(%s)", [slug])
        sql_accepts = True
    except DatabaseError as error:
        assert "47" in str(error)
        sql_accepts = False
    assert python_accepts == sql_accepts == (length <= MAX_FLOW_SLUG_LENGTH)
