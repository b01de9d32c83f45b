"""The retention sweep (history/retention_sweep.py): its settings
(``LEITSTAND_RETENTION_ENABLED``, ``_SECONDS_PER_ROUND``, ``_EVERY_SECONDS``), a disabled round that
touches nothing, an empty round, and a round that archives and purges an ended job past its retention."""

from dataclasses import replace

import pytest
from django.core.exceptions import ImproperlyConfigured

from history import options as history_options
from history import options as history_settings
from history import retention_sweep
from history.retention_sweep import RetentionConfig
from jobs.models import State
from tests.history.test_retention import ended, policy, remaining  # noqa: F401 (the fixture)
from workers.runtime.sweeps import Stage, sweeps

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_config_comes_from_the_settings_and_a_bad_one_names_it(settings):
    settings.LEITSTAND_RETENTION = {**settings.LEITSTAND_RETENTION, "seconds_per_round": 5, "every_seconds": 30}
    assert RetentionConfig.from_options(history_options.current()) == replace(
        RetentionConfig.from_options(history_settings.current()), enabled=True, seconds_per_round=5, every_seconds=30
    )
    with pytest.raises(ImproperlyConfigured, match="LEITSTAND_RETENTION_SECONDS_PER_ROUND must be a number"):
        replace(RetentionConfig.from_options(history_settings.current()), seconds_per_round=0)
    with pytest.raises(ImproperlyConfigured, match="LEITSTAND_RETENTION_ENABLED must be true or false"):
        replace(RetentionConfig.from_options(history_settings.current()), enabled="yes")
    sweep = sweeps.get("retention")
    assert sweep.stage == Stage.OBSERVE and sweep.function.func is retention_sweep.run_once
    assert not sweep.fenced, "it commits as it goes and fences each step itself"


def test_an_empty_round_archives_nothing(policy):  # noqa: F811
    report = retention_sweep.run_once(
        replace(RetentionConfig.from_options(history_settings.current()), seconds_per_round=60)
    )
    assert (report.archived, report.purged, report.stopped) == (0, 0, "")


def test_an_old_job_is_archived_and_purged_unless_retention_is_off(policy):  # noqa: F811
    old, young = ended(State.DONE, days_ago=20), ended(State.DONE, days_ago=2)
    assert (
        retention_sweep.run_once(
            replace(RetentionConfig.from_options(history_settings.current()), enabled=False)
        ).purged
        == 0
    )
    assert remaining(old, young) == {old.pk, young.pk}, "switched off: nothing is touched"
    report = retention_sweep.run_once(
        replace(RetentionConfig.from_options(history_settings.current()), seconds_per_round=60)
    )
    assert (report.archived, report.purged) == (1, 1)
    assert remaining(old, young) == {young.pk}


def test_it_runs_with_the_config_read_from_the_settings_at_registration():
    assert sweeps.get("retention").function.args == (RetentionConfig.from_options(history_options.current()),)
