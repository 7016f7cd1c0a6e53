"""The django.tasks backend against the framework's contract, without workers: enqueue and its
TaskResult, get_result, transactions, aenqueue, validate_task, run_after, OPTIONS, flow slugs and
task_enqueued. Runs unchanged on Django 6 (``django.tasks``) and on 5.2 with the ``django_tasks``
backport: everything framework-specific comes from ``tasks_api``."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from asgiref.sync import async_to_sync
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.test import override_settings
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st

from pgflow_django import Flow, compile_flow, start_flow
from pgflow_django.flows.slugs import MAX_FLOW_SLUG_LENGTH, validate_flow_slug
from pgflow_django.tasks import PgflowTaskBackend, task_flow_slug
from testproject.example.tasks import add, always_fails, send_welcome
from tests.sql.support import q, q1, val
from tests.tasks_support import backend, captured, clean_task_flows, status, task, tasks_api

InvalidTask = tasks_api.InvalidTask
DoesNotExist = tasks_api.TaskResultDoesNotExist
BACKEND = "pgflow_django.tasks.PgflowTaskBackend"


def plain(x: int) -> int:
    """A module-level function for ``task(...)`` in the validation tests."""
    return x


@pytest.fixture(autouse=True)
def fresh_compilations() -> Iterator[None]:
    """Compilations remembered by another test's process state may name flows that are gone."""
    backend()._compiled.clear()
    yield
    backend()._compiled.clear()


# -- enqueue and get_result ----------------------------------------------------------------------


def test_enqueue_returns_a_ready_result_whose_id_is_the_run_id() -> None:
    result = add.enqueue(1, b=(2, 3))
    assert result.status == status.READY
    assert result.args == [1]
    assert result.kwargs == {"b": [2, 3]}  # normalized to JSON, as the framework does
    assert result.backend == "default"
    assert result.task.func is add.func
    assert (result.errors, result.worker_ids, result.attempts) == ([], [], 0)
    assert result.started_at is None and result.finished_at is None and result.last_attempted_at is None
    assert result.enqueued_at is not None and timezone.is_aware(result.enqueued_at)
    assert not result.is_finished
    with pytest.raises(ValueError, match="not finished"):
        _ = result.return_value

    run = q1("select flow_slug, status, input from pgflow.runs where run_id = %s", [uuid.UUID(result.id)])
    assert run["flow_slug"] == task_flow_slug("testproject.example.tasks.add", "default")
    assert run["status"] == "started"
    assert run["input"] == {"task": "testproject.example.tasks.add", "args": [1], "kwargs": {"b": [2, 3]}}
    task_row = q1(
        "select step_slug, status, queue_name from pgflow.step_tasks where run_id = %s",
        [uuid.UUID(result.id)],
    )
    assert task_row == {"step_slug": "call", "status": "queued", "queue_name": "default"}

    again = add.get_result(result.id)
    assert (again.id, again.status, again.args, again.kwargs) == (result.id, status.READY, [1], {"b": [2, 3]})
    assert again.enqueued_at == result.enqueued_at
    result.refresh()
    assert result.status == status.READY


def test_a_task_on_another_queue_gets_its_own_flow_and_result() -> None:
    mail = send_welcome.enqueue("a@example.com", fail_times=0)
    default = send_welcome.using(queue_name="default").enqueue("b@example.com")
    slugs = {
        row["queue_name"]: row["flow_slug"]
        for row in q(
            "select queue_name, flow_slug from pgflow.step_tasks where run_id = any(%s)",
            [[uuid.UUID(mail.id), uuid.UUID(default.id)]],
        )
    }
    assert slugs == {
        "mail": task_flow_slug("testproject.example.tasks.send_welcome", "mail"),
        "default": task_flow_slug("testproject.example.tasks.send_welcome", "default"),
    }
    assert backend().get_result(mail.id).task.queue_name == "mail"
    assert backend().get_result(default.id).task.queue_name == "default"


def test_arguments_json_cannot_hold_are_refused_before_anything_is_written() -> None:
    from pgflow_django.runs.client import InvalidInput

    count = "select count(*) from pgflow.runs where flow_slug = %s"
    slug = task_flow_slug("testproject.example.tasks.add", "default")
    before = val(count, [slug])
    with pytest.raises(TypeError, match="Unsupported type"):
        add.enqueue(object(), 1)
    with pytest.raises(InvalidInput, match="not JSON-serialisable"):
        add.enqueue(float("nan"), 1)
    with pytest.raises(InvalidInput, match="NUL character"):
        add.enqueue("a\x00b", 1)
    assert val(count, [slug]) == before


