"""The job record, its attempts, its append-only transition log, refused stale writes and effects.

The job row in PostgreSQL is the truth. Its ``state`` is a protected django-fsm field: the
``@transition`` methods below are the single declaration of which state changes exist. The worker
and control paths (claim, start, heartbeat, complete, fail, release, reap, sweeps) execute them as
guarded SQL in ``jobs.leases``, which derives each statement's allowed source states from these
declarations; human and API actions (cancel, confirm, decide, retry now) run the methods themselves
through ``jobs.leases.transition_apply``, which also checks their permission.
"""

from __future__ import annotations

import uuid

from django.db import connection, models
from django.db.models import Q
from django_fsm import ConcurrentTransitionMixin, FSMField, transition
from uuid_utils.compat import uuid7


class LeitstandNow(models.Func):
    """Database time (``clock_timestamp()``, shifted by the session's test clock offset if any).

    Lease and schedule decisions never read the worker's clock; see the ``leitstand_now()``
    function created by migration 0001.
    """

    function = "leitstand_now"
    template = "%(function)s()"
    output_field = models.DateTimeField()


def database_now():
    """The database's time (``leitstand_now()``), for decisions that must not read a worker's clock."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT leitstand_now()")
        return cursor.fetchone()[0]


class State(models.TextChoices):
    PLANNED = "planned", "planned"
    RESERVED = "reserved", "reserved"
    RUNNING = "running", "running"
    RESULT_STORED = "result_stored", "result stored"
    UNCLEAR = "unclear", "business-unclear"
    READY_FOR_REVIEW = "ready_for_review", "ready for review"
    RECHECK_DUE = "recheck_due", "recheck due"
    FAILED = "failed", "technically failed"
    DONE = "done", "done"
    DEAD = "dead", "dead"
    CANCELLED = "cancelled", "cancelled"
    HELD = "held", "held by an operator"


# A job in one of these states holds a lease: exactly one attempt is entitled to write.
LEASED_STATES = (State.RESERVED, State.RUNNING)
# No worker will touch a job in these states again; only an operator's "retry now" revives a dead one.
TERMINAL_STATES = (State.DONE, State.DEAD, State.CANCELLED)
# Cancelling is allowed from every state that is not terminal, and from the dead-letter queue
# (removing a dead job cancels it with a reason: it is never silently deleted).
CANCELLABLE_STATES = tuple(s for s in State if s not in TERMINAL_STATES) + (State.DEAD,)

OPERATE_PERMISSION = "jobs.operate_job"
REVIEW_PERMISSION = "jobs.review_job"
ESCALATED_REVIEW_PERMISSION = "jobs.review_escalated_job"
MANAGE_CLIENTS_PERMISSION = "jobs.manage_client"

# Transitions that only the engine performs, as guarded SQL in jobs.leases (they need a lease,
# database time and an attempt row written in the same statement).
ENGINE = {"engine": True}


class Client(models.Model):
    """An API client (the PHP core, a partner's system). It owns what it submits: jobs, batches, and
    what follows from them (children, findings, recheck plans inherit their job's client), and it
    receives their events at its own webhook, or at the global one (``LEITSTAND_WEBHOOK_URL``) only
    when an operator chose that for it (``uses_global_webhook``): one client's events never reach
    another's receiver by default. Its bearer tokens are the API's (``api.ApiToken``); jobs started
    from the console or a command belong to no client. Created and changed by ``jobs.clients``."""

    name = models.CharField(max_length=100, unique=True)
    webhook_url = models.CharField(
        max_length=500, blank=True, default="", help_text="Its own receiver of events; empty: see uses_global_webhook."
    )
    webhook_secret = models.CharField(max_length=200, blank=True, default="", help_text="Signs its webhooks.")
    max_open_jobs = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Open jobs it may have before its submissions are answered 429; empty: the default.",
    )
    uses_global_webhook = models.BooleanField(
        default=False,
        db_default=False,
        help_text="Without a webhook of its own: its events go to the global webhook (else nowhere).",
    )
    most_urgent_lane = models.PositiveSmallIntegerField(
        default=5,
        db_default=5,
        help_text="The most urgent lane (0-9) its submissions and moves may use: a client's priority never buys "
        "it the pool ahead of other clients' normal work (lane 5) unless an operator grants it.",
    )
    trace_trusted = models.BooleanField(
        default=False,
        db_default=False,
        help_text="Its requests' trace context is joined; else each starts a new trace linked to the one it sent.",
    )
    created_at = models.DateTimeField(db_default=LeitstandNow())
    created_by = models.CharField(max_length=255, blank=True, default="")

    class Meta:
        permissions = [("manage_client", "Can create API clients and tokens, rotate and revoke tokens")]

    def __str__(self) -> str:
        return self.name

    @property
    def key_namespace(self) -> str:
        """Where its idempotency keys live: no other client's, and not the system's ('')."""
        return f"client:{self.name}"


def job_id_new() -> uuid.UUID:
    """A new job's ID: a UUIDv7 (RFC 9562), its first 48 bits the creation's Unix time in
    milliseconds, then 74 random bits. Every index keyed by job ID (the job's own, its attempts',
    transitions' and step events') gets its new entries at its right edge, in pages that stay cached,
    instead of at random places all over an index of millions of entries (docs/architecture.md)."""
    return uuid7()


class Job(ConcurrentTransitionMixin, models.Model):
    id = models.UUIDField(primary_key=True, default=job_id_new, editable=False)
    type = models.CharField(max_length=64, help_text="Job type, e.g. crawl, analysis, recheck.")
    pool = models.CharField(max_length=64, help_text="The worker pool that runs it (claims are per pool).")
    idempotency_key = models.CharField(
        max_length=255, help_text="Unique per job type and namespace: the same key is the same job."
    )
    key_namespace = models.CharField(
        max_length=120,
        blank=True,
        db_default="",
        default="",
        help_text="Whose keys: '' for the system's own producers, 'client:<name>' for an API client's.",
    )
    request_hash = models.CharField(
        max_length=64,
        blank=True,
        db_default="",
        default="",
        help_text="The fingerprint of the whole submission (API), to refuse a repeat that differs.",
    )
    correlation_id = models.CharField(max_length=255, help_text="Joins every job of one business case.")
    client = models.ForeignKey(
        Client,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,
        help_text="Who owns it: the API client that submitted it or its parent; empty for the system's own.",
    )
    # Indexed only where it is set (job_parent_idx): root jobs, the most, cost no entry.
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="children", db_index=False
    )
    batch = models.ForeignKey(
        "Batch",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="jobs",
        db_index=False,
        help_text="The batch it belongs to (children inherit their parent's).",
    )
    schema_version = models.PositiveSmallIntegerField(db_default=1, default=1)
    processing_version = models.CharField(
        max_length=64, blank=True, db_default="", default="", help_text="Handler version of the latest attempt."
    )
    priority = models.SmallIntegerField(
        db_default=5, default=5, help_text="0 is the most urgent lane, 9 the bulk lane; claims serve lower first."
    )
    source = models.CharField(max_length=255, blank=True, db_default="", default="")
    # What it shares its pool with others by (its type's declaration, read at creation): fair shares,
    # running limits and pauses are per flow key (FlowKey, FlowLane).
    flow_key = models.CharField(max_length=255, blank=True, db_default="", default="")
    subject = models.CharField(
        max_length=500,
        blank=True,
        db_default="",
        default="",
        help_text="What the job is about, as its type declares it (a crawl's or an analysis's URL, a recheck's plan).",
    )
    payload = models.JSONField(db_default={}, default=dict)
    # The W3C trace context it was created in (jobs/tracing.py): an API request's, its parent's run.
    trace_parent = models.CharField(max_length=55, blank=True, db_default="", default="")
    trace_state = models.CharField(max_length=512, blank=True, db_default="", default="")

    created_at = models.DateTimeField(db_default=LeitstandNow())
    due_at = models.DateTimeField(db_default=LeitstandNow(), help_text="Not claimed before this time.")
    state = FSMField(default=State.PLANNED, choices=State.choices, protected=True, max_length=20)
    state_changed_at = models.DateTimeField(db_default=LeitstandNow())
    finished_at = models.DateTimeField(null=True, blank=True, help_text="When the job reached done, dead or cancelled.")

    lease_owner = models.CharField(max_length=255, blank=True, db_default="", default="")
    lease_version = models.PositiveIntegerField(
        db_default=0, default=0, help_text="The attempt ID and fencing token: rises by one with every claim."
    )
    # Written by every heartbeat and deliberately not indexed, so heartbeats stay HOT updates.
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    progress = models.JSONField(null=True, blank=True)

    attempts = models.PositiveSmallIntegerField(
        db_default=0, default=0, help_text="Claims counted against the retry budget."
    )
    max_attempts = models.PositiveSmallIntegerField(db_default=5, default=5, help_text="The retry budget.")
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    result_ref = models.CharField(max_length=500, blank=True, db_default="", default="")
    result_checksum = models.CharField(max_length=128, blank=True, db_default="", default="")
    error_class = models.CharField(max_length=200, blank=True, db_default="", default="")
    error_message = models.TextField(blank=True, db_default="", default="")
    completion_reason = models.CharField(max_length=500, blank=True, db_default="", default="")

    class Meta:
        permissions = [
            ("operate_job", "Can act on jobs as an operator (cancel, retry, confirm)"),
            ("review_job", "Can decide review cases"),
            ("review_escalated_job", "Can decide escalated review cases (senior reviewer)"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["type", "key_namespace", "idempotency_key"], name="job_idempotency_key_unique_per_namespace"
            ),
            models.CheckConstraint(condition=Q(priority__gte=0, priority__lte=9), name="job_priority_0_to_9"),
            models.CheckConstraint(condition=Q(max_attempts__gte=1), name="job_max_attempts_positive"),
        ]
        indexes = [
            # jobs.leases.claim: the next due jobs of a pool, most urgent lane first.
            models.Index(
                fields=["pool", "priority", "due_at", "id"], name="job_claim_idx", condition=Q(state="planned")
            ),
            # jobs.leases.claim: a flow lane's next due jobs (its pool, lane and key), oldest due first.
            models.Index(
                fields=["pool", "priority", "flow_key", "due_at", "id"],
                name="job_flow_idx",
                condition=Q(state="planned"),
            ),
            # Queue age per type (console, alerts): the oldest due planned job of a type.
            models.Index(fields=["type", "due_at"], name="job_queue_age_idx", condition=Q(state="planned")),
            # jobs.leases.retries_promote_due: failed jobs whose next attempt has come.
            models.Index(fields=["next_attempt_at"], name="job_retry_due_idx", condition=Q(state="failed")),
            # jobs.leases.reap_expired and the stuck-lease view scan the small leased set. The
            # lease expiry itself is not indexed: heartbeats write it, and must stay HOT updates.
            # The claim also counts what holds leases per flow key in one pool (running limits), from
            # the same index.
            models.Index(
                fields=["pool", "flow_key", "id"], name="job_leased_idx", condition=Q(state__in=LEASED_STATES)
            ),
            # The review backlog, oldest case first.
            models.Index(
                fields=["type", "state_changed_at"],
                name="job_review_backlog_idx",
                condition=Q(state="ready_for_review"),
            ),
            models.Index(fields=["correlation_id"], name="job_correlation_idx"),
            # A job's children (the console, PROTECT on delete): only jobs that have a parent. The
            # foreign key's own index kept an entry for every version of every root job's row.
            models.Index(fields=["parent"], name="job_parent_idx", condition=Q(parent__isnull=False)),
            # Throughput (done/h per type) for the console snapshot: only finished jobs are indexed.
            models.Index(
                fields=["finished_at", "type"], name="job_finished_idx", condition=Q(finished_at__isnull=False)
            ),
            # The console's counts of open jobs per type and state: an index-only scan over the open set,
            # never over millions of finished jobs.
            models.Index(fields=["type", "state"], name="job_open_idx", condition=~Q(state__in=TERMINAL_STATES)),
            # The jobs list, newest first (created_at never changes, so this costs inserts only).
            models.Index(fields=["-created_at"], name="job_created_idx"),
            # Find jobs by what they are about: a prefix of the subject (LIKE 'prefix%' needs the
            # pattern operator class); only jobs that have one.
            models.Index(
                fields=["subject"], name="job_subject_idx", opclasses=["varchar_pattern_ops"], condition=~Q(subject="")
            ),
            # The dead-letter queue, newest first (the console's list and bulk retries of a filter):
            # dead jobs rarely change, so this index costs one entry per job that dies.
            models.Index(fields=["-created_at"], name="job_dead_idx", condition=Q(state="dead")),
            # One group of the dead-letter page (type, error class), newest first; dead jobs only.
            models.Index(
                fields=["type", "error_class", "-created_at"], name="job_dead_group_idx", condition=Q(state="dead")
            ),
            # A batch's members by their last change (its page: done/h over time, the ETA); batch
            # members only, and heartbeats touch neither column (they stay HOT updates).
            models.Index(fields=["batch", "state_changed_at"], name="job_batch_idx", condition=Q(batch__isnull=False)),
            # The API's job list (the PHP core's sync: ``updated_after`` and the keyset cursor) in the
            # order of the last change. Transitions are not HOT updates anyway (``state`` is indexed),
            # so this is one more index entry per transition; heartbeats touch neither column.
            models.Index(fields=["state_changed_at", "id"], name="job_changed_idx"),
            # A client's open jobs, counted (up to its bound) before it may submit more (api/backpressure.py).
            models.Index(
                fields=["client"],
                name="job_client_open_idx",
                condition=Q(client__isnull=False) & ~Q(state__in=TERMINAL_STATES),
            ),
            # The same list for a client that sees only its own jobs.
            models.Index(
                fields=["client", "state_changed_at", "id"],
                name="job_client_changed_idx",
                condition=Q(client__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.type} {self.id} ({self.state})"

    # --- conditions ---------------------------------------------------------------------------

    def has_retry_budget(self) -> bool:
        return self.attempts < self.max_attempts

    # --- engine transitions (executed as guarded SQL by jobs.leases) -------------------------

    @transition(field=state, source=State.PLANNED, target=State.RESERVED, custom=ENGINE)
    def claim(self):
        """A worker reserved the job; the lease version rose by one."""

    @transition(field=state, source=State.RESERVED, target=State.RUNNING, custom=ENGINE)
    def start(self):
        """The handler began."""

    @transition(field=state, source=State.RUNNING, target=State.RESULT_STORED, custom=ENGINE)
    def complete(self):
        """Executed and result written; the business outcome still waits for confirmation."""

    @transition(field=state, source=State.RESULT_STORED, target=State.DONE, custom=ENGINE)
    def settle(self):
        """The handler's own business rule decided the outcome in the same run, so nothing is left to
        confirm: analysis found no match, a crawl handed its candidates on, robots.txt forbade the page.
        Written together with ``complete``; the log shows both steps."""

    @transition(field=state, source=State.RUNNING, target=State.RECHECK_DUE, custom=ENGINE)
    def plan_recheck(self):
        """Executed; a planned follow-up will decide the business outcome."""

    @transition(field=state, source=State.RUNNING, target=State.UNCLEAR, custom=ENGINE)
    def flag_unclear(self):
        """The handler could not decide the case: a human must."""

    @transition(field=state, source=LEASED_STATES, target=State.FAILED, conditions=[has_retry_budget], custom=ENGINE)
    def fail_for_retry(self):
        """A transient failure (or a lost lease) with retry budget left: wait for the next attempt."""

    @transition(field=state, source=LEASED_STATES, target=State.DEAD, custom=ENGINE)
    def dead_letter(self):
        """A permanent failure, or the retry budget is spent: into the dead-letter queue."""

    @transition(field=state, source=LEASED_STATES, target=State.PLANNED, custom=ENGINE)
    def release(self):
        """The worker handed the job back cleanly (e.g. on SIGTERM); no retry budget is used."""

    @transition(field=state, source=State.FAILED, target=State.PLANNED, custom=ENGINE)
    def retry_due(self):
        """The next attempt's time has come."""

    @transition(field=state, source=(State.UNCLEAR, State.RECHECK_DUE), target=State.READY_FOR_REVIEW, custom=ENGINE)
    def queue_for_review(self):
        """A review case is open: unclear analysis, or a recheck plan that hit its deadline."""

    # --- human and API transitions (run through jobs.leases.transition_apply) ----------------

    @transition(
        field=state,
        source=(State.RESULT_STORED, State.RECHECK_DUE),
        target=State.DONE,
        permission=OPERATE_PERMISSION,
    )
    def confirm(self, *, reason: str = "business outcome confirmed"):
        self.completion_reason = reason
        self.finished_at = LeitstandNow()

    @transition(field=state, source=State.READY_FOR_REVIEW, target=State.DONE, permission=REVIEW_PERMISSION)
    def decide(self, *, reason: str):
        self.completion_reason = reason
        self.finished_at = LeitstandNow()

    @transition(field=state, source=State.READY_FOR_REVIEW, target=State.RECHECK_DUE, permission=REVIEW_PERMISSION)
    def decide_match(self, *, reason: str):
        """A reviewer found the case a match: it is followed up by rechecks like an automatic match."""
        self.completion_reason = ""

    @transition(field=state, source=(State.FAILED, State.DEAD), target=State.PLANNED, permission=OPERATE_PERMISSION)
    def retry_now(self, *, reason: str = "retried by an operator"):
        """Give the job a fresh retry budget and make it due now (e.g. from the dead-letter queue)."""
        self.attempts = 0
        self.due_at = LeitstandNow()
        self.next_attempt_at = None
        self.finished_at = None
        self.completion_reason = ""

    @transition(field=state, source=State.PLANNED, target=State.HELD, permission=OPERATE_PERMISSION)
    def hold(self, *, reason: str):
        """Take a job waiting in line out of it until a person resumes it (the transition log keeps who
        held it, when and why); it keeps its due time, and so its place, for when it comes back."""

    @transition(field=state, source=State.HELD, target=State.PLANNED, permission=OPERATE_PERMISSION)
    def resume(self, *, reason: str):
        """Put a held job back in line, at the place its due time gives it."""

    @transition(field=state, source=CANCELLABLE_STATES, target=State.CANCELLED, permission=OPERATE_PERMISSION)
    def cancel(self, *, reason: str):
        # A running attempt's lease ends here: its next heartbeat or result is refused as stale.
        self.completion_reason = reason
        self.finished_at = LeitstandNow()
        self.lease_owner = ""
        self.lease_expires_at = None
        self.next_attempt_at = None


class ReviewLease(models.Model):
    """A reviewer's short hold on a review case, so two reviewers never decide the same case. It
    expires by itself (and is renewed while the reviewer works), so an abandoned case returns to the
    queue instead of making it look empty."""

    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="review_lease", primary_key=True)
    reviewer = models.CharField(max_length=255)
    taken_at = models.DateTimeField(db_default=LeitstandNow())
    expires_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.reviewer} holds {self.job_id} until {self.expires_at}"


