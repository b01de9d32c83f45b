"""The alert rules' catalogue: each rule looks at the database and returns the scopes where its
condition holds now, each with the value, the threshold and a **first diagnosis computed from the
data** (``alerts.evaluation.alerts_evaluate`` reconciles that with the open alerts). Thresholds live in
``LEITSTAND_ALERTS`` and may be overridden per scope (a pool, a type, a source, a host). Every rule
has a runbook, ``docs/runbooks/<rule>.md``, shown in the console.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from django.db.models import Count, Max, Min, Q

from alerts import options
from alerts.business_rules import RULES as BUSINESS_RULES
from alerts.models import Route, RuleViolation
from alerts.routes import fallback_of
from jobs.batches import batch_eta, batches_progress
from jobs.display import ago, clock
from jobs.models import Batch, Job, StaleWrite, State
from rechecks.models import RecheckPlan
from workers.pipeline.models import Candidate, Source
from workers.pipeline.schedules import every_minutes, sources_overdue
from workers.runtime import options as runtime_options
from workers.runtime.models import Pool, WorkerProcess
from workers.runtime.selectors import LIVE_WITHIN_SECONDS, pool_consumers

# The runbooks ship with the code: docs/runbooks/ of this checkout.
RUNBOOKS = Path(__file__).resolve().parents[1] / "docs" / "runbooks"


@dataclass(frozen=True)
class Firing:
    scope: str  # "pool:crawl", "type:analysis", "source:Galerie Nord", "host:vm", "route:ops", "" (global)
    value: float
    threshold: float
    diagnosis: str
    route: str = ""  # where it goes, when not the rule's (or its scope's override) route


@dataclass(frozen=True)
class Rule:
    name: str
    title: str
    evaluate: Callable[[datetime, dict], list[Firing]]
    route: str = "operations"
    severity: str = "ticket"  # "page": someone acts now (escalates sooner); "ticket": within the working day


SEVERITIES = ("page", "ticket")


def option(rule: str, key: str, scope: str = "", default=None):
    """A rule's setting, overridden for the scope when ``LEITSTAND_ALERTS[rule]["overrides"][scope]`` says so."""
    return options.current().rule_option(rule, key, scope, default)


def route_of(rule: Rule, scope: str) -> str:
    """The route an alert of ``rule`` in ``scope`` goes to: the setting (per scope) or the rule's own."""
    return option(rule.name, "route", scope, rule.route)


# --- the rules ---------------------------------------------------------------------------------------


def _no_consumers(now: datetime, memory: dict) -> list[Firing]:
    due = dict(
        Job.objects.filter(state=State.PLANNED, due_at__lte=now).order_by().values_list("pool").annotate(n=Count("id"))
    )
    consumers = pool_consumers()
    firings = []
    for pool, n_due in due.items():
        if consumers.get(pool, 0) > 0 or n_due < option("pool_no_consumers", "min_due", f"pool:{pool}"):
            continue
        last = WorkerProcess.objects.filter(pool=pool).order_by("-last_seen_at").first()
        if last:
            since = last.stopped_at or last.last_seen_at + timedelta(seconds=LIVE_WITHIN_SECONDS)
            history = (
                f"0 consumers since {clock(since)}; last worker {last.host}:{last.pid} "
                f"{'stopped' if last.stopped_at else 'last seen'} at {clock(last.stopped_at or last.last_seen_at)}"
                + (f" after {last.stop_reason}" if last.stop_reason else "")
            )
        else:
            history = "no worker of this pool has ever run"
        firings.append(Firing(f"pool:{pool}", 0, 1, f"{pool}: {history}; {n_due:,} jobs due"))
    return firings


