"""The fast path of a completion (``pgflow.complete_hop``) writes what the general path writes.

Each seed builds a random flow (chains, fan-outs and fan-ins, maps, conditions with each
``when_unmet``, retries, start delays, priorities, flow control) and drives three runs of it twice
with the same decisions: once as the worker does (``complete_and_hand_off``, which tries the fast
path first), once with ``pgflow.fast_hop = 'off'`` (the general path only). A driver claims what is
visible, then works through what it holds in batches: each task's fate (complete with an object, an
array or a non-array for a map, fail, or cancel its run) comes from a hash of its run, step, index
and attempt, so both passes decide alike whatever order they see tasks in. Every call's rows and, at
the end, every run, step state, task, queue message and archived message are compared; ids of
messages are compared by the task they carry and their order, timestamps by whether they are set.
"""

from __future__ import annotations

import hashlib
import json
import random
import uuid
import zlib
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from tests.sql.complete_hop.support import fast_path_takes
from tests.sql.limit_claim.support import concurrency, set_limits
from tests.sql.support import jb, make_flow, new_worker, q, qtable, step, val

pytestmark = [pytest.mark.django_db(transaction=True)]

CHUNKS = 6
SEEDS_PER_CHUNK = 10
RUNS = 3
TAKEN: Counter[str] = Counter()
"""How many batches each path completed (each test checks that its seeds took both)."""


@dataclass
class Shape:
    steps: list[dict[str, Any]]
    inputs: list[Any]
    """Each run's input (arrays, some empty, for a flow whose first step is a map)."""
    feeds_map: set[str]
    step_priorities: dict[str, int]
    priority: int | None
    limited: bool
    """Flow control: its deferrals are jittered at random, so a limited flow is compared only by
    the fast path declining it (test_a_limited_flow_takes_the_general_path)."""
    run_priorities: list[int | None]
    batch: int
    free_slots: int
    seed: int


def random_shape(seed: int) -> Shape:
    rng = random.Random(seed)
    count = rng.randint(2, 6)
    steps: list[dict[str, Any]] = []
    feeds_map: set[str] = set()
    step_priorities: dict[str, int] = {}
    for i in range(count):
        slug = f"s{i}"
        earlier = [s["slug"] for s in steps]
        deps = (
            sorted(rng.sample(earlier, k=min(len(earlier), rng.choice([1, 1, 1, 2, 3])))) if earlier else []
        )
        if i == 1 and rng.random() < 0.3:
            deps = []  # a second root
        elif i > 0 and not deps:
            deps = [earlier[-1]]
        options: dict[str, Any] = {}
        if i == 0 and rng.random() < 0.2:
            options["step_type"] = "map"  # a root map: the runs' inputs are arrays, some empty
        elif (
            len(deps) == 1
            and rng.random() < 0.2
            and deps[0] not in {s["slug"] for s in steps if s.get("step_type") == "map"}
        ):
            options["step_type"] = "map"
            feeds_map.add(deps[0])
        if rng.random() < 0.2:
            options["required_input_pattern"] = {deps[0]: {"ok": True}} if deps else {"ok": True}
            options["when_unmet"] = rng.choice(["skip", "skip-cascade", "fail"])
        if rng.random() < 0.3:
            options["max_attempts"] = rng.choice([1, 2, 3])
            options["base_delay"] = 0
        if rng.random() < 0.1:
            options["start_delay"] = 1
        if rng.random() < 0.15:
            step_priorities[slug] = rng.choice([-5, 5])
        if rng.random() < 0.1:
            options["when_exhausted"] = rng.choice(["skip", "skip-cascade"])
        steps.append(step(slug, *deps, **options))
    root_map = steps[0].get("step_type") == "map"
    return Shape(
        steps=steps,
        inputs=[
            list(range(rng.choice([0, 1, 2, 3]))) if root_map else {"ok": rng.random() < 0.7, "n": n}
            for n in range(RUNS)
        ],
        feeds_map=feeds_map,
        step_priorities=step_priorities,
        priority=rng.choice([None, None, 3]),
        limited=False,
        run_priorities=[rng.choice([None, None, 0, 7]) for _ in range(RUNS)],
        batch=rng.choice([1, 1, 2, 4]),
        free_slots=rng.choice([0, 1, 1, 3, 10]),
        seed=seed,
    )


