"""Hold and resume one job (issue 39, operator controls): a held job is out of line — no claim takes
it, on any host — until a person resumes it; it comes back at the place its due time gives it; who
held it, when and why are on its transition log; only a job waiting in line can be held."""

from __future__ import annotations

import pytest
from django_fsm import TransitionNotAllowed

from jobs import leases, services
from jobs.models import Job, State, Transition
from tests.conftest import job_in_state

pytestmark = pytest.mark.django_db


def claim(worker, limit=10):
    return leases.claim(pool="crawl", worker=worker, lease_seconds=60, limit=limit)


def test_a_held_job_is_not_claimed_and_comes_back_at_its_place(worker, make_job):
    first, second, third = make_job(), make_job(), make_job()
    held = services.job_hold(job_id=first.pk, actor="user:op", reason="the customer asked us to wait")
    assert held.state == State.HELD and held.due_at == first.due_at
    assert [job.id for job in claim(worker)] == [second.pk, third.pk]
    make_job()  # a job planned after it was held
    services.job_resume(job_id=first.pk, actor="user:op", reason="the customer is ready")
    # Back at its place: due first, claimed first (its lane's next due time was lowered on resume).
    assert [job.id for job in claim(worker, limit=1)] == [first.pk]
    log = list(Transition.objects.filter(job_id=first.pk).order_by("id").values_list("to_state", "cause", "actor"))
    assert log[1:3] == [
        ("held", "held: the customer asked us to wait", "user:op"),
        ("planned", "resumed: the customer is ready", "user:op"),
    ]


@pytest.mark.parametrize("state", [s for s in State if s not in (State.PLANNED,)])
def test_only_a_job_waiting_in_line_can_be_held(make_job, state):
    job = job_in_state(make_job(), state)
    with pytest.raises(TransitionNotAllowed):
        services.job_hold(job_id=job.pk, actor="user:op", reason="r")
    assert Job.objects.get(pk=job.pk).state == state


def test_a_held_job_can_be_cancelled_and_a_reason_is_required(make_job):
    job = make_job()
    with pytest.raises(services.JobInputError):
        services.job_hold(job_id=job.pk, actor="user:op", reason="  ")
    services.job_hold(job_id=job.pk, actor="user:op", reason="wait")
    with pytest.raises(TransitionNotAllowed):
        services.job_hold(job_id=job.pk, actor="user:op", reason="twice")
    assert services.job_cancel(job_id=job.pk, actor="user:op", reason="not wanted").state == State.CANCELLED
