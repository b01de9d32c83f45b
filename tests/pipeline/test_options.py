"""The pipeline's settings (workers/pipeline/options.py): declared once, typed and checked; read from
Django's settings at start-up and again when a test overrides one; no module of workers/pipeline/
reads them itself."""

from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from jobs.options import OptionError
from tests.support.imports import settings_readers
from workers.pipeline import analysis, fetching, images, options, schedules
from workers.pipeline.http import SafeClient, notification_client
from workers.pipeline.models import Source
from workers.pipeline.options import PipelineOptions

PIPELINE = Path(__file__).resolve().parents[2] / "workers" / "pipeline"


def test_no_module_of_the_pipeline_imports_django_conf():
    assert settings_readers(PIPELINE) == [], "read the pipeline's settings from workers.pipeline.options.current()"


def test_the_options_follow_the_settings_and_an_override(settings):
    assert options.current() == PipelineOptions.from_settings(settings)
    settings.LEITSTAND_FETCH = {**settings.LEITSTAND_FETCH, "max_redirects": 2}
    settings.LEITSTAND_ANALYSIS = {"match_at": 0.95, "no_match_below": 0.5}
    settings.LEITSTAND_HTTP_ALLOWED_TARGETS = ["127.0.0.1:8999"]
    settings.LEITSTAND_NOTIFY_ALLOWED_TARGETS = ["10.0.0.5:9093"]
    settings.LEITSTAND_IMAGE_MAX_PIXELS = 40_000
    settings.LEITSTAND_CRAWL_EVERY_MINUTES = 90
    settings.TIME_ZONE = "Europe/Berlin"
    assert fetching.fetch_policy().max_redirects == 2
    assert analysis.version_spec("analysis@2")[1] == {"match_at": 0.95, "no_match_below": 0.5}
    assert analysis.verdict_for(0.6) == "unclear" and analysis.verdict_for(0.96) == "match"
    assert SafeClient().allowed_targets == frozenset({"127.0.0.1:8999"})
    assert notification_client(5).allowed_targets == frozenset({"10.0.0.5:9093"})
    assert options.current().image_max_pixels == 40_000
    source = Source(name="s", base_url="https://example.org/")
    assert schedules.every_minutes(source) == 90 and str(schedules.zone_of(source)) == "Europe/Berlin"
    with pytest.raises(images.ImageRefused, match=r"the limit is 0\.04 \(LEITSTAND_IMAGE_MAX_PIXELS\)"):
        images.decode(_png(300, 300))


def _png(width: int, height: int) -> bytes:
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (width, height)).save(out, "PNG")
    return out.getvalue()


@pytest.mark.parametrize(
    ("overrides", "complaint"),
    [
        ({"bands": {"match_at": 0.7, "no_match_below": 0.8}}, "must satisfy 0 < no_match_below <= match_at <= 1"),
        ({"bands": {"match_at": 0.9}}, "LEITSTAND_ANALYSIS must name exactly match_at and no_match_below"),
        ({"fetch": {"total_seconds": "20"}}, r'LEITSTAND_FETCH\["total_seconds"\] must be a number'),
        ({"fetch": {"max_redirects": 1.5}}, r'LEITSTAND_FETCH\["max_redirects"\] must be a whole number'),
        ({"fetch": {"timeout": 3}}, "LEITSTAND_FETCH has no timeout; it knows connect_timeout"),
        (
            {"politeness": {"max_wait_seconds": 5}},
            r'LEITSTAND_POLITENESS\["max_wait_seconds"\] must be a number of at least 60',
        ),
        ({"image_max_pixels": 10}, "LEITSTAND_IMAGE_MAX_PIXELS must be a whole number of at least 10000"),
        ({"crawl_schedule_starts": 0}, "LEITSTAND_CRAWL_SCHEDULE_STARTS must be a whole number of at least 1"),
    ],
)
def test_a_bad_value_is_refused_naming_its_setting(overrides, complaint):
    good = options.current()
    with pytest.raises(OptionError, match=complaint):
        PipelineOptions(**{**good.__dict__, **overrides})


def test_an_override_the_pipeline_cannot_run_with_stops_with_the_setting(settings):
    with pytest.raises(ImproperlyConfigured, match="no_match_below 0.95 and match_at 0.9 must satisfy"):
        settings.LEITSTAND_ANALYSIS = {"match_at": 0.9, "no_match_below": 0.95}
    with pytest.raises(AttributeError):
        options.current().image_max_pixels = 1  # frozen
