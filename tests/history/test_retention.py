"""Retention and the archive (issue 18): exactly the job trees the rules let go leave PostgreSQL, each
only after its complete export document is in a written and verified archive file; the application
role cannot purge; a failing archive stops purging and fires an alert; an archived job is still found
by ``export_job`` and the console."""

import gzip
import hashlib
import json
import uuid
from datetime import timedelta

import psycopg
import pytest
from django.conf import settings as django_settings
from django.core.management import call_command

from history import retention
from history.alert_rules import ARCHIVE_FAILING
from history.archive import file_verify, file_write
from history.export import jobs_export
from history.models import ArchivedJob, ArchiveFile
from jobs.insert import job_insert
from jobs.models import TERMINAL_STATES, Batch, Job, State, database_now
from tests.support.db import OWNER
from tests.support.db import test_database_url as database_url

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def policy(settings, tmp_path):
    settings.LEITSTAND_ARCHIVE_DIR = tmp_path / "archive"
    settings.LEITSTAND_RETENTION = {
        **settings.LEITSTAND_RETENTION,
        "days": {"done": 14, "cancelled": 14, "dead": 90},
        "types": {"synthetic": {"done": 1}},
        "finding_days": 400,
        "plan_days": 90,
        "archive_index_days": 0,  # the index keeps everything, except in its own test
        "jobs_per_file": 3,
        "seconds_per_round": 60,
    }
    retention._Cursor.after = retention._EPOCH, uuid.UUID(int=0)
    return settings.LEITSTAND_RETENTION


def ended(state, days_ago, job_type="crawl", **fields):
    job = job_insert(type=job_type, pool="crawl", idempotency_key=uuid.uuid4().hex, payload={}, actor="t", **fields).job
    Job.objects.filter(pk=job.pk).update(state=state, finished_at=database_now() - timedelta(days=days_ago))
    return job


def remaining(*jobs) -> set:
    return set(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("pk", flat=True))


def test_the_ended_states_of_the_purge_function_are_the_engines():
    from django.db import connection

    with connection.cursor() as cursor:  # the function as the database has it, not a migration's text
        cursor.execute("SELECT pg_get_functiondef('leitstand_jobs_purge(uuid[])'::regprocedure)")
        function = cursor.fetchone()[0]
    assert "j.state IN ('done', 'cancelled', 'dead')" in function
    assert set(TERMINAL_STATES) == {"done", "cancelled", "dead"}


