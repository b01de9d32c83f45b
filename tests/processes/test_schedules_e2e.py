"""Crawl schedules with real processes and the demo web: two control processes start each slot's run
once, a control restart does not start a slot again, slots missed while no control process ran
collapse into one run, and a source whose crawls fail is reported overdue (issue 23)."""

import re
from collections import Counter
from datetime import timedelta

import pytest

from alerts.models import Alert
from jobs.models import Batch, database_now
from tests.support.pools import PoolProcesses, demo_web_env, wait_for
from workers.pipeline import demoweb
from workers.pipeline.models import Source
from workers.pipeline.services import asset_register, source_upsert

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

SCHEDULED = re.compile(r"crawl-run:schedule-(\d+)-(\d{8}T\d{4}Z)")


def scheduled_runs() -> list[tuple[int, str, bool]]:
    """(source ID, slot, finished) of every scheduled run."""
    runs = []
    for key, finished in Batch.objects.values_list("key", "finished_at"):
        if match := SCHEDULED.fullmatch(key):
            runs.append((int(match[1]), match[2], finished is not None))
    return runs


def test_each_slot_runs_once_with_two_control_processes_and_across_a_restart(tmp_path):
    with demoweb.DemoWeb(slow_seconds=0.2) as web:
        for name, owner, data in demoweb.protected_assets():
            asset_register(name=name, owner_ref=owner, data=data)
        sources = [source_upsert(**spec, crawl_every_minutes=1) for spec in web.sources()]
        # As after a downtime: the last runs were five slots ago.
        Source.objects.update(last_slot_at=database_now() - timedelta(minutes=5))
        pools = PoolProcesses(
            str(tmp_path),
            **demo_web_env(web),
            LEITSTAND_ANALYSIS_WORKERS="2",
        )
        try:
            pools.start("control", key="control-a", LEITSTAND_HOST_NAME="host-a")
            pools.start("control", key="control-b", LEITSTAND_HOST_NAME="host-b")
            pools.start("crawl")
            pools.start("analysis")
            wait_for(
                lambda: pools.check_running() and len([r for r in scheduled_runs() if r[2]]) >= len(sources),
                timeout=90,
                interval=0.5,
                message="each source's run for the current slot to finish",
            )
            first = scheduled_runs()
            assert Counter(source for source, _, _ in first) == {s.pk: 1 for s in sources}, (
                "five missed slots made one run per source"
            )
            assert Source.objects.filter(last_crawled_at__isnull=True).count() == 0

            # The control processes go; a new one starts: nothing of the slots already run starts again.
            pools.terminate("control-a")
            pools.terminate("control-b")
            pools.start("control", key="control-c", LEITSTAND_HOST_NAME="host-c")
            wait_for(
                lambda: pools.check_running() and len(scheduled_runs()) >= 2 * len(sources),
                timeout=150,
                interval=0.5,
                message="the next slot's runs",
            )
        finally:
            pools.stop_all()
    runs = scheduled_runs()
    slots = Counter((source, slot) for source, slot, _ in runs)
    assert max(slots.values()) == 1, f"a slot ran twice: {slots}"
    for source in sources:
        mine = sorted(slot for s, slot, _ in runs if s == source.pk)
        assert len(mine) >= 2 and mine[0] < mine[1]


def test_crawl_overdue_fires_for_a_source_whose_crawls_fail(tmp_path):
    with demoweb.DemoWeb(slow_seconds=0.2) as web:
        healthy = source_upsert(**web.sources()[0], crawl_every_minutes=1)
        failing = source_upsert(
            name="Verschwunden", base_url=web.base_url(1) + "archiv/fehlt.html", max_depth=0, crawl_every_minutes=1
        )
        # Both were added three minutes ago: twice their interval has passed without a crawl.
        Source.objects.update(created_at=database_now() - timedelta(minutes=3))
        pools = PoolProcesses(
            str(tmp_path),
            **demo_web_env(web),
            LEITSTAND_ALERT_FOR_SECONDS="0",
            LEITSTAND_ALERT_CLEAR_SECONDS="0",
            LEITSTAND_ALERT_INTERVAL_SECONDS="0.2",
        )
        try:
            pools.start("control")
            pools.start("crawl")
            alert = wait_for(
                lambda: pools.check_running()
                and Alert.objects.filter(rule="crawl_overdue", scope="source:Verschwunden", state="firing").first(),
                timeout=60,
                message="crawl_overdue for the source whose page is gone",
            )
            wait_for(
                lambda: Source.objects.get(pk=healthy.pk).last_crawled_at is not None,
                timeout=60,
                message="the healthy source crawled",
            )
            wait_for(
                lambda: not Alert.objects.filter(rule="crawl_overdue", scope="source:Galerie Nord")
                .exclude(state="resolved")
                .exists(),
                timeout=30,
                message="no open crawl_overdue for the source that was crawled (it fired before its first crawl)",
            )
        finally:
            pools.stop_all()
    assert alert.diagnosis.startswith("Verschwunden: not crawled for ")
    run = Source.objects.get(pk=failing.pk).last_run
    assert run is not None and run.key.startswith(f"crawl-run:schedule-{failing.pk}-"), "its runs were started"
