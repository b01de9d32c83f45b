"""The pipeline's admin pages: sources (validated, start a crawl run), protected assets (upload
validated by the safe decoder), candidates and findings, for an operator and a reviewer."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from dashboard.roles import OPERATORS, REVIEWERS, roles_ensure
from jobs.models import AuditEntry, Batch, Job, LeitstandNow
from workers.pipeline import demoweb
from workers.pipeline.models import Candidate, Finding, ProtectedAsset, Source
from workers.pipeline.services import asset_register, crawl_start, source_upsert

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(client, django_user_model):
    user = django_user_model.objects.create_user("op", password="x" * 12, is_staff=True)
    user.groups.add(roles_ensure()[OPERATORS])
    client.force_login(user)
    return user


def test_every_pipeline_page_renders_with_records(client, operator):
    name, owner, data = demoweb.protected_assets()[0]
    asset, _ = asset_register(name=name, owner_ref=owner, data=data)
    source = source_upsert(name="Galerie", base_url="https://galerie.example/")
    candidate = Candidate.objects.create(
        image_url="https://galerie.example/a.png", page_url="https://galerie.example/", source=source
    )
    Finding.objects.create(candidate=candidate, asset=asset, score=0.97, verdict="match", analysis_version="analysis@1")
    for model in ("source", "protectedasset", "candidate", "finding"):
        assert client.get(reverse(f"admin:workers_{model}_changelist")).status_code == 200, model
    assert b"data:image/png;base64," in client.get(reverse("admin:workers_protectedasset_changelist")).content
    assert b"0.970" in client.get(reverse("admin:workers_finding_changelist")).content
    assert client.get(reverse("admin:workers_candidate_change", args=[candidate.id])).status_code == 200
    assert client.get(reverse("admin:workers_protectedasset_change", args=[asset.id])).status_code == 200


def test_an_uploaded_asset_is_decoded_safely_and_a_bad_one_is_refused_with_the_reason(client, operator):
    url = reverse("admin:workers_protectedasset_add")
    eps = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\n"
    response = client.post(url, {"name": "EPS", "owner_ref": "RH-1", "upload": SimpleUploadedFile("x.eps", eps)})
    assert response.status_code == 200 and b"not one of the accepted formats" in response.content
    assert not ProtectedAsset.objects.exists()
    png = demoweb.asset_png(2)
    response = client.post(url, {"name": "Mohnfeld", "owner_ref": "RH-2", "upload": SimpleUploadedFile("m.png", png)})
    assert response.status_code == 302
    asset = ProtectedAsset.objects.get()
    assert (asset.name, asset.width, asset.height, len(asset.dhash)) == ("Mohnfeld", 480, 320, 16)
    page = client.get(reverse("admin:workers_protectedasset_change", args=[asset.id])).content.decode()
    assert (
        f"pdq-orb@1 — PDQ quality {asset.fingerprint['quality']}; {len(bytes(asset.keypoints)) // 40} keypoints" in page
    )
    assert asset.pdq_hashes[0] in page, "the fingerprint computed at upload is shown"
    again = client.post(url, {"name": "Again", "owner_ref": "RH-3", "upload": SimpleUploadedFile("m.png", png)})
    assert b"already registered" in again.content and ProtectedAsset.objects.count() == 1


def test_a_source_is_validated_and_a_crawl_run_started_from_the_list(client, operator):
    add = reverse("admin:workers_source_add")
    fields = {
        "name": "Shop",
        "base_url": "https://shop.example/bilder/",
        "scope": "https://other.example/",
        "priority": 5,
        "max_depth": 1,
        "max_links_per_page": 50,
        "max_images_per_page": 100,
        "sitemaps": "robots",
        "is_active": "on",
    }
    response = client.post(add, fields)
    assert response.status_code == 200 and b"must be a prefix of the base URL" in response.content
    assert client.post(add, {**fields, "scope": ""}).status_code == 302
    source = Source.objects.get()
    response = client.post(
        reverse("admin:workers_source_changelist"),
        {"action": "start_crawl", "_selected_action": [source.id]},
        follow=True,
    )
    assert b"started for 1 source" in response.content
    job = Job.objects.get(type="crawl")
    assert job.payload["url"] == "https://shop.example/bilder/" and job.source == "Shop"


def test_a_source_shows_its_schedule_its_last_and_next_run_and_why_it_waits(client, operator):
    add = reverse("admin:workers_source_add")
    fields = {
        "name": "Archiv",
        "base_url": "https://archiv.example/",
        "priority": 5,
        "max_depth": 1,
        "max_links_per_page": 50,
        "max_images_per_page": 100,
        "sitemaps": "robots",
        "is_active": "on",
        "crawl_every_minutes": 360,
        "window_start": "02:00",
        "window_end": "",
        "time_zone": "Europe/Berlin",
    }
    response = client.post(add, fields)
    assert b"a window needs both its start and its end" in response.content and not Source.objects.exists()
    assert b"unknown time zone" in client.post(add, {**fields, "window_end": "05:00", "time_zone": "Berlin"}).content
    assert client.post(add, {**fields, "window_end": "05:00"}).status_code == 302
    source = Source.objects.get()
    entry = AuditEntry.objects.get(action="source.created")
    assert entry.actor == "user:op" and "crawl_every_minutes" in entry.reason and "window_start" in entry.reason
    assert (source.crawl_every_minutes, f"{source.window_start:%H:%M}") == (360, "02:00")
    crawl_start(actor="test", sources=[source], run="by-hand")
    for n in range(3):  # a row per source however many candidates it has
        Candidate.objects.create(image_url=f"https://archiv.example/{n}.png", page_url="p", source=source)
    page = client.get(reverse("admin:workers_source_changelist")).content.decode()
    assert page.count('<th class="field-name">') == 1 and '<td class="field-candidates">3</td>' in page
    assert "every 6 h, 02:00–05:00 Europe/Berlin" in page
    assert "crawl run by-hand</a> (started " in page and ", running)" in page
    assert "previous run still running" in page
    # The run by hand has finished; it took the current slot, so the schedule waits for the next one.
    Batch.objects.update(finished_at=LeitstandNow())
    page = client.get(reverse("admin:workers_source_change", args=[source.pk])).content.decode()
    assert "this slot&#x27;s run started; next slot at " in page and "previous run still running" not in page
    # Without that slot taken and without a window, the current slot is due now.
    Source.objects.update(window_start=None, window_end=None, last_slot_at=None)
    page = client.get(reverse("admin:workers_source_change", args=[source.pk])).content.decode()
    assert '<div class="readonly">now</div>' in page


def test_a_reviewer_sees_findings_but_cannot_start_crawls_or_add_assets(client, django_user_model):
    reviewer = django_user_model.objects.create_user("rev", password="x" * 12, is_staff=True)
    reviewer.groups.add(roles_ensure()[REVIEWERS])
    client.force_login(reviewer)
    assert client.get(reverse("admin:workers_finding_changelist")).status_code == 200
    assert client.get(reverse("admin:workers_protectedasset_add")).status_code == 403
    page = client.get(reverse("admin:workers_source_changelist"))
    assert page.status_code == 200 and b"start_crawl" not in page.content


def test_recheck_plans_are_shown_and_ended_with_a_required_reason(client, operator):
    from jobs.models import Job
    from rechecks.services import plan_request
    from workers.runtime.services import job_submit

    name, owner, data = demoweb.protected_assets()[0]
    asset, _ = asset_register(name=name, owner_ref=owner, data=data)
    source = source_upsert(name="Galerie", base_url="https://galerie.example/")
    candidate = Candidate.objects.create(
        image_url="https://galerie.example/a.png", page_url="https://galerie.example/", source=source
    )
    finding = Finding.objects.create(
        candidate=candidate, asset=asset, score=1.0, verdict="match", analysis_version="analysis@1"
    )
    job = job_submit(job_type="analysis", payload={"candidate_id": candidate.id}, idempotency_key="k", actor="t").job
    plan = plan_request(job=job, finding=finding, content_hash="h")
    assert client.get(reverse("admin:rechecks_recheckplan_changelist")).status_code == 200
    assert (
        b"first check 1 h after the match"
        in client.get(reverse("admin:rechecks_recheckplan_change", args=[plan.id])).content
    )
    assert b"Recheck plan" in client.get(reverse("admin:jobs_job_change", args=[job.id])).content
    changelist = reverse("admin:rechecks_recheckplan_changelist")
    form = client.post(changelist, {"action": "abort_plans", "_selected_action": [plan.id]})
    assert form.status_code == 200 and b"Document the reason" in form.content
    empty = client.post(
        changelist, {"action": "abort_plans", "_selected_action": [plan.id], "apply": "1", "reason": ""}
    )
    assert b"This field is required" in empty.content
    done = client.post(
        changelist,
        {"action": "abort_plans", "_selected_action": [plan.id], "apply": "1", "reason": "claim withdrawn"},
        follow=True,
    )
    assert b"Abort recheck plans: 1 plan(s)." in done.content
    plan.refresh_from_db()
    assert (plan.end_reason, plan.ended_by, plan.end_note) == (
        "aborted",
        "user:op",
        "aborted by user:op: claim withdrawn",
    )
    assert Job.objects.get(pk=job.pk).state == "cancelled"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "field,value,error",
    [
        ("name", "Tab\there", "printable characters"),
        ("name", "line\nbreak", "printable characters"),
        ("base_url", "https://site.example/" + "x" * 500, "at most 500 characters"),
    ],
)
def test_the_source_form_refuses_what_would_stop_a_crawl(field, value, error):
    from dashboard.admin.pipeline import SourceForm

    data = {
        "name": "Shop",
        "base_url": "https://site.example/",
        "scope": "",
        "priority": 5,
        "max_depth": 1,
        "max_links_per_page": 50,
        "max_images_per_page": 100,
        "sitemaps": "robots",
        "is_active": True,
        field: value,
    }
    form = SourceForm(data=data)
    assert not form.is_valid()
    assert error in " ".join(str(e) for errors in form.errors.values() for e in errors)


@pytest.mark.django_db
def test_the_sources_list_says_why_a_source_was_not_started(client, operator):
    bad = Source.objects.create(name="Tab\there", base_url="https://b.example/")  # stored before the checks
    assert crawl_start(actor="test", sources=[bad], run="r1") == []
    page = client.get(reverse("admin:workers_source_changelist")).content.decode()
    assert "not started: run r1: name: must contain printable characters" in page