def test_get_result_of_an_unknown_or_malformed_id_raises_does_not_exist() -> None:
    for result_id in (str(uuid.uuid4()), "not-a-uuid", "", "1"):
        with pytest.raises(DoesNotExist):
            backend().get_result(result_id)
        with pytest.raises(DoesNotExist):
            add.get_result(result_id)


def test_get_result_of_another_task_raises_mismatch() -> None:
    result = add.enqueue(1, 2)
    with pytest.raises(tasks_api.package.exceptions.TaskResultMismatch):
        always_fails.get_result(result.id)


def test_get_result_of_a_run_of_a_non_task_flow_raises_does_not_exist() -> None:
    no_call = Flow("tests_tasks_h9_plain")
    no_call.step(slug="first")(_first)
    with_call = Flow("tests_tasks_h9_call")
    with_call.step(slug="call")(_first)
    compile_flow(no_call)
    compile_flow(with_call)
    runs = [
        start_flow(no_call, {"args": [], "kwargs": {}}),
        start_flow(with_call, {"x": 1}),
        start_flow(with_call, {"args": [], "kwargs": {}}),
        start_flow(with_call, {"task": "nowhere.at_all", "args": [], "kwargs": {}}),
        start_flow(with_call, {"task": "testproject.example.tasks.task", "args": [], "kwargs": {}}),
    ]
    for run_id in runs:
        with pytest.raises(DoesNotExist):
            backend().get_result(str(run_id))


def _first(payload: Any) -> Any:
    return payload


def test_flags_of_the_backend() -> None:
    assert backend().supports_defer is True
    assert backend().supports_async_task is True
    assert backend().supports_get_result is True
    assert backend().supports_priority is True


def test_aenqueue_and_aget_result() -> None:
    async def go() -> tuple[Any, Any]:
        result = await add.aenqueue(2, 3)
        return result, await add.aget_result(result.id)

    result, fetched = async_to_sync(go)()
    assert result.status == status.READY and result.args == [2, 3]
    assert (fetched.id, fetched.status) == (result.id, status.READY)
    assert val("select count(*) from pgflow.runs where run_id = %s", [uuid.UUID(result.id)]) == 1


def test_task_enqueued_is_sent_with_the_result() -> None:
    with captured(tasks_api.task_enqueued) as seen:
        result = add.enqueue(4, 5)
    assert len(seen) == 1
    assert seen[0]["sender"] is PgflowTaskBackend
    assert seen[0]["task_result"].id == result.id
    assert seen[0]["task_result"].status == status.READY


# -- transactions ----------------------------------------------------------------------------------


