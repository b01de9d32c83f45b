"""The pipeline's job types: crawl a page of a source, read one of its sitemaps, analyse a candidate
image; and the findings' part of a job's record."""

import functools

from django.db.models import F, Func, OuterRef, Value
from django.db.models.functions import Coalesce

from jobs.records import Part, columns, record_part_register, rows_json
from workers.pipeline import analysis, crawl, sitemap_job
from workers.pipeline.models import Finding
from workers.runtime.job_types import pipeline_timing
from workers.runtime.registry import JobType, register


def _findings():
    """A job's findings with the image and page they are about and where the page showed it; the
    thumbnail's size, not its bytes."""
    return rows_json(
        Finding,
        {
            **columns(Finding),
            "image_url": F("candidate__image_url"),
            "page_url": F("candidate__page_url"),
            "found_in": F("candidate__found_in"),
            "asset_owner_ref": Coalesce(F("asset__owner_ref"), Value("")),
            "thumbnail_bytes": Coalesce(Func(F("thumbnail"), function="octet_length"), Value(0)),
        },
        job=OuterRef("pk"),
    )


FINDINGS = Part("findings", _findings)


def job_types_register() -> None:
    record_part_register(FINDINGS)
    analysis_version = analysis.running_version()
    register(
        JobType(
            name="crawl",
            parse_payload=crawl.parse,
            subject=crawl.subject,
            description="Fetch one page of a source: candidates for its images, crawl jobs for its in-scope links.",
            handler=crawl.handle,
            pool="crawl",
            client_scope="jobs:all",  # sources, candidates and assets are shared by every client
            # A crawl frontier: each host is a key with one page in flight, and the claim takes no page
            # of a host that is resting (politeness tells it when each may next be asked).
            flow_key="host",
            flow_limit=1,
            processing_version="crawl@1",
            # A page answering 304 (unchanged) has nothing to extract: its known links are followed.
            expected_paths=(
                "-> skipped",
                "robots -> skipped",
                "robots fetch -> skipped",  # a redirect to a page robots.txt disallows
                "robots fetch extract stylesheets? candidates spawn",
                "robots fetch spawn",
                "robots fetch -> done",  # not a page, and not an image: left alone
                "robots fetch candidates spawn",  # not a page but an image: a candidate
            ),
            default_priority=5,
            **pipeline_timing(),
        )
    )
    register(
        JobType(
            name="sitemap",
            parse_payload=sitemap_job.parse,
            subject=sitemap_job.subject,
            description="Read one sitemap of a source: crawl jobs for its pages, candidates for its images, "
            "sitemap jobs for an index's sitemaps.",
            handler=sitemap_job.handle,
            pool="crawl",
            client_scope=None,  # a run's own: spawned by its first page from the source's settings
            flow_key="host",  # the host's politeness: one request in flight, with its pages
            flow_limit=1,
            processing_version="sitemap@1",
            expected_paths=(
                "-> skipped",
                "robots -> skipped",
                "robots fetch -> skipped",
                "robots fetch -> done",  # not a sitemap: left alone
                "robots fetch read spawn",
                "robots fetch read candidates spawn",
            ),
            default_priority=5,
            **pipeline_timing(),
        )
    )
    register(
        JobType(
            name="analysis",
            parse_payload=analysis.parse,
            subject=analysis.subject,
            description="Download a candidate image and compare it with the protected assets.",
            handler=analysis.handle,  # runs LEITSTAND_ANALYSIS_VERSION
            pool="analysis",
            client_scope="jobs:all",  # sources, candidates and assets are shared by every client
            flow_key="source",  # a large source's candidates do not hold back a small one's
            processing_version=analysis_version,
            shadow_versions={
                version: functools.partial(analysis.handle, version=version, shadow=True)
                for version in analysis.VERSIONS
                if version != analysis_version
            },
            expected_paths=(
                "robots -> skipped",
                "robots fetch -> skipped",  # a redirect to an image robots.txt disallows
                "robots fetch decode compare -> skipped",
                "robots fetch decode compare record -> recheck | done | review",
                "robots fetch -> done",  # unchanged since its last analysis (304)
                "robots fetch known -> done",  # content this version analysed already
            ),
            default_priority=5,
            **pipeline_timing(),
        )
    )
