from tests.sql.support import q


def test_returns_outcome_and_count_columns() -> None:
    """docs/sql-api.md: ``requeue_stalled_tasks()`` returns ``table(outcome, task_count)``."""
    q("select pgflow.create_flow('f')")
    rows = q("select * from pgflow.requeue_stalled_tasks()")
    assert rows, "one row per outcome, even when nothing was stalled"
    assert list(rows[0]) == ["outcome", "task_count"]
