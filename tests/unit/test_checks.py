"""System checks on flow definitions: each id shown firing and not firing (no database)."""

from __future__ import annotations

from django.core.checks import CheckMessage, Error, run_checks
from django.test import override_settings

MODULE = "tests.unit.checks_flows"


def pgflow_messages(*paths: str) -> list[CheckMessage]:
    with override_settings(PGFLOW={"FLOWS": list(paths)}):
        # databases=[]: static checks only (Django 6 passes every alias to the checks when it is None)
        return [
            message
            for message in run_checks(tags=["pgflow"], databases=[])
            if message.id.startswith("pgflow.")
        ]


def ids(*paths: str) -> list[str]:
    return [message.id for message in pgflow_messages(*paths)]


def only(message_id: str, *paths: str) -> CheckMessage:
    found = [message for message in pgflow_messages(*paths) if message.id == message_id]
    assert len(found) == 1, found
    return found[0]


def test_valid_flows_pass() -> None:
    assert ids(f"{MODULE}.good") == []


def test_the_check_command_passes_for_the_example_project() -> None:
    assert [message.id for message in run_checks() if message.id.startswith("pgflow.")] == []


def test_same_flow_through_two_paths_is_no_finding() -> None:
    assert ids(f"{MODULE}.good", f"{MODULE}.good") == []


def test_unloadable_flows_are_an_error_not_an_exception() -> None:
    message = only("pgflow.E001", "tests.unit.registry_flows_broken")
    assert isinstance(message, Error)
    assert "no_such_dependency_for_registry_tests" in message.msg
    assert message.hint
    assert ids("tests.unit.no_such_module") == ["pgflow.E001"]


def test_invalid_flow_slug() -> None:
    message = only("pgflow.E002", f"{MODULE}.bad_flow_slug")
    assert "'checks__bad'" in message.msg and "'__'" in message.msg
    assert message.hint and "rename the flow" in message.hint
    assert "pgflow.E002" not in ids(f"{MODULE}.good")


def test_invalid_step_slug() -> None:
    message = only("pgflow.E003", f"{MODULE}.bad_step_slug")
    assert "'_bad_step'" in message.msg and "checks_bad_step_slug" in message.msg
    assert message.hint
    assert "pgflow.E003" not in ids(f"{MODULE}.good")


def test_queue_name_over_47_characters() -> None:
    message = only("pgflow.E004", f"{MODULE}.long_queue")
    assert "52 characters" in message.msg and "47" in message.msg
    assert message.hint
    assert ids(f"{MODULE}.good", f"{MODULE}.long_queue") == ["pgflow.E004"]


def test_flow_slugs_differing_only_in_case() -> None:
    message = only("pgflow.E005", f"{MODULE}.good", f"{MODULE}.good_in_capitals")
    assert "'checks_good'" in message.msg and "'Checks_Good'" in message.msg
    assert message.hint
    assert ids(f"{MODULE}.good_in_capitals") == []


def test_step_slugs_differing_only_in_case() -> None:
    message = only("pgflow.E006", f"{MODULE}.case_steps")
    assert "'load'" in message.msg and "'Load'" in message.msg
    assert message.hint


def test_one_slug_registered_twice_by_different_flows() -> None:
    message = only("pgflow.E007", f"{MODULE}.good", f"{MODULE}.good_again")
    assert "'checks_good'" in message.msg
    assert f"{MODULE}.good_again" in message.msg
    assert message.hint and "flow.copy" in message.hint


def test_database_checks_do_not_run_without_database() -> None:
    with override_settings(PGFLOW={"FLOWS": [f"{MODULE}.good"]}):
        messages = run_checks(tags=["database"], databases=[])
    assert [message.id for message in messages if message.id.startswith("pgflow.")] == []


def test_pgflow_commands_do_not_run_the_system_checks_first() -> None:
    """Their one-line errors stay theirs; a finding about one flow must not block pgflow_runs."""
    from django.core.management import get_commands, load_command_class

    names = [name for name, app in get_commands().items() if app == "pgflow_django"]
    assert "pgflow_runs" in names
    for name in names:
        assert load_command_class("pgflow_django", name).requires_system_checks == [], name
