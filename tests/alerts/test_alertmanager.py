"""The Alertmanager channel against Debian's real prometheus-alertmanager (started here on loopback,
without clustering): an alert Leitstand fires appears in Alertmanager with its labels and
annotations, is re-posted before it would expire, and resolves there when it resolves here."""

import shutil
import subprocess
from datetime import datetime

import httpx
import pytest

from alerts import alert_rules, evaluation, notify
from alerts.models import Alert
from jobs.models import Job, State
from tests.conftest import job_in_state
from tests.support.servers import free_port, wait_until_answers

pytestmark = pytest.mark.django_db(transaction=True)
CONFIG = """
route:
  receiver: "null"
  group_by: [alertname, route]
receivers:
  - name: "null"
"""


@pytest.fixture(scope="module")
def alertmanager(tmp_path_factory):
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if binary is None:
        pytest.fail(
            "prometheus-alertmanager is missing: install Debian's prometheus-alertmanager (scripts/test does, as root)"
        )
    home = tmp_path_factory.mktemp("alertmanager")
    (home / "alertmanager.yml").write_text(CONFIG)
    port = free_port()
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={home / 'alertmanager.yml'}",
            f"--storage.path={home / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",  # no gossip: it needs no private address
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_answers(f"{url}/-/ready", process, timeout=20)
    except AssertionError as failed:
        process.kill()
        pytest.fail(f"alertmanager did not start: {failed}")
    yield url
    process.terminate()
    process.wait(timeout=10)


def in_alertmanager(url: str, rule: str) -> list[dict]:
    alertname = notify.alertname(rule)
    return [a for a in httpx.get(f"{url}/api/v2/alerts", timeout=5).json() if a["labels"]["alertname"] == alertname]


def test_an_alert_fires_is_reposted_and_resolves_in_a_real_alertmanager(
    alertmanager, settings, make_job, db_clock, pool_runtime
):
    settings.LEITSTAND_PUBLIC_URL = "https://leitstand.example.org"
    settings.LEITSTAND_ALERT_ROUTES = {"operations": {"alertmanager": alertmanager, "owner": "Platform team"}}
    settings.LEITSTAND_NOTIFY_ALLOWED_TARGETS = [alertmanager.removeprefix("http://")]  # an in-house Alertmanager
    settings.LEITSTAND_ALERTS = {
        rule: {**config, "for_seconds": 0, "clear_seconds": 0} for rule, config in settings.LEITSTAND_ALERTS.items()
    }
    alert_rules.rule_memory.clear()
    job = make_job("crawl", pool="crawl")
    evaluation.alerts_evaluate(now=db_clock.now())
    alert = Alert.objects.get(rule="pool_no_consumers")
    pool_runtime("notify").wake()
    assert {j.state for j in Job.objects.filter(type="alert_notify")} == {State.DONE}

    (posted,) = in_alertmanager(alertmanager, "pool_no_consumers")
    assert posted["status"]["state"] == "active"
    assert posted["labels"] == {
        "alertname": "LeitstandPoolNoConsumers",
        "rule": "pool_no_consumers",
        "scope": "pool:crawl",
        "pool": "crawl",
        "severity": "page",
        "route": "operations",
        "owner": "Platform team",
        "source_system": "leitstand",
    }
    assert posted["annotations"]["runbook_url"] == "https://leitstand.example.org/admin/runbooks/pool_no_consumers/"
    assert posted["annotations"]["diagnosis"] == alert.diagnosis
    assert posted["generatorURL"] == f"https://leitstand.example.org/admin/alerts/alert/{alert.pk}/change/"
    first_end = datetime.fromisoformat(posted["endsAt"].replace("Z", "+00:00"))
    assert 170 <= (first_end - datetime.fromisoformat(posted["startsAt"].replace("Z", "+00:00"))).total_seconds()

    # Re-posted every LEITSTAND_ALERTMANAGER_REPOST_SECONDS: each post moves its end further out.
    db_clock.advance(settings.LEITSTAND_ALERTMANAGER_REPOST_SECONDS)
    assert notify.alertmanager_repost(every_seconds=settings.LEITSTAND_ALERTMANAGER_REPOST_SECONDS) == 1
    pool_runtime("notify").wake()
    (again,) = in_alertmanager(alertmanager, "pool_no_consumers")
    assert datetime.fromisoformat(again["endsAt"].replace("Z", "+00:00")) > first_end

    job_in_state(job, State.DONE)  # nothing due: the condition clears, the alert resolves
    evaluation.alerts_evaluate(now=db_clock.now())
    assert Alert.objects.get(pk=alert.pk).state == "resolved"
    pool_runtime("notify").wake()
    assert in_alertmanager(alertmanager, "pool_no_consumers") == [], "resolved in Alertmanager too"


def test_the_prometheus_rules_use_the_same_alert_names_severities_and_routes():
    """Teams that load deploy/prometheus/alerts.yml too get alerts Alertmanager groups with Leitstand's own."""
    import yaml

    from tests.support.db import PROJECT_ROOT

    document = yaml.safe_load((PROJECT_ROOT / "deploy" / "prometheus" / "alerts.yml").read_text())
    for rule in document["groups"][0]["rules"]:
        labels = rule["labels"]
        ours = alert_rules.RULES[labels["rule"]]
        assert rule["alert"] == notify.alertname(ours.name), rule["alert"]
        assert (labels["severity"], labels["route"]) == (ours.severity, ours.route), rule["alert"]
