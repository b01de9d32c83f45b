"""What the history costs: the database's size, its largest tables, the oldest job still retained and
the archive's last write and purge. Part of the console snapshot (the home's *Storage*) and of
``/metrics``; a few catalog reads and two index-ordered queries."""

from __future__ import annotations

from datetime import datetime

from django.db import connection
from django.db.models import Count, Max, Q, Sum

from history.models import ArchiveFile
from jobs import reads

LARGEST = 8

_TABLES = """
SELECT c.relname, pg_total_relation_size(c.oid), pg_relation_size(c.oid), pg_indexes_size(c.oid),
       greatest(c.reltuples, 0)::bigint, coalesce(s.n_dead_tup, 0)
FROM pg_class AS c
JOIN pg_namespace AS n ON n.oid = c.relnamespace
LEFT JOIN pg_stat_user_tables AS s ON s.relid = c.oid
WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')
ORDER BY pg_total_relation_size(c.oid) DESC
LIMIT %s
"""


def storage_figures(now: datetime) -> dict:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_database_size(current_database())")
        database_bytes = cursor.fetchone()[0]
        cursor.execute(_TABLES, [LARGEST])
        tables = [
            {"name": n, "total_bytes": t, "table_bytes": r, "index_bytes": i, "rows": rows, "dead_rows": dead}
            for n, t, r, i, rows, dead in cursor.fetchall()
        ]
        oldest_job, oldest_ended = reads.row("oldest_job_times")
    archive = ArchiveFile.objects.aggregate(
        last_written=Max("written_at"),
        last_purged=Max("purged_at"),
        purged_jobs=Sum("purged"),
        archive_bytes=Sum("bytes"),
        failed=Count("id", filter=Q(state=ArchiveFile.State.FAILED)),
    )
    return {
        "database_bytes": database_bytes,
        "tables": tables,
        "oldest_job_at": oldest_job.isoformat() if oldest_job else None,
        "oldest_job_age_seconds": (now - oldest_job).total_seconds() if oldest_job else None,
        "oldest_ended_at": oldest_ended.isoformat() if oldest_ended else None,
        "archive": {
            "last_written_at": archive["last_written"].isoformat() if archive["last_written"] else None,
            "last_purged_at": archive["last_purged"].isoformat() if archive["last_purged"] else None,
            "purged_jobs": archive["purged_jobs"] or 0,
            "bytes": archive["archive_bytes"] or 0,
            "failed_files": archive["failed"],
        },
    }
