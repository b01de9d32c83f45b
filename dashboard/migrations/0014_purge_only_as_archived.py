"""``leitstand_jobs_purge`` deletes a job only as it was archived: in the state and with the end time
its archive document records. A dead job an operator retried after its document was written, and
that ended again before the purge, has a newer history than the file; it stays (and is archived
again, ``retention._purge_written``) instead of leaving with the older document."""

import importlib

from django.db import migrations

BEFORE = importlib.import_module("dashboard.migrations.0011_partition_functions").JOBS_PURGE

# 0011's function with one more condition on the jobs it selects.
ENDED = "AND j.state IN ('done', 'cancelled', 'dead')"
assert BEFORE.count(ENDED) == 1
JOBS_PURGE = BEFORE.replace(
    ENDED, ENDED + "\n          AND j.state = a.state AND j.finished_at IS NOT DISTINCT FROM a.finished_at"
)


class Migration(migrations.Migration):
    dependencies = [("dashboard", "0013_archive_index_retention")]

    operations = [migrations.RunSQL(JOBS_PURGE, reverse_sql=BEFORE)]
