"""The alerts sweep (alerts/alerts_sweep.py): its interval from
``LEITSTAND_ALERT_INTERVAL_SECONDS``, an empty round, and a round that fires an alert and one that
resolves it."""

from dataclasses import replace

import pytest
from django.core.exceptions import ImproperlyConfigured

from alerts import alerts_sweep
from alerts import options as alert_options
from alerts import options as alert_settings
from alerts.alerts_sweep import AlertsConfig
from alerts.models import Alert
from tests.alerts.test_alerts import immediate  # noqa: F401 (fire and resolve at once)
from workers.runtime.models import WorkerProcess
from workers.runtime.sweeps import Stage, sweeps

pytestmark = pytest.mark.django_db


def test_the_interval_comes_from_the_settings_and_a_bad_one_names_it(settings):
    settings.LEITSTAND_ALERT_INTERVAL_SECONDS = 3
    assert AlertsConfig.from_options(alert_options.current()) == replace(
        AlertsConfig.from_options(alert_settings.current()), every_seconds=3
    )
    with pytest.raises(ImproperlyConfigured, match="LEITSTAND_ALERT_INTERVAL_SECONDS must be a number of at least 0.1"):
        replace(AlertsConfig.from_options(alert_settings.current()), every_seconds=-1)
    sweep = sweeps.get("alerts")
    assert sweep.stage == Stage.OBSERVE and sweep.function.func is alerts_sweep.run_once


def test_an_empty_round_fires_nothing():
    report = alerts_sweep.run_once(AlertsConfig.from_options(alert_settings.current()))
    assert (report["fired"], report["open"], report["failed_rules"]) == (0, 0, [])


def test_a_pool_without_consumers_fires_and_resolves_when_one_starts(make_job):
    make_job("crawl", pool="crawl")
    assert alerts_sweep.run_once(AlertsConfig.from_options(alert_settings.current()))["fired"] == 1
    assert Alert.objects.get(rule="pool_no_consumers").scope == "pool:crawl"
    WorkerProcess.objects.create(host="host-b", pid=1, pool="crawl")
    assert alerts_sweep.run_once(AlertsConfig.from_options(alert_settings.current()))["resolved"] == 1


def test_it_runs_with_the_config_read_from_the_settings_at_registration():
    assert sweeps.get("alerts").function.args == (AlertsConfig.from_options(alert_options.current()),)
