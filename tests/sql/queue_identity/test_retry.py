"""A retry queues the task again and delays its message in the task's own queue."""

import pytest

from tests.sql.support import (
    assert_visible_in,
    claim_all,
    fail,
    queue_snapshot,
    start_twins,
    step,
    task,
)


@pytest.mark.parametrize(("retry_delay", "expected"), [(None, 2), (7, 7)])
def test_retry_delays_only_the_failed_tasks_message(retry_delay: int | None, expected: int) -> None:
    twins = start_twins(step("a"), base_delay=1, max_attempts=3, timeout=30)
    assert twins.ids == [1]
    (rec_f,) = claim_all("f")
    claim_all("g")
    before_g = queue_snapshot("g")
    assert fail(rec_f, retry_delay=retry_delay) == "retrying"
    assert task(twins.f, "a")["status"] == "queued"
    assert_visible_in("f", 1, expected)
    assert queue_snapshot("g") == before_g
    assert_visible_in("g", 1, 32)
    row = task(twins.g, "a")
    assert (row["status"], row["attempts_count"]) == ("started", 1)
