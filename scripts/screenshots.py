"""Screenshots of the running demo's console for docs/screenshots/ (run while ./scripts/demo runs):

    .venv/bin/python scripts/screenshots.py [--url http://127.0.0.1:8000]

Logs in as the demo's operator and reviewer in Debian's headless Chromium and saves the home page,
job pages, the recheck plans, the paths pages, the flow, the business rules, the dead letters, a bulk
dry run, the batches, the review queue, a review case and one whose evidence is matched keypoints.
"""

import argparse
import re
from pathlib import Path

from playwright.sync_api import sync_playwright

OUT = Path(__file__).resolve().parents[1] / "docs" / "screenshots"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


def login(browser, url: str, user: str):
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.goto(f"{url}/admin/login/")
    page.fill("#id_username", user)
    page.fill("#id_password", "leitstand-demo")
    page.click("input[type=submit]")
    return page


def first_link(page, url: str, pattern: str) -> str:
    page.goto(url)
    href = page.eval_on_selector_all("a", "links => links.map(a => a.getAttribute('href'))")
    return next(h for h in href if h and re.search(pattern, h))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    url = parser.parse_args().url
    OUT.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=FLAGS)
        operator = login(browser, url, "operator")
        operator.goto(f"{url}/admin/")
        operator.wait_for_selector("#trends[data-drawn]")  # the charts are drawn after the page
        operator.screenshot(path=OUT / "home.png", full_page=True)
        operator.locator("#trends").screenshot(path=OUT / "trends.png")
        job = first_link(
            operator,
            f"{url}/admin/jobs/job/?type__exact=analysis&state__exact=recheck_due",
            r"/admin/jobs/job/[0-9a-f-]{36}/change/",
        )
        operator.goto(url + job)
        operator.screenshot(path=OUT / "job-page.png", full_page=True)
        crawl = first_link(
            operator,
            f"{url}/admin/jobs/job/?type__exact=crawl&state__exact=dead",
            r"/admin/jobs/job/[0-9a-f-]{36}/change/",
        )
        operator.goto(url + crawl)
        operator.screenshot(path=OUT / "job-page-dead.png", full_page=True)
        operator.goto(f"{url}/admin/rechecks/recheckplan/")
        operator.screenshot(path=OUT / "recheck-plans.png", full_page=True)
        for job_type in ("crawl", "analysis", "synthetic"):
            operator.goto(f"{url}/admin/paths/?type={job_type}")
            operator.screenshot(path=OUT / f"paths-{job_type}.png", full_page=True)
        operator.goto(f"{url}/admin/flow/")
        operator.screenshot(path=OUT / "flow.png", full_page=True)
        operator.goto(f"{url}/admin/rules/")
        operator.screenshot(path=OUT / "business-rules.png", full_page=True)
        operator.goto(f"{url}/admin/deadletters/")
        operator.screenshot(path=OUT / "dead-letters.png", full_page=True)
        operator.click(".live-toggle")  # paused: the opened review form stays as it is
        operator.locator("details.review-form summary").first.click()
        operator.locator("#dead-letter-groups").screenshot(path=OUT / "dead-letter-review.png")
        operator.click(".live-toggle")
        operator.goto(f"{url}/admin/routes/")
        operator.screenshot(path=OUT / "routes.png", full_page=True)
        operator.goto(f"{url}/admin/alerts/alert/?state__exact=firing")
        firing = operator.locator("#result_list tbody a").first
        if firing.count():  # e.g. after `manage.py enqueue synthetic --payload '{"fail": "permanent"}' --count 25`
            firing.click()
            if operator.locator("#alert-silence").count():
                operator.fill("#alert-silence input[name=reason]", "planned work on the demo sites")
                operator.click("#alert-silence input[type=submit]")
                operator.wait_for_selector("#alert-silenced")
            operator.screenshot(path=OUT / "alert-silenced.png", full_page=True)
        else:
            print("no firing alert: alert-silenced.png not taken")
        operator.goto(f"{url}/admin/bulk/?state__exact=result_stored")  # the dry run that fits the filter
        operator.screenshot(path=OUT / "bulk-dry-run.png", full_page=True)
        operator.goto(f"{url}/admin/workers/source/")  # each source's schedule, last and next run
        operator.screenshot(path=OUT / "sources.png", full_page=True)
        operator.goto(url + first_link(operator, f"{url}/admin/workers/source/", r"/admin/workers/source/\d+/change/"))
        operator.screenshot(path=OUT / "source-schedule.png", full_page=True)
        operator.goto(f"{url}/admin/jobs/batch/")
        operator.screenshot(path=OUT / "batches.png", full_page=True)
        batch = first_link(operator, f"{url}/admin/jobs/batch/", r"/admin/jobs/batch/\d+/change/")
        operator.goto(url + batch)
        operator.screenshot(path=OUT / "batch-page.png", full_page=True)
        reviewer = login(browser, url, "reviewer")
        reviewer.goto(f"{url}/admin/review/")
        reviewer.screenshot(path=OUT / "review-queue.png", full_page=True)
        reviewer.click("tr:has-text('analysis') a")  # an analysis case: its images and scores
        reviewer.wait_for_selector("#candidate-image")
        reviewer.keyboard.press("?")
        reviewer.screenshot(path=OUT / "review-case.png", full_page=True)
        reviewer.keyboard.press("s")  # skip: give the case back, the screenshot decided nothing
        # A case analysis@2 left to a person by its keypoints: the matched pairs drawn between the images.
        reviewer.goto(f"{url}/admin/review/")
        cases = [a.get_attribute("href") for a in reviewer.locator("tr:has-text('analysis') a").all()]
        for href in cases:
            reviewer.goto(url + href if href.startswith("/") else href)
            if reviewer.locator("#keypoint-pairs").count():
                reviewer.locator("#content-main").screenshot(path=OUT / "review-case-keypoints.png")
                break
        else:
            print("no review case decided by keypoints: review-case-keypoints.png not taken")
        browser.close()
    print(f"screenshots in {OUT}")


if __name__ == "__main__":
    main()
