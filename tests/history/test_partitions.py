"""Time-partitioned history (issue 18): the transition log and the step events have a partition per
day; the maintenance role creates them ahead and drops old ones whole — after moving the rows of
jobs still kept forward (a job leaves the database only through the archive)."""

import uuid
from datetime import timedelta

import psycopg
import pytest
from django.conf import settings
from django.db import connection

from history import retention
from history.models import ArchivedJob, ArchiveFile
from jobs.models import Job, Transition, database_now

pytestmark = pytest.mark.django_db(transaction=True)


def maintenance(statement: str, parameters=()):
    with psycopg.connect(settings.LEITSTAND_DATABASE_MAINTENANCE_URL, autocommit=True) as session:
        return session.execute(statement, list(parameters)).fetchone()[0]


def partition_of(transition_id: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid::regclass::text FROM jobs_transition WHERE id = %s", [transition_id])
        return cursor.fetchone()[0]


def today():
    return database_now().date()


def legacy_day():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT substring(pg_get_expr(relpartbound, oid) FROM $$TO \\('([0-9-]+)'\\)$$)::date - 1"
            " FROM pg_class WHERE relname = 'jobs_transition_legacy'"
        )
        row = cursor.fetchone()
    return row[0] if row else None


def history_row(job_id, part_day, cause) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO jobs_transition (job_id, from_state, to_state, at, lease_version, cause, actor, part_day)"
            " VALUES (%s, 'planned', 'cancelled', now() - interval '40 days', 0, %s, 't', %s) RETURNING id",
            [job_id, cause, part_day],
        )
        return cursor.fetchone()[0]


def test_history_goes_to_the_partition_of_its_day(make_job):
    job = make_job()
    row = Transition.objects.get(job=job)
    assert partition_of(row.pk) == f"jobs_transition_p{today():%Y%m%d}"


def test_partitions_are_created_ahead_and_a_day_in_the_default_moves_into_its_own(make_job):
    job = make_job()
    far = today() + timedelta(days=40)
    row = history_row(job.pk, far, "far ahead")
    assert partition_of(row) == "jobs_transition_default"
    created = maintenance("SELECT leitstand_partitions_ensure(40)")
    assert created >= 2 * 30  # both tables, the days not there yet
    assert partition_of(row) == f"jobs_transition_p{far:%Y%m%d}"
    assert maintenance("SELECT leitstand_partitions_ensure(40)") == 0


def test_an_old_partition_is_dropped_whole_keeping_the_rows_of_kept_jobs(make_job):
    day = legacy_day()
    assert day is not None, "the migration made the table before it the legacy partition"
    kept = make_job()
    Job.objects.filter(pk=kept.pk).update(created_at=database_now() - timedelta(days=41))  # an old job, still kept
    archived_id = uuid.uuid4()  # a job that left through the archive (only the purge removes jobs)
    file = ArchiveFile.objects.create(path="jobs/x.jsonl.gz", day=day, job_type="crawl", state="purged")
    ArchivedJob.objects.create(job_id=archived_id, file=file, line=0, type="crawl", state="done", correlation_id="c")
    kept_row = history_row(kept.pk, day, "kept")
    history_row(archived_id, day, "archived")
    assert partition_of(kept_row) == "jobs_transition_legacy"

    assert maintenance("SELECT leitstand_partitions_drop(%s)", [day]) == 0, "it ends after that day: too young"
    assert maintenance("SELECT leitstand_partitions_drop(%s)", [day + timedelta(days=1)]) == 2, "both legacy ones"
    causes = set(Transition.objects.filter(cause__in=["kept", "archived"]).values_list("cause", flat=True))
    assert causes == {"kept"}, "the kept job's history moved forward; the archived job's left with the partition"
    moved = Transition.objects.get(cause="kept")
    assert partition_of(moved.pk) == f"jobs_transition_p{today():%Y%m%d}"
    assert moved.at < database_now() - timedelta(days=39), "moved rows keep their time"
    assert Job.objects.filter(pk=kept.pk).exists()
    assert maintenance("SELECT leitstand_partitions_drop(%s)", [today() + timedelta(days=5)]) == 0, (
        "partitions still written to are never dropped"
    )


def test_the_retention_sweep_keeps_the_partitions(settings):
    ahead = 60  # further than any other test creates

    def exists() -> bool:
        with connection.cursor() as cursor:
            cursor.execute("SELECT to_regclass(%s)", [f"jobs_stepevent_p{today() + timedelta(days=ahead):%Y%m%d}"])
            return cursor.fetchone()[0] is not None

    assert not exists()
    settings.LEITSTAND_RETENTION = {**settings.LEITSTAND_RETENTION, "partition_days_ahead": ahead}
    report = retention.retention_sweep(seconds_per_round=60)
    assert not report.stopped and report.partitions_created >= 2 and exists()
