"""``manage.py pgflow_schedules`` (issue 17 item 5): the list with next/last fire, the last run's status
and pauses, at 80 columns; show; pause, resume and trigger on the real tables; JSON; one-line errors
with the closest name; exit codes as ``manage.py`` gives them."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterator

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.utils import timezone
from rich.console import Console

from pgflow_django.flows.compiler import compile_flow
from pgflow_django.management.commands import pgflow_schedules
from pgflow_django.schedules import create_schedule, get_schedule, pause_schedule
from pgflow_django.schedules.planner import plan_schedules
from tests.integration import commands_flows
from tests.integration.commands_support import call, drop_command_flows, manage_in_process, stderr_lines
from tests.sql import support
from tests.sql.schedules.support import every_minute, fire, ledger, minute

FLOW = "cmd_greet"


@pytest.fixture
def greet() -> None:
    compile_flow(commands_flows.greet)


def _fired(name: str) -> uuid.UUID:
    """A schedule of cmd_greet planned from T0 whose 12:01 tick fired (its run still started)."""
    every_minute(name, FLOW, input={"name": "ada"})
    fired = fire(minute(1))
    assert [(row[0], row[1]) for row in fired] == [(name, minute(1))]
    return fired[0][2]


def _render_at(width: int) -> list[str]:
    """The list as an operator's terminal of ``width`` columns shows it."""
    out = io.StringIO()
    command = pgflow_schedules.Command(stdout=out)
    command.console = lambda **_: Console(file=out, width=width, no_color=True, highlight=False)  # type: ignore[method-assign]
    command._list({"format": "text", "no_color": True})
    return out.getvalue().splitlines()


@pytest.mark.usefixtures("greet")
class TestList:
    def test_empty(self) -> None:
        out, _ = call("pgflow_schedules")
        assert "no schedules" in out

    def test_shows_next_and_last_fire_last_run_status_and_pauses(self) -> None:
        run_id = _fired("ops-hourly")
        create_schedule(FLOW, cron="30 2 * * *", name="ops-nightly", timezone="Europe/Paris")
        pause_schedule("ops-nightly", detail="vendor down")
        out, _ = call("pgflow_schedules")
        lines = out.splitlines()
        at = next(index for index, line in enumerate(lines) if "ops-hourly" in line)
        first, second = lines[at].split(), lines[at + 1].split()
        assert first[:3] == ["ops-hourly", "cmd_greet", "01-05"] and first[-1] == "started"
        assert first[3] == timezone.localtime().strftime("%m-%d"), "last fired (last_fired_at) today"
        assert second[:6] == ["*", "*", "*", "*", "*", "UTC"] and second[6] == "12:02:00"
        assert second[-1] == "active"
        assert "paused: vendor down" in out and "Europe/Paris" in out
        assert str(run_id) not in out, "the list shows the status, show gives the run ids"

    def test_fits_80_columns_with_long_names_and_notes(self) -> None:
        """Too wide for a table at 80 columns without cutting the name or the zone: one record per
        schedule, its entries wrapped between entries; at 140 columns, the table."""
        _fired("ops-reports.monthly-revenue-by-region-and-currency")
        create_schedule(
            FLOW, cron="*/15 8-18 * * 1-5", name="ops-b", timezone="America/Argentina/Buenos_Aires"
        )
        pause_schedule("ops-b", detail="waiting for the vendor to fix their rate limits, see ticket 4411")
        lines = _render_at(80)
        assert max(len(line) for line in lines) <= 80, "\n".join(lines)
        assert "ops-reports.monthly-revenue-by-region-and-currency" in lines
        assert any("time zone: America/Argentina/Buenos_Aires" in line for line in lines), lines
        assert any("cron: */15 8-18 * * 1-5" in line for line in lines), lines
        text = " ".join(line.strip() for line in lines)
        assert "state: paused: waiting for the vendor to fix their rate limits, see ticket 4411" in text
        wide = _render_at(140)
        assert max(len(line) for line in wide) <= 140
        assert wide[0].split() == ["name", "flow", "next", "last", "last", "run"]
        assert wide[1].split() == ["cron", "time", "zone", "fire", "fire", "state"]
        assert any("America/Argentina/Buenos_Aires" in line for line in wide), wide

    def test_user_text_is_escaped(self) -> None:
        create_schedule(FLOW, cron="0 * * * *", name="ops-esc")
        pause_schedule("ops-esc", detail="\x1b]0;owned\x07 \x1b[31mred")
        out, _ = call("pgflow_schedules")
        assert "\x1b" not in out and "\x07" not in out
        assert "\\x1b]0;owned\\x07" in out

    def test_json_carries_every_field_in_utc(self) -> None:
        run_id = _fired("ops-json")
        out, _ = call("pgflow_schedules", "--format", "json")
        (item,) = json.loads(out)
        assert item["name"] == "ops-json" and item["flow_slug"] == FLOW
        assert item["last_run_id"] == str(run_id) and item["last_run_status"] == "started"
        assert item["last_tick"] == minute(1).isoformat()
        assert item["next_fire_at"] == minute(2).isoformat()
        assert item["state"] == "active" and item["paused_reason"] is None
        assert item["input"] == {"name": "ada"} and item["origin"] == "runtime"

    def test_a_pruned_run_reads_pruned(self) -> None:
        run_id = _fired("ops-pruned")
        support.q("select pgflow.cancel_run(%s)", [run_id])
        support.q("delete from pgflow.step_tasks where run_id = %s", [run_id])
        support.q("delete from pgflow.step_states where run_id = %s", [run_id])
        support.q("delete from pgflow.runs where run_id = %s", [run_id])
        (item,) = json.loads(call("pgflow_schedules", "--format", "json")[0])
        assert item["last_run_status"] == "pruned"