@pytest.fixture
def committed(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    """A transactional test with task flows cleaned, and a second connection to see what is committed."""
    clean_task_flows()
    with psycopg.connect(database_url, autocommit=True) as other:
        yield other
    clean_task_flows()


def _visible(other: psycopg.Connection[Any], run_id: str) -> bool:
    row = other.execute("select count(*) from pgflow.runs where run_id = %s", [uuid.UUID(run_id)]).fetchone()
    return bool(row and row[0])


@pytest.mark.django_db(transaction=True)
def test_enqueue_rolls_back_with_the_caller_and_a_later_enqueue_compiles_again(
    committed: psycopg.Connection[Any],
) -> None:
    slug = task_flow_slug("testproject.example.tasks.add", "default")
    with pytest.raises(RuntimeError), transaction.atomic():
        lost = add.enqueue(1, 1)
        assert lost.status == status.READY
        raise RuntimeError("the caller fails")
    assert not _visible(committed, lost.id)
    with pytest.raises(DoesNotExist):
        backend().get_result(lost.id)
    assert val("select count(*) from pgflow.flows where flow_slug = %s", [slug]) == 0
    assert slug not in backend()._compiled

    kept = add.enqueue(2, 2)  # autocommit: compiles again, and remembers it
    assert _visible(committed, kept.id)
    assert slug in backend()._compiled
    assert backend().get_result(kept.id).status == status.READY


@pytest.mark.django_db(transaction=True)
def test_enqueue_returns_ready_even_when_a_worker_claims_the_task_at_once(
    committed: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """In autocommit a worker can claim the task between the start and the read-back; the result
    ``enqueue`` returns is the one of the enqueue (READY, as Django's database backends return it)."""
    from pgflow_django.runs import client

    real_start = client.start_flow_reporting
    claimed: list[int] = []

    def start_then_claim_elsewhere(*args: Any, **kwargs: Any) -> tuple[uuid.UUID, bool]:
        run_id, started = real_start(*args, **kwargs)
        cursor = committed.execute(  # what a worker's claim writes, from its own connection
            "update pgflow.step_tasks set status = 'started', started_at = now(), attempts_count = 1 "
            "where run_id = %s",
            [run_id],
        )
        claimed.append(cursor.rowcount)
        return run_id, started

    monkeypatch.setattr(client, "start_flow_reporting", start_then_claim_elsewhere)
    result = add.enqueue(5, 5)
    assert claimed == [0], "the run must not be visible to another connection before the read-back"
    assert result.status == status.READY
    assert result.started_at is None and result.worker_ids == []
    assert _visible(committed, result.id)


@pytest.mark.django_db(transaction=True)
def test_enqueue_commits_with_the_caller(committed: psycopg.Connection[Any]) -> None:
    with transaction.atomic():
        result = add.enqueue(3, 3)
        assert not _visible(committed, result.id)  # not before the caller commits
        assert backend().get_result(result.id).status == status.READY  # the caller sees its own run
    assert _visible(committed, result.id)
    slug = task_flow_slug("testproject.example.tasks.add", "default")
    assert slug in backend()._compiled

    with pytest.raises(RuntimeError), transaction.atomic():  # a compiled flow: only the run rolls back
        lost = add.enqueue(4, 4)
        raise RuntimeError
    assert not _visible(committed, lost.id)
    assert val("select count(*) from pgflow.flows where flow_slug = %s", [slug]) == 1


@pytest.mark.django_db(transaction=True)
def test_a_compilation_in_a_rolled_back_savepoint_is_not_remembered(
    committed: psycopg.Connection[Any],
) -> None:
    slug = task_flow_slug("testproject.example.tasks.add", "default")
    with transaction.atomic():
        with pytest.raises(RuntimeError), transaction.atomic():
            add.enqueue(1, 2)
            raise RuntimeError
        kept = add.enqueue(5, 5)  # compiles again inside the outer transaction
    assert _visible(committed, kept.id)
    assert slug in backend()._compiled


# -- attempts without a recorded failure ---------------------------------------------------------


def _as_if_claimed_long_ago(result_id: str, worker: uuid.UUID, requeued_count: int = 0) -> None:
    """The state a claim leaves (attempt counted, worker recorded), an hour old: its worker is gone."""
    q(
        "update pgflow.step_tasks set status = 'started', attempts_count = attempts_count + 1, "
        "started_at = now() - interval '1 hour', last_worker_id = %s, requeued_count = %s "
        "where run_id = %s",
        [worker, requeued_count, uuid.UUID(result_id)],
    )


def retried(x: int) -> int:
    return x


def test_an_attempt_lost_to_a_crash_has_no_error_and_no_worker_id() -> None:
    """As docs/django-tasks.md says: stalled-task recovery requeues without an attempt_errors entry,
    so the lost attempt shows neither in errors nor in worker_ids, though the engine counted it."""
    result = task(max_attempts=3)(retried).enqueue(1)
    lost = uuid.uuid4()
    _as_if_claimed_long_ago(result.id, lost)
    running = backend().get_result(result.id)
    assert (running.status, running.worker_ids) == (status.RUNNING, [str(lost)])

    recovered = q("select * from pgflow.requeue_stalled_tasks()")
    assert {row["outcome"]: row["task_count"] for row in recovered}["requeued"] == 1
    after = backend().get_result(result.id)
    assert (after.status, after.errors, after.worker_ids, after.attempts) == (status.READY, [], [], 0)
    assert val("select attempts_count from pgflow.step_tasks where run_id = %s", [uuid.UUID(result.id)]) == 1


@pytest.mark.parametrize(
    ("make_task", "requeued_count"),
    [(lambda: add, 0), (lambda: task(max_attempts=3)(retried), 3)],
    ids=["no-attempt-left", "requeued-3-times"],
)
def test_a_task_recovery_exhausts_is_failed_with_an_error_for_the_lost_attempt(
    make_task: Any, requeued_count: int
) -> None:
    """MAX_ATTEMPTS 1 (add), or requeued 3 times already: recovery fails the task. The lost attempt
    is reported as an error (the engine's reason) and its worker, so a FAILED result always has one."""
    result = make_task().enqueue(1, 2) if requeued_count == 0 else make_task().enqueue(1)
    lost = uuid.uuid4()
    _as_if_claimed_long_ago(result.id, lost, requeued_count=requeued_count)
    recovered = q("select * from pgflow.requeue_stalled_tasks()")
    assert {row["outcome"]: row["task_count"] for row in recovered}["permanently_stalled"] == 1
    failed = backend().get_result(result.id)
    assert failed.status == status.FAILED and failed.worker_ids == [str(lost)]
    assert [error.exception_class_path for error in failed.errors] == ["builtins.RuntimeError"]
    assert failed.errors[0].traceback.startswith("permanently stalled")
    with pytest.raises(ValueError, match="Task failed"):
        _ = failed.return_value


# -- run_after -------------------------------------------------------------------------------------


def test_run_after_delays_the_runs_message() -> None:
    run_after = timezone.now() + dt.timedelta(seconds=90)
    result = add.using(run_after=run_after).enqueue(1, 2)
    assert result.status == status.READY
    run_id = uuid.UUID(result.id)
    not_before = val("select not_before from pgflow.runs where run_id = %s", [run_id])
    assert run_after - dt.timedelta(seconds=1) <= not_before <= run_after + dt.timedelta(seconds=2)
    message = q1(
        "select m.vt, m.read_ct from pgflow.step_tasks as t "
        "join pgmq.q_default as m on m.msg_id = t.message_id where t.run_id = %s",
        [run_id],
    )
    assert message["vt"] >= run_after - dt.timedelta(seconds=1)
    assert message["read_ct"] == 0
    assert result.task.run_after == run_after


def test_run_after_in_the_past_runs_now() -> None:
    result = add.using(run_after=timezone.now() - dt.timedelta(hours=1)).enqueue(1, 2)
    run_id = uuid.UUID(result.id)
    vt = val(
        "select m.vt from pgflow.step_tasks as t join pgmq.q_default as m on m.msg_id = t.message_id "
        "where t.run_id = %s",
        [run_id],
    )
    assert vt <= timezone.now() + dt.timedelta(seconds=1)


def test_results_report_their_own_run_after() -> None:
    later = timezone.now() + dt.timedelta(minutes=5)
    delayed = add.using(run_after=later).enqueue(1, 2)
    now = add.enqueue(3, 4)
    assert now.task.run_after is None
    assert backend().get_result(now.id).task.run_after is None
    assert backend().get_result(delayed.id).task.run_after == later


# -- validate_task ---------------------------------------------------------------------------------


def test_a_function_that_is_not_module_level_is_refused() -> None:
    def local(x: int) -> int:
        return x

    with pytest.raises(InvalidTask, match="module level"):
        task()(local)


@pytest.mark.parametrize(
    ("queue", "problem"),
    [
        ("Mail", "lowercase letters, digits and underscores"),
        ("mail__bulk", "'__'"),
        ("q" * 48, "1..47 characters"),
        ("with-dash", "lowercase letters, digits and underscores"),
    ],
)
def test_a_queue_name_that_cannot_be_a_shared_queue_is_refused(queue: str, problem: str) -> None:
    open_queues = {
        "default": {"BACKEND": BACKEND, "QUEUES": ["default", "mail"]},
        "open": {"BACKEND": BACKEND, "QUEUES": []},
    }
    with override_settings(TASKS=open_queues):
        with pytest.raises(InvalidTask) as info:
            task(backend="open", queue_name=queue)(plain)
        message = str(info.value)
        assert f"queue_name {queue!r} of task {__name__}.plain" in message
        assert problem in message and "shared queue" in message
        accepted = task(backend="open", queue_name="any_queue")(plain)
        assert accepted.queue_name == "any_queue"


def test_a_queue_not_in_queues_is_refused() -> None:
    with pytest.raises(InvalidTask, match="nope"):
        add.using(queue_name="nope")


def test_a_naive_run_after_is_refused() -> None:
    with pytest.raises(InvalidTask, match="aware"):
        add.using(run_after=dt.datetime.now())


@pytest.mark.parametrize(
    ("keyword", "value", "minimum"),
    [
        ("max_attempts", 0, 1),
        ("max_attempts", True, 1),
        ("max_attempts", 1.5, 1),
        ("max_attempts", "3", 1),
        ("timeout", 0, 1),
        ("timeout", -1, 1),
        ("base_delay", -1, 0),
        ("base_delay", 0.5, 0),
    ],
)
def test_bad_retry_and_timeout_keywords_are_refused(keyword: str, value: object, minimum: int) -> None:
    with pytest.raises(InvalidTask) as info:
        task(**{keyword: value})(plain)
    assert str(info.value) == (
        f"{keyword} of task {__name__}.plain must be a whole number >= {minimum}, got {value!r}"
    )


def test_retry_and_timeout_keywords_reach_the_flow() -> None:
    configured = task(max_attempts=4, timeout=7, base_delay=0)(plain)
    assert (configured.max_attempts, configured.timeout, configured.base_delay) == (4, 7, 0)
    result = configured.enqueue(1)
    slug = task_flow_slug(f"{__name__}.plain", "default")
    step = q1(
        "select opt_max_attempts, opt_timeout, opt_base_delay from pgflow.steps "
        "where flow_slug = %s and step_slug = 'call'",
        [slug],
    )
    assert step == {"opt_max_attempts": 4, "opt_timeout": 7, "opt_base_delay": 0}
    flow = q1(
        "select opt_max_attempts, opt_timeout, opt_base_delay from pgflow.flows where flow_slug = %s", [slug]
    )
    assert flow == {"opt_max_attempts": 1, "opt_timeout": 30, "opt_base_delay": 1}  # testproject OPTIONS
    assert backend().get_result(result.id).task.max_attempts == 4


# -- OPTIONS ---------------------------------------------------------------------------------------


def test_options_defaults_and_case() -> None:
    plain_backend = PgflowTaskBackend("x", {"QUEUES": ["default"]})
    assert (plain_backend.max_attempts, plain_backend.base_delay, plain_backend.timeout) == (1, 1, 60)
    assert (plain_backend.modules, plain_backend.using) == ((), "default")
    custom = PgflowTaskBackend(
        "x",
        {
            "OPTIONS": {
                "max_attempts": 5,
                "BASE_DELAY": 0,
                "TIMEOUT": 9,
                "MODULES": ["a.b"],
                "DATABASE": "default",
            }
        },
    )
    assert (custom.max_attempts, custom.base_delay, custom.timeout, custom.modules) == (5, 0, 9, ("a.b",))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"RETRIES": 3}, "TASKS['x']['OPTIONS'] has unknown key(s) RETRIES; valid: MAX_ATTEMPTS"),
        ({"MAX_ATTEMPTS": 0}, "TASKS['x']['OPTIONS']['MAX_ATTEMPTS'] must be a whole number >= 1, got 0"),
        ({"MAX_ATTEMPTS": True}, "['MAX_ATTEMPTS'] must be a whole number >= 1, got True"),
        ({"MAX_ATTEMPTS": "3"}, "['MAX_ATTEMPTS'] must be a whole number >= 1, got '3'"),
        ({"BASE_DELAY": -1}, "['BASE_DELAY'] must be a whole number >= 0, got -1"),
        ({"TIMEOUT": 0}, "['TIMEOUT'] must be a whole number >= 1, got 0"),
        ({"TIMEOUT": 2.5}, "['TIMEOUT'] must be a whole number >= 1, got 2.5"),
        ({"MODULES": "myapp.jobs"}, "['MODULES'] must be a list of module names"),
        ({"MODULES": [1]}, "['MODULES'] must be a list of module names"),
    ],
)
def test_bad_options_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ImproperlyConfigured) as info:
        PgflowTaskBackend("x", {"QUEUES": ["default"], "OPTIONS": options})
    assert message in str(info.value)


