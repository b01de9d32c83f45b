"""``manage.py cluster up|status|down`` and its faults: a cluster of network namespaces on this
machine — PostgreSQL, PgBouncer in transaction mode and worker hosts (``devtools/cluster.py``). As root."""

from django.core.management.base import BaseCommand, CommandError

from devtools import cluster as clusters


class Command(BaseCommand):
    help = "Build, inspect, disturb and remove a cluster of network namespaces on this machine (as root)."

    def add_arguments(self, parser):
        parser.add_argument(
            "action",
            choices=[
                "up",
                "status",
                "down",
                "drill",
                "partition",
                "heal",
                "kill-host",
                "restart-pgbouncer",
                "restart-postgres",
            ],
        )
        parser.add_argument("host", nargs="?", help="the host of partition, heal and kill-host (h1, h2, …)")
        parser.add_argument("--hosts", type=int, default=3, help="worker hosts (up; default 3)")
        parser.add_argument("--workers", type=int, default=2, help="workers per host's crawl pool (up; default 2)")

    def handle(self, *args, action, host, hosts, workers, **options):
        try:
            if action == "up":
                if not 1 <= hosts <= 9 or not 1 <= workers <= 8:
                    raise CommandError("--hosts is 1 … 9 and --workers 1 … 8 (this is one machine)")
                cluster = clusters.up(hosts=hosts, workers=workers)
                self.stdout.write(self.style.SUCCESS(f"cluster up: {len(cluster.hosts)} hosts"))
                self.stdout.write(clusters.status_text(cluster))
            elif action == "down":
                clusters.down()
                self.stdout.write("cluster down")
            else:
                cluster = clusters.Cluster.load()
                if action == "status":
                    self.stdout.write(clusters.status_text(cluster))
                elif action == "drill":
                    results = clusters.drill(cluster, out=self.stdout.write)
                    if failures := clusters.drill_failures(results):
                        raise CommandError(f"the drill found faults: {'; '.join(failures)}")
                elif action in ("partition", "heal", "kill-host"):
                    if not host:
                        raise CommandError(f"{action} needs a host ({', '.join(h.name for h in cluster.hosts)})")
                    cluster.host(host)  # known?
                    {"partition": clusters.partition, "heal": clusters.heal}.get(
                        action, lambda name: clusters.kill_host(cluster, name)
                    )(host)
                    self.stdout.write(f"{action} {host}: done")
                elif action == "restart-pgbouncer":
                    clusters.pgbouncer_restart(cluster)
                    self.stdout.write("pgbouncer restarted")
                else:
                    clusters.postgres_restart("immediate")
                    self.stdout.write("postgresql restarted (immediate: a crash to its clients)")
        except clusters.ClusterError as failed:
            raise CommandError(str(failed)) from None
