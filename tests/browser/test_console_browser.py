"""Console scenarios in a real headless Chromium: a reviewer decides a case with the keyboard; an
operator finds a dead job by correlation ID and retries it; a bulk retry on a filter. The browser's
console must stay free of Content-Security-Policy violations."""

import pytest
from playwright.sync_api import expect

from dashboard.operations.bulk import bulk_step
from dashboard.roles import OPERATORS, REVIEWERS
from jobs.models import Job, State, database_now
from tests.conftest import job_in_state
from tests.console.test_console import review_case

pytestmark = pytest.mark.django_db(transaction=True)


def no_policy_violations(page):
    violations = [m for m in page.console_messages if "Content Security Policy" in m]
    assert not violations, violations


def test_a_reviewer_decides_a_case_with_the_keyboard(page_as, live_server):
    case = review_case("kbd")
    page = page_as(REVIEWERS)
    page.goto(f"{live_server.url}/admin/review/")
    page.click("#start-review")
    page.wait_for_selector("#candidate-image")
    assert page.is_visible("#asset-image")
    widths = "[document.getElementById('candidate-image').width, document.getElementById('asset-image').width]"
    assert page.evaluate(widths) == [420, 420], "the same scale"
    for view in ("overlay", "swipe", "difference"):
        page.click(f"button[data-view={view}]")
        assert page.is_visible("#review-canvas") and not page.is_visible("#review-pair")
        assert page.get_attribute("#review-canvas", "data-view") == view
        drawn = page.evaluate(
            "(() => { const c = document.getElementById('review-canvas');"
            " const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
            " let n = 0; for (let i = 0; i < d.length; i += 4) { if (d[i] || d[i + 1] || d[i + 2]) n++; } return n; })()"
        )
        assert drawn > 0, f"the {view} view draws the images"
    page.click("button[data-view=side]")
    assert page.is_visible("#review-pair")
    page.keyboard.press("?")
    assert page.is_visible("#review-help")
    page.keyboard.press("n")
    assert page.text_content("#review-verdict") == "no match"
    page.keyboard.type("a different photograph")
    page.keyboard.press("Enter")
    page.wait_for_url("**/admin/review/")
    job = Job.objects.get(pk=case.pk)
    assert (job.state, job.completion_reason) == (State.DONE, "no_match: a different photograph")
    assert "decided: no match" in page.content()
    no_policy_violations(page)


def test_an_operator_finds_a_dead_job_by_correlation_id_and_retries_it(page_as, live_server, make_job):
    dead = job_in_state(make_job("crawl", pool="crawl", correlation_id="order-4711"), State.DEAD)
    make_job("crawl", pool="crawl")
    page = page_as(OPERATORS)
    page.goto(f"{live_server.url}/admin/jobs/job/")
    page.fill("#searchbar", "order-4711")
    page.keyboard.press("Enter")
    page.wait_for_url("**q=order-4711**")
    page.click(f"text={str(dead.id)[:8]}")
    page.wait_for_selector("#why")
    assert "in the dead-letter queue" in page.text_content("#why")
    page.fill("form:has(#act-retry_now) input[name=reason]", "the parser is fixed")
    page.click("#act-retry_now")
    page.wait_for_selector(".messagelist")
    assert "retried: planned" in page.text_content(".messagelist").lower()
    assert Job.objects.get(pk=dead.pk).state == State.PLANNED
    no_policy_violations(page)


def test_a_bulk_retry_acts_on_everything_the_filter_matches(page_as, live_server, make_job):
    dead = [job_in_state(make_job("crawl", pool="crawl"), State.DEAD) for _ in range(3)]
    other = job_in_state(make_job("analysis", pool="analysis"), State.DEAD)
    page = page_as(OPERATORS)
    page.goto(f"{live_server.url}/admin/jobs/job/?state__exact=dead&type__exact=crawl")
    page.check("#action-toggle")
    page.select_option("select[name=action]", "retry_jobs_now")
    page.click("button[name=index]")
    page.wait_for_selector(".messagelist")
    assert "Retried 3 job(s)" in page.text_content(".messagelist")
    assert {Job.objects.get(pk=j.pk).state for j in dead} == {State.PLANNED}
    assert Job.objects.get(pk=other.pk).state == State.DEAD, "outside the filter: untouched"
    no_policy_violations(page)


