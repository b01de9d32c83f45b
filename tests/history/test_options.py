"""The history's settings (history/options.py): retention per state and type, the archive, the
partitions, typed and checked; read from Django's settings at start-up and again when a test
overrides one. No module of the history but its app reads Django's settings itself."""

from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from history import options
from tests.support.imports import settings_readers

HISTORY = Path(__file__).resolve().parents[2] / "history"


def test_only_the_app_reads_django_conf():
    assert settings_readers(HISTORY, exempt=("apps.py",)) == []


def test_the_options_follow_an_override(settings):
    settings.LEITSTAND_RETENTION = {**settings.LEITSTAND_RETENTION, "types": {"synthetic": {"done": 0.5}}}
    retention = options.current()
    assert retention == options.RetentionOptions.from_settings(settings)
    assert retention.days_for("synthetic", "done") == 0.5 and retention.days_for("crawl", "dead") == 90
    assert retention.shortest_days() == 0.5


@pytest.mark.parametrize(
    ("value", "complaint"),
    [
        ({"enabled": "yes"}, "LEITSTAND_RETENTION_ENABLED must be true or false"),
        ({"jobs_per_file": 0}, "LEITSTAND_RETENTION_JOBS_PER_FILE must be a whole number"),
        ({"days": {"done": 1}}, "must give days for done, cancelled, dead"),
        ({"keep_forever": True}, "LEITSTAND_RETENTION has no keep_forever"),
    ],
)
def test_a_bad_value_stops_with_its_setting_and_the_good_ones_stay(settings, value, complaint):
    good = options.current()
    with pytest.raises(ImproperlyConfigured, match=complaint):
        settings.LEITSTAND_RETENTION = {**settings.LEITSTAND_RETENTION, **value}
    assert options.current() == good
