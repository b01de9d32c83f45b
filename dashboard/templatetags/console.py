"""Template helpers of the console: server-rendered SVG sparklines and job-list links."""

from datetime import datetime

from django import template
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.safestring import mark_safe

from dashboard import options as console_options
from dashboard.display import duration
from jobs.selectors import short_id as id_short

register = template.Library()


@register.simple_tag
def sparkline(values, width=120, height=24):
    """A polyline of ``values`` (oldest first), scaled to its maximum; no script, no inline style."""
    values = list(values or [])
    if not values:
        return ""
    top = max(values) or 1
    step = width / max(len(values) - 1, 1)
    points = " ".join(f"{i * step:.1f},{height - 2 - (v / top) * (height - 4):.1f}" for i, v in enumerate(values))
    return format_html(
        '<svg class="spark" width="{}" height="{}" viewBox="0 0 {} {}" role="img" aria-label="{}">'
        '<polyline points="{}" fill="none" stroke="currentColor" stroke-width="1.5"/></svg>',
        width,
        height,
        width,
        height,
        f"done per 5 minutes, last 2 hours: {', '.join(map(str, values))}",
        points,
    )


@register.simple_tag
def jobs_url(**filters):
    """The jobs list, already filtered: every number on the console links to the list it counts."""
    query = {f"{key}__exact": value for key, value in filters.items() if value not in (None, "")}
    return reverse("admin:jobs_job_changelist") + ("?" + urlencode(query) if query else "")


@register.filter
def get(mapping, key):
    return (mapping or {}).get(key, 0)


@register.simple_tag
def state_badge(state):
    return format_html('<span class="badge state-{}">{}</span>', state, state.replace("_", " "))


@register.simple_tag
def mib(value):
    return "—" if value in (None, "") else f"{int(value) / 2**20:,.0f} MiB"


@register.simple_tag
def gib(value):
    return "—" if value in (None, "") else f"{int(value) / 2**30:,.1f} GiB"


@register.simple_tag
def size(value):
    """Bytes in the unit that reads best: KiB below a MiB, MiB below a GiB, else GiB."""
    if value in (None, ""):
        return "—"
    value = int(value)
    if value < 2**20:
        return f"{value / 2**10:,.0f} KiB"
    return f"{value / 2**20:,.0f} MiB" if value < 2**30 else f"{value / 2**30:,.1f} GiB"


@register.filter
def short_id(job_id) -> str:
    """A job's ID as lists show it (``01a24deb…a13f9c``: jobs.selectors.short_id); '' for none."""
    return id_short(job_id) if job_id else ""


@register.filter
def human(name: str) -> str:
    return str(name).replace("_", " ")


# The parts of a batch's progress bar, in drawing order: (counter names, CSS class, label).
_PROGRESS_PARTS = (
    (("done",), "done", "done"),
    (("in_review", "rechecking"), "handed", "in review or rechecking"),
    (("failed",), "failing", "failed, retrying"),
    (("dead", "cancelled"), "lost", "dead or cancelled"),
)


@register.simple_tag
def progress_bar(progress, width=220, height=14):
    """A batch's progress as one stacked SVG bar (no script, no inline style)."""
    total = max(progress.total, 1)
    x, parts, labels = 0.0, [], []
    for names, css, label in _PROGRESS_PARTS:
        count = sum(getattr(progress, name) for name in names)
        if count <= 0:
            continue
        w = width * count / total
        parts.append(
            format_html(
                '<rect class="{}" x="{}" y="0" width="{}" height="{}"><title>{}: {}</title></rect>',
                css,
                f"{x:.1f}",
                f"{w:.1f}",
                height,
                label,
                count,
            )
        )
        labels.append(f"{label} {count}")
        x += w
    summary = f"{progress.ended} of {progress.total} ended" + (f" ({', '.join(labels)})" if labels else "")
    return format_html(
        '<svg class="progress" width="{}" height="{}" role="img" aria-label="{}">'
        '<rect class="open" x="0" y="0" width="{}" height="{}"/>{}</svg>',
        width,
        height,
        summary,
        width,
        height,
        mark_safe("".join(parts)),
    )


