"""Flow keys encode '%' (issue 54): a key stored before kept a typed '%' as it was, so the name
``B%C3%BCcher`` and the name ``Bücher`` were one key. Each stored '%' that does not begin an escape
the old encoding wrote (a byte outside printable ASCII, upper-case hex) becomes '%25'; the rest
stays, so every job keeps its key's settings, lane and rest. A name typed before as such an escape
is read as the character it encodes (the collision the change ends)."""

from django.db import migrations

# A '%' the old encoding did not write: not followed by the hex of a byte below 0x20, 0x7F or above.
_REENCODED = r"""regexp_replace(left(regexp_replace({column}, '%(?![01][0-9A-F]|7F|[89A-F][0-9A-F])', '%25', 'g'), 255),
                 '%[0-9A-F]?$', '')"""

_TABLES = (("jobs_flowlane", "key"), ("jobs_flowkey", "key"), ("jobs_flowrest", "key"), ("jobs_job", "flow_key"))


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0039_flow_rests"),
    ]

    operations = [
        migrations.RunSQL(
            [
                f"UPDATE {table} SET {column} = {_REENCODED.format(column=column)} WHERE {column} LIKE '%\\%%'"
                for table, column in _TABLES
            ],
            reverse_sql=migrations.RunSQL.noop,
        )
    ]
