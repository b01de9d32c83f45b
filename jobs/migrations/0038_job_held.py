"""A job held by an operator (issue 39: suspend and resume one job): the state ``held``, entered from
``planned`` by ``hold`` and left by ``resume`` (or ``cancel``). Only the field's choices change: no
statement runs on the table."""

import django_fsm
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0037_flow_key_rates"),
    ]

    operations = [
        migrations.AlterField(
            model_name="job",
            name="state",
            field=django_fsm.FSMField(
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
                    ("held", "held by an operator"),
                ],
                default="planned",
                max_length=20,
                protected=True,
            ),
        ),
    ]
