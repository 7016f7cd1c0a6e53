from tests.sql.support import create_flow, db_error, val


def test_slug_differing_only_in_case_from_a_queue_is_refused_clearly() -> None:
    create_flow("Orders")
    message = db_error("select pgflow.create_flow(%s)", ["orders"])
    assert "differs only in case" in message and "'Orders'" in message
    assert val("select count(*) as n from pgflow.flows where flow_slug = 'orders'") == 0


def test_external_queue_differing_in_case_is_refused() -> None:
    val("select pgmq.create('Invoices') is null as created")
    message = db_error("select pgflow.create_flow(%s)", ["invoices"])
    assert "'Invoices' already exists" in message and "silently adopt" in message
