"""The console's admin pages, one module per area; importing this package registers them all on the
console's site (``dashboard.site.ConsoleSite``, Django's default admin site here)."""

from dashboard.admin import alerting, batches, clients, console, jobs, pipeline, pools, rechecks  # noqa: F401
