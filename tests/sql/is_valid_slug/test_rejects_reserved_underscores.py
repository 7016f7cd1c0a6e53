import pytest

from tests.sql.support import val


@pytest.mark.parametrize("slug", ["_leading", "trailing_", "double__underscore", "_", "a___b"])
def test_underscore_rules_reserve_double_underscore_for_generated_queue_names(slug: str) -> None:
    assert val("select pgflow.is_valid_slug(%s) as ok", [slug]) is False