@pytest.mark.usefixtures("greet")
class TestShow:
    def test_recent_ticks_with_their_runs_and_coming_fire_times(self) -> None:
        run_id = _fired("ops-show")
        out, _ = call("pgflow_schedules", "show", "ops-show")
        assert "schedule ops-show (runtime): active" in out
        assert str(run_id) in out and "cron" in out and "started" in out
        assert "01-05 12:02:00" in out, "the next planned tick"
        data = json.loads(call("pgflow_schedules", "show", "ops-show", "--format", "json")[0])
        assert data["recent_ticks"][0]["run_id"] == str(run_id)
        assert data["recent_ticks"][0]["run_status"] == "started"

    def test_next_fire_times_include_the_jitter(self) -> None:
        every_minute("ops-jitter", FLOW, jitter=30)
        view = get_schedule("ops-jitter")
        fires = [
            row["at"]
            for row in support.q(
                "select pgflow.schedule_fire_at('ops-jitter', u, 30) as at from unnest(%s::timestamptz[]) u "
                "order by 1 limit 5",
                [list(view.upcoming)],
            )
        ]
        assert fires != list(view.upcoming[:5]), "some tick is delayed by its jitter"
        out, _ = call("pgflow_schedules", "show", "ops-jitter")
        lines = out.splitlines()
        at = next(index for index, line in enumerate(lines) if line.strip().startswith("next"))
        shown = lines[at].split(None, 1)[1].strip()
        while shown.endswith(","):  # at 80 columns the fire times wrap between two of them
            at += 1
            shown += " " + lines[at].strip()
        assert shown == ", ".join(fire.strftime("%m-%d %H:%M:%S") for fire in fires)


