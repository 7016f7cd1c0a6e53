"""A mismatch lists only the real differences, by step slug (database -> definition): an added or
removed step is one line, not a line for every step after it."""

from __future__ import annotations

from tests.sql.support import compile_flow, shape, shape_step

BASE = shape(shape_step("validate"), shape_step("charge", "validate"), shape_step("ship", "charge"))


def differences(other: dict) -> list[str]:
    compile_flow("f", BASE)
    answer = compile_flow("f", other)
    assert answer["status"] == "mismatch"
    return list(answer["differences"])


def test_a_step_added_in_the_middle_is_one_line() -> None:
    other = shape(
        shape_step("validate"),
        shape_step("extra", "validate"),
        shape_step("charge", "validate"),
        shape_step("ship", "charge"),
    )
    assert differences(other) == ["+ step extra depending on validate"]


def test_a_removed_step_and_a_changed_dependency() -> None:
    other = shape(shape_step("validate"), shape_step("ship", "validate"))
    assert differences(other) == ["- step charge", '~ step ship: deps ["charge"] -> ["validate"]']


def test_a_changed_option_and_a_new_map_step() -> None:
    other = shape(
        shape_step("validate"),
        shape_step("charge", "validate", when_unmet="fail"),
        shape_step("ship", "charge"),
        shape_step("notify", "ship", step_type="map"),
    )
    assert differences(other) == [
        "+ step notify (map) depending on ship",
        "~ step charge: when_unmet skip -> fail",
    ]


def test_reordered_steps() -> None:
    other = shape(shape_step("charge"), shape_step("validate"), shape_step("ship", "charge"))
    assert differences(other) == [
        '~ step charge: deps ["validate"] -> []',
        "~ step order: validate, charge, ship -> charge, validate, ship",
    ]


def test_a_mismatch_counts_the_runs_a_replacement_would_delete() -> None:
    from tests.sql.support import q, start

    compile_flow("f", BASE)
    start("f")
    finished = start("f")
    q("update pgflow.runs set status = 'completed', remaining_steps = 0 where run_id = %s", [finished])
    answer = compile_flow("f", shape(shape_step("validate")))
    assert (answer["runs"], answer["unfinished_runs"], answer["refused"]) == (2, 1, None)
