"""The async client API on the real engine: each function joins the caller's connection and transaction
(Django's thread-sensitive rule), and ``await_run`` sleeps on the event loop, woken by the engine's
``pgflow_waits`` notifications through one shared LISTEN connection per loop, or by its poll.

The tests run their coroutines with ``async_to_sync`` from the test's thread, so the thread-sensitive
calls come back to that thread and its connection, as they come back to a request's thread under ASGI.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.db import connection, transaction
from django.test import override_settings

import pgflow_django
from pgflow_django import (
    CancelResult,
    Flow,
    FlowNotFound,
    RetryRefused,
    RunNotFound,
    RunNowRefused,
    acancel_run,
    aget_run,
    aretry_run,
    arun_now,
    asend_event,
    astart_flow,
    astart_flows,
    await_run,
    compile_flow,
    get_run,
    start_flow,
    wait_for_run,
)
from pgflow_django.runs import aclient
from pgflow_django.testing import drain
from tests.support.db import value

T = TypeVar("T")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run an async test body on a new event loop, its database calls on this thread's connection."""

    async def main() -> T:
        return await coroutine

    return async_to_sync(main)()


def quote_flow(slug: str = "aclient_quote") -> Flow:
    flow = Flow(slug, max_attempts=1)

    @flow.step()
    def price(order: Any) -> Any:
        return {"total": 3 * order["quantity"]}

    return flow


def approval_flow() -> Flow:
    flow = Flow("aclient_approval")
    flow.wait_for_event("approved", event="aclient.approved")
    return flow


def parcel_flows() -> tuple[Flow, Flow]:
    """A parent whose one step is a child run: a child's end is what the engine notifies today."""
    child = Flow("aclient_parcel")

    @child.step()
    def book(parcel: Any) -> Any:
        return {"tracking": f"TRK-{parcel['id']}"}

    parent = Flow("aclient_shipment")
    parent.subflow("ship", flow=child)
    return parent, child


FLOWS = ("aclient_quote", "aclient_approval", "aclient_shipment", "aclient_parcel")


@pytest.fixture
def quote() -> Flow:
    flow = quote_flow()
    compile_flow(flow)
    return flow


@pytest.fixture
def committed(transactional_db: None) -> Iterator[None]:
    """What a test commits is seen by other connections; its flows are deleted afterwards."""
    yield
    with connection.cursor() as cursor:
        for slug in FLOWS:
            cursor.execute(
                "select pgflow.delete_flow_and_data(%s) from pgflow.flows where flow_slug = %s", [slug, slug]
            )


def run_count(slug: str) -> int:
    return int(value("select count(*) from pgflow.runs where flow_slug = %s", [slug]))


def listening() -> int:
    """The shared LISTEN connections open now (``await_run``'s, by their application name)."""
    return int(
        value(
            "select count(*) from pg_stat_activity"
            " where application_name = %s and datname = current_database()",
            [aclient.LISTEN_APPLICATION_NAME],
        )
    )


