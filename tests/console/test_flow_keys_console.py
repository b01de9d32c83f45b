"""The console's flow-key page of a pool: every key with work or settings, a page at a time; an
operator changes one key's weight, limit, rate limit or pause with a reason (audited); a viewer cannot; what a
job's key holds it back by is the job page's sentence."""

import uuid
from datetime import timedelta

import pytest
from django.urls import reverse

from dashboard.explain import job_explain
from dashboard.roles import OPERATORS, VIEWERS, roles_ensure
from jobs import flows, insert, leases, services
from jobs.display import clock
from jobs.models import AuditEntry, FlowKey, Job, database_now
from workers.runtime.models import WorkerProcess

pytestmark = pytest.mark.django_db
POOL = "flowconsole"


@pytest.fixture(autouse=True)
def keyed_pool():
    yield


@pytest.fixture
def as_role(client, django_user_model):
    def login(role):
        user = django_user_model.objects.create_user(f"u-{role}", password="x" * 12, is_staff=True)
        user.groups.add(roles_ensure()[role])
        client.force_login(user)
        return client

    return login


def submit(key: str, count: int) -> list[Job]:
    return [
        insert.job_insert(
            type=POOL, idempotency_key=uuid.uuid4().hex, payload={"k": key}, actor="t", flow_key_declaration="payload.k"
        ).job
        for _ in range(count)
    ]


def page(client, **query) -> str:
    answer = client.get(reverse("admin:flow_keys", args=[POOL]), query)
    assert answer.status_code == 200
    return answer.content.decode()


def test_an_operator_sees_the_keys_and_pauses_one_with_a_reason(as_role):
    client = as_role(OPERATORS)
    submit("shop-a", 3)
    submit("<script>alert(1)</script>", 1)
    html = page(client)
    assert "<code>shop-a</code>" in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>alert(1)" not in html

    answer = client.post(
        reverse("admin:flow_keys", args=[POOL]),
        {"key": "shop-a", "weight": "3", "max_running": "2", "paused": "yes", "reason": "their site asked us"},
    )
    assert answer.status_code == 302
    settings = FlowKey.objects.get(pool=POOL, key="shop-a")
    assert (settings.weight, settings.max_running, settings.paused, settings.reason) == (
        3,
        2,
        True,
        "their site asked us",
    )
    entry = AuditEntry.objects.get(action="flowkey.changed")
    assert entry.actor == "user:u-operator" and "shop-a" in entry.target and entry.reason == "their site asked us"
    assert "paused" in page(client)


def test_a_bad_change_is_refused_with_the_field_and_changes_nothing(as_role):
    client = as_role(OPERATORS)
    for form in (
        {"key": "a", "weight": "0", "reason": "r"},
        {"key": "a", "weight": "-1", "reason": "r"},
        {"key": "a", "max_running": "²", "reason": "r"},
        {"key": "a", "weight": "2", "reason": ""},
        {"key": "a\r\nb", "weight": "2", "reason": "r"},
    ):
        client.post(reverse("admin:flow_keys", args=[POOL]), form)
    assert not FlowKey.objects.exists()
    assert AuditEntry.objects.filter(action="flowkey.changed", result__startswith="refused").count() >= 3


def test_a_viewer_sees_the_page_but_cannot_change_a_key(as_role):
    client = as_role(VIEWERS)
    submit("shop-a", 1)
    assert "Change a key" not in page(client)
    client.post(reverse("admin:flow_keys", args=[POOL]), {"key": "shop-a", "paused": "yes", "reason": "no"})
    assert not FlowKey.objects.exists()


def test_the_page_goes_through_many_keys_a_page_at_a_time(as_role):
    client = as_role(VIEWERS)
    insert.jobs_insert_many(
        [
            {
                "type": POOL,
                "pool": POOL,
                "idempotency_key": f"k{n}",
                "payload": {"k": f"key-{n:04d}"},
                "priority": 5,
                "source": "",
                "max_attempts": 5,
                "schema_version": 1,
                "request_hash": "",
                "flow_key_declaration": "payload.k",
            }
            for n in range(250)
        ],
        actor="t",
        correlation_id="c",
    )
    first = page(client)
    assert "key-0000" in first and "key-0099" in first and "key-0100" not in first
    second = page(client, after="key-0099")
    assert "key-0100" in second and "key-0199" in second and "key-0099" not in second
    assert 'id="flow-keys-next"' not in page(client, after="key-0199")


