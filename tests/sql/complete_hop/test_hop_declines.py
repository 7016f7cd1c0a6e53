"""What the fast path of a completion leaves to the general path beyond the random flows of
test_hop_equivalence: a run that still has a flow-control row, which only the general path's
release clears."""

from __future__ import annotations

from typing import Any

from tests.sql.complete_hop.support import fast_path_takes
from tests.sql.limit_claim.support import concurrency, set_limits
from tests.sql.support import claim, complete, make_flow, make_visible, q, start, step


def completion(rec: dict[str, Any], output: Any) -> list[dict[str, Any]]:
    """The one-item batch that completes the claim ``rec`` with ``output``."""
    return [
        {
            "run_id": str(rec["run_id"]),
            "step_slug": rec["step_slug"],
            "task_index": rec["task_index"],
            "attempt": rec["attempt"],
            "output": output,
        }
    ]


def test_a_run_waiting_on_a_removed_limit_goes_through_the_general_path() -> None:
    make_flow("declines", step("a"), step("b", "a"))
    set_limits("declines", concurrency(1))
    first, second = start("declines"), start("declines")
    [held] = claim("declines")
    assert q("select run_id from pgflow.limit_waits") == [{"run_id": second}], "the second run waits"
    assert held["run_id"] == first
    set_limits("declines")  # the limits go; the second run's wait row stays until a release
    make_visible("declines")
    [waiting] = claim("declines")
    assert waiting["run_id"] == second

    assert not fast_path_takes(completion(waiting, 1)), "a run with a limit_waits row"
    assert complete(waiting, 1) == "completed"
    assert q("select run_id from pgflow.limit_waits") == [], "the general path's release cleared it"
    assert fast_path_takes(completion(held, 1)) is False, "the first run still holds its slot (limit_holds)"
