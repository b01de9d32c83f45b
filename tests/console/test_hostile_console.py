"""The console refuses, never crashes (issue 35): malformed filters, IDs and texts get a 400 or 404,
four eyes cannot be laundered, a skip says what it did, receipt tokens expire with their test,
/metrics sees the client behind the proxy, and a session ends after its idle timeout."""

import pytest
from django.urls import reverse

from dashboard.roles import OPERATORS, REVIEWERS, SENIOR_REVIEWERS, VIEWERS, roles_ensure
from jobs.models import Job, ReviewEscalation, State
from jobs.services import JobInputError, review_escalate, review_release, review_take
from tests.console.test_console import login, review_case  # noqa: F401  (fixture and helper)

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "path",
    [
        "/admin/jobs/job/?q=%00",
        "/admin/jobs/job/?correlation_id=a%00b",
        "/admin/jobs/job/?state__exact=%00",
        "/admin/workers/source/?q=x%00",
        "/admin/jobs/auditentry/?q=%00",
    ],
)
def test_a_nul_in_a_console_filter_is_a_400(client, login, path):  # noqa: F811
    login(OPERATORS)
    assert client.get(path).status_code == 400


@pytest.mark.parametrize(
    "path",
    [
        "/admin/jobs/job/?priority__exact=abc",
        "/admin/jobs/job/?priority__exact=1e400",
        "/admin/jobs/job/?created_at__gte=not-a-date",
        "/admin/jobs/client/abc/change/",
        "/admin/jobs/client/²/change/",
        "/admin/jobs/job/not-a-job/change/",
    ],
)
def test_a_malformed_filter_or_id_is_never_a_500(client, login, path):  # noqa: F811
    login(OPERATORS)
    assert client.get(path).status_code in (200, 302, 400, 404)


def test_a_stuck_lease_release_with_a_malformed_id_releases_nothing_and_says_so(client, login, make_job):  # noqa: F811
    login(OPERATORS)
    job = make_job("crawl", pool="crawl")
    answer = client.post(
        reverse("admin:stuck_leases"), {"job": ["zz'; --", "\nforged line"], "reason": "test"}, follow=True
    )
    assert answer.status_code == 200 and "is not a job ID" in answer.content.decode()
    assert Job.objects.get(pk=job.pk).state == State.PLANNED


def test_four_eyes_cannot_be_laundered_by_a_second_escalation(django_user_model):
    groups = roles_ensure()
    sam, sue = (django_user_model.objects.create_user(n, password="x" * 12, is_staff=True) for n in ("sam", "sue"))
    for user in (sam, sue):
        user.groups.add(groups[SENIOR_REVIEWERS])
    case = review_case("launder")
    review_escalate(job_id=case.id, actor="user:sam", reason="unsure", user=sam)
    with pytest.raises(JobInputError, match="escalated already"):
        review_escalate(job_id=case.id, actor="user:sue", reason="again", user=sue)
    assert ReviewEscalation.objects.get(job=case).escalated_by == "user:sam", "the first escalator stays on record"


def test_skipping_a_case_someone_else_holds_is_refused_not_reported_done(client, login):  # noqa: F811
    case = review_case("held")
    review_take(reviewer="user:rita", seconds=600, job_id=case.id)
    with pytest.raises(JobInputError, match="held by user:rita"):
        review_release(job_id=case.id, reviewer="user:bob")
    login(REVIEWERS, "bob")
    answer = client.post(reverse("admin:review_case", args=[case.id]), {"verdict": "skip"}, follow=True)
    assert "back in the queue" not in answer.content.decode()


def test_a_receipt_token_expires_with_its_test(db_clock):
    from alerts.models import Route
    from alerts.receipts import receipt_confirm, receipt_test_send, receipt_token

    route = Route.objects.create(name="ops", emails=["ops@example.org"], confirm_within_hours=1)
    test = receipt_test_send(route=route, actor="test")
    db_clock.advance(3601)
    with pytest.raises(JobInputError, match="expired"):
        receipt_confirm(token=receipt_token(test), actor="user:late", via="console")