@pytest.mark.parametrize("queue", ["Default", "a__b", "x" * 48, ""])
def test_a_configured_queue_that_cannot_be_a_shared_queue_is_refused(queue: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=r"TASKS\['x'\]\['QUEUES'\]: queue"):
        PgflowTaskBackend("x", {"QUEUES": ["default", queue]})


# -- flow slugs ------------------------------------------------------------------------------------

_segment = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,30}", fullmatch=True) | st.sampled_from(
    ["<locals>", "<lambda>", "Ünïcode", "9lives", "_", "__init__"]
)
module_paths = st.lists(_segment, min_size=1, max_size=8).map(".".join)
queues = st.from_regex(r"[a-z0-9]{1,10}(_[a-z0-9]{1,10}){0,3}", fullmatch=True)


@settings(max_examples=120, deadline=None)
@given(path=module_paths, queue=queues, other_queue=queues)
def test_task_flow_slug_is_a_valid_deterministic_slug_per_function_and_queue(
    path: str, queue: str, other_queue: str
) -> None:
    slug = task_flow_slug(path, queue)
    assert validate_flow_slug(slug) == slug
    assert len(slug) <= MAX_FLOW_SLUG_LENGTH
    assert task_flow_slug(path, queue) == slug
    if other_queue != queue:
        assert task_flow_slug(path, other_queue) != slug