def test_retention_keeps_exactly_what_the_rules_keep(policy):
    from rechecks.models import RecheckPlan
    from rechecks.services import plan_request
    from tests.console.test_console import review_case

    leave = [
        ended(State.DONE, 20),
        ended(State.CANCELLED, 15),
        ended(State.DEAD, 100),
        ended(State.DONE, 2, "synthetic"),  # its type keeps done jobs one day
    ]
    parent = ended(State.DONE, 20)
    leave += [parent, ended(State.DONE, 30, parent_id=parent.pk)]

    keep = [ended(State.DONE, 10), ended(State.DEAD, 60), ended(State.DONE, 0.5, "synthetic")]
    keep.append(job_insert(type="crawl", idempotency_key="open", payload={}, actor="t").job)  # still planned
    busy_parent = ended(State.DONE, 20)
    child = job_insert(type="crawl", idempotency_key="running-child", payload={}, actor="t", parent_id=busy_parent.pk)
    keep += [busy_parent, child.job]  # a child that is kept keeps its parent
    batch = Batch.objects.create(key="running", name="running", created_by="t", correlation_id="b")
    keep.append(ended(State.DONE, 20, batch_id=batch.pk))  # its batch has not finished

    case = review_case("kept")  # an open review case with a finding
    keep.append(case)
    with_finding = review_case("evidence")
    Job.objects.filter(pk=with_finding.pk).update(state=State.DONE, finished_at=database_now() - timedelta(days=100))
    keep.append(with_finding)  # findings keep their job finding_days (400)
    watched = review_case("watched")
    plan_request(job=watched, finding=watched.findings.get(), content_hash="h")
    Job.objects.filter(pk=watched.pk).update(state=State.DONE, finished_at=database_now() - timedelta(days=500))
    keep.append(watched)  # an active recheck plan keeps its job
    long_ago = review_case("long-ago")
    ended_plan = plan_request(job=long_ago, finding=long_ago.findings.get(), content_hash="h")
    Job.objects.filter(pk=long_ago.pk).update(state=State.DONE, finished_at=database_now() - timedelta(days=500))
    RecheckPlan.objects.filter(pk=ended_plan.pk).update(
        ended_at=database_now() - timedelta(days=100), state="ended", end_reason="target_confirmed"
    )
    leave.append(long_ago)  # its plan ended longer ago than plan_days

    before = jobs_export([j.pk for j in leave])
    report = retention.retention_sweep(seconds_per_round=60)

    assert remaining(*keep) == {j.pk for j in keep}
    assert remaining(*leave) == set()
    assert not RecheckPlan.objects.filter(pk=ended_plan.pk).exists()
    assert report.purged == report.archived == len(leave) and not report.stopped
    archived = {entry.job_id: entry for entry in ArchivedJob.objects.select_related("file")}
    assert set(archived) == {j.pk for j in leave}
    files = ArchiveFile.objects.all()
    assert {f.state for f in files} == {ArchiveFile.State.PURGED} and sum(f.jobs for f in files) == len(leave)
    for file in files:  # every file verifies, and holds the jobs' complete documents as they were
        ids = list(file.members.order_by("line").values_list("job_id", flat=True))
        assert file_verify(file.path, ids) == (file.sha256, file.bytes)
        for line in gzip.decompress((django_settings.LEITSTAND_ARCHIVE_DIR / file.path).read_bytes()).splitlines():
            document = json.loads(line)
            job_id = uuid.UUID(document["job"]["id"])
            expected = json.loads(json.dumps(before[job_id], default=str))
            for part in ("transitions", "attempts", "step_events", "effects", "findings", "children"):
                assert len(document[part]) == len(expected[part]), (job_id, part)
            assert document["job"]["state"] == expected["job"]["state"]
    manifest = json.loads(
        (django_settings.LEITSTAND_ARCHIVE_DIR / files[0].path).parent.parent.joinpath("MANIFEST.json").read_text()
    )
    assert {f["sha256"] for f in manifest["files"]} <= {f.sha256 for f in files}

    assert retention.retention_sweep(seconds_per_round=60).purged == 0, "a second sweep finds nothing more to purge"


def test_the_application_role_cannot_purge_and_nothing_unarchived_is_purged(policy):
    job = ended(State.DONE, 30)
    with psycopg.connect(database_url(), autocommit=True) as application:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            application.execute("SELECT leitstand_jobs_purge(%s::uuid[])", [[str(job.pk)]])
    with psycopg.connect(django_settings.LEITSTAND_DATABASE_MAINTENANCE_URL, autocommit=True) as maintenance:
        purged = maintenance.execute("SELECT leitstand_jobs_purge(%s::uuid[])", [[str(job.pk)]]).fetchone()[0]
    assert purged == 0 and Job.objects.filter(pk=job.pk).exists(), "not archived: not purged"


def test_a_failing_archive_stops_purging_and_fires_an_alert(policy, settings, tmp_path):
    jobs = [ended(State.DONE, 20) for _ in range(4)]
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the archive should be")
    settings.LEITSTAND_ARCHIVE_DIR = blocked
    report = retention.retention_sweep(seconds_per_round=60)
    assert report.stopped and report.purged == 0 and remaining(*jobs) == {j.pk for j in jobs}
    assert ArchiveFile.objects.filter(state=ArchiveFile.State.FAILED).exists()
    (firing,) = ARCHIVE_FAILING.evaluate(database_now(), {})
    assert "purging stopped" in firing.diagnosis and "not-a-folder" in firing.diagnosis

    settings.LEITSTAND_ARCHIVE_DIR = tmp_path / "archive"  # the storage is back: the sweep resumes
    assert retention.retention_sweep(seconds_per_round=60).purged == 4 and remaining(*jobs) == set()
    assert ARCHIVE_FAILING.evaluate(database_now(), {}) == []
    assert ArchivedJob.objects.count() == 4


