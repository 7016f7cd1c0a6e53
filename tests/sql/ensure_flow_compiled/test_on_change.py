"""What a changed definition may do (``on_change``): refuse, replace only an idle flow, or replace when
explicitly asked (checked against the confirmed run count); every compilation gets a new generation;
the previous signature's ``allow_recompile = true`` is refused."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import DatabaseError, transaction

from tests.sql.support import jb, q, shape, shape_step, start, val

BASE = shape(shape_step("a"), shape_step("b", "a"))
OTHER = shape(shape_step("a"), shape_step("b", "a"), shape_step("c", "b"))


def ensure(definition: dict[str, Any], on_change: str, confirmed_runs: int | None = None) -> dict[str, Any]:
    return dict(
        val(
            "select pgflow.ensure_flow_compiled('f', %s::jsonb, %s::text, %s::bigint)",
            [jb(definition), on_change, confirmed_runs],
        )
    )


def finish(run_id: Any) -> None:
    q("update pgflow.runs set status = 'completed', remaining_steps = 0 where run_id = %s", [run_id])


def steps() -> list[str]:
    return [
        row["step_slug"]
        for row in q("select step_slug from pgflow.steps where flow_slug = 'f' order by step_index")
    ]


def test_refuse_keeps_every_run_and_counts_them() -> None:
    ensure(BASE, "refuse")
    start("f")
    finish(start("f"))
    answer = ensure(OTHER, "refuse")
    assert (answer["status"], answer["runs"], answer["unfinished_runs"], answer["refused"]) == (
        "mismatch",
        2,
        1,
        None,
    )
    assert steps() == ["a", "b"]
    assert val("select count(*) from pgflow.runs where flow_slug = 'f'") == 2


def test_replace_if_idle_refuses_a_flow_with_an_unfinished_run() -> None:
    ensure(BASE, "refuse")
    finish(start("f"))
    start("f")
    answer = ensure(OTHER, "replace-if-idle")
    assert (answer["status"], answer["refused"], answer["unfinished_runs"]) == ("mismatch", "unfinished", 1)
    assert steps() == ["a", "b"]
    assert val("select count(*) from pgflow.runs where flow_slug = 'f'") == 2


def test_replace_if_idle_replaces_a_flow_whose_runs_all_finished() -> None:
    ensure(BASE, "refuse")
    finish(start("f"))
    answer = ensure(OTHER, "replace-if-idle")
    assert (answer["status"], answer["runs"], answer["unfinished_runs"]) == ("recompiled", 1, 0)
    assert steps() == ["a", "b", "c"]
    assert val("select count(*) from pgflow.runs where flow_slug = 'f'") == 0


def test_replace_refuses_when_more_runs_exist_than_were_confirmed() -> None:
    ensure(BASE, "refuse")
    start("f")
    start("f")
    answer = ensure(OTHER, "replace", confirmed_runs=1)
    assert (answer["status"], answer["refused"], answer["runs"]) == ("mismatch", "confirmation", 2)
    assert steps() == ["a", "b"]
    answer = ensure(OTHER, "replace", confirmed_runs=2)
    assert (answer["status"], answer["runs"], answer["unfinished_runs"]) == ("recompiled", 2, 2)
    assert steps() == ["a", "b", "c"]


def test_every_compilation_gets_a_new_generation_and_verifying_keeps_it() -> None:
    compiled = ensure(BASE, "refuse")["generation"]
    assert compiled == val("select generation from pgflow.flows where flow_slug = 'f'")
    assert ensure(BASE, "refuse")["generation"] == compiled
    assert ensure(OTHER, "refuse")["generation"] == compiled
    replaced = ensure(OTHER, "replace")["generation"]
    assert replaced > compiled
    again = ensure(BASE, "replace")["generation"]
    assert again > replaced


def test_an_unknown_on_change_is_refused() -> None:
    with (
        pytest.raises(DatabaseError, match="on_change must be refuse, replace-if-idle or replace"),
        transaction.atomic(),
    ):
        ensure(BASE, "always")


def test_the_previous_signature_refuses_allow_recompile() -> None:
    ensure(BASE, "refuse")
    start("f")
    with (
        pytest.raises(
            DatabaseError, match=r"allow_recompile is no longer honoured .*pgflow_compile f --replace"
        ),
        transaction.atomic(),
    ):
        val("select pgflow.ensure_flow_compiled('f', %s::jsonb, true)", [jb(OTHER)])
    assert (
        val("select pgflow.ensure_flow_compiled('f', %s::jsonb, false) ->> 'status'", [jb(OTHER)])
        == "mismatch"
    )
    assert val("select pgflow.ensure_flow_compiled('f', %s::jsonb) ->> 'status'", [jb(BASE)]) == "verified"
    assert steps() == ["a", "b"]
    assert val("select count(*) from pgflow.runs where flow_slug = 'f'") == 1
