"""API clients own what they submit (issue 17, finding 3): a client sees and acts on its own jobs,
batches and recheck plans only (404 for another's, nothing leaked), what follows from a job inherits
its client, ``jobs:all`` sees everything, each client's events go to its own webhook, and tokens are
created, rotated and revoked by a command and by an audited console page."""

import json
import uuid

import pytest
from django.core.management import CommandError, call_command

from api.models import ApiToken
from api.tokens import token_check, token_create
from jobs.insert import job_insert
from jobs.models import AuditEntry, Batch, Client, Job, State, WebhookEvent
from jobs.services import job_confirm
from rechecks.services import plan_request
from tests.console.test_console import review_case
from tests.support.db import migrate_to
from tests.support.receiver import Receiver, signature_valid
from workers.runtime.services import job_submit
from workers.runtime.webhook import SIGNATURE_HEADER
from workers.runtime.webhook_sweep import deliveries_make

SCOPES = ["jobs:read", "jobs:write", "jobs:synthetic", "reviews:write"]


def bearer(client_name, *extra, name=None):
    _, clear = token_create(name=name or uuid.uuid4().hex[:8], client=client_name, scopes=[*SCOPES, *extra])
    return {"HTTP_AUTHORIZATION": f"Bearer {clear}"}


def submit(http, headers, key="order-1", **fields):
    body = {"type": "synthetic", "payload": {"steps": ["a"]}, "idempotency_key": key, **fields}
    return http.post("/api/v1/jobs", json.dumps(body), content_type="application/json", **headers)


def submit_batch(http, headers, key="import-1"):
    body = {"key": key, "name": "import", "jobs": [{"type": "synthetic", "payload": {}, "idempotency_key": "b-1"}]}
    return http.post("/api/v1/batches", json.dumps(body), content_type="application/json", **headers)


@pytest.mark.django_db
def test_a_client_sees_and_acts_on_its_own_only(client):
    shop, partner = bearer("shop"), bearer("partner")
    mine = submit(client, shop).json()
    batch = submit_batch(client, shop).json()
    system = job_submit(job_type="synthetic", payload={}, idempotency_key="console-crawl", actor="user:op").job

    for path in (f"/api/v1/jobs/{mine['id']}", f"/api/v1/jobs/{system.pk}", f"/api/v1/batches/{batch['id']}"):
        answer = client.get(path, **partner)
        assert answer.status_code == 404, path
        assert "shop" not in answer.content.decode() and "order-1" not in answer.content.decode()
    assert client.get(f"/api/v1/jobs/{uuid.uuid4()}", **partner).json()["detail"].startswith("no job ")
    assert client.get("/api/v1/jobs", **partner).json()["items"] == []
    cancel = client.post(f"/api/v1/jobs/{mine['id']}/cancel", "{}", content_type="application/json", **partner)
    assert cancel.status_code == 404 and Job.objects.get(pk=mine["id"]).state == State.PLANNED

    # The same key from another client is another job: no 422 naming the first client's job.
    theirs = submit(client, partner, payload={"steps": ["b"]})
    assert theirs.status_code == 201 and theirs.json()["id"] != mine["id"]
    assert submit_batch(client, partner).status_code == 201

    # The shop sees its own job and batch; the PHP core with jobs:all sees everything.
    listed = {job["id"] for job in client.get("/api/v1/jobs", **shop).json()["items"]}
    assert mine["id"] in listed and theirs.json()["id"] not in listed and str(system.pk) not in listed
    assert client.get(f"/api/v1/batches/{batch['id']}", **shop).status_code == 200
    core = bearer("php-core", "jobs:all")
    every = {job["id"] for job in client.get("/api/v1/jobs", {"limit": 500}, **core).json()["items"]}
    assert {mine["id"], theirs.json()["id"], str(system.pk)} <= every
    assert client.get(f"/api/v1/batches/{batch['id']}", **core).status_code == 200
    cancelled = client.post(f"/api/v1/jobs/{system.pk}/cancel", "{}", content_type="application/json", **core)
    assert cancelled.status_code == 200 and cancelled.json()["state"] == State.CANCELLED


