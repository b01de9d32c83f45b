"""``manage.py replay``: replay failed and dead jobs, or run a job's input again without touching it.

    replay JOB_ID --reason "…"                                     a new attempt (failed/dead jobs), audited
    replay --filter type=crawl,state=dead,error_class=Timeout [--limit N] --reason "…"
    replay JOB_ID --dry-run                                        the handler with every effect suppressed
    replay JOB_ID --shadow --processing-version analysis@2-tight   another version, compared, stored apart

See docs/paths.md. ``--json`` prints the dry or shadow run as one JSON document.
"""

import getpass
import json

from django.core.management.base import BaseCommand, CommandError

from jobs.audit import audit_record
from jobs.models import Job
from workers.runtime.registry import UnknownJobType
from workers.runtime.replay import ReplayRefused, ShadowDeferred, dry_run, replay, replay_filter, shadow_run


class Command(BaseCommand):
    help = "Replay failed/dead jobs (audited), or dry-run / shadow-run a job's input without touching the job."

    def add_arguments(self, parser):
        parser.add_argument("job_id", nargs="?")
        parser.add_argument(
            "--filter", dest="spec", help="type=…,state=…,error_class=…,pool=…,source=…,correlation_id=…"
        )
        parser.add_argument("--limit", type=int, default=100, help="most jobs a --filter replays (default 100)")
        parser.add_argument("--reason", default="", help="why (required to replay; goes into the audit log)")
        parser.add_argument("--dry-run", action="store_true", help="run the handler with every effect suppressed")
        parser.add_argument("--shadow", action="store_true", help="run another handler version (--processing-version)")
        parser.add_argument("--processing-version", default="")
        parser.add_argument("--json", dest="as_json", action="store_true", help="print the dry or shadow run as JSON")
        parser.add_argument("--actor", default=f"cli:{getpass.getuser()}")

    def handle(
        self, *args, job_id, spec, limit, reason, dry_run, shadow, processing_version, as_json, actor, **options
    ):
        if bool(job_id) == bool(spec):
            raise CommandError("name one JOB_ID or a --filter")
        if (dry_run or shadow) and not job_id:
            raise CommandError("--dry-run and --shadow run one job: name its JOB_ID")
        if dry_run and shadow:
            raise CommandError("choose --dry-run or --shadow")
        if shadow and not processing_version:
            raise CommandError("--shadow needs --processing-version (a version the job type declares)")
        if job_id and not Job.objects.filter(pk=_uuid(job_id)).exists():
            raise CommandError(f"no job {job_id}")
        try:
            if dry_run:
                return self._dry_run(job_id, as_json=as_json)
            if shadow:
                return self._shadow(job_id, processing_version, actor, as_json=as_json)
            if not reason.strip():
                raise CommandError("--reason is required to replay (it goes into the audit log)")
            jobs = [Job.objects.get(pk=job_id)] if job_id else list(replay_filter(spec)[: max(limit, 1)])
        except (ReplayRefused, UnknownJobType) as exc:
            raise CommandError(str(exc)) from None
        except ShadowDeferred as exc:
            raise CommandError(
                f"the shadow run had to wait ({exc}); nothing was recorded: try again in {exc.retry_after:.0f} s"
            ) from None
        if not jobs:
            self.stdout.write("no job matches the filter")
            return
        replayed = refused = 0
        for job in jobs:
            try:
                replay(job.pk, actor=actor, reason=reason)
            except ReplayRefused as exc:
                refused += 1
                self.stderr.write(f"{job.pk}: {exc}")
                if job_id:
                    raise CommandError(str(exc)) from None
                continue
            audit_record(
                actor=actor, action="replay", target=f"job {job.pk}", reason=reason, result=f"{job.state} → planned"
            )
            replayed += 1
            self.stdout.write(f"{job.pk}  {job.type:<12} {job.state} → planned")
        self.stdout.write(f"replayed {replayed} job(s)" + (f", {refused} refused" if refused else ""))

    def _dry_run(self, job_id, *, as_json):
        run = dry_run(job_id)
        if as_json:
            self.stdout.write(json.dumps({"dry_run": run.as_dict()}, indent=2, default=str))
            return
        self.stdout.write(f"dry run of {job_id} ({run.job_type}, {run.processing_version}): nothing was changed")
        self._describe(run)

    def _shadow(self, job_id, version, actor, *, as_json):
        record, run, real = shadow_run(job_id, version, actor=actor)
        audit_record(
            actor=actor,
            action="shadow run",
            target=f"job {job_id}",
            reason=version,
            result="same" if record.same else f"{len(record.differences)} differences",
        )
        if as_json:
            self.stdout.write(
                json.dumps(
                    {"shadow_run": record.pk, "real": real, "shadow": run.as_dict(), "differences": record.differences},
                    indent=2,
                    default=str,
                )
            )
            return
        self.stdout.write(
            f"shadow run {record.pk} of {job_id}: {version} against {record.real_version or 'the job'}; "
            "the job was not changed"
        )
        self._describe(run)
        if record.same:
            self.stdout.write("comparison: the same outcome, result and path as the job")
        for difference in record.differences:
            self.stdout.write(
                f"differs: {difference['field']}: job {difference['real']!r} → shadow {difference['shadow']!r}"
            )

    def _describe(self, run):
        self.stdout.write(
            f"path: {run.path.signature}"
            + (
                ""
                if run.verdict is None
                else " (conforms)"
                if run.verdict.conforms
                else f" (diverges: {run.verdict.divergence})"
            )
        )
        for step in run.steps:
            self.stdout.write(f"  step {step['step']:<12} {step['outcome']:<8} {step['duration_ms']:>8.1f} ms")
        self.stdout.write(f"outcome: {run.outcome}: {run.detail}" + (f" [{run.result_ref}]" if run.result_ref else ""))
        for effect in run.effects:
            self.stdout.write(f"would {effect['would']}: effect {effect['kind']} {effect['key']}")
        for child in run.children:
            self.stdout.write(f"would create: {child['type']} job {child['key']} {json.dumps(child['payload'])}")
        if not run.effects and not run.children:
            self.stdout.write("no effects, no child jobs")


def _uuid(value):
    import uuid

    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise CommandError(f"{value!r} is not a job ID (a UUID)") from None
