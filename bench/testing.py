"""How fast the testing toolkit is inside a test's transaction (docs/testing.md quotes the figures).

``python -m bench.testing`` creates its own database (``pgflow_bench_testing`` on ``DATABASE_URL``'s
server, or on the embedded one), migrates it, and times, inside one outer transaction with a savepoint
rolled back after each sample as Django's ``TestCase`` does:

- ``run_flow`` of a 10-step flow with a 20-element map and two retried failures (compiled in the
  sample, as a test that does not compile in ``setUpTestData`` pays it, and compiled beforehand);
- ``drain()`` of 100 one-step runs started beforehand.

After each timing, one more sample counts its round trips to the database (``bench.roundtrips``),
which the machine's load does not change; ``--profile`` splits them by phase.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from bench import roundtrips
from bench.db import drop_database, recreate_database, server_url, with_database

DATABASE = "pgflow_bench_testing"


def _flows() -> tuple[Any, Any]:
    from pgflow_django import Flow

    ten = Flow("bench_testing_ten", max_attempts=3, base_delay=1, timeout=30)

    @ten.step()
    def items(flow_input: Any) -> Any:
        return list(range(flow_input["n"]))

    @ten.map(array=items)
    def double(item: Any) -> Any:
        return item * 2

    def hop_after(name: str) -> Callable[[Any], Any]:
        def hop(deps: Any) -> Any:
            value = deps[name]
            return sum(value) if isinstance(value, list) else value + 1

        return hop

    previous = "double"
    for index in range(8):
        ten.step(slug=f"hop{index}", depends_on=[previous])(hop_after(previous))
        previous = f"hop{index}"

    one = Flow("bench_testing_one", timeout=30)

    @one.step()
    def echo(flow_input: Any) -> Any:
        return flow_input

    return ten, one


def _sample(samples: int, warmup: int, body: Callable[[], None]) -> list[float]:
    """Milliseconds of ``body`` per sample, each inside a savepoint rolled back afterwards."""
    from django.db import transaction

    times: list[float] = []
    for index in range(warmup + samples):
        with transaction.atomic():
            started = time.perf_counter()
            body()
            elapsed = (time.perf_counter() - started) * 1000
            transaction.set_rollback(True)
        if index >= warmup:
            times.append(elapsed)
    return times


def _counted(body: Callable[[], None], profile: bool) -> str:
    """One more sample of ``body`` (rolled back like the others), counting its round trips."""
    from django.db import transaction

    with transaction.atomic():
        with roundtrips.counting() as tally:
            body()
        transaction.set_rollback(True)
    line = f"{'':<4}{tally.total} round trips ({tally.statements} statements)"
    return "\n".join([line, *tally.lines()]) if profile else line


def _line(name: str, times: list[float], target: float) -> str:
    ordered = sorted(times)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    median = statistics.median(ordered)
    verdict = "ok" if median <= target else "over"
    return (
        f"{name:<58} median {median:7.1f} ms  p90 {p90:7.1f} ms  min {ordered[0]:7.1f} ms"
        f"  (target <= {target:.0f} ms: {verdict})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--database", default=DATABASE, help=f"database to (re)create (default {DATABASE})")
    parser.add_argument("--drop", action="store_true", help="drop the database afterwards")
    parser.add_argument("--profile", action="store_true", help="split the round trips by phase")
    args = parser.parse_args(argv)

    server = server_url()
    recreate_database(server, args.database)
    os.environ["DATABASE_URL"] = with_database(server, args.database)
    try:
        return _measure(args)
    finally:
        if args.drop:
            from django.db import connections

            connections.close_all()
            drop_database(server, args.database)


def _measure(args: argparse.Namespace) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection, transaction

    from pgflow_django import compile_flow, start_flows
    from pgflow_django.testing import drain, fail_next, run_flow

    call_command("migrate", verbosity=0)
    logging.getLogger("pgflow_django").setLevel(logging.ERROR)  # the injected failures log warnings
    ten, one = _flows()

    def ten_steps() -> None:
        with fail_next(ten, "hop2"), fail_next(ten, "hop5"):
            run = run_flow(ten, {"n": 20})
        assert run.status == "completed" and len(run.tasks) == 29, run
        assert run.attempts("hop2") == 2 and run.attempts("hop5") == 2

    def hundred() -> None:
        summary = drain(flows=[one])
        assert summary.tasks == 100 and len(summary.completed) == 100, summary

    with connection.cursor() as cursor:
        cursor.execute("select version()")
        version = cursor.fetchone()[0].split(" on ")[0]
    print(f"{version}; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}")
    with transaction.atomic():  # the TestCase class's transaction, never committed
        print(
            _line(
                "run_flow 10 steps, 20-element map, 2 retries (compiles)",
                _sample(args.samples, args.warmup, ten_steps),
                50,
            )
        )
        print(_counted(ten_steps, args.profile))
        compile_flow(ten)
        print(
            _line(
                "run_flow 10 steps, 20-element map, 2 retries (compiled)",
                _sample(args.samples, args.warmup, ten_steps),
                50,
            )
        )
        print(_counted(ten_steps, args.profile))
        compile_flow(one)

        def timed_drain() -> None:
            start_flows(one, [{"i": i} for i in range(100)])
            started = time.perf_counter()
            hundred()
            drains.append((time.perf_counter() - started) * 1000)

        drains: list[float] = []
        _sample(args.samples, args.warmup, timed_drain)
        print(_line("drain() of 100 one-step runs (started beforehand)", drains[args.warmup :], 200))

        def counted_drain() -> None:
            start_flows(one, [{"i": i} for i in range(100)])
            with roundtrips.counting() as tally:
                hundred()
            tallies.append(tally)

        tallies: list[roundtrips.Tally] = []
        _sample(1, 0, counted_drain)
        drain_line = f"{'':<4}{tallies[0].total} round trips ({tallies[0].statements} statements)"
        print("\n".join([drain_line, *tallies[0].lines()]) if args.profile else drain_line)
        transaction.set_rollback(True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