async def eventually(check: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not await sync_to_async(check)():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def in_thread(work: Callable[[], None]) -> threading.Thread:
    """``work`` on a thread of its own, with its own connection (closed after), as a worker would."""

    def target() -> None:
        try:
            work()
        finally:
            connection.close()

    thread = threading.Thread(target=target)
    thread.start()
    return thread


# -- the exports ---------------------------------------------------------------------------------------


def test_the_async_functions_are_exported_beside_the_sync_ones() -> None:
    names = {
        "astart_flow",
        "astart_flows",
        "aget_run",
        "await_run",
        "acancel_run",
        "aretry_run",
        "arun_now",
        "asend_event",
    }
    assert names <= set(pgflow_django.__all__)
    assert all(asyncio.iscoroutinefunction(getattr(pgflow_django, name)) for name in names)


# -- starting and reading ------------------------------------------------------------------------------


def test_astart_flow_and_aget_run(quote: Flow) -> None:
    async def body() -> None:
        run_id = await astart_flow(quote, {"quantity": 2}, priority=5)
        view = await aget_run(run_id)
        assert (view.run_id, view.status, view.input) == (run_id, "started", {"quantity": 2})
        assert await astart_flow(quote, {"quantity": 2}, run_id=run_id) == run_id  # the same start: its run

    run(body())


def test_astart_flows_keeps_the_input_order_and_its_idempotency_keys(quote: Flow) -> None:
    async def body() -> list[uuid.UUID]:
        first = await astart_flows(quote, [{"quantity": 1}, {"quantity": 2}], idempotency_keys=["a", "b"])
        again = await astart_flows(quote, [{"quantity": 9}, {"quantity": 3}], idempotency_keys=["a", "c"])
        assert again[0] == first[0] and again[1] not in first
        return [*first, again[1]]

    ids = run(body())
    assert [get_run(run_id).input["quantity"] for run_id in ids] == [1, 2, 3]


def test_errors_are_the_sync_functions_errors(quote: Flow) -> None:
    with pytest.raises(RunNotFound, match="no run"):
        run(aget_run(uuid.uuid4()))
    with pytest.raises(FlowNotFound, match="no flow 'aclient_nope'"):
        run(astart_flow("aclient_nope", {}))
    with pytest.raises(ValueError, match="not a UUID"):
        run(aget_run("not-an-id"))


# -- the caller's transaction --------------------------------------------------------------------------


class Rollback(Exception):
    pass


def test_astart_flow_joins_the_transaction_open_on_the_callers_thread(committed: None, quote: Flow) -> None:
    """Sync code in a transaction calls async code: the start is part of that transaction."""
    with pytest.raises(Rollback), transaction.atomic():
        run_id = async_to_sync(astart_flow)(quote, {"quantity": 1})
        assert get_run(run_id).status == "started"  # seen inside the transaction
        raise Rollback
    assert run_count("aclient_quote") == 0
    with transaction.atomic():
        async_to_sync(astart_flow)(quote, {"quantity": 1})
    assert run_count("aclient_quote") == 1


def test_a_start_in_a_transaction_wrapped_for_async_code_rolls_back_with_it(
    committed: None, quote: Flow
) -> None:
    """The async view's way: the transactional part is a sync function run through ``sync_to_async``."""
    started: list[uuid.UUID] = []

    @sync_to_async
    def place(quantity: int) -> uuid.UUID:
        with transaction.atomic():
            run_id = start_flow(quote, {"quantity": quantity})
            started.append(run_id)
            if quantity > 10:
                raise Rollback
        return run_id

    async def body() -> None:
        with pytest.raises(Rollback):
            await place(11)
        with pytest.raises(RunNotFound):
            await aget_run(started[0])
        kept = await place(1)
        assert (await aget_run(kept)).status == "started"

    run(body())
    assert run_count("aclient_quote") == 1


# -- cancel, retry, events -----------------------------------------------------------------------------


def test_acancel_run_then_aretry_run(quote: Flow) -> None:
    async def body() -> None:
        run_id = await astart_flow(quote, {"quantity": 1})
        with pytest.raises(RetryRefused, match="is started: only a failed or cancelled run can be retried"):
            await aretry_run(run_id)
        assert await acancel_run(run_id, reason="duplicate") == CancelResult(run_id, True, "failed")
        assert (await aget_run(run_id)).error_message == "cancelled: duplicate"
        assert await aretry_run(run_id) == 1
        assert (await aget_run(run_id)).status == "started"
        with pytest.raises(RunNotFound):
            await acancel_run(uuid.uuid4())
        with pytest.raises(RunNotFound):
            await aretry_run(uuid.uuid4())
        delayed = await astart_flow(quote, {"quantity": 2}, delay=3600)
        assert await arun_now(delayed) == 1
        assert await arun_now(delayed) == 0, "nothing waits any more"
        await acancel_run(delayed)
        with pytest.raises(RunNowRefused):
            await arun_now(delayed)

    run(body())


def test_asend_event_delivers_to_the_waiting_run() -> None:
    flow = approval_flow()
    compile_flow(flow)

    async def body() -> None:
        run_id = await astart_flow(flow, {})
        assert await asend_event("aclient.approved", {"by": "ada"}, run_id=run_id, event_id="e1") == 1
        assert await asend_event("aclient.approved", {"by": "ada"}, run_id=run_id, event_id="e1") == 0
        with pytest.raises(ValueError, match="exactly one"):
            await asend_event("aclient.approved")

    run(body())


# -- await_run -----------------------------------------------------------------------------------------


def test_await_run_returns_a_finished_run_at_once_without_listening(quote: Flow) -> None:
    run_id = start_flow(quote, {"quantity": 2})
    drain(flows=[quote])

    async def body() -> None:
        started = time.monotonic()
        view = await await_run(run_id, timeout=5)
        assert (view.status, view.output) == ("completed", {"price": {"total": 6}})
        assert time.monotonic() - started < 1

    run(body())
    assert listening() == 0


def test_await_run_times_out_with_wait_for_runs_message(quote: Flow) -> None:
    run_id = start_flow(quote, {"quantity": 1})
    message = r"is still started after 0.3s \(unfinished steps: price\); is a worker running for this flow\?"
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=message) as raised:
        run(await_run(run_id, timeout=0.3, poll=0.05))
    assert 0.3 <= time.monotonic() - started < 2
    with pytest.raises(TimeoutError) as sync_raised:
        wait_for_run(run_id, timeout=0.3, poll=0.05)
    assert str(raised.value) == str(sync_raised.value)


