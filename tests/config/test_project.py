"""The project as its operators meet it: production checks, the embedded database command, docs."""

import os
import secrets
import subprocess
import sys

import pytest
from django.core.management import call_command

from tests.support.db import PROJECT_ROOT, child_env


def manage(*args, env, check=True):
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=check,
    )


def production_env():
    env = child_env()
    for name in list(env):
        if name.startswith("LEITSTAND_"):
            del env[name]
    env["DJANGO_SETTINGS_MODULE"] = "config.settings"
    env["LEITSTAND_SECRET_KEY"] = secrets.token_urlsafe(50)
    env["LEITSTAND_ALLOWED_HOSTS"] = "leitstand.example.org"
    return env


@pytest.mark.django_db
def test_check_deploy_reports_no_issues_in_the_production_configuration():
    result = manage("check", "--deploy", "--fail-level", "DEBUG", env=production_env(), check=False)
    assert "System check identified no issues" in result.stdout, result.stdout + result.stderr


def test_production_settings_refuse_to_start_without_a_secret_key():
    env = production_env()
    del env["LEITSTAND_SECRET_KEY"]
    result = manage("check", env=env, check=False)
    assert result.returncode != 0
    assert "LEITSTAND_SECRET_KEY is not set" in result.stderr


def test_production_settings_name_no_database_of_their_own_and_import_no_development_tools():
    """Issue 55: the settings imported devtools to find the embedded server, and installed it as an
    app in production. Production names its database; manage.py's development path sets it."""
    env = production_env()
    del env["DATABASE_URL"]
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )  # the WSGI entry, a worker: no manage.py to start a development server
    assert result.returncode != 0 and "DATABASE_URL is not set" in result.stderr, result.stderr[-500:]
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, django; django.setup(); from django.conf import settings; "
            "print('devtools' in sys.modules, 'devtools' in settings.INSTALLED_APPS)",
        ],
        cwd=PROJECT_ROOT,
        env=production_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert loaded.stdout.split() == ["False", "False"], loaded.stdout + loaded.stderr


def test_a_malformed_setting_is_named_in_the_error():
    env = production_env()
    env["LEITSTAND_HSTS_SECONDS"] = "a year"
    result = manage("check", env=env, check=False)
    assert "LEITSTAND_HSTS_SECONDS='a year' is not an integer" in result.stderr


@pytest.mark.django_db
def test_the_models_and_migrations_agree():
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)


def test_the_state_diagram_in_the_docs_matches_the_declaration():
    env = child_env(LEITSTAND_DEBUG="true")
    generated = manage("graph_transitions", "jobs.Job", env=env).stdout
    committed = (PROJECT_ROOT / "docs" / "job-states.dot").read_text()
    # graph_transitions emits nodes and edges in set order; compare the lines, not their order.
    assert sorted(generated.splitlines()) == sorted(committed.splitlines()), (
        "regenerate: manage.py graph_transitions jobs.Job > docs/job-states.dot && "
        "dot -Tsvg docs/job-states.dot -o docs/job-states.svg"
    )


def test_the_db_command_starts_reports_and_stops_an_embedded_server(tmp_path):
    env = child_env(
        LEITSTAND_DEBUG="true", LEITSTAND_PGDATA=str(tmp_path / "pg"), DJANGO_SETTINGS_MODULE="config.settings"
    )
    del env["DATABASE_URL"]
    try:
        assert "not initialised" in manage("db", "status", env=env).stdout
        started = manage("db", "start", env=env).stdout
        assert started.startswith("running") and str(tmp_path / "pg") in started
        # Any other command reuses the running server (it would start it if it were not running).
        assert (
            "leitstand"
            in manage(
                "shell",
                "-c",
                "from django.db import connection; "
                "connection.ensure_connection(); print(connection.settings_dict['NAME'])",
                env=env,
            ).stdout
        )
        assert manage("db", "status", env=env).stdout.startswith("running")
    finally:
        assert manage("db", "stop", env=env).stdout.strip() == "stopped"
    assert manage("db", "status", env=env).stdout.startswith("stopped")


def test_the_db_command_says_when_an_external_server_is_configured():
    env = child_env(LEITSTAND_DEBUG="true")
    assert "DATABASE_URL is set" in manage("db", "status", env=env).stdout
    refused = manage("db", "stop", env=env, check=False)
    assert refused.returncode != 0 and "no embedded server to stop" in refused.stderr


@pytest.mark.django_db
def test_database_sessions_end_idle_transactions_and_connections_persist():
    from django.conf import settings
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW idle_in_transaction_session_timeout")
        assert cursor.fetchone()[0] == "1min"
    database = settings.DATABASES["default"]
    assert (database["CONN_MAX_AGE"], database["CONN_HEALTH_CHECKS"]) == (600, True)


@pytest.mark.django_db(transaction=True)
def test_the_commands_the_demo_prints_work_as_printed_in_a_new_shell():
    # The demo prints them with the one setting they need; a new shell has nothing else of the demo's
    # environment (its database comes from DATABASE_URL here, from var/postgres on a reader's machine).
    from workers.pipeline.models import Source

    Source.objects.create(name="Galerie Nord", base_url="http://127.0.0.1:8101/")
    demo = (PROJECT_ROOT / "scripts" / "demo").read_text()
    printed = demo[demo.index("  try ") : demo.index("\nMSG")]
    commands = [line.strip() for line in printed.splitlines() if "manage.py" in line and " db stop" not in line]
    assert len(commands) == 4
    clean = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "DATABASE_URL": child_env()["DATABASE_URL"]}
    clean["LEITSTAND_PGBOUNCER"] = os.environ.get("LEITSTAND_PGBOUNCER", "")  # how to reach that database
    for command in commands:
        result = subprocess.run(
            ["bash", "-c", command.replace("$PY", sys.executable)],
            cwd=PROJECT_ROOT,
            env=clean,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