class ReviewEscalation(models.Model):
    """A review case a reviewer handed to the escalated queue (senior reviewers), with the reason."""

    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="review_escalation", primary_key=True)
    escalated_by = models.CharField(max_length=255)
    reason = models.CharField(max_length=500)
    at = models.DateTimeField(db_default=LeitstandNow())

    def __str__(self) -> str:
        return f"{self.job_id} escalated by {self.escalated_by}"


class Attempt(models.Model):
    """One claim of a job: never overwritten, so the history of every attempt survives."""

    class Outcome(models.TextChoices):
        COMPLETED = "completed"
        SKIPPED = "skipped"  # completed, and the handler decided there was nothing to do (Skipped)
        RECHECK_PLANNED = "recheck_planned"
        UNCLEAR = "unclear"
        FAILED = "failed"
        DEAD = "dead"
        RELEASED = "released"
        LEASE_EXPIRED = "lease_expired"
        WORKER_DIED = "worker_died"
        CANCELLED = "cancelled"

    # No index of its own: the unique (job, lease_version) index serves every lookup by job.
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="attempt_log", db_index=False)
    lease_version = models.PositiveIntegerField()
    # The job's type, copied at the claim, so per-type views of attempts need no join (paths page).
    job_type = models.CharField(max_length=64, blank=True, db_default="")
    lease_owner = models.CharField(max_length=255)
    worker_host = models.CharField(max_length=255)
    worker_pid = models.PositiveIntegerField()
    pool = models.CharField(max_length=64, blank=True)
    claimed_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=20, choices=Outcome.choices, blank=True)
    error_class = models.CharField(max_length=200, blank=True)
    error_message = models.TextField(blank=True)
    # Its span when traces are recorded (jobs/tracing.py): a W3C traceparent naming trace and span.
    trace_span = models.CharField(max_length=55, blank=True, default="", db_default="")
    # The lines its handler logged that it kept (jobs/logs.py, ``Kept.stored``): {"lines": [...], "dropped": n}.
    log_lines = models.JSONField(null=True, blank=True)
    refused_writes = models.PositiveIntegerField(default=0, help_text="Writes refused because this attempt was stale.")
    last_refused_at = models.DateTimeField(null=True, blank=True)
    last_refused_op = models.CharField(max_length=32, blank=True)
    # The path check (jobs/paths.py), filled by the control process shortly after the attempt ended.
    path_checked = models.BooleanField(db_default=False)
    path_signature = models.CharField(
        max_length=500, blank=True, db_default="", help_text="The steps it took and how it ended."
    )
    path_conforms = models.BooleanField(
        null=True, blank=True, help_text="Empty: not judged (released, expired, cancelled)."
    )
    path_divergence = models.CharField(max_length=500, blank=True, db_default="")
    path_divergence_kind = models.CharField(max_length=20, blank=True, db_default="")
    duration_ms = models.FloatField(null=True, blank=True, help_text="From start to end of the handler run.")
    slow = models.BooleanField(db_default=False, help_text="Far outside its type's (or a step's) usual run time.")
    slow_reason = models.CharField(max_length=300, blank=True, db_default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "lease_version"], name="attempt_one_per_lease_version"),
        ]
        indexes = [
            # The path check's queue (attempts_unchecked_lock_skip_locked): every attempt until it is
            # checked. Its end (finished_at) is not in the condition, so ending an attempt changes no
            # indexed column and can be a HOT update (jobs_attempt's fillfactor leaves the room); the
            # few attempts still running are passed over by the walk.
            models.Index(fields=["id"], name="attempt_to_check_idx", condition=Q(path_checked=False)),
            models.Index(fields=["id"], name="attempt_divergent_idx", condition=Q(path_conforms=False)),
            models.Index(fields=["job_type", "-id"], name="attempt_type_checked_idx", condition=Q(path_checked=True)),
        ]

    def __str__(self) -> str:
        return f"attempt {self.lease_version} of {self.job_id}"


