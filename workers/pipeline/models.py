"""The pipeline's records: the shared crawl state (robots.txt, per-host politeness) and the domain
records the crawl and analysis handlers produce (sources, protected assets, candidates, findings)."""

from urllib.parse import urlsplit

from django.contrib.postgres.fields import ArrayField
from django.db import models

from jobs.models import LeitstandNow


class RobotsFile(models.Model):
    """A site's robots.txt as last fetched, shared by every worker on every host (RFC 9309)."""

    origin = models.CharField(max_length=300, unique=True, help_text="scheme://host:port")
    status = models.PositiveSmallIntegerField(null=True, blank=True, help_text="HTTP status; empty: unreachable")
    body = models.TextField(blank=True)
    error = models.CharField(max_length=500, blank=True)
    fetched_at = models.DateTimeField(db_default=LeitstandNow())
    expires_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"robots.txt of {self.origin} ({self.status or self.error})"


class HostState(models.Model):
    """Politeness towards one host (``host:port``), shared by every worker on every host.

    Guarded single-statement updates in ``workers.pipeline.politeness`` keep at most one request in flight
    per host, space requests by the host's delay, honour Retry-After, and open a circuit breaker
    after repeated failures, so retries never become a storm against a fragile site.
    """

    host = models.CharField(max_length=300, primary_key=True)
    next_allowed_at = models.DateTimeField(db_default=LeitstandNow())
    in_flight_until = models.DateTimeField(null=True, blank=True)
    next_turn_at = models.DateTimeField(null=True, blank=True, help_text="The end of the booked turns of waiting jobs.")
    last_started_at = models.DateTimeField(null=True, blank=True, help_text="When the last request to it began.")
    delay_seconds = models.FloatField(
        null=True,
        blank=True,
        help_text="Its delay between request starts, as its answers taught (never below the least).",
    )
    consecutive_failures = models.PositiveIntegerField(default=0)
    breaker_open_until = models.DateTimeField(null=True, blank=True)
    last_outcome = models.CharField(max_length=200, blank=True)

    def __str__(self) -> str:
        return self.host


# --- the domain records the crawl and analysis handlers produce ---------------------------------