def test_an_archived_job_is_found_by_export_job_and_the_console(policy, client, django_user_model, capsys):
    from dashboard.roles import VIEWERS, roles_ensure

    job = ended(State.DONE, 20, correlation_id="order-4711")
    retention.retention_sweep(seconds_per_round=60)
    assert not Job.objects.filter(pk=job.pk).exists()
    call_command("export_job", str(job.pk))
    document = json.loads(capsys.readouterr().out)
    assert document["job"]["id"] == str(job.pk) and document["archived"]["file"].startswith("jobs/")

    viewer = django_user_model.objects.create_user("vera", password="x" * 12, is_staff=True)
    viewer.groups.add(roles_ensure()[VIEWERS])
    client.force_login(viewer)
    listing = client.get("/admin/jobs/job/", {"q": "order-4711"}).content.decode()
    assert 'id="archived-results"' in listing and str(job.pk) in listing
    page = client.get(f"/admin/jobs/job/{job.pk}/change/").content.decode()
    assert "archived on" in page and "order-4711" in page

    path = django_settings.LEITSTAND_ARCHIVE_DIR / ArchivedJob.objects.get(job_id=job.pk).file.path
    path.write_bytes(gzip.compress(b"tampered\n"))  # a changed file is refused, never shown as the record
    assert "cannot be read" in client.get(f"/admin/jobs/job/{job.pk}/change/").content.decode()
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="does not match its recorded SHA-256"):
        call_command("export_job", str(job.pk))


def test_the_archive_index_forgets_old_files_and_export_job_still_reads_them(
    policy, settings, client, django_user_model, capsys
):
    from dashboard.roles import VIEWERS, roles_ensure

    old, recent = ended(State.DONE, 200, correlation_id="old-order"), ended(State.DONE, 20, correlation_id="new-order")
    retention.retention_sweep(seconds_per_round=60)
    assert ArchivedJob.objects.count() == 2
    settings.LEITSTAND_RETENTION = {**policy, "archive_index_days": 90}
    trimmed = retention.records_trim(database_now())

    assert trimmed["archive_index"] == 1, "the file of the job that ended 200 days ago left the index"
    assert list(ArchivedJob.objects.values_list("job_id", flat=True)) == [recent.pk]
    old_file = ArchiveFile.objects.get(indexed=False)
    assert old_file.state == ArchiveFile.State.PURGED and old_file.jobs == 1
    assert retention.records_trim(database_now())["archive_index"] == 0
    call_command("export_job", str(old.pk))  # read from the file that left the index
    document = json.loads(capsys.readouterr().out)
    assert document["job"]["correlation_id"] == "old-order" and document["archived"]["file"] == old_file.path
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="no job"):
        call_command("export_job", str(uuid.uuid4()))

    viewer = django_user_model.objects.create_user("vera", password="x" * 12, is_staff=True)
    viewer.groups.add(roles_ensure()[VIEWERS])
    client.force_login(viewer)
    listing = client.get("/admin/jobs/job/", {"q": "old-order"}).content.decode()
    assert 'id="archive-index-note"' in listing and "keeps the last 90 days" in listing
    assert 'id="archived-results"' in client.get("/admin/jobs/job/", {"q": "new-order"}).content.decode()


def alert_fields(now) -> dict:
    return {"rule": "disk_low", "state": "resolved", "first_seen": now, "last_seen": now, "value": 1, "threshold": 2}


def test_the_other_records_have_their_own_retention(policy, settings):
    from django.contrib.sessions.models import Session

    from alerts.models import Alert

    now = database_now()
    Session.objects.create(session_key="old", session_data="x", expire_date=now - timedelta(days=1))
    Session.objects.create(session_key="live", session_data="x", expire_date=now + timedelta(days=1))
    old = Alert.objects.create(**alert_fields(now), scope="host:a", resolved_at=now - timedelta(days=100))
    recent = Alert.objects.create(**alert_fields(now), scope="host:b", resolved_at=now - timedelta(days=1))
    finished = Batch.objects.create(
        key="old", name="old", created_by="t", correlation_id="o", finished_at=now - timedelta(days=100)
    )
    with_members = Batch.objects.create(
        key="kept", name="kept", created_by="t", correlation_id="k", finished_at=now - timedelta(days=100)
    )
    ended(State.DONE, 1, batch_id=with_members.pk)
    trimmed = retention.records_trim(now)
    assert trimmed["sessions"] == 1 and list(Session.objects.values_list("session_key", flat=True)) == ["live"]
    assert (
        trimmed["alerts"] == 1
        and not Alert.objects.filter(pk=old.pk).exists()
        and Alert.objects.filter(pk=recent.pk).exists()
    )
    assert (
        trimmed["batches"] == 1
        and not Batch.objects.filter(pk=finished.pk).exists()
        and Batch.objects.filter(pk=with_members.pk).exists()
    )


