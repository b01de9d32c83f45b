"""Alerting's settings (alerts/options.py): the rules, routes, notifications and business rules,
typed and checked; read from Django's settings at start-up and again when a test overrides one. No
module of alerting but its app reads Django's settings itself."""

from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from alerts import options
from tests.support.imports import settings_readers

ALERTS = Path(__file__).resolve().parents[2] / "alerts"


def test_only_the_app_reads_django_conf():
    assert settings_readers(ALERTS, exempt=("apps.py",)) == []


def test_the_options_follow_an_override_and_cannot_be_changed_in_place(settings):
    settings.LEITSTAND_ALERTS = {
        **settings.LEITSTAND_ALERTS,
        "dlq_growth": {"count": 3, "overrides": {"type:crawl": {"count": 9}}},
    }
    alerting = options.current()
    assert alerting == options.AlertingOptions.from_settings(settings)
    assert alerting.rule_option("dlq_growth", "count") == 3
    assert alerting.rule_option("dlq_growth", "count", "type:crawl") == 9
    assert alerting.rule_option("dlq_growth", "window_seconds", default=60) == 60
    with pytest.raises(TypeError):
        alerting.rules["dlq_growth"]["count"] = 1  # read once: a change goes through the settings


@pytest.mark.parametrize(
    ("setting", "value", "complaint"),
    [
        ("LEITSTAND_ALERT_INTERVAL_SECONDS", 0, "LEITSTAND_ALERT_INTERVAL_SECONDS must be a number of at least 0.1"),
        ("LEITSTAND_ALERT_FALLBACK_ROUTE", "", "LEITSTAND_ALERT_FALLBACK_ROUTE must name a route"),
        ("LEITSTAND_ALERT_ROUTES", ["ops"], "LEITSTAND_ALERT_ROUTES must be a JSON object"),
        ("LEITSTAND_BUSINESS_RULES", {"match_has_plan": 5}, "LEITSTAND_BUSINESS_RULES\\['match_has_plan'\\] must be"),
    ],
)
def test_a_bad_value_stops_with_its_setting_and_the_good_ones_stay(settings, setting, value, complaint):
    good = options.current()
    with pytest.raises(ImproperlyConfigured, match=complaint):
        setattr(settings, setting, value)
    assert options.current() == good
