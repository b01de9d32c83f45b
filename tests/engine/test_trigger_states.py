"""The two triggers name job states in SQL (the webhook outbox, the batch counters); their lists must
be exactly the states the Python side declares, or events and counters silently go missing."""

import re

import pytest
from django.db import connection

from jobs.batches import COUNTED_STATES
from jobs.models import State
from jobs.options import EVENT_KINDS, REPORTED_STATES

pytestmark = pytest.mark.django_db


def function_source(name: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_functiondef(%s::regproc)", [name])
        return cursor.fetchone()[0]


def quoted(sql: str) -> set[str]:
    return set(re.findall(r"'([a-z_]*)'", sql))


def test_the_outbox_trigger_reports_exactly_the_declared_states():
    source = function_source("jobs_transition_webhook_outbox")
    (in_list,) = re.findall(r"to_state IN \(([^)]*)\)", source)
    assert quoted(in_list) == {str(state) for state in REPORTED_STATES}
    assert {f"job.{state}" for state in quoted(in_list)} <= set(EVENT_KINDS)


def test_the_batch_counter_trigger_counts_exactly_the_declared_states_in_their_columns():
    source = function_source("jobs_transition_batch_counters")
    columns = re.search(r"INSERT INTO jobs_batchcounter AS c \(([^)]*)\)", source).group(1)
    counters = [column.strip() for column in columns.split(",")][3:]  # after batch_id, shard, total
    counted = re.findall(r"sum\(\(a\.to_state = '([a-z_]+)'\)::int - \(a\.from_state = '([a-z_]+)'\)::int\)", source)
    assert [to for to, _ in counted] == [frm for _, frm in counted]
    assert dict(zip([to for to, _ in counted], counters)) == {str(s): column for s, column in COUNTED_STATES.items()}
    from_list, to_list = re.findall(r"_state IN \(([^)]*)\)", source)
    assert quoted(from_list) == {"", *map(str, COUNTED_STATES)}  # '' : the creation counts in total
    assert quoted(to_list) == set(map(str, COUNTED_STATES))
    assert set(map(str, COUNTED_STATES)) <= set(State.values)
