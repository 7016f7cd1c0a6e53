"""The upgrade audit on a database of the baseline release (0002): what each check reports, that it stays
bounded and read-only, and that the preflight locks before it inspects.

A scratch database gets PGMQ and the frozen 0002 delta only, so these tests also prove the audit needs
nothing 0003 adds. Each test works inside a transaction that is rolled back.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from django.db import connection
from psycopg import errors

from pgflow_django.db import upgrade
from pgflow_django.db.upgrade import UpgradeBlocked, format_report, load_audit_checks, preflight, run_audit
from tests.migration import upgrade_support as fx

pytestmark = pytest.mark.django_db

CHECKS = [
    "case_alias_queues",
    "missing_queue_objects",
    "duplicate_message_identities",
    "unmatched_active_messages",
    "flows_without_default_queue",
    "queue_names_of_another_flow",
    "invalid_flow_slugs",
    "invalid_step_slugs",
    "case_duplicate_flow_slugs",
    "case_duplicate_step_slugs",
]


@pytest.fixture(scope="module")
def baseline(django_db_setup: None, django_db_blocker: Any) -> Iterator[psycopg.Connection[Any]]:
    with django_db_blocker.unblock():
        params = fx.server_params()
    with fx.scratch_database(params) as conn:
        yield conn


@pytest.fixture
def cursor(baseline: psycopg.Connection[Any]) -> Iterator[psycopg.Cursor[Any]]:
    """A cursor in a transaction that is rolled back after the test."""
    with baseline.transaction(force_rollback=True), baseline.cursor() as cur:
        yield cur


def failing(findings: list[upgrade.Finding]) -> dict[str, upgrade.Finding]:
    return {finding.check: finding for finding in findings if not finding.ok}


def test_the_shipped_file_holds_the_agreed_checks_in_order() -> None:
    checks = load_audit_checks()
    assert [check.name for check in checks] == CHECKS
    for check in checks:
        assert check.description, f"{check.name} has no description"
        assert check.sql.lower().startswith(("select", "with"))


def test_the_audit_uses_only_objects_of_the_baseline_release() -> None:
    """Outside its string literals (the hints), the SQL names only 0002 tables and pgmq.meta."""
    text = "\n".join(upgrade._strip_literals(check.sql) for check in load_audit_checks())
    pgflow_objects = set(re.findall(r"\bpgflow\.(\w+)", text))
    assert pgflow_objects <= {"flows", "steps", "step_tasks"}
    assert set(re.findall(r"\bpgmq\.(\w+)", text)) == {"meta"}


def test_a_file_that_breaks_the_format_is_refused() -> None:
    with pytest.raises(upgrade.AuditFileError, match="no '-- check"):
        load_audit_checks("select 1")
    with pytest.raises(upgrade.AuditFileError, match="repeated"):
        load_audit_checks("-- check: a\nselect 1;\n-- check: a\nselect 2;\n")
    with pytest.raises(upgrade.AuditFileError, match="exactly one SELECT"):
        load_audit_checks("-- check: a\nselect 1; delete from pgflow.flows;\n")


def test_baseline_data_passes_every_check(cursor: psycopg.Cursor[Any]) -> None:
    fx.load_normal(cursor)
    findings = run_audit(cursor)
    assert [finding.check for finding in findings] == CHECKS
    assert failing(findings) == {}
    assert "all 10 checks passed" in format_report(findings)


def test_the_audit_runs_in_a_read_only_transaction(baseline: psycopg.Connection[Any]) -> None:
    seen: list[tuple[str, int, int]] = []
    with baseline.transaction(force_rollback=True), baseline.cursor() as cur:
        cur.execute("set transaction read only")
        findings = run_audit(
            cur, progress=lambda check, index, total: seen.append((check.name, index, total))
        )
    assert failing(findings) == {}
    assert seen == [(name, index, len(CHECKS)) for index, name in enumerate(CHECKS)]


@pytest.mark.parametrize("hazard", fx.HAZARDS, ids=lambda hazard: hazard.name)
def test_each_hazard_is_reported_and_its_repair_clears_it(
    cursor: psycopg.Cursor[Any], hazard: fx.Hazard
) -> None:
    fx.load_normal(cursor)
    hazard.load(cursor)
    found = failing(run_audit(cursor))
    assert set(found) == hazard.checks
    for finding in found.values():
        assert finding.problem_count >= 1
        assert 1 <= len(finding.samples) <= 5
        assert finding.hint
        assert all(isinstance(sample, dict) for sample in finding.samples)
    hazard.repair(cursor)
    assert failing(run_audit(cursor)) == {}


def test_samples_show_the_keys_that_need_repair(cursor: psycopg.Cursor[Any]) -> None:
    fx.load_normal(cursor)
    for hazard in fx.HAZARDS:
        hazard.load(cursor)
    found = failing(run_audit(cursor))
    assert set(found) == set(CHECKS)
    assert found["case_alias_queues"].samples == [
        {"queue_name": "upg_orders", "spellings": ["UPG_ORDERS", "upg_orders"], "flow_slug": "upg_orders"}
    ]
    assert "delete from pgmq.meta where queue_name = 'UPG_ORDERS'" in found["case_alias_queues"].hint
    assert found["missing_queue_objects"].samples == [
        {"queue_name": "upg_loose", "missing": ["archive table pgmq.a_upg_loose"]}
    ]
    assert found["duplicate_message_identities"].samples == [
        {"queue_name": "upg_dup", "message_id": "1", "tasks": 2}
    ]
    (unmatched,) = found["unmatched_active_messages"].samples
    assert unmatched["queue_name"] == "upg_orders" and isinstance(unmatched["message_id"], str)
    assert (
        f"pgmq.archive('upg_orders', {unmatched['message_id']}::bigint)"
        in found["unmatched_active_messages"].hint
    )
    assert {
        sample["flow_slug"]: sample["problem"] for sample in found["flows_without_default_queue"].samples
    } == {
        "upg_gone": "no PGMQ queue named upg_gone",
        "upg_orders": "ambiguous queue: UPG_ORDERS, upg_orders",
    }
    assert found["queue_names_of_another_flow"].samples == [
        {"queue_name": "upgcase", "flow_slugs": ["UpgCase", "upgcase"]}
    ]
    assert found["invalid_flow_slugs"].samples == [
        {"flow_slug": "upg_legacy_", "reason": "trailing underscore"}
    ]
    assert {sample["step_slug"]: sample["reason"] for sample in found["invalid_step_slugs"].samples} == {
        "_first": "leading underscore",
        "a__b": "double underscore",
    }
    assert found["case_duplicate_flow_slugs"].samples == [{"flow_slugs": ["UpgCase", "upgcase"]}]
    assert found["case_duplicate_step_slugs"].samples == [
        {"flow_slug": "upg_steps", "step_slugs": ["Charge", "charge"]}
    ]


def test_counts_are_complete_and_samples_bounded(cursor: psycopg.Cursor[Any]) -> None:
    for number in range(7):
        fx.create_flow(cursor, f"upg_bad{number}_", ("x", [], "single"))
    for _ in range(8):
        cursor.execute("select pgmq.send('upg_bad0_', %s::jsonb)", [fx.body("upg_bad0_", "x")])
    findings = run_audit(cursor)
    found = failing(findings)
    assert set(found) == {"invalid_flow_slugs", "unmatched_active_messages"}
    assert found["invalid_flow_slugs"].problem_count == 7
    assert [sample["flow_slug"] for sample in found["invalid_flow_slugs"].samples] == [
        f"upg_bad{number}_" for number in range(5)
    ]
    assert found["unmatched_active_messages"].problem_count == 8
    assert [sample["message_id"] for sample in found["unmatched_active_messages"].samples] == [
        str(number) for number in range(1, 6)
    ]
    report = format_report(findings)
    assert "invalid_flow_slugs: 7 problem(s)" in report
    assert "... and 2 more" in report and "... and 3 more" in report
    assert report.count("repair: ") == 2


def test_message_ids_above_2_53_stay_exact_strings(cursor: psycopg.Cursor[Any]) -> None:
    fx.load_normal(cursor)
    big = 2**53 + 11
    cursor.execute("select setval('pgmq.q_upg_orders_msg_id_seq', %s)", [big - 1])
    fx._unmatched_message(cursor)
    (finding,) = failing(run_audit(cursor)).values()
    assert finding.samples == [{"queue_name": "upg_orders", "message_id": str(big)}]
    assert json.loads(json.dumps(finding.as_dict()))["samples"][0]["message_id"] == "9007199254741003"


def test_a_case_collision_between_flows_counts_duplicates_across_both(cursor: psycopg.Cursor[Any]) -> None:
    fx._case_duplicate_flows(cursor)
    for slug in ("UpgCase", "upgcase"):
        fx.start(cursor, slug, {})
    cursor.execute("update pgflow.step_tasks set message_id = 1 where lower(flow_slug) = 'upgcase'")
    found = failing(run_audit(cursor))
    assert found["duplicate_message_identities"].samples == [
        {"queue_name": "upgcase", "message_id": "1", "tasks": 2}
    ]


# ------------------------------------------------------------------ the preflight


def test_preflight_blocks_with_one_report_and_changes_nothing(baseline: psycopg.Connection[Any]) -> None:
    with baseline.cursor() as cur:
        fx.load_normal(cur)
        for hazard in fx.HAZARDS:
            hazard.load(cur)
        try:
            before = fx.state(cur)
            with pytest.raises(UpgradeBlocked) as blocked, baseline.transaction():
                preflight(cur, lock_timeout=5)
            assert fx.state(cur) == before
            report = str(blocked.value)
            assert report.startswith("pgflow migration 0003 stopped before changing anything")
            for name in CHECKS:
                assert f"\n{name}: " in report
            assert {finding.check for finding in blocked.value.findings if not finding.ok} == set(CHECKS)
            for hazard in fx.HAZARDS:
                hazard.repair(cur)
            with baseline.transaction(force_rollback=True):
                assert all(finding.ok for finding in preflight(cur, lock_timeout=5))
        finally:
            fx.purge(cur)


def test_preflight_refuses_to_run_outside_a_transaction(baseline: psycopg.Connection[Any]) -> None:
    with baseline.cursor() as cur, pytest.raises(RuntimeError, match="inside the migration's transaction"):
        preflight(cur, lock_timeout=5)


def test_preflight_holds_the_migration_lock_and_table_locks(baseline: psycopg.Connection[Any]) -> None:
    with baseline.transaction(force_rollback=True), baseline.cursor() as cur:
        preflight(cur, lock_timeout=5)
        locks = fx.rows(
            cur,
            "select coalesce(relation::regclass::text, 'advisory'), mode from pg_locks"
            " where pid = pg_backend_pid() and granted and (locktype = 'advisory' or relation in ("
            "'pgflow.flows'::regclass, 'pgflow.step_tasks'::regclass, 'pgflow.workers'::regclass,"
            " 'pgmq.meta'::regclass)) and mode in ('ExclusiveLock', 'ShareRowExclusiveLock', 'ShareLock')",
        )
        assert cur.execute("show lock_timeout").fetchone() == ("5s",)
    assert set(locks) == {
        ("advisory", "ExclusiveLock"),
        ("pgflow.flows", "ShareRowExclusiveLock"),
        ("pgflow.step_tasks", "ShareRowExclusiveLock"),
        ("pgflow.workers", "ShareRowExclusiveLock"),
        ("pgmq.meta", "ShareLock"),
    }


@pytest.mark.parametrize(
    "holder",
    [
        "select pg_advisory_xact_lock_shared(hashtextextended('pgflow:migrate', 0))",
        "lock table pgflow.step_tasks in row exclusive mode",
        "lock table pgmq.meta in row exclusive mode",
    ],
    ids=["compiling", "writing_tasks", "creating_a_queue"],
)
def test_a_lock_wait_ends_at_the_lock_timeout(baseline: psycopg.Connection[Any], holder: str) -> None:
    """A compilation (shared migration lock), a worker's write or a queue being created blocks the
    preflight only until the lock timeout: the migration fails instead of queueing every writer."""
    params = {**fx.server_params(), "dbname": baseline.info.dbname}
    with psycopg.connect(**params) as other:
        other.execute(holder)
        started = time.monotonic()
        with pytest.raises(errors.LockNotAvailable), baseline.transaction(), baseline.cursor() as cur:
            preflight(cur, lock_timeout=timedelta(milliseconds=300))
        assert time.monotonic() - started < 5
        other.rollback()


def test_the_lock_timeout_defaults_to_pgmigrate_setting(
    baseline: psycopg.Connection[Any], settings: Any
) -> None:
    settings.PGMIGRATE_LOCK_TIMEOUT = timedelta(milliseconds=1500)
    with baseline.transaction(force_rollback=True), baseline.cursor() as cur:
        preflight(cur)
        assert cur.execute("show lock_timeout").fetchone() == ("1500ms",)
    settings.PGMIGRATE_LOCK_TIMEOUT = "10s"
    with (
        pytest.raises(TypeError, match="number of seconds or a timedelta"),
        baseline.transaction(force_rollback=True),
        baseline.cursor() as cur,
    ):
        preflight(cur)


def test_the_audit_runs_on_the_migrated_test_database() -> None:
    """After the upgrade the same file still runs (as a health report) and finds an unmatched message.

    Runs in the test's own transaction, rolled back afterwards."""
    with connection.cursor() as cur:
        assert failing(run_audit(cur)) == {}
        cur.execute("select pgflow.create_flow('upg_after')")
        cur.execute("select pgflow.add_step('upg_after', 'only')")
        cur.execute("select pgmq.send('upg_after', %s::jsonb)", [fx.body("upg_after", "only")])
        found = failing(run_audit(cur))
    assert set(found) == {"unmatched_active_messages"}
