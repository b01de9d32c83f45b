"""``manage.py dlq list|show|retry|remove|groups|review``: inspect, re-drive and review the dead-letter queue.

Modelled on Symfony Messenger's ``messenger:failed:*``. ``retry`` and ``remove`` take one job ID or
every job matching ``--type``/``--error`` (``--all``); the matching set is fixed before the first
change, so jobs that die meanwhile are not swept up. ``remove`` cancels with a reason: nothing is
ever deleted. Every change is recorded in the job's transition log with the acting user.
``groups`` lists the groups (type × error class × step) with their review state, those waiting for a
review first; ``review`` records a person's decision on one (as the console's Dead letters page does).
"""

import getpass
import json
import uuid

from django.core.management.base import BaseCommand, CommandError
from django_fsm import TransitionNotAllowed

from dashboard.models import DeadLetterReview
from dashboard.operations.deadletters import dead_letter_review, dead_letters_snapshot, reviews_attach
from jobs import services
from jobs.leases import JobNotFound
from jobs.models import Job, State
from jobs.selectors import dead_letter_groups, dead_letter_jobs
from jobs.services import JobInputError


class Command(BaseCommand):
    help = "List, show, retry or remove (cancel) jobs in the dead-letter queue."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        listing = sub.add_parser("list", help="dead jobs, grouped by type and error class, then the newest")
        show = sub.add_parser("show", help="one dead job with its attempts and transitions")
        show.add_argument("job_id")
        retry = sub.add_parser("retry", help="retry now with a fresh budget")
        remove = sub.add_parser("remove", help="cancel with a reason (never a delete)")
        for p in (listing, retry, remove):
            p.add_argument("--type", dest="job_type")
            p.add_argument("--error", dest="error_class", help="exact error class, e.g. httpx.ConnectTimeout")
        listing.add_argument("--limit", type=int, default=20)
        for p in (retry, remove):
            p.add_argument("job_id", nargs="?")
            p.add_argument("--all", action="store_true", help="every dead job matching --type/--error")
            p.add_argument("--dry-run", action="store_true", help="say what would change, change nothing")
            p.add_argument("--actor", default=f"cli:{getpass.getuser()}")
        retry.add_argument("--reason", default="retried from the dead-letter queue")
        remove.add_argument("--reason", required=True, help="why the job is given up (goes into its audit log)")
        sub.add_parser("groups", help="the groups (type × error × step) with their review state")
        review = sub.add_parser("review", help="record a review of one group: a decision and a note")
        review.add_argument("--type", dest="job_type", required=True)
        review.add_argument("--error", dest="error_class", required=True, help="exact error class ('' for none)")
        review.add_argument("--step", default="", help="the step the group died in ('' for none)")
        review.add_argument("--decision", required=True, choices=DeadLetterReview.Decision.values)
        review.add_argument("--note", required=True, help="what you found and why you decided so")
        review.add_argument("--actor", default=f"cli:{getpass.getuser()}")

    def handle(self, *args, action, **options):
        return getattr(self, f"_{action}")(**options)

    def _list(self, *, job_type, error_class, limit, **options):
        groups = list(dead_letter_groups(job_type=job_type, error_class=error_class))
        if not groups:
            self.stdout.write(
                "the dead-letter queue is empty" + (" for this filter" if job_type or error_class else "")
            )
            return
        self.stdout.write(f"{'count':>6}  {'type':<16} {'error class':<40} first seen → last seen")
        for g in groups:
            self.stdout.write(
                f"{g['count']:>6}  {g['type']:<16} {g['error_class'] or '-':<40} "
                f"{g['first_seen']:%Y-%m-%d %H:%M:%S%z} → {g['last_seen']:%Y-%m-%d %H:%M:%S%z}"
            )
        self.stdout.write("")
        for job in dead_letter_jobs(job_type=job_type, error_class=error_class)[:limit]:
            self.stdout.write(
                f"{job.id}  {job.type:<16} {job.attempts}/{job.max_attempts}  "
                f"{job.finished_at:%Y-%m-%d %H:%M:%S%z}  {job.error_class}: {_terminal_safe(job.error_message[:80])}"
            )

    def _groups(self, **options):
        groups, now, _ = dead_letters_snapshot()
        groups = reviews_attach(groups)
        if not groups:
            self.stdout.write("the dead-letter queue is empty")
            return
        self.stdout.write(f"groups as of {now:%Y-%m-%d %H:%M:%S}, those waiting for a review first")
        self.stdout.write(f"{'jobs':>6}  {'review':<10} {'type':<14} {'step':<12} error class")
        for group in groups:
            decided = f"  [{group.review.decision} by {group.review.reviewed_by}]" if group.review else ""
            self.stdout.write(
                f"{group.total:>6}  {group.review_state:<10} {group.type:<14} {group.step or '—':<12} "
                f"{group.error_class or '(none)'}{decided}"
            )

    def _review(self, *, job_type, error_class, step, decision, note, actor, **options):
        try:
            review = dead_letter_review(
                type=job_type, error_class=error_class, step=step, decision=decision, note=note, actor=actor, user=None
            )
        except JobInputError as refused:
            raise CommandError(str(refused)) from None
        self.stdout.write(f"reviewed by {actor}: {review} — {review.note}")

    def _show(self, *, job_id, **options):
        job = Job.objects.filter(pk=job_id).first() if _is_uuid(job_id) else None
        if job is None:
            raise CommandError(f"job {job_id} does not exist")
        record = {
            f: str(getattr(job, f))
            for f in (
                "id",
                "type",
                "pool",
                "state",
                "correlation_id",
                "idempotency_key",
                "priority",
                "attempts",
                "max_attempts",
                "lease_version",
                "error_class",
                "error_message",
                "completion_reason",
                "finished_at",
            )
        }
        record["payload"] = job.payload
        record["attempts_log"] = [
            {
                "attempt": a.lease_version,
                "worker": a.lease_owner,
                "claimed_at": str(a.claimed_at),
                "finished_at": str(a.finished_at),
                "outcome": a.outcome,
                "error": f"{a.error_class}: {a.error_message}",
            }
            for a in job.attempt_log.order_by("lease_version")
        ]
        record["transitions"] = [
            f"{t.at:%Y-%m-%d %H:%M:%S.%f%z} {t.from_state or '∅'} → {t.to_state} ({t.cause}; {t.actor})"
            for t in job.transitions.order_by("id")
        ]
        self.stdout.write(json.dumps(record, indent=2, ensure_ascii=False))
        if job.state != State.DEAD:
            self.stderr.write(f"note: job {job.id} is not in the dead-letter queue (it is {job.state})")

    def _retry(self, **options):
        self._apply(services.job_retry_now, "retried", **options)

    def _remove(self, **options):
        self._apply(services.job_cancel, "removed (cancelled)", **options)

    def _apply(self, service, verb, *, job_id, job_type, error_class, all, dry_run, actor, reason, **options):
        if bool(job_id) == bool(all):
            raise CommandError("name one job ID, or --all (with --type/--error to narrow it)")
        if job_id:
            selected = (
                list(Job.objects.filter(pk=job_id, state=State.DEAD).values_list("pk", flat=True))
                if _is_uuid(job_id)
                else []
            )
            if not selected:
                raise CommandError(f"job {job_id} is not in the dead-letter queue")
        else:
            # Fixed before the first change: jobs that die meanwhile are not swept up.
            selected = list(dead_letter_jobs(job_type=job_type, error_class=error_class).values_list("pk", flat=True))
        if dry_run:
            self.stdout.write(f"dry run: {len(selected)} dead job(s) would be {verb}")
            return
        done, refused = 0, []
        for pk in selected:
            try:
                service(job_id=pk, actor=actor, reason=reason)
                done += 1
            except (TransitionNotAllowed, JobNotFound) as exc:
                refused.append(f"{pk}: {exc}")
        self.stdout.write(f"{done} job(s) {verb} by {actor}")
        for line in refused:
            self.stderr.write(f"not {verb}: {line}")


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
        return True
    except ValueError:
        return False


def _terminal_safe(text: str) -> str:
    """A message as one line a terminal shows as text: a hostile site's control characters (escape
    sequences, line breaks) in an error message are written as escapes, never sent to the terminal."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
