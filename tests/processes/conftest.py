"""Fixtures the process tests share."""

import pytest

from tests.support.pools import PoolProcesses


@pytest.fixture(scope="module")
def tasks_pools(django_db_setup, django_db_blocker, tmp_path_factory):
    """A real ``tasks`` pool and the control process (which promotes retries when due), for a module
    of Django tasks' tests; leases of 2 s (FAST_TIMING)."""
    processes = PoolProcesses(str(tmp_path_factory.mktemp("run")))
    processes.start("control")
    processes.start("tasks")
    yield processes
    processes.stop_all()
