"""The runtime's settings (workers/runtime/options.py): declared once, typed and checked; read from
Django's settings at start-up and again when a test overrides one; no module of workers/runtime/
reads them itself."""

from pathlib import Path

import pytest

from jobs.options import OptionError
from tests.support.imports import settings_readers
from workers.runtime import options
from workers.runtime.options import RuntimeOptions, Timing

RUNTIME = Path(__file__).resolve().parents[2] / "workers" / "runtime"


def test_no_module_of_the_runtime_imports_django_conf():
    assert settings_readers(RUNTIME) == [], "read the runtime's settings from workers.runtime.options.current()"


def test_the_options_follow_the_settings_and_an_override(settings):
    assert options.current() == RuntimeOptions.from_settings(settings)
    assert dict(options.current().pools) == {pool: c["workers"] for pool, c in settings.LEITSTAND_POOLS.items()}
    settings.LEITSTAND_MAX_BATCH = 7
    settings.LEITSTAND_NOTIFY = {**settings.LEITSTAND_NOTIFY, "http_timeout_seconds": 3}
    assert options.current().max_batch == 7
    assert options.current().notify.http_timeout_seconds == 3


def test_a_bad_value_is_refused_naming_its_setting(settings):
    good = options.current()
    with pytest.raises(OptionError, match="LEITSTAND_POISON_DEATHS must be a whole number of at least 2, not 1"):
        RuntimeOptions(**{**good.__dict__, "poison_deaths": 1})
    with pytest.raises(OptionError, match=r'LEITSTAND_POOLS\["crawl"\]\["workers"\] must be a whole number'):
        RuntimeOptions(**{**good.__dict__, "pools": {"crawl": True}})
    with pytest.raises(OptionError, match="LEITSTAND_POOLS names no pool"):
        RuntimeOptions(**{**good.__dict__, "pools": {}})
    with pytest.raises(OptionError, match=r'LEITSTAND_PIPELINE\["lease_seconds"\] must be a number'):
        Timing("LEITSTAND_PIPELINE", timeout_seconds=5, lease_seconds="60", heartbeat_seconds=1, max_attempts=3)
    with pytest.raises(AttributeError):
        good.max_batch = 1  # frozen


def test_an_override_the_runtime_cannot_run_with_stops_with_the_setting(settings):
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match="LEITSTAND_MAX_BATCH must be a whole number of at least 1, not 0"):
        settings.LEITSTAND_MAX_BATCH = 0


def test_a_pool_is_refused_by_name_with_the_configured_ones():
    current = options.current()
    assert current.pool_refusal("crawl") is None
    assert current.pool_refusal("nowhere") == f"unknown pool 'nowhere'; pools: {', '.join(current.pools)}"
    assert current.pool_refusal(["crawl"]).startswith("unknown pool ['crawl']")


def test_the_guard_sees_every_spelling_of_the_import(tmp_path):
    package = tmp_path / "runtime"
    package.mkdir()
    (package / "a.py").write_text("from django import conf\n")
    (package / "b.py").write_text("import django.conf as c\n")
    (package / "c.py").write_text("from django.conf import settings\n")
    (package / "d.py").write_text("from django.db import connection\n")
    assert settings_readers(package) == [
        "runtime/a.py: django.conf",
        "runtime/b.py: django.conf",
        "runtime/c.py: django.conf",
    ]


def test_shadow_samples_that_are_not_an_object_are_refused_by_name(settings):
    with pytest.raises(OptionError, match="LEITSTAND_SHADOW_SAMPLES must be a JSON object"):
        RuntimeOptions.from_settings(type("S", (), {"LEITSTAND_SHADOW_SAMPLES": [["analysis", {}]]})())
