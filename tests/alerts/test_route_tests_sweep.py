"""The route-tests sweep (dashboard/operations/route_tests_sweep.py): its config, an empty round, and
a round that sends a test to each route with channels whose test is due — once per interval."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from alerts import route_tests_sweep
from alerts.models import ReceiptTest, Route
from alerts.route_tests_sweep import RouteTestsConfig
from jobs.models import Job
from workers.runtime.sweeps import Stage, sweeps

pytestmark = pytest.mark.django_db


def test_defaults_and_a_bad_interval():
    assert RouteTestsConfig() == RouteTestsConfig(every_seconds=60)
    with pytest.raises(ImproperlyConfigured, match="the route-tests sweep's interval must be a number of at least 1"):
        RouteTestsConfig(every_seconds=0)
    sweep = sweeps.get("route-tests")
    assert sweep.stage == Stage.OBSERVE and sweep.function.func is route_tests_sweep.run_once
    assert sweep.function.args == (RouteTestsConfig(),), "registered with its config"


def test_an_empty_round_sends_nothing():
    Route.objects.all().delete()
    assert route_tests_sweep.run_once(RouteTestsConfig()) == 0


def test_a_route_with_a_channel_is_tested_once_per_interval(settings):
    settings.LEITSTAND_PUBLIC_URL = "https://leitstand.example.org"
    Route.objects.all().delete()
    Route.objects.create(name="ops", emails=["ops@example.org"], test_every_hours=24)
    Route.objects.create(name="silent", test_every_hours=24)  # no channel: nothing to test
    assert route_tests_sweep.run_once(RouteTestsConfig()) == 1
    assert route_tests_sweep.run_once(RouteTestsConfig()) == 0, "not again within its interval"
    assert ReceiptTest.objects.get().route.name == "ops"
    assert Job.objects.filter(type="alert_notify").count() == 1
