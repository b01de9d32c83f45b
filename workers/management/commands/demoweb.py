"""``manage.py demoweb [--ports 8101,8102]``: serve the two demo sites until stopped (demo only)."""

import signal
import threading

from django.core.management.base import BaseCommand, CommandError

from workers.pipeline.demoweb import DemoWeb


class Command(BaseCommand):
    help = "Serve the demo web (two local sites with protected-image copies) for the pipeline demo."

    def add_arguments(self, parser):
        parser.add_argument("--ports", default="8101,8102", help="two ports, for the sites A and B")
        parser.add_argument(
            "--vanish-after",
            type=float,
            default=600.0,
            help="seconds until the vanishing page and its image answer 404",
        )

    def handle(self, *args, ports, vanish_after, **options):
        try:
            a, b = (int(p) for p in ports.split(","))
        except ValueError:
            raise CommandError("--ports takes two port numbers, e.g. 8101,8102") from None
        try:
            web = DemoWeb(ports=(a, b), vanish_after=vanish_after).start()
        except OSError as exc:
            raise CommandError(f"cannot listen on ports {a}, {b}: {exc}") from None
        stopped = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stopped.set())
        self.stdout.write(f"demo web serving {', '.join(web.base_url(i) for i in range(2))}", ending="\n")
        self.stdout.flush()
        stopped.wait()
        web.stop()