def test_an_operator_retries_a_dead_letter_group_after_a_fix(page_as, live_server, make_job):
    timeouts = [job_in_state(make_job("crawl", pool="crawl"), State.DEAD) for _ in range(2)]
    gone = job_in_state(make_job("crawl", pool="crawl"), State.DEAD)
    Job.objects.filter(pk__in=[j.pk for j in timeouts]).update(
        error_class="httpx.ReadTimeout", finished_at=database_now()
    )
    Job.objects.filter(pk=gone.pk).update(error_class="workers.pipeline.fetching.PageGone", finished_at=database_now())
    page = page_as(OPERATORS)
    page.goto(f"{live_server.url}/admin/")
    page.click("text=Dead letters")
    row = page.locator("#dead-letter-groups tr", has_text="ReadTimeout")
    assert row.locator("td.num strong").text_content() == "2"
    row.locator("text=retry all…").click()
    page.wait_for_selector("#bulk-eligible")
    assert page.text_content("#bulk-eligible") == "2"
    page.fill("input[name=reason]", "the site is reachable again")
    page.check("#bulk-confirm")
    page.click("#bulk-start")
    page.wait_for_selector(".messagelist")
    no_policy_violations(page)
    while bulk_step():
        pass
    assert {Job.objects.get(pk=j.pk).state for j in timeouts} == {State.PLANNED}
    assert Job.objects.get(pk=gone.pk).state == State.DEAD, "another group: untouched"


def test_the_home_page_renders_without_policy_violations(page_as, live_server):
    page = page_as(OPERATORS)
    page.goto(f"{live_server.url}/admin/")
    assert page.is_visible("#pipeline") and page.is_visible("#business") and page.is_visible("#hosts")
    no_policy_violations(page)


def test_the_bulk_form_starts_only_the_dry_run_it_shows_and_asks_first(page_as, live_server, make_job):
    from dashboard.models import BulkOperation

    dead = [job_in_state(make_job("crawl", pool="crawl"), State.DEAD) for _ in range(3)]
    page = page_as(OPERATORS)
    page.goto(f"{live_server.url}/admin/jobs/job/?type__exact=crawl")
    page.click("#bulk-link")
    assert page.text_content("#bulk-eligible") == "3" and "Retry now 3 jobs" in page.input_value("#bulk-start")
    page.click("#bulk-dry-runs a[data-action=cancel]")  # another action: another dry run, its own button
    page.wait_for_url("**action_name=cancel**")
    assert "Cancel 3 jobs" in page.input_value("#bulk-start")
    page.fill("input[name=reason]", "wrong source")
    page.click("#bulk-start")  # not confirmed: the browser keeps the form
    assert page.evaluate("document.querySelector('#bulk-confirm').validity.valueMissing")
    assert not BulkOperation.objects.exists()
    page.check("#bulk-confirm")
    page.click("#bulk-start")
    page.wait_for_selector(".messagelist")
    assert BulkOperation.objects.get().action == "cancel"
    no_policy_violations(page)
    assert {Job.objects.get(pk=j.pk).state for j in dead} == {State.DEAD}, "the control process runs it, later"


