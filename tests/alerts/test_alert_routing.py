"""Alerts that reach a person (issue 21): routes with owners and contacts seeded from settings and
edited in the console (audited); texts that name component, scope, diagnosis, route, owner and
runbook; escalation and re-notification on database time; tested receipt confirmed by link and by
API, and route_unconfirmed to the fallback; silences; the dead-letter review."""

import json

import pytest
from django.urls import reverse
from django.utils import timezone

from alerts import alert_rules, evaluation, notify, silences
from alerts.models import Alert, AlertEvent, ReceiptTest, Route, Silence
from alerts.receipts import receipt_tests_send
from alerts.routes import routes_ensure
from api.tokens import token_create
from dashboard.models import DeadLetterReview
from dashboard.operations.deadletters import dead_letter_review, dead_letters_refresh, groups_to_review
from dashboard.roles import OPERATORS, VIEWERS, roles_ensure
from jobs.models import AuditEntry, Job, State
from jobs.services import JobInputError
from tests.conftest import job_in_state

# Transactional: a pool runtime's heartbeat thread writes through its own connection, which a
# rolled-back test would leave behind as a live notify consumer for the tests after it.
pytestmark = pytest.mark.django_db(transaction=True)
PUBLIC = "https://leitstand.example.org"
ROUTES = {
    "operations": {
        "webhook": "https://hooks.example.org/ops",
        "secret": "s3cret",
        "email": ["ops@example.org"],
        "owner": "Platform team",
        "contacts": [{"name": "Ada Lovelace", "email": "ada@example.org", "role": "on call"}],
        "escalate_to": "management",
        "ack_page_minutes": 10,
        "renotify_minutes": 30,
    },
    "management": {"email": ["lead@example.org"], "owner": "Leads"},
    "fallback": {"email": ["fallback@example.org"]},
}


@pytest.fixture(autouse=True)
def routing(settings):
    settings.LEITSTAND_ALERT_ROUTES = ROUTES
    settings.LEITSTAND_PUBLIC_URL = PUBLIC
    settings.LEITSTAND_ALERT_FALLBACK_ROUTE = "fallback"
    settings.LEITSTAND_ALERTS = {
        rule: {**config, "for_seconds": 0, "clear_seconds": 0} for rule, config in settings.LEITSTAND_ALERTS.items()
    }
    alert_rules.rule_memory.clear()


def deliveries(**filters):
    """The queued notifications: (route, channel, event) per alert_notify job."""
    return sorted(
        (j.payload["route"], j.payload["channel"], _event(j.payload))
        for j in Job.objects.filter(type="alert_notify", **filters)
    )


def _event(payload):
    if "test_id" in payload:
        return "test"
    return (payload.get("message") or payload["alerts"][0])["event"]


def person(django_user_model, role, name=None):
    user = django_user_model.objects.create_user(name or role, password="x" * 12, is_staff=True)
    user.groups.add(roles_ensure()[role])
    return user


def fire(make_job, db_clock):
    make_job("crawl", pool="crawl")  # due, and no consumer: pool_no_consumers (page) for pool:crawl
    evaluation.alerts_evaluate(now=db_clock.now())
    return Alert.objects.get(rule="pool_no_consumers")


def test_routes_are_seeded_once_and_every_notification_names_who_and_where(make_job, db_clock):
    alert = fire(make_job, db_clock)
    ops = Route.objects.get(name="operations")
    assert (ops.owner.name, [c.name for c in ops.owner.contacts.all()]) == ("Platform team", ["Ada Lovelace"])
    assert (ops.escalate_to.name, ops.ack_page_minutes, ops.channels) == ("management", 10, ["webhook", "email"])
    Route.objects.filter(name="operations").update(renotify_minutes=5)
    routes_ensure({"operations"})
    assert Route.objects.get(name="operations").renotify_minutes == 5, "an existing route is never overwritten"
    assert (alert.severity, alert.route) == ("page", "operations")
    assert deliveries() == [("operations", "email", "fired"), ("operations", "webhook", "fired")]
    message = Job.objects.get(type="alert_notify", payload__channel="webhook").payload["message"]
    assert message["runbook"] == f"{PUBLIC}/admin/runbooks/pool_no_consumers/"
    assert message["url"] == f"{PUBLIC}/admin/alerts/alert/{alert.pk}/change/"
    assert (message["component"], message["owner"], message["contacts"][0]["email"]) == (
        "pool crawl",
        "Platform team",
        "ada@example.org",
    )
    assert "1 jobs due" in message["diagnosis"]