def _stalled(now: datetime, memory: dict) -> list[Firing]:
    """Pools whose supervisor could not heal a stall: due work, idle workers, no claim (workers.runtime.supervisor)."""
    return [
        Firing(
            f"pool:{pool.name}",
            (now - pool.stalled_since).total_seconds(),
            0,
            f"{pool.name}: stalled since {clock(pool.stalled_since)} ({pool.stalled_on}): {pool.stall_note}",
        )
        for pool in Pool.objects.filter(stalled_since__isnull=False, is_paused=False)
    ]


def _queue_growing(now: datetime, memory: dict) -> list[Firing]:
    due = dict(
        Job.objects.filter(state=State.PLANNED, due_at__lte=now).order_by().values_list("pool").annotate(n=Count("id"))
    )
    samples = memory.setdefault("queue_samples", {})
    firings = []
    for pool in set(due) | set(samples):
        minutes = option("queue_growing", "minutes", f"pool:{pool}")
        history = [(t, n) for t, n in samples.get(pool, []) if now - t <= timedelta(minutes=minutes * 1.5)]
        history.append((now, due.get(pool, 0)))
        samples[pool] = history
        window = [(t, n) for t, n in history if now - t <= timedelta(minutes=minutes)]
        if len(window) < 3 or now - window[0][0] < timedelta(minutes=minutes * 0.9):
            continue
        counts = [n for _, n in window]
        if all(b >= a for a, b in zip(counts, counts[1:])) and counts[-1] > counts[0]:
            firings.append(
                Firing(
                    f"pool:{pool}",
                    counts[-1],
                    counts[0],
                    f"{pool}: due jobs grew from {counts[0]:,} to {counts[-1]:,} over "
                    f"{ago((now - window[0][0]).total_seconds())} without falling once; "
                    f"{pool_consumers().get(pool, 0)} live consumers",
                )
            )
    return firings


def _oldest_due(now: datetime, memory: dict) -> list[Firing]:
    firings = []
    critical = option("oldest_due_age", "critical_priority")
    oldest = (
        Job.objects.filter(state=State.PLANNED, due_at__lte=now)
        .order_by()
        .values("type")
        .annotate(due=Min("due_at"), urgent=Min("due_at", filter=Q(priority__lte=critical)))
    )
    for row in oldest:
        scope = f"type:{row['type']}"
        for lane, moment, key in (("critical lane", row["urgent"], "critical_seconds"), ("", row["due"], "seconds")):
            if moment is None:
                continue
            age, limit = (now - moment).total_seconds(), option("oldest_due_age", key, scope)
            if age > limit:
                firings.append(
                    Firing(
                        scope + (":critical" if lane else ""),
                        age,
                        limit,
                        f"{row['type']}{' ' + lane if lane else ''}: the oldest due job waits "
                        f"{ago(age)} (limit {ago(limit)}), due since {clock(moment)}",
                    )
                )
                break
    return firings


def _dlq_growth(now: datetime, memory: dict) -> list[Firing]:
    window = option("dlq_growth", "window_seconds")
    since = now - timedelta(seconds=window)
    grown = (
        Job.objects.filter(finished_at__gt=since, state=State.DEAD)
        .order_by()
        .values("type", "error_class")
        .annotate(n=Count("id"))
    )
    per_type: dict[str, list] = {}
    for row in grown:
        per_type.setdefault(row["type"], []).append(row)
    firings = []
    for job_type, rows in per_type.items():
        total, limit = sum(r["n"] for r in rows), option("dlq_growth", "count", f"type:{job_type}")
        if total >= limit:
            top = max(rows, key=lambda r: r["n"])
            firings.append(
                Firing(
                    f"type:{job_type}",
                    total,
                    limit,
                    f"{job_type}: {total} jobs dead-lettered in the last {ago(window)}; most often "
                    f"{top['error_class'] or 'no error class'} ({top['n']})",
                )
            )
    return firings


