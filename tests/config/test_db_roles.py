"""The database roles (issue 17, finding 8): the application role, which every process connects as,
cannot empty the append-only logs, truncate, alter, disable a trigger or move the clock; only the
maintenance role purges, through the owner's function. Each attempt is made over a real connection
as that role, against the test database the owner migrated."""

import importlib
from datetime import timedelta

import psycopg
import pytest
from django.conf import settings
from django.db import connection

from jobs.audit import audit_record
from jobs.models import Transition
from tests.support.db import OWNER, as_owner
from tests.support.db import test_database_url as database_url

pytestmark = pytest.mark.django_db(transaction=True)
PRODUCTION_CLOCK = importlib.import_module("jobs.migrations.0023_clock_and_purge_for_roles").CLOCK

ATTACKS = [
    "DELETE FROM jobs_transition",
    "UPDATE jobs_transition SET cause = 'rewritten'",
    "SET leitstand.allow_purge = on; DELETE FROM jobs_transition",
    "SET leitstand.allow_purge = on; DELETE FROM dashboard_auditentry",
    "TRUNCATE jobs_transition",
    "TRUNCATE dashboard_auditentry",
    "TRUNCATE jobs_job CASCADE",
    "ALTER TABLE jobs_transition DISABLE TRIGGER jobs_transition_append_only",
    "ALTER TABLE jobs_transition DISABLE TRIGGER ALL",
    "DROP TRIGGER jobs_transition_append_only ON jobs_transition",
    "ALTER TABLE jobs_job ADD COLUMN mine text",
    "DROP TABLE dashboard_auditentry",
    "CREATE OR REPLACE FUNCTION leitstand_now() RETURNS timestamptz LANGUAGE sql AS $$ SELECT now() + interval '1 day' $$",
    "ALTER FUNCTION leitstand_now() RENAME TO leitstand_then",
    "SELECT leitstand_log_purge('jobs_transition', now() + interval '1 day')",
    "CREATE TABLE jobs_shadow (id int)",
    "CREATE FUNCTION format(text, regclass) RETURNS text LANGUAGE sql AS $$ SELECT 'DROP TABLE jobs_job' $$",
    "INSERT INTO django_migrations (app, name, applied) VALUES ('jobs', '9999_mine', now())",
    "DELETE FROM django_migrations",
    "SELECT setval(pg_get_serial_sequence('jobs_transition', 'id'), 1)",
    "SELECT leitstand_jobs_purge(ARRAY[gen_random_uuid()])",
    "DELETE FROM jobs_transition_default",
    "DELETE FROM jobs_job",
    "DROP TABLE jobs_transition_default",
    "ALTER TABLE jobs_transition DETACH PARTITION jobs_transition_default",
    "SELECT leitstand_partitions_drop(current_date + 30)",
    "SELECT leitstand_partitions_ensure(30)",
]


def as_role(role: str) -> psycopg.Connection:
    return psycopg.connect(database_url(user=role), autocommit=True)


@pytest.fixture
def history(make_job):
    job = make_job("crawl", pool="crawl")
    audit_record(actor="user:olga", action="job.cancel", target=f"job {job.pk}", result="cancelled")
    return job


def counts(cursor) -> tuple:
    cursor.execute("SELECT (SELECT count(*) FROM jobs_transition), (SELECT count(*) FROM dashboard_auditentry)")
    return cursor.fetchone()


def test_the_code_under_test_runs_as_the_application_role():
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_user")
        assert cursor.fetchone()[0] == settings.LEITSTAND_DB_ROLES["application"]


@pytest.mark.parametrize("attack", ATTACKS)
def test_the_application_role_cannot_rewrite_history_the_schema_or_the_clock(history, attack):
    with as_role(settings.LEITSTAND_DB_ROLES["application"]) as application:
        before = counts(application.cursor())
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            application.execute(attack)
        assert counts(application.cursor()) == before
        application.execute("SELECT leitstand_now() - clock_timestamp()")  # the clock is still there
    assert Transition.objects.filter(job=history).exists()


def test_a_clock_offset_does_not_move_the_production_clock():
    """The migrated clock (production's) ignores both the session setting ``leitstand.clock_offset``
    and the suite's clock table; the suite's own clock, which reads the table, is installed by the
    owner into the test database only."""
    with psycopg.connect(database_url(user=OWNER), autocommit=True, application_name="clock-probe") as owner:
        with owner.transaction(force_rollback=True):
            owner.execute(PRODUCTION_CLOCK)
            owner.execute(f"SET LOCAL ROLE {settings.LEITSTAND_DB_ROLES['application']}")
            owner.execute("SELECT set_config('leitstand.clock_offset', '2 days', true)")
            owner.execute("INSERT INTO leitstand_test_clock VALUES ('clock-probe', '2 days')")
            drift = owner.execute("SELECT leitstand_now() - clock_timestamp()").fetchone()[0]
            assert abs(drift) < timedelta(seconds=1)
        with owner.transaction(force_rollback=True):
            owner.execute("INSERT INTO leitstand_test_clock VALUES ('clock-probe', '2 days')")
            moved = owner.execute("SELECT leitstand_now() - clock_timestamp()").fetchone()[0]
            assert moved > timedelta(days=1), "the test database's clock moves (db_clock)"


def test_only_the_maintenance_role_purges_and_only_the_logs(history):
    application = settings.LEITSTAND_DB_ROLES["application"]
    with as_role(application) as app:
        app.execute(
            "INSERT INTO jobs_transition (job_id, from_state, to_state, at, lease_version, cause, actor)"
            " VALUES (%s, 'planned', 'cancelled', now() - interval '400 days', 0, 'old', 't')",
            [history.pk],
        )
    with as_role(settings.LEITSTAND_DB_ROLES["maintenance"]) as maintenance:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            maintenance.execute("DELETE FROM jobs_transition")
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="not an append-only log"):
            maintenance.execute("SELECT leitstand_log_purge('jobs_job', now())")
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="last day"):
            maintenance.execute("SELECT leitstand_log_purge('jobs_transition', now())")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            maintenance.execute("SELECT count(*) FROM auth_user")  # it reads nothing itself
        purged = maintenance.execute("SELECT leitstand_log_purge('jobs_transition', now() - interval '1 year')")
        assert purged.fetchone()[0] == 1
    assert not Transition.objects.filter(cause="old").exists()
    assert Transition.objects.filter(job=history).count() == 1, "the recent history is kept"


def test_the_check_warns_when_the_application_connects_as_the_owner(settings):
    from config.checks import database_roles

    assert database_roles(databases=["default"]) == [], "the application role: no warning"
    settings.LEITSTAND_DATABASE_OWNER_URL = ""
    with as_owner():
        (warning,) = database_roles(databases=["default"])
    assert warning.id == "leitstand.W001" and "owner of its tables" in warning.msg


def test_the_check_warns_when_no_idle_timeout_holds_behind_pgbouncer(settings):
    from django.db import transaction

    from config.checks import pgbouncer_idle_timeout

    settings.LEITSTAND_PGBOUNCER = "transaction"
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT set_config('idle_in_transaction_session_timeout', '60s', true)")
        assert pgbouncer_idle_timeout(databases=["default"]) == []
        cursor.execute("SELECT set_config('idle_in_transaction_session_timeout', '0', true)")
        (warning,) = pgbouncer_idle_timeout(databases=["default"])
    assert warning.id == "leitstand.W002" and "idle_in_transaction_session_timeout" in warning.msg
    settings.LEITSTAND_PGBOUNCER = ""
    assert pgbouncer_idle_timeout(databases=["default"]) == [], "a direct connection passes it at startup"
