"""The console pages with real records: the home's snapshot, the job page's sentence and actions,
the reviewer workspace, stuck leases, the capped jobs list, and the audit log."""

import io

import pytest
from django.urls import reverse

from dashboard.operations.snapshot import snapshot_refresh
from dashboard.roles import OPERATORS, REVIEWERS, VIEWERS, roles_ensure
from jobs import leases
from jobs.models import AuditEntry, Job, ReviewEscalation, ReviewLease, State, database_now
from jobs.services import review_take
from rechecks.models import RecheckPlan
from tests.conftest import job_in_state
from workers.pipeline import demoweb
from workers.pipeline.models import Candidate, Finding, Source
from workers.pipeline.services import asset_register
from workers.runtime.models import Pool, WorkerProcess
from workers.runtime.services import job_submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def login(client, django_user_model):
    def as_role(role: str, name: str | None = None):
        user = django_user_model.objects.create_user(name or role, password="x" * 12, is_staff=True)
        user.groups.add(roles_ensure()[role])
        client.force_login(user)
        return user

    return as_role


def review_case(key="c1", score=0.8, evidence=None, version="analysis@1"):
    """An analysis job in review with its finding and thumbnail, as the analysis handler leaves it
    (analysis@1's dHash evidence unless ``evidence`` is given)."""
    name, owner, data = demoweb.protected_assets()[0]
    asset, _ = asset_register(name=name, owner_ref=owner, data=data)
    source, _ = Source.objects.get_or_create(name="Galerie", base_url="https://galerie.example/")
    candidate = Candidate.objects.create(
        image_url=f"https://galerie.example/{key}.png",
        page_url="https://galerie.example/",
        source=source,
        content_hash="h" * 64,
    )
    job = job_submit(job_type="analysis", payload={"candidate_id": candidate.id}, idempotency_key=key, actor="t").job
    job = job_in_state(job, State.READY_FOR_REVIEW)
    Finding.objects.create(
        candidate=candidate,
        asset=asset,
        score=score,
        verdict="unclear",
        job=job,
        analysis_version=version,
        thumbnail=data,
        evidence=evidence
        or {
            "differing_bits": 13,
            "bands": {"match_at": 0.9, "no_match_below": 0.75},
            "candidate_dhash": f"{int(asset.dhash, 16) ^ 0x1FFF:016x}",  # 13 bits differ
            "asset_dhash": asset.dhash,
            "page_url": "p",
            "format": "PNG",
            "size": [480, 320],
        },
    )
    return job


def test_the_home_shows_the_three_views_from_the_snapshot(client, login, make_job, db_clock):
    login(VIEWERS)
    page = client.get(reverse("admin:index"))
    assert page.status_code == 200 and b"is <code>manage.py runpool control</code> running?" in page.content
    job_in_state(make_job("crawl", pool="crawl"), State.DEAD)
    for _ in range(3):
        make_job("crawl", pool="crawl")
    review_case()
    done = job_in_state(make_job("analysis", pool="analysis"), State.DONE)
    Job.objects.filter(pk=done.pk).update(finished_at=db_clock.now())
    figures = snapshot_refresh()
    crawl = figures["pipeline"]["types"]["crawl"]
    assert crawl["states"] == {"planned": 3, "dead": 1} and crawl["oldest_due_seconds"] >= 0
    assert figures["pipeline"]["types"]["analysis"]["done_1h"] == 1
    assert figures["pipeline"]["types"]["analysis"]["done_buckets"][-1] == 1, "done/h counts each job as it ends"
    assert figures["business"]["review"]["backlog"] == 1
    assert figures["business"]["sources"][0]["is_quiet"] is False
    page = client.get(reverse("admin:index"))
    html = page.content.decode()
    assert "runpool control</code> running?" not in html
    for part in (
        "Pipeline",
        "Business",
        "Hosts",
        "Review backlog",
        '<svg class="spark"',
        "?type__exact=crawl&amp;state__exact=dead",
    ):
        assert part in html or part.replace("&amp;", "&") in html, part