def test_the_home_and_a_batch_page_update_themselves_while_jobs_run(page_as, live_server, make_job, pool_runtime):
    from dashboard.operations.snapshot import snapshot_refresh
    from jobs.batches import batch_create

    batch, _ = batch_create(key="live", name="live", created_by="test")
    for _ in range(4):
        make_job("synthetic", pool="crawl", batch_id=batch.pk, payload={"fail": "permanent"})
    snapshot_refresh()
    page = page_as(OPERATORS)
    page.goto(f"{live_server.url}/admin/")
    page.evaluate("window.notReloaded = true")
    planned = '[data-key="synthetic:planned"]'
    assert page.text_content(planned).strip() == "4"
    pool_runtime("crawl").wake()  # the pool runs them: each fails for good
    snapshot_refresh()  # what the control process does every few seconds
    expect(page.locator(planned)).to_have_text("·", timeout=15_000)  # the next refresh, within 5 s
    assert page.text_content('[data-key="synthetic:dead"]').strip() == "4"
    assert page.evaluate("window.notReloaded"), "updated in place, not reloaded"
    assert page.text_content(".live-age").startswith("updated ")

    page.click(".live-toggle")  # paused: no more requests for the live part
    assert page.text_content(".live-toggle") == "❚❚ paused"
    page.click(".live-toggle")

    batch_page = page
    batch_page.goto(f"{live_server.url}/admin/jobs/batch/{batch.pk}/change/")
    assert batch_page.text_content("#batch-ended") == "4"
    batch_page.evaluate("window.notReloaded = true")
    more = [make_job("synthetic", pool="crawl", batch_id=batch.pk, payload={"fail": "permanent"}) for _ in range(2)]
    pool_runtime("crawl").wake()
    expect(batch_page.locator("#batch-ended")).to_have_text("6", timeout=15_000)
    assert batch_page.evaluate("window.notReloaded") and len(more) == 2
    no_policy_violations(page)


def test_the_navigation_reaches_every_console_page_without_errors(page_as, live_server):
    page = page_as(OPERATORS)
    page.goto(f"{live_server.url}/admin/")
    links = page.eval_on_selector_all("#console-nav a", "links => links.map(a => [a.textContent.trim(), a.href])")
    labels = [label.split()[0] for label, _ in links]
    for expected in (
        "Home",
        "Jobs",
        "Stuck",
        "Dead",
        "Review",
        "Batches",
        "Paths",
        "Flow",
        "Business",
        "Alerts",
        "Routes",
    ):
        assert expected in labels, labels
    for label, href in links:
        response = page.goto(href)
        assert response.status == 200, (label, response.status)
        assert page.locator("#console-nav a[aria-current=page]").count() >= 1, label
    assert page.goto(f"{live_server.url}/favicon.ico").status == 200
    no_policy_violations(page)
    errors = [m for m in page.console_messages if "error" in m.lower()]
    assert not errors, errors


def test_the_home_draws_the_trend_charts_with_axes_and_values(page_as, live_server, make_job):
    from datetime import timedelta

    from dashboard.models import Rollup

    now = database_now().replace(second=0, microsecond=0)
    for minutes_ago in range(1, 30):
        Rollup.objects.create(
            minute=now - timedelta(minutes=minutes_ago), job_type="crawl", due=minutes_ago, done=2, p50_ms=40, p95_ms=90
        )
    page = page_as(OPERATORS)
    page.goto(f"{live_server.url}/admin/")
    expect(page.locator("#trends")).to_have_attribute("data-drawn", "/1h", timeout=10_000)
    assert page.locator("#trends canvas").count() == 4, "four charts"
    assert page.locator("#trend-queue .u-legend").is_visible() and "due" in page.text_content("#trend-queue .u-legend")
    assert int(page.get_attribute("#trends", "data-points")) == 29
    page.click("#trend-ranges button[data-range='24h']")
    expect(page.locator("#trends")).to_have_attribute("data-drawn", "/24h", timeout=10_000)
    page.select_option("#trend-type", "crawl")
    expect(page.locator("#trends")).to_have_attribute("data-drawn", "crawl/24h", timeout=10_000)
    no_policy_violations(page)


def test_a_job_page_follows_its_job_without_a_reload(page_as, live_server, make_job):
    job = job_in_state(make_job("crawl", pool="crawl"), State.RUNNING)
    page = page_as(OPERATORS)
    page.goto(f"{live_server.url}/admin/jobs/job/{job.pk}/change/")
    assert page.text_content("#why .badge") == "running"
    page.evaluate("window.notReloaded = true")
    Job.objects.filter(pk=job.pk).update(state=State.FAILED, next_attempt_at=database_now())
    expect(page.locator("#why .badge")).to_have_text("failed", timeout=15_000)
    assert page.evaluate("window.notReloaded")
    no_policy_violations(page)


