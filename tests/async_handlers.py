"""The async handlers docs/async.md shows ("Async handlers", "Deadlines"), run by a real worker in
``tests/integration/test_async_handlers_docs.py``; a test checks that every line of those blocks is
copied from here."""

from __future__ import annotations

import httpx
from django.conf import settings

from pgflow_django import Flow, TaskContext
from testproject.example.models import LedgerEntry

rates = Flow("async_rates", timeout=10)


@rates.map()
async def fetch_rate(code, ctx: TaskContext):
    async with httpx.AsyncClient(base_url=settings.RATES_API_URL) as client:
        response = await client.get(f"/rates/{code}", timeout=ctx.deadline.remaining())
        response.raise_for_status()
        return response.json()


@rates.step(depends_on=[fetch_rate])
async def save_rates(input):
    await LedgerEntry.objects.abulk_create(
        [LedgerEntry(flow="rates", key=f"{rate['code']}={rate['value']}") for rate in input["fetch_rate"]]
    )
    return len(input["fetch_rate"])


reports = Flow("async_reports", timeout=2, max_attempts=1)


def render(number):
    return f"page {number}"


@reports.step()
def render_pages(input, ctx: TaskContext):
    pages = []
    for number in range(input["pages"]):
        ctx.check()  # TaskTimeout past the step's timeout, TaskCancelled once the run is cancelled
        pages.append(render(number))
    return {"pages": len(pages)}