def test_the_job_page_says_why_and_offers_the_allowed_actions(client, login, make_job):
    login(OPERATORS)
    dead = job_in_state(make_job("crawl", pool="crawl"), State.DEAD)
    page = client.get(reverse("admin:jobs_job_change", args=[dead.id])).content.decode()
    assert 'id="why"' in page and "in the dead-letter queue since" in page
    assert 'id="act-retry_now"' in page and 'id="act-cancel"' in page and 'id="act-confirm"' not in page
    url = reverse("admin:jobs_job_act", args=[dead.id])
    refused = client.post(url, {"action": "retry_now", "reason": ""}, follow=True)
    assert b"reason: is required" in refused.content
    client.post(url, {"action": "retry_now", "reason": "fixed the parser"})
    assert Job.objects.get(pk=dead.pk).state == State.PLANNED
    entries = list(AuditEntry.objects.order_by("id").values_list("actor", "action", "reason", "result"))
    assert entries[0][3].startswith("refused: reason: is required")
    assert entries[1] == ("user:operator", "job.retry_now", "fixed the parser", "retried: planned")


def test_a_viewer_sees_the_sentence_but_no_actions_and_cannot_act(client, login, make_job):
    login(VIEWERS)
    dead = job_in_state(make_job("crawl", pool="crawl"), State.DEAD)
    page = client.get(reverse("admin:jobs_job_change", args=[dead.id])).content.decode()
    assert "in the dead-letter queue" in page and "act-retry_now" not in page
    client.post(reverse("admin:jobs_job_act", args=[dead.id]), {"action": "retry_now", "reason": "x"})
    assert Job.objects.get(pk=dead.pk).state == State.DEAD
    assert AuditEntry.objects.get().result.startswith("refused: ")


def test_two_reviewers_never_hold_the_same_case(db):
    first, second = review_case("a"), review_case("b")
    assert review_take(reviewer="user:r1", seconds=60).id == first.id
    assert review_take(reviewer="user:r2", seconds=60).id == second.id
    assert review_take(reviewer="user:r3", seconds=60) is None, "both cases are held"
    assert review_take(reviewer="user:r1", seconds=60).id == first.id, "a reviewer gets their own case back"


def test_a_reviewer_decides_cases_with_a_reason(client, login):
    reviewer = login(REVIEWERS)
    no_match, match, escalate = review_case("n"), review_case("m"), review_case("e")
    assert client.post(reverse("admin:review_next")).url == reverse("admin:review_case", args=[no_match.id])
    page = client.get(reverse("admin:review_case", args=[no_match.id])).content.decode()
    assert 'id="candidate-image"' in page and 'id="asset-image"' in page and "13 of 64 bits differ" in page
    assert ReviewLease.objects.get(job=no_match).reviewer == "user:reviewer"
    case_url = reverse("admin:review_case", args=[no_match.id])
    client.post(case_url, {"verdict": "no_match", "reason": ""})
    assert Job.objects.get(pk=no_match.pk).state == State.READY_FOR_REVIEW, "a decision needs a reason"
    client.post(case_url, {"verdict": "no_match", "reason": "different picture"})
    job = Job.objects.get(pk=no_match.pk)
    assert (job.state, job.completion_reason) == (State.DONE, "no_match: different picture")
    assert Finding.objects.get(job=job).evidence["review"] == {
        "verdict": "no_match",
        "by": "user:reviewer",
        "reason": "different picture",
    }
    client.post(reverse("admin:review_case", args=[match.id]), {"take": "1"})
    client.post(reverse("admin:review_case", args=[match.id]), {"verdict": "match", "reason": "same motif"})
    assert Job.objects.get(pk=match.pk).state == State.RECHECK_DUE
    assert RecheckPlan.objects.get(job=match).state == "active", "a reviewer's match is rechecked too"
    client.post(reverse("admin:review_case", args=[escalate.id]), {"take": "1"})
    client.post(reverse("admin:review_case", args=[escalate.id]), {"verdict": "escalate", "reason": "unsure: crop"})
    assert ReviewEscalation.objects.get(job=escalate).reason == "unsure: crop"
    assert client.post(reverse("admin:review_next")).url == reverse("admin:review_queue"), "only escalated cases left"
    assert b"No open case is free" in client.get(reverse("admin:review_queue")).content
    escalated = client.get(reverse("admin:review_queue") + "?queue=escalated").content.decode()
    assert str(escalate.id)[:8] in escalated
    assert [a for (a,) in AuditEntry.objects.order_by("id").values_list("action")] == [
        "review.no_match",
        "review.no_match",
        "review.match",
        "review.escalate",
    ]
    assert reviewer


