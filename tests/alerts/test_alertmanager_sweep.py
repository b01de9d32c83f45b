"""The alertmanager sweep (dashboard/operations/alertmanager_sweep.py): its interval from
``LEITSTAND_ALERTMANAGER_REPOST_SECONDS``, an empty round, and a round that posts the open alerts
again to their route's Alertmanager — one job per route and interval."""

from dataclasses import replace

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from alerts import alertmanager_sweep
from alerts import options as alert_options
from alerts import options as alert_settings
from alerts.alertmanager_sweep import AlertmanagerConfig
from alerts.models import Alert, Route
from jobs.models import Job
from workers.runtime.sweeps import Stage, sweeps

pytestmark = pytest.mark.django_db


def test_the_interval_comes_from_the_settings_and_a_bad_one_names_it(settings):
    settings.LEITSTAND_ALERTMANAGER_REPOST_SECONDS = 90
    assert AlertmanagerConfig.from_options(alert_options.current()) == replace(
        AlertmanagerConfig.from_options(alert_settings.current()), every_seconds=90
    )
    with pytest.raises(ImproperlyConfigured, match="LEITSTAND_ALERTMANAGER_REPOST_SECONDS must be a number"):
        replace(AlertmanagerConfig.from_options(alert_settings.current()), every_seconds=None)
    sweep = sweeps.get("alertmanager")
    assert sweep.stage == Stage.OBSERVE and sweep.function.func is alertmanager_sweep.run_once


def test_an_empty_round_posts_nothing():
    assert alertmanager_sweep.run_once(AlertmanagerConfig.from_options(alert_settings.current())) == 0


def test_open_alerts_are_posted_again_once_per_interval():
    Route.objects.create(name="am", alertmanager_url="http://127.0.0.1:9093")
    for scope, state in (("pool:crawl", Alert.State.FIRING), ("pool:analysis", Alert.State.RESOLVED)):
        Alert.objects.create(
            rule="pool_no_consumers",
            scope=scope,
            state=state,
            first_seen=timezone.now(),
            last_seen=timezone.now(),
            value=0,
            threshold=1,
            diagnosis="no consumers",
            route="am",
        )
    assert (
        alertmanager_sweep.run_once(
            replace(AlertmanagerConfig.from_options(alert_settings.current()), every_seconds=3600)
        )
        == 1
    )
    alertmanager_sweep.run_once(replace(AlertmanagerConfig.from_options(alert_settings.current()), every_seconds=3600))
    (job,) = Job.objects.filter(type="alert_notify")
    assert job.payload["route"] == "am" and [a["scope"] for a in job.payload["alerts"]] == ["pool:crawl"]


def test_it_runs_with_the_config_read_from_the_settings_at_registration():
    assert sweeps.get("alertmanager").function.args == (AlertmanagerConfig.from_options(alert_options.current()),)
