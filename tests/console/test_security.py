"""Login protection (django-axes locks the (user name, address) pair) and the Content Security Policy."""

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db


def attempt(client, username, password, address):
    return client.post(
        reverse("admin:login"), {"username": username, "password": password, "next": "/admin/"}, REMOTE_ADDR=address
    )


def test_repeated_failures_lock_only_that_user_from_that_address(client, django_user_model, settings):
    for name in ("alice", "bob"):
        django_user_model.objects.create_user(name, password="correct-horse-9", is_staff=True)
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert attempt(client, "alice", "wrong", "10.0.0.1").status_code == 200
    locked = attempt(client, "alice", "wrong", "10.0.0.1")
    assert locked.status_code == 429, "the limit-th failure locks"
    # Issue 54, item 11: the cool-off is said, in seconds.
    assert locked.headers["Retry-After"] == str(round(settings.AXES_COOLOFF_TIME * 3600))
    assert attempt(client, "alice", "correct-horse-9", "10.0.0.1").status_code == 429, "locked, even when right"
    assert attempt(client, "bob", "correct-horse-9", "10.0.0.1").status_code == 302, "another user is not locked"
    client.logout()
    assert attempt(client, "alice", "correct-horse-9", "10.0.0.2").status_code == 302, "nor another address"


def test_console_pages_carry_a_strict_content_security_policy(admin_client):
    policy = admin_client.get(reverse("admin:index")).headers["Content-Security-Policy"]
    assert "default-src 'self'" in policy and "script-src 'self'" in policy and "style-src 'self'" in policy
    assert "unsafe-inline" not in policy and "frame-ancestors 'none'" in policy


def test_behind_a_proxy_the_lockout_follows_the_client_not_the_proxy_nor_a_forged_header(
    client, django_user_model, settings
):
    settings.LEITSTAND_TRUSTED_PROXIES = 1  # one reverse proxy at 10.9.9.9 appends the client's address
    django_user_model.objects.create_user("alice", password="correct-horse-9", is_staff=True)

    def through_proxy(password, client_address, forged=""):
        chain = f"{forged}, {client_address}" if forged else client_address
        return client.post(
            reverse("admin:login"),
            {"username": "alice", "password": password, "next": "/admin/"},
            REMOTE_ADDR="10.9.9.9",
            HTTP_X_FORWARDED_FOR=chain,
        )

    for n in range(settings.AXES_FAILURE_LIMIT):  # an attacker changes the header it writes each time
        through_proxy("wrong", "198.51.100.7", forged=f"192.0.2.{n}")
    assert through_proxy("correct-horse-9", "198.51.100.7", forged="192.0.2.200").status_code == 429, (
        "a forged X-Forwarded-For entry does not move the attacker out of its lockout"
    )
    assert through_proxy("correct-horse-9", "203.0.113.5").status_code == 302, (
        "the operator, from another address behind the same proxy, is not locked out"
    )