# The console's navigation: (label, URL name, permission, count key). Counts come from the snapshot
# the control process refreshes every few seconds (one row, read once per request).
NAVIGATION = [
    ("Home", "admin:index", None, None),
    ("Jobs", "admin:jobs_job_changelist", "jobs.view_job", None),
    ("Stuck leases", "admin:stuck_leases", "jobs.view_job", "stuck"),
    ("Dead letters", "admin:dead_letters", "jobs.view_job", "dead"),
    ("Review", "admin:review_queue", "jobs.view_job", "review"),
    ("Batches", "admin:jobs_batch_changelist", "jobs.view_batch", None),
    ("Paths", "admin:paths", "jobs.view_job", None),
    ("Flow", "admin:flow", "jobs.view_job", None),
    ("Business rules", "admin:business_rules", "jobs.view_job", None),
    ("Alerts", "admin:alerts_alert_changelist", "alerts.view_alert", "alerts"),
    ("Routes", "admin:alert_routes", "alerts.view_route", None),
    ("Audit", "admin:jobs_auditentry_changelist", "jobs.view_auditentry", None),
]


def _snapshot(request) -> dict:
    """The console snapshot's figures, read once per request (the navigation and the tabs share it)."""
    if not hasattr(request, "console_snapshot"):
        from dashboard.models import ConsoleSnapshot

        data = ConsoleSnapshot.objects.filter(name="home").values_list("data", flat=True).first()
        request.console_snapshot = data or {}
    return request.console_snapshot


@register.inclusion_tag("admin/console/nav.html", takes_context=True)
def console_nav(context, oob=False):
    """The navigation bar; ``oob``: sent with a live part, to replace the page's (its counts)."""
    request = context["request"]
    data = _snapshot(request)
    counts = {
        "stuck": data.get("stuck_leases"),
        "review": data.get("business", {}).get("review", {}).get("backlog"),
        "alerts": data.get("alerts_firing"),
        "dead": sum(f.get("states", {}).get("dead", 0) for f in data.get("pipeline", {}).get("types", {}).values()),
    }
    links = []
    for label, name, permission, count in NAVIGATION:
        if permission and not request.user.has_perm(permission):
            continue
        url = reverse(name)
        current = request.path == url if name == "admin:index" else request.path.startswith(url)
        links.append({"label": label, "url": url, "count": counts.get(count), "current": current, "key": count})
    return {"links": links, "oob": oob}


_MARKDOWN = None


@register.filter
def markdown(text: str) -> str:
    """Markdown rendered by markdown-it-py (CommonMark and tables) with raw HTML off: HTML in the
    text is escaped, and links to javascript:, vbscript: and file: URLs are not made."""
    global _MARKDOWN
    if _MARKDOWN is None:
        from markdown_it import MarkdownIt

        _MARKDOWN = MarkdownIt("commonmark", {"html": False}).enable("table")
    return mark_safe(_MARKDOWN.render(text or ""))  # noqa: S308 - the renderer escapes every HTML it is given


@register.inclusion_tag("admin/jobs/job/state_tabs.html", takes_context=True)
def state_tabs(context):
    """Tabs over the jobs list, one per state with its count from the snapshot (open states exact as
    of its age, finished ones as of their last full count); the other filters are kept."""
    from jobs.models import State

    request = context["request"]
    data = _snapshot(request)
    totals: dict[str, int] = {}
    for figures in data.get("pipeline", {}).get("types", {}).values():
        for state, count in figures.get("states", {}).items():
            totals[state] = totals.get(state, 0) + count
    kept = [(k, v) for k, v in request.GET.items() if k not in ("state__exact", "p")]
    current = request.GET.get("state__exact", "")
    tabs = [{"label": "all", "url": "?" + urlencode(kept), "count": None, "current": not current}]
    for state in State:
        tabs.append(
            {
                "label": state.label,
                "url": "?" + urlencode([*kept, ("state__exact", state.value)]),
                "count": totals.get(state.value, 0),
                "current": current == state.value,
            }
        )
    return {"tabs": tabs}