def test_an_operator_sends_a_route_test_confirms_it_and_sees_the_receipt(
    page_as, live_server, settings, pool_runtime, mailoutbox
):
    """The Routes page: send a test now, open the link the test carried, confirm, see who confirmed."""
    from alerts.routes import routes_ensure

    settings.LEITSTAND_ALERT_ROUTES = {"operations": {"email": ["ops@example.org"], "owner": "Platform team"}}
    settings.LEITSTAND_PUBLIC_URL = live_server.url
    routes_ensure(set())
    page = page_as(OPERATORS)
    page.goto(f"{live_server.url}/admin/routes/")
    row = page.locator("#route-operations")
    expect(row).to_contain_text("Platform team")
    expect(row).to_contain_text("never tested")
    row.locator("input.send-test").click()
    expect(page.locator(".messagelist")).to_contain_text("Test sent to route operations (email)")
    expect(row).to_contain_text("waiting for confirmation")
    pool_runtime("notify").wake()  # the test is delivered: the e-mail carries the link
    (mail,) = mailoutbox
    link = next(line for line in mail.body.splitlines() if line.startswith("Confirm: ")).removeprefix("Confirm: ")
    assert link.startswith(f"{live_server.url}/admin/routes/confirm/")
    page.goto(link)
    page.locator("#confirm-receipt").click()
    expect(page.locator(".messagelist")).to_contain_text("Receipt of the test of route operations confirmed")
    expect(row).to_contain_text("confirmed")
    expect(row).to_contain_text("by user:operator-1 (console)")
    page.screenshot(path="/tmp/routes-page.png", full_page=True)
    no_policy_violations(page)


def test_an_operator_follows_a_job_s_trace_to_the_tracing_system(page_as, live_server, settings):
    from jobs import tracing
    from jobs.insert import job_insert

    settings.LEITSTAND_TRACE_URL = "https://tempo.example/explore?traceId={trace_id}"
    with tracing.attached("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"):
        job = job_insert(type="synthetic", idempotency_key="traced", payload={}, actor="php-core").job
    page = page_as(OPERATORS)
    page.goto(f"{live_server.url}/admin/jobs/job/{job.pk}/change/")
    link = page.get_by_role("link", name="4bf92f3577b34da6a3ce929d0e0e4736")
    expect(link).to_have_attribute("href", "https://tempo.example/explore?traceId=4bf92f3577b34da6a3ce929d0e0e4736")
    page.screenshot(path="/tmp/job-trace-page.png", full_page=True)
    assert not [m for m in page.console_messages if "Content Security Policy" in m]


def test_a_handler_s_warning_shows_on_its_job_page_beside_its_attempt(page_as, live_server, job_type, pool_runtime):
    import logging

    from workers.runtime.context import Done

    def warns(context):
        with context.step("fetch"):
            logging.getLogger("pipeline.fetch").warning("robots.txt of %s is 2 MB; <script>alert(1)</script>", "x.test")
        try:
            int("zwölf")
        except ValueError:
            logging.getLogger("pipeline.parse").exception("price not a number")
        return Done("ok")

    job_type("warns", warns, expected_paths=("fetch",))
    from jobs.insert import job_insert

    job = job_insert(type="warns", pool="crawl", idempotency_key="warns-1", payload={}, actor="test").job
    pool_runtime("crawl").wake()
    page = page_as(OPERATORS)
    page.goto(f"{live_server.url}/admin/jobs/job/{job.pk}/change/")
    section = page.locator("#job-path")
    expect(section.get_by_role("heading", name="Log lines of attempt 1")).to_be_visible()
    lines = section.locator("ol.log-lines li")
    expect(lines).to_have_count(2)
    expect(lines.nth(0)).to_contain_text(
        "WARNING pipeline.fetch robots.txt of x.test is 2 MB; <script>alert(1)</script>"
    )
    expect(lines.nth(1)).to_contain_text("ERROR pipeline.parse price not a number")
    expect(lines.nth(1).locator("pre")).to_contain_text("ValueError: invalid literal for int()")
    page.screenshot(path="/tmp/job-log-lines.png", full_page=True)
    no_policy_violations(page)


