"""End to end with real pools: a copy answers 200 (match) → 200 (unchanged) → 404 → 404, and its
recheck plan ends "target confirmed" after the expected number of checks; the case ends done."""

import pytest

from jobs.models import Job, State
from rechecks.models import RecheckPlan
from tests.support.pools import PoolProcesses, wait_for
from tests.support.scripted_server import ScriptedServer
from workers.pipeline import demoweb
from workers.pipeline.models import Candidate, Source
from workers.pipeline.services import asset_register
from workers.runtime.services import job_submit

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

IMAGE = (200, "image/png", demoweb.asset_png(1))
GONE = (404, "text/html", b"<p>removed</p>")


def test_a_recheck_plan_advances_through_real_pools_to_target_confirmed(tmp_path):
    # The analysis sees the first 200; the rechecks see 200 (unchanged), 404, 404.
    with ScriptedServer({"/copy.png": [IMAGE, IMAGE, GONE]}) as server:
        asset_register(name="Abendlicht", owner_ref="RH-1", data=IMAGE[2])
        source = Source.objects.create(name="S", base_url=server.url("/"))
        candidate = Candidate.objects.create(image_url=server.url("/copy.png"), page_url=server.url("/"), source=source)
        pools = PoolProcesses(
            str(tmp_path),
            LEITSTAND_HTTP_ALLOWED_TARGETS=server.target,
            LEITSTAND_HOST_MIN_DELAY_SECONDS="0",
            LEITSTAND_RECHECK_FIRST_DELAY_SECONDS="1",
            LEITSTAND_RECHECK_MIN_INTERVAL_SECONDS="1",
            LEITSTAND_RECHECK_EARLY_SECONDS="1",
            LEITSTAND_RECHECK_JITTER="0",
            LEITSTAND_RECHECK_CONFIRMATIONS="2",
        )
        try:
            for name in ("control", "analysis", "recheck"):
                pools.start(name)
            case = job_submit(
                job_type="analysis",
                payload={"candidate_id": candidate.id},
                idempotency_key="e2e",
                actor="test",
                correlation_id="case-e2e",
            ).job
            plan = wait_for(
                lambda: pools.check_running() and RecheckPlan.objects.filter(job=case, state="ended").first(),
                timeout=60,
                interval=0.2,
                message="the plan to end",
            )
        finally:
            pools.stop_all()
        assert (plan.end_reason, plan.sequence) == ("target_confirmed", 3)
        assert [(o.http_status, o.kind) for o in plan.observations.order_by("sequence")] == [
            (200, "unchanged"),
            (404, "gone"),
            (404, "gone"),
        ]
        wait_for(lambda: Job.objects.get(pk=case.pk).state == State.DONE, timeout=5, message="the case to be done")
        # The analysis, three checks, and each 404 asked again at once as a browser (a second opinion).
        assert server.requests == ["/robots.txt"] + ["/copy.png"] * 6
        checks = Job.objects.filter(type="recheck")
        assert checks.count() == 3 and {c.correlation_id for c in checks} == {"case-e2e"}
