import uuid
from datetime import UTC, datetime, timedelta

from pgflow_django.runs.client import new_run_id
from tests.sql.support import q, val


def test_sql_ids_are_version_7_and_sort_by_time() -> None:
    ids = [row["id"] for row in q("select pgflow.uuid_v7() as id from generate_series(1, 50)")]
    assert {value.version for value in ids} == {7}
    assert {value.variant for value in ids} == {uuid.RFC_4122}
    millis = [value.int >> 80 for value in ids]
    assert millis == sorted(millis)
    now = int(val("select floor(extract(epoch from clock_timestamp()) * 1000)::bigint as ms"))
    assert now - 60_000 < millis[0] <= now


def test_python_ids_have_the_same_layout_and_fall_inside_their_bound() -> None:
    at = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    made = new_run_id(at)
    assert made.version == 7 and made.variant == uuid.RFC_4122
    low = val("select pgflow.uuid_v7_bound(%s) as b", [at])
    high = val("select pgflow.uuid_v7_bound(%s) as b", [at + timedelta(milliseconds=1)])
    assert low <= made < high
    assert new_run_id() > made


def test_runs_get_time_ordered_ids_by_default() -> None:
    q("select pgflow.create_flow('ids')")
    q("select pgflow.add_step('ids', 'a')")
    started = [row["run_id"] for row in q("select run_id from pgflow.start_flows('ids', '[{}, {}, {}]')")]
    assert {value.version for value in started} == {7}
