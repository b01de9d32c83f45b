"""The console's settings (dashboard/options.py): LEITSTAND_CONSOLE and /metrics' access, declared
once, typed and checked; read from Django's settings at start-up and again when a test overrides one.
No console module but the app reads Django's settings itself."""

from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from dashboard import options
from dashboard.explain import heartbeat_limit_seconds
from dashboard.options import ConsoleOptions
from tests.support.imports import settings_readers
from workers.runtime.registry import registry

DASHBOARD = Path(__file__).resolve().parents[2] / "dashboard"
# Only the app reads Django's settings (into dashboard/options.py's ConsoleOptions).
STILL_READING = {"dashboard/apps.py"}


def test_no_new_module_of_the_console_reads_django_conf():
    readers = {reader.split(":")[0] for reader in settings_readers(DASHBOARD)}
    assert readers <= STILL_READING, f"read them from dashboard.options.current(): {sorted(readers - STILL_READING)}"


def test_the_options_follow_the_settings_and_an_override(settings):
    assert options.current() == ConsoleOptions.from_settings(settings)
    settings.LEITSTAND_CONSOLE = {**settings.LEITSTAND_CONSOLE, "stuck_heartbeat_intervals": 5}
    settings.LEITSTAND_METRICS_ALLOWED_IPS = ["192.0.2.7"]
    assert heartbeat_limit_seconds("synthetic") == 5 * registry.get("synthetic").heartbeat_seconds
    assert options.current().metrics_allowed_ips == frozenset({"192.0.2.7"})


@pytest.mark.parametrize(
    ("key", "value", "complaint"),
    [
        ("review_lease_seconds", 5, "LEITSTAND_REVIEW_LEASE_SECONDS must be a number of at least 10, not 5"),
        ("snapshot_seconds", "5", "LEITSTAND_CONSOLE_SNAPSHOT_SECONDS must be a number"),
        ("stuck_after", 3, "LEITSTAND_CONSOLE has no stuck_after; it knows snapshot_seconds"),
    ],
)
def test_a_bad_value_stops_with_its_setting_and_the_good_ones_stay(settings, key, value, complaint):
    good = options.current()
    with pytest.raises(ImproperlyConfigured, match=complaint):
        settings.LEITSTAND_CONSOLE = {**settings.LEITSTAND_CONSOLE, key: value}
    assert options.current() == good
