"""Settings for the test suite: the production settings plus a throwaway PostgreSQL.

Without DATABASE_URL, the first process that loads these settings (pytest) starts a PostgreSQL
server of its own in a temporary directory, which is stopped and deleted when that process exits.
It exports DATABASE_URL, so every process the tests start (pool workers, race workers) reaches the
same server. With DATABASE_URL set, that server is used instead (e.g. a system PostgreSQL 15).

The test process connects as the owner role (it creates the test database, migrates and flushes);
the code under test runs as the application role (``tests/support/db.py``: the pytest process sets
that role around each test, and the processes tests start log in as it).

With ``LEITSTAND_TEST_PGBOUNCER=transaction`` the first process also starts a PgBouncer in
transaction mode in front of that server and points DATABASE_URL (its own and its children's) at
it, with ``LEITSTAND_PGBOUNCER=transaction``: the whole suite through transaction pooling
(docs/operations.md, "Many hosts through PgBouncer"). Then the test process keeps no session state
either: it logs in as the role it acts as (``tests/support/db.py``).
"""

import os
import tempfile
from pathlib import Path

if os.environ.get("LEITSTAND_TASKS_ONLY") != "true":  # a tasks-only pool runs without the key (its drill)
    os.environ.setdefault("LEITSTAND_SECRET_KEY", "test-only-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz")
os.environ.setdefault("LEITSTAND_SSL_REDIRECT", "false")
os.environ.setdefault("LEITSTAND_ARCHIVE_DIR", tempfile.mkdtemp(prefix="leitstand-test-archive-"))
os.environ.setdefault("LEITSTAND_STATIC_ROOT", tempfile.mkdtemp(prefix="leitstand-test-static-"))  # WhiteNoise's root

if not os.environ.get("DATABASE_URL"):
    from devtools import embedded_db

    _server = embedded_db.start(Path(tempfile.mkdtemp(prefix="leitstand-test-pg-")), throwaway=True)
    os.environ["DATABASE_URL"] = _server.database_url(user=embedded_db.OWNER)

if os.environ.get("LEITSTAND_TEST_PGBOUNCER") == "transaction":
    import atexit
    from contextlib import ExitStack

    from config import db_roles
    from devtools import pgbouncer

    _bouncer = ExitStack()
    atexit.register(_bouncer.close)
    _local = _bouncer.enter_context(
        pgbouncer.local(
            os.environ["DATABASE_URL"],
            users=[db_roles.APPLICATION, db_roles.MAINTENANCE, db_roles.TASKS],
            pool_size=8,
            any_database=True,
        )
    )
    os.environ["DATABASE_URL"] = _local.through(os.environ["DATABASE_URL"])
    os.environ["LEITSTAND_PGBOUNCER"] = "transaction"
    os.environ["LEITSTAND_TEST_PGBOUNCER"] = "started"  # the processes tests start use this one

from config.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# A test app with Django @task functions (tests/runtime/test_django_tasks.py), and a second queue.
INSTALLED_APPS = [*INSTALLED_APPS, "tests.support.tasksapp"]  # noqa: F405
if "devtools" not in INSTALLED_APPS:  # manage.py cluster: the cluster drill's command
    INSTALLED_APPS.append("devtools")
# tests/support/myapp: importable, not installed, its tasks outside any tasks module (listed as a
# team lists such packages in LEITSTAND_TASK_MODULES).
TASKS = {
    "default": {
        **TASKS["default"],  # noqa: F405
        "QUEUES": ["default", "synthetic"],
        "OPTIONS": {**TASKS["default"]["OPTIONS"], "MODULES": ["tests.support.myapp"]},  # noqa: F405
    }
}
# A team's own URLs in front of Leitstand's, for the web server a process test starts
# (tests/processes/test_django_tasks.py: a task enqueued by a team's view).
if os.environ.get("LEITSTAND_TEST_URLCONF"):
    ROOT_URLCONF = os.environ["LEITSTAND_TEST_URLCONF"]
