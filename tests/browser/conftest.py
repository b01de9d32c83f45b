"""Headless Chromium (Debian's package) driven by Playwright, against pytest-django's live server.

Playwright's sync API marks an event loop as running in the main thread, so Django's async-safety
check would refuse the ORM in fixtures — and keep refusing in later tests of the same run. This
folder therefore runs as its own pytest invocation (``scripts/test`` does so) with the check off.
"""

import os
import tempfile

import pytest

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="session")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium package (scripts/test does, as root)")
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="leitstand-chromium-")
    os.environ["XDG_CONFIG_HOME"] = os.environ["XDG_CACHE_HOME"] = profile
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield browser
        browser.close()


@pytest.fixture
def page_as(browser, live_server, client, django_user_model):
    """A browser page logged in as a new user with the given role (the session cookie is copied)."""
    from dashboard.roles import roles_ensure

    contexts = []

    def open_as(role: str):
        user = django_user_model.objects.create_user(f"{role}-1", password="x" * 12, is_staff=True)
        user.groups.add(roles_ensure()[role])
        client.force_login(user)
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": live_server.url}])
        contexts.append(context)
        page = context.new_page()
        page.console_messages = []
        page.on("console", lambda message: page.console_messages.append(message.text))
        return page

    yield open_as
    for context in contexts:
        context.close()
