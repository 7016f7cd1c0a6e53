"""A live message whose id is already archived, under a real worker (issue 15, item 7): before, every
claim of a batch holding it failed on the archive's key (``a_<queue>_pkey``) and the whole queue stopped.
Now the claim deletes it, the worker logs the database's warning naming the queue and the id once, and
the runs behind it complete."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from tests.sql.support import q
from tests.workers import WorkerProcess, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

FLOW = "example_chain"


def _status(run_id: uuid.UUID) -> str:
    return str(q("select status from pgflow.runs where run_id = %s", [run_id])[0]["status"])


def _start(n: int) -> uuid.UUID:
    return uuid.UUID(
        str(q("select run_id from pgflow.start_flow(%s, %s::jsonb)", [FLOW, f'{{"n": {n}}}'])[0]["run_id"])
    )


def test_the_queue_keeps_moving_past_a_reused_archived_id(spawn_worker: Callable[..., WorkerProcess]) -> None:
    worker = spawn_worker(FLOW, "--poll-interval", "0.1", "--max-poll-seconds", "0.2")
    first = _start(1)
    wait_until(lambda: _status(first) == "completed", 20, "the first run to complete")
    reused = int(q(f"select min(msg_id) as m from pgmq.a_{FLOW}")[0]["m"])
    q(
        f"insert into pgmq.q_{FLOW} (msg_id, vt, message) overriding system value "
        f"select msg_id, clock_timestamp(), message from pgmq.a_{FLOW} where msg_id = %s",
        [reused],
    )

    later = [_start(n) for n in range(2, 5)]
    wait_until(lambda: {_status(run) for run in later} == {"completed"}, 20, "the later runs to complete")

    assert q(f"select count(*) as n from pgmq.q_{FLOW} where msg_id = %s", [reused]) == [{"n": 0}]
    assert q(f"select count(*) as n from pgmq.a_{FLOW} where msg_id = %s", [reused]) == [{"n": 1}]
    log = worker.log()
    warning = f"database warning: queue {FLOW}: message id(s) {reused} were already in its archive"
    assert log.count(warning) == 1, log[-3000:]
    assert "UniqueViolation" not in log and "a_example_chain_pkey" not in log