def fate(shape: Shape, run: int, task: dict[str, Any]) -> tuple[str, Any]:
    """What happens to one attempt of one task (of the pass's ``run``-th run): the same in both passes."""
    key = f"{shape.seed}:{run}:{task['step_slug']}:{task['task_index']}:{task['attempt']}"
    roll = int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") / 2**32
    if roll < 0.03:
        return "cancel", None
    if roll < 0.18:
        return "fail", None
    value = int(roll * 1000)
    if task["step_slug"] in shape.feeds_map:
        if roll > 0.97:
            return "complete", {"not": "an array"}
        return "complete", list(range(value % 4))
    return "complete", {"ok": value % 5 != 0, "v": value}


def make_visible(flow: str) -> None:
    q(f"update pgmq.{qtable(flow)} set vt = clock_timestamp() - interval '1 second'")


def run_ids(flow: str) -> list[uuid.UUID]:
    """The runs of one pass: their own ids, in the same order in both passes (the driver takes tasks
    in run order)."""
    return [uuid.UUID(int=(zlib.crc32(flow.encode()) << 96) + n) for n in range(RUNS)]


def drive(shape: Shape, flow: str, fast: bool) -> list[Any]:
    """Start the runs and work them to the end, each call its own transaction as a worker's; returns
    every call's rows, with run ids replaced by their number."""
    val("select set_config('pgflow.fast_hop', %s, false) as v", ["on" if fast else "off"])
    try:
        return normalized(flow, drive_runs(shape, flow, fast))
    finally:
        val("select set_config('pgflow.fast_hop', '', false) as v")


def drive_runs(shape: Shape, flow: str, fast: bool) -> list[Any]:
    worker = new_worker(flow)
    runs = run_ids(flow)
    transcript: list[Any] = []
    for run_id, run_input, priority in zip(runs, shape.inputs, shape.run_priorities, strict=True):
        q(
            "select run_id from pgflow.start_flow(%s, %s::jsonb, %s::uuid, null, %s::int)",
            [flow, jb(run_input), run_id, priority],
        )
    generation = val("select generation as v from pgflow.flows where flow_slug = %s", [flow])
    support = [s["slug"] for s in shape.steps]
    held: list[dict[str, Any]] = []
    for _ in range(400):
        if not held:
            make_visible(flow)
            ids = [r["msg_id"] for r in q("select msg_id from pgmq.read(%s, 30, 100)", [flow])]
            if not ids:
                return transcript
            held = q(
                "select c.run_id, c.step_slug, c.task_index, c.attempt, c.input"
                "  from pgflow.start_tasks(%s, %s, %s::bigint[], %s::uuid, null) as c"
                " where c.outcome = 'claimed' order by c.run_id, c.step_slug, c.task_index",
                [flow, flow, ids, worker],
            )
            transcript.append(("claimed", [_task(t) for t in held]))
            if not held:
                continue
        batch, held = held[: shape.batch], held[shape.batch :]
        items = []
        for task in batch:
            action, output = fate(shape, runs.index(task["run_id"]), task)
            if action == "cancel":
                transcript.append(
                    ("cancel", val("select pgflow.cancel_run(%s::uuid) as v", [task["run_id"]]))
                )
            elif action == "fail":
                transcript.append(
                    (
                        "fail",
                        val(
                            "select pgflow.fail_task(%s::uuid, %s, %s, %s, 'boom', 0) as v",
                            [task["run_id"], task["step_slug"], task["task_index"], task["attempt"]],
                        ),
                    )
                )
            else:
                items.append(
                    {
                        "run_id": str(task["run_id"]),
                        "step_slug": task["step_slug"],
                        "task_index": task["task_index"],
                        "attempt": task["attempt"],
                        "output": output,
                    }
                )
        if not items:
            continue
        if fast:
            taken = fast_path_takes(items, flow, worker, support, generation, shape.free_slots)
            TAKEN["fast" if taken else "general"] += 1
        rows = complete_rows(items, flow, worker, support, generation, shape.free_slots)
        handed = sorted((r for r in rows if r["outcome"] == "claimed"), key=_key)
        if fate(shape, runs.index(batch[0]["run_id"]), {**batch[0], "attempt": -1})[0] == "fail":
            # the same completion again, as a worker that lost its connection before the commit's
            # answer sends it: the fence sees it stale on either path
            again = complete_rows(items[:1], flow, worker, support, generation, shape.free_slots)
            transcript.append(("again", [(r["outcome"], r["step_slug"]) for r in again]))
        transcript.append(
            (
                "completed",
                sorted(
                    (r["outcome"], str(r["run_id"]), r["step_slug"], r["task_index"])
                    for r in rows
                    if r["outcome"] != "claimed"
                ),
                [_task(t) for t in handed],
            )
        )
        held = held + handed
    raise AssertionError(f"seed {shape.seed}: the runs did not finish in 400 batches")


