"""The console's settings (dashboard/options.py): LEITSTAND_CONSOLE and /metrics' access, the
alerting area (rules, routes, notifications, business rules) and the retention area, declared once,
typed and checked; read from Django's settings at start-up and again when a test overrides one. No
console module but the app reads Django's settings itself."""

from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from dashboard import options
from dashboard.explain import heartbeat_limit_seconds
from dashboard.options import ConsoleOptions
from tests.support.imports import settings_readers
from workers.runtime.registry import registry

DASHBOARD = Path(__file__).resolve().parents[2] / "dashboard"
# Only the app reads Django's settings (into dashboard/options.py's ConsoleOptions, with its alerting
# and retention areas).
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


def test_the_alerting_and_retention_areas_follow_an_override_and_cannot_be_changed_in_place(settings):
    settings.LEITSTAND_ALERTS = {
        **settings.LEITSTAND_ALERTS,
        "dlq_growth": {"count": 3, "overrides": {"type:crawl": {"count": 9}}},
    }
    settings.LEITSTAND_RETENTION = {**settings.LEITSTAND_RETENTION, "types": {"synthetic": {"done": 0.5}}}
    alerting, retention = options.current().alerting, options.current().retention
    assert alerting.rule_option("dlq_growth", "count") == 3
    assert alerting.rule_option("dlq_growth", "count", "type:crawl") == 9
    assert alerting.rule_option("dlq_growth", "window_seconds", default=60) == 60
    assert retention.days_for("synthetic", "done") == 0.5 and retention.days_for("crawl", "dead") == 90
    assert retention.shortest_days() == 0.5
    with pytest.raises(TypeError):
        alerting.rules["dlq_growth"]["count"] = 1  # read once: a change goes through the settings


@pytest.mark.parametrize(
    ("setting", "value", "complaint"),
    [
        ("LEITSTAND_ALERT_INTERVAL_SECONDS", 0, "LEITSTAND_ALERT_INTERVAL_SECONDS must be a number of at least 0.1"),
        ("LEITSTAND_ALERT_FALLBACK_ROUTE", "", "LEITSTAND_ALERT_FALLBACK_ROUTE must name a route"),
        ("LEITSTAND_ALERT_ROUTES", ["ops"], "LEITSTAND_ALERT_ROUTES must be a JSON object"),
        ("LEITSTAND_BUSINESS_RULES", {"match_has_plan": 5}, "LEITSTAND_BUSINESS_RULES\\['match_has_plan'\\] must be"),
        ("LEITSTAND_RETENTION", {"enabled": "yes"}, "LEITSTAND_RETENTION_ENABLED must be true or false"),
        ("LEITSTAND_RETENTION", {"jobs_per_file": 0}, "LEITSTAND_RETENTION_JOBS_PER_FILE must be a whole number"),
        ("LEITSTAND_RETENTION", {"days": {"done": 1}}, "must give days for done, cancelled, dead"),
        ("LEITSTAND_RETENTION", {"keep_forever": True}, "LEITSTAND_RETENTION has no keep_forever"),
    ],
)
def test_a_bad_alerting_or_retention_value_stops_with_its_setting(settings, setting, value, complaint):
    good = options.current()
    if setting == "LEITSTAND_RETENTION":
        value = {**settings.LEITSTAND_RETENTION, **value}
    with pytest.raises(ImproperlyConfigured, match=complaint):
        setattr(settings, setting, value)
    assert options.current() == good