@register.simple_tag
def hash_grid(candidate: str, original: str, cell: int = 14):
    """Two hashes of the same length as a square grid, one cell per bit, the bits that differ filled:
    analysis@1's 64-bit dHash (8 × 8) or analysis@2's 256-bit PDQ (16 × 16, smaller cells). Nothing
    when the hashes are not hex of 16 or 64 digits."""
    if not isinstance(candidate, str) or not isinstance(original, str) or len(candidate) != len(original):
        return ""
    if len(candidate) not in (16, 64):
        return ""
    try:
        a, b = int(candidate, 16), int(original, 16)
    except ValueError:
        return ""
    bits = len(candidate) * 4
    side = 8 if bits == 64 else 16
    cell = cell if bits == 64 else 9
    differ = a ^ b
    cells = []
    for bit in range(bits):
        row, column = divmod(bit, side)
        on = differ >> (bits - 1 - bit) & 1
        cells.append(
            format_html(
                '<rect x="{}" y="{}" width="{}" height="{}" class="{}"><title>bit {}: {}</title></rect>',
                column * cell,
                row * cell,
                cell - 1,
                cell - 1,
                "bit-differs" if on else "bit-same",
                bit,
                "differs" if on else "same",
            )
        )
    size = side * cell
    return format_html(
        '<svg class="hash-grid" id="hash-grid" width="{}" height="{}" role="img" aria-label="{} of {} bits differ">{}</svg>',
        size,
        size,
        differ.bit_count(),
        bits,
        mark_safe("".join(cells)),  # noqa: S308 - each cell is built by format_html above
    )


@register.simple_tag
def keypoint_pairs(pairs, candidate_src: str, asset_src: str, candidate_size, asset_size, panel: int = 320):
    """The candidate and the original side by side with a line between each pair of matched keypoints
    the homography kept (``pairs``: [candidate x, y, original x, y] as shares of each image). Nothing
    when the pairs or sizes are not what analysis@2 records."""
    try:
        (cw, ch), (aw, ah) = _fit(candidate_size, panel), _fit(asset_size, panel)
        points = [[float(v) for v in pair] for pair in pairs[:40]]
    except (TypeError, ValueError):
        return ""
    if (
        not points
        or not candidate_src
        or not asset_src
        or any(len(p) != 4 or not all(-0.01 <= v <= 1.01 for v in p) for p in points)
    ):
        return ""
    gap = 24
    lines = []
    for x1, y1, x2, y2 in points:
        ours = (f"{x1 * cw:.1f}", f"{y1 * ch:.1f}")
        theirs = (f"{cw + gap + x2 * aw:.1f}", f"{y2 * ah:.1f}")
        lines.append(
            format_html(
                '<line x1="{}" y1="{}" x2="{}" y2="{}"></line><circle cx="{}" cy="{}" r="3"></circle>'
                '<circle cx="{}" cy="{}" r="3"></circle>',
                *ours,
                *theirs,
                *ours,
                *theirs,
            )
        )
    return format_html(
        '<svg class="keypoint-pairs" id="keypoint-pairs" width="{}" height="{}" role="img" '
        'aria-label="{} matched keypoints between the candidate and the original">'
        '<image href="{}" x="0" y="0" width="{}" height="{}"></image>'
        '<image href="{}" x="{}" y="0" width="{}" height="{}"></image>{}</svg>',
        cw + gap + aw,
        max(ch, ah),
        len(points),
        candidate_src,
        cw,
        ch,
        asset_src,
        cw + gap,
        aw,
        ah,
        mark_safe("".join(lines)),  # noqa: S308 - each line is built by format_html above
    )


def _fit(size, panel: int) -> tuple[int, int]:
    width, height = (int(v) for v in size)
    if width < 1 or height < 1:
        raise ValueError("no size")
    scale = panel / max(width, height)
    return max(1, round(width * scale)), max(1, round(height * scale))


# A job's record (jobs/records.py) as the job page and the archived page show it: its moments are
# ISO text (JSON), read back here.
@register.filter
def when(value) -> str:
    """A record's moment as people read it (local time, to the second); '—' for none."""
    if not value:
        return "—"
    try:
        moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return str(value)
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M:%S") if timezone.is_aware(moment) else str(moment)


@register.filter
def took(milliseconds) -> str:
    return duration(milliseconds)


@register.filter
def span(trace_span: str):
    """An attempt's own span when traces were recorded (a retry's is the root of a trace of its own),
    linked to the tracing system when ``LEITSTAND_TRACE_URL`` is set."""
    parts = str(trace_span or "").split("-")
    if len(parts) != 4:
        return "—"
    link = console_options.current().trace_link(parts[1])
    label = f"{parts[1]} / {parts[2]}"
    return format_html('<a href="{}" rel="noreferrer">{}</a>', link, label) if link else label


@register.filter
def line_count(kept) -> int:
    """How many lines an attempt wrote: those it kept and those it dropped."""
    return len((kept or {}).get("lines", [])) + (kept or {}).get("dropped", 0)