def test_a_case_held_by_another_reviewer_cannot_be_decided(client, login):
    case = review_case("h")
    review_take(reviewer="user:someone", seconds=300)
    login(REVIEWERS)
    page = client.get(reverse("admin:review_case", args=[case.id])).content.decode()
    assert "user:someone holds this case" in page
    client.post(reverse("admin:review_case", args=[case.id]), {"verdict": "no_match", "reason": "x"})
    assert Job.objects.get(pk=case.pk).state == State.READY_FOR_REVIEW
    assert "held by user:someone" in AuditEntry.objects.get().result


def test_reading_a_case_takes_nothing_only_a_post_does(client, login):
    case = review_case("g")
    login(REVIEWERS)
    page = client.get(reverse("admin:review_case", args=[case.id])).content.decode()
    assert 'id="take-case"' in page and 'id="review-form"' not in page
    assert client.get(reverse("admin:review_next")).url == reverse("admin:review_queue")
    assert not ReviewLease.objects.exists(), "a GET changed nothing"
    client.post(reverse("admin:review_case", args=[case.id]), {"take": "1"})
    assert ReviewLease.objects.get(job=case).reviewer == "user:reviewer"
    assert 'id="review-form"' in client.get(reverse("admin:review_case", args=[case.id])).content.decode()


def test_an_escalated_case_is_decided_by_a_senior_reviewer_who_did_not_escalate_it(client, django_user_model):
    from dashboard.roles import SENIOR_REVIEWERS, roles_ensure
    from jobs.services import review_escalate

    groups = roles_ensure()
    people = {}
    for name, role in (("rita", REVIEWERS), ("sam", SENIOR_REVIEWERS), ("sue", SENIOR_REVIEWERS)):
        people[name] = django_user_model.objects.create_user(name, password="x" * 12, is_staff=True)
        people[name].groups.add(groups[role])
    case = review_case("esc")
    review_escalate(job_id=case.id, actor="user:sam", reason="unsure: a crop", user=people["sam"])
    url = reverse("admin:review_case", args=[case.id])
    for name in ("rita", "sam"):  # a plain reviewer, and the senior who escalated it
        client.force_login(people[name])
        client.post(url, {"take": "1"})
        client.post(url, {"verdict": "no_match", "reason": "decided anyway"})
        assert Job.objects.get(pk=case.pk).state == State.READY_FOR_REVIEW, name
    client.force_login(people["rita"])
    assert client.post(reverse("admin:review_next") + "?queue=escalated").status_code == 403
    client.force_login(people["sue"])
    client.post(url, {"take": "1"})
    client.post(url, {"verdict": "no_match", "reason": "another picture"})
    assert Job.objects.get(pk=case.pk).state == State.DONE
    refusals = list(AuditEntry.objects.filter(result__startswith="refused").values_list("actor", "result"))
    assert [actor for actor, _ in refusals] == ["user:rita", "user:sam"]
    assert "escalated this case" in refusals[1][1]


def test_stuck_leases_are_listed_and_released_with_a_reason(client, login, make_job, worker, db_clock):
    login(OPERATORS)
    make_job("crawl", pool="crawl")
    (claimed,) = leases.claim(pool="crawl", worker=worker, lease_seconds=600, start=True)
    healthy_page = client.get(reverse("admin:stuck_leases")).content.decode()
    assert "No stuck leases" in healthy_page
    db_clock.advance(120)  # the heartbeat is older than 3 × the synthetic type's interval
    page = client.get(reverse("admin:stuck_leases")).content.decode()
    assert str(claimed.id)[:8] in page and "gone" in page
    client.post(reverse("admin:stuck_leases"), {"job": [str(claimed.id)], "reason": "host-a was decommissioned"})
    assert Job.objects.get(pk=claimed.id).state == State.PLANNED
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.reason, entry.result) == (
        "lease.release",
        "host-a was decommissioned",
        "released: planned again, due now",
    )


def test_the_jobs_list_searches_exact_ids_and_never_counts_everything(client, login, make_job, settings):
    login(VIEWERS)
    job = make_job("crawl", pool="crawl", correlation_id="order-77")
    for _ in range(3):
        make_job("crawl", pool="crawl")
    changelist = reverse("admin:jobs_job_changelist")
    for term in (str(job.id), "order-77", job.idempotency_key):
        page = client.get(changelist, {"q": term}).content.decode()
        assert str(job.id)[:8] in page and "1 result" in page, term
    assert client.get(changelist, {"q": "not-a-uuid"}).status_code == 200
    from dashboard.admin.jobs import EstimatedCountPaginator

    assert EstimatedCountPaginator(Job.objects.filter(pool="crawl").order_by("id"), 100).count == 4, (
        "few rows expected: counted exactly"
    )
    EstimatedCountPaginator.CAP = 0
    try:
        estimated = EstimatedCountPaginator(Job.objects.filter(pool="crawl").order_by("id"), 100).count
        assert estimated >= 1, "many rows expected: the planner's estimate, no count"
    finally:
        EstimatedCountPaginator.CAP = 1_000
    assert client.get(changelist, {"pool": "crawl", "state__exact": "planned"}).status_code == 200


