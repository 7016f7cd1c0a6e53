import uuid

from tests.sql.support import q, val


def _worker(heartbeat_ago: str, stopped_ago: str | None = None) -> uuid.UUID:
    worker_id = uuid.uuid4()
    q(
        "insert into pgflow.workers (worker_id, queue_name, function_name, last_heartbeat_at, stopped_at) "
        "values (%s, 'q', 'f', now() - %s::interval, now() - %s::interval)",
        [worker_id, heartbeat_ago, stopped_ago],
    )
    return worker_id


def _alive(worker_id: uuid.UUID) -> bool:
    return bool(val("select count(*) as n from pgflow.workers where worker_id = %s", [worker_id]))


def test_live_worker_survives_a_zero_retention() -> None:
    live = _worker("3 seconds")
    q("select pgflow.prune_data_older_than('0 seconds')")
    assert _alive(live)


def test_stopped_and_long_silent_workers_are_pruned() -> None:
    stopped = _worker("2 hours", "2 hours")
    silent = _worker("2 hours")
    recent_stop = _worker("2 hours", "10 minutes")
    result = val("select pgflow.prune_data_older_than('1 hour') as r")
    assert result["workers"] == 2
    assert not _alive(stopped) and not _alive(silent)
    assert _alive(recent_stop)
