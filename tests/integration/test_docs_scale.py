"""docs/operations.md, "PgBouncer" and "Several databases": the settings example is valid and does
what the page says, and every command line of the example parses with the options it shows."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from django.core.management import load_command_class
from django.test import override_settings

from pgflow_django.conf import get_settings
from pgflow_django.db.connect import connection_params, listen_params

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def block_after(heading: str, language: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index(f"\n## {heading}\n")
    found = re.search(rf"```{language}\n(.*?)```", text[start:], re.DOTALL)
    assert found is not None, heading
    return found.group(1)


def test_the_pgbouncer_settings_example_pools_and_listens_directly() -> None:
    namespace: dict[str, Any] = {}
    exec(block_after("PgBouncer", "python"), namespace)
    databases, pgflow = namespace["DATABASES"], namespace["PGFLOW"]
    with override_settings(PGFLOW=pgflow):
        conf = get_settings()
    assert conf.pooler == "transaction"
    assert conf.listen_database in databases
    assert databases["default"]["DISABLE_SERVER_SIDE_CURSORS"] is True


@pytest.mark.parametrize("pooler", [None, "transaction"])
def test_only_a_transaction_pooler_turns_prepared_statements_off(pooler: str | None) -> None:
    params = connection_params("default", pooler)
    assert ("prepare_threshold" in params and params["prepare_threshold"] is None) == (pooler is not None)


def test_listen_goes_to_the_url_then_the_alias_then_nowhere_behind_a_pooler() -> None:
    own = connection_params("default", "transaction")
    url = "postgresql://postgres@db.internal:5432/app"
    assert listen_params(own, "transaction", "default", url)["host"] == "db.internal"
    assert listen_params(own, "transaction", "default", None) == connection_params("default")
    assert listen_params(own, "transaction", None, None) is None
    assert listen_params(own, None, None, None) is own
    with pytest.raises(ValueError, match="--listen-url is not a libpq connection string"):
        listen_params(own, None, None, "postgresql://[broken")


def test_an_unknown_listen_database_is_one_line() -> None:
    with pytest.raises(ValueError, match="unknown database alias 'nope'; DATABASES has: default"):
        listen_params({}, "transaction", "nope", None)


def test_each_command_of_the_several_databases_example_parses() -> None:
    lines = [line for line in block_after("Several databases", "sh").splitlines() if line.strip()]
    assert len(lines) >= 4
    for line in lines:
        words = shlex.split(line)
        assert words[0] == "manage.py"
        assert "--database" in words, line
        if not words[1].startswith("pgflow_"):
            continue
        command = load_command_class("pgflow_django", words[1])
        options = vars(command.create_parser("manage.py", words[1]).parse_args(words[2:]))
        assert options["database"] == "second", line


def test_a_listen_database_that_is_not_an_alias_is_e040() -> None:
    from pgflow_django.checks import check_pooler

    with override_settings(PGFLOW={"LISTEN_DATABASE": "direct"}):
        messages = check_pooler()
    assert [message.id for message in messages] == ["pgflow.E040"]
    assert "'direct', which DATABASES does not have (default)" in messages[0].msg


def test_prepared_statements_asked_for_behind_a_transaction_pooler_are_w040() -> None:
    from django.db import connections

    from pgflow_django.checks import check_pooler

    options = connections.settings["default"].setdefault("OPTIONS", {})
    with override_settings(PGFLOW={"POOLER": "transaction"}):
        assert check_pooler() == []
        options["prepare_threshold"] = 5
        try:
            messages = check_pooler()
        finally:
            del options["prepare_threshold"]
    assert [(message.id, message.obj) for message in messages] == [("pgflow.W040", "default")]
    with override_settings(PGFLOW={}):
        options["prepare_threshold"] = 5
        try:
            assert check_pooler() == [], "a direct connection may prepare"
        finally:
            del options["prepare_threshold"]
