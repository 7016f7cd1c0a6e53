"""Migrations 0046 and 0047 add pgflow's CHECK constraints to a history written by earlier releases.

* The one kind of row the engine itself wrote that a constraint refuses (a task the previous
  retry_run queued again with the output that broke a map) is cleared by 0046, so its run moves on.
* A row changed by hand must not fail the upgrade: the constraint it breaks stays NOT VALID (new
  writes are still checked), 0047 warns with the query that finds the rows, the other constraints are
  validated, and partitioning the history is refused until the rows are fixed.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction

from pgflow_django.sql import migration_sql
from tests.sql.support import claim, complete, make_flow, q, refusal, run, start, step

CONSTRAINTS = (
    "completed_at_or_failed_at",
    "completed_at_or_failed_at_or_skipped_at",
    "initial_tasks_known_when_started",
    "output_only_for_completed_or_null",
    "output_valid_only_for_completed",
    "remaining_tasks_state_consistency",
    "skip_reason_matches_status",
    "status_and_remaining_tasks_match",
)


def _validated() -> dict[str, bool]:
    return {
        r["conname"]: r["convalidated"]
        for r in q(
            "select conname, convalidated from pg_constraint"
            " where conrelid in ('pgflow.step_states'::regclass, 'pgflow.step_tasks'::regclass)"
            "   and conname = any(%s)",
            [list(CONSTRAINTS)],
        )
    }


def _upgrade() -> list[tuple[str, str]]:
    """0046 then 0047 on the test database; the warnings they raised (primary text, hint)."""
    warnings: list[tuple[str, str]] = []

    def keep(notice: Any) -> None:  # a notice's fields are readable only inside the handler
        if notice.severity_nonlocalized == "WARNING":
            warnings.append((notice.message_primary, notice.message_hint))

    raw = connection.connection
    raw.add_notice_handler(keep)
    try:
        q(migration_sql("0046_pgflow_fidelity.sql"))
        q(migration_sql("0047_validate_fidelity_checks.sql"))
    finally:
        raw.remove_notice_handler(keep)
    return warnings


def _downgrade() -> None:
    q(migration_sql("0047_validate_fidelity_checks_down.sql"))
    q(migration_sql("0046_pgflow_fidelity_down.sql"))


def test_a_task_the_previous_retry_run_queued_with_its_broken_output_runs_after_the_upgrade() -> None:
    make_flow("tv", step("producer"), step("consumer", "producer", step_type="map"))
    run_id = start("tv", {})
    _downgrade()
    (producer,) = claim("tv", step_slug="producer")
    assert complete(producer, {"not": "an array"}) == "failed"
    assert q("select pgflow.retry_run(%s) as n", [run_id]) == [{"n": 1}]
    (legacy,) = q("select status, output from pgflow.step_tasks where run_id = %s", [run_id])
    assert legacy == {"status": "queued", "output": {"not": "an array"}}, "the row 0045's retry_run wrote"

    assert _upgrade() == []
    assert _validated() == dict.fromkeys(CONSTRAINTS, True)
    (again,) = claim("tv", step_slug="producer")
    assert complete(again, [1]) == "completed"
    (mapped,) = claim("tv", step_slug="consumer")
    assert complete(mapped, "done") == "completed"
    assert run(run_id)["status"] == "completed"


def test_a_history_that_breaks_a_constraint_upgrades_with_a_warning() -> None:
    make_flow("f", step("a"))
    run_id = start("f")
    _downgrade()
    q("update pgflow.step_states set output = '1' where run_id = %s", [run_id])  # by hand: not completed

    ((primary, hint),) = _upgrade()

    assert _validated() == {name: name != "output_only_for_completed_or_null" for name in CONSTRAINTS}
    assert primary == (
        "pgflow: rows of pgflow.step_states break the new constraint output_only_for_completed_or_null,"
        " which stays NOT VALID (new writes are checked)"
    )
    query, _, then = hint.removeprefix("find them with: ").partition("; fix or delete them, then run: ")
    assert [r["run_id"] for r in q(query)] == [run_id]
    assert then.startswith(
        "alter table pgflow.step_states validate constraint output_only_for_completed_or_null"
    )
    with pytest.raises(IntegrityError, match="output_only_for_completed_or_null"), transaction.atomic():
        q("update pgflow.step_states set output = '2' where run_id = %s", [run_id])

    code, message = refusal("select * from pgflow.partition_history('7 days', 2, false)")
    assert (code, message) == (
        "55000",
        "constraint output_only_for_completed_or_null of pgflow.step_states is not validated (rows of the"
        " history break it): fix or delete those rows, then run: alter table pgflow.step_states validate"
        " constraint output_only_for_completed_or_null",
    )
    q("update pgflow.step_states set output = null where run_id = %s", [run_id])
    q(then.removesuffix(" (partitioning the history needs it)"))
    assert _validated() == dict.fromkeys(CONSTRAINTS, True)
    assert q("select count(*) as n from pgflow.partition_history('7 days', 2, false)")[0]["n"] > 0
