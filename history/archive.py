"""The archive: jobs that left PostgreSQL, one export document per line, in gzip-compressed JSON
Lines files under ``LEITSTAND_ARCHIVE_DIR``::

    jobs/<YYYY-MM-DD>/<type>/<uuid>.jsonl.gz   the documents of jobs of that type that ended that day
    jobs/<YYYY-MM-DD>/MANIFEST.json            every written file of the day: jobs, bytes, sha256
    audit/<YYYY-MM-DD>.jsonl.gz                the audit log's entries of that day, one per line

A file is written to a temporary name, flushed to disk (``fsync``), renamed, its folder flushed, then
read back: every line parses, names the expected job in the expected order, and its SHA-256 is
recorded. Only then may its jobs be purged. The manifest is rewritten from the database after every
file (temporary name and rename), so it always lists exactly the verified files.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import uuid
from datetime import date, datetime, time, timedelta
from datetime import timezone as dt_timezone
from pathlib import Path

from django.db import connection

from history import options
from history.export import export_json, jobs_export
from history.models import ArchivedJob, ArchiveFile
from jobs.leadership import fenced
from jobs.models import database_now

logger = logging.getLogger(__name__)

AUDIT = "audit"  # ArchiveFile.job_type of the audit log's files


class ArchiveUnreadable(Exception):
    """An archived job's file is missing or does not match its recorded checksum."""


def file_path(day: date, job_type: str) -> str:
    return f"jobs/{day.isoformat()}/{job_type}/{uuid.uuid4().hex}.jsonl.gz"


def _absolute(path: str) -> Path:
    return options.current().archive_dir / path


