"""``manage.py demo_data``: demo users and jobs, driven through the real job engine.

Idempotent: jobs use fixed idempotency keys, and only newly created ones are driven.
"""

import time

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from dashboard.roles import OPERATORS, REVIEWERS, roles_ensure
from jobs import leases, services
from jobs.errors import ErrorKind
from jobs.retry import RetryPolicy

DEMO_PASSWORD = "leitstand-demo"
POLICY = RetryPolicy(base_seconds=30, cap_seconds=600)


class Command(BaseCommand):
    help = "Create demo users (operator, reviewer) and demo jobs driven through the job engine."

    def handle(self, *args, **options):
        with transaction.atomic():
            groups = roles_ensure()
            for username, group in (("operator", OPERATORS), ("reviewer", REVIEWERS)):
                user, created = get_user_model().objects.get_or_create(username=username, defaults={"is_staff": True})
                if created:
                    user.set_password(DEMO_PASSWORD)
                    user.save()
                user.groups.add(groups[group])
        created = self._jobs()
        self.stdout.write(f"demo data ready: users operator, reviewer; {created} new demo jobs")

    def _jobs(self) -> int:
        plan = [
            ("crawl", "demo-crawl-1", {"url": "https://images.example/gallery/1"}, "complete"),
            ("crawl", "demo-crawl-2", {"url": "https://images.example/gallery/2"}, "confirm"),
            ("crawl", "demo-crawl-3", {"url": "https://shop.example/p/77"}, "transient"),
            ("crawl", "demo-crawl-4", {"url": "https://blog.example/post/9"}, "planned"),
            ("crawl", "demo-crawl-5", {"url": "https://blog.example/post/10"}, "zombie"),
            ("analysis", "demo-analysis-1", {"candidate": 1, "asset": 4}, "unclear"),
            ("analysis", "demo-analysis-2", {"candidate": 2, "asset": 4}, "permanent"),
            ("analysis", "demo-analysis-3", {"candidate": 3, "asset": 5}, "running"),
            ("analysis", "demo-analysis-4", {"candidate": 4, "asset": 5}, "planned"),
        ]
        count = 0
        # Jobs meant to stay planned are created last, so the demo's claims cannot pick them up.
        plan.sort(key=lambda item: item[3] == "planned")
        for job_type, key, payload, scenario in plan:
            submission = services.job_create(type=job_type, idempotency_key=key, payload=payload, actor="demo",
                                             source=payload.get("url", "").split("/")[2] if "url" in payload else "",
                                             priority=0 if scenario == "planned" and job_type == "analysis" else 5)
            if submission.created:
                count += 1
                self._drive(submission.job, scenario)
        leases.unclear_queue_for_review()
        return count

    def _drive(self, job, scenario: str) -> None:
        if scenario == "planned":
            return
        worker = leases.WorkerIdentity(host="demo-host", pid=1000 + job.id.int % 1000, pool=job.type)
        lease = 0.05 if scenario == "zombie" else 60
        (claimed,) = leases.claim(pool=job.type, worker=worker, lease_seconds=lease)
        if claimed.id != job.id:
            raise CommandError(f"expected to claim demo job {job.id}, got {claimed.id}: is a pool running?")
        leases.start(claimed.id, claimed.lease_version, actor=worker.lease_owner, processing_version=f"{job.type}@1")
        actor = worker.lease_owner
        if scenario in ("complete", "confirm"):
            leases.complete(claimed.id, claimed.lease_version, actor=actor, result_ref=f"result/{job.id}",
                            result_checksum="sha256:" + job.id.hex)
            if scenario == "confirm":
                services.job_confirm(job_id=job.id, actor="demo")
        elif scenario == "transient":
            leases.fail(claimed.id, claimed.lease_version, actor=actor, kind=ErrorKind.TRANSIENT,
                        error_class="httpx.ConnectTimeout", message="connect timed out after 5 s",
                        retry_delay_seconds=POLICY.delay(claimed.attempt))
        elif scenario == "unclear":
            leases.fail(claimed.id, claimed.lease_version, actor=actor, kind=ErrorKind.UNCLEAR,
                        error_class="UnclearMatch", message="similarity 0.71 lies between the thresholds")
        elif scenario == "permanent":
            leases.fail(claimed.id, claimed.lease_version, actor=actor, kind=ErrorKind.PERMANENT,
                        error_class="PIL.UnidentifiedImageError", message="cannot identify image file")
        elif scenario == "running":
            leases.heartbeat(claimed.id, claimed.lease_version, lease_seconds=lease, progress={"step": "hash"})
        elif scenario == "zombie":
            # The worker stalls past its lease; the reaper releases the job; the late result is refused.
            time.sleep(lease * 2)
            leases.reap_expired(grace_seconds=0, policy=POLICY)
            try:
                leases.complete(claimed.id, claimed.lease_version, actor=actor, result_ref="late")
            except leases.StaleAttempt as refused:
                self.stdout.write(f"demo: {refused}")
