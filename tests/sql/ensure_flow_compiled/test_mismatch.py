import pytest

from tests.sql.support import compile_flow, q, q1, shape, shape_step, start, val

BASE = shape(shape_step("a"), shape_step("b", "a"))


def _snapshot() -> list[dict]:
    return q(
        "select step_slug, step_type, step_index, deps_count, when_unmet, when_exhausted, "
        "required_input_pattern, forbidden_input_pattern, opt_timeout "
        "from pgflow.steps where flow_slug = 'f' order by step_index"
    )


@pytest.mark.parametrize(
    ("other", "word"),
    [
        (shape(shape_step("a"), shape_step("b", "a"), shape_step("c", "b")), "c"),
        (shape(shape_step("a")), "b"),
        (shape(shape_step("a"), shape_step("b")), "b"),
        (shape(shape_step("a"), shape_step("b", "a", step_type="map")), "b"),
        (shape(shape_step("a"), shape_step("b", "a", when_unmet="fail")), "b"),
        (shape(shape_step("a"), shape_step("b", "a", when_exhausted="skip")), "b"),
        (shape(shape_step("a"), shape_step("b", "a", required_input_pattern={"a": 1})), "b"),
        (shape(shape_step("a"), shape_step("b", "a", forbidden_input_pattern={"a": 1})), "b"),
        (shape(shape_step("b"), shape_step("a", "b")), "a"),
    ],
)
def test_mismatch_reported_and_nothing_changes(other: dict, word: str) -> None:
    compile_flow("f", BASE)
    run_id = start("f")
    before = _snapshot()
    result = compile_flow("f", other)
    assert result["status"] == "mismatch"
    assert result["differences"], "a mismatch must say what differs"
    assert any(word in d for d in result["differences"])
    assert _snapshot() == before
    assert val("select count(*) as n from pgflow.runs where run_id = %s", [run_id]) == 1


def test_mismatch_does_not_apply_options() -> None:
    compile_flow("f", BASE)
    mismatching = shape(shape_step("a"), shape_step("c", "a", timeout=99), max_attempts=8)
    result = compile_flow("f", mismatching)
    assert result["status"] == "mismatch"
    assert q1("select opt_max_attempts from pgflow.flows where flow_slug = 'f'")["opt_max_attempts"] == 3
    assert result.get("options_updated", []) == []