def test_the_console_and_metrics_show_what_the_history_costs(policy, client, settings, django_user_model):
    from prometheus_client.parser import text_string_to_metric_families

    from dashboard.operations.snapshot import snapshot_refresh
    from dashboard.roles import VIEWERS, roles_ensure

    kept = ended(State.DONE, 1)
    for _ in range(3):
        ended(State.DONE, 20)
    retention.retention_sweep(seconds_per_round=60)
    storage = snapshot_refresh()["storage"]
    assert storage["database_bytes"] > 0 and "jobs_job" in {t["name"] for t in storage["tables"]}
    assert storage["archive"]["purged_jobs"] == 3 and storage["archive"]["last_purged_at"]
    assert storage["oldest_job_at"] == Job.objects.get(pk=kept.pk).created_at.isoformat()

    viewer = django_user_model.objects.create_user("vera", password="x" * 12, is_staff=True)
    viewer.groups.add(roles_ensure()[VIEWERS])
    client.force_login(viewer)
    home = client.get("/admin/").content.decode()
    assert 'id="storage"' in home and "3 jobs archived" in home

    settings.LEITSTAND_METRICS_TOKEN = "scrape"
    scraped = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape").content.decode()
    samples = {s.name: s.value for f in text_string_to_metric_families(scraped) for s in f.samples if not s.labels}
    assert samples["leitstand_archived_jobs"] == 3 and samples["leitstand_archive_failed_files"] == 0
    assert samples["leitstand_database_bytes"] == storage["database_bytes"]


def test_the_audit_log_is_archived_a_day_at_a_time_then_purged(policy, settings):
    import psycopg

    from jobs.audit import audit_record
    from jobs.models import AuditEntry
    from tests.support.db import OWNER, test_database_url

    settings.LEITSTAND_RETENTION = {**policy, "audit_days": 30}
    now = database_now()
    for days_ago, target in ((45, "old-a"), (45, "old-b"), (40, "older-c"), (5, "recent")):
        audit_record(actor="user:olga", action="job.cancel", target=target, result="cancelled")
        # Back-dating rows of an append-only log is the test's setup, done as the owner.
        with psycopg.connect(test_database_url(user=OWNER)) as owner:
            owner.execute("ALTER TABLE dashboard_auditentry DISABLE TRIGGER dashboard_auditentry_append_only")
            owner.execute(
                "UPDATE dashboard_auditentry SET at = %s WHERE target = %s", [now - timedelta(days=days_ago), target]
            )
            owner.execute("ALTER TABLE dashboard_auditentry ENABLE TRIGGER dashboard_auditentry_append_only")
    report = retention.retention_sweep(seconds_per_round=60)
    assert report.audit_purged == 3 and list(AuditEntry.objects.values_list("target", flat=True)) == ["recent"]
    files = ArchiveFile.objects.filter(job_type="audit").order_by("day")
    assert [f.jobs for f in files] == [2, 1] and {f.state for f in files} == {ArchiveFile.State.PURGED}
    archived = []
    for file in files:
        raw = (django_settings.LEITSTAND_ARCHIVE_DIR / file.path).read_bytes()
        assert hashlib.sha256(raw).hexdigest() == file.sha256
        archived += [json.loads(line)["target"] for line in gzip.decompress(raw).splitlines()]
    assert sorted(archived) == ["old-a", "old-b", "older-c"]
    assert retention.retention_sweep(seconds_per_round=60).audit_purged == 0