@pytest.mark.django_db
def test_a_client_cannot_reach_what_other_clients_crawls_found(client):
    """Candidates, sources and assets are shared: analysing another client's candidate would show its
    finding's URLs and asset in the job record. Pipeline work needs jobs:all."""
    partner = bearer("partner")
    for job_type, payload in (
        ("analysis", {"candidate_id": 1}),
        ("crawl", {"source_id": 1, "url": "https://a.example/"}),
    ):
        answer = submit(client, partner, key=f"probe-{job_type}", type=job_type, payload=payload)
        assert answer.status_code == 403 and "jobs:all" in answer.json()["detail"]
    assert not Job.objects.filter(idempotency_key__startswith="probe-").exists()


@pytest.mark.django_db
def test_children_inherit_their_parents_key_namespace(client):
    """Two clients' crawl runs of the same name never share children (spawn keys are per run)."""
    shop = Client.objects.create(name="shop")
    partner = Client.objects.create(name="partner")
    runs = [
        job_submit(job_type="synthetic", payload={}, idempotency_key="daily", actor="t", client=owner).job
        for owner in (shop, partner)
    ]
    children = [
        job_insert(type="synthetic", idempotency_key="daily:page-1", payload={}, actor="t", parent_id=run.pk).job
        for run in runs
    ]
    assert children[0].pk != children[1].pk
    assert [c.key_namespace for c in children] == ["client:shop", "client:partner"]
    assert [c.client_id for c in children] == [shop.pk, partner.pk]


@pytest.mark.django_db
def test_what_follows_from_a_job_belongs_to_its_client(client):
    shop, partner = bearer("shop"), bearer("partner")
    case = review_case("api")  # an analysis job with a finding, ready for review
    owner = Client.objects.get(name="shop")
    parent = Job.objects.get(pk=case.parent_id) if case.parent_id else case
    Job.objects.filter(pk__in=[parent.pk, case.pk]).update(client=owner)  # as if the shop had submitted the crawl
    child = job_insert(type="synthetic", idempotency_key="child", payload={}, actor="t", parent_id=case.pk).job
    assert child.client_id == owner.pk, "a child belongs to its parent's client"

    plan = plan_request(job=case, finding=case.findings.get(), content_hash="h")
    assert client.get(f"/api/v1/rechecks/{plan.pk}", **partner).status_code == 404
    decision = json.dumps({"reason": "not mine"})
    refused = client.post(f"/api/v1/rechecks/{plan.pk}/decision", decision, content_type="application/json", **partner)
    assert refused.status_code == 404 and type(plan).objects.get(pk=plan.pk).state == "active"
    record = client.get(f"/api/v1/jobs/{case.pk}", **shop).json()
    assert record["findings"] and record["recheck_plan"]["id"] == plan.pk
    assert client.get(f"/api/v1/rechecks/{plan.pk}", **shop).status_code == 200

    from rechecks.planner_sweep import _check_start

    _check_start(plan)
    plan.refresh_from_db()
    assert plan.current_job.client_id == owner.pk, "the plan's recheck jobs belong to the job's client"