def test_await_run_checks_its_arguments_and_the_id() -> None:
    with pytest.raises(ValueError, match=r"await_run needs timeout >= 0 and poll > 0, got timeout=1, poll=0"):
        run(await_run(uuid.uuid4(), timeout=1, poll=0))
    with pytest.raises(ValueError, match="timeout >= 0"):
        run(await_run(uuid.uuid4(), timeout=-1))
    with pytest.raises(RunNotFound):
        run(await_run(uuid.uuid4(), timeout=0.1))


def test_a_notification_ends_the_wait_long_before_the_poll(committed: None) -> None:
    """A child run completed by another connection: its commit notifies ``pgflow_waits``, and the
    waiting ``await_run`` reads it at once, with a 10 s poll."""
    parent, child = parcel_flows()
    compile_flow(child)
    compile_flow(parent)
    parent_id = start_flow(parent, {"id": 7})
    (child_id,) = get_run(parent_id).child_run_ids

    async def body() -> float:
        waiting = asyncio.ensure_future(await_run(child_id, timeout=30, poll=10))
        await eventually(lambda: listening() == 1, "await_run's LISTEN")
        thread = in_thread(lambda: drain(flows=[child]))
        view = await waiting
        returned_at = time.time()
        await sync_to_async(thread.join, thread_sensitive=False)(10)
        assert (view.status, view.output) == ("completed", {"book": {"tracking": "TRK-7"}})
        assert view.completed_at is not None
        return returned_at - view.completed_at.timestamp()

    latency = run(body())
    print(f"await_run returned {latency * 1000:.1f} ms after the child run completed (poll: 10 s)")
    assert latency < 1.0


def test_without_a_notification_the_poll_ends_the_wait(committed: None, quote: Flow) -> None:
    """A top-level run's end is not notified today: the poll finds it."""
    run_id = start_flow(quote, {"quantity": 4})

    async def body() -> float:
        thread = in_thread(lambda: drain(flows=[quote]))
        started = time.monotonic()
        view = await await_run(run_id, timeout=10, poll=0.1)
        await sync_to_async(thread.join, thread_sensitive=False)(10)
        assert view.output == {"price": {"total": 12}}
        return time.monotonic() - started

    assert run(body()) < 5


def test_waiting_calls_of_one_loop_share_one_listen_that_closes_after_them(
    committed: None, quote: Flow
) -> None:
    run_ids = [start_flow(quote, {"quantity": n}) for n in range(3)]

    async def body() -> None:
        waits = [asyncio.ensure_future(await_run(run_id, timeout=30, poll=0.1)) for run_id in run_ids]
        await eventually(lambda: listening() == 1, "one LISTEN for three waits")
        await asyncio.sleep(0.3)  # three polls later: still one
        assert await sync_to_async(listening)() == 1
        await sync_to_async(drain)(flows=[quote])
        views = await asyncio.gather(*waits)
        assert [view.output["price"]["total"] for view in views] == [0, 3, 6]
        assert aclient._listeners.get(asyncio.get_running_loop()) == {}
        await eventually(lambda: listening() == 0, "the LISTEN to close after the last wait")

    run(body())


def test_a_cancelled_wait_closes_the_listen(committed: None, quote: Flow) -> None:
    run_id = start_flow(quote, {"quantity": 1})

    async def body() -> None:
        loop = asyncio.get_running_loop()
        waiting = asyncio.ensure_future(await_run(run_id, timeout=30))
        await eventually(lambda: listening() == 1, "await_run's LISTEN")
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await eventually(lambda: listening() == 0, "the LISTEN to close after the cancel")
        cancelled_at_once = asyncio.ensure_future(await_run(run_id, timeout=30))
        while not aclient._listeners.get(loop):  # it has read the run and joined a listener: cancel it
            await asyncio.sleep(0.001)  # while that listener connects
        cancelled_at_once.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled_at_once
        await asyncio.sleep(0.5)  # long enough for a connection that was not stopped to show
        await eventually(lambda: listening() == 0, "no LISTEN after a cancel while it connected")

    run(body())


def test_behind_a_transaction_pooler_await_run_only_polls(committed: None, quote: Flow) -> None:
    run_id = start_flow(quote, {"quantity": 5})

    async def body() -> None:
        waiting = asyncio.ensure_future(await_run(run_id, timeout=10, poll=0.05))
        await asyncio.sleep(0.3)
        assert await sync_to_async(listening)() == 0
        await sync_to_async(drain)(flows=[quote])
        assert (await waiting).output == {"price": {"total": 15}}

    with override_settings(PGFLOW={"POOLER": "transaction"}):
        run(body())