class Transition(models.Model):
    """Append-only log of every state change; a trigger refuses UPDATE and DELETE."""

    # No constraint in the database: history outlives its job until its day's partition is dropped.
    job = models.ForeignKey(
        Job, on_delete=models.CASCADE, related_name="transitions", db_index=False, db_constraint=False
    )
    from_state = models.CharField(max_length=20, blank=True, help_text="Empty for the job's creation.")
    to_state = models.CharField(max_length=20)
    at = models.DateTimeField(db_default=LeitstandNow())
    lease_version = models.PositiveIntegerField()
    cause = models.CharField(max_length=500)
    actor = models.CharField(max_length=255)

    class Meta:
        # Serves lookups by job (so the foreign key has no index of its own): three rows per job
        # are written on the hot path, and every index costs each of them.
        indexes = [
            models.Index(fields=["job", "id"], name="transition_job_idx"),
            # Review decisions only (a small share of the log), for the business rules' look-back.
            models.Index(fields=["at"], name="transition_decision_idx", condition=Q(from_state="ready_for_review")),
        ]

    def __str__(self) -> str:
        return f"{self.from_state or '∅'} → {self.to_state} ({self.cause})"


class StaleWrite(models.Model):
    """A write by an attempt that no longer held the lease, refused and kept for the console."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="stale_writes")
    lease_version = models.PositiveIntegerField(help_text="The stale writer's lease version.")
    operation = models.CharField(max_length=32)
    at = models.DateTimeField()
    current_lease_version = models.PositiveIntegerField()
    current_state = models.CharField(max_length=20)

    class Meta:
        indexes = [models.Index(fields=["at"], name="stalewrite_at_idx")]

    def __str__(self) -> str:
        return f"refused {self.operation} by attempt {self.lease_version} of {self.job_id}"


class LeaderLease(models.Model):
    """The lease row of a leader (``jobs/leadership.py``): who holds it, in which term, until when.
    The term grows at each change of holder; a leader's sweeps write only while theirs is current."""

    name = models.CharField(max_length=64, primary_key=True)
    holder = models.CharField(max_length=255, help_text="host:pid:random of the leading process")
    term = models.PositiveBigIntegerField()
    elected_at = models.DateTimeField()
    renewed_at = models.DateTimeField()
    expires_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name}: term {self.term} of {self.holder}"