def _fsync_dir(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def file_write(file: ArchiveFile) -> bool:
    """Write (or write again, after a crash or a failure) ``file`` with the documents of its jobs,
    verify it and mark it written; False, with the reason on the file, when that failed."""
    ids = list(file.members.order_by("line").values_list("job_id", flat=True))
    target = _absolute(file.path)
    note = ""
    try:
        documents = jobs_export(ids)
        ids, note = _members_gone_forget(file, ids, documents)
        target.parent.mkdir(parents=True, exist_ok=True)
        _write_lines(target, [export_json(documents[pk], indent=None).encode() for pk in ids])
        digest, size = file_verify(file.path, ids)
    except Exception as failed:  # disk full, permissions, a missing share: purging stops here
        ArchiveFile.objects.filter(pk=file.pk).update(
            state=ArchiveFile.State.FAILED, error=f"{type(failed).__name__}: {failed}"[:2000]
        )
        file.error = str(failed)
        return False
    ArchiveFile.objects.filter(pk=file.pk).update(
        state=ArchiveFile.State.WRITTEN, jobs=len(ids), sha256=digest, bytes=size, error=note, written_at=database_now()
    )
    manifest_write(file.day)
    return True


def _members_gone_forget(file: ArchiveFile, ids: list, documents: dict) -> tuple[list, str]:
    """The members still in the database, renumbered, and a note naming those that are not: a job
    deleted by other means after it was chosen for the file has nothing left to archive, and must
    not stop the archive (and with it every purge) round after round."""
    gone = [pk for pk in ids if pk not in documents]
    if not gone:
        return ids, ""
    kept = [pk for pk in ids if pk in documents]
    ArchivedJob.objects.filter(file=file, job_id__in=gone).delete()
    entries = {entry.job_id: entry for entry in ArchivedJob.objects.filter(file=file)}
    for line, pk in enumerate(kept):
        entries[pk].line = line
    ArchivedJob.objects.bulk_update(entries.values(), ["line"], batch_size=1000)
    note = (
        f"{len(gone)} job{'s' if len(gone) != 1 else ''} left the database before this file was written "
        f"(not archived): {', '.join(str(pk) for pk in gone[:3])}{' …' if len(gone) > 3 else ''}"
    )
    logger.warning("archive file %s: %s", file.path, note)
    return kept, note


def _write_lines(target: Path, lines: list[bytes]) -> None:
    """Write gzip-compressed lines durably: a temporary name, flushed to disk, renamed, folder flushed."""
    temporary = target.with_name(target.name + ".tmp")
    with open(temporary, "wb") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as compressed:
            for line in lines:
                compressed.write(line + b"\n")
        raw.flush()
        os.fsync(raw.fileno())
    os.replace(temporary, target)
    _fsync_dir(target.parent)


def file_verify(path: str, ids: list | None = None) -> tuple[str, int]:
    """Read a file back: every line a document, of the jobs ``ids`` in order; its SHA-256 and size."""
    raw = _absolute(path).read_bytes()
    lines = gzip.decompress(raw).decode().splitlines()
    found = [uuid.UUID(json.loads(line)["job"]["id"]) for line in lines]
    if ids is not None and found != [uuid.UUID(str(pk)) for pk in ids]:
        raise ArchiveUnreadable(f"{path} holds {len(found)} documents, not the {len(ids)} jobs written to it")
    return hashlib.sha256(raw).hexdigest(), len(raw)


def manifest_write(day: date) -> None:
    files = ArchiveFile.objects.filter(
        day=day, state__in=[ArchiveFile.State.WRITTEN, ArchiveFile.State.PURGED]
    ).order_by("id")
    manifest = {
        "day": day.isoformat(),
        "files": [
            {"path": f.path, "job_type": f.job_type, "jobs": f.jobs, "bytes": f.bytes, "sha256": f.sha256}
            for f in files
        ],
    }
    target = _absolute(f"jobs/{day.isoformat()}/MANIFEST.json")
    temporary = target.with_name("MANIFEST.json.tmp")
    temporary.write_text(json.dumps(manifest, indent=2) + "\n")
    with open(temporary, "rb") as written:
        os.fsync(written.fileno())
    os.replace(temporary, target)
    _fsync_dir(target.parent)


def audit_day_archive(day: date) -> ArchiveFile:
    """Write the audit entries of ``day`` (UTC) to ``audit/<day>.jsonl.gz`` and verify it: a written
    file whose rows may now be purged (``job_type`` "audit", ``jobs`` = entries)."""
    from jobs.models import AuditEntry

    path = f"audit/{day.isoformat()}.jsonl.gz"
    file, _ = ArchiveFile.objects.get_or_create(path=path, defaults={"day": day, "job_type": AUDIT})
    start = datetime.combine(day, time.min, tzinfo=dt_timezone.utc)
    entries = list(AuditEntry.objects.filter(at__gte=start, at__lt=start + timedelta(days=1)).order_by("id").values())
    target = _absolute(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _write_lines(target, [export_json(entry, indent=None).encode() for entry in entries])
        raw = target.read_bytes()
        if len(gzip.decompress(raw).splitlines()) != len(entries):
            raise ArchiveUnreadable(f"{path} does not hold the {len(entries)} entries written to it")
    except Exception as failed:
        ArchiveFile.objects.filter(pk=file.pk).update(
            state=ArchiveFile.State.FAILED, error=f"{type(failed).__name__}: {failed}"[:2000]
        )
        file.refresh_from_db()
        return file
    ArchiveFile.objects.filter(pk=file.pk).update(
        state=ArchiveFile.State.WRITTEN,
        jobs=len(entries),
        sha256=hashlib.sha256(raw).hexdigest(),
        bytes=len(raw),
        error="",
        written_at=database_now(),
    )
    file.refresh_from_db()
    return file


MAINTENANCE_SECONDS = 300  # what one maintenance call may take at most (its statement timeout too)


def maintenance_call(statement: str, parameters: list) -> object:
    """One statement as the maintenance role (``LEITSTAND_DATABASE_MAINTENANCE_URL``; without it, this
    process's own connection, which must then be allowed to run it); its single value. Fenced by the
    leader's term: the lock the fence holds on this connection keeps the term current until it ran."""
    url = options.current().maintenance_url
    # The fencing session idles while the maintenance connection works: it must outlive that work,
    # or its lock would go and a new leader could be elected while the old one's purge commits.
    with fenced("retention.maintenance", idle_seconds=MAINTENANCE_SECONDS):
        if not url:
            with connection.cursor() as cursor:
                cursor.execute(statement, parameters)
                return cursor.fetchone()[0]
        import psycopg

        with psycopg.connect(url, application_name="leitstand-retention") as maintenance:  # one transaction
            maintenance.execute("SELECT set_config('statement_timeout', %s, true)", [f"{MAINTENANCE_SECONDS}s"])
            return maintenance.execute(statement, parameters).fetchone()[0]


def jobs_purge(job_ids: list) -> int:
    """Delete archived, ended jobs with everything that refers to them, as the maintenance role
    (``LEITSTAND_DATABASE_MAINTENANCE_URL``; without it, this process's own connection, which must
    then be allowed to run ``leitstand_jobs_purge``). Returns the jobs deleted."""
    if not job_ids:
        return 0
    return maintenance_call("SELECT leitstand_jobs_purge(%s::uuid[])", [[str(pk) for pk in job_ids]])


def archived_document(job_id, *, scan: bool = False) -> tuple[ArchivedJob, dict] | None:
    """An archived job's entry and export document, read from its file (its checksum verified first),
    or None when the job was never archived. A job the archive index no longer holds
    (``archive_index_days``) is found only with ``scan``: by reading the files that left the index,
    newest first. Raises ``ArchiveUnreadable`` if the file is gone or changed."""
    entry = ArchivedJob.objects.select_related("file").filter(job_id=job_id).first()
    if entry is not None:
        return entry, json.loads(_verified_lines(entry.file)[entry.line])
    if not scan:
        return None
    needle = str(job_id).encode()
    for file in ArchiveFile.objects.filter(indexed=False).exclude(job_type=AUDIT).order_by("-day", "-pk").iterator():
        lines = _verified_lines(file)
        for number, line in enumerate(lines):
            if needle in line and (document := json.loads(line))["job"]["id"] == str(job_id):
                job = document["job"]
                entry = ArchivedJob(
                    job_id=job_id,
                    file=file,
                    line=number,
                    type=job["type"],
                    state=job["state"],
                    correlation_id=job["correlation_id"],
                )
                return entry, document
    return None


def _verified_lines(file: ArchiveFile) -> list[bytes]:
    try:
        raw = _absolute(file.path).read_bytes()
    except OSError as failed:
        raise ArchiveUnreadable(f"{file.path}: {failed}") from None
    if hashlib.sha256(raw).hexdigest() != file.sha256:
        raise ArchiveUnreadable(f"{file.path} does not match its recorded SHA-256")
    return gzip.decompress(raw).splitlines()