def test_a_retention_override_must_name_a_type_and_ended_states(settings):
    from config.checks import timing_invariants

    settings.LEITSTAND_RETENTION = {**settings.LEITSTAND_RETENTION, "types": {"synthetic": {"done": 1}}}
    assert not [e for e in timing_invariants() if e.id == "leitstand.E012"]
    for wrong in ({"no_such_type": {"done": 1}}, {"synthetic": {"running": 1}}, {"synthetic": {"done": -1}}):
        settings.LEITSTAND_RETENTION = {**settings.LEITSTAND_RETENTION, "types": wrong}
        assert [e.id for e in timing_invariants() if e.id == "leitstand.E012"] == ["leitstand.E012"], wrong


def test_a_job_that_comes_back_before_its_purge_stays_and_is_archived_again_later(policy):
    leaving, returning = ended(State.DONE, 20), ended(State.DEAD, 100)
    trees, _ = retention.trees_leaving(database_now(), limit=10)
    files = retention._files_create(trees)
    assert all(file_write(file) for file in files)
    Job.objects.filter(pk=returning.pk).update(state=State.PLANNED, finished_at=None)  # retried meanwhile
    assert retention._purge_written() == 1
    assert remaining(leaving, returning) == {returning.pk}
    assert not ArchivedJob.objects.filter(job_id=returning.pk).exists(), "it will be archived again when it ends"
    assert sum(ArchiveFile.objects.values_list("purged", flat=True)) == 1


def test_a_job_that_came_back_and_ended_again_before_its_purge_is_not_purged_with_the_old_document(policy):
    """Retried after its document was written and dead again by the purge: its history is newer than
    the file, so the purge function leaves it (it is archived again), whatever the caller passes."""
    from tests.support.db import maintenance_database_url

    job = ended(State.DEAD, 100)
    (file,) = retention._files_create(retention.trees_leaving(database_now(), limit=10)[0])
    assert file_write(file)
    Job.objects.filter(pk=job.pk).update(finished_at=database_now() - timedelta(days=99))  # retried, dead again
    with psycopg.connect(maintenance_database_url(), autocommit=True) as maintenance:
        purged = maintenance.execute("SELECT leitstand_jobs_purge(%s::uuid[])", [[str(job.pk)]]).fetchone()[0]
    assert purged == 0 and remaining(job) == {job.pk}
    assert retention._purge_written() == 0
    assert not ArchivedJob.objects.filter(job_id=job.pk).exists(), "it will be archived again"


def test_a_job_deleted_before_its_file_is_written_does_not_stop_the_archive(policy):
    """The retention sweep's poisoned item (issue 35): a member that left the database by other means
    between being chosen for a file and the file's write (a crash in between, then a delete by hand).
    It is named on its file; the file's other jobs, and every later round, are archived and purged."""
    chosen = [ended(State.DONE, 20) for _ in range(3)]
    (file,) = retention._files_create(retention.trees_leaving(database_now(), limit=10)[0])  # then a crash
    with psycopg.connect(database_url(user=OWNER), autocommit=True) as owner:  # by hand: the engine never does
        with owner.transaction():
            owner.execute("SET LOCAL leitstand.allow_purge = 'on'")
            owner.execute("DELETE FROM jobs_transition WHERE job_id = %s", [chosen[1].pk])
            owner.execute("DELETE FROM jobs_job WHERE id = %s", [chosen[1].pk])
    later = [ended(State.DONE, 20) for _ in range(2)]

    report = retention.retention_sweep(seconds_per_round=60)
    assert not report.stopped and report.purged == 4 and remaining(*chosen, *later) == set()
    file.refresh_from_db()
    assert file.state == ArchiveFile.State.PURGED and file.jobs == 2
    assert str(chosen[1].pk) in file.error and "left the database before this file was written" in file.error
    ids = list(file.members.order_by("line").values_list("job_id", flat=True))
    assert ids == [chosen[0].pk, chosen[2].pk] and file_verify(file.path, ids) == (file.sha256, file.bytes)
    assert not ArchivedJob.objects.filter(job_id=chosen[1].pk).exists()
    assert ARCHIVE_FAILING.evaluate(database_now(), {}) == []