class Source(models.Model):
    """A site the crawl visits: where it starts, how far it may go, how urgent its work is."""

    name = models.CharField(max_length=200, unique=True)
    base_url = models.URLField(max_length=500, help_text="The page a crawl run starts from.")
    scope = models.CharField(
        max_length=500,
        blank=True,
        help_text="URL prefix the crawl stays within when it follows links; empty: the base URL's origin.",
    )
    priority = models.SmallIntegerField(default=5, help_text="Priority of its crawl and analysis jobs (0 most urgent).")
    max_depth = models.PositiveSmallIntegerField(default=1, help_text="Link hops followed from the base URL.")
    max_links_per_page = models.PositiveSmallIntegerField(default=50)
    max_images_per_page = models.PositiveSmallIntegerField(default=100)
    is_active = models.BooleanField(
        default=True, help_text="Inactive sources are not crawled: their schedule is paused too."
    )

    class Sitemaps(models.TextChoices):
        ROBOTS = "robots", "the sitemaps its robots.txt names"
        ROBOTS_OR_DEFAULT = "robots_or_default", "the sitemaps its robots.txt names, else /sitemap.xml"
        OFF = "off", "none: links only"

    sitemaps = models.CharField(
        max_length=20,
        choices=Sitemaps.choices,
        default=Sitemaps.ROBOTS,
        db_default=Sitemaps.ROBOTS,
        help_text="Pages (and images) found from sitemaps as well as by following links.",
    )
    query_params_ignored = models.CharField(
        max_length=500,
        blank=True,
        db_default="",
        default="",
        help_text="Query parameters dropped from its image and page URLs before they become keys, comma-separated; "
        "a trailing * names a prefix (utm_*, w, h). Empty: every URL is kept as its page spells it.",
    )
    created_at = models.DateTimeField(db_default=LeitstandNow())
    # The schedule (workers.pipeline.schedules): a run per slot of this many minutes (local time,
    # counted from midnight), started only inside the window when there is one.
    crawl_every_minutes = models.PositiveIntegerField(
        null=True, blank=True, help_text="Crawl every this many minutes; empty: LEITSTAND_CRAWL_EVERY_MINUTES."
    )
    window_start = models.TimeField(null=True, blank=True, help_text="Runs start only from this local time …")
    window_end = models.TimeField(null=True, blank=True, help_text="… until this one (may pass midnight).")
    time_zone = models.CharField(
        max_length=64, blank=True, help_text="For slots and window; empty: LEITSTAND_TIME_ZONE."
    )
    last_run = models.ForeignKey(
        "jobs.Batch", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", help_text="The latest run."
    )
    last_slot_at = models.DateTimeField(
        null=True, blank=True, help_text="The slot the schedule last started a run for."
    )
    last_crawled_at = models.DateTimeField(
        null=True, blank=True, help_text="When a run last fetched the source's base page (unchanged counts)."
    )
    # Why the latest run could not start this source (its stored name or base URL is refused); cleared
    # by the next run that starts it. The other sources of that run started all the same.
    start_error = models.CharField(max_length=500, blank=True, db_default="", default="", editable=False)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=models.Q(priority__gte=0, priority__lte=9), name="source_priority_0_to_9"),
            models.CheckConstraint(
                condition=models.Q(crawl_every_minutes__isnull=True)
                | models.Q(crawl_every_minutes__gte=1, crawl_every_minutes__lte=44640),
                name="source_crawl_every_1_minute_to_31_days",
            ),
            models.CheckConstraint(
                condition=models.Q(window_start__isnull=True, window_end__isnull=True)
                | models.Q(window_start__isnull=False, window_end__isnull=False),
                name="source_window_both_or_neither",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def ignored_params(self) -> tuple[str, ...]:
        """``query_params_ignored`` as names (a trailing ``*``: a prefix)."""
        return tuple(name.strip() for name in self.query_params_ignored.split(",") if name.strip())

    @property
    def effective_scope(self) -> str:
        if self.scope:
            return self.scope
        parts = urlsplit(self.base_url)
        return f"{parts.scheme}://{parts.netloc}/"


def url_in_scope(url: str, scope: str) -> bool:
    """Whether a link belongs to a source's scope: the scope's origin, and its path by whole segments
    (scope ``https://site.example/shop`` takes ``/shop`` and ``/shop/a``, not ``/shopping`` or
    ``https://site.example.evil.com/``)."""
    try:
        link, within = urlsplit(url), urlsplit(scope)
        origin = (link.scheme.lower(), link.hostname, link.port)
        scope_origin = (within.scheme.lower(), within.hostname, within.port)
    except ValueError:  # a malformed port or host
        return False
    if origin != scope_origin or link.username or link.password:
        return False
    prefix = within.path or "/"
    path = link.path or "/"
    return path == prefix.rstrip("/") or path.startswith(prefix if prefix.endswith("/") else prefix + "/")


class ProtectedAsset(models.Model):
    """A protected original whose copies the pipeline looks for."""

    name = models.CharField(max_length=200)
    owner_ref = models.CharField(max_length=200, help_text="The rights holder's reference in the PHP core.")
    image = models.BinaryField(help_text="The reference image (JPEG, PNG, GIF or WEBP).")
    content_hash = models.CharField(max_length=64, unique=True, help_text="SHA-256 of the image bytes.")
    dhash = models.CharField(max_length=16, help_text="64-bit difference hash, hex.")
    width = models.PositiveIntegerField()
    height = models.PositiveIntegerField()
    created_at = models.DateTimeField(db_default=LeitstandNow())
    # What the comparison needs (``workers.pipeline.matching``), computed once at upload.
    fingerprint_version = models.CharField(
        max_length=20, blank=True, db_index=True, help_text="matching.FINGERPRINT_VERSION"
    )
    fingerprint_error = models.CharField(
        max_length=300, blank=True, help_text="Why it could not be fingerprinted (it is not compared)."
    )
    pdq_hashes = ArrayField(models.CharField(max_length=64), default=list, blank=True, help_text="PDQ, hex.")
    keypoints = models.BinaryField(default=b"", blank=True, help_text="ORB positions and descriptors.")
    fingerprint = models.JSONField(default=dict, blank=True, help_text="Normalised size, trim box, PDQ quality.")

    def __str__(self) -> str:
        return f"{self.name} ({self.owner_ref})"


class AssetHashBand(models.Model):
    """The comparison's index of originals by hash: one row per 16-bit band of an original's PDQ
    hashes (``matching.Fingerprint.bands``); a candidate's band values within one bit find every
    original within 31 bits (multi-index hashing)."""

    pk = models.CompositePrimaryKey("band", "asset")  # the primary key's index serves the look-up by band
    band = models.IntegerField()
    asset = models.ForeignKey(ProtectedAsset, on_delete=models.CASCADE, related_name="+")

    def __str__(self) -> str:
        return f"{self.band:06x} → {self.asset_id}"


class AssetKeypointKey(models.Model):
    """The comparison's index of originals by keypoints: one row per key of an original's descriptors
    (``matching.keypoint_keys``); a candidate's keys find the originals sharing the most."""

    pk = models.CompositePrimaryKey("key", "asset")  # the primary key's index serves the look-up by key
    key = models.IntegerField()
    asset = models.ForeignKey(ProtectedAsset, on_delete=models.CASCADE, related_name="+")

    def __str__(self) -> str:
        return f"{self.key:06x} → {self.asset_id}"


class Candidate(models.Model):
    """An image found on a source: a possible copy of a protected asset. One row per image URL."""

    image_url = models.CharField(max_length=2000, unique=True)
    page_url = models.CharField(max_length=2000, help_text="The page it was last seen on.")
    source = models.ForeignKey(Source, on_delete=models.PROTECT, related_name="candidates")
    first_seen_at = models.DateTimeField(db_default=LeitstandNow())
    last_seen_at = models.DateTimeField(db_default=LeitstandNow())
    content_hash = models.CharField(max_length=64, blank=True, help_text="SHA-256 of the bytes last analysed.")
    dhash = models.CharField(max_length=16, blank=True)
    analysed_at = models.DateTimeField(null=True, blank=True)
    # What the image's last full answer said about its version: the next analysis asks whether it changed.
    etag = models.CharField(max_length=200, blank=True)
    last_modified = models.CharField(max_length=200, blank=True)
    found_in = models.CharField(
        max_length=100, blank=True, help_text="Where its page showed it: an attribute, a meta tag, JSON-LD, CSS, …"
    )
    variants = models.JSONField(default=list, blank=True, help_text="The same image's other sizes on its page.")
    same_as = models.ForeignKey(
        "Finding",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="same_bytes",
        help_text="The finding of the same bytes under another URL, which stands for this image (not analysed again).",
    )

    class Meta:
        indexes = [models.Index(fields=["source", "last_seen_at"], name="candidate_source_seen_idx")]

    def __str__(self) -> str:
        return self.image_url


class Finding(models.Model):
    """The comparison of a candidate with its closest protected asset, by one analysis job and version."""

    class Verdict(models.TextChoices):
        MATCH = "match"
        NO_MATCH = "no_match", "no match"
        UNCLEAR = "unclear"

    candidate = models.ForeignKey(Candidate, on_delete=models.PROTECT, related_name="findings")
    # None: no original lies near the candidate at all (analysis@2's index found none to compare).
    asset = models.ForeignKey(ProtectedAsset, null=True, blank=True, on_delete=models.PROTECT, related_name="findings")
    score = models.FloatField(help_text="Similarity 0..1 on the bands' scale (the deciding stage's evidence, mapped).")
    verdict = models.CharField(max_length=10, choices=Verdict.choices)
    analysis_version = models.CharField(max_length=64)
    job = models.ForeignKey(
        "jobs.Job",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="findings",
        help_text="The analysis job that produced it.",
    )
    evidence = models.JSONField(default=dict, blank=True)
    content_hash = models.CharField(
        max_length=64,
        blank=True,
        help_text="SHA-256 of the bytes analysed: the candidate's same bytes are not analysed again.",
    )
    thumbnail = models.BinaryField(
        null=True, blank=True, help_text="The candidate re-encoded as a small PNG by Pillow: safe to show reviewers."
    )
    created_at = models.DateTimeField(db_default=LeitstandNow())

    class Meta:
        # One finding per analysis job (and asset, version): a later crawl run's analysis of the same
        # image records its own finding, so an earlier job's review case keeps its evidence.
        constraints = [
            models.UniqueConstraint(
                fields=["candidate", "asset", "analysis_version", "job"],
                name="finding_once_per_job_and_version",
                nulls_distinct=False,  # a finding without an original is once per job too
            ),
        ]
        indexes = [
            models.Index(fields=["verdict", "created_at"], name="finding_verdict_idx"),
            # The same bytes under another URL: analysed once (workers/pipeline/analysis.py).
            models.Index(fields=["content_hash", "analysis_version"], name="finding_content_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.verdict} {self.score:.2f}: {self.candidate_id} × {self.asset_id}"


class Stylesheet(models.Model):
    """A site's stylesheet as a crawl run last read it: the background images it gives its pages, kept
    so that the run's other pages linking it do not ask for it again (workers/pipeline/crawl.py)."""

    url = models.CharField(max_length=2000, unique=True)
    run = models.CharField(max_length=100, help_text="The crawl run that read it last.")
    images = models.JSONField(default=list, blank=True, help_text="The image URLs its background rules name.")
    etag = models.CharField(max_length=200, blank=True)
    last_modified = models.CharField(max_length=200, blank=True)
    error = models.CharField(max_length=300, blank=True, help_text="Why it could not be read, if it could not.")
    fetched_at = models.DateTimeField(db_default=LeitstandNow())

    def __str__(self) -> str:
        return self.url


class PageState(models.Model):
    """A crawled page as its last full answer left it: its version (ETag, Last-Modified) for the next
    conditional request, and the in-scope links it had, followed again when it answers 304."""

    url = models.CharField(max_length=2000, unique=True)
    etag = models.CharField(max_length=200, blank=True)
    last_modified = models.CharField(max_length=200, blank=True)
    content_hash = models.CharField(max_length=64, help_text="SHA-256 of the page.")
    links = models.JSONField(default=list, blank=True, help_text="Its in-scope links at the last full fetch.")
    fetched_at = models.DateTimeField(db_default=LeitstandNow())

    def __str__(self) -> str:
        return self.url