@pytest.mark.parametrize("rule", sorted(alert_rules.RULES))
def test_each_rule_text_names_component_scope_diagnosis_route_owner_and_runbook(rule, db):
    routes_ensure({"operations"})
    alert = Alert.objects.create(
        rule=rule,
        scope="pool:crawl",
        state=Alert.State.FIRING,
        first_seen=timezone.now(),
        last_seen=timezone.now(),
        value=3,
        threshold=1,
        diagnosis="crawl: 3 of 40 jobs affected",
        route="operations",
        severity=alert_rules.RULES[rule].severity,
    )
    message = notify.message_for(alert, "fired", title=alert_rules.RULES[rule].title)
    text = message["text"]
    for part in (
        alert_rules.RULES[rule].title,
        "pool crawl",
        "3 of 40 jobs affected",
        "Route operations",
        "owner Platform team",
        "Ada Lovelace",
        f"{PUBLIC}/admin/runbooks/{rule}/",
        alert.severity.upper(),
    ):
        assert part in text, (rule, part)
    alertmanager = notify.alertmanager_alert(message, alert.last_seen)
    assert alertmanager["labels"] | {"scope": "pool:crawl"} == {
        "alertname": notify.alertname(rule),
        "rule": rule,
        "scope": "pool:crawl",
        "severity": alert.severity,
        "route": "operations",
        "source_system": "leitstand",
        "pool": "crawl",
        "owner": "Platform team",
    }
    assert alertmanager["annotations"]["runbook_url"] == f"{PUBLIC}/admin/runbooks/{rule}/"


def test_an_unacknowledged_alert_escalates_then_is_notified_again_until_acknowledged(make_job, db_clock):
    alert = fire(make_job, db_clock)
    db_clock.advance(9 * 60)
    evaluation.alerts_evaluate(now=db_clock.now())
    assert not AlertEvent.objects.filter(alert=alert, kind="escalated").exists(), "not before its 10 minutes"
    db_clock.advance(2 * 60)
    report = evaluation.alerts_evaluate(now=db_clock.now())
    assert report["escalated"] == 1
    escalated = AlertEvent.objects.get(alert=alert, kind="escalated")
    assert "not acknowledged within 10 min (page): escalated to route management (owner Leads)" in escalated.comment
    assert ("management", "email", "escalated") in deliveries()
    evaluation.alerts_evaluate(now=db_clock.now())
    assert AlertEvent.objects.filter(alert=alert, kind="escalated").count() == 1, "once"
    db_clock.advance(31 * 60)
    assert evaluation.alerts_evaluate(now=db_clock.now())["renotified"] == 1
    renotified = [d for d in deliveries() if d[2] == "renotified"]
    assert renotified == [
        ("management", "email", "renotified"),
        ("operations", "email", "renotified"),
        ("operations", "webhook", "renotified"),
    ], "the route and, once escalated, its target"
    evaluation.alert_acknowledge(alert_id=alert.pk, actor="user:ada", comment="on it", user=None)
    db_clock.advance(61 * 60)
    evaluation.alerts_evaluate(now=db_clock.now())
    assert AlertEvent.objects.filter(alert=alert, kind="renotified").count() == 1, "acknowledged: quiet"
    assert ("management", "email", "acknowledged") in deliveries(), "the escalation target hears it was taken"