@settings(max_examples=80, deadline=None)
@given(path=module_paths, data=st.data())
def test_module_paths_that_read_alike_get_different_slugs(path: str, data: st.DataObject) -> None:
    """``a.b_c``, ``a_b.c`` and ``A.b.c`` all read ``a_b_c``; the hash of the exact path separates them."""
    twin = "".join(
        data.draw(st.sampled_from([char, char.upper(), char.lower()])) if char.isalpha() else char
        for char in path
    ).replace(".", data.draw(st.sampled_from([".", "_", "__"])))
    if twin != path:
        assert task_flow_slug(twin, "default") != task_flow_slug(path, "default")


def test_task_flow_slug_examples() -> None:
    assert task_flow_slug("testproject.example.tasks.add", "default").startswith(
        "testproject_example_tasks_add_"
    )
    long = task_flow_slug("a" * 100 + ".f", "default")
    assert len(long) == MAX_FLOW_SLUG_LENGTH and long.startswith("a" * 38 + "_")
    assert task_flow_slug("9.x", "q").startswith("t_9_x_")
    assert task_flow_slug("...", "q").startswith("task_")
    assert val("select pgflow.is_valid_slug(%s)", [long]) is True


def test_results_report_the_queue_their_flow_runs_on() -> None:
    """A ``--tasks --queue default`` worker builds a flow for every task on its queue, ``mail`` tasks
    included; their results name the queue the run is on, not the task's declared queue."""
    flows = backend().worker_flows("default")
    slug = task_flow_slug("testproject.example.tasks.send_welcome", "default")
    assert slug in {flow.slug for flow in flows}
    compile_flow(next(flow for flow in flows if flow.slug == slug))
    run_id = start_flow(slug, {"task": "testproject.example.tasks.send_welcome", "args": ["x"], "kwargs": {}})
    result = backend().get_result(str(run_id))
    assert result.task.queue_name == "default"
    assert result.task.func is send_welcome.func


