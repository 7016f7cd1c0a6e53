from tests.sql.support import create_flow, db_error, queue_exists, val


def test_48_characters_refused_with_clear_error() -> None:
    slug = "f" * 48
    message = db_error("select pgflow.create_flow(%s)", [slug])
    assert "47" in message
    assert val("select count(*) as n from pgflow.flows") == 0
    assert not queue_exists(slug)


def test_47_characters_accepted() -> None:
    slug = "f" * 47
    create_flow(slug)
    val("select pgflow.add_step(%s, 'a') is not null as ok", [slug])
    assert queue_exists(slug)