def test_a_silence_mutes_notifications_shows_and_expires(make_job, db_clock, client, django_user_model):
    operator = person(django_user_model, OPERATORS)
    client.force_login(operator)
    routes = reverse("admin:alert_routes")
    answer = client.post(routes, {"action": "silence", "rule": "pool_no_consumers", "scope": "", "minutes": "60"})
    assert answer.status_code == 302 and not Silence.objects.exists(), "a reason is required"
    client.post(
        routes,
        {"action": "silence", "rule": "pool_no_consumers", "scope": "pool:crawl", "minutes": "60", "reason": "upgrade"},
    )
    silence = Silence.objects.get()
    assert AuditEntry.objects.filter(action="alert.silenced", reason="upgrade").exists()
    alert = fire(make_job, db_clock)
    assert alert.state == "firing" and deliveries() == [], "evaluated and firing, nobody notified"
    assert "silenced until" in AlertEvent.objects.get(alert=alert, kind="fired").comment
    home = client.get(reverse("admin:index")).content.decode()
    assert "silenced until" in home and 'id="home-silences"' in home
    page = client.get(reverse("admin:alerts_alert_change", args=[alert.pk])).content.decode()
    assert 'id="alert-silenced"' in page and "upgrade" in page
    db_clock.advance(30 * 60)
    evaluation.alerts_evaluate(now=db_clock.now())
    assert deliveries() == [], "no escalation while silenced either"
    db_clock.advance(31 * 60)
    evaluation.alerts_evaluate(now=db_clock.now())
    events = list(AlertEvent.objects.filter(alert=alert).values_list("kind", flat=True))
    assert "escalated" in events, "the silence ended by itself: the unacknowledged page escalates"
    assert deliveries(), "and someone is notified"
    with pytest.raises(JobInputError, match="has ended already"):
        silences.silence_lift(silence_id=silence.pk, actor="user:op", user=None)
    with pytest.raises(JobInputError, match="a silence always ends"):
        silences.silence_create(rule="pool_no_consumers", scope="", minutes=10**6, reason="x", actor="op", user=None)
    viewer = person(django_user_model, VIEWERS)
    client.force_login(viewer)
    client.post(routes, {"action": "silence", "rule": "dlq_growth", "minutes": "60", "reason": "sneaky"})
    assert Silence.objects.count() == 1, "a viewer may not silence"


