"""System checks of what spans the areas: the timing invariants between the job types' leases,
heartbeats and timeouts, the runtime's timings and django-q2; the analysis version, shadow samples
and retention per type against the registered types; notification links; with ``--database
default``, the role the application connects as. What one area's settings must satisfy among
themselves is checked where they are declared (``jobs/options.py``, ``workers/runtime/options.py``,
``workers/pipeline/options.py``, ``rechecks/options.py``), at start-up.

``manage.py check`` (and every command's start-up) reports each violated invariant with the job
type and the numbers, so a bad configuration never reaches a running pool.
"""

import dj_database_url
from django.conf import settings
from django.core.checks import Error, Tags, Warning, register

from jobs.options import EngineOptions, OptionError
from workers.pipeline import analysis
from workers.runtime.registry import registry


@register("leitstand")
def timing_invariants(app_configs=None, **kwargs):
    errors = []
    grace = settings.LEITSTAND_LEASE_GRACE_SECONDS
    wakeup_timeout = settings.LEITSTAND_WAKEUP_TIMEOUT_SECONDS
    budget = settings.LEITSTAND_BATCH_BUDGET_SECONDS

    def error(number, message, hint):
        errors.append(Error(message, hint=hint, id=f"leitstand.E{number:03d}"))

    for t in registry.all():
        if t.heartbeat_seconds > t.lease_seconds / 3:
            error(
                1,
                f"job type {t.name}: heartbeat every {t.heartbeat_seconds:g} s is more than a third of its "
                f"{t.lease_seconds:g} s lease",
                "two heartbeats may be lost before the lease expires; shorten the heartbeat or lengthen the lease",
            )
        if t.timeout_seconds >= t.lease_seconds + grace:
            error(
                2,
                f"job type {t.name}: timeout {t.timeout_seconds:g} s is not below lease + grace "
                f"({t.lease_seconds:g} + {grace:g} s)",
                "a job could outlive its lease without a heartbeat",
            )
        if t.timeout_seconds + budget >= wakeup_timeout:
            error(
                3,
                f"job type {t.name}: timeout {t.timeout_seconds:g} s plus the batch budget does not fit in "
                f"the wake-up timeout ({wakeup_timeout} s)",
                "raise LEITSTAND_WAKEUP_TIMEOUT_SECONDS",
            )
        if t.external_call_timeout_seconds >= t.timeout_seconds:
            error(
                4,
                f"job type {t.name}: external calls may take {t.external_call_timeout_seconds:g} s, not below "
                f"the job timeout of {t.timeout_seconds:g} s",
                "every external call needs a shorter timeout",
            )
        if t.timeout_seconds >= settings.LEITSTAND_POOL_SHUTDOWN_SECONDS:
            error(
                11,
                f"job type {t.name}: timeout {t.timeout_seconds:g} s is not below the pools' shutdown time "
                f"({settings.LEITSTAND_POOL_SHUTDOWN_SECONDS:g} s)",
                "a stopping pool would kill a job that is still within its time; raise "
                "LEITSTAND_POOL_SHUTDOWN_SECONDS (and the service manager's stop timeout above it)",
            )
        if t.pool not in settings.LEITSTAND_POOLS:
            error(
                5,
                f"job type {t.name}: pool {t.pool!r} is not configured",
                f"configured pools: {', '.join(settings.LEITSTAND_POOLS)}",
            )
    if settings.LEITSTAND_ANALYSIS_VERSION not in analysis.VERSIONS:
        error(
            13,
            f"LEITSTAND_ANALYSIS_VERSION {settings.LEITSTAND_ANALYSIS_VERSION!r} is no analysis version",
            f"versions: {', '.join(analysis.VERSIONS)}",
        )
    try:
        EngineOptions.from_settings(settings)
    except OptionError as refused:
        error(9, str(refused), "the engine's settings are declared in jobs/options.py")
    for type_name, sample in settings.LEITSTAND_SHADOW_SAMPLES.items():
        declared = {t.name: t for t in registry.all()}.get(type_name)
        if declared is None or not isinstance(sample, dict) or sample.get("version") not in declared.shadow_versions:
            error(
                10,
                f"LEITSTAND_SHADOW_SAMPLES[{type_name!r}] names no declared shadow version of a registered type",
                "declared: "
                + "; ".join(f"{t.name}: {', '.join(t.shadow_versions)}" for t in registry.all() if t.shadow_versions),
            )
        elif not isinstance(sample.get("share"), (int, float)) or not 0 < sample["share"] <= 1:
            error(
                10,
                f"LEITSTAND_SHADOW_SAMPLES[{type_name!r}]['share'] must be a number in (0, 1]",
                "e.g. 0.05 for one job in twenty",
            )
    retained = settings.LEITSTAND_RETENTION["days"]
    for type_name, per_state in settings.LEITSTAND_RETENTION["types"].items():
        wrong = (
            type_name not in {t.name for t in registry.all()}
            or not isinstance(per_state, dict)
            or any(
                state not in retained or not isinstance(days, (int, float)) or days < 0
                for state, days in per_state.items()
            )
        )
        if wrong:
            error(
                12,
                f"LEITSTAND_RETENTION_TYPES[{type_name!r}] must name a registered type and map ended states to days",
                f'e.g. {{"synthetic": {{"done": 1}}}}; ended states: {", ".join(retained)}',
            )
    for name, cluster in settings.Q_CLUSTER["ALT_CLUSTERS"].items():
        # A wake-up may wait behind the prefetched ones (queue_limit) before it runs.
        queue_wait = cluster["timeout"] * cluster["queue_limit"] / cluster["workers"]
        if cluster["retry"] <= cluster["timeout"] + queue_wait:
            error(
                6,
                f"pool {name}: django-q2 retry {cluster['retry']} s is not above timeout {cluster['timeout']} s "
                f"plus queue wait {queue_wait:g} s",
                "a running wake-up would be delivered again",
            )
    return errors