@pytest.mark.django_db(transaction=True)
def test_each_client_receives_its_own_events_signed_with_its_own_secret(client, settings, pool_runtime):
    shop_receiver, global_receiver = Receiver(200), Receiver(200)
    try:
        settings.LEITSTAND_WEBHOOK = {
            **settings.LEITSTAND_WEBHOOK,
            "url": global_receiver.url,
            "secret": "global-secret",
            "events": ["job.done", "batch.finished"],
        }
        shop = bearer("shop")
        # A client's own webhook goes through the address guard: an in-house receiver is allow-listed.
        settings.LEITSTAND_NOTIFY_ALLOWED_TARGETS = [shop_receiver.target]
        call_command("create_api_token", "--client", "shop", "--client-webhook", shop_receiver.url)
        shop_secret = Client.objects.get(name="shop").webhook_secret
        mine = submit(client, shop).json()
        partners = submit(client, bearer("partner")).json()
        pool_runtime("synthetic").wake()
        for job_id in (mine["id"], partners["id"]):
            job_confirm(job_id=job_id, actor="test")
        # The partner has no webhook and nobody chose the global one for it: its event is dropped, never
        # sent to the PHP core's receiver signed as if it were the core's own.
        assert deliveries_make() == 1 and not WebhookEvent.objects.exists()
        call_command("create_api_token", "--client", "partner", "--client-webhook", "")  # the operator's choice
        WebhookEvent.objects.create(kind="job.done", job_id=partners["id"])
        assert deliveries_make() == 1
        deliveries = {job.payload["event"]["job"]["id"]: job for job in Job.objects.filter(type="api_webhook")}
        assert deliveries[mine["id"]].payload["client"] == "shop" and "client" not in deliveries[partners["id"]].payload
        assert "secret" not in json.dumps(deliveries[mine["id"]].payload)
        pool_runtime("notify").wake()
        assert [json.loads(body)["job"]["id"] for _, body in shop_receiver.deliveries] == [mine["id"]]
        assert [json.loads(body)["job"]["id"] for _, body in global_receiver.deliveries] == [partners["id"]]
        headers, body = shop_receiver.deliveries[0]
        assert signature_valid(shop_secret, headers[SIGNATURE_HEADER], body)
        assert not signature_valid("global-secret", headers[SIGNATURE_HEADER], body)
        # Every body and header names whose job it is: the receiver can tell the partner's from its own.
        assert (json.loads(body)["client"], headers["X-Leitstand-Client"]) == ("shop", "shop")
        partner_headers, partner_body = global_receiver.deliveries[0]
        assert (json.loads(partner_body)["client"], partner_headers["X-Leitstand-Client"]) == ("partner", "partner")

        # Without a global webhook, events of jobs whose client has none are dropped, not queued.
        settings.LEITSTAND_WEBHOOK = {**settings.LEITSTAND_WEBHOOK, "url": "", "secret": ""}
        for job_id in (mine["id"], partners["id"]):
            WebhookEvent.objects.create(kind="job.done", job_id=job_id)
        assert deliveries_make() == 1 and not WebhookEvent.objects.exists()
    finally:
        shop_receiver.close()
        global_receiver.close()


@pytest.mark.django_db
def test_the_command_gives_a_client_several_tokens_and_rotates_them(capsys):
    call_command("create_api_token", "--name", "core-read", "--client", "php-core", "--scopes", "jobs:read,jobs:all")
    call_command("create_api_token", "--name", "core-write", "--client", "php-core", "--scopes", "jobs:write")
    old = capsys.readouterr().out.split()[-1]
    assert set(ApiToken.objects.filter(client__name="php-core").values_list("name", flat=True)) == {
        "core-read",
        "core-write",
    }
    call_command("create_api_token", "--rotate", "core-write")
    new = capsys.readouterr().out.strip()
    assert token_check(old) is None and token_check(new).name == "core-write"
    call_command("create_api_token", "--name", "solo", "--scopes", "jobs:read")
    assert ApiToken.objects.get(name="solo").client.name == "solo", "without --client: a client of its own"
    with pytest.raises(CommandError, match="client: must be 1-100 characters"):
        call_command("create_api_token", "--name", "x", "--client", "bad\nname", "--scopes", "jobs:read")
    with pytest.raises(CommandError, match="webhook_url: notifications may not go there: .*only http and https"):
        call_command("create_api_token", "--client", "php-core", "--client-webhook", "ftp://core.example/")
    assert not ApiToken.objects.filter(name="x").exists() and Client.objects.get(name="php-core").webhook_url == ""


