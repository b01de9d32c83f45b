"""Creating jobs: idempotent per (type, key), validated with precise messages, nothing half-stored."""

import pytest

from jobs import insert, services
from jobs.models import Job, Transition


def create(**overrides):
    fields = {"type": "crawl", "idempotency_key": "k-1", "payload": {"url": "https://a.example/"}, "actor": "test"}
    fields.update(overrides)
    return insert.job_insert(**fields)


def test_the_same_key_and_payload_return_the_same_job(db):
    first = create()
    again = create()
    assert first.created and not again.created
    assert again.job.id == first.job.id
    assert Job.objects.count() == 1
    assert list(Transition.objects.values_list("from_state", "to_state", "cause")) == [("", "planned", "created")]


def test_the_same_key_with_another_payload_is_a_conflict(db):
    first = create()
    with pytest.raises(services.IdempotencyConflict, match=str(first.job.id)):
        create(payload={"url": "https://b.example/"})


def test_keys_are_unique_per_type_only(db):
    assert create(type="crawl").job.id != create(type="analysis").job.id


def test_a_sub_job_inherits_its_parents_correlation_id(db):
    parent = create(correlation_id="case-77").job
    child = create(idempotency_key="child", parent_id=parent.id).job
    assert (child.parent_id, child.correlation_id) == (parent.id, "case-77")
    assert create(idempotency_key="own").job.correlation_id == str(Job.objects.get(idempotency_key="own").id)


@pytest.mark.parametrize(
    "overrides,field",
    [
        ({"type": ""}, "type"),
        ({"type": "Crawl Jobs"}, "type"),
        ({"idempotency_key": ""}, "idempotency_key"),
        ({"idempotency_key": "x" * 256}, "idempotency_key"),
        ({"payload": ["not", "an", "object"]}, "payload"),
        ({"payload": {"nan": float("nan")}}, "payload"),
        ({"payload": {"text": "nul\x00byte"}}, "payload"),
        ({"payload": {"blob": "x" * 1_000_001}}, "payload"),
        ({"priority": 10}, "priority"),
        ({"priority": True}, "priority"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"correlation_id": "c" * 256}, "correlation_id"),
        ({"parent_id": "6b1e5d5e-0000-4000-8000-000000000000"}, "parent_id"),
    ],
)
def test_invalid_input_is_refused_with_the_field_named_and_nothing_stored(db, overrides, field):
    with pytest.raises(services.JobInputError) as refused:
        create(**overrides)
    assert refused.value.field == field
    assert not Job.objects.exists() and not Transition.objects.exists()


def test_a_reason_is_required_for_human_actions(db):
    job = create().job
    with pytest.raises(services.JobInputError, match="reason"):
        services.job_cancel(job_id=job.id, actor="op", reason="  ")


def test_new_jobs_get_time_ordered_ids(db):
    """UUIDv7 (jobs.models.job_id_new): each new job's ID sorts after the ones created before it, alone
    or many at once, so indexes keyed by job ID grow at their right edge."""
    single = [create(idempotency_key=f"one-{n}").job.id for n in range(3)]
    job = {"type": "crawl", "payload": {"url": "https://a.example/"}, "priority": 5, "source": "", "max_attempts": 5}
    job.update(pool="crawl", schema_version=1, request_hash="")
    made = insert.jobs_insert_many(
        [{**job, "idempotency_key": f"many-{n}"} for n in range(3)], actor="test", correlation_id="case"
    )
    many = [submission.job_id for submission in made]
    ids = single + many
    assert {job_id.version for job_id in ids} == {7}
    assert ids == sorted(ids) and len(set(ids)) == 6
    assert list(Job.objects.order_by("id").values_list("id", flat=True)) == ids
