"""One current text per database function and trigger (issue 36): each stands in the ``functions.sql``
of the app that owns it, and the migrated database runs exactly that text. The function texts are
compared as PostgreSQL renders them (``pg_get_functiondef``) after the migrations and after running
the file's ``CREATE OR REPLACE`` in a transaction that is rolled back; triggers by their definition
(``pg_get_triggerdef``). Both up to whitespace."""

import importlib
import re
from pathlib import Path

import psycopg
import pytest

from jobs.sql import Queries
from tests.support.db import OWNER
from tests.support.db import test_database_url as database_url

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
FILES = [ROOT / "jobs" / "functions.sql", ROOT / "history" / "functions.sql"]
# The suite runs on a clock it can move (tests/support/db.py); production's is the migrations'.
PRODUCTION_CLOCK = importlib.import_module("jobs.migrations.0023_clock_and_purge_for_roles").CLOCK
OURS = "n.nspname = 'public' AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = {oid} AND d.deptype = 'e')"


def squash(text: str) -> str:
    return " ".join(text.replace("public.", "").split()).rstrip(";").strip()


def definitions() -> tuple[dict[str, str], dict[str, str]]:
    """The files' functions and triggers (a trigger's entry is named ``<trigger>_trigger``)."""
    functions, triggers = {}, {}
    for path in FILES:
        queries = Queries.read(path)
        for name in queries.names():
            text = getattr(queries, name)
            if text.startswith("CREATE TRIGGER"):
                triggers[name.removesuffix("_trigger")] = text
            else:
                assert text.startswith(f"CREATE OR REPLACE FUNCTION {name}("), (
                    f"{path.name}: {name} defines another name"
                )
                functions[name] = text
    return functions, triggers


def in_database(connection) -> tuple[dict[str, str], dict[str, str]]:
    functions = dict(
        connection.execute(
            "SELECT p.proname, pg_get_functiondef(p.oid) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            f" WHERE {OURS.format(oid='p.oid')}"
        ).fetchall()
    )
    triggers = dict(
        connection.execute(
            "SELECT t.tgname, pg_get_triggerdef(t.oid) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            f" WHERE NOT t.tgisinternal AND t.tgparentid = 0 AND {OURS.format(oid='t.oid')}"
        ).fetchall()
    )
    return functions, triggers


def test_every_function_and_trigger_of_the_database_stands_in_its_file_as_it_runs():
    functions, triggers = definitions()
    with psycopg.connect(database_url(user=OWNER), autocommit=True) as owner:
        with owner.transaction(force_rollback=True):
            owner.execute(PRODUCTION_CLOCK)
            migrated, migrated_triggers = in_database(owner)
            for text in functions.values():
                owner.execute(text)
            from_files, _ = in_database(owner)
    assert sorted(migrated) == sorted(functions), "a function of the database without its text in a file, or back"
    for name in functions:
        assert squash(from_files[name]) == squash(migrated[name]), f"{name}: the file's text is not the database's"
    assert sorted(migrated_triggers) == sorted(triggers), "a trigger without its text in a file, or back"
    for name, text in triggers.items():
        assert squash(migrated_triggers[name]) == squash(text), f"{name}: the file's text is not the database's"


def test_a_changed_text_is_told_apart():
    """The comparison sees a change inside a function's body, not only in its header."""
    functions, _ = definitions()
    changed = re.sub(
        r"'ready_for_review'\)", "'ready_for_review', 'failed')", functions["jobs_transition_webhook_outbox"]
    )
    assert changed != functions["jobs_transition_webhook_outbox"]
    with psycopg.connect(database_url(user=OWNER), autocommit=True) as owner:
        with owner.transaction(force_rollback=True):
            migrated, _ = in_database(owner)
            owner.execute(changed)
            now, _ = in_database(owner)
    assert squash(now["jobs_transition_webhook_outbox"]) != squash(migrated["jobs_transition_webhook_outbox"])