def test_metrics_are_allow_listed_by_the_client_address_behind_the_proxy(client, settings):
    settings.LEITSTAND_METRICS_TOKEN = ""
    settings.LEITSTAND_TRUSTED_PROXIES = 1
    settings.LEITSTAND_METRICS_ALLOWED_IPS = ["192.0.2.10"]
    through_proxy = {"REMOTE_ADDR": "10.9.9.9"}
    assert client.get("/metrics", HTTP_X_FORWARDED_FOR="198.51.100.7", **through_proxy).status_code == 401
    assert client.get("/metrics", HTTP_X_FORWARDED_FOR="192.0.2.10", **through_proxy).status_code == 200
    forged = client.get("/metrics", HTTP_X_FORWARDED_FOR="192.0.2.10, 198.51.100.7", **through_proxy)
    assert forged.status_code == 401, "what a client writes into the header itself is never used"
    settings.LEITSTAND_METRICS_ALLOWED_IPS = ["10.9.9.9"]
    assert client.get("/metrics", HTTP_X_FORWARDED_FOR="198.51.100.7", **through_proxy).status_code == 401, (
        "the proxy's own address admits nobody behind it"
    )


def test_a_console_session_ends_after_its_idle_timeout(client, login, settings, time_machine):  # noqa: F811
    assert settings.SESSION_COOKIE_AGE == 12 * 3600
    time_machine.move_to("2030-01-01 08:00", tick=False)
    login(VIEWERS)
    assert client.get(reverse("admin:index")).status_code == 200
    time_machine.move_to("2030-01-01 19:00", tick=False)  # 11 hours later: still in, and extended
    assert client.get(reverse("admin:index")).status_code == 200
    time_machine.move_to("2030-01-02 06:59", tick=False)
    assert client.get(reverse("admin:index")).status_code == 200
    time_machine.move_to("2030-01-02 19:00", tick=False)  # 12 hours without a request
    assert client.get(reverse("admin:index")).status_code == 302, "sent to the login page"


def test_a_made_up_session_cookie_stores_no_session(client):
    from django.contrib.sessions.models import Session

    client.cookies["sessionid"] = "made-up-by-a-stranger"
    for path in ("/admin/login/", "/healthz", "/api/v1/jobs"):
        client.get(path)
    assert not Session.objects.exists()


def test_an_operator_can_send_a_clients_events_nowhere(django_user_model):
    from jobs.clients import client_ensure, client_webhook_set

    client, _ = client_ensure(name="partner", actor="test")
    assert client_webhook_set(client_id=client.pk, url="", actor="test")[0].uses_global_webhook
    changed, secret = client_webhook_set(client_id=client.pk, url="none", actor="test")
    assert (changed.webhook_url, changed.uses_global_webhook, secret) == ("", False, "")


@pytest.mark.parametrize("global_url, kept", [("", False), ("https://core.example/hooks", True)])
def test_an_upgrade_leaves_clients_sending_where_they_sent(client, login, settings, global_url, kept):  # noqa: F811
    """Issue 54, item 12: the upgrade to per-client receivers marked every client without a webhook of
    its own as using the global one, so a global webhook set up later received every client's events.
    Only where a global webhook was configured did they send there; the client list says who does."""
    import importlib

    from django.apps import apps

    from jobs.models import Client

    upgrade = importlib.import_module("jobs.migrations.0030_client_uses_global_webhook")
    Client.objects.create(name="old-partner")
    Client.objects.create(name="own-receiver", webhook_url="https://partner.example/hooks")
    settings.LEITSTAND_WEBHOOK = {**settings.LEITSTAND_WEBHOOK, "url": global_url}
    upgrade.keep_the_receivers_in_use(apps, None)
    assert dict(Client.objects.values_list("name", "uses_global_webhook")) == {
        "old-partner": kept,
        "own-receiver": False,
    }
    login(OPERATORS)
    listed = client.get(reverse("admin:jobs_client_changelist"), {"webhook": "global"}).content.decode()
    assert ("old-partner" in listed) is kept and "own-receiver" not in listed
    listed = client.get(reverse("admin:jobs_client_changelist"), {"webhook": "none"}).content.decode()
    assert ("old-partner" in listed) is not kept
