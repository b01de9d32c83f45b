"""Replay, dry runs and shadow runs against the real demo web: a replay is a new, audited attempt;
a dry run and a shadow run leave the job, its effects, children and every other table unchanged
while reporting what they would have done; a shadow version with other bands reports the difference."""

import io
import json

import pytest
from django.core.management import CommandError, call_command
from django.forms.models import model_to_dict

from jobs.models import Attempt, AuditEntry, Effect, Job, State, StepEvent, Transition, WebhookEvent
from tests.pipeline.test_pipeline import crawl_job, web  # noqa: F401 (the fixture)
from workers.pipeline.models import Candidate, Finding
from workers.runtime.models import ShadowRun
from workers.runtime.replay import shadow_sample

pytestmark = pytest.mark.django_db(transaction=True)
TABLES = (Job, Attempt, Transition, StepEvent, Effect, Candidate, Finding, WebhookEvent)


def snapshot():
    """Every row of the tables a handler could touch, and each job as a dict."""
    return {model.__name__: sorted(map(str, model.objects.values_list("pk", flat=True))) for model in TABLES} | {
        "jobs": {str(job.pk): model_to_dict(job) for job in Job.objects.all()},
        "findings": {f.pk: (f.score, f.verdict) for f in Finding.objects.all()},
    }


