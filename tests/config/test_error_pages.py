"""With LEITSTAND_DEBUG=true Django's error page lists the settings and the request's environment:
no secret of Leitstand's may appear there (issue 17, finding 19)."""

from django.test import RequestFactory
from django.views.debug import technical_500_response

PASSWORD = "db-password-1"
ROUTES = {"ops": {"webhook": "https://hooks.example/T0K3N", "secret": "route-secret-2"}}
HOOK_URL = "https://php.example/hook?key=url-key-3"
ENVIRONMENT = {  # the dev server puts the process environment into every request's META
    "DATABASE_URL": f"postgres://leitstand:{PASSWORD}@db.internal:5432/leitstand",
    "LEITSTAND_ALERT_ROUTES": str(ROUTES),
    "LEITSTAND_WEBHOOK_URL": HOOK_URL,
    "LEITSTAND_WEBHOOK_SECRET": "webhook-secret-4",
}
SECRETS = (PASSWORD, "T0K3N", "route-secret-2", "url-key-3", "webhook-secret-4")


def test_the_debug_error_page_shows_no_secret(settings):
    settings.DEBUG = True
    settings.LEITSTAND_ALERT_ROUTES = ROUTES
    settings.LEITSTAND_WEBHOOK = {**settings.LEITSTAND_WEBHOOK, "url": HOOK_URL}
    settings.EMAIL_HOST_PASSWORD = PASSWORD
    page = error_page(RequestFactory().get("/admin/", **ENVIRONMENT))
    assert "boom" in page and "DATABASE_URL" in page and "LEITSTAND_ALERT_ROUTES" in page
    for secret in SECRETS:
        assert secret not in page, secret


# Far from the secrets above: the page shows the source lines around the raise.
def error_page(request) -> str:
    try:
        raise RuntimeError("boom")
    except RuntimeError as exc:
        return technical_500_response(request, type(exc), exc, exc.__traceback__).content.decode()
