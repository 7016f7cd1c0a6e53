from tests.sql.support import val


def test_128_is_the_limit() -> None:
    assert val("select pgflow.is_valid_slug(%s) as ok", ["a" * 128]) is True
    assert val("select pgflow.is_valid_slug(%s) as ok", ["a" * 129]) is False