def _stuck_leases(now: datetime, memory: dict) -> list[Firing]:
    grace = runtime_options.current().lease_grace_seconds
    stuck = list(
        Job.objects.filter(state__in=(State.RESERVED, State.RUNNING))
        .filter(lease_expires_at__lt=now - timedelta(seconds=grace))
        .values_list("pool", "lease_owner", "lease_expires_at")[:500]
    )
    per_pool: dict[str, list] = {}
    for pool, owner, expires in stuck:
        per_pool.setdefault(pool, []).append((owner, expires))
    return [
        Firing(
            f"pool:{pool}",
            len(rows),
            1,
            f"{pool}: {len(rows)} leases expired more than {grace} s ago and are not released "
            f"(oldest held by {min(rows, key=lambda r: r[1])[0]}, expired at {clock(min(r[1] for r in rows))}); "
            "is the control process's reaper running?",
        )
        for pool, rows in per_pool.items()
    ]


def _stale_writes(now: datetime, memory: dict) -> list[Firing]:
    window = option("stale_writes_spike", "window_seconds")
    rows = (
        StaleWrite.objects.filter(at__gt=now - timedelta(seconds=window))
        .order_by()
        .values("job__type")
        .annotate(n=Count("id"), last=Max("at"))
    )
    return [
        Firing(
            f"type:{r['job__type']}",
            r["n"],
            option("stale_writes_spike", "count", f"type:{r['job__type']}"),
            f"{r['job__type']}: {r['n']} writes of stale attempts refused in the last {ago(window)} "
            f"(last at {clock(r['last'])}): workers lose their leases — heartbeats too slow, or paused hosts",
        )
        for r in rows
        if r["n"] >= option("stale_writes_spike", "count", f"type:{r['job__type']}")
    ]


def _review_backlog(now: datetime, memory: dict) -> list[Firing]:
    backlog = Job.objects.filter(state=State.READY_FOR_REVIEW).aggregate(n=Count("id"), oldest=Min("state_changed_at"))
    if not backlog["n"]:
        return []
    age, limit = (now - backlog["oldest"]).total_seconds(), option("review_backlog_age", "seconds")
    if age <= limit:
        return []
    return [
        Firing(
            "",
            age,
            limit,
            f"{backlog['n']} review cases open; the oldest waits {ago(age)} "
            f"(since {clock(backlog['oldest'])}, limit {ago(limit)})",
        )
    ]


def _rechecks_overdue(now: datetime, memory: dict) -> list[Firing]:
    late = option("rechecks_overdue", "seconds")
    overdue = RecheckPlan.objects.filter(
        state=RecheckPlan.State.ACTIVE, next_check_at__lt=now - timedelta(seconds=late)
    )
    summary = overdue.aggregate(n=Count("id"), oldest=Min("next_check_at"))
    if not summary["n"]:
        return []
    return [
        Firing(
            "",
            summary["n"],
            1,
            f"{summary['n']} recheck plans are more than {ago(late)} overdue "
            f"(the oldest since {clock(summary['oldest'])}): is the control process's "
            "planner running, and the recheck pool?",
        )
    ]


def _source_quiet(now: datetime, memory: dict) -> list[Firing]:
    firings = []
    for source in Source.objects.filter(is_active=True):
        hours = option("source_quiet", "hours", f"source:{source.name}")
        recent = Candidate.objects.filter(source=source, last_seen_at__gt=now - timedelta(hours=hours)).exists()
        if recent:
            continue
        baseline = Candidate.objects.filter(source=source, last_seen_at__gt=now - timedelta(days=7)).count()
        if baseline == 0:
            continue  # no baseline: a source that never yields candidates is not "unusually" quiet
        last = Candidate.objects.filter(source=source).aggregate(last=Max("last_seen_at"))["last"]
        firings.append(
            Firing(
                f"source:{source.name}",
                hours,
                hours,
                f"{source.name}: no candidate seen for {ago((now - last).total_seconds())} "
                f"(limit {hours:g} h) after {baseline} in the last 7 days",
            )
        )
    return firings


