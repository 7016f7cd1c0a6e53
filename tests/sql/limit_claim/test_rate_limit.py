"""A rate limit is a token bucket per key in the database: a claim spends one token per task it starts
and defers the others until their token is due (queued, no attempt spent)."""

from __future__ import annotations

from tests.sql.limit_claim.support import outcomes, rate, set_limits, waits
from tests.sql.support import make_flow, q, q1, start, step, task, vt_in


def _message(run_id) -> int:
    return int(task(run_id, "a")["message_id"])


def test_a_full_bucket_starts_its_burst_and_defers_the_rest_until_their_tokens() -> None:
    make_flow("f", step("a"))
    set_limits("f", rate(10, 1.0, burst=3))
    runs = [start("f", {}) for _ in range(6)]
    got = outcomes("f")
    assert got["claimed"] == [_message(r) for r in runs[:3]]
    assert got["deferred"] == [_message(r) for r in runs[3:]]
    delays = [
        q1(
            "select extract(epoch from m.vt - s.refilled_at)::float8 as d from pgmq.q_f as m,"
            " pgflow.limit_slots as s where s.flow_slug = 'f' and m.msg_id = %s",
            [_message(r)],
        )["d"]
        for r in runs[3:]
    ]
    for expected, delay in zip((0.1, 0.2, 0.3), delays, strict=True):
        assert abs(delay - expected) < 0.005, delays
    assert all(task(r, "a")["attempts_count"] == 0 for r in runs[3:])
    assert {w["kind"] for w in waits("f")} == {"rate"}


def test_tokens_refill_with_time_and_never_exceed_the_burst() -> None:
    make_flow("f", step("a"))
    set_limits("f", rate(60, 60.0, burst=2))
    for _ in range(5):
        start("f", {})
    assert len(outcomes("f")["claimed"]) == 2
    q("update pgflow.limit_slots set refilled_at = refilled_at - interval '1 hour' where flow_slug = 'f'")
    q("update pgmq.q_f set vt = clock_timestamp()")
    got = outcomes("f")
    assert len(got["claimed"]) == 2, "an hour refills the bucket to its burst, no more"
    bucket = q1("select tokens from pgflow.limit_slots where flow_slug = 'f'")
    assert bucket["tokens"] < 0.01


def test_a_rate_limit_per_key_keeps_one_bucket_per_key() -> None:
    make_flow("f", step("a"))
    set_limits("f", rate(1, 60.0, field="tenant"))
    runs = [start("f", {"tenant": tenant}) for tenant in ("x", "x", "y", "z", "y")]
    got = outcomes("f")
    assert got["claimed"] == sorted(_message(r) for r in (runs[0], runs[2], runs[3]))
    assert got["deferred"] == sorted(_message(r) for r in (runs[1], runs[4]))
    assert 59 < vt_in("f", _message(runs[1])) <= 60.01
    keys = [row["key"] for row in q("select key from pgflow.limit_slots where flow_slug = 'f' order by key")]
    assert keys == ["x", "y", "z"]
