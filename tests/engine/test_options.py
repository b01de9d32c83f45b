"""The engine's settings (jobs/options.py): declared once, typed and checked; read from Django's
settings at start-up and again when a test overrides one; no other module of jobs/ reads them."""

from dataclasses import replace
from pathlib import Path

import pytest
from django.core.checks import run_checks

from jobs import options
from jobs.options import EngineOptions, OptionError, WebhookOptions
from tests.support.imports import settings_readers

ENGINE = Path(__file__).resolve().parents[2] / "jobs"


def test_no_module_of_the_engine_but_its_app_config_imports_django_conf():
    readers = settings_readers(ENGINE, exempt=("apps.py",))
    assert readers == [], "read the engine's settings from jobs.options.current()"


def test_the_options_follow_the_settings_and_an_override(settings):
    assert options.current() == EngineOptions.from_settings(settings)
    settings.LEITSTAND_PATHS = {"slow_factor": 5.0, "min_samples": 7}
    settings.LEITSTAND_WEBHOOK = {"url": "https://core.example/hook", "secret": "s", "events": ["job.dead"]}
    current = options.current()
    assert (current.path_slow_factor, current.path_min_samples) == (5.0, 7)
    assert current.webhook == WebhookOptions(url="https://core.example/hook", secret="s", events=("job.dead",))


def test_a_bad_value_is_refused_with_its_setting_and_reported_by_the_checks(settings):
    with pytest.raises(OptionError, match="LEITSTAND_WEBHOOK_SECRET is empty"):
        WebhookOptions(url="https://core.example/hook")
    with pytest.raises(OptionError, match="LEITSTAND_WEBHOOK_EVENTS names unknown events: job.lost"):
        WebhookOptions(events=("job.lost",))
    with pytest.raises(OptionError, match="LEITSTAND_PATHS_MIN_SAMPLES"):
        replace(options.current(), path_min_samples=0)
    with pytest.raises(AttributeError):
        options.current().host_name = "elsewhere"  # frozen
    settings.LEITSTAND_WEBHOOK = {"url": "https://core.example/hook", "secret": "", "events": []}
    assert "leitstand.E009" in {problem.id for problem in run_checks()}
