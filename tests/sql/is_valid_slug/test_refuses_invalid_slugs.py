import pytest

from tests.sql.support import val


@pytest.mark.parametrize(
    "slug",
    ["", "1abc", "9", "has-dash", "has space", "dot.ted", "semi;colon", "quote'", "x" * 129, "a$b", "tab\tx"],
)
def test_refuses_bad_characters_leading_digit_and_length(slug: str) -> None:
    assert val("select pgflow.is_valid_slug(%s) as ok", [slug]) is False


def test_refuses_null() -> None:
    assert val("select pgflow.is_valid_slug(null) as ok") is False