class DeposedWrite(models.Model):
    """A write of a leader whose term was over, refused and kept for the console (like ``StaleWrite``)."""

    name = models.CharField(max_length=64)
    holder = models.CharField(max_length=255)
    term = models.PositiveBigIntegerField()
    operation = models.CharField(max_length=64, help_text="the sweep (or its step) that tried to write")
    current_holder = models.CharField(max_length=255, blank=True)
    current_term = models.PositiveBigIntegerField()
    at = models.DateTimeField(db_default=LeitstandNow())

    def __str__(self) -> str:
        return f"refused {self.operation} of {self.holder} in term {self.term}"


class Effect(models.Model):
    """The effect ledger: a business side effect is applied at most once per key."""

    key = models.CharField(max_length=255, unique=True)
    kind = models.CharField(max_length=64)
    job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="effects")
    lease_version = models.PositiveIntegerField(null=True, blank=True)
    applied_at = models.DateTimeField(db_default=LeitstandNow())
    detail = models.JSONField(default=dict, blank=True)
    # What the effect returned, so a repeat (a re-run after a lost status report) gets the same answer.
    result = models.JSONField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.kind} {self.key}"


class StepEvent(models.Model):
    """One structured step of a handler run, written only while its attempt holds the lease."""

    class Outcome(models.TextChoices):
        OK = "ok"
        FAILED = "failed"
        SKIPPED = "skipped"
        DEFERRED = "deferred"  # the job was handed back for later (a busy or resting host): not a failure

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="steps", db_index=False, db_constraint=False)
    lease_version = models.PositiveIntegerField()
    correlation_id = models.CharField(max_length=255)
    step = models.CharField(max_length=100)
    outcome = models.CharField(max_length=10, choices=Outcome.choices)
    started_at = models.DateTimeField()
    duration_ms = models.FloatField()
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        indexes = [models.Index(fields=["job", "lease_version", "id"], name="stepevent_job_idx")]

    def __str__(self) -> str:
        return f"{self.step} {self.outcome} ({self.duration_ms:.0f} ms)"