# -- what pgflow_worker --tasks runs ---------------------------------------------------------------


def test_task_flows_chooses_the_queue_or_says_why_it_cannot() -> None:
    from pgflow_django.worker.preflight import PreflightError
    from pgflow_django.worker.task_flows import task_flows

    queue, flows = task_flows(None)  # QUEUES default and mail: 'default'
    assert queue == "default"
    assert task_flow_slug("testproject.example.tasks.add", "default") in {flow.slug for flow in flows}
    assert task_flows("mail")[0] == "mail"
    with pytest.raises(PreflightError, match=r"^queue 'nope' is not in the QUEUES of any TASKS backend"):
        task_flows("nope")
    two = {"default": {"BACKEND": BACKEND, "QUEUES": ["mail", "bulk"]}}
    with override_settings(TASKS=two), pytest.raises(PreflightError) as info:
        task_flows(None)
    assert str(info.value) == "the task backends use several queues; choose --queue from: bulk, mail"
    unset = pytest.raises(PreflightError, match=r"settings\.TASKS is not configured")
    with override_settings(TASKS={}), unset:
        task_flows(None)
    dummy = {"default": {"BACKEND": f"{tasks_api.package.__name__}.backends.dummy.DummyBackend"}}
    with override_settings(TASKS=dummy), pytest.raises(PreflightError, match="no TASKS backend is pgflow"):
        task_flows(None)