def test_a_test_notification_is_confirmed_once_by_link_and_by_api(
    db_clock, client, django_user_model, settings, pool_runtime, mailoutbox
):
    routes_ensure(set())
    assert receipt_tests_send() == 3, "every route with a channel, at once when never tested"
    assert receipt_tests_send() == 0, "not again within its interval"
    test = ReceiptTest.objects.get(route__name="operations")
    queued = Job.objects.filter(type="alert_notify")
    assert all(set(job.payload) == {"channel", "route", "test_id"} for job in queued), (
        "no token in a payload: viewers and read tokens see payloads"
    )
    Route.objects.filter(name="operations").update(webhook_url="")  # e-mail only: the webhook's host is not ours
    pool_runtime("notify").wake()
    mails = {mail.to[0]: mail for mail in mailoutbox}
    body = mails["ops@example.org"].body
    assert mails["ops@example.org"].subject == "[Leitstand] Test of alert route operations: please confirm receipt"
    link = next(line for line in body.splitlines() if line.startswith("Confirm: ")).removeprefix("Confirm: ")
    assert link.startswith(f"{PUBLIC}/admin/routes/confirm/#")
    # The token rides in the fragment, which no browser sends: it never reaches an access log.
    link, token = link.removeprefix(PUBLIC).split("#")
    assert client.get(link).status_code == 302, "login required"
    client.force_login(person(django_user_model, VIEWERS, "vera"))
    page = client.get(link).content.decode()
    assert 'id="confirm-receipt"' in page and 'id="receipt-token"' in page and token not in page
    test.refresh_from_db()
    assert test.confirmed_at is None, "opening the link (a mail scanner) confirms nothing"
    client.post(link, {"token": token})
    test.refresh_from_db()
    assert (test.confirmed_by, test.confirmed_via) == ("user:vera", "console")
    again = client.post(link, {"token": token})
    assert again.status_code == 400 and "was used already" in again.content.decode()
    forged = client.post(link, {"token": token[:-3] + "abc"})
    assert forged.status_code == 400 and "the token is not a confirmation token" in forged.content.decode()
    routes = client.get(reverse("admin:alert_routes")).content.decode()
    assert "by user:vera (console)" in routes

    management = mails["lead@example.org"].body
    token = management.split("/admin/routes/confirm/#")[1].split()[0]  # what an automated receiver reads
    _, secret = token_create(name="receiver", scopes=["alerts:confirm"])
    _, other = token_create(name="reader", scopes=["jobs:read"])
    url = "/api/v1/alert-tests/confirm"
    body = json.dumps({"token": token})
    refused = client.post(url, body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {other}")
    assert refused.status_code == 403, "the scope alerts:confirm is needed"
    answer = client.post(url, body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert answer.status_code == 200 and answer.json()["confirmed_by"] == "api:receiver"
    twice = client.post(url, body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert twice.status_code == 409 and "api:receiver" not in twice.json()["detail"], "who confirmed is not told"
    bad = client.post(
        url, json.dumps({"token": "x" * 40}), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {secret}"
    )
    assert bad.status_code == 422 and "signature" in bad.json()["detail"]

    db_clock.advance(25 * 3600)
    evaluation.alerts_evaluate(now=db_clock.now())
    (unconfirmed,) = Alert.objects.filter(rule="route_unconfirmed")
    assert (unconfirmed.scope, unconfirmed.route) == ("route:fallback", "fallback"), (
        "only the unconfirmed route fires, to the fallback"
    )
    assert "was not confirmed" in unconfirmed.diagnosis
    assert "no test of this route was ever confirmed" in unconfirmed.diagnosis
    assert ("fallback", "email", "fired") in deliveries()


def test_an_operator_sends_a_test_now_and_edits_a_route_audited(client, django_user_model, db, settings):
    routes_ensure(set())
    operator = person(django_user_model, OPERATORS)
    client.force_login(operator)
    ops = Route.objects.get(name="operations")
    client.post(reverse("admin:alert_routes"), {"action": "test", "route": str(ops.pk)})
    assert ReceiptTest.objects.get().sent_by == "user:operator"
    change = reverse("admin:alerts_route_change", args=[ops.pk])
    form = {
        "name": "operations",
        "owner": str(ops.owner_id),
        "webhook_url": "http://169.254.169.254/latest/meta-data/",
        "webhook_secret": "",
        "emails": "ops@example.org, not-an-address",
        "alertmanager_url": "",
        "ack_page_minutes": "5",
        "ack_ticket_minutes": "",
        "escalate_to": str(ops.pk),
        "renotify_minutes": "30",
        "test_every_hours": "168",
        "confirm_within_hours": "24",
        "fallback": "",
    }
    refused = client.post(change, form)
    errors = refused.context["adminform"].form.errors
    assert set(errors) == {"webhook_url", "emails", "escalate_to"}, errors
    assert "not a public address" in str(errors["webhook_url"]), "the cloud's metadata address is refused"
    ops.refresh_from_db()
    assert ops.ack_page_minutes == 10, "nothing stored"
    settings.LEITSTAND_NOTIFY_ALLOWED_TARGETS = ["10.0.0.7:8080"]  # an in-house receiver, allow-listed
    form.update(webhook_url="http://10.0.0.7:8080/hook", emails="ops@example.org\noncall@example.org", escalate_to="")
    assert client.post(change, form).status_code == 302
    ops.refresh_from_db()
    assert (ops.webhook_url, ops.webhook_secret, ops.emails, ops.ack_page_minutes) == (
        "http://10.0.0.7:8080/hook",
        "s3cret",
        ["ops@example.org", "oncall@example.org"],
        5,
    ), "an empty secret field keeps the stored secret"
    entry = AuditEntry.objects.get(action="route.changed")
    assert entry.actor == "user:operator" and "webhook_url" in entry.reason and "s3cret" not in entry.reason
    assert "webhook_secret" not in entry.reason, "an untouched secret did not change"
    client.force_login(person(django_user_model, VIEWERS))
    assert client.post(change, form).status_code == 403
    seen = client.get(change).content.decode()
    assert "s3cret" not in seen and "/hook" not in seen and "http://10.0.0.7:8080/…" in seen, (
        "a viewer sees where it sends, not the secret or the URL's path"
    )
    listing = reverse("admin:alerts_route_changelist")
    assert client.get(listing, {"webhook_secret__startswith": "s3"}).status_code == 400, "no guessing by filter"


def test_a_dead_letter_group_is_reviewed_reopened_and_alerted_when_left(make_job, db_clock, client, django_user_model):
    first = job_in_state(make_job("crawl", pool="crawl"), State.DEAD)
    Job.objects.filter(pk=first.pk).update(error_class="httpx.ConnectError", finished_at=db_clock.now())
    dead_letters_refresh()
    ((group, since),) = groups_to_review()
    assert group.review_state == "unreviewed" and since is not None
    db_clock.advance(8 * 86400)
    evaluation.alerts_evaluate(now=db_clock.now())
    (alert,) = Alert.objects.filter(rule="dlq_unreviewed")
    assert alert.scope == "type:crawl" and "1 dead-letter groups (1 dead jobs) wait for a review" in alert.diagnosis

    operator = person(django_user_model, OPERATORS)
    client.force_login(operator)
    page = client.get(reverse("admin:dead_letters")).content.decode()
    assert ">unreviewed</span>" in page and "Review…" in page
    client.post(
        reverse("admin:dead_letters"),
        {"action": "review", "type": "crawl", "error_class": "httpx.ConnectError", "step": "", "decision": "watch"},
    )
    assert not DeadLetterReview.objects.exists(), "a note is required"
    client.post(
        reverse("admin:dead_letters"),
        {
            "action": "review",
            "type": "crawl",
            "error_class": "httpx.ConnectError",
            "step": "",
            "decision": "watch",
            "note": "the site is down for maintenance",
        },
    )
    review = DeadLetterReview.objects.get()
    assert (review.decision, review.reviewed_by) == ("watch", "user:operator")
    assert AuditEntry.objects.filter(action="deadletters.reviewed").exists()
    assert groups_to_review() == []
    evaluation.alerts_evaluate(now=db_clock.now())
    assert not Alert.objects.filter(rule="dlq_unreviewed").exclude(state="resolved").exists()

    db_clock.advance(60)
    second = job_in_state(make_job("crawl", pool="crawl"), State.DEAD)
    Job.objects.filter(pk=second.pk).update(error_class="httpx.ConnectError", finished_at=db_clock.now())
    dead_letters_refresh()
    review.refresh_from_db()
    assert review.reopened_at is not None, "a new dead job reopens the group"
    ((group, _),) = groups_to_review()
    assert group.review_state == "reopened"
    page = client.get(reverse("admin:dead_letters")).content.decode()
    assert ">reopened</span>" in page and "keep watching" in page
    for error_class, step in (
        ("nothing.Else", ""),
        ("httpx.ConnectError", "nosuchstep"),
        ("httpx.ConnectError", "s" * 65),
    ):
        with pytest.raises(JobInputError, match="no dead-letter group|is not a step name"):
            dead_letter_review(
                type="crawl", error_class=error_class, step=step, decision="retry", note="x", actor="op", user=None
            )


def test_the_system_check_asks_for_absolute_links(settings):
    from config.checks import notification_links

    settings.LEITSTAND_PUBLIC_URL = "leitstand.example.org"
    assert [m.id for m in notification_links()] == ["leitstand.E015"]
    settings.LEITSTAND_PUBLIC_URL = ""
    assert [m.id for m in notification_links()] == ["leitstand.W003"], "routes configured, links relative"
    settings.LEITSTAND_ALERT_ROUTES = {}
    assert notification_links() == []


def test_digits_that_are_not_ascii_get_an_answer_not_a_500(client, django_user_model, db):
    """ "²".isdigit() is true and int("²") raises: every ID and number from a form or a URL is ASCII."""
    client.force_login(person(django_user_model, OPERATORS))
    routes = reverse("admin:alert_routes")
    for form in (
        {"action": "test", "route": "²"},
        {"action": "silence", "rule": "dlq_growth", "minutes": "²", "reason": "x"},
        {"action": "silence", "rule": "dlq_growth", "minutes": "60", "reason": "x", "alert": "²"},
        {"action": "lift", "silence": "²"},
    ):
        assert client.post(routes, form).status_code == 302, form
    assert client.get("/admin/alerts/alert/%C2%B2/change/").status_code == 302  # "does not exist", back to the list
    assert client.get(reverse("admin:dead_letters"), {"batch": "²"}).status_code == 404
    assert client.get(reverse("admin:jobs_batch_change", args=["²"])).status_code in (302, 404)