def complete_rows(
    items: list[dict[str, Any]], flow: str, worker: uuid.UUID, support: list[str], generation: int, slots: int
) -> list[dict[str, Any]]:
    return q(
        "select c.outcome, c.run_id, c.step_slug, c.task_index, c.attempt, c.input"
        "  from pgflow.complete_and_hand_off(%s::jsonb, %s, %s::uuid, %s::text[], %s::text[],"
        " %s::bigint[], %s) as c",
        [jb(items), flow, worker, [flow] * len(support), support, [generation] * len(support), slots],
    )


def normalized(flow: str, value: Any) -> Any:
    """``value`` with the flow's slug and its runs' ids replaced by names both passes share."""
    text = json.dumps(value, default=str)
    for n, run_id in enumerate(run_ids(flow)):
        text = text.replace(str(run_id), f"run-{n}")
    return json.loads(text.replace(f'"{flow}"', '"FLOW"'))


def _key(task: dict[str, Any]) -> tuple[str, str, int]:
    return str(task["run_id"]), task["step_slug"], task["task_index"]


def _task(task: dict[str, Any]) -> tuple[Any, ...]:
    return (*_key(task), task["attempt"], json.dumps(task["input"], sort_keys=True))


def snapshot(flow: str) -> dict[str, Any]:
    """Every row the two passes wrote, with message ids replaced by (task, order) and times by whether
    they are set (a message's visibility: whether it is hidden beyond the next second)."""
    messages = q(
        "select msg_id, message, headers, read_ct,"
        " vt > clock_timestamp() + interval '1 second' as hidden, 'q' as tbl"
        f"  from pgmq.{qtable(flow)}"
        f" union all select msg_id, message, headers, read_ct, null, 'a' from pgmq.{qtable(flow, 'a')}"
    )
    order: dict[tuple[str, str, int], list[int]] = {}
    for m in sorted(messages, key=lambda m: m["msg_id"]):
        body = m["message"]
        order.setdefault((body["run_id"], body["step_slug"], body["task_index"]), []).append(m["msg_id"])
    names = {mid: (*k, n) for k, ids in order.items() for n, mid in enumerate(ids)}

    def stamps(row: dict[str, Any], *columns: str) -> tuple[bool, ...]:
        return tuple(row.pop(c) is None for c in columns)

    runs = []
    for r in q("select * from pgflow.runs where flow_slug = %s order by run_id", [flow]):
        runs.append((stamps(r, "started_at", "completed_at", "failed_at"), sorted(r.items())))
    states = []
    for s in q("select * from pgflow.step_states where flow_slug = %s order by run_id, step_slug", [flow]):
        states.append(
            (
                stamps(s, "created_at", "started_at", "completed_at", "failed_at", "skipped_at"),
                sorted(s.items()),
            )
        )
    tasks = []
    for t in q(
        "select * from pgflow.step_tasks where flow_slug = %s order by run_id, step_slug, task_index", [flow]
    ):
        t["message_id"] = names.get(t["message_id"]) if t["message_id"] is not None else None
        t["attempt_errors"] = [
            {k: v for k, v in e.items() if k not in {"failed_at", "worker_id"}} for e in t["attempt_errors"]
        ]
        t["last_worker_id"] = t["last_worker_id"] is not None  # each pass has its one worker
        tasks.append(
            (
                stamps(
                    t,
                    "queued_at",
                    "started_at",
                    "completed_at",
                    "failed_at",
                    "last_requeued_at",
                    "permanently_stalled_at",
                ),
                sorted(t.items()),
            )
        )
    queue = sorted(
        (m["tbl"], names[m["msg_id"]], json.dumps(m["headers"], sort_keys=True), m["read_ct"], m["hidden"])
        for m in messages
    )
    rows = normalized(flow, {"runs": runs, "states": states, "tasks": tasks, "messages": queue})
    return {name: sorted(rows[name], key=json.dumps) for name in rows}


