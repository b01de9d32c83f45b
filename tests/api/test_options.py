"""The API's settings (api/options.py): declared once, typed and checked; read from Django's settings
at start-up and again when a test overrides one (the rate and body limits at work, through real
requests, are in test_jobs.py and test_trust.py); no module of api/ reads them itself."""

from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from api import options
from api.options import ApiOptions
from tests.support.imports import settings_readers

API = Path(__file__).resolve().parents[2] / "api"


def test_no_module_of_the_api_imports_django_conf_but_the_app_that_reads_them():
    assert settings_readers(API, exempt=("apps.py",)) == [], "read the API's settings from api.options.current()"


def test_the_options_follow_the_settings_and_an_override(settings):
    assert options.current() == ApiOptions.from_settings(settings)
    settings.LEITSTAND_API_JOBS_PER_MINUTE = 5
    assert options.current().jobs_per_minute == 5


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("LEITSTAND_API_MAX_BODY_BYTES", 100),
        ("LEITSTAND_API_RATE_PER_MINUTE", 0),
        ("LEITSTAND_API_JOBS_PER_MINUTE", "many"),
        ("LEITSTAND_API_UNAUTHENTICATED_PER_MINUTE", 1.5),
        ("LEITSTAND_TRUSTED_PROXIES", -1),
    ],
)
def test_a_bad_value_stops_with_its_setting_and_the_good_ones_stay(settings, setting, value):
    good = options.current()
    with pytest.raises(ImproperlyConfigured, match=f"{setting} must be a whole number of at least"):
        setattr(settings, setting, value)
    assert options.current() == good