def _crawl_overdue(now: datetime, memory: dict) -> list[Firing]:
    return [
        Firing(
            f"source:{source.name}",
            round(hours, 1),
            round(2 * every_minutes(source) / 60, 1),
            f"{source.name}: not crawled for {ago(hours * 3600)} — twice its interval is "
            f"{ago(2 * every_minutes(source) * 60)}"
            + (
                f"; its last run ({source.last_run.name}) started {clock(source.last_run.created_at)}"
                if source.last_run
                else "; no run was ever started"
            ),
        )
        for source, hours in sources_overdue(now=now)
    ]


def _disk_low(now: datetime, memory: dict) -> list[Firing]:
    latest = (
        WorkerProcess.objects.filter(last_seen_at__gt=now - timedelta(minutes=5), disk_free_bytes__isnull=False)
        .order_by()
        .values("host")
        .annotate(free=Min("disk_free_bytes"))
    )
    firings = []
    for row in latest:
        limit = option("disk_low", "bytes", f"host:{row['host']}")
        if row["free"] < limit:
            firings.append(
                Firing(
                    f"host:{row['host']}",
                    row["free"],
                    limit,
                    f"{row['host']}: {row['free'] / 2**30:.1f} GiB free on the data disk "
                    f"(limit {limit / 2**30:.1f} GiB)",
                )
            )
    return firings


def _business_rules(now: datetime, memory: dict) -> list[Firing]:
    open_ = (
        RuleViolation.objects.filter(resolved_at__isnull=True)
        .values("rule")
        .annotate(n=Count("id"), since=Min("first_seen"))
        .order_by("rule")
    )
    firings = []
    for row in open_:
        scope = f"rule:{row['rule']}"
        if row["n"] < option("business_rule_violated", "count", scope):
            continue
        example = (
            RuleViolation.objects.filter(rule=row["rule"], resolved_at__isnull=True).order_by("first_seen").first()
        )
        title = BUSINESS_RULES[row["rule"]].title if row["rule"] in BUSINESS_RULES else row["rule"]
        firings.append(
            Firing(
                scope,
                row["n"],
                option("business_rule_violated", "count", scope),
                f"{row['n']} open violation{'s' if row['n'] != 1 else ''} of “{title}” since "
                f"{clock(row['since'])}; e.g. {example.subject}: {example.detail}",
            )
        )
    return firings


def _batch_late(now: datetime, memory: dict) -> list[Firing]:
    batches = list(Batch.objects.filter(finished_at__isnull=True, target_finish_at__isnull=False).order_by("id")[:200])
    progress = batches_progress([b.pk for b in batches])
    firings = []
    for batch in batches:
        counts = progress[batch.pk]
        if counts.total == 0:
            continue
        eta = batch_eta(batch, counts, now)
        if not eta["misses_target"]:
            continue
        late_by = ((eta["eta"] or now) - batch.target_finish_at).total_seconds()
        pace = (
            f"at {eta['rate_per_minute']:.1f} a minute (last 15 min) the {counts.open} open members need until "
            f"{clock(eta['eta'])}"
            if eta["eta"]
            else "nothing ended in the last 15 minutes"
        )
        firings.append(
            Firing(
                f"batch:{batch.pk}",
                round(max(late_by, 0) / 60, 1),
                0,
                f"batch {batch.name!r}: {counts.ended} of {counts.total} ended; {pace}; target "
                f"{clock(batch.target_finish_at)} — see the batch sizing rule and the pool's consumers",
            )
        )
    return firings


def _rules_failing(now: datetime, memory: dict) -> list[Firing]:
    """Rules that raised when they were last evaluated (``alerts_evaluate`` records them, evaluating
    this rule last): each is blind until mended, so people hear of it like of what it watches."""
    return [
        Firing(f"alert_rule:{name}", 1, 0, f"alert rule {name} could not be evaluated: {reason}")
        for name, reason in sorted(memory.get("rules_failing", {}).items())
    ]