def test_short_ids_are_found_in_the_list_and_in_urls_never_a_500(client, login, db):
    import uuid

    from bench.throughput import plan_synthetic

    login(VIEWERS)
    first, second = uuid.UUID("abcdef12-3456-4000-8000-000000000001"), uuid.UUID("abcdef12-9999-4000-8000-000000000002")
    for job_id in (first, second):
        plan_synthetic(pool="crawl", tag="short", payload={}, job_id=job_id)
    changelist = reverse("admin:jobs_job_changelist")
    both = client.get(changelist, {"q": "abcdef12"}).content.decode()
    assert "2 results" in both
    assert "1 result" in client.get(changelist, {"q": "abcdef12-99"}).content.decode()
    assert "0 results" in client.get(changelist, {"q": "abcde"}).content.decode(), "under 6 digits: no prefix search"

    def change(object_id):
        return client.get(f"/admin/jobs/job/{object_id}/change/")

    assert change("abcdef12").url == f"{changelist}?q=abcdef12", "ambiguous: the list of its matches"
    assert change(first).status_code == 200
    assert change("ABCDEF12-3456").url == reverse("admin:jobs_job_change", args=[first])
    assert change("0123456789").status_code == 404 and change("zz'; --").status_code == 404
    assert change("078f7272").status_code == 404, "the issue's 500"

    # Issue 55: UUIDv7's first 8 digits are the creation minute, the same for every job created in it.
    # The short form adds the random tail; the list shows it, and the search and the URL find it.
    listed = client.get(changelist, {"q": "abcdef12"}).content.decode()
    assert "abcdef12…000001" in listed and "abcdef12…000002" in listed
    assert "1 result" in client.get(changelist, {"q": "abcdef12…0002"}).content.decode()
    assert change("abcdef12…0002").url == reverse("admin:jobs_job_change", args=[second])
    assert change("abcdef12...0001").url == reverse("admin:jobs_job_change", args=[first])
    assert change("abcdef12…zz").status_code == 404 and change("abcdef12…0003").status_code == 404


def test_jobs_created_together_show_short_ids_that_tell_them_apart(make_job):
    from jobs.selectors import short_id, short_id_query

    jobs = [make_job("crawl", pool="crawl") for _ in range(50)]
    shown = {short_id(job.id) for job in jobs}
    assert len(shown) == 50, "no two alike"
    for job in jobs[:5]:
        assert list(Job.objects.filter(short_id_query(short_id(job.id))).values_list("pk", flat=True)) == [job.pk]


def test_the_bulk_dry_run_fits_the_filter_and_only_the_confirmed_dry_run_starts(client, login, make_job):
    from dashboard.models import BulkOperation
    from dashboard.operations.bulk import bulk_step

    login(OPERATORS)
    planned = [make_job("crawl", pool="crawl") for _ in range(2)]
    stored = [job_in_state(make_job("crawl", pool="crawl"), State.RESULT_STORED) for _ in range(3)]
    bulk_url = reverse("admin:bulk")
    for state, action, eligible in (
        ("planned", "cancel", 2),
        ("result_stored", "confirm", 3),
        ("dead", "retry_now", 0),
    ):
        preview = client.get(f"{bulk_url}?state__exact={state}").context["preview"]
        assert (preview["action"], preview["eligible"]) == (action, eligible), state
    page = client.get(f"{bulk_url}?state__exact=result_stored").content.decode()
    assert 'value="Start: Confirm the outcome 3 jobs"' in page and 'name="action_name" value="confirm"' in page
    assert 'data-action="cancel"' in page and "<select" not in page, "another action is another dry run, not a select"

    url = f"{bulk_url}?state__exact=result_stored"
    unconfirmed = client.post(url, {"action_name": "confirm", "reason": "checked", "eligible": 3})
    assert "tick the confirmation" in unconfirmed.content.decode()
    stale = client.post(url, {"action_name": "confirm", "reason": "checked", "eligible": 2, "confirm": "yes"})
    assert "the dry run changed: 3 jobs are eligible" in stale.content.decode()
    other = client.post(url, {"action_name": "retry_now", "reason": "checked", "eligible": 3, "confirm": "yes"})
    assert "no job matching this filter is eligible" in other.content.decode(), "a stored result is not retried"
    assert not BulkOperation.objects.exists()

    started = client.post(url, {"action_name": "confirm", "reason": "checked by hand", "eligible": 3, "confirm": "yes"})
    assert started.status_code == 302 and BulkOperation.objects.get().action == "confirm"
    while bulk_step():
        pass
    assert {Job.objects.get(pk=j.pk).state for j in stored} == {State.DONE}
    assert {Job.objects.get(pk=j.pk).state for j in planned} == {State.PLANNED}
    assert Job.objects.get(pk=stored[0].pk).completion_reason == "checked by hand"


