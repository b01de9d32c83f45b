"""Flow keys encode '%' from migration jobs 0040 on (issue 54, item 15): a stored key's '%' that the
old encoding did not write becomes '%25', the old encoding's escapes stay, so every job keeps its
key's settings, lane and rest."""

import uuid

import pytest
from django.db import connection

from jobs import insert, services
from jobs.models import FlowKey, FlowLane, FlowRest, Job
from tests.support.db import migrate_to

POOL = "flowmigration"


@pytest.mark.django_db(transaction=True)
def test_stored_keys_are_encoded_again_and_keep_their_rows():
    try:
        migrate_to([("jobs", "0039_flow_rests")])
        old = ["B%C3%BCcher", "100%", "50%off", "%41", "%c3", "plain", "x" * 253 + "%"]
        with connection.cursor() as cursor:
            for key in old:
                cursor.execute(
                    "INSERT INTO jobs_flowkey (pool, key, weight, paused, reason, changed_by, changed_at)"
                    " VALUES (%s, %s, 2, false, 'r', 't', now())",
                    [POOL, key],
                )
                cursor.execute("INSERT INTO jobs_flowrest (pool, key, until) VALUES (%s, %s, now())", [POOL, key])
        for key in old:
            job = insert.job_insert(
                type=POOL,
                idempotency_key=uuid.uuid4().hex,
                payload={"k": "x"},
                actor="t",
                flow_key_declaration="payload.k",
            ).job
            Job.objects.filter(pk=job.pk).update(flow_key=key)
    finally:
        migrate_to(None)
    expected = ["B%C3%BCcher", "100%25", "50%25off", "%2541", "%25c3", "plain", "x" * 253]
    assert sorted(FlowKey.objects.filter(pool=POOL).values_list("key", flat=True)) == sorted(expected)
    assert sorted(FlowRest.objects.filter(pool=POOL).values_list("key", flat=True)) == sorted(expected)
    assert sorted(Job.objects.filter(type=POOL).values_list("flow_key", flat=True)) == sorted(expected)
    assert [services.flow_key_named(key) for key in expected[:5]] == ["Bücher", "100%", "50%off", "%41", "%c3"]
    assert FlowLane.objects.filter(pool=POOL, key__contains="%").exclude(key__in=expected).count() == 0
