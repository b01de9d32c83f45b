"""``manage.py fetch URL``: one request through the safe client, and its decision.

The operator's tool for "why can't we crawl this source?": prints the robots.txt decision, then
either what was fetched (status, size, time, address, redirects) or why the client refused (URL rules,
SSRF guard, limits, deadline).
"""

from django.core.management.base import BaseCommand, CommandError

from jobs.errors import JobError
from workers.pipeline.http import IMAGE_TYPES, SafeClient
from workers.pipeline.robots import robots_check


class Command(BaseCommand):
    help = "Fetch one URL through Leitstand's safe HTTP client and print the decision."

    def add_arguments(self, parser):
        parser.add_argument("url")
        parser.add_argument("--image", action="store_true", help="require an image (content type and magic bytes)")

    def handle(self, *args, url, image, **options):
        client = SafeClient()
        try:
            # The URL rules and the address guard first, as the pipeline does: a refused URL's site is
            # never asked for its robots.txt either.
            client.check(url)
            robots = robots_check(url, client=client)
            self.stdout.write(
                f"robots: {robots.reason}" + (f" (crawl-delay {robots.crawl_delay:g} s)" if robots.crawl_delay else "")
            )
            if not robots.is_allowed:
                raise CommandError(f"refused: robots.txt: {robots.reason}")
            result = client.fetch(url, accept=IMAGE_TYPES if image else None)
        except JobError as refused:
            raise CommandError(f"refused: {type(refused).__name__}: {str(refused)!r}") from None
        self.stdout.write(
            f"fetched {result.final_url}  status {result.status}  {len(result.body)} bytes  "
            f"{result.elapsed_seconds * 1000:.0f} ms  from {result.address}"
        )
        for hop in result.redirects:
            self.stdout.write(f"  redirected from {hop}")
