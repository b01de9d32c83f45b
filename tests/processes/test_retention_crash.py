"""Retention under crashes (issue 18): the control process archives and purges 1,200 old jobs while
it is killed with SIGKILL again and again, mid-work. Afterwards every job is in exactly one verified
archive file and nowhere else: nothing lost, nothing archived twice, no file the database does not know."""

import os
import random
import signal
import time
from pathlib import Path

import pytest
from django.db import connection

from history.archive import file_verify
from history.models import ArchivedJob, ArchiveFile
from jobs.models import Job
from tests.support.pools import PoolProcesses, wait_for

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]
JOBS = 1200

OLD_JOBS = """
WITH made AS (
    INSERT INTO jobs_job (id, type, pool, idempotency_key, correlation_id, state, finished_at, state_changed_at)
    SELECT gen_random_uuid(), 'synthetic', 'crawl', 'old-' || n, 'case-' || n, 'done',
           now() - interval '30 days', now() - interval '30 days'
    FROM generate_series(1, %s) AS n
    RETURNING id
)
INSERT INTO jobs_transition (job_id, from_state, to_state, at, lease_version, cause, actor)
SELECT id, '', 'done', now() - interval '30 days', 0, 'created', 'test' FROM made
"""


def test_killing_the_control_process_loses_nothing_and_archives_nothing_twice(tmp_path, settings):
    with connection.cursor() as cursor:
        cursor.execute(OLD_JOBS, [JOBS])
    ids = set(Job.objects.filter(idempotency_key__startswith="old-").values_list("pk", flat=True))
    archive = settings.LEITSTAND_ARCHIVE_DIR = tmp_path / "archive"
    pools = PoolProcesses(
        str(tmp_path / "run"),
        LEITSTAND_ARCHIVE_DIR=str(archive),
        LEITSTAND_RETENTION_EVERY_SECONDS="0",
        LEITSTAND_RETENTION_JOBS_PER_FILE="40",
        LEITSTAND_RETENTION_TREES_PER_ROUND="120",
        LEITSTAND_RETENTION_SECONDS_PER_ROUND="0.5",
    )
    random.seed(18)
    kills, interrupted = 0, 0
    try:
        for _ in range(4):
            started = ArchiveFile.objects.count()
            control = pools.start("control")
            wait_for(
                lambda started=started: pools.check_running() and ArchiveFile.objects.count() > started,
                timeout=60,
                message="the control process archives",
            )
            time.sleep(random.uniform(0.0, 0.3))  # somewhere in the middle of a round
            os.killpg(control.pid, signal.SIGKILL)
            control.wait(timeout=10)
            pools.processes.pop("control")
            kills += 1
            interrupted += ArchiveFile.objects.exclude(state=ArchiveFile.State.PURGED).count()
            if not Job.objects.filter(pk__in=ids).exists():
                break
        pools.start("control")
        wait_for(
            lambda: pools.check_running() and not Job.objects.filter(pk__in=ids).exists(),
            timeout=120,
            message="every old job purged",
        )
        wait_for(
            lambda: not ArchiveFile.objects.exclude(state=ArchiveFile.State.PURGED).exists(),
            timeout=30,
            message="every file purged",
        )
    finally:
        pools.stop_all()

    assert kills >= 2 and interrupted, f"{kills} kills, {interrupted} files left unfinished by them"
    assert set(ArchivedJob.objects.values_list("job_id", flat=True)) == ids
    lines = []
    files = {f.path: f for f in ArchiveFile.objects.all()}
    on_disk = {str(p.relative_to(archive)) for p in Path(archive).rglob("*.jsonl.gz")}
    assert on_disk == set(files), "every file on disk is one the database knows, and the other way round"
    for path, file in files.items():
        members = list(file.members.order_by("line").values_list("job_id", flat=True))
        assert file_verify(path, members) == (file.sha256, file.bytes)
        lines += members
    assert len(lines) == JOBS and set(lines) == ids, "each job in exactly one file"
