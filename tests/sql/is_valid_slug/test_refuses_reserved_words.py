from tests.sql.support import val


def test_refuses_run() -> None:
    assert val("select pgflow.is_valid_slug('run') as ok") is False