def test_an_operator_moves_a_waiting_job_to_the_most_urgent_lane(page_as, live_server, make_job):
    job = make_job(priority=9)
    page = page_as(OPERATORS)
    page.goto(f"{live_server.url}/admin/jobs/job/{job.pk}/change/")
    form = page.locator("form", has=page.locator("#act-reorder"))
    form.get_by_label("lane (priority)").select_option("0")
    form.get_by_label("reason for Move in line").fill("the customer is on the phone")
    page.screenshot(path="/tmp/job-move-form.png", full_page=False)
    form.locator("#act-reorder").click()
    expect(page.locator(".messagelist")).to_contain_text("Moved: lane 0")
    assert Job.objects.get(pk=job.pk).priority == 0
    no_policy_violations(page)


def test_an_operator_holds_a_waiting_job_and_resumes_it(page_as, live_server, make_job):
    job = make_job()
    page = page_as(OPERATORS)
    page.goto(f"{live_server.url}/admin/jobs/job/{job.pk}/change/")
    form = page.locator("form", has=page.locator("#act-hold"))
    form.get_by_label("reason for Hold").fill("the customer asked us to wait")
    form.locator("#act-hold").click()
    expect(page.locator(".messagelist")).to_contain_text("Held: no worker claims it until it is resumed")
    expect(page.locator("body")).to_contain_text("held by user:")
    expect(page.locator("body")).to_contain_text(": the customer asked us to wait; no worker claims it")
    page.screenshot(path="/tmp/job-held.png", full_page=False)
    assert Job.objects.get(pk=job.pk).state == "held"
    form = page.locator("form", has=page.locator("#act-resume"))
    form.get_by_label("reason for Resume").fill("the customer is ready")
    form.locator("#act-resume").click()
    expect(page.locator(".messagelist")).to_contain_text("Resumed: back in line")
    assert Job.objects.get(pk=job.pk).state == "planned"
    no_policy_violations(page)


def test_an_operator_pauses_a_source_from_its_pool_s_key_view(page_as, live_server, make_job):
    from jobs.models import FlowKey
    from workers.runtime.models import Pool

    Pool.objects.get_or_create(name="analysis")
    for source, count in (("shop-a", 3), ("galerie-b", 1)):
        for _ in range(count):
            make_job("analysis", pool="analysis", source=source, payload={"candidate_id": 1})
    page = page_as(OPERATORS)
    page.goto(f"{live_server.url}/admin/workers/pool/")
    page.locator('a[href="/admin/pools/analysis/keys/"]').click()
    expect(page.locator("#flow-keys")).to_contain_text("shop-a")
    form = page.locator("form.console-form")
    form.get_by_label("Key").fill("shop-a")
    form.get_by_label("State").select_option("yes")
    form.get_by_label("Rate limit: at most").fill("30")
    form.get_by_label("starts per").fill("60")
    form.get_by_label("Reason").fill("the site asked us to stop")
    form.get_by_role("button", name="Change the key").click()
    expect(page.locator(".messagelist")).to_contain_text("Key 'shop-a' in pool analysis")
    expect(page.locator("#flow-keys tr.selected")).to_contain_text("paused")
    expect(page.locator("#flow-keys tr.selected")).to_contain_text("30 starts per minute")
    page.screenshot(path="/tmp/flow-keys-page.png", full_page=True)
    settings = FlowKey.objects.get(pool="analysis", key="shop-a")
    assert (settings.paused, settings.rate_starts, settings.rate_seconds) == (True, 30, 60)
    no_policy_violations(page)


def test_an_operator_reads_why_a_django_task_failed_on_its_job_page(page_as, live_server, pool_runtime):
    from tests.support.tasksapp import tasks

    failed = tasks.broken.enqueue("A-17")
    pool_runtime("tasks").wake()
    page = page_as(OPERATORS)
    page.goto(f"{live_server.url}/admin/jobs/job/{failed.id}/change/")
    expect(page.locator("body")).to_contain_text("task__tests__support__tasksapp__tasks__broken")
    expect(page.locator("body")).to_contain_text("in the dead-letter queue")
    expect(page.locator("body")).to_contain_text("order A-17 has no lines")
    expect(page.locator("body")).to_contain_text(
        "ERROR leitstand.tasks task tests.support.tasksapp.tasks.broken raised"
    )
    page.screenshot(path="/tmp/task-job-page.png", full_page=True)
    no_policy_violations(page)