class WebhookEvent(models.Model):
    """The outbox of webhooks to the PHP core: written in the transaction of the change it reports
    (a trigger on ``jobs_transition`` for done, dead and ready_for_review; the rechecks service for
    a recheck plan's end), turned into delivery jobs by the control process and then deleted. Its
    id is the event ID the receiver deduplicates on."""

    kind = models.CharField(max_length=40)
    job_id = models.UUIDField(null=True, blank=True, help_text="Empty for a batch's event.")
    batch_id = models.BigIntegerField(null=True, blank=True)
    transition_id = models.BigIntegerField(null=True, blank=True)
    occurred_at = models.DateTimeField(db_default=LeitstandNow())
    data = models.JSONField(default=dict, blank=True)
    error = models.TextField(
        blank=True,
        db_default="",
        default="",
        help_text="Why turning it into a delivery failed; such an event stays here, skipped, for an operator.",
    )

    def __str__(self) -> str:
        return f"event {self.pk}: {self.kind} {self.job_id}"


class Batch(models.Model):
    """A named group of jobs (a crawl run, a bulk submission from the API) with live progress.

    Its counters live in ``BatchCounter`` rows, updated by a trigger in the transaction of each
    member's transition (``jobs/batches.py``); the control process finalizes it once, when every
    member has ended (or was handed to a person or a recheck plan)."""

    key = models.CharField(max_length=255, help_text="Idempotency: one batch per key and namespace.")
    key_namespace = models.CharField(
        max_length=120, blank=True, db_default="", default="", help_text="Whose key: as ``Job.key_namespace``."
    )
    client = models.ForeignKey(
        Client, null=True, blank=True, on_delete=models.PROTECT, related_name="+", help_text="Who owns it."
    )
    name = models.CharField(max_length=200)
    created_by = models.CharField(max_length=255)
    correlation_id = models.CharField(max_length=255)
    target_finish_at = models.DateTimeField(null=True, blank=True)
    request_hash = models.CharField(max_length=64, blank=True, help_text="What the API submitted, to compare repeats.")
    created_at = models.DateTimeField(db_default=LeitstandNow())
    finished_at = models.DateTimeField(null=True, blank=True)
    stats = models.JSONField(default=dict, blank=True, help_text="Set once, at finalization.")

    class Meta:
        verbose_name_plural = "batches"
        constraints = [models.UniqueConstraint(fields=["key_namespace", "key"], name="batch_key_unique_per_namespace")]
        indexes = [models.Index(fields=["id"], name="batch_running_idx", condition=Q(finished_at__isnull=True))]

    def __str__(self) -> str:
        return f"batch {self.pk} {self.name}"


