"""``manage.py runpool <pool>``: run one worker pool (a django-q2 cluster), or the control process.

A pool's cluster is selected by ``Q_CLUSTER_NAME``, which django-q2 reads while Django starts
(``qcluster -n`` is read too late and silently serves the default queue), so this command re-executes
itself with the variable set. SIGTERM or Ctrl-C to this process stops the pool within
``LEITSTAND_POOL_SHUTDOWN_SECONDS``: workers finish or hand back the jobs in hand and claim nothing
new; what is still running then is killed and its jobs handed back (``workers.runtime.supervisor``).
"""

import logging
import os
import signal
import sys
import threading

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from jobs import logs

logger = logging.getLogger("leitstand.runpool")


class Command(BaseCommand):
    help = "Run a worker pool (crawl, analysis, recheck) or the control process (control)."

    def add_arguments(self, parser):
        parser.add_argument("pool", help=f"one of: {', '.join([*settings.LEITSTAND_POOLS, 'control'])}")

    def handle(self, *args, pool, **options):
        from workers.runtime.metrics import multiprocess_dir_clean

        multiprocess_dir_clean()  # metric files of processes gone since the last start
        if pool == "control" and not settings.TASKS_ONLY:
            return self._control()
        if settings.TASKS_ONLY and pool != "tasks":
            raise CommandError(
                f"LEITSTAND_TASKS_ONLY is set: this process runs only the tasks pool, not {pool!r} "
                "(it has no secret key and may connect as the tasks role: docs/operations.md)"
            )
        if pool not in settings.LEITSTAND_POOLS:
            raise CommandError(
                f"unknown pool {pool!r}; choose one of: {', '.join([*settings.LEITSTAND_POOLS, 'control'])}"
            )
        if os.environ.get("Q_CLUSTER_NAME") != pool:
            os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "Q_CLUSTER_NAME": pool})
        self._pool(pool)

    def _pool(self, pool: str) -> None:
        from workers.runtime import lifecycle
        from workers.runtime.supervisor.main import PoolCluster

        main_pid = os.getpid()
        logs.bind_process(pool=pool)  # every line of this pool's processes names it (jobs/logs.py)
        os.environ[lifecycle.MAIN_PID_VARIABLE] = str(main_pid)  # inherited by the forked workers
        lifecycle.drain_clear(main_pid)
        cluster = PoolCluster(main_pid)
        try:
            cluster.start()
            logger.info(
                "pool %s: %s workers, pid %s, supervisor %s",
                pool,
                settings.LEITSTAND_POOLS[pool]["workers"],
                main_pid,
                cluster.sentinel.pid,
            )
            cluster.run()
        finally:
            lifecycle.drain_clear(main_pid)

    def _control(self) -> None:
        from workers.runtime import control

        stop = threading.Event()

        def on_signal(signum, frame):
            stop.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        logger.info("control: pid %s, sweeps every %s s", os.getpid(), settings.LEITSTAND_CONTROL_INTERVAL_SECONDS)
        control.run(stop)
