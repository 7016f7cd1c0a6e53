import pytest

from tests.sql.support import val


@pytest.mark.parametrize(
    "slug",
    [
        "a",
        "abc",
        "ABC",
        "MixedCase",
        "with_underscore",
        "single_inner_underscores_ok",
        "a1",
        "x" * 128,
        "runs",
        "myrun",
    ],
)
def test_accepts_letters_digits_underscores(slug: str) -> None:
    assert val("select pgflow.is_valid_slug(%s) as ok", [slug]) is True
