"""Console scenarios in a real headless Chromium: a reviewer decides a case with the keyboard; an
operator finds a dead job by correlation ID and retries it; a bulk retry on a filter. The browser's
console must stay free of Content-Security-Policy violations."""

import pytest

from dashboard.operations.bulk import bulk_step
from dashboard.roles import OPERATORS, REVIEWERS
from jobs.models import Job, State, database_now
from tests.conftest import job_in_state
from tests.dashboard.test_console import review_case

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