@pytest.mark.django_db
def test_an_operator_manages_clients_on_the_console_and_each_change_is_audited(client, django_user_model, settings):
    from dashboard.roles import roles_ensure

    settings.LEITSTAND_NOTIFY_ALLOWED_TARGETS = ["localhost:8443"]  # the PHP core's in-house receiver
    groups = roles_ensure()
    operator = django_user_model.objects.create_user("olga", password="x" * 12, is_staff=True)
    operator.groups.add(groups["operator"])
    client.force_login(operator)
    made = client.post(
        "/admin/jobs/client/new-token/",
        {"client": "php-core", "name": "core-write", "scopes": ["jobs:write", "jobs:read"], "expires_days": "30"},
    )
    assert made.status_code == 200 and "no-store" in made["Cache-Control"]
    secret = made.context["secret"]
    assert secret in made.content.decode() and token_check(secret).client.name == "php-core"
    owner = Client.objects.get(name="php-core")
    page = client.get(f"/admin/jobs/client/{owner.pk}/change/").content.decode()
    assert "core-write" in page and secret not in page and secret.split("_", 2)[2] not in page

    rotated = client.post(
        f"/admin/jobs/client/{owner.pk}/act/", {"action": "token_rotate", "token": "core-write", "reason": "leak"}
    )
    assert token_check(secret) is None and token_check(rotated.context["secret"]).name == "core-write"
    hook = client.post(
        f"/admin/jobs/client/{owner.pk}/act/",
        {"action": "webhook_set", "webhook_url": "https://localhost:8443/k/geheimpfad"},
    )
    assert hook.context["secret"] == Client.objects.get(pk=owner.pk).webhook_secret
    refused = client.post(
        f"/admin/jobs/client/{owner.pk}/act/",
        {"action": "webhook_set", "webhook_url": "http://169.254.169.254/latest/meta-data/", "reason": "x"},
        follow=True,
    )
    assert (
        "notifications may not go there" in refused.content.decode()
        and "not a public address" in refused.content.decode()
    )
    assert Client.objects.get(pk=owner.pk).webhook_url == "https://localhost:8443/k/geheimpfad", "nothing changed"
    client.post(f"/admin/jobs/client/{owner.pk}/act/", {"action": "token_revoke", "token": "core-write"})
    assert token_check(rotated.context["secret"]) is None
    actions = list(AuditEntry.objects.order_by("id").values_list("action", "actor", "result"))
    assert [a for a, _, _ in actions] == [
        "api_token.create",
        "api_token.rotate",
        "api_client.webhook",
        "api_client.webhook",
        "api_token.revoke",
    ]
    assert actions[3][2].startswith("refused:")
    assert {actor for _, actor, _ in actions} == {"user:olga"}
    assert all(secret not in result and "geheimpfad" not in result for _, _, result in actions)
    listing = client.get("/admin/jobs/client/").content.decode()
    assert "https://localhost:8443/…" in listing and "/k/geheimpfad" not in listing


@pytest.mark.django_db
@pytest.mark.parametrize("role", ["viewer", "reviewer"])
def test_viewers_and_reviewers_cannot_make_or_change_tokens(client, django_user_model, role):
    from dashboard.roles import roles_ensure

    _, secret = token_create(name="core", client="php-core", scopes=["jobs:read"])
    owner = Client.objects.get(name="php-core")
    person = django_user_model.objects.create_user(role, password="x" * 12, is_staff=True)
    person.groups.add(roles_ensure()[role])
    client.force_login(person)
    assert client.get("/admin/jobs/client/").status_code == 200, "every role sees the clients"
    client.post("/admin/jobs/client/new-token/", {"client": "mine", "name": "mine", "scopes": ["jobs:all"]})
    act = f"/admin/jobs/client/{owner.pk}/act/"
    client.post(act, {"action": "token_create", "name": "extra", "scopes": ["jobs:all"]})
    client.post(act, {"action": "token_rotate", "token": "core"})
    client.post(act, {"action": "token_revoke", "token": "core"})
    client.post(act, {"action": "webhook_set", "webhook_url": "https://evil.example/"})
    assert list(ApiToken.objects.values_list("name", flat=True)) == ["core"] and token_check(secret) is not None
    assert not Client.objects.filter(name="mine").exists() and Client.objects.get(pk=owner.pk).webhook_url == ""
    results = list(AuditEntry.objects.values_list("result", flat=True))
    assert len(results) == 5 and all(r.startswith("refused:") for r in results)


