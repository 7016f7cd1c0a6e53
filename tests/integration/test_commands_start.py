"""``pgflow_start``: starting runs, input sources and errors; ``--wait`` against a real worker process."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management.base import CommandError
from django.db import connection

from pgflow_django import Flow
from pgflow_django.flows.compiler import compile_flow
from tests import workers
from tests.integration import commands_flows
from tests.integration.commands_support import (
    SETTINGS_ENV,
    call,
    drop_command_flows,
    manage_in_process,
    run_status,
    stderr_lines,
)
from tests.support.db import scalar

compiled_elsewhere = Flow("cmd_compiled_elsewhere", max_attempts=1, timeout=5)


@compiled_elsewhere.step()
def only(flow_input: Any) -> Any:
    return flow_input


@pytest.fixture
def compiled(settings: Any) -> None:
    settings.PGFLOW = {"FLOWS": list(commands_flows.REGISTERED)}
    for flow in (commands_flows.greet, commands_flows.squares, commands_flows.boom):
        compile_flow(flow)


@pytest.mark.usefixtures("compiled")
class TestStart:
    def test_prints_the_run_id(self) -> None:
        out, _ = call("pgflow_start", "cmd_greet", "--input", '{"name": "ada"}')
        run_id = uuid.UUID(out.strip())
        assert run_status(run_id) == "started"
        stored = scalar("select input::text from pgflow.runs where run_id = %s", [run_id])
        assert json.loads(stored) == {"name": "ada"}

    def test_chosen_run_id_and_json_output(self) -> None:
        chosen = uuid.uuid4()
        out, _ = call(
            "pgflow_start", "cmd_greet", "--input", "{}", "--run-id", str(chosen), "--format", "json"
        )
        assert json.loads(out) == {"run_id": str(chosen), "flow_slug": "cmd_greet", "status": "started"}
        assert run_status(chosen) == "started"

    def test_a_run_id_that_is_taken(self) -> None:
        chosen = str(uuid.uuid4())
        call("pgflow_start", "cmd_greet", "--input", "{}", "--run-id", chosen)
        out, _ = call("pgflow_start", "cmd_greet", "--input", "{}", "--run-id", chosen)
        assert out.strip() == chosen, "the same start again is the same run"
        with pytest.raises(CommandError, match=rf"^run id {chosen} already names a run with another input"):
            call("pgflow_start", "cmd_greet", "--input", '{"name": "bob"}', "--run-id", chosen)

    def test_an_idempotency_key_prints_the_first_run_again(self) -> None:
        first, _ = call("pgflow_start", "cmd_greet", "--input", "{}", "--idempotency-key", "order-1")
        again, _ = call("pgflow_start", "cmd_greet", "--input", "{}", "--idempotency-key", "order-1")
        assert again == first
        assert scalar("select count(*) from pgflow.runs where flow_slug = 'cmd_greet'") == 1

    @pytest.mark.parametrize(
        ("key", "reason"),
        [
            ("", "must be a non-empty string without NUL, got ''"),
            ("\udcff", r"is not valid UTF-8 text (it holds a lone surrogate, \udcff); pass plain text"),
        ],
        ids=["empty", "lone surrogate"],
    )
    def test_a_bad_idempotency_key_is_a_command_error(self, key: str, reason: str) -> None:
        with pytest.raises(CommandError) as caught:
            call("pgflow_start", "cmd_greet", "--input", "{}", "--idempotency-key", key)
        assert str(caught.value) == f"Error: argument --idempotency-key: {reason}"
        assert scalar("select count(*) from pgflow.runs where flow_slug = 'cmd_greet'") == 0

    def test_a_key_of_bytes_that_are_not_utf8_is_one_line_and_exit_2(self) -> None:
        # the command line's byte 0xff arrives as the lone surrogate \udcff (PEP 383)
        result = manage_in_process(
            "pgflow_start", "cmd_greet", "--input", "{}", "--idempotency-key", "k\udcff"
        )
        assert result.returncode == 2
        assert stderr_lines(result) == [
            "manage.py pgflow_start: error: argument --idempotency-key: is not valid UTF-8 text (it holds a "
            r"lone surrogate, \udcff); pass plain text (see --help)"
        ]
        assert scalar("select count(*) from pgflow.runs where flow_slug = 'cmd_greet'") == 0

    def test_a_priority_is_the_runs(self) -> None:
        out, _ = call("pgflow_start", "cmd_greet", "--input", "{}", "--priority", "-12")
        assert scalar("select priority from pgflow.runs where run_id = %s", [out.strip()]) == -12
        assert (
            scalar(
                "select headers->>'priority' from pgmq.q_cmd_greet where message->>'run_id' = %s",
                [out.strip()],
            )
            == "-12"
        )

    @pytest.mark.parametrize("value", ["101", "-101", "high", "1.5", ""])
    def test_a_bad_priority_is_one_line_and_exit_2(self, value: str) -> None:
        result = manage_in_process("pgflow_start", "cmd_greet", "--input", "{}", "--priority", value)
        assert result.returncode == 2
        lines = stderr_lines(result)
        assert "must be a whole number from -100 to 100 (higher is claimed first)" in lines[-1]
        assert "Traceback" not in result.stderr

    def test_input_from_a_file(self, tmp_path: Path) -> None:
        path = tmp_path / "input.json"
        path.write_text('{"name": "file"}')
        out, _ = call("pgflow_start", "cmd_greet", "--input", f"@{path}")
        assert json.loads(scalar("select input::text from pgflow.runs where run_id = %s", [out.strip()])) == {
            "name": "file"
        }

    def test_input_from_standard_input(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr("sys.stdin", io.StringIO("[1, 2, 3]"))
        out, _ = call("pgflow_start", "cmd_squares", "--input", "-")
        assert scalar("select count(*) from pgflow.step_tasks where run_id = %s", [out.strip()]) == 3

    def test_invalid_json(self) -> None:
        with pytest.raises(CommandError, match="--input is not valid JSON"):
            call("pgflow_start", "cmd_greet", "--input", "{oops")

    def test_missing_input_file(self, tmp_path: Path) -> None:
        with pytest.raises(CommandError, match="cannot read"):
            call("pgflow_start", "cmd_greet", "--input", f"@{tmp_path / 'absent.json'}")

    def test_root_map_needs_an_array(self) -> None:
        with pytest.raises(CommandError, match="must be a JSON array"):
            call("pgflow_start", "cmd_squares", "--input", '{"n": 1}')

    def test_unknown_flow_lists_the_known_ones_with_the_closest_match(self) -> None:
        with pytest.raises(CommandError) as caught:
            call("pgflow_start", "cmd_gret", "--input", "{}")
        message = str(caught.value)
        assert message.startswith("no flow 'cmd_gret' (known flows: cmd_boom, cmd_greet, cmd_squares")
        assert message.endswith("; did you mean 'cmd_greet'?")
        assert "compile it first" not in message and "\n" not in message

    def test_a_registered_flow_not_yet_compiled_says_how_to_compile_it(self) -> None:
        drop_command_flows()  # rolled back after the test
        with pytest.raises(CommandError, match=r"^flow 'cmd_greet' is registered but not compiled in this"):
            call("pgflow_start", "cmd_greet", "--input", "{}")

    @pytest.mark.parametrize(
        ("content", "reason"),
        [
            ("[" + "9" * 5000 + "]", "cannot be read: Exceeds the limit (4300 digits)"),
            ("[" * 100_000 + "]" * 100_000, "is nested too deeply to read"),
            ("{oops", "is not valid JSON"),
        ],
        ids=["5000-digit integer", "deep nesting", "malformed"],
    )
    def test_unreadable_input_files_are_one_line_and_exit_2(
        self, tmp_path: Path, content: str, reason: str
    ) -> None:
        path = tmp_path / "input.json"
        path.write_text(content)
        runs = scalar("select count(*) from pgflow.runs")
        with pytest.raises(CommandError) as caught:
            call("pgflow_start", "cmd_greet", "--input", f"@{path}")
        assert caught.value.returncode == 2
        assert str(caught.value).startswith(f"{path} {reason}")
        assert "\n" not in str(caught.value)
        assert scalar("select count(*) from pgflow.runs") == runs

    def test_invalid_slug(self) -> None:
        with pytest.raises(CommandError, match="flow slug 'no way'"):
            call("pgflow_start", "no way", "--input", "{}")

    def test_timeout_needs_wait(self) -> None:
        with pytest.raises(CommandError, match="--timeout only applies with --wait"):
            call("pgflow_start", "cmd_greet", "--input", "{}", "--timeout", "1")

    def test_wait_times_out_with_exit_code_3(self) -> None:
        with pytest.raises(CommandError, match=r"is still started after .*; it keeps running") as info:
            call("pgflow_start", "cmd_greet", "--input", "{}", "--wait", "--timeout", "0.3")
        assert info.value.returncode == 3


WAITED_FLOWS = ("cmd_greet", "--flow", "cmd_squares", "--flow", "cmd_boom")
"""The flows the ``--wait`` tests start, all served by one worker."""


@pytest.fixture(scope="module")
def command_workers(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[workers.Spawner]:
    """Real workers that know the command tests' flows, shared by the module: the tests check the
    command's output once a worker has finished the run, not the worker."""
    with django_db_blocker.unblock():
        url = workers.url_from_settings(connection.settings_dict)
        drop_command_flows()
    spawner = workers.Spawner(url, tmp_path_factory.mktemp("command-workers"))
    yield spawner
    spawner.stop_all()
    with django_db_blocker.unblock():
        drop_command_flows()