def test_a_bulk_action_on_a_filter_is_previewed_pinned_and_run_in_batches(client, login, make_job, db_clock):
    from dashboard.models import BulkOperation
    from dashboard.operations.bulk import bulk_step

    login(OPERATORS)
    dead = [job_in_state(make_job("crawl", pool="crawl"), State.DEAD) for _ in range(5)]
    planned = make_job("crawl", pool="crawl")
    other = job_in_state(make_job("analysis", pool="analysis"), State.DEAD)
    url = reverse("admin:bulk") + "?type__exact=crawl"
    preview = client.get(url).content.decode()
    assert 'id="bulk-eligible">5<' in preview and "1 planned" in preview
    assert "is not a filter" in client.get(reverse("admin:bulk") + "?payload=x").content.decode()
    response = client.post(url, {"action_name": "retry_now", "reason": "parser fixed", "confirm": "yes", "eligible": 5})
    operation = BulkOperation.objects.get()
    assert response.url == reverse("admin:dashboard_bulkoperation_change", args=[operation.pk])
    assert (operation.eligible, operation.filter, operation.state) == (5, {"type": "crawl"}, "running")
    db_clock.advance(1)
    late = job_in_state(make_job("crawl", pool="crawl"), State.DEAD)  # after the high-water mark
    assert bulk_step(batch=2) == 2
    page = client.get(reverse("admin:dashboard_bulkoperation_change", args=[operation.pk])).content.decode()
    assert 'id="bulk-progress"' in page and "40 %" in page and 'http-equiv="refresh"' in page
    while BulkOperation.objects.get().state == "running":
        bulk_step(batch=2)
    operation.refresh_from_db()
    assert (operation.changed, operation.skipped, operation.batches) == (5, 0, 3)
    assert {Job.objects.get(pk=j.pk).state for j in dead} == {State.PLANNED}
    assert Job.objects.get(pk=late.pk).state == State.DEAD, "created after the operator looked: untouched"
    assert Job.objects.get(pk=other.pk).state == State.DEAD and Job.objects.get(pk=planned.pk).state == State.PLANNED
    assert list(AuditEntry.objects.order_by("id").values_list("action", flat=True)) == [
        "bulk.retry_now.start",
        "bulk.retry_now.done",
    ]
    assert (
        Job.objects.get(pk=dead[0].pk).transitions.order_by("-id").first().cause
        == f"bulk {operation.pk} (retry now): parser fixed"
    )


def test_release_and_send_to_review_from_the_job_page_go_through_the_jobs_services(client, login, make_job):
    login(OPERATORS)
    running = job_in_state(make_job("crawl", pool="crawl"), State.RUNNING)
    unclear = job_in_state(make_job("analysis", pool="analysis"), State.UNCLEAR)

    def act(job, name, reason):
        return client.post(reverse("admin:jobs_job_act", args=[job.id]), {"action": name, "reason": reason})

    act(running, "release", "")
    assert Job.objects.get(pk=running.pk).state == State.RUNNING, "a release needs a reason"
    act(running, "release", "host-a is gone")
    act(unclear, "review", "customer asked")
    assert Job.objects.get(pk=running.pk).state == State.PLANNED
    assert Job.objects.get(pk=unclear.pk).state == State.READY_FOR_REVIEW
    act(running, "release", "again")
    assert AuditEntry.objects.order_by("-id").first().result == "refused: job: the job is planned: no lease to release"


