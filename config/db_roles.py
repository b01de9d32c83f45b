"""The four database roles, as in production (``docs/operations.md``, "Database roles"):

- the **owner** (``leitstand_owner``) runs the migrations and owns every table and function;
- the **application** (``leitstand_app``) is what every process connects as: it reads and writes
  rows and owns nothing, so it cannot ALTER or TRUNCATE a table, disable a trigger, replace a
  function (the database clock ``leitstand_now()`` among them), or UPDATE and DELETE rows of the
  append-only logs;
- the **maintenance** role (``leitstand_maintenance``) may only run the purge functions, which the
  owner owns (``SECURITY DEFINER``, resolving nothing through ``public``); it reads no table itself.

After every migration that changed something, the owner grants the application and the
maintenance role what they need (``grants_apply``, a ``post_migrate`` receiver), so a table a later
migration adds is granted too. A database whose roles do not exist (one role for everything) is left
as it is; ``manage.py check --database default`` warns about it.

This module must not import Django at import time: the embedded server's start-up uses its names.
"""

from __future__ import annotations

from contextlib import contextmanager

OWNER, APPLICATION, MAINTENANCE = "leitstand_owner", "leitstand_app", "leitstand_maintenance"
TASKS = "leitstand_tasks"

# Functions only the maintenance role may run (owned by the owner, SECURITY DEFINER).
MAINTENANCE_FUNCTIONS = (
    "leitstand_log_purge(regclass, timestamptz)",
    "leitstand_jobs_purge(uuid[])",
    "leitstand_partitions_ensure(integer)",
    "leitstand_partitions_drop(date)",
)
# The engine's lane bookkeeping (jobs/functions.sql): run as the owner, by the application alone.
APPLICATION_FUNCTIONS = ("jobs_flow_lanes_touch(uuid[])", "jobs_flow_lanes_refresh(bigint[])")


def grants_sql(
    application: str,
    maintenance: str,
    functions=MAINTENANCE_FUNCTIONS,
    *,
    application_functions=APPLICATION_FUNCTIONS,
    idle_in_transaction_ms: int = 60_000,
    tasks: str | None = None,
) -> list[str]:
    from jobs.models import AuditEntry, Job, StepEvent, Transition

    # Tables whose rows are never changed or deleted by the application (triggers refuse it as well).
    append_only = ", ".join(model._meta.db_table for model in (Transition, AuditEntry))
    # Partitioned tables: the application reaches their rows through the parent only.
    partitioned = [model._meta.db_table for model in (Transition, StepEvent)]
    statements = [
        # The database's own default, so it holds for connections that cannot pass it at startup
        # (PgBouncer refuses the ``options`` startup parameter); only the database's owner may set it.
        f"""DO $$ BEGIN
            IF (SELECT datdba = (SELECT oid FROM pg_roles WHERE rolname = current_user)
                FROM pg_database WHERE datname = current_database()) THEN
                EXECUTE format('ALTER DATABASE %I SET idle_in_transaction_session_timeout = %L',
                               current_database(), '{int(idle_in_transaction_ms)}ms');
            END IF; END $$""",
        "REVOKE CREATE ON SCHEMA public FROM PUBLIC",  # nobody plants objects the owner's functions could find
        f"GRANT USAGE ON SCHEMA public TO {application}, {maintenance}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {application}",
        f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {application}",  # no setval
        f"REVOKE UPDATE, DELETE, TRUNCATE ON {append_only} FROM {application}",
        f"REVOKE INSERT, UPDATE, DELETE ON django_migrations FROM {application}",  # what the owner runs next
        # A job leaves only through the maintenance role's purge, which takes archived jobs only.
        f"REVOKE DELETE, TRUNCATE ON {Job._meta.db_table} FROM {application}",
        # Its partitions are the owner's alone (a partition's own privileges would bypass the parent's).
        f"""DO $$ DECLARE part regclass; BEGIN
            FOR part IN SELECT inhrelid::regclass FROM pg_inherits
                WHERE inhparent = ANY (ARRAY[{", ".join(f"to_regclass('public.{t}')" for t in partitioned)}])
            LOOP EXECUTE format('REVOKE ALL ON %s FROM {application}', part); END LOOP; END $$""",
    ]
    for function in functions:  # the maintenance role reads nothing itself: it runs these
        statements += [
            f"REVOKE ALL ON FUNCTION {function} FROM PUBLIC, {application}",
            f"GRANT EXECUTE ON FUNCTION {function} TO {maintenance}",
        ]
    for function in application_functions:  # they run as the owner: nobody else may call them
        statements += [
            f"REVOKE ALL ON FUNCTION {function} FROM PUBLIC, {maintenance}",
            f"GRANT EXECUTE ON FUNCTION {function} TO {application}",
        ]
    if tasks:
        statements += _tasks_grants(tasks, application_functions)
    return statements


