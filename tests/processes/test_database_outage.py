"""The database away under an idle pool (issue 54, item 16): a drill once wrote 134,495 log lines
(8.9 MB) in ten minutes from one idle two-worker pool — each heartbeat loop's traceback ten times a
second, and the supervisor's warnings with them. Here a real `runpool synthetic` connects through a
proxy the test cuts for a while: the outage is logged when it begins, backed off while it lasts and
once when it ends, and the pool goes on working afterwards."""

import re
import time

import pytest

from jobs.models import State
from tests.support.db import test_database_url as database_url
from tests.support.db_proxy import DatabaseProxy
from tests.support.pools import PoolProcesses, state_of, submit, wait_for

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

OUTAGE_SECONDS = 12


def test_a_database_outage_under_an_idle_pool_is_logged_as_one_outage(tmp_path):
    proxy = DatabaseProxy()
    pools = PoolProcesses(str(tmp_path), DATABASE_URL=proxy.url(database_url()))
    try:
        pools.start("control", DATABASE_URL=database_url())  # the control process keeps its database
        pools.start("synthetic")
        first = submit({"steps": ["a"]}, pool="synthetic")
        wait_for(
            lambda: pools.check_running() and state_of(first) == State.RESULT_STORED,
            timeout=60,
            message="a first job",
        )
        before = len(pools.log("synthetic").splitlines())
        proxy.cut()
        time.sleep(OUTAGE_SECONDS)
        during = pools.log("synthetic").splitlines()[before:]
        proxy.restore()
        wait_for(
            lambda: "works again after" in pools.log("synthetic"),
            timeout=30,
            message="the end of the outage in the log",
        )
        after = submit({"steps": ["b"]}, pool="synthetic")
        wait_for(lambda: state_of(after) == State.RESULT_STORED, timeout=60, message="a job after the outage")
    finally:
        pools.stop_all()
        proxy.close()
    log = pools.log("synthetic")
    records = [line for line in during if re.match(r"\d{4}-\d\d-\d\d ", line)]
    size = sum(len(line) + 1 for line in during)
    # Each worker's heartbeat loop says once that it failed (with the traceback) and django-q's pusher
    # that it could not pull from its broker: not a line (and traceback) per round, ten a second.
    assert len(records) <= 12 and size < 40_000, (len(records), size, "\n".join(records))
    assert log.count("heartbeat round of synthetic worker") >= 2 and "failed: OperationalError" in log
    assert log.count("works again after") >= 2  # each worker, once