def _route_unconfirmed(now: datetime, memory: dict) -> list[Firing]:
    """Routes whose latest test notification was not confirmed by its deadline (to the fallback route)."""
    firings = []
    for route in Route.objects.select_related("fallback").filter(tests__isnull=False).distinct():
        test = route.tests.order_by("-sent_at").first()
        if test.confirmed_at is None and test.confirm_by <= now:
            confirmed = route.tests.filter(confirmed_at__isnull=False).order_by("-confirmed_at").first()
            last = (
                f"last confirmed receipt {confirmed.confirmed_at:%Y-%m-%d %H:%M} by {confirmed.confirmed_by}"
                if confirmed
                else "no test of this route was ever confirmed"
            )
            firings.append(
                Firing(
                    f"route:{route.name}",
                    (now - test.confirm_by).total_seconds(),
                    0,
                    f"route {route.name}: the test sent {test.sent_at:%Y-%m-%d %H:%M} ({test.sent_by}) was not confirmed "
                    f"by {test.confirm_by:%Y-%m-%d %H:%M}; channels {', '.join(route.channels) or 'none'}; {last}",
                    route=fallback_of(route),
                )
            )
    return firings


RULES = {
    rule.name: rule
    for rule in (
        Rule("pool_no_consumers", "A pool has no live consumers but due jobs", _no_consumers, severity="page"),
        Rule(
            "pool_stalled",
            "A pool claims nothing although work is due and its healing failed",
            _stalled,
            severity="page",
        ),
        Rule("queue_growing", "Queue depth keeps growing", _queue_growing),
        Rule("oldest_due_age", "The oldest due job waits too long", _oldest_due, severity="page"),
        Rule("dlq_growth", "The dead-letter queue grows", _dlq_growth),
        Rule("stuck_leases", "Expired leases are not released", _stuck_leases, severity="page"),
        Rule("stale_writes_spike", "Refused stale writes spike", _stale_writes),
        Rule("review_backlog_age", "The review backlog's oldest case is too old", _review_backlog, route="review"),
        Rule("rechecks_overdue", "Recheck plans are overdue", _rechecks_overdue),
        Rule("source_quiet", "A source is unusually quiet", _source_quiet, route="business"),
        Rule("crawl_overdue", "A source has not been crawled for twice its interval", _crawl_overdue),
        Rule("disk_low", "A worker host is low on disk", _disk_low, route="infrastructure", severity="page"),
        Rule("business_rule_violated", "A business rule across jobs is broken", _business_rules, route="business"),
        Rule("batch_will_miss_target", "A batch will miss its target finish time", _batch_late),
        Rule("route_unconfirmed", "An alert route's test notification was not confirmed", _route_unconfirmed),
        # Last (``rule_register`` keeps it so): it reports the rules above that could not be evaluated
        # in this round.
        Rule("alert_rule_failing", "An alert rule cannot be evaluated", _rules_failing),
    )
}

LAST = "alert_rule_failing"


def rule_register(rule: Rule) -> None:
    """An app's own rule, over records the alerts cannot read (they lie above them: the API's
    refusals, the archive, the console's dead-letter reviews); from its ``AppConfig.ready``. Kept
    before ``alert_rule_failing``, which reports the rules evaluated before it."""
    if RULES.get(rule.name, rule) is not rule:
        raise ValueError(f"an alert rule named {rule.name!r} is already registered")
    last = RULES.pop(LAST)
    RULES[rule.name] = rule
    RULES[LAST] = last


rule_memory: dict = {}  # rule state between evaluations in the leading control process (queue samples)


def rule_title(name: str) -> str:
    """A rule's title for a message (an alert of a rule that no longer exists: its name)."""
    return RULES[name].title if name in RULES else name


def runbook(rule: str) -> str:
    if rule not in RULES:
        raise KeyError(rule)
    return (RUNBOOKS / f"{rule}.md").read_text()