@pytest.mark.django_db(transaction=True)
def test_existing_tokens_become_clients_and_their_jobs_are_backfilled():
    from django.db import connection

    migrate_to([("dashboard", "0007_senior_reviewers"), ("api", "0002_rate_limits_for_jobs_and_addresses")])
    migrate_to([("jobs", "0021_review_escalated_permission")])
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO jobs_apitoken (name, prefix, secret_hash, scopes, created_at)"
                " VALUES ('shop', 'p1', 'h', '[\"jobs:read\"]', now())"
            )
            for job_id, parent, namespace in (
                ("1" * 32, None, "client:shop"),
                ("2" * 32, "1" * 32, ""),
                ("3" * 32, None, ""),
            ):
                cursor.execute(
                    "INSERT INTO jobs_job (id, type, pool, key_namespace, idempotency_key, correlation_id, parent_id, state)"
                    " VALUES (%s, 'synthetic', 'synthetic', %s, %s, 'c', %s, 'planned')",
                    [job_id, namespace, job_id, parent],
                )
            cursor.execute(
                "INSERT INTO jobs_batch (key, key_namespace, name, created_by, correlation_id, request_hash, created_at, stats)"
                " VALUES ('b', 'client:shop', 'b', 'api:shop', 'c', '', now(), '{}')"
            )
    finally:
        migrate_to()
    shop = Client.objects.get(name="shop")
    assert ApiToken.objects.get(name="shop").client == shop
    assert "jobs:all" in ApiToken.objects.get(name="shop").scopes, "an existing token keeps seeing everything"
    owners = dict(Job.objects.values_list("id", "client_id"))
    assert owners == {uuid.UUID("1" * 32): shop.pk, uuid.UUID("2" * 32): shop.pk, uuid.UUID("3" * 32): None}
    assert Batch.objects.get(key="b").client == shop


@pytest.mark.django_db(transaction=True)
def test_a_clients_webhook_at_a_private_address_is_refused_at_delivery(client, settings, pool_runtime):
    """Receivers people set in the console go through the crawler's address guard when they are set
    and again at each delivery, the POST pinned to the address it checked: a webhook at loopback (or
    a cloud's metadata address) is never posted to."""
    receiver = Receiver(200)
    try:
        shop = bearer("shop")
        with pytest.raises(CommandError, match="notifications may not go there: .*loopback"):
            call_command("create_api_token", "--client", "shop", "--client-webhook", receiver.url)
        # Set while allow-listed (or while its name still resolved elsewhere): each delivery judges again.
        Client.objects.filter(name="shop").update(
            webhook_url=receiver.url, webhook_secret="s", uses_global_webhook=False
        )
        job = submit(client, shop).json()
        pool_runtime("synthetic").wake()
        job_confirm(job_id=job["id"], actor="test")
        assert deliveries_make() == 1
        pool_runtime("notify").wake()
        delivery = Job.objects.get(type="api_webhook")
        assert (delivery.state, delivery.error_class) == (State.DEAD, "workers.pipeline.http.AddressRefused")
        assert "loopback" in delivery.error_message and "/hook" not in delivery.error_message
        assert receiver.deliveries == []
    finally:
        receiver.close()


def client_page_as(client, django_user_model, name: str, role: str) -> str:
    """Log in as a new console user of ``role`` and give the PHP core client's action URL."""
    from dashboard.roles import roles_ensure

    user = django_user_model.objects.create_user(name, password="x" * 12, is_staff=True)
    user.groups.add(roles_ensure()[role])
    client.force_login(user)
    if not Client.objects.filter(name="php-core").exists():
        token_create(name="core", client="php-core", scopes=["jobs:read"])
    return f"/admin/jobs/client/{Client.objects.get(name='php-core').pk}/act/"