def _tasks_grants(tasks: str, application_functions) -> list[str]:
    """The tasks role: what a pool needs to claim, heartbeat, run and end jobs (and its tasks to
    enqueue others), by allow-list: a table a migration adds is not reachable until it is listed
    here (a team grants its own tasks' tables; nothing here revokes those)."""
    from jobs import models as engine
    from workers.runtime.models import Pool, WorkerProcess

    written = [
        engine.Job,
        engine.Attempt,
        engine.StaleWrite,
        engine.DeposedWrite,
        engine.Effect,
        engine.StepEvent,
        engine.WebhookEvent,  # the transitions' trigger queues a job's events
        engine.Batch,
        engine.BatchCounter,
        engine.FlowRest,
        engine.FlowLane,
        engine.FlowClock,
        Pool,
        WorkerProcess,
    ]
    grants = [(model._meta.db_table, "SELECT, INSERT, UPDATE") for model in written]
    grants += [
        (engine.Transition._meta.db_table, "SELECT, INSERT"),  # append-only
        (engine.FlowKey._meta.db_table, "SELECT"),  # the claim reads operators' settings
    ]
    # Each table only where it exists: a database migrated back (a test, a rollback) lacks newer ones.
    statements = [
        f"GRANT USAGE ON SCHEMA public TO {tasks}",
        f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {tasks}",
        *(
            f"""DO $$ BEGIN IF to_regclass('public.{table}') IS NOT NULL THEN
                GRANT {privileges} ON {table} TO {tasks}; END IF; END $$"""
            for table, privileges in grants
        ),
    ]
    for function in application_functions:
        statements.append(f"GRANT EXECUTE ON FUNCTION {function} TO {tasks}")
    return statements


def grants_apply(*, using: str = "default", force: bool = False, **kwargs) -> bool:
    """Grant the application and maintenance roles their privileges, as the owner. Runs after a
    migration that changed something (``plan``), or when ``force``d (``manage.py db grants``); False
    when the roles do not exist or this connection does not own the tables."""
    from django.conf import settings
    from django.db import connections, transaction

    from jobs.models import Job

    if not force and not kwargs.get("plan"):
        return False
    roles = settings.LEITSTAND_DB_ROLES
    with transaction.atomic(using=using), connections[using].cursor() as cursor:  # no moment with too much
        cursor.execute(
            "SELECT count(*) = 2 FROM pg_roles WHERE rolname IN (%s, %s)",
            [roles["application"], roles["maintenance"]],
        )
        roles_exist = cursor.fetchone()[0]
        cursor.execute("SELECT tableowner = current_user FROM pg_tables WHERE tablename = %s", [Job._meta.db_table])
        owned = cursor.fetchone()
        if not roles_exist or not owned or not owned[0]:
            return False
        cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [roles["tasks"]])
        tasks = roles["tasks"] if cursor.fetchone() else None  # optional: only where a tasks-only pool runs
        cursor.execute(
            "SELECT f FROM unnest(%s::text[]) AS f WHERE to_regprocedure(f) IS NOT NULL", [list(MAINTENANCE_FUNCTIONS)]
        )
        functions = [row[0] for row in cursor.fetchall()]  # a database migrated back may lack some
        cursor.execute(
            "SELECT f FROM unnest(%s::text[]) AS f WHERE to_regprocedure(f) IS NOT NULL", [list(APPLICATION_FUNCTIONS)]
        )
        application_functions = [row[0] for row in cursor.fetchall()]
        idle_ms = settings.IDLE_IN_TRANSACTION_TIMEOUT_MS
        for statement in grants_sql(
            roles["application"],
            roles["maintenance"],
            functions,
            application_functions=application_functions,
            idle_in_transaction_ms=idle_ms,
            tasks=tasks,
        ):
            cursor.execute(statement)
    return True


@contextmanager
def as_owner_connection(using: str = "default"):
    """The connection ``using`` logs in as the owner (``LEITSTAND_DATABASE_OWNER_URL``) inside the
    block, and as before after it; without an owner URL it stays as it is."""
    import dj_database_url
    from django.conf import settings
    from django.db import connections

    owner_url = settings.LEITSTAND_DATABASE_OWNER_URL
    if not owner_url:
        yield
        return
    connection = connections[using]
    owner = dj_database_url.parse(owner_url)
    saved = {key: connection.settings_dict.get(key) for key in _CREDENTIALS}
    connection.close()
    connection.settings_dict.update({key: owner.get(key) for key in _CREDENTIALS})
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict.update(saved)


_CREDENTIALS = ("NAME", "USER", "PASSWORD", "HOST", "PORT")
