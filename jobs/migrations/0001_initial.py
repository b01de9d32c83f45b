"""The job engine's tables, plus what the ORM cannot declare.

- ``leitstand_now()``: database time for every lease and schedule decision. It is
  ``clock_timestamp()`` (not ``now()``, which stands still for a whole transaction), shifted by the
  session setting ``leitstand.clock_offset`` when a test moves time; production never sets it.
- ``fillfactor = 90`` on the job table, so heartbeats find room on the row's page (HOT updates).
- A trigger that makes the transition log append-only: UPDATE and DELETE are refused. The one
  exception is a deliberate retention purge in a session that sets ``leitstand.allow_purge = on``.
"""

import uuid

import django.db.models.deletion
import django_fsm
from django.db import migrations, models

import jobs.models


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        migrations.RunSQL(
            sql="""
                CREATE FUNCTION leitstand_now() RETURNS timestamptz LANGUAGE sql VOLATILE AS $$
                    SELECT clock_timestamp()
                        + coalesce(nullif(current_setting('leitstand.clock_offset', true), ''), '0')::interval
                $$;
            """,
            reverse_sql="DROP FUNCTION leitstand_now();",
        ),
        migrations.CreateModel(
            name="Job",
            fields=[
                ("id", models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                ("type", models.CharField(help_text="Job type, e.g. crawl, analysis, recheck.", max_length=64)),
                (
                    "pool",
                    models.CharField(help_text="The worker pool that runs it (claims are per pool).", max_length=64),
                ),
                (
                    "idempotency_key",
                    models.CharField(help_text="Unique per job type: the same key is the same job.", max_length=255),
                ),
                ("correlation_id", models.CharField(help_text="Joins every job of one business case.", max_length=255)),
                ("schema_version", models.PositiveSmallIntegerField(db_default=1, default=1)),
                (
                    "processing_version",
                    models.CharField(
                        blank=True,
                        db_default="",
                        default="",
                        help_text="Handler version of the latest attempt.",
                        max_length=64,
                    ),
                ),
                (
                    "priority",
                    models.SmallIntegerField(
                        db_default=5,
                        default=5,
                        help_text="0 is the most urgent lane, 9 the bulk lane; claims serve lower first.",
                    ),
                ),
                ("source", models.CharField(blank=True, db_default="", default="", max_length=255)),
                ("payload", models.JSONField(db_default={}, default=dict)),
                ("created_at", models.DateTimeField(db_default=jobs.models.LeitstandNow())),
                (
                    "due_at",
                    models.DateTimeField(
                        db_default=jobs.models.LeitstandNow(), help_text="Not claimed before this time."
                    ),
                ),
                (
                    "state",
                    django_fsm.FSMField(
                        choices=[
                            ("planned", "planned"),
                            ("reserved", "reserved"),
                            ("running", "running"),
                            ("result_stored", "result stored"),
                            ("unclear", "business-unclear"),
                            ("ready_for_review", "ready for review"),
                            ("recheck_due", "recheck due"),
                            ("failed", "technically failed"),
                            ("done", "done"),
                            ("dead", "dead"),
                            ("cancelled", "cancelled"),
                        ],
                        default="planned",
                        max_length=20,
                        protected=True,
                    ),
                ),
                ("state_changed_at", models.DateTimeField(db_default=jobs.models.LeitstandNow())),
                (
                    "finished_at",
                    models.DateTimeField(
                        blank=True, help_text="When the job reached done, dead or cancelled.", null=True
                    ),
                ),
                ("lease_owner", models.CharField(blank=True, db_default="", default="", max_length=255)),
                (
                    "lease_version",
                    models.PositiveIntegerField(
                        db_default=0,
                        default=0,
                        help_text="The attempt ID and fencing token: rises by one with every claim.",
                    ),
                ),
                ("lease_expires_at", models.DateTimeField(blank=True, null=True)),
                ("heartbeat_at", models.DateTimeField(blank=True, null=True)),
                ("progress", models.JSONField(blank=True, null=True)),
                (
                    "attempts",
                    models.PositiveSmallIntegerField(
                        db_default=0, default=0, help_text="Claims counted against the retry budget."
                    ),
                ),
                (
                    "max_attempts",
                    models.PositiveSmallIntegerField(db_default=5, default=5, help_text="The retry budget."),
                ),
                ("next_attempt_at", models.DateTimeField(blank=True, null=True)),
                ("result_ref", models.CharField(blank=True, db_default="", default="", max_length=500)),
                ("result_checksum", models.CharField(blank=True, db_default="", default="", max_length=128)),
                ("error_class", models.CharField(blank=True, db_default="", default="", max_length=200)),
                ("error_message", models.TextField(blank=True, db_default="", default="")),
                ("completion_reason", models.CharField(blank=True, db_default="", default="", max_length=500)),
                (
                    "parent",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="children",
                        to="jobs.job",
                    ),
                ),
            ],
            options={
                "permissions": [
                    ("operate_job", "Can act on jobs as an operator (cancel, retry, confirm)"),
                    ("review_job", "Can decide review cases"),
                ],
            },
            bases=(django_fsm.ConcurrentTransitionMixin, models.Model),
        ),
        migrations.CreateModel(
            name="Effect",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("key", models.CharField(max_length=255, unique=True)),
                ("kind", models.CharField(max_length=64)),
                ("lease_version", models.PositiveIntegerField(blank=True, null=True)),
                ("applied_at", models.DateTimeField(db_default=jobs.models.LeitstandNow())),
                ("detail", models.JSONField(blank=True, default=dict)),
                (
                    "job",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="effects",
                        to="jobs.job",
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="Attempt",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("lease_version", models.PositiveIntegerField()),
                ("lease_owner", models.CharField(max_length=255)),
                ("worker_host", models.CharField(max_length=255)),
                ("worker_pid", models.PositiveIntegerField()),
                ("pool", models.CharField(blank=True, max_length=64)),
                ("claimed_at", models.DateTimeField()),
                ("started_at", models.DateTimeField(blank=True, null=True)),
                ("heartbeat_at", models.DateTimeField(blank=True, null=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                (
                    "outcome",
                    models.CharField(
                        blank=True,
                        choices=[
                            ("completed", "Completed"),
                            ("recheck_planned", "Recheck Planned"),
                            ("unclear", "Unclear"),
                            ("failed", "Failed"),
                            ("dead", "Dead"),
                            ("released", "Released"),
                            ("lease_expired", "Lease Expired"),
                            ("cancelled", "Cancelled"),
                        ],
                        max_length=20,
                    ),
                ),
                ("error_class", models.CharField(blank=True, max_length=200)),
                ("error_message", models.TextField(blank=True)),
                (
                    "refused_writes",
                    models.PositiveIntegerField(default=0, help_text="Writes refused because this attempt was stale."),
                ),
                ("last_refused_at", models.DateTimeField(blank=True, null=True)),
                ("last_refused_op", models.CharField(blank=True, max_length=32)),
                (
                    "job",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="attempt_log", to="jobs.job"
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="StaleWrite",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("lease_version", models.PositiveIntegerField(help_text="The stale writer's lease version.")),
                ("operation", models.CharField(max_length=32)),
                ("at", models.DateTimeField()),
                ("current_lease_version", models.PositiveIntegerField()),
                ("current_state", models.CharField(max_length=20)),
                (
                    "job",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="stale_writes", to="jobs.job"
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="Transition",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("from_state", models.CharField(blank=True, help_text="Empty for the job's creation.", max_length=20)),
                ("to_state", models.CharField(max_length=20)),
                ("at", models.DateTimeField(db_default=jobs.models.LeitstandNow())),
                ("lease_version", models.PositiveIntegerField()),
                ("cause", models.CharField(max_length=500)),
                ("actor", models.CharField(max_length=255)),
                (
                    "job",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="transitions", to="jobs.job"
                    ),
                ),
            ],
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("state", "planned")),
                fields=["pool", "priority", "due_at", "id"],
                name="job_claim_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("state", "planned")), fields=["type", "due_at"], name="job_queue_age_idx"
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("state", "failed")), fields=["next_attempt_at"], name="job_retry_due_idx"
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("state__in", ("reserved", "running"))), fields=["id"], name="job_leased_idx"
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("state", "ready_for_review")),
                fields=["type", "state_changed_at"],
                name="job_review_backlog_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(fields=["correlation_id"], name="job_correlation_idx"),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.UniqueConstraint(fields=("type", "idempotency_key"), name="job_idempotency_key_unique"),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(("priority__gte", 0), ("priority__lte", 9)), name="job_priority_0_to_9"
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(("max_attempts__gte", 1)), name="job_max_attempts_positive"
            ),
        ),
        migrations.AddConstraint(
            model_name="attempt",
            constraint=models.UniqueConstraint(fields=("job", "lease_version"), name="attempt_one_per_lease_version"),
        ),
        migrations.AddIndex(
            model_name="stalewrite",
            index=models.Index(fields=["at"], name="stalewrite_at_idx"),
        ),
        migrations.AddIndex(
            model_name="transition",
            index=models.Index(fields=["job", "id"], name="transition_job_idx"),
        ),
        migrations.RunSQL(
            sql="ALTER TABLE jobs_job SET (fillfactor = 90);",
            reverse_sql="ALTER TABLE jobs_job RESET (fillfactor);",
        ),
        migrations.RunSQL(
            sql="""
                CREATE FUNCTION jobs_transition_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF TG_OP = 'DELETE' AND current_setting('leitstand.allow_purge', true) = 'on' THEN
                        RETURN OLD;
                    END IF;
                    RAISE EXCEPTION 'jobs_transition is append-only: % refused', TG_OP
                        USING ERRCODE = 'insufficient_privilege';
                END;
                $$;
                CREATE TRIGGER jobs_transition_append_only
                    BEFORE UPDATE OR DELETE ON jobs_transition
                    FOR EACH ROW EXECUTE FUNCTION jobs_transition_append_only();
            """,
            reverse_sql="""
                DROP TRIGGER jobs_transition_append_only ON jobs_transition;
                DROP FUNCTION jobs_transition_append_only();
            """,
        ),
    ]