class BatchCounter(models.Model):
    """One shard of a batch's counters (one per database session's pid modulo 16), so concurrent
    completions by different workers update different rows; the batch's figures are their sums.
    ``total`` counts members created; the others count members *currently* in that state."""

    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, related_name="counters", db_index=False)
    shard = models.SmallIntegerField()
    total = models.IntegerField(default=0)
    done = models.IntegerField(default=0)
    failed = models.IntegerField(default=0)
    dead = models.IntegerField(default=0)
    in_review = models.IntegerField(default=0)
    rechecking = models.IntegerField(default=0)
    cancelled = models.IntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["batch", "shard"], name="batch_counter_shard_once")]


class FlowRest(models.Model):
    """When a flow key of a pool may next start a job, as the app whose work the key paces says it
    (the pipeline: when a host may next be asked, jobs keyed by host). The claim takes none of the
    key's jobs before ``until`` (jobs/queries.sql, ``flow_lanes_due``). Written only through
    ``jobs.flows.flow_rests_set``; a row whose time has passed holds nothing back."""

    pool = models.CharField(max_length=64)
    key = models.CharField(max_length=255, blank=True)
    until = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["pool", "key"], name="flowrest_once_per_pool")]


class FlowKey(models.Model):
    """An operator's settings for one flow key in one pool: its weight in the fair share, its running
    limit (instead of its types' default), its rate limit (starts per interval), whether it is paused.
    A key without a row has weight 1, the default limit, no rate limit, and runs. Changed by
    ``jobs.flows`` (audited by its callers)."""

    pool = models.CharField(max_length=64)
    key = models.CharField(max_length=255, blank=True)
    weight = models.PositiveSmallIntegerField(db_default=1, default=1, help_text="Its share against weight 1.")
    max_running = models.PositiveIntegerField(
        null=True, blank=True, help_text="At most this many of its jobs hold leases at once; empty: the default."
    )
    paused = models.BooleanField(db_default=False, default=False, help_text="None of its jobs is claimed.")
    rate_starts = models.PositiveIntegerField(
        null=True, blank=True, help_text="At most this many of its jobs start per rate_seconds; empty: no rate limit."
    )
    rate_seconds = models.PositiveIntegerField(null=True, blank=True, help_text="The rate limit's interval.")
    # The rate limit's bucket (GCRA): when its jobs started so far would have been spaced out evenly
    # (rate_seconds / rate_starts apart). Written only by the claim (jobs/queries.sql, flow_rates_charge).
    rate_tat = models.DateTimeField(null=True, blank=True)
    reason = models.CharField(max_length=500, blank=True, db_default="", default="")
    changed_by = models.CharField(max_length=255, blank=True, db_default="", default="")
    changed_at = models.DateTimeField(db_default=LeitstandNow())

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["pool", "key"], name="flowkey_once_per_pool"),
            models.CheckConstraint(condition=Q(weight__gte=1, weight__lte=1000), name="flowkey_weight_1_to_1000"),
            models.CheckConstraint(
                condition=Q(rate_starts__isnull=True, rate_seconds__isnull=True)
                | Q(rate_starts__gte=1, rate_seconds__gte=1),
                name="flowkey_rate_whole",
            ),
        ]

    def __str__(self) -> str:
        return f"flow key {self.key!r} in {self.pool}"