# -- the step handler, in process ------------------------------------------------------------------


def not_a_number() -> float:
    return float("nan")


def test_an_output_json_cannot_hold_fails_the_attempt_before_task_finished() -> None:
    """NaN passes the framework's normalize_json but not the engine's JSON: the attempt fails, and
    task_finished reports FAILED (not SUCCESSFUL for a result that will never be)."""
    from types import SimpleNamespace

    from pgflow_django.tasks.handler import TaskHandler
    from pgflow_django.tasks.results import TaskFailure

    nan_task = task()(not_a_number)
    result = nan_task.enqueue()
    handler = TaskHandler(backend(), nan_task)
    with (
        captured(tasks_api.task_started) as started,
        captured(tasks_api.task_finished) as finished,
        pytest.raises(TaskFailure) as info,
    ):
        handler({"args": [], "kwargs": {}}, SimpleNamespace(run_id=uuid.UUID(result.id)))
    assert info.value.exception_class_path == "builtins.ValueError"
    assert info.value.pgflow_permanent, "no retry makes NaN storable"
    assert [item["status"] for item in started] == [status.RUNNING]
    assert [item["status"] for item in finished] == [status.FAILED]
    assert finished[0]["task_result"].errors[-1].exception_class_path == info.value.exception_class_path


def an_object() -> object:
    return object()


def undecodable_bytes() -> bytes:
    return b"\xff"


@pytest.mark.parametrize(
    ("function", "recorded"), [(an_object, "TypeError"), (undecodable_bytes, "ValueError")]
)
def test_a_return_value_the_framework_cannot_normalise_is_recorded_as_django_records_it(
    function: Any, recorded: str
) -> None:
    """The exception class Django's ImmediateBackend records for the same return value, not the
    engine's own class: code reading ``result.errors`` reads alike on both backends."""
    from types import SimpleNamespace

    from pgflow_django.tasks.handler import TaskHandler
    from pgflow_django.tasks.results import TaskFailure

    immediate = {"default": {"BACKEND": f"{tasks_api.package.__name__}.backends.immediate.ImmediateBackend"}}
    with override_settings(TASKS=immediate):
        by_django = task()(function).enqueue()
    assert [error.exception_class_path for error in by_django.errors] == [f"builtins.{recorded}"]

    ours = task()(function)
    result = ours.enqueue()
    with captured(tasks_api.task_finished) as finished, pytest.raises(TaskFailure) as info:
        TaskHandler(backend(), ours)({"args": [], "kwargs": {}}, SimpleNamespace(run_id=uuid.UUID(result.id)))
    assert info.value.exception_class_path == f"builtins.{recorded}"
    assert info.value.pgflow_permanent, "no retry changes a return value"
    assert finished[0]["task_result"].errors[-1].exception_class_path == f"builtins.{recorded}"
    assert info.value.traceback.rstrip().splitlines()[-1].startswith(f"{recorded}: output not encodable: ")


def test_the_examples_in_docs_django_tasks_md_hold() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "django-tasks.md").read_text(encoding="utf-8")
    slug = task_flow_slug("testproject.example.tasks.send_welcome", "mail")
    assert slug == "testproject_example_tasks_send_welcome_1a73f2f9" and f"`{slug}`" in doc
    open_queues = {"default": {"BACKEND": BACKEND, "QUEUES": []}}
    with override_settings(TASKS=open_queues), pytest.raises(InvalidTask) as info:
        task(queue_name="Mail")(plain)
    shown = str(info.value).replace(f"{__name__}.plain", "myapp.tasks.notify")
    assert " ".join(shown.split()) in " ".join(doc.split())
    with pytest.raises(InvalidTask) as info:
        task(max_attempts=0)(plain)
    assert str(info.value).replace(f"{__name__}.plain", "myapp.tasks.notify") in doc


def test_a_cancelled_run_is_failed_without_an_error() -> None:
    result = add.enqueue(1, 2)
    assert val("select pgflow.cancel_run(%s)", [uuid.UUID(result.id)]) == "cancelled"
    cancelled = backend().get_result(result.id)
    assert (cancelled.status, cancelled.errors, cancelled.worker_ids) == (status.FAILED, [], [])
    assert cancelled.finished_at is not None