@pytest.mark.usefixtures("greet")
def test_a_schedule_that_cannot_be_planned_says_why_and_the_others_list_normally() -> None:
    every_minute("ops-fine", FLOW)
    create_schedule(FLOW, cron="0 * * * *", name="ops-broken")
    support.q(
        "update pgflow.schedules set cron = '0 \x1b[31m * * *', upcoming = '{}', next_fire_at = null "
        "where schedule_name = 'ops-broken'"
    )
    with connection.cursor() as cursor:
        plan_schedules(cursor, now=minute(1))
    lines = _render_at(80)
    broken = next(index for index, line in enumerate(lines) if "ops-broken" in line)
    assert lines[broken + 1].split()[-1] == "active" and lines[broken + 2].split()[-1] == "plan"
    assert "cannot" in lines[broken + 2]
    assert sum("cannot" in line for line in lines) == 1, "only the broken one"
    out, _ = call("pgflow_schedules", "show", "ops-broken")
    (line,) = [line.rstrip() for line in out.splitlines() if line.strip().startswith("planning")]
    assert line == "  planning  failed: cron '0 \\x1b[31m * * *' is not valid: Bad hour"
    item = next(
        item
        for item in json.loads(call("pgflow_schedules", "--format", "json")[0])
        if item["name"] == "ops-broken"
    )
    assert item["plan_error"] == "cron '0 \\x1b[31m * * *' is not valid: Bad hour"
    assert item["plan_failed_at"] == minute(1).isoformat() and item["state"] == "active"


@pytest.mark.usefixtures("greet")
class TestActions:
    def test_pause_stores_the_reason_and_nothing_fires(self) -> None:
        every_minute("ops-pause", FLOW)
        out, _ = call("pgflow_schedules", "pause", "ops-pause", "--reason", "deploying v42")
        assert (
            out.strip()
            == "paused schedule ops-pause: it fires nothing until pgflow_schedules resume ops-pause"
        )
        view = get_schedule("ops-pause")
        assert (view.paused_reason, view.paused_detail) == ("operator", "deploying v42")
        assert fire(minute(3)) == [] and ledger("ops-pause") == []

    def test_pause_twice_keeps_the_first_pause(self) -> None:
        create_schedule(FLOW, cron="0 * * * *", name="ops-twice")
        call("pgflow_schedules", "pause", "ops-twice", "--reason", "first")
        out, _ = call("pgflow_schedules", "pause", "ops-twice", "--reason", "second")
        assert "already paused: first; kept it" in out
        assert get_schedule("ops-twice").paused_detail == "first"

    def test_resume(self) -> None:
        create_schedule(FLOW, cron="0 * * * *", name="ops-resume")
        pause_schedule("ops-resume")
        out, _ = call("pgflow_schedules", "resume", "ops-resume")
        assert out.startswith("resumed schedule ops-resume: next fire ")
        assert get_schedule("ops-resume").active
        again, _ = call("pgflow_schedules", "resume", "ops-resume")
        assert again.strip() == "schedule ops-resume is not paused; nothing changed"

    def test_trigger_starts_one_run_recorded_as_manual(self) -> None:
        create_schedule(FLOW, cron="0 0 1 1 *", name="ops-trigger", input={"name": "bob"})
        pause_schedule("ops-trigger")
        out, _ = call("pgflow_schedules", "trigger", "ops-trigger")
        run_id = uuid.UUID(out.strip().rsplit(" ", 1)[1])
        assert support.run(run_id)["input"] == {"name": "bob"}
        kinds = support.q(
            "select kind, run_id from pgflow.schedule_ticks where schedule_name = 'ops-trigger'"
        )
        assert [(row["kind"], row["run_id"]) for row in kinds] == [("manual", run_id)]

    def test_trigger_with_input(self) -> None:
        create_schedule(FLOW, cron="0 0 1 1 *", name="ops-input")
        out, _ = call(
            "pgflow_schedules", "trigger", "ops-input", "--input", '{"name": "cy"}', "--format", "json"
        )
        assert support.run(json.loads(out)["run_id"])["input"] == {"name": "cy"}


