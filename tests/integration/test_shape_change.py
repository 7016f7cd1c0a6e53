"""A changed flow under a known slug: a new version by default whatever ``DEBUG`` says (nothing deleted),
refused under ``PGFLOW["ON_SHAPE_CHANGE"] = "refuse"``, replaced only when asked (``on_change="replace"``)
or, with ``"replace-if-idle"``, when no run is unfinished, with a WARNING that counts what was deleted."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from pgflow_django import Flow, FlowMismatch, compile_flow, start_flow
from pgflow_django.conf import get_settings
from tests.sql.support import q, val


def shop(*, extra: bool = False) -> Flow:
    flow = Flow("shape_shop")

    @flow.step()
    def validate(flow_input: Any) -> Any:
        return flow_input

    @flow.step(depends_on=[validate])
    def ship(deps: Any) -> Any:
        return None

    if extra:

        @flow.step(depends_on=[ship])
        def notify(deps: Any) -> Any:
            return None

    return flow


def runs() -> int:
    return int(val("select count(*) from pgflow.runs where flow_slug = 'shape_shop'"))


def finish_all() -> None:
    q("update pgflow.runs set status = 'completed', remaining_steps = 0 where flow_slug = 'shape_shop'")


@pytest.mark.parametrize("debug", [True, False])
def test_a_changed_shape_is_a_new_version_by_default_whatever_debug_says(debug: bool) -> None:
    """The old default followed DEBUG: with DEBUG on, this deleted every run."""
    compile_flow(shop())
    start_flow(shop(), {})
    with override_settings(DEBUG=debug, PGFLOW={}):
        result = compile_flow(shop(extra=True))
    assert (result.status, result.flow_slug) == ("versioned", "shape_shop___v2")
    assert runs() == 1


@pytest.mark.parametrize("debug", [True, False])
def test_a_changed_shape_is_refused_under_refuse_whatever_debug_says(debug: bool) -> None:
    compile_flow(shop())
    start_flow(shop(), {})
    with (
        override_settings(DEBUG=debug, PGFLOW={"ON_SHAPE_CHANGE": "refuse"}),
        pytest.raises(FlowMismatch) as caught,
    ):
        compile_flow(shop(extra=True))
    assert caught.value.differences == ("+ step notify depending on ship",)
    assert (caught.value.runs, caught.value.unfinished_runs) == (1, 1)
    assert runs() == 1


@override_settings(PGFLOW={"ON_SHAPE_CHANGE": "replace-if-idle"})
def test_replace_if_idle_refuses_while_a_run_is_unfinished() -> None:
    compile_flow(shop())
    start_flow("shape_shop", {})
    with pytest.raises(FlowMismatch) as caught:
        compile_flow(shop(extra=True))
    assert caught.value.refused == "unfinished"
    message = str(caught.value)
    assert (
        "PGFLOW['ON_SHAPE_CHANGE'] = 'replace-if-idle' left it alone: 1 of its runs are unfinished" in message
    )
    assert "manage.py pgflow_compile shape_shop --replace (deletes 1 run (1 unfinished))" in message
    assert runs() == 1


@override_settings(PGFLOW={"ON_SHAPE_CHANGE": "replace-if-idle"})
def test_replace_if_idle_replaces_an_idle_flow_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    compile_flow(shop())
    start_flow("shape_shop", {})
    start_flow("shape_shop", {})
    finish_all()
    with caplog.at_level(logging.WARNING, logger="pgflow_django.flows.compiler"):
        result = compile_flow(shop(extra=True))
    assert (result.status, result.runs, result.unfinished_runs) == ("recompiled", 2, 0)
    [record] = [r for r in caplog.records if r.name == "pgflow_django.flows.compiler"]
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        "replaced flow shape_shop (on_change=replace-if-idle): deleted 2 run(s) (0 unfinished) and compiled "
        "it again: + step notify depending on ship"
    )
    assert runs() == 0


def test_replace_with_a_confirmed_count_refuses_when_runs_started_since() -> None:
    compile_flow(shop())
    start_flow("shape_shop", {})
    with pytest.raises(FlowMismatch) as caught:
        compile_flow(shop(extra=True), on_change="replace", confirmed_runs=0)
    assert caught.value.refused == "confirmation"
    assert "runs were started since the count was confirmed (it now deletes 1 run (1 unfinished))" in str(
        caught.value
    )
    assert runs() == 1


@pytest.mark.parametrize(
    ("pgflow", "message"),
    [
        ({"ALLOW_RECOMPILE": True}, r"ALLOW_RECOMPILE'\] = True was removed .*'replace-if-idle'.*--replace"),
        (
            {"ON_SHAPE_CHANGE": "replace"},
            r"ON_SHAPE_CHANGE'\] must be one of 'version', 'refuse', 'replace-if-idle', got",
        ),
    ],
)
def test_settings_that_would_delete_runs_without_asking_are_errors(
    pgflow: dict[str, Any], message: str
) -> None:
    with override_settings(PGFLOW=pgflow), pytest.raises(ImproperlyConfigured, match=message):
        get_settings()


def test_allow_recompile_false_is_accepted_and_deletes_nothing() -> None:
    with override_settings(PGFLOW={"ALLOW_RECOMPILE": False}, DEBUG=True):
        assert get_settings().on_shape_change == "version"