class FlowLane(models.Model):
    """The engine's line of one flow key in one lane of a pool: where it stands in the fair share
    (``vtime``: its virtual time, raised by 1/weight per job claimed) and a lower bound of when its
    first planned job is due (``next_due``; NULL: none planned). Written only by the claim, the
    ``jobs_transition_flow_lanes`` trigger and ``jobs_flow_lanes_refresh`` (jobs/functions.sql)."""

    pool = models.CharField(max_length=64)
    priority = models.SmallIntegerField()
    key = models.CharField(max_length=255, blank=True)
    vtime = models.FloatField(default=0)
    next_due = models.DateTimeField(null=True, blank=True)

    class Meta:
        # In key order per pool: the console's view of a pool's keys pages through it.
        constraints = [models.UniqueConstraint(fields=["pool", "key", "priority"], name="flowlane_once")]
        indexes = [
            # The claim: a pool's lanes with due work, most urgent lane first, then the least served.
            models.Index(
                fields=["pool", "priority", "vtime", "next_due"],
                name="flowlane_turn_idx",
                condition=Q(next_due__isnull=False),
            )
        ]


class FlowClock(models.Model):
    """A pool lane's virtual time: how far its fair share has served (the claim raises it). A flow
    lane that comes back from idle starts here, with no credit for the time it had nothing."""

    pool = models.CharField(max_length=64)
    priority = models.SmallIntegerField()
    vtime = models.FloatField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["pool", "priority"], name="flowclock_once")]


class AuditEntry(models.Model):
    """Append-only record of every action a person (or an API client) takes in the console or on alerts:
    who did what to which objects, why, and the result. Beside the transition log, with the same
    append-only trigger; its table keeps its first name (``dashboard_auditentry``)."""

    at = models.DateTimeField(db_default=LeitstandNow())
    actor = models.CharField(max_length=255)
    action = models.CharField(max_length=64)
    target = models.CharField(max_length=500, help_text="An object, or the filter a bulk action acted on.")
    reason = models.CharField(max_length=500, blank=True)
    result = models.CharField(max_length=500)

    class Meta:
        db_table = "dashboard_auditentry"
        verbose_name_plural = "audit entries"
        indexes = [models.Index(fields=["-at"], name="auditentry_at_idx")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {self.target}"
