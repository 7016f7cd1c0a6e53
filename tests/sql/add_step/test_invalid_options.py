import pytest

from tests.sql.support import create_flow, db_error, val


@pytest.mark.parametrize(
    "args",
    [
        "max_attempts => 0",
        "base_delay => -1",
        "timeout => 0",
        "start_delay => -1",
        "step_type => 'fanout'",
        "when_unmet => 'explode'",
        "when_exhausted => 'retry'",
        "required_input_pattern => '[1, 2]'::jsonb",
        "forbidden_input_pattern => '\"text\"'::jsonb",
    ],
)
def test_invalid_option_refused(args: str) -> None:
    create_flow("f")
    db_error(f"select pgflow.add_step('f', 'a', {args})")
    assert val("select count(*) as n from pgflow.steps where flow_slug = 'f'") == 0


@pytest.mark.parametrize("slug", ["", "1a", "has-dash", "run", "x" * 129])
def test_invalid_step_slug_refused(slug: str) -> None:
    create_flow("f")
    db_error("select pgflow.add_step('f', %s)", [slug])
    assert val("select count(*) as n from pgflow.steps where flow_slug = 'f'") == 0
