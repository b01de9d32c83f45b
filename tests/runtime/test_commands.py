"""The engineers' commands: enqueue and the dead-letter queue."""

import io
import uuid

import pytest
from django.core.management import CommandError, call_command

from jobs import leases
from jobs.errors import ErrorKind
from jobs.models import Job, State, Transition
from workers.runtime.services import job_submit


def run(*args):
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def dead_job(error_class="httpx.ConnectTimeout", job_type="synthetic"):
    job = job_submit(job_type=job_type, payload={}, idempotency_key=uuid.uuid4().hex, actor="test").job
    worker = leases.WorkerIdentity("h", 1, job.pool)
    (claimed,) = [
        c for c in leases.claim(pool=job.pool, worker=worker, lease_seconds=30, limit=100, start=True) if c.id == job.id
    ]
    leases.fail(
        claimed.id,
        claimed.lease_version,
        actor="w",
        kind=ErrorKind.PERMANENT,
        error_class=error_class,
        message="connect timed out",
    )
    return Job.objects.get(pk=job.pk)


@pytest.mark.django_db
def test_enqueue_creates_jobs_idempotently_per_key():
    out, _ = run("enqueue", "synthetic", "--payload", '{"duration_ms": 1}', "--key", "drill", "--count", "3")
    assert "3 created, 0 already existed" in out
    out, _ = run("enqueue", "synthetic", "--payload", '{"duration_ms": 1}', "--key", "drill", "--count", "3")
    assert "0 created, 3 already existed" in out
    assert sorted(Job.objects.values_list("idempotency_key", flat=True)) == ["drill-1", "drill-2", "drill-3"]
    assert set(Job.objects.values_list("pool", flat=True)) == {"synthetic"}


@pytest.mark.django_db
@pytest.mark.parametrize(
    "args,message",
    [
        (["nope"], "unknown job type 'nope'"),
        (["synthetic", "--payload", "{bad"], "--payload is not valid JSON"),
        (["synthetic", "--payload", "[1]"], "payload: must be a JSON object"),
        (["synthetic", "--priority", "12"], "priority: must be an integer from 0"),
        (["synthetic", "--payload", '{"pool": "mars"}'], "unknown pool 'mars'"),
    ],
)
def test_enqueue_refuses_bad_input_precisely(args, message):
    with pytest.raises(CommandError, match=message):
        run("enqueue", *args)
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_a_synthetic_job_may_choose_its_pool():
    run("enqueue", "synthetic", "--payload", '{"pool": "analysis"}')
    assert Job.objects.get().pool == "analysis"


@pytest.mark.django_db
def test_dlq_list_groups_by_type_and_error_class():
    dead_job(), dead_job(), dead_job("PIL.UnidentifiedImageError")
    out, _ = run("dlq", "list")
    assert "     2  synthetic        httpx.ConnectTimeout" in out
    assert "     1  synthetic        PIL.UnidentifiedImageError" in out
    assert run("dlq", "list", "--error", "nothing")[0].startswith("the dead-letter queue is empty for this filter")


@pytest.mark.django_db
def test_dlq_show_prints_the_whole_history():
    job = dead_job()
    out, _ = run("dlq", "show", str(job.id))
    assert '"state": "dead"' in out and "running → dead (permanent error: httpx.ConnectTimeout; w)" in out
    with pytest.raises(CommandError, match="does not exist"):
        run("dlq", "show", "not-a-uuid")


@pytest.mark.django_db
def test_dlq_retry_by_filter_is_pinned_and_recorded_with_the_actor():
    timeouts = [dead_job(), dead_job()]
    other = dead_job("PIL.UnidentifiedImageError")
    out, _ = run("dlq", "retry", "--all", "--error", "httpx.ConnectTimeout", "--dry-run")
    assert out.strip() == "dry run: 2 dead job(s) would be retried"
    assert {j.state for j in Job.objects.filter(pk__in=[t.pk for t in timeouts])} == {State.DEAD}
    out, _ = run("dlq", "retry", "--all", "--error", "httpx.ConnectTimeout", "--actor", "cli:ops-anna")
    assert "2 job(s) retried by cli:ops-anna" in out
    for job in timeouts:
        job.refresh_from_db()
        assert (job.state, job.attempts) == (State.PLANNED, 0)
        assert Transition.objects.filter(job=job).last().actor == "cli:ops-anna"
    other.refresh_from_db()
    assert other.state == State.DEAD


