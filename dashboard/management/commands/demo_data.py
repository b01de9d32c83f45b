"""``manage.py demo_data [--web HOST:PORT,HOST:PORT]``: demo users, a few synthetic jobs driven through
the real job engine to show the engine's states, and the pipeline's demo: the protected assets, the
two demo web sites as sources, and a crawl run over them for the running pools.

Idempotent: users, assets and sources are created once; synthetic jobs use fixed idempotency keys
and only newly created ones are driven; each call starts a new crawl run.
"""

import time
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils import timezone

from dashboard.roles import OPERATORS, REVIEWERS, VIEWERS, roles_ensure
from jobs import leases, services
from jobs.batches import batch_create
from jobs.errors import ErrorKind
from jobs.models import database_now
from jobs.retry import RetryPolicy
from workers.pipeline import demoweb
from workers.pipeline.services import asset_register, crawl_start, source_upsert
from workers.runtime.services import job_submit

DEMO_PASSWORD = "leitstand-demo"
POLICY = RetryPolicy(base_seconds=30, cap_seconds=600)
DEMO_CRAWL_EVERY_MINUTES = 3


class Command(BaseCommand):
    help = "Create demo users (operator, reviewer), synthetic jobs in every state, and start the pipeline's demo crawl."

    def add_arguments(self, parser):
        parser.add_argument(
            "--web",
            default="127.0.0.1:8101,127.0.0.1:8102",
            help="host:port of the two demo web sites (manage.py demoweb)",
        )
        parser.add_argument("--no-crawl", action="store_true", help="register assets and sources, start no crawl")

    def handle(self, *args, web, no_crawl, **options):
        with transaction.atomic():
            groups = roles_ensure()
            for username, group in (("operator", OPERATORS), ("reviewer", REVIEWERS), ("viewer", VIEWERS)):
                user, created = get_user_model().objects.get_or_create(username=username, defaults={"is_staff": True})
                if created:
                    user.set_password(DEMO_PASSWORD)
                    user.save()
                user.groups.add(groups[group])
        created = self._jobs()
        crawled = self._pipeline(web, start_crawl=not no_crawl)
        loaded = self._load_batch() if not no_crawl else "no load batch"
        self.stdout.write(
            f"demo data ready: users operator, reviewer, viewer; {created} new synthetic jobs; {crawled}; {loaded}"
        )

    def _load_batch(self) -> str:
        # A batch that takes about a minute in the bulk lane of the crawl pool, with a target it
        # will narrowly miss: the console's batch page shows its progress, rate and ETA meanwhile.
        key = timezone.now().strftime("demo-load-%Y%m%d-%H%M%S")
        with transaction.atomic():
            batch, _ = batch_create(
                key=key,
                name="demo load: 400 synthetic jobs",
                created_by="demo",
                target_finish_at=database_now() + timedelta(seconds=45),
            )
            for n in range(400):
                job_submit(
                    job_type="synthetic",
                    idempotency_key=f"{key}-{n}",
                    actor="demo",
                    priority=8,
                    batch_id=batch.pk,
                    payload={"pool": "crawl", "settle": True, "duration_ms": 500, "steps": ["fetch", "parse", "store"]},
                )
        return f"load batch {batch.pk} (400 jobs) started"

    def _pipeline(self, web: str, *, start_crawl: bool) -> str:
        targets = [t.strip() for t in web.split(",") if t.strip()]
        if len(targets) != 2:
            raise CommandError("--web takes the two demo sites as HOST:PORT,HOST:PORT")
        for name, owner, data in demoweb.protected_assets():
            asset_register(name=name, owner_ref=owner, data=data)
        # On the demo's time scale the sites crawl themselves every few minutes (issue 23).
        sources = [
            source_upsert(**spec, crawl_every_minutes=DEMO_CRAWL_EVERY_MINUTES)
            for spec in demoweb.DemoWeb.source_specs(targets)
        ]
        if not start_crawl:
            return "assets and sources registered"
        submissions = crawl_start(actor="demo", sources=sources)
        return f"crawl run {submissions[0].job.payload['run']} started over {len(sources)} demo sites"

    def _jobs(self) -> int:
        # Synthetic jobs driven here through the engine show the states the demo crawl rarely
        # reaches by itself (a stalled worker's refused late write, a running job, a dead letter).
        steps = ["fetch", "parse", "store"]
        plan = [
            ("crawl", "demo-1", {"steps": steps}, "complete"),
            ("crawl", "demo-2", {"steps": steps}, "confirm"),
            ("crawl", "demo-3", {"steps": steps, "fail": "transient"}, "transient"),
            ("crawl", "demo-4", {"steps": steps}, "zombie"),
            ("analysis", "demo-6", {"steps": ["decode"], "fail": "permanent"}, "permanent"),
            ("analysis", "demo-7", {"steps": ["decode", "hash", "compare"]}, "running"),
        ]
        count = 0
        for pool, key, payload, scenario in plan:
            submission = job_submit(
                job_type="synthetic",
                idempotency_key=key,
                payload={"pool": pool, **payload},
                actor="demo",
                priority=0 if key.endswith("-1") else 5,
            )
            if submission.created:
                count += 1
                self._drive(submission.job, scenario)
        # Run by the demo's crawl pool: the declared path, and two runs that skip the step parse (the
        # console's paths page shows them as divergent, "missing step parse").
        for n, path in enumerate([steps] * 4 + [["fetch", "store"]] * 2):
            count += job_submit(
                job_type="synthetic",
                idempotency_key=f"demo-path-{n}",
                actor="demo",
                payload={"pool": "crawl", "steps": path, "duration_ms": 30 + 10 * n},
            ).created
        leases.unclear_queue_for_review()
        return count

    def _drive(self, job, scenario: str) -> None:
        worker = leases.WorkerIdentity(host="demo-host", pid=1000 + job.id.int % 1000, pool=job.pool)
        lease = 0.05 if scenario == "zombie" else 60
        (claimed,) = leases.claim(pool=job.pool, worker=worker, lease_seconds=lease)
        if claimed.id != job.id:
            raise CommandError(f"expected to claim demo job {job.id}, got {claimed.id}: is a pool running?")
        leases.start(claimed.id, claimed.lease_version, actor=worker.lease_owner, processing_version="synthetic@1")
        actor = worker.lease_owner
        if scenario in ("complete", "confirm"):
            leases.complete(
                claimed.id,
                claimed.lease_version,
                actor=actor,
                result_ref=f"result/{job.id}",
                result_checksum="sha256:" + job.id.hex,
            )
            if scenario == "confirm":
                services.job_confirm(job_id=job.id, actor="demo")
        elif scenario == "transient":
            leases.fail(
                claimed.id,
                claimed.lease_version,
                actor=actor,
                kind=ErrorKind.TRANSIENT,
                error_class="httpx.ConnectTimeout",
                message="connect timed out after 5 s",
                retry_delay_seconds=POLICY.delay(claimed.attempt),
            )
        elif scenario == "permanent":
            leases.fail(
                claimed.id,
                claimed.lease_version,
                actor=actor,
                kind=ErrorKind.PERMANENT,
                error_class="PIL.UnidentifiedImageError",
                message="cannot identify image file",
            )
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
