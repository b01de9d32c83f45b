"""Every process through a real PgBouncer in transaction mode (issue 19): two control processes elect
a leader by the lease row, a pool claims, heartbeats and completes jobs with their effects once, and
PostgreSQL sees no more server connections than PgBouncer's pool holds however many clients connect."""

import psutil
import pytest
from django.conf import settings
from django.db import connection

from devtools import pgbouncer
from jobs.models import Effect, LeaderLease, State
from tests.support.db import maintenance_database_url
from tests.support.db import test_database_url as database_url
from tests.support.pools import PoolProcesses, state_of, submit, wait_for
from workers.runtime.selectors import pool_consumers

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

POOL_SIZE = 3


def server_connections() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND usename = %s "
            "AND application_name = 'leitstand-pooled'",
            [settings.LEITSTAND_DB_ROLES["application"]],
        )
        return cursor.fetchone()[0]


def client_connections(socket_path) -> int:
    """Connections accepted on PgBouncer's socket (the listening socket itself has the same name)."""
    return sum(1 for c in psutil.net_connections(kind="unix") if c.laddr == str(socket_path)) - 1


def test_pools_and_control_run_through_pgbouncer_in_transaction_mode(tmp_path):
    roles = settings.LEITSTAND_DB_ROLES
    with pgbouncer.local(database_url(), users=[roles["maintenance"]], pool_size=POOL_SIZE) as bouncer:
        processes = PoolProcesses(
            str(tmp_path),
            DATABASE_URL=bouncer.through(database_url()),
            LEITSTAND_DATABASE_MAINTENANCE_URL=bouncer.through(maintenance_database_url()),
            LEITSTAND_PGBOUNCER="transaction",
            LEITSTAND_DB_APPLICATION_NAME="leitstand-pooled",
        )
        try:
            processes.start("control", key="control-a", LEITSTAND_HOST_NAME="host-a")
            processes.start("control", key="control-b", LEITSTAND_HOST_NAME="host-b")
            processes.start("crawl", LEITSTAND_HOST_NAME="host-c")
            wait_for(lambda: LeaderLease.objects.filter(name="control").exists(), timeout=30, message="a leader")
            wait_for(lambda: pool_consumers()["crawl"] == 2, timeout=30, message="two crawl workers")
            jobs = [submit({"steps": ["fetch", "store"], "effect": True}) for _ in range(40)]
            wait_for(
                lambda: processes.check_running() and all(state_of(j) == State.RESULT_STORED for j in jobs),
                timeout=60,
                message="40 synthetic jobs to complete through PgBouncer",
            )
            assert Effect.objects.filter(job__in=jobs).count() == 40
            clients = client_connections(bouncer.socket)
            assert clients > POOL_SIZE, f"the processes hold {clients} client connections"
            servers = server_connections()
            assert 1 <= servers <= POOL_SIZE, f"PostgreSQL sees {servers} connections: at most PgBouncer's pool"
            assert LeaderLease.objects.get(name="control").term == 1, "one election, held through the run"
        finally:
            processes.stop_all()
