"""The rechecks' settings (rechecks/options.py): declared once, typed and checked; read from Django's
settings at start-up and again when a test overrides one; no module of rechecks/ reads them itself."""

from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from rechecks import options
from rechecks.options import RecheckOptions
from rechecks.policy import Target
from tests.support.imports import settings_readers

RECHECKS = Path(__file__).resolve().parents[2] / "rechecks"


def test_no_module_of_the_rechecks_imports_django_conf_but_the_app_that_reads_them():
    assert settings_readers(RECHECKS, exempt=("apps.py",)) == [], "read them from rechecks.options.current()"


def test_the_options_follow_the_settings_and_an_override(settings):
    assert options.current() == RecheckOptions.from_settings(settings)
    settings.LEITSTAND_RECHECK = {**settings.LEITSTAND_RECHECK, "target": "gone", "confirmations_required": 3}
    settings.LEITSTAND_RECHECK_SECOND_OPINION_AGENT = "Mozilla/5.0 test"
    assert options.current().target is Target.GONE and options.current().policy.confirmations_required == 3
    assert options.current().second_opinion_agent == "Mozilla/5.0 test"


@pytest.mark.parametrize(
    ("setting", "value", "complaint"),
    [
        ("LEITSTAND_RECHECK", {"target": "vanished"}, "LEITSTAND_RECHECK_TARGET must be one of: gone, gone_or_changed"),
        ("LEITSTAND_RECHECK", {"jitter": 1.5}, "jitter must be a fraction from 0 to below 1"),
        ("LEITSTAND_RECHECK", {"max_interval_seconds": 1}, "max_interval_seconds must not be below min_interval"),
        ("LEITSTAND_RECHECK_PLANS_PER_ROUND", 0, "LEITSTAND_RECHECK_PLANS_PER_ROUND must be a whole number"),
        ("LEITSTAND_RECHECK_SECOND_OPINION_AGENT", " ", "LEITSTAND_RECHECK_SECOND_OPINION_AGENT is empty"),
    ],
)
def test_a_bad_value_stops_with_its_setting_and_the_good_ones_stay(settings, setting, value, complaint):
    good = options.current()
    if setting == "LEITSTAND_RECHECK":
        value = {**settings.LEITSTAND_RECHECK, **value}
    with pytest.raises(ImproperlyConfigured, match=complaint):
        setattr(settings, setting, value)
    assert options.current() == good, "a refused override leaves the options as they were"