def build(shape: Shape, flow: str) -> None:
    make_flow(flow, *shape.steps)
    if shape.priority is not None:
        q("update pgflow.flows set opt_priority = %s where flow_slug = %s", [shape.priority, flow])
    for slug, priority in shape.step_priorities.items():
        q(
            "update pgflow.steps set opt_priority = %s where flow_slug = %s and step_slug = %s",
            [priority, flow, slug],
        )
    if shape.limited:
        set_limits(flow, concurrency(2))


@contextmanager
def built(shape: Shape, flow: str) -> Iterator[None]:
    """The flow, then its runs, queue and worker row gone: this module commits what it writes."""
    build(shape, flow)
    try:
        yield
    finally:
        q("select pgflow.delete_flow_and_data(%s)", [flow])
        q("delete from pgflow.workers where queue_name = %s", [flow])


def both_passes(shape: Shape) -> None:
    results = []
    for fast in (True, False):
        flow = f"hop{shape.seed % 1000:03d}_{'fast' if fast else 'general'}"
        with built(shape, flow):
            results.append((drive(shape, flow, fast), snapshot(flow)))
    (fast_calls, fast_rows), (general_calls, general_rows) = results
    differ = next(
        (n for n, (a, b) in enumerate(zip(fast_calls, general_calls, strict=False)) if a != b), None
    )
    assert fast_calls == general_calls, (
        f"seed {shape.seed}: the calls' rows differ at call {differ} ({shape}):\n"
        f"fast path: {fast_calls[differ] if differ is not None else fast_calls}\n"
        f"general path: {general_calls[differ] if differ is not None else general_calls}"
    )
    for name in fast_rows:
        assert fast_rows[name] == general_rows[name], f"seed {shape.seed}: {name} differ ({shape})"


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_the_fast_path_writes_what_the_general_path_writes(chunk: int) -> None:
    before = TAKEN.copy()
    for seed in range(chunk * SEEDS_PER_CHUNK, (chunk + 1) * SEEDS_PER_CHUNK):
        both_passes(random_shape(seed))
    taken = TAKEN - before
    assert taken["fast"] >= 3 and taken["general"] >= 3, f"these seeds did not exercise both paths: {taken}"


def test_a_chain_of_single_steps_takes_the_fast_path() -> None:
    shape = Shape(
        steps=[step("s0"), step("s1", "s0"), step("s2", "s1"), step("s3", "s1", "s2")],
        inputs=[{"n": n} for n in range(RUNS)],
        feeds_map=set(),
        step_priorities={},
        priority=None,
        limited=False,
        run_priorities=[None, 7, 0],
        batch=2,
        free_slots=1,
        seed=999,
    )
    before = TAKEN["fast"]
    both_passes(shape)
    assert TAKEN["fast"] > before


def test_a_limited_flow_takes_the_general_path() -> None:
    shape = Shape(
        steps=[step("s0"), step("s1", "s0")],
        inputs=[{"n": n} for n in range(RUNS)],
        feeds_map=set(),
        step_priorities={},
        priority=None,
        limited=True,
        run_priorities=[None, None, None],
        batch=1,
        free_slots=1,
        seed=998,
    )
    flow = "hop998_limited"
    before = TAKEN.copy()
    with built(shape, flow):
        drive(shape, flow, fast=True)
        statuses = {r["status"] for r in q("select status from pgflow.runs where flow_slug = %s", [flow])}
    taken = TAKEN - before
    assert taken["general"] >= 6 and taken["fast"] == 0, taken
    assert statuses == {"completed"}