def command(*args):
    out = io.StringIO()
    call_command("replay", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_a_dead_job_is_replayed_as_a_new_audited_attempt_and_a_done_job_is_not(make_job, pool_runtime):
    dead = make_job("synthetic", pool="crawl", payload={"fail": "permanent"})
    done = make_job("synthetic", pool="crawl", payload={})
    pool_runtime("crawl").wake()
    Job.objects.filter(pk=done.pk).update(state=State.DONE)
    output = command(str(dead.pk), "--reason", "the fix is deployed", "--actor", "cli:eng")
    assert f"{dead.pk}  synthetic    dead → planned" in output
    dead.refresh_from_db()
    assert dead.state == State.PLANNED and dead.attempts == 0
    last = Transition.objects.filter(job=dead).order_by("id").last()
    assert (last.cause, last.actor) == ("retry now: replay: the fix is deployed", "cli:eng")
    assert AuditEntry.objects.filter(action="replay", target=f"job {dead.pk}", reason="the fix is deployed").exists()
    with pytest.raises(CommandError, match="final states stay final"):
        command(str(done.pk), "--reason", "again")
    with pytest.raises(CommandError, match="--reason is required"):
        command(str(dead.pk))


def test_a_filter_replays_what_it_names_up_to_the_limit(make_job, pool_runtime):
    for _ in range(3):
        make_job("synthetic", pool="crawl", payload={"fail": "permanent"})
    make_job("synthetic", pool="crawl", payload={})
    pool_runtime("crawl").wake()
    output = command("--filter", "type=synthetic,state=dead,error_class=Permanent", "--limit", "2", "--reason", "r")
    assert "replayed 2 job(s)" in output
    assert Job.objects.filter(state=State.DEAD).count() == 1
    with pytest.raises(CommandError, match="cannot filter on 'colour'"):
        command("--filter", "colour=red", "--reason", "r")
    with pytest.raises(CommandError, match="state must be one of"):
        command("--filter", "state=asleep", "--reason", "r")


def test_a_dry_run_changes_nothing_and_reports_what_it_would_do(web, pool_runtime):  # noqa: F811
    job = crawl_job(web, "/werke/1.html", depth=1)
    before = snapshot()
    report = json.loads(command(str(job.pk), "--dry-run", "--json"))["dry_run"]
    assert snapshot() == before, "the job, its effects, children and every other table are unchanged"
    assert report["path"] == "robots > fetch > extract > candidates > spawn -> done" and report["conforms"] is True
    assert [child["type"] for child in report["children"]] == ["analysis"] * 3
    assert report["outcome"] == "done" and report["detail"].startswith("page crawled: 3 images")

    # Run for real; a dry run of an analysis child then asks whether its image changed: it did not.
    pool_runtime("crawl").wake()
    pool_runtime("analysis").wake()
    analysed = Job.objects.filter(type="analysis", state__in=[State.DONE, State.RECHECK_DUE]).first()
    before = snapshot()
    text = command(str(analysed.pk), "--dry-run")
    assert snapshot() == before
    assert "path: robots > fetch= -> done" in text and "unchanged since its last analysis (304)" in text

    # Without the image's version and content hash (as recorded before issue 23), the run goes through
    # to its finding, which the dry run finds in the ledger.
    Candidate.objects.update(etag="", last_modified="")
    Finding.objects.update(content_hash="")
    before = snapshot()
    text = command(str(analysed.pk), "--dry-run")
    assert snapshot() == before
    assert (
        "nothing was changed" in text and f"would skip: already applied: effect finding finding:{analysed.pk}" in text
    )


WERKE_2 = ("kreise-collage.jpg", "foto-204.jpg", "abendlicht-gespiegelt.jpg", "mohnfeld-ausschnitt.jpg")


def analysed_on_werke_2(web, pool_runtime) -> dict:  # noqa: F811
    """The analysis jobs of the demo's second gallery page, by image: the collage (a review case),
    an unrelated photo (no match), a mirrored and a cropped copy (matches analysis@1 missed)."""
    crawl_job(web, "/werke/2.html", depth=0)
    pool_runtime("crawl").wake()
    while pool_runtime("analysis").wake().claimed:
        pass
    jobs = Job.objects.filter(type="analysis")
    urls = dict(
        Candidate.objects.filter(pk__in=[j.payload["candidate_id"] for j in jobs]).values_list("pk", "image_url")
    )
    by_image = {urls[job.payload["candidate_id"]].rsplit("/", 1)[1]: job for job in jobs}
    return {image: by_image[image] for image in WERKE_2}


def test_a_shadow_version_reports_its_difference_and_leaves_the_job_alone(web, pool_runtime):  # noqa: F811
    jobs = analysed_on_werke_2(web, pool_runtime)
    mirrored = jobs["abendlicht-gespiegelt.jpg"]
    assert mirrored.state == State.RECHECK_DUE
    before = snapshot()
    output = command(str(mirrored.pk), "--shadow", "--processing-version", "analysis@1")
    after = snapshot()
    assert after.pop("ShadowRun", None) is None and after == before, "only the shadow record is new"
    record = ShadowRun.objects.get(job=mirrored)
    assert (record.processing_version, record.real_version, record.same) == ("analysis@1", "analysis@2", False)
    assert {"field": "outcome", "real": "recheck", "shadow": "done"} in record.differences
    assert "differs: outcome: job 'recheck' → shadow 'done'" in output, "analysis@1's dHash misses the mirror"
    with pytest.raises(CommandError, match="no shadow version 'analysis@9'; declared: analysis@1, analysis@2-tight"):
        command(str(mirrored.pk), "--shadow", "--processing-version", "analysis@9")


def test_sampling_makes_shadow_jobs_for_the_configured_share(make_job, settings):
    settings.LEITSTAND_SHADOW_SAMPLES = {"analysis": {"version": "analysis@2-tight", "share": 0.5}}
    parents = [make_job("analysis", payload={"candidate_id": n + 1}) for n in range(40)]
    made = shadow_sample([(job.pk, "analysis", "done") for job in parents] + [(parents[0].pk, "crawl", "done")])
    shadows = Job.objects.filter(type="shadow")
    assert made == shadows.count() and 8 <= made <= 32, "about half, chosen by the job ID's hash"
    assert {job.pool for job in shadows} == {"analysis"} and {job.priority for job in shadows} == {9}
    assert shadow_sample([(job.pk, "analysis", "done") for job in parents]) == made
    assert Job.objects.filter(type="shadow").count() == made, "one shadow job per job and version"


def test_a_sampled_shadow_job_runs_in_the_bulk_lane_and_records_its_comparison(web, pool_runtime, settings):  # noqa: F811
    settings.LEITSTAND_SHADOW_SAMPLES = {"analysis": {"version": "analysis@1", "share": 1.0}}
    jobs = analysed_on_werke_2(web, pool_runtime)
    assert shadow_sample([(job.pk, "analysis", "done") for job in jobs.values()]) == len(jobs) == 4
    while pool_runtime("analysis").wake().claimed:
        pass
    runs = {run.job_id: run for run in ShadowRun.objects.filter(sampled=True)}
    assert len(runs) == 4 and {r.processing_version for r in runs.values()} == {"analysis@1"}
    assert set(Job.objects.filter(type="shadow").values_list("state", flat=True)) == {State.DONE}
    differing = {image: [d["field"] for d in runs[job.pk].differences] for image, job in jobs.items()}
    assert differing == {
        "kreise-collage.jpg": [],  # a review case in both versions
        "foto-204.jpg": ["result_ref"],  # no match in both, but another original is the closest
        "abendlicht-gespiegelt.jpg": ["outcome", "result_ref", "path"],  # analysis@1 misses the mirror: done
        "mohnfeld-ausschnitt.jpg": ["outcome", "result_ref", "path"],  # and leaves the crop to a reviewer
    }
    assert runs[jobs["kreise-collage.jpg"].pk].same and not runs[jobs["foto-204.jpg"].pk].same