def test_the_job_page_says_what_its_key_holds_it_back_by(db_clock):
    WorkerProcess.objects.create(host="host-a", pid=1, pool=POOL)
    (waiting,) = submit("shop-a", 1)
    now = database_now()
    services_set = dict(pool=POOL, key="shop-a", actor="user:op")
    from jobs.flows import flow_key_set

    flow_key_set(**services_set, reason="their site asked us", paused=True)
    assert job_explain(waiting, now=now).startswith("key shop-a is paused (by user:op at ")
    assert "their site asked us); none of its jobs is claimed until it is resumed" in job_explain(waiting, now=now)

    flow_key_set(**services_set, reason="resumed, two at a time", paused=False, max_running=1)
    submit("shop-a", 1)
    worker = leases.WorkerIdentity(host="h", pid=1, pool=POOL)
    leases.claim(pool=POOL, worker=worker, lease_seconds=60, limit=5)
    (left,) = Job.objects.filter(pool=POOL, state="planned")
    assert job_explain(left, now=database_now()) == (
        "key shop-a is at its limit (1 of 1 running); its next job starts when one of them ends"
    )

    flow_key_set(**services_set, reason="a burst of 1 per minute", max_running=None, rate=(1, 60))
    submit("shop-a", 1)
    leases.claim(pool=POOL, worker=worker, lease_seconds=60, limit=5)  # the one start the minute allows
    (left,) = Job.objects.filter(pool=POOL, state="planned")
    now = database_now()
    until = flows.rate_limited_until(FlowKey.objects.get(pool=POOL, key="shop-a"), now)
    assert 59 < (until - now).total_seconds() <= 60
    assert job_explain(left, now=now) == (
        f"key shop-a is rate-limited until {clock(until)} (at most 1 start per minute); then it takes its share again"
    )
    db_clock.advance(seconds=61)
    WorkerProcess.objects.update(last_seen_at=database_now())
    assert job_explain(left, now=database_now()).startswith("waiting for a flowconsole worker")

    flow_key_set(**services_set, reason="no limit", rate=None)
    submit("big", 30)
    assert job_explain(left, now=database_now()) == (
        "waiting for a flowconsole worker: 1 ahead of it (priority 5); 0 of key shop-a's own first, "
        "its fair share: 1 jobs of 1 other keys start first"
    )


def test_an_operator_sets_and_lifts_a_rate_limit_through_the_form(as_role):
    client = as_role(OPERATORS)
    url = reverse("admin:flow_keys", args=[POOL])
    client.post(url, {"key": "shop-a", "rate_starts": "30", "rate_seconds": "60", "reason": "their robots.txt"})
    assert FlowKey.objects.filter(key="shop-a").values_list("rate_starts", "rate_seconds").get() == (30, 60)
    assert "30 starts per minute" in page(client)
    client.post(url, {"key": "shop-a", "rate_starts": "30", "reason": "no interval"})
    assert "Not changed: rate_seconds: must be a whole number" in page(client)
    client.post(url, {"key": "shop-a", "paused": "yes", "reason": "asked to stop"})  # the rate stays
    assert FlowKey.objects.filter(key="shop-a").values_list("rate_starts", "paused").get() == (30, True)
    client.post(url, {"key": "shop-a", "no_rate": "yes", "reason": "lifted"})
    assert FlowKey.objects.filter(key="shop-a").values_list("rate_starts", "rate_seconds").get() == (None, None)


def test_pausing_through_the_form_keeps_the_keys_limit(as_role):
    client = as_role(OPERATORS)
    url = reverse("admin:flow_keys", args=[POOL])
    client.post(url, {"key": "shop-a", "max_running": "2", "reason": "a partner's limit"})
    client.post(url, {"key": "shop-a", "max_running": "", "paused": "yes", "reason": "asked to stop"})
    assert FlowKey.objects.filter(key="shop-a").values_list("max_running", "paused").get() == (2, True)
    client.post(url, {"key": "shop-a", "default_limit": "yes", "reason": "the pool's default again"})
    assert FlowKey.objects.get(key="shop-a").max_running is None


def test_the_job_page_says_who_held_a_job_and_why(make_job):
    job = make_job()
    services.job_hold(job_id=job.pk, actor="user:op", reason="the customer asked us to wait")
    job.refresh_from_db()
    held_at = job.transitions.get(to_state="held").at
    assert job_explain(job, now=database_now()) == (
        f"held by user:op at {clock(held_at)}: the customer asked us to wait; no worker claims it until it is resumed"
    )


def test_a_host_at_rest_says_so_on_the_job_page_and_in_the_key_view(as_role, db_clock):
    """Politeness holds a crawl host's key at rest until it may be asked again (FlowRest): the job page
    and the pool's key view say until when, instead of counting the job as waiting in line."""
    WorkerProcess.objects.create(host="host-a", pid=1, pool=POOL)
    (waiting,) = submit("images.example:443", 1)
    now = database_now()
    flows.flow_rests_set(pools=[POOL], key="images.example:443", until=now + timedelta(seconds=30))
    assert job_explain(waiting, now=now) == (
        f"key images.example:443 is resting until {clock(now + timedelta(seconds=30))} (politeness: the host may "
        "not be asked before then, as its last answer decided); then it takes its share again"
    )
    assert "resting until" in page(as_role(OPERATORS))
    db_clock.advance(31)
    assert "resting" not in job_explain(waiting, now=database_now())


def test_a_key_is_shown_and_changed_as_it_was_named(as_role):
    """Issue 54, item 15: the demo's source "Bildarchiv Süd" was listed as Bildarchiv S%C3%BCd, and
    its link to change it changed the key named so."""
    client = as_role(OPERATORS)
    WorkerProcess.objects.create(host="host-a", pid=1, pool=POOL)
    (job,) = submit("Bildarchiv Süd", 1)
    assert job.flow_key == "Bildarchiv S%C3%BCd"
    html = page(client)
    assert "<code>Bildarchiv Süd</code>" in html and "S%C3%BCd</code>" not in html
    answer = client.post(
        reverse("admin:flow_keys", args=[POOL]),
        {"key": "Bildarchiv Süd", "weight": "2", "paused": "yes", "reason": "a partner"},
    )
    assert answer.status_code == 302
    assert list(FlowKey.objects.values_list("key", "weight")) == [("Bildarchiv S%C3%BCd", 2)]
    assert "key Bildarchiv Süd is paused" in job_explain(job, now=database_now())
    assert 'class="selected"' in page(client, key="Bildarchiv Süd")
