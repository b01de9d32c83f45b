"""The path checks judge each ended attempt on its own (issue 35): one that cannot be judged is
recorded as such, and the attempts beside it are judged."""

import uuid

import pytest

from jobs.models import Attempt
from jobs.paths import attempts_check
from workers.runtime.context import Stored
from workers.runtime.registry import registry
from workers.runtime.services import job_submit

pytestmark = pytest.mark.django_db(transaction=True)


class Unjudgeable:
    def judge(self, observed):
        raise ValueError("a pattern this path breaks")


def test_an_attempt_that_cannot_be_judged_is_recorded_and_the_others_are_judged(job_type_factory, pool_runtime):
    def handler(ctx):
        with ctx.step("work"):
            pass
        return Stored()

    bad, good = job_type_factory(handler), job_type_factory(handler)
    for job_type in (bad, good):
        job_submit(job_type=job_type.name, payload={}, idempotency_key=uuid.uuid4().hex, actor="t")
    pool_runtime().wake()
    specs = {t.name: t.paths for t in registry.all()} | {bad.name: Unjudgeable()}
    checked = attempts_check(specs)
    assert {job_type for _, job_type, _ in checked} >= {bad.name, good.name}
    judged = {a.job_type: a for a in Attempt.objects.filter(job_type__in=[bad.name, good.name])}
    assert judged[bad.name].path_conforms is None
    assert judged[bad.name].path_divergence == "not judged: ValueError: a pattern this path breaks"
    assert judged[good.name].path_conforms is True