def test_the_children_link_lists_exactly_the_children(client, login, make_job):
    """Django applies only list filters that have output: the hidden ones once listed every job."""
    login(VIEWERS)
    parent = make_job()
    children = {make_job(parent_id=parent.pk).pk for _ in range(2)}
    make_job()
    listed = client.get(f"/admin/jobs/job/?parent={parent.pk}")
    assert {j.pk for j in listed.context["cl"].result_list} == children
    assert "By parent" in listed.content.decode(), "the applied filter is shown, with All to clear it"
    nothing = client.get("/admin/jobs/job/?parent=not-a-uuid")
    assert nothing.status_code == 200 and list(nothing.context["cl"].result_list) == []


def test_the_pools_page_shows_a_stall_and_the_workers_page_how_each_worker_ended(client, login):
    Pool.objects.filter(name="crawl").update(
        stalled_since=database_now(),
        stalled_on="host-a:4242",
        stall_note="due work, 2 idle workers and no claim for 15 s",
    )
    WorkerProcess.objects.create(
        host="host-a", pid=77, pool="crawl", stopped_at=database_now(), stop_reason="worker host-a:77 killed by SIGKILL"
    )
    login(OPERATORS)
    pools = client.get(reverse("admin:workers_pool_changelist")).content.decode()
    assert ">stalled</span> since" in pools and "host-a:4242" in pools and "no claim for 15 s" in pools
    assert "claiming" in pools, "the other pools"
    workers = client.get(reverse("admin:workers_workerprocess_changelist")).content.decode()
    assert "worker host-a:77 killed by SIGKILL" in workers


def test_live_parts_answer_htmx_alone_and_carry_the_navigation_counts(client, login, make_job, worker):
    from jobs.batches import batch_create

    login(OPERATORS)
    stuck = job_in_state(make_job("crawl", pool="crawl"), State.RUNNING)
    Job.objects.filter(pk=stuck.pk).update(lease_expires_at=database_now(), heartbeat_at=None)
    snapshot_refresh()
    home = client.get(reverse("admin:index")).content.decode()
    assert 'id="console-nav"' in home and 'data-live hx-get="/admin/"' in home and "View site" not in home
    assert 'data-count="stuck"' in home and "htmx-2.min.js" in home and "dashboard/live.js" in home
    live = client.get(reverse("admin:index"), headers={"HX-Request": "true"}).content.decode()
    assert "<html" not in live and 'id="pipeline"' in live and 'id="home-stuck"' in live
    assert 'id="console-nav" aria-label="Console" hx-swap-oob="true"' in live, "the counts come along"
    assert '<span class="nav-count nav-count-alarm">1</span>' in live, "one stuck lease"

    batch, _ = batch_create(key="b", name="b", created_by="t")
    make_job("crawl", pool="crawl", batch_id=batch.pk)
    url = reverse("admin:jobs_batch_change", args=[batch.pk])
    part = client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert "<html" not in part and 'id="batch-ended"' in part and "of <strong>1</strong> members" in part
    assert 'id="batch-timeline"' in part and '<g class="axis">' in part, "the chart has axes"
    assert client.get(reverse("admin:jobs_batch_change", args=["x"])).status_code in (302, 404)
    changelist = client.get(reverse("admin:jobs_job_changelist")).content.decode()
    assert 'id="console-nav"' in changelist and 'aria-current="page"' in changelist
    assert client.get("/favicon.ico").status_code == 301


def test_pools_are_paused_and_resumed_from_the_home_with_a_reason(client, login):
    login(VIEWERS)
    act = reverse("admin:pool_act", args=["crawl"])
    assert client.post(act, {"action": "pause", "reason": "x"}).status_code == 403
    assert not Pool.objects.filter(name="crawl", is_paused=True).exists(), "a viewer cannot pause"
    login(OPERATORS)
    home = client.get(reverse("admin:index")).content.decode()
    assert f'action="{act}"' in home and 'hx-preserve="true"' in home
    assert client.get(act).status_code == 405
    client.post(act, {"action": "pause", "reason": " "})
    assert not Pool.objects.filter(name="crawl", is_paused=True).exists(), "a reason is required"
    client.post(act, {"action": "pause", "reason": "the site asked us to slow down"})
    pool = Pool.objects.get(name="crawl")
    assert pool.is_paused and pool.reason == "the site asked us to slow down"
    assert "Resume" in client.get(reverse("admin:index")).content.decode()
    client.post(act, {"action": "resume", "reason": "they are fine again"})
    assert not Pool.objects.get(name="crawl").is_paused
    audit = list(AuditEntry.objects.filter(target="pool crawl").values_list("action", "result"))
    assert audit[-2:] == [("pool.pause", "paused"), ("pool.resume", "resumed")] and audit[0][1].startswith("refused")
    pools = client.get(reverse("admin:workers_pool_changelist")).content.decode()
    assert '<span class="badge live">running</span>' in pools and "icon-no.svg" not in pools