@register(Tags.database)
def database_roles(app_configs=None, databases=None, **kwargs):
    """``manage.py check --database default``: the application should not connect as the owner of
    the tables (it could rewrite the append-only logs, the schema and the clock)."""
    if not databases or "default" not in databases:
        return []
    from django.db import connection

    from jobs.models import Job

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_user, tableowner = current_user FROM pg_tables WHERE tablename = %s", [Job._meta.db_table]
        )
        row = cursor.fetchone()
    owner_url = settings.LEITSTAND_DATABASE_OWNER_URL
    if row is None or not row[1] or (owner_url and dj_database_url.parse(owner_url)["USER"] == row[0]):
        return []  # not migrated yet, not the owner, or the owner migrating
    return [
        Warning(
            f"the application connects to the database as {row[0]}, the owner of its tables",
            hint="connect as the application role and migrate as the owner (docs/operations.md, 'Database roles')",
            id="leitstand.W001",
        )
    ]


@register(Tags.database)
def pgbouncer_idle_timeout(app_configs=None, databases=None, **kwargs):
    """Behind PgBouncer a connection cannot pass ``idle_in_transaction_session_timeout`` at startup;
    it must be the database's default (``manage.py db grants`` sets it when run as the database's
    owner) or the server's."""
    if not settings.LEITSTAND_PGBOUNCER or not databases or "default" not in databases:
        return []
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('idle_in_transaction_session_timeout')")
        (timeout,) = cursor.fetchone()
    if timeout != "0":
        return []
    return [
        Warning(
            "behind PgBouncer (LEITSTAND_PGBOUNCER) the database has no idle_in_transaction_session_timeout: "
            "a client that dies inside a transaction keeps its locks and a server connection",
            hint="run `manage.py db grants` as the database's owner (it sets the database's default) or set it "
            "in postgresql.conf (docs/operations.md, 'Many hosts through PgBouncer')",
            id="leitstand.W002",
        )
    ]


@register("leitstand")
def notification_links(app_configs=None, **kwargs):
    """Links in notifications (the alert, its runbook, a route test's confirmation) are absolute only
    with ``LEITSTAND_PUBLIC_URL``; a relative link in an e-mail or a pager leads nowhere."""
    url = settings.LEITSTAND_PUBLIC_URL
    if url and not url.startswith(("http://", "https://")):
        return [
            Error(
                f"LEITSTAND_PUBLIC_URL {url!r} is not an http(s) URL",
                hint="set it to the console's address as people reach it, e.g. https://leitstand.example.org",
                id="leitstand.E015",
            )
        ]
    limits = {
        "ack_page_minutes": 7 * 24 * 60,
        "ack_ticket_minutes": 7 * 24 * 60,
        "renotify_minutes": 7 * 24 * 60,
        "test_every_hours": 366 * 24,
        "confirm_within_hours": 31 * 24,
    }
    for name, config in settings.LEITSTAND_ALERT_ROUTES.items():
        for field, limit in limits.items():
            value = config.get(field) if isinstance(config, dict) else None
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit):
                return [
                    Error(
                        f"LEITSTAND_ALERT_ROUTES[{name!r}][{field!r}] is {value!r}, not a whole number from 1 to {limit}",
                        hint="fix the setting (docs/operations.md, 'Alerts'); routes already stored are edited in the console",
                        id="leitstand.E014",
                    )
                ]
    if settings.LEITSTAND_ALERT_ROUTES and not url:
        return [
            Warning(
                "alert routes are configured but LEITSTAND_PUBLIC_URL is not: links in notifications are relative",
                hint="set LEITSTAND_PUBLIC_URL to the console's address (docs/operations.md, 'Alerts')",
                id="leitstand.W003",
            )
        ]
    return []
