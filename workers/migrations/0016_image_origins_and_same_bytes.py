"""Where a page showed each image (``Candidate.found_in``, its other sizes in ``variants``), and the
finding that stands for an image whose bytes were analysed under another URL (``same_as``), with the
index that finds such a finding by its content digest, built without blocking writers (issue 53)."""

import django.db.models.deletion
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [
        ("jobs", "0039_flow_rests"),
        ("workers", "0015_adaptive_host_delay"),
    ]

    operations = [
        migrations.AddField(
            model_name="candidate",
            name="found_in",
            field=models.CharField(
                blank=True,
                help_text="Where its page showed it: an attribute, a meta tag, JSON-LD, CSS, …",
                max_length=100,
            ),
        ),
        migrations.AddField(
            model_name="candidate",
            name="same_as",
            field=models.ForeignKey(
                blank=True,
                help_text="The finding of the same bytes under another URL, which stands for this image (not analysed again).",
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="same_bytes",
                to="workers.finding",
            ),
        ),
        migrations.AddField(
            model_name="candidate",
            name="variants",
            field=models.JSONField(blank=True, default=list, help_text="The same image's other sizes on its page."),
        ),
        AddIndexConcurrently(
            model_name="finding",
            index=models.Index(fields=["content_hash", "analysis_version"], name="finding_content_idx"),
        ),
    ]