@pytest.mark.django_db
def test_an_operator_sets_a_clients_bound_of_open_jobs_and_a_viewer_cannot(client, django_user_model):
    act = client_page_as(client, django_user_model, "vera", "viewer")
    owner = Client.objects.get(name="php-core")
    client.post(act, {"action": "open_jobs_set", "max_open_jobs": "5", "reason": "no"})
    assert Client.objects.get(pk=owner.pk).max_open_jobs is None

    client_page_as(client, django_user_model, "olga", "operator")
    page = client.get(f"/admin/jobs/client/{owner.pk}/change/").content.decode()
    assert "the default (1000000)" in page
    client.post(act, {"action": "open_jobs_set", "max_open_jobs": "5000", "reason": "a big nightly run"})
    assert Client.objects.get(pk=owner.pk).max_open_jobs == 5000
    for bad in ("0", "-3", "²", "1e9", "99999999999"):
        client.post(act, {"action": "open_jobs_set", "max_open_jobs": bad, "reason": "r"})
    assert Client.objects.get(pk=owner.pk).max_open_jobs == 5000, "nothing changed"
    client.post(act, {"action": "open_jobs_set", "max_open_jobs": "", "reason": "back to the default"})
    assert Client.objects.get(pk=owner.pk).max_open_jobs is None
    entries = AuditEntry.objects.filter(action="api_client.open_jobs").values_list("actor", "result")
    assert ("user:olga", "open jobs bound 5000") in list(entries)


@pytest.mark.django_db
def test_an_operator_grants_lanes_and_trusts_trace_context_and_a_viewer_cannot(client, django_user_model):
    """Issue 54, items 5 and 14: a client's lanes and whose trace context is joined are an operator's
    audited choices on the client's page."""
    act = client_page_as(client, django_user_model, "vera", "viewer")
    owner = Client.objects.get(name="php-core")
    client.post(act, {"action": "trace_trust_set", "trusted": "yes", "reason": "no"})
    client.post(act, {"action": "lanes_set", "most_urgent_lane": "0", "reason": "no"})
    owner.refresh_from_db()
    assert (owner.trace_trusted, owner.most_urgent_lane) == (False, 5)

    client_page_as(client, django_user_model, "olga", "operator")
    for bad in ("10", "-1", "²", "lane 0"):
        client.post(act, {"action": "lanes_set", "most_urgent_lane": bad, "reason": "r"})
    assert Client.objects.get(pk=owner.pk).most_urgent_lane == 5, "nothing changed"
    client.post(act, {"action": "lanes_set", "most_urgent_lane": "1", "reason": "the core moves customers' jobs"})
    assert Client.objects.get(pk=owner.pk).most_urgent_lane == 1
    assert "1–9" in client.get(f"/admin/jobs/client/{owner.pk}/change/").content.decode()
    assert AuditEntry.objects.get(action="api_client.lanes", actor="user:olga").result == "lanes 1–9"
    assert "not trusted: a new trace, linked" in client.get(f"/admin/jobs/client/{owner.pk}/change/").content.decode()
    client.post(act, {"action": "trace_trust_set", "trusted": "maybe", "reason": "r"})
    assert not Client.objects.get(pk=owner.pk).trace_trusted
    client.post(act, {"action": "trace_trust_set", "trusted": "yes", "reason": "our own core"})
    assert Client.objects.get(pk=owner.pk).trace_trusted
    assert "trusted: joined" in client.get(f"/admin/jobs/client/{owner.pk}/change/").content.decode()
    entry = AuditEntry.objects.get(action="api_client.trace_trust", actor="user:olga")
    assert (entry.actor, entry.reason, entry.result) == ("user:olga", "our own core", "trace context trusted: joined")
