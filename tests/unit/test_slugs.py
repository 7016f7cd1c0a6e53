from __future__ import annotations

import pytest

from pgflow_django.flows.slugs import (
    MAX_FLOW_SLUG_LENGTH,
    MAX_SLUG_LENGTH,
    InvalidSlug,
    is_valid_slug,
    validate_flow_slug,
    validate_slug,
)


@pytest.mark.parametrize(
    "slug",
    [
        "a",
        "Validate",
        "a_b_c",
        "step_1",
        "CamelCase_2",
        "x" * MAX_SLUG_LENGTH,
        "runs",
        "rerun",
        "run_it",
    ],
)
def test_valid_slugs(slug: str) -> None:
    assert is_valid_slug(slug)
    assert validate_slug(slug, "step slug") == slug


@pytest.mark.parametrize(
    ("slug", "reason"),
    [
        ("", "is empty"),
        ("1step", "starts with a digit"),
        ("my-step", "contains '-'"),
        ("my step", "contains ' '"),
        ("étape", "contains 'é'"),
        ("step\n", "contains '\\n'"),
        ("x" * (MAX_SLUG_LENGTH + 1), "129 characters long"),
        ("run", "reserved word"),
        ("RUN", "reserved word"),
        ("Run", "reserved word"),
        ("_", "starts with '_'"),
        ("_private", "starts with '_'"),
        ("run_", "ends with '_'"),
        ("flow__step", "contains '__'"),
        ("a___b", "contains '__'"),
    ],
)
def test_invalid_slugs_name_the_thing_and_the_rule(slug: str, reason: str) -> None:
    assert not is_valid_slug(slug)
    with pytest.raises(InvalidSlug) as caught:
        validate_slug(slug, "step slug")
    message = str(caught.value)
    assert message.startswith("step slug ")
    assert reason in message
    assert (
        "; rename it (1..128 ASCII letters, digits or single underscores, starting with a letter" in message
    )
    assert "\n" not in message.replace("\\n", "")


@pytest.mark.parametrize("value", [None, 3, b"step", ["step"]])
def test_non_strings_are_invalid(value: object) -> None:
    assert not is_valid_slug(value)
    with pytest.raises(InvalidSlug, match="not a string"):
        validate_slug(value, "flow slug")


def test_invalid_slug_is_a_value_error() -> None:
    assert issubclass(InvalidSlug, ValueError)


def test_long_values_are_shortened_in_the_message() -> None:
    with pytest.raises(InvalidSlug) as caught:
        validate_slug("bad-" * 100, "step slug")
    assert len(str(caught.value)) < 300


def test_flow_slug_respects_the_queue_name_limit() -> None:
    assert validate_flow_slug("f" * MAX_FLOW_SLUG_LENGTH) == "f" * MAX_FLOW_SLUG_LENGTH
    with pytest.raises(InvalidSlug, match=r"48 characters long.*at most 47; choose a shorter slug"):
        validate_flow_slug("f" * (MAX_FLOW_SLUG_LENGTH + 1))


def test_flow_slug_applies_the_step_rules_first() -> None:
    with pytest.raises(InvalidSlug, match="reserved word"):
        validate_flow_slug("run")