def test_the_jobs_list_says_what_a_job_is_about_and_times_have_seconds(client, login, make_job):
    from dashboard.display import duration

    login(VIEWERS)
    job = make_job("crawl", pool="crawl", correlation_id="import-2026-12-01", payload={"url": "https://a.example/x"})
    snapshot_refresh()
    page = client.get(reverse("admin:jobs_job_changelist"), {"type__exact": "crawl"}).content.decode()
    assert "https://a.example/x" in page and "import-2026-12-01" in page
    assert (
        '?type__exact=crawl&amp;state__exact=planned" data-key="tab:planned">planned <span class="nav-count">1</span>'
        in page
    )
    assert 'id="state-tabs-live" data-live' in page
    tabs = client.get(reverse("admin:jobs_job_changelist"), {"type__exact": "crawl"}, headers={"HX-Request": "true"})
    assert 'id="state-tabs"' in tabs.content.decode() and "<html" not in tabs.content.decode()
    record = client.get(reverse("admin:jobs_job_change", args=[job.pk])).content.decode()
    assert "Attempt rows:" in record and job.created_at.strftime("%Y-%m-%d %H:%M:%S") in record
    assert [duration(v) for v in (0.9478739999906338, 48.2, 1234.0, 185_000.0, None)] == [
        "0.9 ms",
        "48 ms",
        "1.2 s",
        "3 min 5 s",
        "—",
    ]


def test_a_case_of_analysis_2_shows_the_deciding_stage_and_its_evidence(client, login):
    from PIL import Image

    from workers.pipeline import analysis, images, matching

    login(REVIEWERS)
    original = demoweb.artwork(1)
    crop = original.crop((60, 40, 400, 280)).rotate(8, fillcolor="white")
    index = matching.MemoryIndex({1: ("Abendlicht", matching.fingerprint(original))})
    by_keypoints = matching.compare(matching.candidate(crop), index)
    assert by_keypoints.stage == "keypoints"
    bands = {"bands": {"match_at": 0.9, "no_match_below": 0.75}, "size": list(crop.size), "page_url": "p"}
    case = review_case("k1", 0.85, {**by_keypoints.evidence, **bands}, "analysis@2")
    page = client.get(reverse("admin:review_case", args=[case.pk])).content.decode()
    decided = page[page.index('id="decided-by"') :]
    assert (
        f"<strong>{by_keypoints.evidence['inliers']}</strong> of {by_keypoints.evidence['matches']} matched keypoints"
        in decided
    )
    svg = page[
        page.index('<svg class="keypoint-pairs"') : page.index("</svg>", page.index('<svg class="keypoint-pairs"'))
    ]
    assert (
        svg.count("<line ") == len(by_keypoints.evidence["pairs"])
        and svg.count('<image href="data:image/png;base64,') == 2
    )
    assert "analysis@2" in page and 'id="hash-grid"' not in page

    mirrored = Image.open(io.BytesIO(demoweb.asset_png(1))).transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    by_hash = analysis.compare(images.decode(demoweb.encode(mirrored, "PNG")), bands["bands"], index=index)
    case = review_case("h1", 0.85, {**by_hash.evidence, **bands}, "analysis@2")
    page = client.get(reverse("admin:review_case", args=[case.pk])).content.decode()
    assert f"<strong>{by_hash.evidence['differing_bits']}</strong> of 256 bits differ, the candidate mirrored" in page
    assert f'aria-label="{by_hash.evidence["differing_bits"]} of 256 bits differ"' in page
    assert page.count('<rect x="') == 256, "the PDQ hash as a 16 × 16 grid"


def test_a_case_shows_its_place_in_the_queue_the_bits_that_differ_and_only_review_history(client, login):
    login(REVIEWERS)
    older, case = review_case("r1", 0.8), review_case("r2", 0.8)
    snapshot_refresh()
    home = client.get(reverse("admin:index")).content.decode()
    assert 'id="review-start"' in home and 'id="home-start-review"' in home, "a reviewer's home starts with the queue"
    page = client.get(reverse("admin:review_case", args=[case.pk])).content.decode()
    assert '<strong id="case-position">Case 2 of 2</strong>' in page
    assert 'id="hash-grid"' in page and "bits differ" in page and 'data-view="difference"' in page
    from jobs.models import Transition

    Transition.objects.create(
        job=case, from_state="running", to_state="unclear", lease_version=1, cause="undecided", actor="w"
    )
    page = client.get(reverse("admin:review_case", args=[case.pk])).content.decode()
    history = page[page.index("<h2>History</h2>") :]
    assert "running → unclear" in history and "undecided" in history
    assert "∅ → planned" not in history, "the engine's own transitions stay on the job page"
    client.post(reverse("admin:review_case", args=[older.pk]), {"take": "1"})
    held = client.get(reverse("admin:review_case", args=[older.pk])).content.decode()
    assert 'id="hold-countdown" data-expires="' in held and "Case 1 of 2" in held