@pytest.fixture
def command_worker(database_url: str, command_workers: workers.Spawner) -> Iterator[workers.WorkerProcess]:
    """The module's worker of the waited flows, started on first use; finished runs pruned after."""
    with pytest.MonkeyPatch.context() as patch:
        for key, value in SETTINGS_ENV.items():
            patch.setenv(key, value)
        worker = command_workers.reused(*WAITED_FLOWS)
    yield worker
    scalar("select pgflow.prune_data_older_than('0')")


def test_wait_shows_the_output_of_a_completed_run(command_worker: workers.WorkerProcess) -> None:
    result = manage_in_process(
        "pgflow_start", "cmd_greet", "--input", '{"name": "ada"}', "--wait", "--timeout", "60"
    )
    assert result.returncode == 0, result.stderr
    assert "completed" in result.stdout
    assert '"shout": "HELLO ADA"' in result.stdout
    assert result.stderr.strip() == ""


def test_wait_json_output(command_worker: workers.WorkerProcess) -> None:
    result = manage_in_process(
        "pgflow_start",
        "cmd_squares",
        "--input",
        "[2, 3]",
        "--wait",
        "--timeout",
        "60",
        "--format",
        "json",
    )
    assert result.returncode == 0, result.stderr
    view = json.loads(result.stdout)
    assert view["status"] == "completed"
    assert view["output"] == {"square": [4, 9]}
    assert view["steps"][0]["tasks_total"] == 2


def test_wait_exits_1_when_the_run_fails(command_worker: workers.WorkerProcess) -> None:
    result = manage_in_process("pgflow_start", "cmd_boom", "--input", "{}", "--wait", "--timeout", "60")
    assert result.returncode == 1
    lines = stderr_lines(result)
    assert len(lines) == 1
    assert lines[0].startswith("CommandError: run ")
    assert "failed" in lines[0] and "boom on purpose" in lines[0]
    assert "explode" in result.stdout


@pytest.mark.django_db(transaction=True)
def test_flows_compiled_but_not_registered_are_listed_too() -> None:
    """A command runs in autocommit, so after the refused start it can read the compiled flows."""
    compile_flow(compiled_elsewhere)
    try:
        with pytest.raises(
            CommandError, match=r"cmd_compiled_elsewhere.*did you mean 'cmd_compiled_elsewhere'\?$"
        ):
            call("pgflow_start", "cmd_compiled_elswhere", "--input", "{}")
    finally:
        scalar("select pgflow.delete_flow_and_data('cmd_compiled_elsewhere')")