@pytest.mark.usefixtures("greet")
class TestErrors:
    def test_an_unknown_name_suggests_the_closest(self) -> None:
        create_schedule(FLOW, cron="0 * * * *", name="nightly-report")
        for action in ("show", "pause", "resume", "trigger"):
            with pytest.raises(CommandError) as caught:
                call("pgflow_schedules", action, "nightly-reprot")
            assert str(caught.value) == (
                "no schedule named 'nightly-reprot' (known schedules: nightly-report); "
                "did you mean 'nightly-report'?"
            )

    def test_resuming_a_schedule_removed_from_code_names_the_fix(self) -> None:
        create_schedule(FLOW, cron="0 * * * *", name="ops-removed")
        support.q(
            "update pgflow.schedules set origin = 'code', paused_reason = 'removed_from_code' "
            "where schedule_name = 'ops-removed'"
        )
        with pytest.raises(CommandError, match="removed from code: declare it again"):
            call("pgflow_schedules", "resume", "ops-removed")
        out, _ = call("pgflow_schedules", "pause", "ops-removed")
        assert out.strip() == (
            "schedule ops-removed was already removed from code; kept it (declare it again, or delete it)"
        )

    @pytest.mark.parametrize(
        ("argv", "message"),
        [
            (["pause"], "pause needs the schedule's NAME: pgflow_schedules pause NAME"),
            (["list", "x"], "list takes no NAME; to see one schedule: pgflow_schedules show x"),
            (["resume", "x", "--reason", "r"], "--reason only applies to pause"),
            (["pause", "x", "--input", "{}"], "--input only applies to trigger"),
        ],
    )
    def test_misplaced_arguments(self, argv: list[str], message: str) -> None:
        with pytest.raises(CommandError) as caught:
            call_command("pgflow_schedules", *argv, stdout=io.StringIO())
        assert str(caught.value) == message


@pytest.fixture
def committed_schedules(transactional_db: None) -> Iterator[None]:
    compile_flow(commands_flows.greet)
    yield
    support.q("delete from pgflow.schedules where schedule_name like 'ops-%'")
    drop_command_flows()


def test_lines_and_exit_codes(committed_schedules: None) -> None:
    create_schedule(FLOW, cron="0 * * * *", name="ops-sub", input={"name": "ada"})
    listed = manage_in_process("pgflow_schedules")
    assert listed.returncode == 0 and "ops-sub" in listed.stdout, listed.stderr
    paused = manage_in_process("pgflow_schedules", "pause", "ops-sub", "--reason", "maintenance")
    assert (paused.returncode, paused.stdout.strip()) == (
        0,
        "paused schedule ops-sub: it fires nothing until pgflow_schedules resume ops-sub",
    )
    triggered = manage_in_process("pgflow_schedules", "trigger", "ops-sub", "--format", "json")
    assert triggered.returncode == 0, triggered.stderr
    assert support.run(json.loads(triggered.stdout)["run_id"])["status"] == "started"
    assert manage_in_process("pgflow_schedules", "resume", "ops-sub").returncode == 0
    unknown = manage_in_process("pgflow_schedules", "pause", "ops-sbu")
    assert unknown.returncode == 1
    assert stderr_lines(unknown) == [
        "CommandError: no schedule named 'ops-sbu' (known schedules: ops-sub); did you mean 'ops-sub'?"
    ]
    bad = manage_in_process("pgflow_schedules", "stop", "ops-sub")
    assert bad.returncode == 2 and len(stderr_lines(bad)) == 1
    assert "invalid choice: 'stop'" in bad.stderr
    missing = manage_in_process("pgflow_schedules", "trigger")
    assert missing.returncode == 1
    assert stderr_lines(missing) == [
        "CommandError: trigger needs the schedule's NAME: pgflow_schedules trigger NAME"
    ]
    assert [row["kind"] for row in support.q("select kind from pgflow.schedule_ticks")] == ["manual"]