def test_the_stuck_leases_dead_letters_and_a_running_job_keep_themselves_current(client, login, make_job):
    login(OPERATORS)
    stuck = job_in_state(make_job("crawl", pool="crawl"), State.RUNNING)
    Job.objects.filter(pk=stuck.pk).update(lease_expires_at=database_now(), heartbeat_at=None)
    job_in_state(make_job("crawl", pool="crawl"), State.DEAD)
    htmx = {"HX-Request": "true"}
    for url, part in (
        (reverse("admin:stuck_leases"), 'id="stuck-table"'),
        (reverse("admin:dead_letters"), 'id="dead-letter-groups"'),
        (reverse("admin:jobs_job_change", args=[stuck.pk]), 'id="why"'),
    ):
        page = client.get(url).content.decode()
        assert "data-live hx-get=" in page and part in page, url
        live = client.get(url, headers=htmx).content.decode()
        assert "<html" not in live and part in live, url
    job_part = client.get(reverse("admin:jobs_job_change", args=[stuck.pk]), headers=htmx).content.decode()
    assert 'id="job-path" hx-swap-oob="true"' in job_part, "the path comes along"
    done = job_in_state(make_job("crawl", pool="crawl"), State.DONE)
    assert "data-live" not in client.get(reverse("admin:jobs_job_change", args=[done.pk])).content.decode(), "ended"


def test_jobs_are_found_by_what_they_are_about_on_every_path_that_creates_them(client, login, make_job):
    from dashboard.operations.bulk import bulk_preview
    from rechecks.handler import subject as recheck_subject
    from workers.pipeline.analysis import subject as analysis_subject

    login(OPERATORS)
    crawl = {"source_id": 1, "depth": 0, "run": "r"}
    for path in ("a.example/x", "a.example/y", "b.example/z"):
        make_job("crawl", pool="crawl", payload={**crawl, "url": f"https://{path}"})
    synthetic = make_job("synthetic", pool="crawl", payload={})
    assert Job.objects.get(pk=synthetic.pk).subject == "", "a type without a subject"
    changelist = reverse("admin:jobs_job_changelist")
    assert "2 results" in client.get(changelist, {"subject": "https://a.example/"}).content.decode()
    assert "1 result" in client.get(changelist, {"q": "https://b.example/"}).content.decode()
    assert bulk_preview("cancel", {"subject": "https://a.example/"})["eligible"] == 2
    case = review_case("subject")  # an analysis job: about its candidate's image
    assert Job.objects.get(pk=case.pk).subject == "https://galerie.example/subject.png"
    assert analysis_subject({"candidate_id": "x"}) == "" and recheck_subject({"plan_id": 7, "sequence": 1}) == (
        "recheck plan 7"
    )
    parent = make_job("crawl", pool="crawl", payload={**crawl, "url": "https://p.example/"})
    child = make_job("crawl", pool="crawl", parent_id=parent.pk, payload={**crawl, "url": "https://p.example/c"})
    assert Job.objects.get(pk=child.pk).subject == "https://p.example/c", "a spawned child gets its own"


def test_pausing_from_the_pools_page_asks_why_first(client, login):
    login(OPERATORS)
    changelist = reverse("admin:workers_pool_changelist")
    selected = {"action": "pause_pools", "_selected_action": ["crawl"]}
    asked = client.post(changelist, selected).content.decode()
    assert 'id="pool-reason-form"' in asked and not Pool.objects.filter(name="crawl", is_paused=True).exists()
    again = client.post(changelist, {**selected, "reason": "  "}).content.decode()
    assert "A reason is required" in again and not Pool.objects.filter(name="crawl", is_paused=True).exists()
    client.post(changelist, {**selected, "reason": "maintenance of the source"})
    assert Pool.objects.get(name="crawl").reason == "maintenance of the source"