@pytest.mark.django_db
def test_dlq_remove_cancels_with_a_reason_and_never_deletes():
    job = dead_job()
    with pytest.raises(CommandError):
        run("dlq", "remove", str(job.id))  # --reason is required
    out, _ = run("dlq", "remove", str(job.id), "--reason", "source permanently offline")
    job.refresh_from_db()
    assert (job.state, job.completion_reason) == (State.CANCELLED, "source permanently offline")
    with pytest.raises(CommandError, match="not in the dead-letter queue"):
        run("dlq", "retry", str(job.id))
    with pytest.raises(CommandError, match="name one job ID, or --all"):
        run("dlq", "retry")


@pytest.mark.django_db
def test_crawl_starts_one_job_per_active_source_idempotently_per_run():
    from workers.pipeline.services import source_upsert

    a = source_upsert(name="A", base_url="https://a.example/")
    source_upsert(name="B", base_url="https://b.example/", is_active=False)
    out, _ = run("crawl", "--run", "nightly")
    assert out.count("started") == 1 and "A https://a.example/" in out
    job = Job.objects.get(type="crawl")
    assert job.payload == {"source_id": a.id, "url": "https://a.example/", "depth": 0, "run": "nightly"}
    assert (job.correlation_id, job.source, job.pool) == (f"crawl:nightly:source-{a.id}", "A", "crawl")
    out, _ = run("crawl", "--run", "nightly", "--source", "A")
    assert "already started in this run" in out
    with pytest.raises(CommandError, match="no such source: C; sources: A, B"):
        run("crawl", "--source", "C")
    with pytest.raises(CommandError, match="source 'B' is inactive"):
        run("crawl", "--source", "B")


@pytest.mark.django_db
def test_dlq_groups_and_review_record_a_decision_on_a_group():
    from dashboard.models import DeadLetterReview
    from dashboard.operations.deadletters import dead_letters_refresh
    from jobs.models import AuditEntry

    dead_job(), dead_job()
    dead_letters_refresh()
    out, _ = run("dlq", "groups")
    assert "     2  unreviewed synthetic" in out and "httpx.ConnectTimeout" in out
    with pytest.raises(CommandError, match="no dead-letter group synthetic · nothing.Else · —"):
        run("dlq", "review", "--type", "synthetic", "--error", "nothing.Else", "--decision", "retry", "--note", "x")
    with pytest.raises(CommandError, match="note: is required"):
        run(
            "dlq",
            "review",
            "--type",
            "synthetic",
            "--error",
            "httpx.ConnectTimeout",
            "--decision",
            "retry",
            "--note",
            " ",
        )
    out, _ = run(
        "dlq",
        "review",
        "--type",
        "synthetic",
        "--error",
        "httpx.ConnectTimeout",
        "--decision",
        "retry",
        "--note",
        "the proxy is fixed",
        "--actor",
        "cli:ops-anna",
    )
    assert out.startswith("reviewed by cli:ops-anna")
    assert DeadLetterReview.objects.get().decision == "retry"
    assert AuditEntry.objects.get(action="deadletters.reviewed").actor == "cli:ops-anna"
    assert "reviewed   synthetic" in run("dlq", "groups")[0]


@pytest.mark.django_db
def test_crawl_starts_the_good_sources_and_names_a_bad_one():
    from workers.pipeline.models import Source
    from workers.pipeline.services import source_upsert

    source_upsert(name="A", base_url="https://a.example/")
    bad = Source.objects.create(name="Tab\there", base_url="https://b.example/")  # stored before the checks
    out, err = run("crawl", "--run", "r1")
    assert "A https://a.example/ (started)" in out
    assert f"source {bad.pk} not started: 'run r1: name: must contain printable characters" in err
    with pytest.raises(CommandError, match="no source could be started"):
        run("crawl", "--run", "r2", "--source", "Tab\there")


@pytest.mark.django_db
def test_dlq_list_never_sends_a_sites_control_characters_to_the_terminal():
    job = dead_job()
    Job.objects.filter(pk=job.pk).update(error_message="bad \x1b[2J\x1b]0;owned\x07 url\nforged line")
    out, _ = run("dlq", "list")
    assert "\x1b" not in out and "\x07" not in out and "forged line" in out
    assert "bad \\x1b[2J\\x1b]0;owned\\x07 url\\nforged" in out


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["http://0000::1:80/", "http://[::1]:80/", "http://a.example/\x01", "ftp://a.example/"])
def test_fetch_refuses_a_bad_url_before_robots_txt_and_without_a_traceback(url):
    with pytest.raises(CommandError, match="^refused: (FetchRefused|AddressRefused)"):
        run("fetch", url)
