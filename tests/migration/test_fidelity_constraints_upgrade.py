"""Migration 0046 adds pgflow's CHECK constraints to a history that may hold rows changed by hand: such a
row must not fail the upgrade. The constraint it breaks stays NOT VALID (new writes are checked), and
the migration warns with the query that finds the rows; the other constraints are validated.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction

from pgflow_django.sql import migration_sql
from tests.sql.support import make_flow, q, start, step


def _validated() -> dict[str, bool]:
    return {
        r["conname"]: r["convalidated"]
        for r in q(
            "select conname, convalidated from pg_constraint"
            " where conrelid in ('pgflow.step_states'::regclass, 'pgflow.step_tasks'::regclass)"
            "   and conname in ('output_only_for_completed_or_null', 'skip_reason_matches_status',"
            "                   'output_valid_only_for_completed')"
        )
    }


def test_a_history_that_breaks_a_constraint_upgrades_with_a_warning() -> None:
    make_flow("f", step("a"))
    run_id = start("f")
    q(migration_sql("0046_pgflow_fidelity_down.sql"))
    q("update pgflow.step_states set output = '1' where run_id = %s", [run_id])  # by hand: not completed

    warnings: list[tuple[str, str]] = []

    def keep(notice: Any) -> None:  # a notice's fields are readable only inside the handler
        if notice.severity_nonlocalized == "WARNING":
            warnings.append((notice.message_primary, notice.message_hint))

    raw = connection.connection
    raw.add_notice_handler(keep)
    try:
        q(migration_sql("0046_pgflow_fidelity.sql"))
    finally:
        raw.remove_notice_handler(keep)

    assert _validated() == {
        "output_only_for_completed_or_null": False,
        "skip_reason_matches_status": True,
        "output_valid_only_for_completed": True,
    }
    ((primary, hint),) = warnings
    assert primary == (
        "pgflow: rows of pgflow.step_states break the new constraint output_only_for_completed_or_null,"
        " which stays NOT VALID (new writes are checked)"
    )
    assert hint.startswith("find them with: select * from pgflow.step_states where not (")
    assert [r["run_id"] for r in q(hint.removeprefix("find them with: "))] == [run_id]
    with pytest.raises(IntegrityError, match="output_only_for_completed_or_null"), transaction.atomic():
        q("update pgflow.step_states set output = '2' where run_id = %s", [run_id])
